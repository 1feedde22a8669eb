"""Per-client loss and error of one model on many clients, in large batched passes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from simfl.data.packed import Clients
from simfl.train.models import ParamLayout


@dataclass(frozen=True)
class CohortEval:
    losses: np.ndarray  # (K,) mean cross-entropy F_k(w) over the client's samples
    errors: np.ndarray  # (K,) misclassification rate
    num_samples: np.ndarray  # (K,)


@torch.no_grad()
def evaluate_cohort(
    model: nn.Module, params: torch.Tensor, clients: Clients, batch_size: int = 4096,
    errors: bool = True, class_major: bool = False,
) -> CohortEval:
    """F_k(params) and the error of every client in ``clients``, batched over samples.

    Samples are processed in batches of ``batch_size`` regardless of client
    boundaries; per-client sums are accumulated with one ``index_add_`` per batch.
    Clients made on demand come a chunk at a time (``Clients.chunks``), and a batch
    may span two chunks: the batches, and so the numbers to the bit, are those of one
    pass over the samples held together, in the memory of a chunk. ``errors=False``:
    the losses alone (the errors NaN), a fifth faster for the linear model (the argmax
    and its sums skipped), the same losses. ``class_major``: the losses' log-softmax over
    a (C, B) copy of the logits, along its first dimension, instead of
    ``cross_entropy`` over (B, C): the same function, the same losses within a few ulps
    (not to the bit: a run with it is another run's numbers). On a CPU torch's
    log-softmax over a last dimension shorter than a vector register (10 classes under
    AVX-512) is about 5x slower than over a first dimension, vectorised across samples.
    """
    layout = ParamLayout.of(model)
    named = layout.unflatten(params)
    device, dtype = params.device, params.dtype
    counts = clients.num_samples
    loss_sum = torch.zeros(len(counts), dtype=torch.float64, device=device)
    wrong_sum = torch.zeros(len(counts), dtype=torch.float64, device=device)
    for x, y, owner in _batches(clients, batch_size):
        logits = functional_call(model, named, (x.to(device=device, dtype=dtype),))
        y, owner = y.to(device), owner.to(device)
        loss = _losses(logits, y, class_major)
        loss_sum.index_add_(0, owner, loss.to(torch.float64))
        if errors:
            wrong_sum.index_add_(0, owner, (logits.argmax(dim=1) != y).to(torch.float64))
    denom = np.maximum(counts, 1)
    error = wrong_sum.cpu().numpy() / denom if errors else np.full(len(counts), np.nan)
    return CohortEval(loss_sum.cpu().numpy() / denom, error, counts)


def _losses(logits: torch.Tensor, y: torch.Tensor, class_major: bool) -> torch.Tensor:
    """(B,) cross-entropy of (B, C) logits against y (evaluate_cohort's ``class_major``)."""
    if not class_major:
        return nn.functional.cross_entropy(logits, y, reduction="none")
    log_probs = torch.log_softmax(logits.t().contiguous(), dim=0)  # (C, B)
    return -log_probs.gather(0, y[None])[0]


Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # x (B, ...), y (B,), owner (B,)


def _batches(clients: Clients, batch_size: int) -> Iterator[Batch]:
    """Consecutive ``batch_size`` samples of ``clients`` (the last batch shorter) with each
    sample's client index, over their chunks; a batch that spans chunks is joined."""
    held: list[Batch] = []  # the start of a batch, from the chunks before
    num_held = 0
    first = 0  # index of the chunk's first client
    for chunk in clients.chunks():
        owner = torch.from_numpy(first + np.repeat(np.arange(chunk.num_clients),
                                                   chunk.num_samples))
        first += chunk.num_clients
        size = len(owner)
        start = min(batch_size - num_held, size) if held else 0  # the held batch's rest
        if held:
            held.append((chunk.x[:start], chunk.y[:start], owner[:start]))
            num_held += start
            if num_held < batch_size:
                continue
            yield _join(held)
            held, num_held = [], 0
        for begin in range(start, size, batch_size):
            if begin + batch_size > size:
                held, num_held = [(chunk.x[begin:], chunk.y[begin:], owner[begin:])], size - begin
                break
            yield chunk.x[begin:begin + batch_size], chunk.y[begin:begin + batch_size], \
                owner[begin:begin + batch_size]
    if held:
        yield _join(held)


def _join(parts: list[Batch]) -> Batch:
    if len(parts) == 1:
        return parts[0]
    x, y, owner = zip(*parts, strict=True)
    return torch.cat(x), torch.cat(y), torch.cat(owner)
