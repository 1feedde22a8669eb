"""Euclidean projections onto ℓp balls (p = 1, 2, ∞), and the prox of a norm.

The ℓp-ball projections are those of DRFL (Bai, Wong, Qiao, Ho 2025, "Distributionally
Robust Federated Learning: An ADMM Algorithm", Appendix E); the ℓ1-ball one goes through
the simplex projection of :mod:`simfl.aggregate.simplex` (Duchi et al., ICML 2008).
"""

from __future__ import annotations

import math

import numpy as np

from simfl.aggregate.simplex import project_simplex

P_VALUES = (1.0, 2.0, math.inf)


def dual_exponent(p: float) -> float:
    """p* with 1/p + 1/p* = 1, for p in {1, 2, inf}."""
    return {1.0: math.inf, 2.0: 2.0, math.inf: 1.0}[_check_p(p)]


def _check_p(p: float) -> float:
    if float(p) not in P_VALUES:
        raise ValueError(f"p must be 1, 2 or inf, not {p!r}")
    return float(p)


def project_lp_ball(v: np.ndarray, radius: float, p: float) -> np.ndarray:
    """argmin_{||x||_p <= radius} ||x - v||_2 for p in {1, 2, inf}."""
    p = _check_p(p)
    if radius < 0:
        raise ValueError(f"radius must be >= 0, not {radius}")
    if p == math.inf:
        return np.clip(v, -radius, radius)
    norm = float(np.linalg.norm(v, ord=p))
    if norm <= radius:
        return v.copy()
    if p == 2.0:
        return v * (radius / norm)
    if radius == 0:
        return np.zeros_like(v)
    return np.sign(v) * project_simplex(np.abs(v), radius)


def prox_norm(v: np.ndarray, step: float, p_star: float) -> np.ndarray:
    """prox of step·||·||_{p*} at v: v minus the projection onto the dual-norm ball of radius
    ``step`` (Moreau decomposition; the dual of ℓ_{p*} is ℓ_p)."""
    return v - project_lp_ball(v, step, dual_exponent(p_star))
