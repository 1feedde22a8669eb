"""ERM, AFL, WAFL optima and the DRFA algorithm on small instances."""

from __future__ import annotations

import numpy as np
import pytest

from simfl.algorithms.drfl.baselines import (
    DRFAConfig,
    pooled,
    run_drfa,
    solve_afl,
    solve_erm,
    weights_by_size,
)
from simfl.algorithms.drfl.losses import Loss, mean_loss, worst_case_risk
from simfl.algorithms.drfl.problem import DRFLProblem, solve_direct
from tests.algorithms.drfl.helpers import classification_clients

LOSS = Loss("logistic")
CLIENTS = classification_clients(2.0)


def _losses(theta: np.ndarray) -> np.ndarray:
    return np.array([mean_loss(LOSS, c.x, c.y, theta) for c in CLIENTS])


def test_afl_minimises_the_worst_client_and_erm_the_average() -> None:
    q_hat = weights_by_size(CLIENTS)
    erm, afl = solve_erm(LOSS, CLIENTS, q_hat), solve_afl(LOSS, CLIENTS)
    assert _losses(afl).max() <= _losses(erm).max() + 1e-7
    assert q_hat @ _losses(erm) <= q_hat @ _losses(afl) + 1e-7


def test_wafl_is_the_worst_case_over_one_ball_around_the_pooled_data() -> None:
    """Problem (4) with the pooled client and theta = 0: its optimum is the pooled worst
    case at its model, no nearby model does better, and rho = 0 gives ERM."""
    rho, kappa = 0.1, 1.0
    data = pooled(CLIENTS)
    assert data.num_samples == sum(c.num_samples for c in CLIENTS)
    wafl = solve_direct(DRFLProblem((data,), LOSS, rho=rho, kappa=kappa, theta=0.0))
    risk = worst_case_risk(LOSS, data.x, data.y, wafl.theta, rho, kappa)
    assert risk == pytest.approx(wafl.objective, rel=1e-5)
    rng = np.random.default_rng(0)
    for _ in range(5):
        nearby = wafl.theta + 1e-2 * rng.normal(size=wafl.theta.size)
        assert worst_case_risk(LOSS, data.x, data.y, nearby, rho, kappa) >= risk - 1e-7
    at_zero = solve_direct(DRFLProblem((data,), LOSS, rho=0.0, kappa=kappa, theta=0.0))
    erm = solve_erm(LOSS, CLIENTS, weights_by_size(CLIENTS))
    np.testing.assert_allclose(at_zero.theta, erm, atol=1e-4)


def test_drfa_approaches_the_afl_optimum() -> None:
    w, q = run_drfa(LOSS, CLIENTS, DRFAConfig(num_rounds=300, lr=0.05, lr_weights=0.01),
                    np.random.default_rng(0))
    best = _losses(solve_afl(LOSS, CLIENTS)).max()
    assert _losses(w).max() <= 1.02 * best
    assert q.sum() == pytest.approx(1.0) and q.min() >= 0
    assert q[np.argmin(_losses(w))] < 0.05  # no weight on the best-off client
