"""Local training of a cohort of clients: minibatch SGD from the global model.

``train_cohort`` runs τ local epochs of minibatch SGD on each of K clients and
returns their model deltas. Two backends share one signature and one loss:

* ``batched``: all clients at once with ``torch.func`` (``functional_call`` +
  ``vmap`` + ``grad``, as in PyTorch's model-ensembling tutorial). Ragged
  clients are padded and masked; clients are sorted by their number of steps so
  that step s only computes the clients still running (a prefix). For the
  linear softmax model the step's gradient is written out in closed form with
  batched matrix products (``_linear_sgd_step``): the same arithmetic without
  the transforms' per-call overhead, which dominates so small a model
  (bench/train_cohort.py).
* ``loop``: one client after the other; the reference and debugger.

Sample orders are drawn outside ``vmap`` from one explicit ``torch.Generator``
per client (seeded by the caller), so both backends see identical minibatches.
FedProx's proximal term (Li et al., MLSys 2020) and ℓ2 regularisation are part
of the local objective.

On a GPU the batched backend keeps a round on the device: the cohort's data, the
minibatch plan and the parameters live there, and the only transfer back is the
(K,) training losses. A cohort that does not fit in GPU memory is trained in
chunks (halved until it fits). ``precision`` chooses how float32 products are
computed on a GPU: exactly (``fp32``), with TensorFloat-32 (``tf32``) or with a
bfloat16 autocast of the forward pass (``bf16``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from simfl.data.packed import ClientData, take_rows
from simfl.train.models import CharGRU, LinearSoftmax, ParamLayout

Backend = Literal["auto", "batched", "loop"]
Precision = Literal["fp32", "tf32", "bf16"]


@dataclass(frozen=True)
class TrainHParams:
    local_epochs: int
    batch_size: int
    lr: float
    l2: float = 0.0  # (l2 / 2) ||w||^2
    prox_mu: float = 0.0  # (mu / 2) ||w - w_t||^2
    backend: Backend = "auto"
    precision: Precision = "fp32"
    chunk: int = 0  # clients per batched call; 0: chunk_size decides (halved on GPU out-of-memory)


@dataclass(frozen=True)
class CohortResult:
    deltas: torch.Tensor  # (K, P) local model minus global model
    num_examples: np.ndarray  # (K,) local samples
    train_losses: np.ndarray  # (K,) mean minibatch loss over the local steps


@dataclass(frozen=True)
class BatchPlan:
    """Every client's minibatches: ``rows[k, s, :]`` are rows of the packed cohort data."""

    rows: torch.Tensor  # (K, S, B) int64; padded entries point at row 0
    mask: torch.Tensor  # (K, S, B) bool, True for real samples
    num_steps: np.ndarray  # (K,) steps per client = epochs * ceil(n_k / B)


