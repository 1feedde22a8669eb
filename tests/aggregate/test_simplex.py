"""The simplex kernel of AFL and DRFA: the Euclidean projection onto the simplex and
the projected ascent step on the mixture λ."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from simfl.aggregate.simplex import ascend_mixture, project_simplex


def brute_force_projection(v: np.ndarray) -> np.ndarray:
    """Over every support S: the projection onto {x_S = v_S − τ, Σ x = 1} if it is ≥ 0;
    the feasible candidate nearest to v is the projection (the optimum has some support)."""
    best, best_dist = None, math.inf
    for size in range(1, len(v) + 1):
        for support in itertools.combinations(range(len(v)), size):
            s = list(support)
            x = np.zeros_like(v)
            x[s] = v[s] - (v[s].sum() - 1.0) / size
            if (x >= -1e-12).all() and (d := float(((x - v) ** 2).sum())) < best_dist:
                best, best_dist = x, d
    assert best is not None
    return best


@pytest.mark.parametrize("v, expected", [
    ([0.5, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]),  # τ = 1/6
    ([2.0, 0.0, 0.0], [1.0, 0.0, 0.0]),  # τ = 1
    ([1.0, 0.5, 0.0], [0.75, 0.25, 0.0]),  # support {0, 1}: τ = (1.5 − 1) / 2 = 0.25
    ([-1.0, -2.0, -4.0], [1.0, 0.0, 0.0]),  # τ = −2
    ([0.2, 0.3, 0.5], [0.2, 0.3, 0.5]),  # already on the simplex
])
def test_projection_known_cases(v: list[float], expected: list[float]) -> None:
    np.testing.assert_allclose(project_simplex(np.array(v)), expected, atol=1e-12)


def test_projection_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        v = rng.normal(scale=rng.choice([0.1, 1.0, 5.0]), size=rng.integers(1, 7))
        x = project_simplex(v)
        np.testing.assert_allclose(x, brute_force_projection(v), atol=1e-10)
        assert (x >= 0).all() and x.sum() == pytest.approx(1.0)
        np.testing.assert_allclose(project_simplex(x), x, atol=1e-12)  # idempotent


def test_ascend_mixture_hand_case() -> None:
    # N = 4, m = 2 clients {0, 2} with losses 1, 3: v = (4/2)(1, 0, 3, 0) = (2, 0, 6, 0).
    # λ + 0.1 v = (0.45, 0.25, 0.85, 0.25), sum 1.8; every entry stays: τ = 0.8 / 4 = 0.2.
    lam = np.full(4, 0.25)
    new = ascend_mixture(lam, np.array([0, 2]), np.array([1.0, 3.0]), step=0.1)
    np.testing.assert_allclose(new, [0.25, 0.05, 0.65, 0.05])
    np.testing.assert_array_equal(lam, np.full(4, 0.25))  # the input is not mutated
