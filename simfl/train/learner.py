"""The learning side of a run: the global model and the answers the servers ask for.

:class:`Learner` holds the numerical state over rounds (the global parameters and
their kept older versions, the rule's and the estimators' state, the updates not
yet aggregated: :class:`~simfl.train.updates.UpdateStore`) and answers the servers'
questions (``simfl.sim.server.LearnerLike``) with client indices in, numpy arrays
out, so ``simfl/sim`` never touches torch. What devices compute is
:class:`~simfl.train.local.LocalWork`'s; how updates combine is the rule's
(``simfl/aggregate``); Δ-FL's threshold is the estimator panel's
(:mod:`simfl.train.threshold`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from simfl.aggregate import Aggregator, RoundInputs, Selection
from simfl.data.packed import Clients, FederatedData
from simfl.errors import RunFailed
from simfl.quantile.estimators import Cohort
from simfl.quantile.panel import EstimatorPanel
from simfl.quantile.secagg import LOSS_REPORT
from simfl.train.evaluate import CohortEval
from simfl.train.local import LocalWork
from simfl.train.threshold import BiasColumns, PanelFilter
from simfl.train.updates import UpdateStore


class NonFiniteModelError(RunFailed):
    """The global model has NaN or Inf parameters after an aggregation: the run stops."""


class Learner:
    def __init__(self, work: LocalWork, params: torch.Tensor, aggregator: Aggregator) -> None:
        self.work, self.params, self.aggregator = work, params, aggregator
        self.version = 0  # model version: aggregations so far (sync: the round)
        self.updates = UpdateStore()
        self.aggregator_state = aggregator.init(work.data.train.num_samples)  # AFL, DRFA: λ
        self.filter: PanelFilter | None = None  # set by use_estimators (Δ-FL only)

    @property
    def data(self) -> FederatedData:
        return self.work.data

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

    @property
    def loss_report_bytes(self) -> int:
        """Bytes of a device's loss report in the clear (0: it goes through a protocol)."""
        clear = self.filter is None or self.filter.panel.driver.losses_in_clear
        return LOSS_REPORT.up_bytes if clear else 0

    @property
    def wants_checkins(self) -> bool:
        return self.filter is not None and self.filter.panel.wants_checkins

    def selection_weights(self) -> np.ndarray | None:
        """(N,) relative chances of the training devices to be selected; None: uniform."""
        return self.aggregator.sampling(self.aggregator_state, self.data.train.num_samples)

    def num_samples(self, client_idx: np.ndarray) -> np.ndarray:
        return self.data.train.num_samples[client_idx]

    def client_ids(self, client_idx: np.ndarray) -> np.ndarray:
        return self.data.train.client_ids[client_idx]

    def lr(self, round_idx: int) -> float:
        return self.work.lr(round_idx)

    def use_estimators(self, panel: EstimatorPanel, bias_every: int) -> None:
        """Let ``panel`` set the Δ-FL threshold (bias rows: see PanelFilter)."""
        self.filter = PanelFilter(panel, bias_every)

    def observe_online(self, t_s: float, client_idx: np.ndarray) -> None:
        if self.filter is not None:
            self.filter.panel.observe_online(t_s, client_idx)

    def report_losses(self, client_idx: np.ndarray) -> np.ndarray:
        """F_k(w_t): each client's loss under the current global model, on its training data."""
        return self.work.losses(self.params, client_idx)

    def select(self, losses: np.ndarray, client_idx: np.ndarray, round_idx: int,
               t_s: float) -> tuple[Selection, BiasColumns | None]:
        """Which cohort clients train, from their reported losses F_k(w_t), and the round's
        bias.parquet rows (None without an estimator panel) for the server to write."""
        weights = self.num_samples(client_idx).astype(np.float64)
        if self.filter is None:
            return self.aggregator.select(losses, weights), None
        train = self.data.train
        cohort = Cohort(losses, weights / train.num_samples.mean(), client_idx, t_s)
        return self.filter.select(cohort, round_idx, lambda: (
            self.work.losses(self.params), train.num_samples.astype(np.float64)))

    def train(self, round_idx: int, client_idx: np.ndarray) -> np.ndarray:
        """Sync round ``round_idx`` (= the model version): local training of the given
        clients; (K,) mean training losses, NaN for a NaN/Inf update (never aggregated)."""
        if len(client_idx) == 0:
            return np.zeros(0)
        deltas, train_losses = self.work.train(self.params, round_idx, client_idx,
                                               self.aggregator.prox_mu)
        self.updates.put(round_idx, deltas)
        return train_losses

    def aggregate(self, client_idx: np.ndarray, losses: np.ndarray) -> None:
        """Sync: combine the updates of the given clients (a subset of the round's
        ``train``); ``losses`` are their reports F_k(w_t) (NaN when the rule needs none).
        The round's other updates are dropped and the model version becomes the next round."""
        r = self.version
        self._step(client_idx, np.full(len(client_idx), r), losses, None,
                   f"round {r}: the global model has NaN/Inf parameters after aggregating "
                   f"{len(client_idx)} updates ({self.aggregator.name})")
        self.updates.discard_version(r)

    def _step(self, client_idx: np.ndarray, versions: np.ndarray, losses: np.ndarray,
              scales: np.ndarray | None, nonfinite: str) -> None:
        """Combine the stored updates of (``versions``, ``client_idx``) through the rule
        (none: no change); the model version + 1. NonFiniteModelError(``nonfinite``)."""
        if len(client_idx) > 0:
            inputs = RoundInputs(
                deltas=self.updates.take(versions, client_idx),
                weights=self.num_samples(client_idx).astype(np.float64),
                client_idx=np.asarray(client_idx), lr=self.lr(self.version),
                loss_of=self.work.losses, rng=self.work.streams.numpy("aggregate", self.version),
                losses=np.asarray(losses, dtype=np.float64), scales=scales)
            combined = self.aggregator.combine(self.params, inputs, self.aggregator_state)
            self.params, self.aggregator_state = combined.params, combined.state
            if not bool(torch.isfinite(self.params).all()):
                raise NonFiniteModelError(nonfinite)
        self.version += 1

    def state_dict(self) -> dict[str, Any]:
        """What rounds change, as plain data (tensors, arrays, numbers, containers), for
        checkpoints: the global model and its version, the rule's state, the trained
        updates waiting, and the estimators' state (Δ-FL). Keys are named here, not taken
        from attribute names, so renaming an attribute cannot change a checkpoint."""
        return {"params": self.params, "version": self.version,
                "aggregator_state": self.aggregator_state,
                "updates": self.updates.state_dict(),
                "estimators": None if self.filter is None else self.filter.panel.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (:meth:`state_dict` of a learner of the same run)."""
        self.params, self.version = state["params"], state["version"]
        self.aggregator_state = state["aggregator_state"]
        self.updates.load_state_dict(state["updates"])
        if self.filter is not None:
            self.filter.panel.load_state_dict(state["estimators"])

    def evaluate(self) -> dict[str, tuple[Clients, CohortEval]]:
        """Loss and error of the global model on every training and every test device."""
        return {split: (clients, self.work.evaluate(self.params, clients))
                for split, clients in (("train", self.data.train), ("test", self.data.test))}


class AsyncLearner(Learner):
    """The answers the asynchronous server asks for beyond the sync ones
    (``simfl.sim.async_server.AsyncLearnerLike``): tasks train from older model versions,
    kept until no task in flight trains from them."""

    def __init__(self, work: LocalWork, params: torch.Tensor, aggregator: Aggregator) -> None:
        super().__init__(work, params, aggregator)
        self.kept: dict[int, torch.Tensor] = {}  # version -> params (P,)

    def train_from(self, version: int, client_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Train the clients that started from model ``version`` (the current one or a kept
        one) with that version's lr and seeds (as sync round ``version``). Returns (K,) mean
        training losses (NaN: a NaN/Inf update) and (K,) F_k(w_version), the loss reports a
        rule needs (NaN when it needs none). The updates wait in the store."""
        params = self.params if version == self.version else self.kept[version]
        deltas, train_losses = self.work.train(params, version, client_idx,
                                               self.aggregator.prox_mu)
        self.updates.put(version, deltas)
        start_losses = np.full(len(client_idx), np.nan)
        if self.needs_losses:
            start_losses = self.work.losses(params, client_idx)
        return train_losses, start_losses

    def aggregate_buffer(self, client_idx: np.ndarray, versions: np.ndarray,
                         losses: np.ndarray, scales: np.ndarray) -> None:
        """FedBuff's server step over the buffered updates kept (Nguyen et al., AISTATS
        2022) through the rule's combine, with c_k = η_g s(τ_k) given by the server
        (``RoundInputs.scales``) and ``losses`` F_k(w_{v_k}), in the given order; then the
        model version + 1, the old one kept for the tasks still training from it (until
        :meth:`forget`). With FedAvg's combine and c_k = 1: its weighted mean, bit for bit."""
        old, v = self.params, self.version
        self._step(client_idx, versions, losses, scales,
                   f"server update {v}: the global model has NaN/Inf parameters after "
                   f"aggregating {len(client_idx)} buffered updates")
        self.kept[v] = old

    def discard(self, versions: np.ndarray, client_idx: np.ndarray) -> None:
        """Forget trained updates that will not be aggregated."""
        self.updates.discard(versions, client_idx)

    def forget(self, version: int) -> None:
        """No task in flight will train from the old model ``version`` any more."""
        self.kept.pop(version, None)

    def state_dict(self) -> dict[str, Any]:
        """:meth:`Learner.state_dict`, and the old models tasks still train from."""
        return {**super().state_dict(), "kept": dict(self.kept)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.kept = dict(state["kept"])

