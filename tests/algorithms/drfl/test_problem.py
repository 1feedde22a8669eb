"""Problem (4) solved directly equals the min-max objective evaluated exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simfl.algorithms.drfl.losses import Loss
from simfl.algorithms.drfl.problem import (
    DirectProgram,
    DRFLProblem,
    objective,
    solve_direct,
    worst_weights,
)
from tests.algorithms.drfl.helpers import classification_clients, regression_clients


@pytest.mark.parametrize(("name", "p"), [("hinge", 1.0), ("logistic", 2.0), ("huber", math.inf)])
def test_reformulation_value_is_the_minmax_value(name: str, p: float) -> None:
    """The single program (dualised q, per-client multipliers) and the direct evaluation
    (breakpoints in lam, then the max over q) agree, and the solution is a local minimum."""
    clients = regression_clients() if name == "huber" else classification_clients(0.5)
    problem = DRFLProblem(clients, Loss(name), rho=np.array([0.05, 0.1, 0.2]), kappa=1.0,
                          theta=0.2, p=p)
    sol = solve_direct(problem)
    assert objective(problem, sol.theta) == pytest.approx(sol.objective, rel=1e-6)
    rng = np.random.default_rng(0)
    for _ in range(5):
        nearby = sol.theta + 1e-2 * rng.normal(size=sol.theta.size)
        assert objective(problem, nearby) >= sol.objective - 1e-7


@pytest.mark.parametrize("name", ["hinge", "huber"])
def test_one_compiled_program_solves_every_grid_point(name: str) -> None:
    """DirectProgram re-solved with new (rho, kappa, theta) equals a fresh solve_direct."""
    clients = regression_clients() if name == "huber" else classification_clients(0.5)
    program = DirectProgram(DRFLProblem(clients, Loss(name), rho=0.1, kappa=1.0, theta=0.2))
    for rho, kappa, theta in [(0.01, 0.3, 0.0), (0.2, 1.0, 0.5), (0.05, 0.7, 0.1)]:
        fresh = solve_direct(DRFLProblem(clients, Loss(name), rho=rho, kappa=kappa, theta=theta))
        assert program.solve(rho, kappa, theta).objective == pytest.approx(fresh.objective,
                                                                           rel=1e-6)


def test_worst_weights_hand_computed() -> None:
    risks, q_hat = np.array([1.0, 2.0, 3.0]), np.full(3, 1 / 3)
    # ℓ1 ball of radius 0.2: move 0.1 of weight from the best client to the worst
    np.testing.assert_allclose(worst_weights(risks, q_hat, 0.2, 1.0),
                               [1 / 3 - 0.1, 1 / 3, 1 / 3 + 0.1], atol=1e-6)
    # a large ball: all weight on the worst client (AFL); radius 0: q_hat (ERM)
    np.testing.assert_allclose(worst_weights(risks, q_hat, 2.0, 1.0), [0, 0, 1], atol=1e-6)
    np.testing.assert_allclose(worst_weights(risks, q_hat, 0.0, 2.0), q_hat, atol=1e-6)


def test_bad_parameters_are_rejected() -> None:
    with pytest.raises(ValueError, match="kappa"):
        DRFLProblem(classification_clients(0.5), Loss("hinge"), rho=0.1, kappa=0.0, theta=0.1)
    with pytest.raises(ValueError, match="p must be"):
        DRFLProblem(classification_clients(0.5), Loss("hinge"), rho=0.1, kappa=1.0, theta=0.1,
                    p=3.0)
