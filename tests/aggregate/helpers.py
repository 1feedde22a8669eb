"""The three-client round the rules' hand-computed cases share: a global model, three
updates, their sample weights and the losses F_k(w_t) a loss oracle reports."""

from __future__ import annotations

import numpy as np
import torch

from simfl.aggregate import RoundInputs
from simfl.aggregate.base import LossOracle

GLOBAL = torch.tensor([1.0, 1.0], dtype=torch.float64)
DELTAS = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-1.0, -1.0]], dtype=torch.float64)
WEIGHTS = np.array([1.0, 1.0, 2.0])  # α = 1/4, 1/4, 1/2
COHORT = np.array([0, 1, 2])
LOSSES = np.array([1.0, 3.0, 2.0])  # F_k(w_t) of clients 0, 1, 2


def fixed_losses(table: np.ndarray) -> LossOracle:
    """A loss oracle that ignores the model: F_k = table[k]."""
    return lambda params, client_idx: table[client_idx]


def inputs(deltas: torch.Tensor = DELTAS, weights: np.ndarray = WEIGHTS,
           client_idx: np.ndarray = COHORT, table: np.ndarray = LOSSES, lr: float = 0.5,
           seed: int = 0) -> RoundInputs:
    return RoundInputs(deltas, weights, client_idx, lr, fixed_losses(table),
                       np.random.default_rng(seed), table[client_idx])


def close(actual: torch.Tensor, expected: list[float]) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=torch.float64))
