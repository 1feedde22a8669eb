"""The learning side of a run: the global model and everything computed from it.

:class:`Learner` is the one object that holds numerical state over rounds (the
global parameters and the updates of the round in flight). The simulator calls
it with client indices and gets numpy arrays back, so ``simfl/sim`` never
touches torch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from simfl.aggregate import Aggregator, RoundInputs, Selection
from simfl.data.packed import ClientData, FederatedData
from simfl.errors import RunFailed
from simfl.quantile.estimators import Cohort
from simfl.quantile.panel import EstimatorPanel
from simfl.rng import Streams
from simfl.scenario import EvalConfig, TrainConfig
from simfl.train.cohort import TrainHParams, train_cohort
from simfl.train.evaluate import CohortEval, evaluate_cohort

LOSS_REPORT_BYTES = 4  # one float32
BiasSink = Callable[..., None]  # takes the columns of bias.parquet rows
log = logging.getLogger(__name__)


class NonFiniteModelError(RunFailed):
    """The global model has NaN or Inf parameters after an aggregation: the run stops."""


class Learner:
    # What a run wires in (model, data, rule, configs, callbacks); every other attribute is
    # state that rounds change and goes into checkpoints (see state_dict).
    WIRING = frozenset({"model", "data", "aggregator", "train_cfg", "l2", "eval_cfg", "streams",
                        "bias_every", "bias_sink", "_pending"})

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
        self._round = 0  # the round of the pending updates
        # Asynchronous server (FedBuff): the server updates so far, the older model versions
        # that tasks in flight started from, and the trained updates not yet aggregated.
        self.version = 0
        self._versions: dict[int, torch.Tensor] = {}  # version -> params (P,)
        self._updates: dict[tuple[int, int], torch.Tensor] = {}  # (version, client) -> (P,)
        self.aggregator_state = aggregator.init(data.train.num_samples)  # AFL, DRFA: λ
        self.panel: EstimatorPanel | None = None  # set by use_estimators (Δ-FL only)
        self.bias_every = 0
        self.bias_sink: BiasSink = lambda **columns: None

    @property
    def needs_losses(self) -> bool:
        return self.aggregator.needs_losses

    @property
    def model_bytes(self) -> int:
        """Bytes of one model (or update) message: P numbers of the training dtype."""
        return self.params.numel() * self.params.element_size()

    @property
    def cohort_fraction(self) -> float:
        """The rule's share of ``server.clients_per_round`` to select (fedavg_sub: θ)."""
        return self.aggregator.cohort_fraction

    def selection_weights(self) -> np.ndarray | None:
        """(N,) relative chances of the training devices to be selected; None: uniform."""
        return self.aggregator.sampling(self.aggregator_state, self.data.train.num_samples)

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

    def use_estimators(self, panel: EstimatorPanel, bias_every: int, sink: BiasSink) -> None:
        """Let ``panel`` set the Δ-FL threshold; write its estimates (and, every
        ``bias_every`` rounds, the population quantile they aim at) through ``sink``."""
        self.panel, self.bias_every, self.bias_sink = panel, bias_every, sink

    @property
    def loss_report_bytes(self) -> int:
        """Bytes of a device's loss report in the clear (0: it goes through a protocol)."""
        clear = self.panel is None or self.panel.driver.losses_in_clear
        return LOSS_REPORT_BYTES if clear else 0

    @property
    def wants_checkins(self) -> bool:
        return self.panel is not None and self.panel.wants_checkins

    def observe_online(self, t_s: float, client_idx: np.ndarray) -> None:
        if self.panel is not None:
            self.panel.observe_online(t_s, client_idx)

    def select(self, losses: np.ndarray, client_idx: np.ndarray, round_idx: int,
               t_s: float) -> Selection:
        """Which cohort clients train, from their reported losses F_k(w_t)."""
        weights = self.num_samples(client_idx).astype(np.float64)
        if self.panel is None:
            return self.aggregator.select(losses, weights)
        train = self.data.train
        cohort = Cohort(losses, weights / train.num_samples.mean(), client_idx, t_s)
        estimates = self.panel.estimate(cohort, round_idx)
        population = None
        if self.bias_every and round_idx % self.bias_every == 0:
            population = (self._evaluate(train).losses, train.num_samples.astype(np.float64))
        self.bias_sink(**self.panel.bias_columns(round_idx, cohort, estimates, population))
        driver = estimates[self.panel.driver.name]
        return Selection(keep=losses >= driver.threshold, threshold=driver.threshold,
                         exchanges=driver.exchanges)

    def train(self, round_idx: int, client_idx: np.ndarray) -> np.ndarray:
        """Local training of the given clients from the current model; returns their mean
        training losses, NaN for a client whose update has NaN/Inf values (it is dropped:
        the server marks it "nonfinite" and never aggregates it)."""
        self._pending.clear()
        self._round = round_idx
        if len(client_idx) == 0:
            return np.zeros(0)
        self._pending, train_losses = self._train_clients(self.params, round_idx, client_idx)
        return train_losses

    def _train_clients(self, params: torch.Tensor, round_idx: int, client_idx: np.ndarray
                       ) -> tuple[dict[int, torch.Tensor], np.ndarray]:
        """One batched call: the finite deltas by client, and (K,) train losses (NaN: dropped)."""
        hparams = TrainHParams(
            local_epochs=self.train_cfg.local_epochs,
            batch_size=self.train_cfg.batch_size,
            lr=self.lr(round_idx),
            l2=self.l2,
            prox_mu=self.aggregator.prox_mu,
            backend=self.train_cfg.backend,
            precision=self.train_cfg.precision,
        )
        seeds = [self.streams.seed("shuffle", round_idx, int(k)) for k in client_idx]
        result = train_cohort(
            self.model, params, self.data.train.subset(client_idx), hparams, seeds
        )
        finite = torch.isfinite(result.deltas).all(dim=1).cpu().numpy()  # (K,)
        for k in client_idx[~finite]:
            log.warning("round %d: dropped the update of client %s (NaN/Inf values)",
                        round_idx, self.data.train.client_ids[k])
        deltas = {int(k): result.deltas[i] for i, k in enumerate(client_idx) if finite[i]}
        return deltas, np.where(finite, result.train_losses, np.nan)

    def train_from(self, version: int, client_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Asynchronous server: train the clients that started from model ``version`` (the
        current one or one kept since) in one batched call, with the local lr and shuffle
        seeds of that version (as sync round ``version``). Returns (K,) mean training losses
        (NaN: a NaN/Inf update, never aggregated) and (K,) F_k(w_version), the loss reports
        a filtering rule needs (NaN when it needs none). The updates wait for
        :meth:`aggregate_buffer` or :meth:`discard`."""
        params = self.params if version == self.version else self._versions[version]
        deltas, train_losses = self._train_clients(params, version, client_idx)
        self._updates.update({(version, k): delta for k, delta in deltas.items()})
        start_losses = np.full(len(client_idx), np.nan)
        if self.needs_losses:
            clients = self.data.train.subset(client_idx)
            start_losses = evaluate_cohort(self.model, params, clients,
                                           self.eval_cfg.batch_size).losses
        return train_losses, start_losses

    def aggregate_buffer(self, client_idx: np.ndarray, versions: np.ndarray,
                         scales: np.ndarray) -> None:
        """FedBuff's server step over the buffered updates kept (Nguyen et al., AISTATS
        2022): w ← w + Σ_k (α_k / Σ_j α_j) c_k Δ_k with c_k = η_g s(τ_k) given by the
        server, in the given order; then model version += 1, the old version kept for the
        tasks still training from it (until :meth:`forget`). With c_k = 1 this is FedAvg's
        weighted mean, bit for bit."""
        params = self.params
        if len(client_idx) > 0:
            weights = self.num_samples(client_idx).astype(np.float64)
            coef = weights / weights.sum() * scales  # (K,)
            deltas = torch.stack([self._updates.pop((int(v), int(k)))
                                  for v, k in zip(versions, client_idx, strict=True)])
            params = params + torch.as_tensor(coef, dtype=deltas.dtype,
                                              device=deltas.device) @ deltas
            if not bool(torch.isfinite(params).all()):
                raise NonFiniteModelError(
                    f"server update {self.version}: the global model has NaN/Inf parameters "
                    f"after aggregating {len(client_idx)} buffered updates")
        self._versions[self.version] = self.params
        self.params, self.version = params, self.version + 1

    def discard(self, versions: np.ndarray, client_idx: np.ndarray) -> None:
        """Forget trained updates that will not be aggregated (filtered, stale, dropped)."""
        for v, k in zip(versions, client_idx, strict=True):
            self._updates.pop((int(v), int(k)), None)

    def forget(self, version: int) -> None:
        """No task in flight will train from the old model ``version`` any more."""
        self._versions.pop(version, None)

    def aggregate(self, client_idx: np.ndarray, losses: np.ndarray) -> None:
        """Combine the updates of the given clients (a subset of the last ``train``);
        ``losses`` are their reports F_k(w_t) (NaN when the rule needs none)."""
        if len(client_idx) > 0:
            inputs = RoundInputs(
                deltas=torch.stack([self._pending[int(k)] for k in client_idx]),
                weights=self.num_samples(client_idx).astype(np.float64),
                client_idx=np.asarray(client_idx),
                lr=self.lr(self._round),
                loss_of=self._losses_at,
                rng=self.streams.numpy("aggregate", self._round),
                losses=np.asarray(losses, dtype=np.float64),
            )
            combined = self.aggregator.combine(self.params, inputs, self.aggregator_state)
            self.params, self.aggregator_state = combined.params, combined.state
            if not bool(torch.isfinite(self.params).all()):
                raise NonFiniteModelError(
                    f"round {self._round}: the global model has NaN/Inf parameters after "
                    f"aggregating {len(client_idx)} updates ({self.aggregator.name})")
        self._pending.clear()

    def state_dict(self) -> dict[str, Any]:
        """The state that rounds change: global parameters, aggregator and estimator state,
        and any attribute added later (everything but ``WIRING``), for checkpoints."""
        return {name: value for name, value in vars(self).items() if name not in self.WIRING}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from :meth:`state_dict` of a learner of the same run)."""
        for name, value in state.items():
            setattr(self, name, value)

    def evaluate(self) -> dict[str, tuple[ClientData, CohortEval]]:
        """Loss and error of the global model on every training and every test device."""
        return {split: (clients, self._evaluate(clients))
                for split, clients in (("train", self.data.train), ("test", self.data.test))}

    def _losses_at(self, params: torch.Tensor, client_idx: np.ndarray) -> np.ndarray:
        """F_k(params) of the given training clients on their training data."""
        clients = self.data.train.subset(client_idx)
        return evaluate_cohort(self.model, params, clients, self.eval_cfg.batch_size).losses

    def _evaluate(self, clients: ClientData) -> CohortEval:
        return evaluate_cohort(self.model, self.params, clients, self.eval_cfg.batch_size)
