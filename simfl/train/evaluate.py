"""Per-client loss and error of one model on many clients, in large batched passes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from simfl.data.packed import ClientData
from simfl.train.models import ParamLayout


@dataclass(frozen=True)
class CohortEval:
    losses: np.ndarray  # (K,) mean cross-entropy F_k(w) over the client's samples
    errors: np.ndarray  # (K,) misclassification rate
    num_samples: np.ndarray  # (K,)


@torch.no_grad()
def evaluate_cohort(
    model: nn.Module, params: torch.Tensor, clients: ClientData, batch_size: int = 4096
) -> CohortEval:
    """F_k(params) and the error of every client in ``clients``, batched over samples.

    Samples are processed in chunks of ``batch_size`` regardless of client
    boundaries; per-client sums are accumulated with one ``index_add_`` per chunk.
    """
    layout = ParamLayout.of(model)
    named = layout.unflatten(params)
    device, dtype = params.device, params.dtype
    counts = clients.num_samples
    owner = torch.from_numpy(np.repeat(np.arange(len(counts)), counts)).to(device)
    loss_sum = torch.zeros(len(counts), dtype=torch.float64, device=device)
    wrong_sum = torch.zeros(len(counts), dtype=torch.float64, device=device)
    for start in range(0, len(owner), batch_size):
        stop = min(start + batch_size, len(owner))
        x = clients.x[start:stop].to(device=device, dtype=dtype)
        y = clients.y[start:stop].to(device)
        logits = functional_call(model, named, (x,))
        loss = nn.functional.cross_entropy(logits, y, reduction="none")
        wrong = (logits.argmax(dim=1) != y).to(torch.float64)
        loss_sum.index_add_(0, owner[start:stop], loss.to(torch.float64))
        wrong_sum.index_add_(0, owner[start:stop], wrong)
    denom = np.maximum(counts, 1)
    return CohortEval(loss_sum.cpu().numpy() / denom, wrong_sum.cpu().numpy() / denom, counts)
