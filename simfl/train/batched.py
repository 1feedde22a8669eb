"""Local training of a cohort of clients: minibatch SGD from the global model.

``train_cohort`` runs τ local epochs of minibatch SGD on each of K clients and
returns their model deltas. Every backend minimises one local objective: the mean
cross-entropy of a minibatch, plus (l2 / 2)‖w‖² and FedProx's proximal term
(μ / 2)‖w − w_t‖² (Li et al., MLSys 2020), with the step
w ← w − lr (∇CE + l2 w + μ (w − w_t)).

* ``batched``: many clients at once, in slots: on a CPU as many as have their
  parameters in ``CPU_CHUNK_BYTES`` (they stay in the caches from one step to the
  next), on a GPU the whole cohort. Each slot's parameters are a slice of one
  (slots, *shape) tensor per parameter; clients are taken longest first, and a slot
  whose client has finished writes its delta straight into the round's (K, P) tensor
  and takes the next client (so nearly every step is a step of every slot: 231 steps
  for 100 FEMNIST writers in 10 slots, where fixed chunks of 10 clients sorted by
  length took 247); ragged minibatches are padded and masked. The step's gradient
  comes from, first that applies (simfl.train.steps): the closed form for
  :class:`LinearSoftmax`; a ReLU MLP's backward pass by hand; the batched kernels of
  :mod:`simfl.train.stacked` and one ``torch.autograd.grad`` of the sum of the
  clients' losses, for the modules they know (``nn.Sequential`` of common layers, the
  ConvNets, the GRU); else ``torch.func``'s ``vmap(grad(loss))`` over
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
(K,) training losses. Slots that do not fit in GPU memory are halved until they
fit. ``precision`` chooses how float32 products are computed on a GPU: exactly
(``fp32``), with TensorFloat-32 (``tf32``) or with a bfloat16 autocast of the forward
pass (``bf16``; the closed-form linear step has no forward pass to cast and is not
used then).
"""

from __future__ import annotations

import heapq
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
from simfl.train.updates import FRESH, DeltaBuffers


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
    buffers: DeltaBuffers | None = None,
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
        buffers: where the (K, P) deltas are written (a run's, reused from round to
            round: simfl.train.updates.DeltaBuffers); None: a new tensor.
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
            deltas, train_losses = LoopTrainer(model, global_params, clients, hparams,
                                               plan).run(buffers)
        else:
            deltas, train_losses = _train_batched(model, global_params, clients, hparams, seeds,
                                                  buffers)
    return CohortResult(deltas, clients.num_samples.copy(), train_losses)


def _train_batched(model, global_params, clients, hp, seeds, buffers):  # noqa: ANN001, ANN202
    """The batched backend in ``chunk_size`` slots (:class:`_Batched`); on a GPU
    out-of-memory error the slots are halved and the cohort trained again (clients train
    independently: the slots do not change an update)."""
    plan = plan_batches(clients.num_samples, hp.local_epochs, hp.batch_size, seeds,
                        clients.starts)
    width = chunk_size(hp, global_params, clients.num_clients)
    while True:
        try:
            return _Batched(model, global_params, clients, hp, plan, width).run(buffers)
        except torch.OutOfMemoryError:
            if width == 1:
                raise
            width = (width + 1) // 2


def slot_steps(num_steps: np.ndarray, width: int) -> int:
    """Batched steps of a round of clients of ``num_steps`` steps in ``width`` slots, as
    :class:`_Batched` takes them (longest first, each into the slot that frees first):
    the makespan of list scheduling (Graham, SIAM J. Appl. Math. 1969)."""
    loads = [0] * max(1, min(width, len(num_steps)))
    for steps in np.sort(num_steps)[::-1].tolist():
        heapq.heapreplace(loads, loads[0] + steps)
    return max(loads)


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


# Working memory for the slots' parameters on a CPU: slots whose weights fit in it stay in
# the caches from one step to the next (an L3 cache is 8-32 MiB).
CPU_CHUNK_BYTES = 8 * 2**20


