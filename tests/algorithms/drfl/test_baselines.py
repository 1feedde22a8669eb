"""ERM, AFL, WAFL optima and the DRFA algorithm on small instances."""

from __future__ import annotations

import numpy as np
import pytest

from simfl.algorithms.drfl.baselines import (
    DRFAConfig,
    run_drfa,
    solve_afl,
    solve_erm,
    solve_wafl,
    weights_by_size,
)
from simfl.algorithms.drfl.losses import Loss, mean_loss, worst_case_risk
from simfl.algorithms.drfl.problem import ClientData, DRFLProblem, solve_direct
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


def test_wafl_is_drfl_with_one_client_holding_the_pooled_data() -> None:
    """Equal client sizes: the pooled ball is DRFL's with a single client and theta = 0."""
    q_hat, rho, kappa = weights_by_size(CLIENTS), 0.1, 1.0
    wafl = solve_wafl(LOSS, CLIENTS, q_hat, rho, kappa)
    pooled = ClientData(np.vstack([c.x for c in CLIENTS]), np.concatenate([c.y for c in CLIENTS]))
    single = solve_direct(DRFLProblem((pooled,), LOSS, rho=rho, kappa=kappa, theta=0.0))
    assert worst_case_risk(LOSS, pooled.x, pooled.y, wafl, rho, kappa) == pytest.approx(
        single.objective, rel=1e-5)
    erm = solve_erm(LOSS, CLIENTS, q_hat)
    np.testing.assert_allclose(solve_wafl(LOSS, CLIENTS, q_hat, 0.0, kappa), erm, atol=1e-4)


def test_drfa_approaches_the_afl_optimum() -> None:
    w, q = run_drfa(LOSS, CLIENTS, DRFAConfig(num_rounds=300, lr=0.05, lr_weights=0.01),
                    np.random.default_rng(0))
    best = _losses(solve_afl(LOSS, CLIENTS)).max()
    assert _losses(w).max() <= 1.02 * best
    assert q.sum() == pytest.approx(1.0) and q.min() >= 0
    assert q[np.argmin(_losses(w))] < 0.05  # no weight on the best-off client
