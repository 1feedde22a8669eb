"""Local training of a cohort of clients: minibatch SGD from the global model.

``train_cohort`` runs τ local epochs of minibatch SGD on each of K clients and
returns their model deltas. Every backend minimises one local objective: the mean
cross-entropy of a minibatch, plus (l2 / 2)‖w‖² and FedProx's proximal term
(μ / 2)‖w − w_t‖² (Li et al., MLSys 2020), with the step
w ← w − lr (∇CE + l2 w + μ (w − w_t)).

* ``batched``: many clients at once. Ragged clients are padded and masked; clients
  are sorted by their number of steps so that step s only computes the clients
  still running (a prefix), and trained in chunks of that order: on a CPU as many as
  have their parameters in ``CPU_CHUNK_BYTES`` (they stay in the caches from one step
  to the next), on a GPU the whole cohort. Each client's parameters are a slice of one
  (chunk, *shape) tensor per parameter; the step's gradient comes from, first that
  applies (simfl.train.steps): the closed form for :class:`LinearSoftmax`; the
  batched kernels of :mod:`simfl.train.stacked` and one ``torch.autograd.grad`` of the
  sum of the clients' losses, for the modules they know (``nn.Sequential`` of common
  layers, the ConvNets, the GRU); else ``torch.func``'s ``vmap(grad(loss))`` over
  ``functional_call`` (PyTorch's model-ensembling tutorial).
* ``loop``: one client after the other on a copy of the module: its parameters
  loaded from the flat vector once per client, ordinary autograd, the SGD step in
  place, the result read back once. The reference, and what ``auto`` may pick.
* ``auto``: the one predicted faster for the cohort's size class from a few timed
  steps of each (:mod:`simfl.train.choose`).

Sample orders are drawn from one explicit ``torch.Generator`` per client (seeded by
the caller), so every backend sees identical minibatches.

On a GPU the batched backend keeps a round on the device: the cohort's data, the
minibatch plan and the parameters live there, and the only transfer back is the
(K,) training losses. A chunk that does not fit in GPU memory is halved until it
fits. ``precision`` chooses how float32 products are computed on a GPU: exactly
(``fp32``), with TensorFloat-32 (``tf32``) or with a bfloat16 autocast of the forward
pass (``bf16``; the closed-form linear step has no forward pass to cast and is not
used then).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from simfl.data.packed import ClientData, take_rows
from simfl.train.choose import BackendChoice, Prediction
from simfl.train.loop import LoopTrainer
from simfl.train.models import LinearSoftmax, ParamLayout
from simfl.train.plan import (  # noqa: F401 (re-exported: the names callers import)
    Backend,
    BatchPlan,
    Precision,
    TrainHParams,
    plan_batches,
    steps_of,
)
from simfl.train.steps import as_inputs, batched_step


@dataclass(frozen=True)
class CohortResult:
    deltas: torch.Tensor  # (K, P) local model minus global model
    num_examples: np.ndarray  # (K,) local samples
    train_losses: np.ndarray  # (K,) mean minibatch loss over the local steps


def train_cohort(
    model: nn.Module,
    global_params: torch.Tensor,
    clients: ClientData,
    hparams: TrainHParams,
    seeds: Sequence[int],
    choice: BackendChoice | None = None,
) -> CohortResult:
    """Local SGD on each client of ``clients`` from ``global_params`` (P,).

    Args:
        model: defines the architecture; its own parameters are ignored.
        global_params: (P,) flat global model, on the device and dtype to train in.
        clients: the cohort's packed data (K clients), on the same device.
        hparams: local epochs, batch size, learning rate, regularisation, backend.
        seeds: one shuffle seed per client (from the run's named streams).
        choice: ``auto``'s choices so far (a run's, kept over its rounds); None: a
            fresh one, which measures this cohort.
    """
    backend: str = hparams.backend
    with float32_precision(hparams.precision, global_params.device):
        if clients.num_clients == 0 or (backend == "auto" and clients.num_clients == 1):
            backend = "loop"  # nothing to batch, so nothing to measure
        elif backend == "auto" and _closed_form(model, hparams):
            # the linear model's closed-form batched step: 1.8x (100 clients) to 2.9x
            # (1,000) faster than the loop (bench/round_speed.py), so not measured, which
            # keeps its runs byte-identical from machine to machine
            backend = "batched"
        elif backend == "auto":
            backend, chunk = (choice or BackendChoice()).pick(
                clients.num_clients,
                lambda: _predict(model, global_params, clients, hparams, seeds))
            hparams = replace(hparams, backend=backend,  # type: ignore[arg-type]
                              chunk=chunk or clients.num_clients)
        if backend == "loop":
            plan = plan_batches(clients.num_samples, hparams.local_epochs, hparams.batch_size,
                                seeds, clients.starts)
            deltas, train_losses = LoopTrainer(model, global_params, clients, hparams, plan).run()
        else:
            deltas, train_losses = _train_chunked(model, global_params, clients, hparams, seeds)
    return CohortResult(deltas, clients.num_samples.copy(), train_losses)


def _train_chunked(model, global_params, clients, hp, seeds):  # noqa: ANN001, ANN202
    """The batched backend over chunks of ``chunk_size`` clients, taken in order of their
    number of steps (a chunk's clients run about as long) from one plan of the cohort's
    minibatches; on a GPU out-of-memory error the chunk is halved and the chunk tried
    again (clients train independently: the chunks do not change an update)."""
    k_total = clients.num_clients
    plan = plan_batches(clients.num_samples, hp.local_epochs, hp.batch_size, seeds,
                        clients.starts)
    order = np.argsort(-plan.num_steps, kind="stable")
    deltas = global_params.new_empty(k_total, global_params.numel())
    losses = np.empty(k_total)
    chunk, start = chunk_size(hp, global_params, k_total), 0
    while start < k_total:
        idx = order[start : start + chunk]
        try:
            part = _Batched(model, global_params, clients, hp, plan.take(idx)).run()
        except torch.OutOfMemoryError:
            if chunk == 1:
                raise
            chunk = (chunk + 1) // 2
            continue
        deltas.index_copy_(0, torch.from_numpy(idx).to(deltas.device), part[0])
        losses[idx] = part[1]
        start += len(idx)
    return deltas, losses


@contextmanager
def float32_precision(precision: Precision, device: torch.device) -> Iterator[None]:
    """Within the block, float32 matrix products and convolutions on a GPU are computed in
    IEEE float32 (``fp32``; PyTorch's default lets cuDNN use TF32) or TF32 (``tf32``);
    ``bf16`` keeps IEEE float32 outside its autocast regions. No effect on a CPU."""
    if device.type != "cuda":
        yield
        return
    mode = "tf32" if precision == "tf32" else "ieee"
    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv  # type: ignore[attr-defined]
    saved = matmul.fp32_precision, conv.fp32_precision
    matmul.fp32_precision, conv.fp32_precision = mode, mode
    try:
        yield
    finally:
        matmul.fp32_precision, conv.fp32_precision = saved


# Working memory for one chunk's parameters on a CPU: a chunk of clients whose weights fit
# in it stays in the caches from one step to the next (an L3 cache is 8-32 MiB).
CPU_CHUNK_BYTES = 8 * 2**20


def _closed_form(model: nn.Module, hp: TrainHParams) -> bool:
    """Whether the batched step is the linear model's closed form (simfl.train.steps)."""
    return type(model) is LinearSoftmax and hp.precision != "bf16"


def chunk_size(hp: TrainHParams, global_params: torch.Tensor, num_clients: int) -> int:
    """Clients per batched call: ``hp.chunk``; else, on a CPU, as many as have their
    parameters in ``CPU_CHUNK_BYTES`` (at least one); else the whole cohort."""
    if hp.chunk:
        return min(hp.chunk, num_clients)
    if global_params.device.type != "cpu":
        return num_clients
    client_bytes = global_params.numel() * global_params.element_size()
    return max(1, min(num_clients, CPU_CHUNK_BYTES // client_bytes))


def _median_seconds(calls: dict[str, tuple[Callable[..., object], tuple[int, ...]]],
                    device: torch.device, repeats: int = 5) -> dict[str, float]:
    """The median time of each call over ``repeats`` rounds that take the calls in turn (a
    slow spell of a busy machine hits them alike), each timed right after an untimed call
    of itself (its data back in the caches, as in training, where a step follows a step
    of the same clients). The median, as a round's many steps average what a busy
    machine does to each, where a least time would favour the call timed fewest times.
    On a CPU with one torch thread, the thread's CPU seconds (time other processes take
    from it does not count); else wall seconds (a GPU synchronised before and after)."""
    one_thread = device.type == "cpu" and torch.get_num_threads() == 1
    clock = time.thread_time if one_thread else time.perf_counter
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, (run, args) in calls.items():
            run(*args)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = clock()
            run(*args)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times[name].append(clock() - start)
    return {name: float(np.median(t)) for name, t in times.items()}


def _predict(model, global_params, clients, hp, seeds) -> Prediction:  # noqa: ANN001
    """Seconds each candidate would take to train ``clients``, from timed steps on them:
    the loop, and the batched backend in chunks of ``chunk_size`` clients and, on a CPU
    with ``hp.chunk`` unset, of a quarter and of four times as many (at most the cohort):
    the budget counts parameters only, while a convolution's activations may be what
    leaves the caches.

    Batched in chunks of M: a step of M clients and one of a single client give
    t(m) = t(1) + (m − 1)(t(M) − t(1)) / (M − 1), summed over every step of every chunk
    with m clients running. Loop: the mean of (up to) three steps of the client with the
    most, times the clients' total number of steps. On copies: nothing is kept."""
    k_total = clients.num_clients
    plan = plan_batches(clients.num_samples, hp.local_epochs, hp.batch_size, seeds,
                        clients.starts)
    order = np.argsort(-plan.num_steps, kind="stable")
    num_steps = plan.num_steps[order]  # as _train_chunked takes them
    chunk = chunk_size(hp, global_params, k_total)
    calls: dict[str, tuple[Callable[..., object], tuple[int, ...]]] = {}
    chunks: dict[str, int] = {}
    cpu = global_params.device.type == "cpu" and not hp.chunk
    candidates = {max(1, chunk // 4), chunk, min(4 * chunk, k_total)} if cpu else {chunk}
    for candidate in sorted(candidates):
        batched, used = _fitting_chunk(model, global_params, clients, hp, plan, order,
                                       candidate)
        name = "batched@all" if used == k_total else f"batched@{used}"
        chunks[name] = used
        calls[name] = (batched.step, (0, used))
        calls[f"{name}, one client"] = (batched.step, (0, 1))
    n = min(3, int(num_steps[0]))
    calls["loop"] = (LoopTrainer(model, global_params, clients, hp, plan).client,
                     (int(order[0]), n))
    t = _median_seconds(calls, global_params.device)
    seconds = {"loop": t["loop"] / n * num_steps.sum()}
    for name, used in chunks.items():
        t_one = t[f"{name}, one client"]
        per_client = (t[name] - t_one) / max(used - 1, 1)
        longest = num_steps[::used].sum()  # the first (longest) client of each chunk
        seconds[name] = t_one * longest + per_client * (num_steps.sum() - longest)
    return seconds, batched.kernel


def _fitting_chunk(model, global_params, clients, hp, plan, order, chunk):  # noqa: ANN001, ANN202
    """The batched backend on the first ``chunk`` clients of ``order`` after one step of
    them, and the chunk: halved until that step fits in GPU memory."""
    while True:
        try:
            batched = _Batched(model, global_params, clients, hp, plan.take(order[:chunk]))
            batched.step(0, chunk)
            return batched, chunk
        except torch.OutOfMemoryError:
            if chunk == 1:
                raise
            chunk = (chunk + 1) // 2


class _Batched:
    """The batched backend on one chunk of clients: a (K, *shape) tensor per parameter,
    clients sorted by their number of steps (the running ones are a prefix)."""

    def __init__(self, model: nn.Module, global_params: torch.Tensor, clients: ClientData,
                 hp: TrainHParams, plan: BatchPlan) -> None:
        self.sgd_step, self.kernel = batched_step(model, hp)
        self.layout, self.global_params = ParamLayout.of(model), global_params
        self.global_named = self.layout.unflatten(global_params)
        device, self.dtype = global_params.device, global_params.dtype
        self.order = np.argsort(-plan.num_steps, kind="stable")
        self.steps_sorted = plan.num_steps[self.order]
        self.rows = plan.rows[torch.from_numpy(self.order)].to(device)
        self.mask = plan.mask[torch.from_numpy(self.order)].to(device)
        self.x, self.y = clients.x, clients.y.to(device)
        k_total = len(self.order)
        self.params = {n: p.expand(k_total, *p.shape).clone()
                       for n, p in self.global_named.items()}
        self.totals = torch.zeros(k_total, dtype=self.dtype, device=device)

    def step(self, s: int, m: int) -> None:
        """Step ``s`` of the first ``m`` clients (in sorted order), in place."""
        step_rows = self.rows[:m, s]  # (m, B)
        xb = as_inputs(take_rows(self.x, step_rows.flatten()), self.dtype)
        xb = xb.view(*step_rows.shape, *self.x.shape[1:])
        running = {name: p[:m] for name, p in self.params.items()}
        self.totals[:m] += self.sgd_step(running, xb, self.y[step_rows], self.mask[:m, s],
                                         self.global_named)

    def run(self) -> tuple[torch.Tensor, np.ndarray]:
        """Every client's delta (K, P) and mean minibatch loss (K,), in the given order."""
        for s in range(int(self.steps_sorted.max(initial=0))):
            self.step(s, int((self.steps_sorted > s).sum()))
        deltas = self.layout.flatten(self.params, lead_dims=1).sub_(self.global_params)
        losses = self.totals.cpu().numpy() / np.maximum(self.steps_sorted, 1)
        if np.any(self.order != np.arange(len(self.order))):  # back to the given order
            inverse = np.argsort(self.order)
            deltas, losses = deltas[torch.from_numpy(inverse).to(deltas.device)], losses[inverse]
        return deltas, losses