def plan_batches(
    num_samples: np.ndarray, epochs: int, batch_size: int, seeds: Sequence[int]
) -> BatchPlan:
    """Shuffle each client's samples every epoch (its own generator) and cut minibatches."""
    num_samples = np.asarray(num_samples, dtype=np.int64)
    # A minibatch larger than every client is the whole client: the same steps and means
    # without padding to the requested size.
    batch_size = max(1, min(batch_size, int(num_samples.max(initial=1))))
    steps_per_epoch = -(-num_samples // batch_size)
    num_steps = epochs * steps_per_epoch
    offsets = np.concatenate([[0], np.cumsum(num_samples)])
    k_total, s_max = len(num_samples), int(num_steps.max(initial=0))
    rows = torch.zeros(k_total, s_max * batch_size, dtype=torch.int64)
    mask = torch.zeros(k_total, s_max * batch_size, dtype=torch.bool)
    for k, (n, seed) in enumerate(zip(num_samples.tolist(), seeds, strict=True)):
        generator = torch.Generator().manual_seed(int(seed))
        span = steps_per_epoch[k] * batch_size
        for e in range(epochs):
            start = e * span
            rows[k, start : start + n] = offsets[k] + torch.randperm(n, generator=generator)
            mask[k, start : start + n] = True
    shape = (k_total, s_max, batch_size)
    return BatchPlan(rows.view(shape), mask.view(shape), num_steps)


def _make_loss(model: nn.Module, hp: TrainHParams):  # noqa: ANN202
    """The local objective of one client on one minibatch; params are a name -> tensor dict."""

    autocast = hp.precision == "bf16"

    def loss_fn(params, x, y, mask, global_params):  # noqa: ANN001, ANN202
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = functional_call(model, params, (x,))
        per_sample = nn.functional.cross_entropy(logits.float() if autocast else logits, y,
                                                 reduction="none")
        weights = mask.to(per_sample.dtype)
        data_loss = (per_sample * weights).sum() / weights.sum().clamp(min=1)
        loss = data_loss
        if hp.l2 > 0:
            loss = loss + 0.5 * hp.l2 * sum((p * p).sum() for p in params.values())
        if hp.prox_mu > 0:
            loss = loss + 0.5 * hp.prox_mu * sum(
                ((params[n] - global_params[n]) ** 2).sum() for n in params
            )
        return loss, data_loss

    return loss_fn


def train_cohort(
    model: nn.Module,
    global_params: torch.Tensor,
    clients: ClientData,
    hparams: TrainHParams,
    seeds: Sequence[int],
) -> CohortResult:
    """Local SGD on each client of ``clients`` from ``global_params`` (P,).

    Args:
        model: defines the architecture; its own parameters are ignored.
        global_params: (P,) flat global model, on the device and dtype to train in.
        clients: the cohort's packed data (K clients), on the same device.
        hparams: local epochs, batch size, learning rate, regularisation, backend.
        seeds: one shuffle seed per client (from the run's named streams).
    """
    backend = choose_backend(hparams.backend, model, global_params.device, clients.num_clients)
    with float32_precision(hparams.precision, global_params.device):
        if backend == "loop":
            plan = plan_batches(clients.num_samples, hparams.local_epochs, hparams.batch_size,
                                seeds)
            deltas, train_losses = _train_loop(model, global_params, clients, hparams, plan)
        else:
            deltas, train_losses = _train_chunked(model, global_params, clients, hparams, seeds)
    return CohortResult(deltas, clients.num_samples.copy(), train_losses)


def _train_chunked(model, global_params, clients, hp, seeds):  # noqa: ANN001, ANN202
    """The batched backend over chunks of ``chunk_size`` clients; on a GPU out-of-memory
    error the chunk is halved and the cohort started again."""
    k_total = clients.num_clients
    chunk = chunk_size(hp, model, global_params.device, k_total)
    while True:
        try:
            parts = []
            for start in range(0, k_total, chunk):
                idx = np.arange(start, min(start + chunk, k_total))
                part = clients.subset(idx) if chunk < k_total else clients
                plan = plan_batches(part.num_samples, hp.local_epochs, hp.batch_size,
                                    [seeds[i] for i in idx])
                parts.append(_train_batched(model, global_params, part, hp, plan))
            break
        except torch.OutOfMemoryError:
            if chunk == 1:
                raise
            parts.clear()
            chunk = (chunk + 1) // 2
    deltas = torch.cat([d for d, _ in parts]) if len(parts) > 1 else parts[0][0]
    return deltas, np.concatenate([losses for _, losses in parts])


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


# Clients per batched call for a convolutional model on a CPU when ``chunk`` is 0: the
# fastest of 10 / 20 / 50 / all at both 1 and 2 threads (bench/train_cohort.py
# --convnet-grid, 100 FEMNIST clients, quiet 2-core machine, 2026-11-25: 28.0 / 16.8 s a
# round against the loop's 35.0 / 20.1 s and the whole cohort's 30.6 / 19.3 s).
CPU_CONV_CHUNK = 20


def choose_backend(backend: Backend, model: nn.Module, device: torch.device,
                   num_clients: int = 2) -> str:
    """``auto``: batched for two clients or more, except the GRU on a CPU.

    On a CPU, ``vmap`` turns each convolution into a grouped convolution; in chunks
    of ``CPU_CONV_CHUNK`` clients that beats the per-client loop (above), while the
    GRU's vmapped steps were slower than the loop (27.6 vs 22.3 s for 10 Shakespeare
    roles, bench/train_gru.py). On a GPU the per-client loop is bound by kernel launches.
    """
    if backend != "auto":
        return backend
    if num_clients < 2:
        return "loop"
    gru = any(isinstance(m, CharGRU) for m in model.modules())
    return "loop" if device.type == "cpu" and gru else "batched"


def chunk_size(hp: TrainHParams, model: nn.Module, device: torch.device, num_clients: int
               ) -> int:
    """Clients per batched call: ``hp.chunk``, else ``CPU_CONV_CHUNK`` for a convolutional
    model on a CPU, else the whole cohort."""
    if hp.chunk:
        return min(hp.chunk, num_clients)
    conv = any(isinstance(m, nn.Conv2d) for m in model.modules())
    return min(CPU_CONV_CHUNK, num_clients) if device.type == "cpu" and conv else num_clients


def _train_loop(model, global_params, clients, hp, plan):  # noqa: ANN001, ANN202
    layout = ParamLayout.of(model)
    loss_fn = _make_loss(model, hp)
    global_named = layout.unflatten(global_params)
    x, y = clients.x, clients.y.to(global_params.device)
    batch_counts = plan.mask.sum(dim=2).numpy()  # (K, S) real samples per minibatch
    deltas = torch.empty(len(plan.num_steps), layout.numel, dtype=global_params.dtype,
                         device=global_params.device)
    train_losses = np.zeros(len(plan.num_steps))
    for k, steps in enumerate(plan.num_steps.tolist()):
        flat = global_params.clone().requires_grad_(True)
        total = 0.0
        for s in range(steps):
            rows = plan.rows[k, s, : batch_counts[k, s]].to(global_params.device)
            ones = torch.ones(len(rows), dtype=torch.bool, device=global_params.device)
            loss, data_loss = loss_fn(
                layout.unflatten(flat), x[rows].to(flat.dtype), y[rows], ones, global_named
            )
            (g,) = torch.autograd.grad(loss, flat)
            with torch.no_grad():
                flat -= hp.lr * g
            total += data_loss.item()
        deltas[k] = flat.detach() - global_params
        train_losses[k] = total / max(steps, 1)
    return deltas, train_losses


def _autograd_sgd_step(model: nn.Module, hp: TrainHParams):  # noqa: ANN202
    """One SGD step of every running client, in place: ``vmap(grad(loss))``."""
    step_grad = vmap(grad(_make_loss(model, hp), has_aux=True), in_dims=(0, 0, 0, 0, None))

    def step(params, x, y, mask, global_params):  # noqa: ANN001, ANN202
        g, data_loss = step_grad(params, x, y, mask, global_params)
        for name, p in params.items():
            p.sub_(hp.lr * g[name])
        return data_loss

    return step


def _train_batched(model, global_params, clients, hp, plan):  # noqa: ANN001, ANN202
    layout = ParamLayout.of(model)
    if isinstance(model, LinearSoftmax) and hp.precision != "bf16":
        sgd_step = _linear_sgd_step(hp)
    else:
        sgd_step = _autograd_sgd_step(model, hp)
    global_named = layout.unflatten(global_params)
    device, dtype = global_params.device, global_params.dtype
    order = np.argsort(-plan.num_steps, kind="stable")  # running clients form a prefix
    steps_sorted = plan.num_steps[order]
    rows = plan.rows[torch.from_numpy(order)].to(device)
    mask = plan.mask[torch.from_numpy(order)].to(device)
    x, y = clients.x, clients.y.to(device)
    flat = global_params.expand(len(order), -1).clone()  # (K, P)
    params = layout.unflatten(flat)  # (K, *shape) views into flat
    totals = torch.zeros(len(order), dtype=dtype, device=device)
    for s in range(int(steps_sorted.max(initial=0))):
        m = int((steps_sorted > s).sum())
        step_rows = rows[:m, s]  # (m, B)
        xb = take_rows(x, step_rows.flatten()).to(dtype).view(*step_rows.shape, *x.shape[1:])
        running = {name: p[:m] for name, p in params.items()}
        totals[:m] += sgd_step(running, xb, y[step_rows], mask[:m, s], global_named)
    inverse = torch.from_numpy(np.argsort(order)).to(device)
    deltas = (flat - global_params)[inverse]
    train_losses = totals[inverse].cpu().numpy() / np.maximum(plan.num_steps, 1)
    return deltas, train_losses


def _linear_sgd_step(hp: TrainHParams):  # noqa: ANN202
    """One SGD step of every running client for :class:`LinearSoftmax`, in place, with the
    gradient of ``_make_loss`` written out by hand instead of ``vmap(grad(loss))``.

    With logits z = x Wᵀ + b, masked weights ω_i = mask_i / max(Σ mask, 1) and
    G = ω ⊙ (softmax(z) − onehot(y)), the data loss's gradient is (Gᵀx, Σ_i G_i); ℓ2
    adds l2·W and FedProx μ(W − W_t); a model without a bias has z = x Wᵀ and only W.
    Tested equal to the autograd loop in float64 (tests/train/test_cohort.py).
    """
    decay = hp.l2 + hp.prox_mu

    def step(params, x, y, mask, global_params):  # noqa: ANN001, ANN202
        weight, bias = params["fc.weight"], params.get("fc.bias")  # (m, C, D), (m, C)
        x = x.flatten(start_dim=2)  # (m, B, D)
        logits = (torch.bmm(x, weight.transpose(1, 2)) if bias is None  # (m, B, C)
                  else torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2)))
        log_p = torch.log_softmax(logits, dim=2)
        w = mask.to(x.dtype)
        w = w / w.sum(dim=1, keepdim=True).clamp(min=1)  # (m, B)
        nll = -log_p.gather(2, y.unsqueeze(2)).squeeze(2)
        g = log_p.exp().scatter_add_(2, y.unsqueeze(2), -torch.ones_like(nll).unsqueeze(2))
        g.mul_(w.unsqueeze(2))  # (m, B, C): d(data loss) / d(logits)
        # W ← (1 − lr·decay) W − lr Gᵀx + lr μ W_t, the product fused with the decay
        weight.baddbmm_(g.transpose(1, 2), x, beta=1 - hp.lr * decay, alpha=-hp.lr)
        if hp.prox_mu > 0:
            weight.add_(global_params["fc.weight"], alpha=hp.lr * hp.prox_mu)
        if bias is not None:
            bias.mul_(1 - hp.lr * decay).sub_(g.sum(dim=1), alpha=hp.lr)
            if hp.prox_mu > 0:
                bias.add_(global_params["fc.bias"], alpha=hp.lr * hp.prox_mu)
        return (nll * w).sum(dim=1)

    return step