def _closed_form(model: nn.Module, hp: TrainHParams) -> bool:
    """Whether the batched step is the linear model's closed form (simfl.train.steps)."""
    return type(model) is LinearSoftmax and hp.precision != "bf16"


def chunk_size(hp: TrainHParams, global_params: torch.Tensor, num_clients: int) -> int:
    """Slots (clients per batched step): ``hp.chunk``; else, on a CPU, as many as have their
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
    the loop, and the batched backend in ``chunk_size`` slots and, on a CPU with
    ``hp.chunk`` unset, a quarter and four times as many (at most the cohort): the
    budget counts parameters only, while a convolution's activations may be what leaves
    the caches.

    Batched in M slots: a step of M clients and one of a single client give
    t(m) = t(1) + (m − 1)(t(M) − t(1)) / (M − 1); a round of T = :func:`slot_steps`
    steps and N client-steps in all takes T t(1) + (N − T)(t(M) − t(1)) / (M − 1).
    Loop: the mean of (up to) three steps of the client with the most, times N. On
    copies: nothing is kept."""
    k_total = clients.num_clients
    plan = plan_batches(clients.num_samples, hp.local_epochs, hp.batch_size, seeds,
                        clients.starts)
    width = chunk_size(hp, global_params, k_total)
    calls: dict[str, tuple[Callable[..., object], tuple[int, ...]]] = {}
    chunks: dict[str, int] = {}
    cpu = global_params.device.type == "cpu" and not hp.chunk
    candidates = {max(1, width // 4), width, min(4 * width, k_total)} if cpu else {width}
    for candidate in sorted(candidates):
        batched, used = _fitting_slots(model, global_params, clients, hp, plan, candidate)
        name = "batched@all" if used == k_total else f"batched@{used}"
        chunks[name] = used
        calls[name] = (batched.step, (used,))
        calls[f"{name}, one client"] = (batched.step, (1,))
    longest = int(np.argmax(plan.num_steps))
    n = min(3, int(plan.num_steps[longest]))
    calls["loop"] = (LoopTrainer(model, global_params, clients, hp, plan).client, (longest, n))
    t = _median_seconds(calls, global_params.device)
    total = int(plan.num_steps.sum())
    seconds = {"loop": t["loop"] / n * total}
    for name, used in chunks.items():
        t_one = t[f"{name}, one client"]
        per_client = (t[name] - t_one) / max(used - 1, 1)
        steps = slot_steps(plan.num_steps, used)
        seconds[name] = t_one * steps + per_client * (total - steps)
    return seconds, batched.kernel


def _fitting_slots(model, global_params, clients, hp, plan, width):  # noqa: ANN001, ANN202
    """The batched backend in ``width`` slots after one step of them, and the width:
    halved until that step fits in GPU memory."""
    while True:
        try:
            batched = _Batched(model, global_params, clients, hp, plan, width)
            batched.step(batched.running)
            return batched, batched.running
        except torch.OutOfMemoryError:
            if width == 1:
                raise
            width = (width + 1) // 2


class _Batched:
    """The batched backend in slots: a (width, *shape) tensor per parameter, slot i
    training one client at a time. Clients are taken longest first (most steps): a slot
    whose client has finished writes its delta and takes the next client, from the
    global model; once none is left, the last running slot moves into it, so the
    running slots stay a prefix and every step but the last few is a step of ``width``
    clients (:func:`slot_steps`). ``step`` advances nothing: ``run`` does."""

    def __init__(self, model: nn.Module, global_params: torch.Tensor, clients: ClientData,
                 hp: TrainHParams, plan: BatchPlan, width: int) -> None:
        self.sgd_step, self.kernel = batched_step(model, hp)
        self.layout, self.global_params = ParamLayout.of(model), global_params
        self.global_named = self.layout.unflatten(global_params)
        device, self.dtype = global_params.device, global_params.dtype
        self.num_steps = plan.num_steps
        self.queue = np.argsort(-plan.num_steps, kind="stable").tolist()[::-1]  # pop()
        self.rows, self.mask = plan.rows.to(device), plan.mask.to(device)  # (K, S, B)
        self.x, self.y = clients.x, clients.y.to(device)
        self.running = width = max(1, min(width, len(self.queue)))
        self.params = {n: p.expand(width, *p.shape).clone()
                       for n, p in self.global_named.items()}
        self.totals = torch.zeros(width, dtype=self.dtype, device=device)
        self.client = np.array([self.queue.pop() if self.queue else 0 for _ in range(width)])
        self.at = np.zeros(width, dtype=np.int64)  # each slot's next step
        self.client_t = torch.from_numpy(self.client).to(device)  # (the same on the device)
        self.at_t = torch.zeros(width, dtype=torch.int64, device=device)

    def step(self, m: int) -> None:
        """The next step of the clients in the first ``m`` slots, in place."""
        clients, at = self.client_t[:m], self.at_t[:m]
        step_rows = self.rows[clients, at]  # (m, B)
        xb = as_inputs(take_rows(self.x, step_rows.flatten()), self.dtype)
        xb = xb.view(*step_rows.shape, *self.x.shape[1:])
        running = {name: p[:m] for name, p in self.params.items()}
        self.totals[:m] += self.sgd_step(running, xb, self.y[step_rows], self.mask[clients, at],
                                         self.global_named)

    def run(self, buffers: DeltaBuffers | None = None) -> tuple[torch.Tensor, np.ndarray]:
        """Every client's delta (K, P), in ``buffers`` if given, and mean minibatch loss (K,)."""
        k_total = len(self.num_steps)
        deltas = (buffers or FRESH).empty(k_total, self.global_params.numel(),
                                          self.global_params)
        totals = self.totals.new_zeros(k_total)
        if k_total == 0:
            return deltas, np.zeros(0)
        self._settle(deltas, totals)
        while self.running:
            self.step(self.running)
            self.at[:self.running] += 1
            self.at_t[:self.running] += 1
            self._settle(deltas, totals)
        return deltas, totals.cpu().numpy() / np.maximum(self.num_steps, 1)

    def _settle(self, deltas: torch.Tensor, totals: torch.Tensor) -> None:
        """Each running slot whose client has taken its last step, from the last slot
        down: its parameters minus the global ones into its row of ``deltas`` (one
        pass), its loss total into ``totals``; then the next client into the
        slot, or, once none is left, the last running slot (a finished last slot just
        ends: clients that all start at once, longest first, end from the last slot down
        and are never copied)."""
        m = self.running
        if (self.at[:m] < self.num_steps[self.client[:m]]).all():
            return  # the common case, in one numpy pass
        for i in range(m - 1, -1, -1):  # the slots after i run unfinished clients
            changed = False
            while i < self.running and self.at[i] >= self.num_steps[self.client[i]]:
                client = int(self.client[i])
                parts = self.layout.unflatten(deltas[client]).values()  # views of its row
                for (name, p), part in zip(self.params.items(), parts, strict=True):
                    torch.sub(p[i], self.global_named[name], out=part)
                totals[client] = self.totals[i]
                last, changed = self.running - 1, True
                if self.queue:  # the next client (one of no steps is written at once)
                    self.client[i], self.at[i] = self.queue.pop(), 0
                    for name, p in self.params.items():
                        p[i].copy_(self.global_named[name])
                    self.totals[i] = 0
                else:
                    self.running -= 1
                    if i == last:
                        break
                    self.client[i], self.at[i] = self.client[last], self.at[last]
                    for p in self.params.values():
                        p[i].copy_(p[last])
                    self.totals[i] = self.totals[last]
            if changed and i < self.running:
                self.client_t[i], self.at_t[i] = int(self.client[i]), int(self.at[i])
