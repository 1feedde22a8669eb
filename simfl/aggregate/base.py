"""What every aggregation rule provides to the server.

A rule is a small frozen object built by a factory closing over its
hyperparameters (as optax and fedjax do). Per round the server

1. asks ``select(losses, weights)`` which cohort clients should train, when the
   rule ``needs_losses`` (clients report F_k(w_t) first); otherwise all train;
2. combines the updates that arrived with ``combine(global_params, deltas, weights)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Selection:
    keep: np.ndarray  # (K,) bool: clients that go on to train
    threshold: float | None = None  # the loss threshold used, if any


SelectFn = Callable[[np.ndarray, np.ndarray], Selection]
CombineFn = Callable[[torch.Tensor, torch.Tensor, np.ndarray], torch.Tensor]


@dataclass(frozen=True)
class Aggregator:
    name: str
    needs_losses: bool
    select: SelectFn
    combine: CombineFn


def keep_all(losses: np.ndarray, weights: np.ndarray) -> Selection:
    return Selection(keep=np.ones(len(weights), dtype=bool))


def weighted_mean_update(
    global_params: torch.Tensor, deltas: torch.Tensor, weights: np.ndarray
) -> torch.Tensor:
    """w_t + Σ_k α_k Δ_k / Σ_k α_k over the given (K, P) deltas; w_t if K = 0."""
    if len(weights) == 0:
        return global_params.clone()
    alpha = torch.as_tensor(weights / weights.sum(), dtype=deltas.dtype, device=deltas.device)
    return global_params + alpha @ deltas
