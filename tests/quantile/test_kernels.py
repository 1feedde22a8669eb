"""Quantile and superquantile kernels against hand-computed values and brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from simfl.quantile import superquantile, weighted_quantile


def brute_quantile(values: np.ndarray, weights: np.ndarray, level: float) -> float:
    """min{u in values : weight of {v <= u} >= level}, by checking every candidate."""
    alpha = weights / weights.sum()
    candidates = [u for u in values if alpha[values <= u].sum() >= level - 1e-12]
    return float(min(candidates))


def lp_superquantile(values: np.ndarray, weights: np.ndarray, theta: float) -> float:
    """max{π·u : 0 <= π_k <= α_k/θ, Σπ = 1} solved as a linear program."""
    alpha = weights / weights.sum()
    res = linprog(-values, A_eq=np.ones((1, len(values))), b_eq=[1.0],
                  bounds=list(zip(np.zeros_like(alpha), alpha / theta, strict=True)),
                  method="highs")
    return float(-res.fun)


def test_hand_computed_three_clients() -> None:
    values, weights = np.array([3.0, 1.0, 2.0]), np.array([1.0, 1.0, 2.0])  # α = .25 .25 .5
    assert weighted_quantile(values, weights, 0.0) == 1.0
    assert weighted_quantile(values, weights, 0.25) == 1.0
    assert weighted_quantile(values, weights, 0.5) == 2.0
    assert weighted_quantile(values, weights, 0.75) == 2.0
    assert weighted_quantile(values, weights, 0.8) == 3.0
    # θ = 0.5: the tail of weight 0.5 is {3 (0.25), half of 2's weight (0.25)} -> mean 2.5.
    assert superquantile(values, weights, 0.5) == pytest.approx(2.5)
    assert superquantile(values, weights, 1.0) == pytest.approx(np.average(values, weights=weights))
    # θ = 0.1 < the largest value's weight: the tail is that value alone.
    assert superquantile(values, weights, 0.1) == pytest.approx(3.0)


def test_equal_thirds_reach_their_level_despite_rounding() -> None:
    assert weighted_quantile(np.array([5.0, 7.0, 9.0]), np.ones(3), 2 / 3) == 7.0


samples = st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 6).map(float), min_size=n, max_size=n),  # ties on purpose
    st.lists(st.floats(0.01, 10.0), min_size=n, max_size=n),
))


@settings(max_examples=200, deadline=None)
@given(samples, st.floats(0.0, 1.0))
def test_quantile_matches_brute_force(sample: tuple[list[float], list[float]],
                                      level: float) -> None:
    values, weights = np.array(sample[0]), np.array(sample[1])
    assert weighted_quantile(values, weights, level) == brute_quantile(values, weights, level)


@settings(max_examples=200, deadline=None)
@given(samples, st.floats(0.01, 1.0))
def test_superquantile_matches_linear_program(sample: tuple[list[float], list[float]],
                                              theta: float) -> None:
    values, weights = np.array(sample[0]), np.array(sample[1])
    expected = lp_superquantile(values, weights, theta)
    assert superquantile(values, weights, theta) == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_superquantile_is_at_least_quantile_and_mean() -> None:
    rng = np.random.default_rng(0)
    values, weights = rng.normal(size=50), rng.uniform(size=50)
    for theta in (0.1, 0.5, 0.9):
        s = superquantile(values, weights, theta)
        assert s >= weighted_quantile(values, weights, 1 - theta) - 1e-12
        assert s >= np.average(values, weights=weights) - 1e-12


@pytest.mark.parametrize("bad", [
    lambda: weighted_quantile(np.array([1.0]), np.array([1.0]), 1.5),
    lambda: superquantile(np.array([1.0]), np.array([1.0]), 0.0),
    lambda: weighted_quantile(np.array([]), np.array([]), 0.5),
    lambda: superquantile(np.array([1.0, 2.0]), np.array([0.0, 0.0]), 0.5),
])
def test_bad_arguments_raise(bad) -> None:  # noqa: ANN001
    with pytest.raises(ValueError):
        bad()
