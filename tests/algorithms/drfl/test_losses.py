"""The Wasserstein worst case of one client: hand-computed cases and its dual program."""

from __future__ import annotations

import math

import cvxpy as cp
import numpy as np
import pytest

from simfl.algorithms.drfl.losses import Loss, loss_gradient, mean_loss, worst_case_risk

ONE = np.array([[1.0]])


def test_hand_computed_label_flip() -> None:
    # x = 1, y = +1, w = 2, b = 0: margin 2, hinge 0 at the data and 3 at the flipped label.
    # min_{lam >= 2} 0.5 lam + max(0, 3 - lam): lam = 3 gives 1.5 (flip half the mass).
    theta = np.array([2.0, 0.0])
    assert worst_case_risk(Loss("hinge"), ONE, np.array([1.0]), theta, 0.5, 1.0) == 1.5
    # no flips allowed: the features move, at rate ||w||_inf = 2 per unit of budget
    assert worst_case_risk(Loss("hinge"), ONE, np.array([1.0]), theta, 0.5, math.inf) == 1.0
    # rho = 0: the empirical risk
    assert worst_case_risk(Loss("hinge"), ONE, np.array([1.0]), theta, 0.0, 1.0) == 0.0


def test_hand_computed_huber_regression() -> None:
    # residual 3 > delta = 1: loss 1 * (3 - 0.5) = 2.5; lam >= max(|w|, 1/kappa) = 2
    theta = np.array([2.0, 1.0])
    value = worst_case_risk(Loss("huber", 1.0), ONE, np.array([0.0]), theta, 0.1, 1.0)
    assert value == pytest.approx(2.5 + 0.2)


@pytest.mark.parametrize("name", ["hinge", "logistic"])
@pytest.mark.parametrize("kappa", [0.3, 2.0])
def test_matches_dual_program(name: str, kappa: float) -> None:
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(12, 3)), np.sign(rng.normal(size=12))
    theta, rho, loss = rng.normal(size=4), 0.2, Loss(name)
    margin = y * (np.hstack([x, np.ones((12, 1))]) @ theta)
    lam = cp.Variable()
    worst = cp.maximum(loss.expr(margin), loss.expr(-margin) - kappa * lam)
    prog = cp.Problem(cp.Minimize(lam * rho + cp.sum(worst) / 12),
                      [lam >= np.abs(theta[:-1]).max()])
    prog.solve()
    assert worst_case_risk(loss, x, y, theta, rho, kappa) == pytest.approx(prog.value, rel=1e-6)


def test_monotone_in_radius_and_bounded_below_by_empirical_risk() -> None:
    rng = np.random.default_rng(2)
    x, y, theta = rng.normal(size=(20, 3)), np.sign(rng.normal(size=20)), rng.normal(size=4)
    values = [worst_case_risk(Loss("hinge"), x, y, theta, r, 1.0) for r in (0, 0.1, 0.5, 2.0)]
    assert values[0] == pytest.approx(mean_loss(Loss("hinge"), x, y, theta))
    assert np.all(np.diff(values) >= 0)


@pytest.mark.parametrize("name", ["logistic", "huber"])
def test_gradient_matches_finite_differences(name: str) -> None:
    rng = np.random.default_rng(4)
    x, theta = rng.normal(size=(10, 3)), rng.normal(size=4)
    y = np.sign(rng.normal(size=10)) if name == "logistic" else 3 * rng.normal(size=10)
    loss, eps = Loss(name, 1.0), 1e-6
    numeric = [(mean_loss(loss, x, y, theta + eps * e) - mean_loss(loss, x, y, theta - eps * e))
               / (2 * eps) for e in np.eye(4)]
    np.testing.assert_allclose(loss_gradient(loss, x, y, theta), numeric, atol=1e-6)
