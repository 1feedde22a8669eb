"""The DRFL problem and its direct solution by a convex solver (the reference).

DRFL (Bai, Wong, Qiao, Ho 2025) trains one linear model against the worst case over
client weights q in Q = {q in simplex : ||q - q_hat||_p <= theta} and, for each client s,
over distributions within Wasserstein distance rho_s of its empirical one:

    min_theta max_{q in Q} sum_s q_s R_s(theta),   R_s = the worst case of losses.py.

Dualising the inner max over q (multiplier eta for sum q = 1, gamma >= 0 for q >= 0, and
Hölder's inequality on the ball) and writing R_s with its multiplier lam_s and epigraph
variables alpha_s gives the problem (4) that the ADMM splits (our derivation of DRFL's
Theorem 4.3; the paper's exact variable scaling may differ):

    min  eta + q_hat' z + theta ||z||_{p*}
    s.t. z = t - eta 1 + gamma,  gamma >= 0,
         t_s = lam_s rho_s + mean_i alpha_si,          (lam_s, alpha_s, w_s) in Omega_s,
         w_s = w                                       for every client s,

where Omega_s holds alpha_si >= phi(m_si), alpha_si >= phi(-m_si) - lam_s kappa (the label
flip; regression: alpha_si >= ell(r_si)) and lam_s >= L||w_s||_inf (and >= L/kappa).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import cvxpy as cp
import numpy as np

from simfl.algorithms.drfl.losses import BOXES, Loss, box_worst_case_risk, design, worst_case_risk
from simfl.algorithms.drfl.projections import dual_exponent

SOLVER = "CLARABEL"


@dataclass(frozen=True)
class ClientData:
    """One client's samples: x (N, d) features, y (N,) labels in {-1, +1} or targets."""

    x: np.ndarray
    y: np.ndarray

    @property
    def num_samples(self) -> int:
        return int(self.y.shape[0])


@dataclass(frozen=True)
class DRFLProblem:
    """Clients, loss and ambiguity: radii rho (S,), label cost kappa, ball (theta, p, q_hat),
    and the features' support: "none" (R^d) or a box of BOXES (the hinge loss only,
    DRFL's Propositions 6.3 / 6.4)."""

    clients: tuple[ClientData, ...]
    loss: Loss
    rho: np.ndarray
    kappa: float
    theta: float
    p: float = 2.0
    q_hat: np.ndarray = field(default_factory=lambda: np.zeros(0))
    support: str = "none"

    def __post_init__(self) -> None:
        sizes = np.array([c.num_samples for c in self.clients], dtype=float)
        if self.q_hat.size == 0:  # default: weights proportional to sample counts
            object.__setattr__(self, "q_hat", sizes / sizes.sum())
        object.__setattr__(self, "rho", np.broadcast_to(
            np.asarray(self.rho, dtype=float), sizes.shape).copy())
        dual_exponent(self.p)  # validates p
        if self.kappa <= 0 or self.theta < 0 or np.any(self.rho < 0):
            raise ValueError("need kappa > 0, theta >= 0 and rho >= 0")
        if self.support != "none":
            if self.support not in BOXES or self.loss.name != "hinge":
                raise ValueError(f"support must be 'none' or, for the hinge loss, one of "
                                 f"{sorted(BOXES)}; got {self.support!r} with {self.loss.name}")
            lo, hi = BOXES[self.support]
            if any(np.any((c.x < lo) | (c.x > hi)) for c in self.clients):
                raise ValueError(f"features outside the support {self.support} [{lo}, {hi}]")

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    @property
    def dim(self) -> int:
        """Parameters of the model: features + bias."""
        return int(self.clients[0].x.shape[1]) + 1


def norm_order(p: float) -> int | str:
    """p as cvxpy's norm() takes it."""
    return "inf" if math.isinf(p) else int(p)


def client_constraints(loss: Loss, x: np.ndarray | cp.Parameter,
                       y: np.ndarray | cp.Parameter | None,
                       lam: cp.Expression, alpha: cp.Expression, w: cp.Expression,
                       kappa: float) -> list[cp.Constraint]:
    """Omega_s. Classification passes x = y·design(x) (signed rows) and y = None."""
    lip = loss.lipschitz
    cons = [lam >= lip * cp.norm(w[:-1], "inf")]
    if loss.is_classification:
        margin = x @ w
        cons.append(alpha >= loss.expr(margin))
        if math.isfinite(kappa):
            cons.append(alpha >= loss.expr(-margin) - kappa * lam)
    else:
        cons.append(alpha >= loss.expr(x @ w - y))
        if math.isfinite(kappa):
            cons.append(lam >= lip / kappa)
    return cons


