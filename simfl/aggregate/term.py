"""TERM: tilted empirical risk minimisation across clients.

Li, Beirami, Sanjabi, Smith, "Tilted Empirical Risk Minimization", ICLR 2021
(§2, and its federated form with tilting at the client level). The tilted
objective (1/t) log Σ_k α_k exp(t F_k(w)) has gradient Σ_k π_k ∇F_k(w) with
π_k ∝ α_k exp(t F_k(w)); the federated form weights the cohort's updates by
π_k ∝ α_k exp(t F_k(w_t)), from the clients' loss reports under the incoming model:

    w_{t+1} = w_t + Σ_k π_k (w̄_k − w_t).

t > 0 up-weights the clients with large losses (fairness, towards the worst
client as t → ∞), t < 0 down-weights them (robustness to outliers); t → 0 is
FedAvg. exp is stabilised by subtracting max_k t F_k, which cancels in π.
"""

from __future__ import annotations

import numpy as np
import torch

from simfl.aggregate.base import (
    Aggregator,
    Combined,
    RoundInputs,
    State,
    keep_all,
    need,
    weighted_mean_update,
)


def tilted_weights(losses: np.ndarray, alpha: np.ndarray, tilt: float) -> np.ndarray:
    """(K,) α_k exp(t F_k − max_j t F_j), proportional to π_k (t = 0: α exactly)."""
    z = tilt * np.asarray(losses, dtype=np.float64)
    return np.asarray(alpha, dtype=np.float64) * np.exp(z - z.max())


def term(tilt: float) -> Aggregator:
    if not np.isfinite(tilt):
        raise ValueError(f"tilt must be finite, got {tilt}")

    def combine(global_params: torch.Tensor, inputs: RoundInputs, state: State) -> Combined:
        losses = need(inputs.losses, "losses", "term")
        tilted = tilted_weights(losses, inputs.weights, tilt)
        return Combined(weighted_mean_update(global_params, inputs.deltas, tilted, inputs.scales),
                        state)

    return Aggregator("term", needs_losses=True, select=keep_all, combine=combine)
