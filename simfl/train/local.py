"""What devices compute from a model: local training and losses, batched over a cohort.

:class:`LocalWork` holds what a run wires into the numerics (model, data, training
and evaluation settings, random streams) and computes, for a group of clients that
start from the same parameters, their updates (one ``train_cohort`` call) or their
losses (one ``evaluate_cohort`` call). Its only state over rounds is ``backends``:
which training backend ``train.backend = "auto"`` measured fastest for each cohort size
(simfl.train.choose), which a run records in its manifest and a resume takes back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from simfl.data.packed import Clients, FederatedData
from simfl.rng import Streams
from simfl.scenario import TrainConfig
from simfl.train.batched import TrainHParams, train_cohort
from simfl.train.choose import BackendChoice
from simfl.train.evaluate import CohortEval, evaluate_cohort
from simfl.train.updates import DeltaBuffers, finite_rows

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
    backends: BackendChoice = field(default_factory=BackendChoice)  # auto's choices
    buffers: DeltaBuffers = field(default_factory=DeltaBuffers)  # the rounds' (K, P) deltas

    def lr(self, round_idx: int) -> float:
        """The local learning rate of round (sync) or model version (async) ``round_idx``."""
        cfg = self.train_cfg
        decays = round_idx // cfg.lr_decay_every if cfg.lr_decay_every else 0
        return cfg.lr * cfg.lr_decay_factor**decays

    def train(self, params: torch.Tensor, round_idx: int, client_idx: np.ndarray,
              prox_mu: float) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        """Local training of the given training clients from ``params`` in one batched call
        on their samples read in place (``Clients.cohort``), with round ``round_idx``'s lr
        and shuffle seeds: the (K, P) deltas in ``client_idx``'s order, (K,) whether each
        is finite (one row-sum pass: simfl.train.updates.finite_rows), and (K,) mean
        training losses, NaN for a client whose update has NaN/Inf values (dropped and
        logged: the server marks it "nonfinite" and never aggregates it)."""
        hparams = TrainHParams(
            local_epochs=self.train_cfg.local_epochs,
            batch_size=self.train_cfg.batch_size,
            lr=self.lr(round_idx),
            l2=self.l2,
            prox_mu=prox_mu,
            backend=self.train_cfg.backend,
            precision=self.train_cfg.precision,
        )
        seeds = self.streams.seeds("shuffle", round_idx, last=client_idx).tolist()
        result = train_cohort(self.model, params, self.data.train.cohort(client_idx), hparams,
                              seeds, self.backends, self.buffers)
        finite = finite_rows(result.deltas)
        for k in client_idx[~finite]:
            log.warning("round %d: dropped the update of client %s (NaN/Inf values)",
                        round_idx, self.data.train.client_ids[k])
        return result.deltas, finite, np.where(finite, result.train_losses, np.nan)

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
