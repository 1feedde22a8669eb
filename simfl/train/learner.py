"""The learning side of a run: the global model and the answers the servers ask for.

:class:`Learner` answers the servers' questions (``simfl.sim.server.LearnerLike``)
with client indices in, numpy arrays out, so ``simfl/sim`` never touches torch. The
numerical state over rounds is :class:`GlobalModel`'s (the global parameters and
their kept older versions, the rule's state, the updates not yet aggregated:
:class:`~simfl.train.updates.UpdateStore`) and the estimators' (the panel's). What
devices compute is :class:`~simfl.train.local.LocalWork`'s; how updates combine is
the rule's (``simfl/aggregate``); who trains is the rule's or, for Δ-FL with an
estimator panel, the panel's (:mod:`simfl.train.threshold`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from simfl.aggregate import Aggregator, Combined, RoundInputs, Selection
from simfl.aggregate.base import (
    Reports,
    State,
    checked_combined,
    checked_sampling,
    checked_selection,
)
from simfl.data.packed import Clients, FederatedData
from simfl.errors import RunFailed
from simfl.quantile.panel import EstimatorPanel
from simfl.train.evaluate import CohortEval
from simfl.train.local import LocalWork
from simfl.train.threshold import BiasColumns, PanelFilter, RuleSelection
from simfl.train.updates import UpdateStore


class NonFiniteModelError(RunFailed):
    """The global model has NaN or Inf parameters after an aggregation: the run stops."""


class GlobalModel:
    """The global parameters and what aggregating changes with them: the model version
    (aggregations so far; sync: the round), the rule's state (AFL, DRFA: λ), the trained
    updates waiting, and the older versions that tasks in flight still train from
    (async)."""

    def __init__(self, params: torch.Tensor, aggregator_state: State) -> None:
        self.params, self.aggregator_state, self.version = params, aggregator_state, 0
        self.updates = UpdateStore()
        self.kept: dict[int, torch.Tensor] = {}  # version -> params (P,)

    def params_of(self, version: int) -> torch.Tensor:
        """The parameters of model ``version``: the current one or a kept one."""
        return self.params if version == self.version else self.kept[version]

    def advance(self, combined: Combined | None, nonfinite: str) -> None:
        """The rule's ``combined`` outcome (None: no change) becomes the model, and its
        version + 1; NonFiniteModelError(``nonfinite``) if it has NaN/Inf parameters."""
        if combined is not None:
            self.params, self.aggregator_state = combined.params, combined.state
            if not bool(torch.isfinite(self.params).all()):
                raise NonFiniteModelError(nonfinite)
        self.version += 1

    def state_dict(self) -> dict[str, Any]:
        return {"params": self.params, "version": self.version,
                "aggregator_state": self.aggregator_state,
                "updates": self.updates.state_dict(), "kept": dict(self.kept)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.params, self.version = state["params"], state["version"]
        self.aggregator_state = state["aggregator_state"]
        self.updates.load_state_dict(state["updates"])
        self.kept = dict(state["kept"])


class Learner:
    def __init__(self, work: LocalWork, params: torch.Tensor, aggregator: Aggregator,
                 panel: EstimatorPanel | None = None, bias_every: int = 0) -> None:
        """``panel``: the estimators that set Δ-FL's threshold (bias rows every
        ``bias_every`` rounds: see PanelFilter); None: the rule selects."""
        self.work, self.aggregator = work, aggregator
        self.model = GlobalModel(params, aggregator.init(work.data.train.num_samples))
        # who trains: the rule, or Δ-FL's filter from the panel
        self.filter: RuleSelection | PanelFilter = (
            RuleSelection(aggregator) if panel is None
            else PanelFilter(panel, bias_every, work.data.train.num_samples.mean()))
        # the round's loss reports, from its select to its aggregation (a rule that
        # combines every round reads them); never checkpointed: checkpoints fall
        # between rounds
        self.reports: Reports | None = None

    @property
    def data(self) -> FederatedData:
        return self.work.data

    @property
    def needs_losses(self) -> bool:
        return self.aggregator.needs_losses

    @property
    def model_bytes(self) -> int:
        """Bytes of one model (or update) message: P numbers of the training dtype."""
        return self.model.params.numel() * self.model.params.element_size()

    @property
    def cohort_fraction(self) -> float:
        """The rule's share of ``server.clients_per_round`` to select (fedavg_sub: θ)."""
        return self.aggregator.cohort_fraction

    @property
    def loss_report_bytes(self) -> int:
        """Bytes of a device's loss report in the clear (0: it goes through a protocol)."""
        return self.filter.loss_report_bytes

    @property
    def wants_checkins(self) -> bool:
        return self.filter.wants_checkins

    def selection_weights(self) -> np.ndarray | None:
        """(N,) relative chances of the training devices to be selected; None: uniform."""
        return checked_sampling(self.aggregator, self.aggregator.sampling(
            self.model.aggregator_state, self.data.train.num_samples),
            self.data.train.num_clients)

    def num_samples(self, client_idx: np.ndarray) -> np.ndarray:
        return self.data.train.num_samples[client_idx]

    def client_ids(self, client_idx: np.ndarray) -> np.ndarray:
        return self.data.train.client_ids[client_idx]

    def lr(self, round_idx: int) -> float:
        return self.work.lr(round_idx)

    def observe_online(self, t_s: float, client_idx: np.ndarray) -> None:
        self.filter.observe_online(t_s, client_idx)

    def report_losses(self, client_idx: np.ndarray) -> np.ndarray:
        """F_k(w_t): each client's loss under the current global model, on its training data."""
        return self.work.losses(self.model.params, client_idx)

    def select(self, losses: np.ndarray, client_idx: np.ndarray, round_idx: int,
               t_s: float) -> tuple[Selection, BiasColumns | None]:
        """Which cohort clients train, from their reported losses F_k(w_t), and the round's
        bias.parquet rows (None without an estimator panel) for the server to write; the
        reports are kept for the round's aggregation (``RoundInputs.reports``). A rule's
        answer that breaks its contract is a PluginBroke (simfl.plugins)."""
        train = self.data.train
        selection, bias = self.filter.select(
            losses, self.num_samples(client_idx).astype(np.float64), client_idx, round_idx,
            t_s, lambda: (self.work.losses(self.model.params),
                          train.num_samples.astype(np.float64)))
        checked = checked_selection(self.aggregator, selection, len(losses))
        self.reports = Reports(np.asarray(client_idx), np.asarray(losses, dtype=np.float64),
                               checked.threshold)
        return checked, bias

    def train(self, round_idx: int, client_idx: np.ndarray) -> np.ndarray:
        """Sync round ``round_idx`` (= the model version): local training of the given
        clients; (K,) mean training losses, NaN for a NaN/Inf update (never aggregated)."""
        if len(client_idx) == 0:
            return np.zeros(0)
        deltas, finite, train_losses = self.work.train(self.model.params, round_idx, client_idx,
                                                       self.aggregator.prox_mu)
        self.model.updates.put(round_idx, client_idx, deltas, finite)
        return train_losses

    def aggregate(self, client_idx: np.ndarray, losses: np.ndarray) -> None:
        """Sync: combine the updates of the given clients (a subset of the round's
        ``train``); ``losses`` are their reports F_k(w_t) (NaN when the rule needs none).
        The round's other updates are dropped and the model version becomes the next round."""
        r = self.model.version
        self._step(client_idx, np.full(len(client_idx), r), losses, None,
                   f"round {r}: the global model has NaN/Inf parameters after aggregating "
                   f"{len(client_idx)} updates ({self.aggregator.name})")
        self.model.updates.discard_version(r)

    def _step(self, client_idx: np.ndarray, versions: np.ndarray, losses: np.ndarray,
              scales: np.ndarray | None, nonfinite: str) -> None:
        """Combine the stored updates of (``versions``, ``client_idx``) through the rule
        (none: no change, unless the rule combines every round); the model version + 1.
        NonFiniteModelError(``nonfinite``)."""
        model, combined = self.model, None
        if len(client_idx) > 0 or self.aggregator.every_round:
            inputs = RoundInputs(
                deltas=model.updates.take(versions, client_idx) if len(client_idx) > 0
                else model.params.new_zeros((0, model.params.numel())),
                weights=self.num_samples(client_idx).astype(np.float64),
                client_idx=np.asarray(client_idx), lr=self.lr(model.version),
                loss_of=self.work.losses, rng=self.work.streams.numpy("aggregate", model.version),
                losses=np.asarray(losses, dtype=np.float64), scales=scales,
                reports=self.reports)
            combined = checked_combined(self.aggregator, self.aggregator.combine(
                model.params, inputs, model.aggregator_state), model.params)
        self.reports = None
        model.advance(combined, nonfinite)

    def state_dict(self) -> dict[str, Any]:
        """What rounds change, as plain data (tensors, arrays, numbers, containers), for
        checkpoints: the global model's (:meth:`GlobalModel.state_dict`) and the
        estimators' (Δ-FL; else None). Keys are named here, not taken from attribute
        names, so renaming an attribute cannot change a checkpoint."""
        return {**self.model.state_dict(), "estimators": self.filter.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (:meth:`state_dict` of a learner of the same run)."""
        self.model.load_state_dict(state)
        self.filter.load_state_dict(state["estimators"])

    def evaluate(self) -> dict[str, tuple[Clients, CohortEval]]:
        """Loss and error of the global model on every training and every test device."""
        return {split: (clients, self.work.evaluate(self.model.params, clients))
                for split, clients in (("train", self.data.train), ("test", self.data.test))}


class AsyncLearner(Learner):
    """The answers the asynchronous server asks for beyond the sync ones
    (``simfl.sim.async_server.AsyncLearnerLike``): tasks train from older model versions,
    kept until no task in flight trains from them."""

    def train_from(self, version: int, client_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Train the clients that started from model ``version`` (the current one or a kept
        one) with that version's lr and seeds (as sync round ``version``). Returns (K,) mean
        training losses (NaN: a NaN/Inf update) and (K,) F_k(w_version), the loss reports a
        rule needs (NaN when it needs none). The updates wait in the store."""
        params = self.model.params_of(version)
        deltas, finite, train_losses = self.work.train(params, version, client_idx,
                                                       self.aggregator.prox_mu)
        self.model.updates.put(version, client_idx, deltas, finite)
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
        old, v = self.model.params, self.model.version
        self._step(client_idx, versions, losses, scales,
                   f"server update {v}: the global model has NaN/Inf parameters after "
                   f"aggregating {len(client_idx)} buffered updates")
        self.model.kept[v] = old

    def discard(self, versions: np.ndarray, client_idx: np.ndarray) -> None:
        """Forget trained updates that will not be aggregated."""
        self.model.updates.discard(versions, client_idx)

    def forget(self, version: int) -> None:
        """No task in flight will train from the old model ``version`` any more."""
        self.model.kept.pop(version, None)
