"""DRFL's ADMM converges to problem (4)'s optimum, and to AFL's and ERM's in their limits."""

from __future__ import annotations

import numpy as np
import pytest

from simfl.algorithms.drfl.admm import ADMMConfig, ADMMState, ClientSolver, run_admm
from simfl.algorithms.drfl.baselines import solve_afl, solve_erm, weights_by_size
from simfl.algorithms.drfl.losses import Loss, mean_loss
from simfl.algorithms.drfl.problem import DRFLProblem, objective, solve_direct
from tests.algorithms.drfl.helpers import classification_clients, regression_clients


def _gaps(problem: DRFLProblem, cfg: ADMMConfig, num_iters: int, every: int
          ) -> tuple[ADMMState, list[float]]:
    optimum = solve_direct(problem).objective
    gaps: list[float] = []

    def record(k: int, state: ADMMState) -> None:
        if k % every == 0:
            gaps.append((objective(problem, state.w) - optimum) / abs(optimum))

    state = run_admm(problem, cfg, num_iters, np.random.default_rng(0), record)
    return state, gaps


@pytest.mark.parametrize(("name", "clients", "p"), [
    ("hinge", classification_clients(0.3), 2.0),
    ("huber", regression_clients(), 1.0),
])
@pytest.mark.slow
def test_objective_decreases_to_the_direct_optimum(name: str, clients: tuple, p: float) -> None:
    problem = DRFLProblem(clients, Loss(name), rho=0.1, kappa=1.0, theta=0.2, p=p)
    _, gaps = _gaps(problem, ADMMConfig(beta=1.0), 300, 50)
    assert gaps[-1] <= 1e-4
    assert gaps[-1] >= -1e-6  # the exact objective at any model is >= the optimum
    assert gaps[0] > 10 * max(gaps[-1], 1e-7)  # it got there by decreasing


def _client_losses(loss: Loss, clients: tuple, theta: np.ndarray) -> np.ndarray:
    return np.array([mean_loss(loss, c.x, c.y, theta) for c in clients])


@pytest.mark.slow
def test_no_wasserstein_ball_and_a_large_weight_ball_is_afl() -> None:
    clients, loss = classification_clients(2.0), Loss("logistic")
    problem = DRFLProblem(clients, loss, rho=0.0, kappa=1.0, theta=2.0, p=1.0)  # Q = simplex
    state = run_admm(problem, ADMMConfig(beta=0.3), 400, np.random.default_rng(0))
    afl = solve_afl(loss, clients)
    np.testing.assert_allclose(state.w, afl, atol=1e-3)
    assert _client_losses(loss, clients, state.w).max() == pytest.approx(
        _client_losses(loss, clients, afl).max(), rel=1e-4)


@pytest.mark.slow
def test_no_wasserstein_ball_and_q_fixed_is_erm() -> None:
    clients, loss = classification_clients(2.0), Loss("logistic")
    problem = DRFLProblem(clients, loss, rho=0.0, kappa=1.0, theta=0.0, p=2.0)  # q = q_hat
    state = run_admm(problem, ADMMConfig(beta=0.3), 200, np.random.default_rng(0))
    q_hat = weights_by_size(clients)
    erm = solve_erm(loss, clients, q_hat)
    np.testing.assert_allclose(state.w, erm, atol=1e-3)
    assert q_hat @ _client_losses(loss, clients, state.w) == pytest.approx(
        q_hat @ _client_losses(loss, clients, erm), rel=1e-6)


def test_client_batch_updates_only_its_samples() -> None:
    clients = classification_clients(0.3)
    problem = DRFLProblem(clients, Loss("hinge"), rho=0.1, kappa=1.0, theta=0.2)
    solver = ClientSolver(problem, 0, ADMMConfig(batch_size=4))
    alpha = np.linspace(0.0, 1.0, 15)
    batch = np.array([1, 5, 7, 11])
    w, lam, new_alpha = solver.solve(np.ones(4), 0.5, np.zeros(4), 0.0, alpha, batch)
    rest = np.setdiff1d(np.arange(15), batch)
    np.testing.assert_array_equal(new_alpha[rest], alpha[rest])
    assert lam >= np.abs(w[:-1]).max() - 1e-7  # lam >= L ||w||_inf, L = 1


@pytest.mark.slow
def test_sampled_batches_still_approach_the_optimum() -> None:
    problem = DRFLProblem(classification_clients(0.3), Loss("hinge"), rho=0.1, kappa=1.0,
                          theta=0.2)
    _, gaps = _gaps(problem, ADMMConfig(beta=1.0, batch_size=10), 200, 50)
    assert gaps[-1] < 0.05  # the paper's subset approximation: close, not exact
