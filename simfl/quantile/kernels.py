"""Weighted quantile and superquantile of a finite weighted sample.

Definitions follow Laguel, Pillutla, Malick, Harchaoui, "Superquantiles at
Work: Machine Learning Applications and Efficient Subgradient Computation"
and the long version of "A Superquantile Approach to Federated Learning with
Heterogeneous Devices" (arXiv:2112.09429, Property 7): for weights α normalised
to sum to one, the (lower) quantile at level p is

    Q_p = min{ u : Σ_{k: u_k ≤ u} α_k ≥ p },

and the superquantile (CVaR) at level θ is the mean of the upper θ-tail,

    S_θ = max{ πᵀu : 0 ≤ π_k ≤ α_k / θ, Σ_k π_k = 1 },

which puts the fractional weight of the boundary value where it belongs.
Δ-FL keeps the clients with F_k ≥ Q_{1-θ}.
"""

from __future__ import annotations

import numpy as np

# Cumulative weights are compared with the level up to this slack, so that, e.g.,
# three weights of 1/3 reach level 2/3 at the second value despite rounding.
LEVEL_SLACK = 1e-12


def _normalised(values: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    if values.ndim != 1 or values.shape != weights.shape or values.size == 0:
        raise ValueError("values and weights must be non-empty 1-d arrays of one length")
    if np.any(weights < 0) or weights.sum() <= 0:
        raise ValueError("weights must be non-negative with a positive sum")
    return values, weights / weights.sum()


def weighted_quantile(values: np.ndarray, weights: np.ndarray, level: float) -> float:
    """The lower weighted quantile Q_level (a value of ``values``); level in [0, 1]."""
    if not 0.0 <= level <= 1.0:
        raise ValueError(f"level must be in [0, 1], got {level}")
    values, weights = _normalised(values, weights)
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    idx = int(np.searchsorted(cumulative, level - LEVEL_SLACK, side="left"))
    return float(values[order][min(idx, len(values) - 1)])


def superquantile(values: np.ndarray, weights: np.ndarray, theta: float) -> float:
    """The superquantile S_θ: the α-weighted mean of the upper θ-tail; θ in (0, 1]."""
    if not 0.0 < theta <= 1.0:
        raise ValueError(f"theta must be in (0, 1], got {theta}")
    values, weights = _normalised(values, weights)
    order = np.argsort(-values, kind="stable")
    caps = weights[order] / theta
    filled_before = np.cumsum(caps) - caps
    pi = np.clip(1.0 - filled_before, 0.0, caps)  # greedy: largest values first
    return float(pi @ values[order])
