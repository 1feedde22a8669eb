"""ℓp-ball and simplex projections against hand-computed cases and a convex solver."""

from __future__ import annotations

import math

import cvxpy as cp
import numpy as np
import pytest

from simfl.aggregate.simplex import project_simplex
from simfl.algorithms.drfl.projections import dual_exponent, project_lp_ball, prox_norm


def test_hand_computed_projections() -> None:
    v = np.array([3.0, 1.0, -0.5])
    np.testing.assert_allclose(project_lp_ball(v, 2.0, 1.0), [2.0, 0.0, 0.0])
    np.testing.assert_allclose(project_lp_ball(v, 1.0, math.inf), [1.0, 1.0, -0.5])
    np.testing.assert_allclose(project_lp_ball(np.array([3.0, 4.0]), 1.0, 2.0), [0.6, 0.8])
    np.testing.assert_allclose(project_simplex(np.array([0.5, 0.5, 2.0])), [0.0, 0.0, 1.0])
    np.testing.assert_allclose(project_simplex(np.array([1.0, 0.0])), [1.0, 0.0])
    np.testing.assert_allclose(project_lp_ball(v, 10.0, 1.0), v)  # inside: unchanged


@pytest.mark.parametrize("p", [1.0, 2.0, math.inf])
def test_projection_matches_solver(p: float) -> None:
    rng = np.random.default_rng(int(p) if math.isfinite(p) else 9)
    for _ in range(5):
        v, radius = rng.normal(size=6) * 2, float(rng.uniform(0.1, 2.0))
        x = cp.Variable(6)
        cp.Problem(cp.Minimize(cp.sum_squares(x - v)), [cp.norm(x, p) <= radius]).solve()
        np.testing.assert_allclose(project_lp_ball(v, radius, p), x.value, atol=1e-6)


def test_simplex_matches_solver() -> None:
    rng = np.random.default_rng(3)
    v = rng.normal(size=7)
    q = cp.Variable(7)
    cp.Problem(cp.Minimize(cp.sum_squares(q - v)), [q >= 0, cp.sum(q) == 1]).solve()
    np.testing.assert_allclose(project_simplex(v), q.value, atol=1e-6)


@pytest.mark.parametrize("p_star", [1.0, 2.0, math.inf])
def test_prox_of_norm_matches_solver(p_star: float) -> None:
    v, step = np.array([2.0, -0.3, 0.7, -1.5]), 0.8
    x = cp.Variable(4)
    cp.Problem(cp.Minimize(step * cp.norm(x, p_star) + 0.5 * cp.sum_squares(x - v))).solve()
    np.testing.assert_allclose(prox_norm(v, step, p_star), x.value, atol=1e-6)


def test_dual_exponents_and_bad_p() -> None:
    assert [dual_exponent(p) for p in (1.0, 2.0, math.inf)] == [math.inf, 2.0, 1.0]
    with pytest.raises(ValueError, match="p must be"):
        project_lp_ball(np.ones(2), 1.0, 3.0)
