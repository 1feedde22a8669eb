"""The DRFL problem and its direct solution by a convex solver (the reference).

DRFL (Bai, Wong, Qiao, Ho 2025) trains one linear model against the worst case over
client weights q in Q = {q in simplex : ||q - q_hat||_p <= theta} and, for each client s,
over distributions within Wasserstein distance rho_s of its empirical one:

    min_theta max_{q in Q} sum_s q_s R_s(theta),   R_s = the worst case of losses.py.

Dualising the inner max over q (multiplier eta for sum q = 1, gamma >= 0 for q >= 0, and
Hölder's inequality on the ball) and writing R_s with its multiplier lam_s and epigraph
variables alpha_s gives the problem (4) that the ADMM splits (our derivation; it is the
paper's problem (5), the split form of its Theorem 4.3, with the variables renamed: our
t, z, eta, gamma are the paper's z, t, -gamma, eta):

    min  eta + q_hat' z + theta ||z||_{p*}
    s.t. z = t - eta 1 + gamma,  gamma >= 0,
         t_s = lam_s rho_s + mean_i alpha_si,          (lam_s, alpha_s, w_s) in Omega_s,
         w_s = w                                       for every client s,

where Omega_s holds alpha_si >= phi(m_si), alpha_si >= phi(-m_si) - lam_s kappa (the label
flip; regression: alpha_si >= ell(r_si)) and lam_s >= L||w_s||_inf (and >= L/kappa), or,
for the hinge loss with features in a box, Propositions 6.3 / 6.4's set (box_omega).
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
    DRFL's Propositions 6.3 / 6.4). Samples may lie outside the box (the study's noisy
    client 1): Ω_s is then the propositions' program as printed (losses.py says what it
    computes there)."""

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
        if self.support != "none" and (self.support not in BOXES or self.loss.name != "hinge"):
            raise ValueError(f"support must be 'none' or, for the hinge loss, one of "
                             f"{sorted(BOXES)}; got {self.support!r} with {self.loss.name}")

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


Kappa = float | cp.Parameter  # a number (math.inf: labels never flip) or a cvxpy parameter


def _finite(kappa: Kappa) -> bool:
    return isinstance(kappa, cp.Parameter) or math.isfinite(kappa)


def client_constraints(loss: Loss, x: np.ndarray | cp.Parameter,
                       y: np.ndarray | cp.Parameter | None,
                       lam: cp.Expression, alpha: cp.Expression, w: cp.Expression,
                       kappa: Kappa) -> list[cp.Constraint]:
    """Omega_s. Classification passes x = y·design(x) (signed rows) and y = None."""
    lip = loss.lipschitz
    cons = [lam >= lip * cp.norm(w[:-1], "inf")]
    if loss.is_classification:
        margin = x @ w
        cons.append(alpha >= loss.expr(margin))
        if _finite(kappa):
            cons.append(alpha >= loss.expr(-margin) - kappa * lam)
    elif _finite(kappa):
        cons += [alpha >= loss.expr(x @ w - y), kappa * lam >= lip]  # lam >= L / kappa
    else:
        cons.append(alpha >= loss.expr(x @ w - y))
    return cons


def box_client_constraints(client: ClientData, lam: cp.Expression, alpha: cp.Expression,
                           w: cp.Expression, kappa: float, support: str) -> list[cp.Constraint]:
    """Omega_s of the hinge loss with features in a box as DRFL's Propositions 6.3 / 6.4
    print it (Corollary B.4 with C = [I; -I]): per sample, multipliers pi, tau >= 0 of the
    box's upper and lower faces for the kept label (+) and the flipped one (-); 4·N·d
    variables. The reference that box_omega, its compact equivalent, is tested against."""
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


