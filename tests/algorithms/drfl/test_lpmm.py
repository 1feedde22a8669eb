"""DRFL's Algorithm 1 as printed converges to problem (4)'s optimum, and to ERM's at θ = 0."""

from __future__ import annotations

import numpy as np
import pytest

from simfl.algorithms.drfl.baselines import solve_erm, weights_by_size
from simfl.algorithms.drfl.losses import Loss
from simfl.algorithms.drfl.lpmm import PaperState, run_paper_admm
from simfl.algorithms.drfl.problem import DRFLProblem, objective, solve_direct
from tests.algorithms.drfl.helpers import classification_clients, regression_clients


@pytest.mark.parametrize(("name", "clients", "p"), [
    ("hinge", classification_clients(0.3), 2.0),
    ("huber", regression_clients(), 1.0),
])
@pytest.mark.slow
def test_algorithm_1_reaches_the_direct_optimum(name: str, clients: tuple, p: float) -> None:
    problem = DRFLProblem(clients, Loss(name), rho=0.1, kappa=1.0, theta=0.2, p=p)
    optimum = solve_direct(problem).objective
    gaps: list[float] = []

    def record(k: int, state: PaperState) -> None:
        if k % 50 == 0:
            gaps.append((objective(problem, state.w) - optimum) / abs(optimum))

    state = run_paper_admm(problem, c=1.0, num_iters=300, callback=record)
    assert -1e-6 <= gaps[-1] <= 1e-4  # the exact objective at any model is >= the optimum
    assert gaps[0] > 10 * max(gaps[-1], 1e-7)
    # feasibility of (5): its equality constraints hold at the end
    e = np.ones(problem.num_clients)
    assert np.abs(state.t - state.z - state.gamma * e - state.eta).max() < 1e-3
    assert np.abs(state.w_local - state.w).max() < 1e-3


@pytest.mark.slow
def test_algorithm_1_with_q_fixed_and_no_wasserstein_ball_is_erm() -> None:
    clients, loss = classification_clients(2.0), Loss("logistic")
    problem = DRFLProblem(clients, loss, rho=0.0, kappa=1.0, theta=0.0, p=2.0)
    state = run_paper_admm(problem, c=0.3, num_iters=300)
    np.testing.assert_allclose(state.w, solve_erm(loss, clients, weights_by_size(clients)),
                               atol=1e-3)


def test_the_step_must_be_positive() -> None:
    problem = DRFLProblem(classification_clients(0.3), Loss("hinge"), rho=0.1, kappa=1.0,
                          theta=0.2)
    with pytest.raises(ValueError, match="c must be > 0"):
        run_paper_admm(problem, c=0.0, num_iters=1)
