"""simfl's ADMM for DRFL: server block (w, t, z, eta, gamma), client blocks (lam_s, alpha_s, w_s).

An alternating-direction linearised proximal method of multipliers (AD-LPMM; Beck,
"First-Order Methods in Optimization", 2017, Ch. 15) on problem (4) of problem.py, written
before the paper's equations were available: it is *not* Bai, Wong, Qiao, Ho's Algorithm 1
(that is lpmm.py; blocks, steps and multipliers differ, docs/drfl.md compares them), with
the equality constraints

    C1_s: w_s - w = 0,   C2_s: lam_s rho_s + mean(alpha_s) - t_s = 0,   C3: z - t + eta - gamma = 0

and multipliers (y1_s, y2_s, y3). One iteration:

1. server: w exactly (the mean of w_s + y1_s/beta); (t, z, eta, gamma) by one linearised
   proximal step on the augmented Lagrangian with diagonal steps 1/(beta·row sum of |A'A|)
   (so the proximal metric diag - beta A'A is positive semidefinite); z's prox is that of
   theta||.||_{p*}, i.e. the identity minus the projection onto an ℓp ball;
2. clients in parallel: C_s, a small convex program on the client's own data (cvxpy),
   with a proximal term mu/2||u - u^k||^2; optionally over a random subset of its samples
   (a variant of the paper's, which replaces I_s by the subset: here the mean runs over all
   N_s samples with the other alpha_si at their last values);
3. multipliers: y += beta·(constraint residual).

Client s downloads w - y1_s/beta and t_s - y2_s/beta (D + 1 numbers) and uploads w_s and
lam_s rho_s + mean(alpha_s) (D + 1 numbers); both sides update y1_s, y2_s themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import cvxpy as cp
import numpy as np

from simfl.algorithms.drfl.problem import (
    SOLVER,
    ClientData,
    DRFLProblem,
    client_constraints,
    signed_design,
)
from simfl.algorithms.drfl.projections import dual_exponent, prox_norm


@dataclass(frozen=True)
class ADMMConfig:
    beta: float = 1.0  # penalty of the augmented Lagrangian
    mu: float = 1e-3  # proximal weight of the client subproblems
    batch_size: int = 0  # samples per client subproblem; 0 = all


@dataclass(frozen=True)
class ADMMState:
    """Iterates; arrays are per client (S, ...) unless noted."""

    w: np.ndarray  # (D,) server model
    t: np.ndarray  # (S,)
    z: np.ndarray  # (S,)
    eta: float
    gamma: np.ndarray  # (S,)
    w_local: np.ndarray  # (S, D)
    lam: np.ndarray  # (S,)
    alpha: tuple[np.ndarray, ...]  # S arrays (N_s,)
    y1: np.ndarray  # (S, D)
    y2: np.ndarray  # (S,)
    y3: np.ndarray  # (S,)

    def client_value(self, rho: np.ndarray) -> np.ndarray:
        """(S,) lam_s rho_s + mean(alpha_s): what each client reports for C2."""
        return self.lam * rho + np.array([a.mean() for a in self.alpha])


def initial_state(problem: DRFLProblem) -> ADMMState:
    num, dim = problem.num_clients, problem.dim
    zeros = np.zeros(num)
    return ADMMState(w=np.zeros(dim), t=zeros, z=zeros, eta=0.0, gamma=zeros,
                     w_local=np.zeros((num, dim)), lam=zeros,
                     alpha=tuple(np.zeros(c.num_samples) for c in problem.clients),
                     y1=np.zeros((num, dim)), y2=zeros, y3=zeros)


def server_step(problem: DRFLProblem, state: ADMMState, beta: float) -> ADMMState:
    """Step 1: exact in w, one linearised proximal step in (t, z, eta, gamma)."""
    num = problem.num_clients
    w = (state.w_local + state.y1 / beta).mean(axis=0)
    c2 = state.client_value(problem.rho) - state.t + state.y2 / beta  # (S,) scaled residuals
    c3 = state.z - state.t + state.eta - state.gamma + state.y3 / beta
    # gradients of the penalty beta/2 (|c2|^2 + |c3|^2); steps 1/(beta * row sums of |A'A|)
    t = state.t + (c2 + c3) / 5.0
    z = prox_norm(state.z - (problem.q_hat / beta + c3) / 4.0, problem.theta / (4.0 * beta),
                  dual_exponent(problem.p))
    eta = state.eta - (1.0 / beta + c3.sum()) / (4.0 * num)
    gamma = np.maximum(state.gamma + c3 / 4.0, 0.0)
    return replace(state, w=w, t=t, z=z, eta=float(eta), gamma=gamma)


class ClientSolver:
    """C_s of one client as a parametrised cvxpy problem (compiled once, solved each round)."""

    def __init__(self, problem: DRFLProblem, s: int, cfg: ADMMConfig) -> None:
        if problem.support != "none":
            raise ValueError("simfl's ADMM takes unbounded features only; run the paper's "
                             "Algorithm 1 (lpmm.run_paper_admm) for a box support")
        client: ClientData = problem.clients[s]
        self.num_samples = client.num_samples
        self.batch = cfg.batch_size if 0 < cfg.batch_size < self.num_samples else self.num_samples
        self.xs, self.ys = signed_design(problem.loss, client)
        dim, m = problem.dim, self.batch
        self.rows = cp.Parameter((m, dim))
        self.targets = cp.Parameter(m) if self.ys is not None else None
        self.w_target = cp.Parameter(dim)  # w - y1_s / beta
        self.c_target = cp.Parameter()  # t_s - y2_s / beta
        self.alpha_rest = cp.Parameter()  # sum of the alpha_si not in this batch
        self.w_prev, self.lam_prev = cp.Parameter(dim), cp.Parameter()
        self.alpha_prev = cp.Parameter(m)
        self.w, self.lam, self.alpha = cp.Variable(dim), cp.Variable(), cp.Variable(m)
        value = (self.lam * problem.rho[s]
                 + (cp.sum(self.alpha) + self.alpha_rest) / self.num_samples)
        penalty = cp.sum_squares(self.w - self.w_target) + cp.square(value - self.c_target)
        prox = (cp.sum_squares(self.w - self.w_prev) + cp.square(self.lam - self.lam_prev)
                + cp.sum_squares(self.alpha - self.alpha_prev))
        cons = client_constraints(problem.loss, self.rows, self.targets, self.lam, self.alpha,
                                  self.w, problem.kappa)
        self.problem = cp.Problem(cp.Minimize(cfg.beta / 2 * penalty + cfg.mu / 2 * prox), cons)

    def solve(self, w_target: np.ndarray, c_target: float, w_prev: np.ndarray, lam_prev: float,
              alpha: np.ndarray, batch_idx: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
        """(w_s, lam_s, alpha_s) after one client update on the samples ``batch_idx``."""
        self.rows.value = self.xs[batch_idx]
        if self.targets is not None and self.ys is not None:
            self.targets.value = self.ys[batch_idx]
        self.w_target.value, self.c_target.value = w_target, c_target
        self.w_prev.value, self.lam_prev.value = w_prev, lam_prev
        self.alpha_prev.value = alpha[batch_idx]
        self.alpha_rest.value = alpha.sum() - alpha[batch_idx].sum()
        self.problem.solve(solver=SOLVER)
        if self.problem.status not in ("optimal", "optimal_inaccurate"):
            raise RuntimeError(f"client subproblem: solver status {self.problem.status}")
        new_alpha = alpha.copy()
        new_alpha[batch_idx] = self.alpha.value
        return np.asarray(self.w.value), float(np.asarray(self.lam.value)), new_alpha


def client_step(state: ADMMState, solvers: list[ClientSolver], beta: float,
                batches: list[np.ndarray]) -> ADMMState:
    """Step 2: every client solves C_s given the server's broadcast."""
    w_local, lam, alpha = state.w_local.copy(), state.lam.copy(), list(state.alpha)
    for s, solver in enumerate(solvers):
        w_local[s], lam[s], alpha[s] = solver.solve(
            state.w - state.y1[s] / beta, float(state.t[s] - state.y2[s] / beta),
            state.w_local[s], float(state.lam[s]), state.alpha[s], batches[s])
    return replace(state, w_local=w_local, lam=lam, alpha=tuple(alpha))