def box_omega(client: ClientData, lam: cp.Expression, alpha: cp.Expression, w: cp.Expression,
              kappa: Kappa, support: str) -> list[cp.Constraint]:
    """Propositions 6.3 / 6.4's Omega_s with pi and tau minimised out: the same set of
    (lam, alpha, w), with 2d shared variables instead of 4·N·d.

    For one sample and feature, the least pi_j (hi - x_j) + tau_j (x_j - lo) with
    |pi_j - tau_j + c_j| <= lam is, for x_j in the box, (hi - x_j)(-c_j - lam)^+ +
    (x_j - lo)(c_j - lam)^+; for x_j outside it is the same at the projection p_j of x_j on
    the box, minus lam·|x_j - p_j|, and the score term -y w_j x_j becomes -y w_j p_j
    (losses.py). With P = (w - lam)^+ and M = (-w - lam)^+ (epigraph variables: their
    coefficients are >= 0) every sample's two constraints are linear in (P, M, lam, w).
    """
    lo, hi = BOXES[support]
    proj = np.clip(client.x, lo, hi)  # (N, d)
    outside = np.abs(client.x - proj).sum(axis=1)  # (N,) ℓ1 distance to the box
    positive = client.y[:, None] > 0
    to_plus = np.where(positive, proj - lo, hi - proj)  # (N, d) coefficients of P (kept label)
    to_minus = np.where(positive, hi - proj, proj - lo)  # of M; the flipped label swaps them
    dim = client.x.shape[1]
    plus, minus = cp.Variable(dim, nonneg=True), cp.Variable(dim, nonneg=True)
    margin = cp.multiply(client.y, design(proj) @ w)
    cons = [lam >= 0, alpha >= 0, plus >= w[:-1] - lam, minus >= -w[:-1] - lam,
            alpha >= 1 - margin + to_plus @ plus + to_minus @ minus - outside * lam]
    if _finite(kappa):
        cons.append(alpha >= 1 + margin + to_minus @ plus + to_plus @ minus
                    - kappa * lam - outside * lam)
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
    return client_omega(problem.loss, client, problem.support, lam, alpha, w, problem.kappa)


def client_omega(loss: Loss, client: ClientData, support: str, lam: cp.Expression,
                 alpha: cp.Expression, w: cp.Expression, kappa: Kappa) -> list[cp.Constraint]:
    """Omega_s of one client's data for a loss and a support ("none" or a box)."""
    if support != "none":
        return box_omega(client, lam, alpha, w, kappa, support)
    xs, ys = signed_design(loss, client)
    return client_constraints(loss, xs, ys, lam, alpha, w, kappa)


@dataclass(frozen=True)
class Solution:
    theta: np.ndarray  # (D,) model
    objective: float


class DirectProgram:
    """Problem (4) in one convex program (all data in one place: the reference) for fixed
    clients, loss, p, support and q_hat, with rho (S,), kappa and theta as cvxpy parameters:
    compiled once, then solved for many (rho, kappa, theta) (the study's cross-validation).
    ``template`` fixes everything else; its kappa only says whether labels may flip."""

    def __init__(self, template: DRFLProblem) -> None:
        num = template.num_clients
        self.rho = cp.Parameter(num, nonneg=True)
        self.kappa = cp.Parameter(pos=True)
        self.theta = cp.Parameter(nonneg=True)
        kappa: Kappa = self.kappa if math.isfinite(template.kappa) else math.inf
        self.w = cp.Variable(template.dim)
        lam, t, z, gamma = cp.Variable(num), cp.Variable(num), cp.Variable(num), cp.Variable(num)
        eta = cp.Variable()
        cons = [z == t - eta + gamma, gamma >= 0]
        for s, client in enumerate(template.clients):
            alpha = cp.Variable(client.num_samples)
            cons += client_omega(template.loss, client, template.support, lam[s], alpha, self.w,
                                 kappa)
            cons.append(t[s] == lam[s] * self.rho[s] + cp.sum(alpha) / client.num_samples)
        dual = norm_order(dual_exponent(template.p))
        self.objective = eta + template.q_hat @ z + self.theta * cp.norm(z, dual)
        self.program = cp.Problem(cp.Minimize(self.objective), cons)

    def solve(self, rho: np.ndarray | float, kappa: float, theta: float) -> Solution:
        self.rho.value = np.broadcast_to(np.asarray(rho, dtype=float), self.rho.shape).copy()
        self.kappa.value = kappa if math.isfinite(kappa) else 1.0  # unused when infinite
        self.theta.value = theta
        self.program.solve(solver=SOLVER)
        if self.program.status not in ("optimal", "optimal_inaccurate"):
            raise RuntimeError(f"problem (4): solver status {self.program.status}")
        return Solution(np.asarray(self.w.value), float(self.objective.value))


def solve_direct(problem: DRFLProblem) -> Solution:
    """Problem (4) for one (rho, kappa, theta): DirectProgram compiled and solved once."""
    return DirectProgram(problem).solve(problem.rho, problem.kappa, problem.theta)


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
