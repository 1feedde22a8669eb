"""Projected ascent of mixture weights λ on the probability simplex (AFL, DRFA).

Π(v) = argmin{‖x − v‖² : x ≥ 0, Σ_i x_i = 1} = max(v − τ, 0), where τ makes the
result sum to one. τ is found by sorting (Held, Wolfe, Crowder 1974; Duchi,
Shalev-Shwartz, Singer, Chandra, "Efficient Projections onto the ℓ1-Ball for
Learning in High Dimensions", ICML 2008, Figure 1): with u = v sorted in
decreasing order, ρ = max{j : u_j − (Σ_{i≤j} u_i − 1) / j > 0} and
τ = (Σ_{i≤ρ} u_i − 1) / ρ. O(N log N).

λ ascends along the clients' losses: the gradient of Σ_i λ_i F_i(w) in λ is the
loss vector (F_1(w), ..., F_N(w)), of which the server sees m entries, for m
clients drawn uniformly among the N; (N/m) F_i on them and 0 elsewhere is an
unbiased estimate (DRFA's v, Deng, Kamani, Mahdavi, NeurIPS 2020, Algorithm 1).
"""

from __future__ import annotations

import numpy as np


def project_simplex(v: np.ndarray, total: float = 1.0) -> np.ndarray:
    """The point of the simplex {x ≥ 0, Σ x = total} closest to ``v`` (N,) in Euclidean norm
    (the probability simplex by default; DRFL's ℓ1-ball projection uses other totals)."""
    v = np.asarray(v, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"expected a non-empty vector, got shape {v.shape}")
    u = np.sort(v)[::-1]
    cumulative = np.cumsum(u) - total
    j = np.arange(1, v.size + 1)
    rho = int(np.flatnonzero(u - cumulative / j > 0)[-1]) + 1  # j = 1 always qualifies
    tau = cumulative[rho - 1] / rho
    return np.maximum(v - tau, 0.0)


def ascend_mixture(lam: np.ndarray, client_idx: np.ndarray, losses: np.ndarray,
                   step: float) -> np.ndarray:
    """Π(λ + step · v), v_i = (N/m) F_i for the m distinct clients given, 0 elsewhere."""
    v = np.zeros_like(lam, dtype=np.float64)
    if len(client_idx):
        v[client_idx] = lam.size / len(client_idx) * np.asarray(losses, dtype=np.float64)
    return project_simplex(lam + step * v)


def sample_shares(num_samples: np.ndarray) -> np.ndarray:
    """λ_0 = α: each training client's share of the training samples (N,)."""
    num_samples = np.asarray(num_samples, dtype=np.float64)
    return num_samples / num_samples.sum()
