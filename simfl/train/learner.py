"""The learning side of a run: the global model and everything computed from it.

:class:`Learner` is the one object that holds numerical state over rounds (the
global parameters and the updates of the round in flight). The simulator calls
it with client indices and gets numpy arrays back, so ``simfl/sim`` never
touches torch.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from simfl.aggregate import Aggregator, Selection
from simfl.data.packed import ClientData, FederatedData
from simfl.rng import Streams
from simfl.scenario import EvalConfig, TrainConfig
from simfl.train.cohort import TrainHParams, train_cohort
from simfl.train.evaluate import CohortEval, evaluate_cohort


class Learner:
    def __init__(
        self,
        model: nn.Module,
        params: torch.Tensor,
        data: FederatedData,
        aggregator: Aggregator,
        train_cfg: TrainConfig,
        l2: float,
        eval_cfg: EvalConfig,
        streams: Streams,
    ) -> None:
        self.model, self.params, self.data = model, params, data
        self.aggregator, self.train_cfg, self.l2 = aggregator, train_cfg, l2
        self.eval_cfg, self.streams = eval_cfg, streams
        self._pending: dict[int, torch.Tensor] = {}  # client_idx -> delta (P,) of this round

    @property
    def needs_losses(self) -> bool:
        return self.aggregator.needs_losses

    @property
    def model_bytes(self) -> int:
        """Bytes of one model (or update) message: P numbers of the training dtype."""
        return self.params.numel() * self.params.element_size()

    def num_samples(self, client_idx: np.ndarray) -> np.ndarray:
        return self.data.train.num_samples[client_idx]

    def client_ids(self, client_idx: np.ndarray) -> np.ndarray:
        return self.data.train.client_ids[client_idx]

    def lr(self, round_idx: int) -> float:
        cfg = self.train_cfg
        decays = round_idx // cfg.lr_decay_every if cfg.lr_decay_every else 0
        return cfg.lr * cfg.lr_decay_factor**decays

    def report_losses(self, client_idx: np.ndarray) -> np.ndarray:
        """F_k(w_t): each client's loss under the current global model, on its training data."""
        return self._evaluate(self.data.train.subset(client_idx)).losses

    def select(self, losses: np.ndarray, client_idx: np.ndarray) -> Selection:
        return self.aggregator.select(losses, self.num_samples(client_idx).astype(np.float64))

    def train(self, round_idx: int, client_idx: np.ndarray) -> np.ndarray:
        """Local training of the given clients from the current model; returns train losses."""
        self._pending.clear()
        if len(client_idx) == 0:
            return np.zeros(0)
        hparams = TrainHParams(
            local_epochs=self.train_cfg.local_epochs,
            batch_size=self.train_cfg.batch_size,
            lr=self.lr(round_idx),
            l2=self.l2,
            prox_mu=self.train_cfg.prox_mu,
            backend=self.train_cfg.backend,
        )
        seeds = [self.streams.seed("shuffle", round_idx, int(k)) for k in client_idx]
        result = train_cohort(
            self.model, self.params, self.data.train.subset(client_idx), hparams, seeds
        )
        self._pending = {int(k): result.deltas[i] for i, k in enumerate(client_idx)}
        return result.train_losses

    def aggregate(self, client_idx: np.ndarray) -> None:
        """Combine the updates of the given clients (a subset of the last ``train``)."""
        if len(client_idx) > 0:
            deltas = torch.stack([self._pending[int(k)] for k in client_idx])
            weights = self.num_samples(client_idx).astype(np.float64)
            self.params = self.aggregator.combine(self.params, deltas, weights)
        self._pending.clear()

    def evaluate(self) -> dict[str, tuple[ClientData, CohortEval]]:
        """Loss and error of the global model on every training and every test device."""
        return {split: (clients, self._evaluate(clients))
                for split, clients in (("train", self.data.train), ("test", self.data.test))}

    def _evaluate(self, clients: ClientData) -> CohortEval:
        return evaluate_cohort(self.model, self.params, clients, self.eval_cfg.batch_size)
