"""DRFL with bounded features (Propositions 6.3 / 6.4): the closed-form worst case equals
Corollary B.4's program as printed and its compact form (for samples inside the box and
outside it), a brute-force search over the box, and the direct optimum; the paper's
Algorithm 1 reaches it."""

from __future__ import annotations

import itertools

import cvxpy as cp
import numpy as np
import pytest

from simfl.algorithms.drfl.losses import (
    BOXES,
    Loss,
    box_sample_terms,
    box_worst_case_risk,
    worst_case_risk,
)
from simfl.algorithms.drfl.lpmm import run_paper_admm
from simfl.algorithms.drfl.problem import (
    ClientData,
    DRFLProblem,
    box_client_constraints,
    box_omega,
    objective,
    solve_direct,
)


def box_clients(support: str, seed: int = 0) -> tuple[ClientData, ...]:
    lo, hi = BOXES[support]
    rng = np.random.default_rng(seed)
    clients = []
    for s in range(3):
        x = rng.uniform(lo, hi, size=(12, 3))
        y = np.sign(x @ np.array([1.0, -1.0, 0.5]) - (lo + hi) / 4 + 0.3 * rng.normal(size=12)
                    + 0.1 * s)
        clients.append(ClientData(x, np.where(y == 0, 1.0, y)))
    return tuple(clients)


@pytest.mark.parametrize("support", sorted(BOXES))
@pytest.mark.parametrize("shift", [0.0, 0.5])
def test_closed_form_equals_corollary_b4s_program_and_its_compact_form(support: str,
                                                                       shift: float) -> None:
    """shift 0.5: Gaussian noise N(0.5, 0.6) moves most samples out of the box, as the
    study's noise does to client 1."""
    rng = np.random.default_rng(1)
    lo, hi = BOXES[support]
    for rho in (0.0, 0.05, 0.2, 1.0):
        x = rng.uniform(lo, hi, (15, 3)) + shift * rng.normal(1.0, 1.2, (15, 3))
        y, theta = np.sign(rng.normal(size=15)), 2 * rng.normal(size=4)
        values = []
        for constraints in (box_client_constraints, box_omega):
            lam, alpha = cp.Variable(), cp.Variable(15)
            cons = constraints(ClientData(x, y), lam, alpha, theta, 0.7, support)
            program = cp.Problem(cp.Minimize(rho * lam + cp.sum(alpha) / 15), cons)
            values.append(program.solve(solver="CLARABEL"))
        closed = box_worst_case_risk(x, y, theta, rho, 0.7, support)
        assert values == pytest.approx([closed, closed], rel=1e-6, abs=1e-7)


def test_outside_the_box_the_sample_is_first_moved_onto_it() -> None:
    """Prop 6.3's per-sample term at x outside [-1, 1]: the term at its projection on the
    box, minus lam times the ℓ1 distance moved (the floor 0 aside)."""
    theta, y, lam = np.array([1.5, -0.4, 0.1]), np.array([1.0]), np.array([0.0, 0.3, 1.0])
    x_out, x_proj = np.array([[1.8, -0.5]]), np.array([[1.0, -0.5]])
    inside = box_sample_terms(x_proj, y, theta, lam, 0.7, "sym_box")[:, 0]
    outside = box_sample_terms(x_out, y, theta, lam, 0.7, "sym_box")[:, 0]
    np.testing.assert_allclose(outside, np.maximum(inside - 0.8 * lam, 0.0))


@pytest.mark.parametrize("support", sorted(BOXES))
def test_the_per_sample_term_is_the_sup_over_the_box_and_both_labels(support: str) -> None:
    """sup over x' in the box (a grid) and y' of hinge(y' score(x')) − λ(‖x' − x̂‖₁ +
    κ·1[y' ≠ y]) against the closed form, for several λ."""
    lo, hi = BOXES[support]
    x_hat, theta, kappa = np.array([[0.3, 0.8]]), np.array([1.5, -0.4, 0.1]), 0.7
    grid = np.linspace(lo, hi, 101)
    points = np.array(list(itertools.product(grid, grid)))  # exact: the optimum is a vertex
    score = points @ theta[:2] + theta[2]
    cost = np.abs(points - x_hat).sum(axis=1)
    for y in (1.0, -1.0):
        for lam in (0.0, 0.3, 1.0, 2.0):
            brute = max((np.maximum(0, 1 - y * score) - lam * cost).max(),
                        (np.maximum(0, 1 + y * score) - lam * (cost + kappa)).max())
            closed = box_sample_terms(x_hat, np.array([y]), theta, np.array([lam]), kappa,
                                      support)
            assert closed[0, 0] == pytest.approx(brute, abs=1e-9)


@pytest.mark.parametrize("support", sorted(BOXES))
def test_a_box_restricts_the_adversary(support: str) -> None:
    rng = np.random.default_rng(2)
    lo, hi = BOXES[support]
    for _ in range(50):
        x, y = rng.uniform(lo, hi, (10, 3)), np.sign(rng.normal(size=10))
        theta, rho = rng.normal(size=4) * rng.uniform(0.1, 3), rng.uniform(0, 1)
        unbounded = worst_case_risk(Loss("hinge"), x, y, theta, rho, 1.0)
        assert box_worst_case_risk(x, y, theta, rho, 1.0, support) <= unbounded + 1e-9
        if rho == 0:
            assert box_worst_case_risk(x, y, theta, 0.0, 1.0, support) == unbounded


@pytest.mark.parametrize("support", sorted(BOXES))
@pytest.mark.slow
def test_direct_optimum_is_the_min_max_and_algorithm_1_reaches_it(support: str) -> None:
    problem = DRFLProblem(box_clients(support), Loss("hinge"), rho=0.1, kappa=1.0, theta=0.2,
                          support=support)
    solution = solve_direct(problem)
    assert objective(problem, solution.theta) == pytest.approx(solution.objective, rel=1e-5)
    rng = np.random.default_rng(3)
    for _ in range(20):  # no nearby model does better on the exact min-max objective
        nearby = solution.theta + 0.05 * rng.normal(size=solution.theta.size)
        assert objective(problem, nearby) >= solution.objective - 1e-7
    state = run_paper_admm(problem, c=1.0, num_iters=300)
    gap = (objective(problem, state.w) - solution.objective) / abs(solution.objective)
    assert -1e-6 <= gap <= 1e-3


def test_a_box_needs_the_hinge_loss() -> None:
    with pytest.raises(ValueError, match="hinge"):
        DRFLProblem(box_clients("sym_box"), Loss("logistic"), rho=0.1, kappa=1.0, theta=0.2,
                    support="sym_box")


@pytest.mark.parametrize("support", ["none", "sym_box"])
def test_rho_at_least_kappa_is_degenerate(support: str) -> None:
    """ρ ≥ κ: the ball holds the data with every label flipped, so the optimum is 1 and the
    zero model attains it (why the study's cross-validation skips ρ ≥ κ)."""
    clients = box_clients("sym_box")
    problem = DRFLProblem(clients, Loss("hinge"), rho=0.5, kappa=0.5, theta=0.1,
                          support=support)
    assert solve_direct(problem).objective == pytest.approx(1.0, abs=1e-6)
    assert objective(problem, np.zeros(4)) == pytest.approx(1.0)
    below = DRFLProblem(clients, Loss("hinge"), rho=0.1, kappa=0.5, theta=0.1, support=support)
    assert solve_direct(below).objective < 0.99
