"""The synchronous server as a SimPy process (DESIGN.md §3).

SimPy owns the clock; this module decides who takes part and when, and asks a
:class:`Learner`-like object (numpy in, numpy out) what they compute. It never
imports torch. At this stage every training device is always online and a
round lasts ``round_duration_s`` simulated seconds; the device population
(availability, compute and network costs, dropouts) plugs in through
``select`` and the round's timeline.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import simpy

from simfl.records import Recorder
from simfl.rng import Streams
from simfl.scenario import ServerConfig

LOSS_REPORT_BYTES = 4  # one float32


class SelectionLike(Protocol):
    @property
    def keep(self) -> np.ndarray: ...
    @property
    def threshold(self) -> float | None: ...


class LearnerLike(Protocol):
    """What the server needs from the numerics (see simfl.train.learner.Learner)."""

    @property
    def needs_losses(self) -> bool: ...
    @property
    def model_bytes(self) -> int: ...

    def num_samples(self, client_idx: np.ndarray) -> np.ndarray: ...
    def client_ids(self, client_idx: np.ndarray) -> np.ndarray: ...
    def lr(self, round_idx: int) -> float: ...
    def report_losses(self, client_idx: np.ndarray) -> np.ndarray: ...
    def select(self, losses: np.ndarray, client_idx: np.ndarray) -> SelectionLike: ...
    def train(self, round_idx: int, client_idx: np.ndarray) -> np.ndarray: ...
    def aggregate(self, client_idx: np.ndarray) -> None: ...


@dataclass
class ServerState:
    """Everything needed to continue a run at a round boundary (no generator frames)."""

    next_round: int = 0


RoundHook = Callable[[int, float], None]  # (rounds completed, simulated time) after each round


def sync_server(
    env: simpy.Environment,
    cfg: ServerConfig,
    num_clients: int,
    learner: LearnerLike,
    recorder: Recorder,
    streams: Streams,
    state: ServerState,
    after_round: RoundHook,
) -> Generator[simpy.Event, Any, None]:
    """Run rounds ``state.next_round .. cfg.num_rounds - 1``."""
    while state.next_round < cfg.num_rounds:
        r, t_start = state.next_round, env.now
        rng = streams.numpy("selection", r)
        selected = np.sort(rng.choice(num_clients, min(cfg.clients_per_round, num_clients),
                                      replace=False))
        losses = np.full(len(selected), np.nan)
        keep, threshold = np.ones(len(selected), dtype=bool), None
        if learner.needs_losses:
            losses = learner.report_losses(selected)
            selection = learner.select(losses, selected)
            keep, threshold = selection.keep, selection.threshold
        train_losses = np.full(len(selected), np.nan)
        train_losses[keep] = learner.train(r, selected[keep])
        yield env.timeout(cfg.round_duration_s)
        learner.aggregate(selected[keep])
        _record_round(recorder, learner, r, (t_start, env.now), num_clients, selected, keep,
                      losses, train_losses, threshold)
        state.next_round = r + 1
        after_round(r + 1, env.now)


def _record_round(
    recorder: Recorder,
    learner: LearnerLike,
    r: int,
    span_s: tuple[float, float],
    num_online: int,
    selected: np.ndarray,
    keep: np.ndarray,
    losses: np.ndarray,
    train_losses: np.ndarray,
    threshold: float | None,
) -> None:
    t_start, t_end = span_s
    model_bytes = learner.model_bytes
    report_bytes = LOSS_REPORT_BYTES if learner.needs_losses else 0
    bytes_down = np.full(len(selected), model_bytes)
    bytes_up = report_bytes + np.where(keep, model_bytes, 0)
    recorder.append(
        "clients", round=r, client_id=learner.client_ids(selected), client_idx=selected,
        status=np.where(keep, "aggregated", "filtered"), loss_reported=losses,
        train_loss=train_losses, num_samples=learner.num_samples(selected),
        bytes_down=bytes_down, bytes_up=bytes_up, t_dispatch_s=t_start, t_done_s=t_end,
        staleness=0,
    )
    messages = [("down", "model", selected, model_bytes)]
    if report_bytes:
        messages.append(("up", "loss", selected, report_bytes))
    messages.append(("up", "update", selected[keep], model_bytes))
    for direction, kind, who, size in messages:
        if len(who):
            recorder.append("comm", round=r, client_idx=who, direction=direction, kind=kind,
                            bytes=np.full(len(who), size), t_start_s=t_start, t_end_s=t_end)
    recorder.append(
        "rounds", round=r, t_start_s=t_start, t_end_s=t_end, num_online=num_online,
        num_selected=len(selected), num_kept=int(keep.sum()),
        num_aggregated=int(keep.sum()), num_dropped=0,
        quantile_estimate=threshold, lr=learner.lr(r),
        bytes_down=int(bytes_down.sum()), bytes_up=int(bytes_up.sum()),
    )
