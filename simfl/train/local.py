"""What devices compute from a model: local training and losses, batched over a cohort.

:class:`LocalWork` holds what a run wires into the numerics (model, data, training
and evaluation settings, random streams) and computes, for a group of clients that
start from the same parameters, their updates (one ``train_cohort`` call) or their
losses (one ``evaluate_cohort`` call). It keeps no state over rounds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from simfl.data.packed import Clients, FederatedData
from simfl.rng import Streams
from simfl.scenario import TrainConfig
from simfl.train.batched import TrainHParams, train_cohort
from simfl.train.evaluate import CohortEval, evaluate_cohort

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class LocalWork:
    model: nn.Module
    data: FederatedData
    train_cfg: TrainConfig
    l2: float  # (l2 / 2) ||w||^2 in every local objective
    eval_batch_size: int
    streams: Streams
    class_major: bool = False  # the losses' log-softmax over classes (EvalConfig.class_major)

    def lr(self, round_idx: int) -> float:
        """The local learning rate of round (sync) or model version (async) ``round_idx``."""
        cfg = self.train_cfg
        decays = round_idx // cfg.lr_decay_every if cfg.lr_decay_every else 0
        return cfg.lr * cfg.lr_decay_factor**decays

    def train(self, params: torch.Tensor, round_idx: int, client_idx: np.ndarray,
              prox_mu: float) -> tuple[dict[int, torch.Tensor], np.ndarray]:
        """Local training of the given training clients from ``params`` in one batched call,
        with round ``round_idx``'s lr and shuffle seeds: the finite deltas (P,) by client,
        and (K,) mean training losses, NaN for a client whose update has NaN/Inf values
        (dropped and logged: the server marks it "nonfinite" and never aggregates it)."""
        hparams = TrainHParams(
            local_epochs=self.train_cfg.local_epochs,
            batch_size=self.train_cfg.batch_size,
            lr=self.lr(round_idx),
            l2=self.l2,
            prox_mu=prox_mu,
            backend=self.train_cfg.backend,
            precision=self.train_cfg.precision,
        )
        seeds = [self.streams.seed("shuffle", round_idx, int(k)) for k in client_idx]
        result = train_cohort(self.model, params, self.data.train.subset(client_idx), hparams,
                              seeds)
        finite = torch.isfinite(result.deltas).all(dim=1).cpu().numpy()  # (K,)
        for k in client_idx[~finite]:
            log.warning("round %d: dropped the update of client %s (NaN/Inf values)",
                        round_idx, self.data.train.client_ids[k])
        deltas = {int(k): result.deltas[i] for i, k in enumerate(client_idx) if finite[i]}
        return deltas, np.where(finite, result.train_losses, np.nan)

    def losses(self, params: torch.Tensor, client_idx: np.ndarray | None = None) -> np.ndarray:
        """(K,) F_k(params) of the given training clients on their training data (None:
        every training client, a chunk at a time when their samples are made on demand)."""
        train = self.data.train
        clients = train if client_idx is None else train.subset(client_idx)
        return evaluate_cohort(self.model, params, clients, self.eval_batch_size,
                               errors=False, class_major=self.class_major).losses

    def evaluate(self, params: torch.Tensor, clients: Clients) -> CohortEval:
        """Loss and error of ``params`` on each of ``clients``."""
        return evaluate_cohort(self.model, params, clients, self.eval_batch_size,
                               class_major=self.class_major)