def box_client_constraints(client: ClientData, lam: cp.Expression, alpha: cp.Expression,
                           w: cp.Expression, kappa: float, support: str) -> list[cp.Constraint]:
    """Omega_s of the hinge loss with features in a box (DRFL's Corollary B.4 with
    C = [I; -I], i.e. Propositions 6.3 / 6.4): per sample, multipliers pi, tau >= 0 of the
    box's upper and lower faces for the kept label (+) and the flipped one (-)."""
    lo, hi = BOXES[support]
    x, y = client.x, client.y
    num, dim = x.shape
    margin = cp.multiply(y, design(x) @ w)
    yw = y[:, None] @ cp.reshape(w[:-1], (1, dim), order="C")  # (N, d): y_i w_j
    cons = [lam >= 0, alpha >= 0]
    sides = [(1.0, 0.0)] + ([(-1.0, kappa)] if math.isfinite(kappa) else [])  # kept, flipped
    for sign, flip_cost in sides:
        pi, tau = cp.Variable((num, dim), nonneg=True), cp.Variable((num, dim), nonneg=True)
        slack = cp.sum(cp.multiply(pi, hi - x) + cp.multiply(tau, x - lo), axis=1)
        cons += [1 - sign * margin + slack - flip_cost * lam <= alpha,
                 cp.abs(pi - tau + sign * yw) <= lam]
    return cons


def signed_design(loss: Loss, client: ClientData) -> tuple[np.ndarray, np.ndarray | None]:
    """The constant data of Omega_s: (y·design(x), None) or (design(x), y)."""
    if loss.is_classification:
        return client.y[:, None] * design(client.x), None
    return design(client.x), client.y


def omega(problem: DRFLProblem, s: int, lam: cp.Expression, alpha: cp.Expression,
          w: cp.Expression) -> list[cp.Constraint]:
    """Omega_s of client s for the problem's loss and support."""
    client = problem.clients[s]
    if problem.support != "none":
        return box_client_constraints(client, lam, alpha, w, problem.kappa, problem.support)
    xs, ys = signed_design(problem.loss, client)
    return client_constraints(problem.loss, xs, ys, lam, alpha, w, problem.kappa)


def dro_norm_term(z: cp.Expression, problem: DRFLProblem) -> cp.Expression:
    return problem.theta * cp.norm(z, norm_order(dual_exponent(problem.p)))


@dataclass(frozen=True)
class Solution:
    theta: np.ndarray  # (D,) model
    objective: float


def solve_direct(problem: DRFLProblem) -> Solution:
    """Problem (4) in one convex program (all data in one place: the reference)."""
    num = problem.num_clients
    w = cp.Variable(problem.dim)
    lam, t, z, gamma = cp.Variable(num), cp.Variable(num), cp.Variable(num), cp.Variable(num)
    eta = cp.Variable()
    cons = [z == t - eta + gamma, gamma >= 0]
    for s, client in enumerate(problem.clients):
        alpha = cp.Variable(client.num_samples)
        cons += omega(problem, s, lam[s], alpha, w)
        cons.append(t[s] == lam[s] * problem.rho[s] + cp.sum(alpha) / client.num_samples)
    objective = eta + problem.q_hat @ z + dro_norm_term(z, problem)
    cp.Problem(cp.Minimize(objective), cons).solve(solver=SOLVER)
    return Solution(np.asarray(w.value), float(objective.value))


def client_risks(problem: DRFLProblem, theta: np.ndarray) -> np.ndarray:
    """(S,) worst-case risk R_s(theta) of each client over its Wasserstein ball."""
    if problem.support != "none":
        return np.array([box_worst_case_risk(c.x, c.y, theta, r, problem.kappa, problem.support)
                         for c, r in zip(problem.clients, problem.rho, strict=True)])
    return np.array([worst_case_risk(problem.loss, c.x, c.y, theta, r, problem.kappa)
                     for c, r in zip(problem.clients, problem.rho, strict=True)])


def worst_weights(risks: np.ndarray, q_hat: np.ndarray, theta: float, p: float) -> np.ndarray:
    """argmax of q'risks over Q = {q in simplex : ||q - q_hat||_p <= theta}."""
    q = cp.Variable(risks.size)
    cons = [q >= 0, cp.sum(q) == 1, cp.norm(q - q_hat, norm_order(p)) <= theta]
    cp.Problem(cp.Maximize(risks @ q), cons).solve(solver=SOLVER)
    return np.clip(np.asarray(q.value), 0.0, None)


def objective(problem: DRFLProblem, theta: np.ndarray) -> float:
    """The DRFL objective max_{q in Q} sum_s q_s R_s(theta), evaluated exactly at theta."""
    risks = client_risks(problem, theta)
    q = worst_weights(risks, problem.q_hat, problem.theta, problem.p)
    return float(q @ risks)
