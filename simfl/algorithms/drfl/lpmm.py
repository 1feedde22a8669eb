"""DRFL's Algorithm 1 exactly as printed (Bai, Wong, Qiao, Ho, "Distributionally Robust
Federated Learning: An ADMM Algorithm", §5, equations (6)-(10) and the client operator C_s).

The paper's problem (5), in its own variables (the paper's t, z, γ, η are simfl's z, t, −η,
γ of problem.py; the two problems are the same):

    min  q̂'t + θ ||t||_{p*} − γ
    s.t. t = z + γ e + η   (multiplier σ),    w = ŵ_s (ψ_s),
         z_s = ρ_s λ_s + mean(α_s)   (ζ_s),   (λ_s, α_s, ŵ_s) ∈ Ω_s,   η ≥ 0.

One iteration with step c > 0 (Algorithm 1, lines 4-17): the server updates w (6), z (7),
t (8) from the previous iterates, then η (9) and γ (10) from the new t, z; each client
solves C_s — argmin over Ω_s of ζ_s v_s − ψ_s'ŵ_s + c/2 ||w − ŵ_s||² + c/2 (v_s − z_s)²,
v_s = ρ_s λ_s + mean(α_s) — with a convex solver; then the multipliers ascend by c times
the residuals. The π of equation (7) is the vector of the clients' v_s: the paper defines
π_s = ρ_s λ_s + (1/N_s) e'α_s in Appendix E.1 (the term c/2 ||z − π||² of the first block).

simfl's other ADMM (admm.py) linearises differently (Gershgorin steps, a client proximal
term μ); bench/drfl_algorithms.py compares the two on the same problems.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import cvxpy as cp
import numpy as np

from simfl.algorithms.drfl.problem import SOLVER, DRFLProblem, omega
from simfl.algorithms.drfl.projections import project_lp_ball


@dataclass(frozen=True)
class PaperState:
    """Algorithm 1's iterates, in the paper's variables; per-client arrays are (S, ...)."""

    w: np.ndarray  # (D,)
    t: np.ndarray  # (S,)
    z: np.ndarray  # (S,)
    eta: np.ndarray  # (S,) ≥ 0
    gamma: float
    w_local: np.ndarray  # (S, D) the clients' ŵ_s
    lam: np.ndarray  # (S,)
    alpha: tuple[np.ndarray, ...]  # S arrays (N_s,)
    sigma: np.ndarray  # (S,)
    psi: np.ndarray  # (S, D)
    zeta: np.ndarray  # (S,)

    def client_value(self, rho: np.ndarray) -> np.ndarray:
        """(S,) v_s = ρ_s λ_s + mean(α_s)."""
        return self.lam * rho + np.array([a.mean() for a in self.alpha])


def initial_paper_state(problem: DRFLProblem) -> PaperState:
    num, dim = problem.num_clients, problem.dim
    zeros = np.zeros(num)
    return PaperState(w=np.zeros(dim), t=zeros, z=zeros, eta=zeros, gamma=0.0,
                      w_local=np.zeros((num, dim)), lam=zeros,
                      alpha=tuple(np.zeros(c.num_samples) for c in problem.clients),
                      sigma=zeros, psi=np.zeros((num, dim)), zeta=zeros)


def server_update(problem: DRFLProblem, s: PaperState, c: float) -> PaperState:
    """Lines 4-8: equations (6), (7), (8) from the previous iterates, then (9), (10)."""
    num, e = problem.num_clients, np.ones(problem.num_clients)
    w = (c * s.w_local - s.psi).sum(axis=0) / (c * num)  # (6)
    z = (s.client_value(problem.rho) + s.t - s.z - s.gamma * e - s.eta + 2 * num * s.z
         + (s.zeta + s.sigma) / c) / (1 + 2 * num)  # (7)
    u = s.t - (problem.q_hat + s.sigma + c * (s.t - s.z - s.gamma * e - s.eta)) / (2 * num * c)
    if problem.theta > 0:  # (8): the prox of (θ / 2Sc) ||.||_{p*} at u
        scale = 2 * num * c / problem.theta
        t = u - project_lp_ball(scale * u, 1.0, problem.p) / scale
    else:
        t = u
    eta = np.maximum(s.eta + (s.sigma / c - s.gamma * e - s.eta + t - z) / (2 * num), 0.0)  # (9)
    gamma = s.gamma + (1 + s.sigma.sum() + c * (-s.gamma * e - s.eta + t - z).sum()) / (
        2 * num * c)  # (10)
    return replace(s, w=w, z=z, t=t, eta=eta, gamma=float(gamma))


class PaperClient:
    """C_s of one client as a parametrised cvxpy problem (compiled once, solved each round)."""

    def __init__(self, problem: DRFLProblem, s: int, c: float) -> None:
        client = problem.clients[s]
        self.w_server, self.z_s = cp.Parameter(problem.dim), cp.Parameter()
        self.psi, self.zeta = cp.Parameter(problem.dim), cp.Parameter()
        self.w, self.lam = cp.Variable(problem.dim), cp.Variable()
        self.alpha = cp.Variable(client.num_samples)
        value = self.lam * problem.rho[s] + cp.sum(self.alpha) / client.num_samples
        objective = (self.zeta * value - self.psi @ self.w
                     + c / 2 * cp.sum_squares(self.w_server - self.w)
                     + c / 2 * cp.square(value - self.z_s))
        cons = omega(problem, s, self.lam, self.alpha, self.w)
        self.problem = cp.Problem(cp.Minimize(objective), cons)

    def solve(self, w: np.ndarray, z_s: float, psi: np.ndarray, zeta: float
              ) -> tuple[np.ndarray, float, np.ndarray]:
        self.w_server.value, self.z_s.value, self.psi.value, self.zeta.value = w, z_s, psi, zeta
        self.problem.solve(solver=SOLVER)
        if self.problem.status not in ("optimal", "optimal_inaccurate"):
            raise RuntimeError(f"client subproblem: solver status {self.problem.status}")
        return (np.asarray(self.w.value), float(np.asarray(self.lam.value)),
                np.asarray(self.alpha.value))


def run_paper_admm(problem: DRFLProblem, c: float, num_iters: int,
                   callback: Callable[[int, PaperState], None] | None = None) -> PaperState:
    """``num_iters`` iterations of Algorithm 1 from the zero state, step ``c`` > 0."""
    if c <= 0:
        raise ValueError(f"the step c must be > 0, got {c}")
    clients = [PaperClient(problem, s, c) for s in range(problem.num_clients)]
    state = initial_paper_state(problem)
    for k in range(num_iters):
        state = server_update(problem, state, c)
        w_local, lam, alpha = state.w_local.copy(), state.lam.copy(), list(state.alpha)
        for s, client in enumerate(clients):  # lines 10-12
            w_local[s], lam[s], alpha[s] = client.solve(state.w, float(state.z[s]),
                                                        state.psi[s], float(state.zeta[s]))
        state = replace(state, w_local=w_local, lam=lam, alpha=tuple(alpha))
        e = np.ones(problem.num_clients)
        state = replace(  # lines 14-18
            state,
            sigma=state.sigma + c * (state.t - state.z - state.gamma * e - state.eta),
            psi=state.psi + c * (state.w - state.w_local),
            zeta=state.zeta + c * (state.client_value(problem.rho) - state.z))
        if callback is not None:
            callback(k + 1, state)
    return state
