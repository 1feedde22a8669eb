"""Replay: a learner that journals its answers to the servers while a run is live and,
when a run resumes, gives them back without computing anything while the engine retraces
its steps up to the checkpoint (simfl.runs.checkpoint; docs/design.md §9). What it does with
each member the servers ask is the table of :mod:`simfl.sim.interface`: answers are
journaled, effects skipped while replaying, static members asked again."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import numpy as np
import torch

from simfl.aggregate import Aggregator, Selection
from simfl.data.packed import Clients
from simfl.errors import RunFailed
from simfl.quantile.panel import EstimatorPanel
from simfl.train.evaluate import CohortEval
from simfl.train.learner import AsyncLearner
from simfl.train.local import LocalWork
from simfl.train.threshold import BiasColumns

Entry = tuple[str, Any]  # (learner method, its answer)
T = TypeVar("T")


class ReplayError(RunFailed):
    """A resumed run did not retrace its first pass (code or environment changed)."""


@dataclass
class Journal:
    """The learner's answers to the server, in call order: recorded while live, given
    back while replaying."""

    replay: list[Entry] = field(default_factory=list)  # answers to give back (a resume)
    recorded: list[Entry] = field(default_factory=list)  # answers since the last checkpoint
    last_eval: dict[str, CohortEval] | None = None  # split -> the latest evaluation
    live: bool = True
    position: int = 0  # answers given back so far

    def answer(self, method: str, compute: Callable[[], T]) -> T:
        """``compute()`` (recorded) while live; the next journaled answer while replaying."""
        if self.live:
            computed = compute()
            self.recorded.append((method, copy.deepcopy(computed)))
            return computed
        if self.exhausted or self.replay[self.position][0] != method:
            found = "none" if self.exhausted else self.replay[self.position][0]
            raise ReplayError(f"the replay asked the learner for {method} as its answer "
                              f"{self.position}, where the journal has {found}")
        value: T = self.replay[self.position][1]
        self.position += 1
        return value

    @property
    def exhausted(self) -> bool:
        return self.position >= len(self.replay)


class JournaledLearner(AsyncLearner):
    """A learner (sync and async answers) that journals its answers to the server and,
    while its journal replays, gives them back without computing anything (the server
    cannot tell)."""

    def __init__(self, work: LocalWork, params: torch.Tensor, aggregator: Aggregator,
                 panel: EstimatorPanel | None = None, bias_every: int = 0) -> None:
        super().__init__(work, params, aggregator, panel, bias_every)
        self.journal = Journal()

    def selection_weights(self) -> np.ndarray | None:
        return self.journal.answer("selection_weights", super().selection_weights)

    def report_losses(self, client_idx: np.ndarray) -> np.ndarray:
        return self.journal.answer("report_losses", partial(super().report_losses, client_idx))

    def select(self, losses: np.ndarray, client_idx: np.ndarray, round_idx: int,
               t_s: float) -> tuple[Selection, BiasColumns | None]:
        return self.journal.answer(
            "select", partial(super().select, losses, client_idx, round_idx, t_s))

    def train(self, round_idx: int, client_idx: np.ndarray) -> np.ndarray:
        return self.journal.answer("train", partial(super().train, round_idx, client_idx))

    def train_from(self, version: int, client_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.journal.answer("train_from", partial(super().train_from, version, client_idx))

    def observe_online(self, t_s: float, client_idx: np.ndarray) -> None:
        if self.journal.live:
            super().observe_online(t_s, client_idx)

    def aggregate_buffer(self, client_idx: np.ndarray, versions: np.ndarray,
                         losses: np.ndarray, scales: np.ndarray) -> None:
        if self.journal.live:
            super().aggregate_buffer(client_idx, versions, losses, scales)

    def discard(self, versions: np.ndarray, client_idx: np.ndarray) -> None:
        if self.journal.live:
            super().discard(versions, client_idx)

    def forget(self, version: int) -> None:
        if self.journal.live:
            super().forget(version)

    def aggregate(self, client_idx: np.ndarray, losses: np.ndarray) -> None:
        if self.journal.live:
            super().aggregate(client_idx, losses)

    def evaluate(self) -> dict[str, tuple[Clients, CohortEval]]:
        if self.journal.live:
            result = super().evaluate()
            self.journal.last_eval = {split: ev for split, (_, ev) in result.items()}
            return result
        if self.journal.last_eval is None:
            raise ReplayError("the checkpoint holds no evaluation to replay")
        return {split: (getattr(self.data, split), ev)
                for split, ev in self.journal.last_eval.items()}