def dual_step(problem: DRFLProblem, state: ADMMState, beta: float) -> ADMMState:
    """Step 3: multipliers ascend along the residuals of C1, C2, C3."""
    return replace(
        state,
        y1=state.y1 + beta * (state.w_local - state.w),
        y2=state.y2 + beta * (state.client_value(problem.rho) - state.t),
        y3=state.y3 + beta * (state.z - state.t + state.eta - state.gamma))


def residual(problem: DRFLProblem, state: ADMMState) -> float:
    """Largest absolute violation of C1, C2, C3."""
    return float(max(np.abs(state.w_local - state.w).max(),
                     np.abs(state.client_value(problem.rho) - state.t).max(),
                     np.abs(state.z - state.t + state.eta - state.gamma).max()))


def run_admm(problem: DRFLProblem, cfg: ADMMConfig, num_iters: int, rng: np.random.Generator,
             callback: Callable[[int, ADMMState], None] | None = None) -> ADMMState:
    """``num_iters`` iterations from the zero state; ``rng`` draws the client batches."""
    solvers = [ClientSolver(problem, s, cfg) for s in range(problem.num_clients)]
    state = initial_state(problem)
    for k in range(num_iters):
        batches = [np.sort(rng.choice(sv.num_samples, sv.batch, replace=False))
                   if sv.batch < sv.num_samples else np.arange(sv.num_samples) for sv in solvers]
        state = server_step(problem, state, cfg.beta)
        state = client_step(state, solvers, cfg.beta, batches)
        state = dual_step(problem, state, cfg.beta)
        if callback is not None:
            callback(k + 1, state)
    return state
