"""Baselines on the same linear models: ERM, AFL, WAFL (their optima) and DRFA (its algorithm).

- ERM FL (FedAvg's objective, McMahan et al. 2017): min sum_s q_hat_s mean loss_s.
- AFL (Mohri, Sivek, Suresh 2019): min_theta max_{q in simplex} sum_s q_s mean loss_s.
- WAFL (Nguyen, Nguyen, Le, Dinh, Tran 2022): the worst case over one Wasserstein ball of
  radius rho around the pooled distribution sum_s q_hat_s P_s (the constrained form; WAFL
  itself runs local SGD on the Lagrangian surrogate with a fixed multiplier): ``pooled``.
- DRFA (Deng, Kamani, Mahdavi 2020): AFL's objective by local SGD with periodic averaging
  and projected ascent of the client weights q; full participation (three clients) so the
  q-weighted average replaces sampling clients with probability q.

ERM, AFL and WAFL are solved to optimality as one convex program: the point ERM's and
AFL's federated algorithms converge to; WAFL's runs on its penalised surrogate, whose
solution is not the constrained ball's optimum in general.
"""

from __future__ import annotations

from dataclasses import dataclass

import cvxpy as cp
import numpy as np

from simfl.aggregate.simplex import project_simplex
from simfl.algorithms.drfl.losses import Loss, loss_gradient, mean_loss
from simfl.algorithms.drfl.problem import SOLVER, ClientData, signed_design


def _client_losses(loss: Loss, clients: tuple[ClientData, ...], w: cp.Variable
                   ) -> list[cp.Expression]:
    out = []
    for client in clients:
        xs, ys = signed_design(loss, client)
        out.append(cp.sum(loss.expr(xs @ w if ys is None else xs @ w - ys)) / client.num_samples)
    return out


def _solve(objective: cp.Expression, cons: list[cp.Constraint], w: cp.Variable) -> np.ndarray:
    cp.Problem(cp.Minimize(objective), cons).solve(solver=SOLVER)
    return np.asarray(w.value)


def weights_by_size(clients: tuple[ClientData, ...]) -> np.ndarray:
    sizes = np.array([c.num_samples for c in clients], dtype=float)
    return sizes / sizes.sum()


def solve_erm(loss: Loss, clients: tuple[ClientData, ...], q_hat: np.ndarray) -> np.ndarray:
    w = cp.Variable(clients[0].x.shape[1] + 1)
    return _solve(q_hat @ cp.hstack(_client_losses(loss, clients, w)), [], w)


def solve_afl(loss: Loss, clients: tuple[ClientData, ...]) -> np.ndarray:
    w, top = cp.Variable(clients[0].x.shape[1] + 1), cp.Variable()
    return _solve(top, [top >= f for f in _client_losses(loss, clients, w)], w)


def pooled(clients: tuple[ClientData, ...]) -> ClientData:
    """All clients' samples as one client: WAFL's ball is centred on their pooled empirical
    distribution sum_s q_hat_s P_s (q_hat by size), so WAFL is problem (4) with this one
    client and theta = 0, solved with DRFL's Omega_s (and support) by problem.DirectProgram."""
    return ClientData(np.vstack([c.x for c in clients]), np.concatenate([c.y for c in clients]))


@dataclass(frozen=True)
class DRFAConfig:
    num_rounds: int = 200
    local_steps: int = 10  # tau
    batch_size: int = 16
    lr: float = 0.05  # local SGD step
    lr_weights: float = 0.01  # ascent step of q (times tau, as in DRFA)


def run_drfa(loss: Loss, clients: tuple[ClientData, ...], cfg: DRFAConfig,
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """DRFA (Deng et al. 2020) with full participation: (model, weights q).

    Each round every client runs ``local_steps`` minibatch SGD steps from the global model;
    the model becomes the q-weighted average; at a random local step t' the q-weighted
    snapshot's client losses drive q <- Proj_simplex(q + tau·lr_weights·losses).
    """
    num = len(clients)
    w = np.zeros(clients[0].x.shape[1] + 1)
    q = np.full(num, 1.0 / num)
    for _ in range(cfg.num_rounds):
        snap_step = int(rng.integers(1, cfg.local_steps + 1))
        local = np.tile(w, (num, 1))  # (S, D)
        snapshot = np.zeros_like(local)
        for s, client in enumerate(clients):
            for step in range(1, cfg.local_steps + 1):
                idx = rng.choice(client.num_samples, min(cfg.batch_size, client.num_samples),
                                 replace=False)
                local[s] -= cfg.lr * loss_gradient(loss, client.x[idx], client.y[idx], local[s])
                if step == snap_step:
                    snapshot[s] = local[s]
        w = q @ local
        w_snap = q @ snapshot
        risks = np.array([mean_loss(loss, c.x, c.y, w_snap) for c in clients])
        q = project_simplex(q + cfg.local_steps * cfg.lr_weights * risks)
    return w, q
