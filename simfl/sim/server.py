"""The synchronous server as a SimPy process (docs/design.md §5).

SimPy owns the clock; this module decides who takes part and when, and asks a
:class:`LearnerLike` object (numpy in, numpy out) what they compute; it never
imports torch. A round:

1. waits until at least ``min_online`` devices are online (the wait counts in the
   round's duration; it ends at the instant they are, computed from the availability
   intervals, or when a busy device is freed: simfl.sim.tasks.wait_for_devices), then
   selects
   ``clients_per_round × (1 + over_selection)`` of the devices online now and idle;
2. each downloads the model over its network path (simfl.sim.links); if the
   rule needs losses, computes F_k(w_t) on its data and uploads it;
3. once every report is in (or the deadline passed) the server filters, and the
   kept devices train (their compute time) and upload their update;
4. the round closes when the first ``ceil(kept / (1 + over_selection))`` updates
   have arrived, all kept devices are done, or the deadline passes; the updates
   that arrived are aggregated.

A device that goes offline (availability) or fails (hazard per hour of
participation) before its task ends loses its work ("dropped"): its task is
interrupted at that instant, its transfer in flight cancelled and its link share
released (simfl.sim.tasks.interrupt_at); one that finishes after the round
closed is "late". The numerics run once per phase
for the whole cohort, from the model version the devices downloaded. A round's
rows are written once all of its devices are done (stragglers keep their
links busy after the round closed), so every message is logged.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import simpy

from simfl.population.availability import sample_online
from simfl.population.network import Direction
from simfl.records import RoundRow
from simfl.scenario import ServerConfig
from simfl.sim.tasks import (
    EVAL_COST_FRACTION,
    ClientFacts,
    ExchangeLike,
    MessageLog,
    Outcomes,
    RoundHook,
    TaskPlan,
    Wiring,
    check_wait,
    client_rows,
    comm_rows,
    device_task,
    interrupt_at,
    leave_times,
    shadow_rows,
    wait_for_devices,
)


class SelectionLike(Protocol):
    @property
    def keep(self) -> np.ndarray: ...
    @property
    def threshold(self) -> float | None: ...
    @property
    def exchanges(self) -> Sequence[ExchangeLike]: ...
    @property
    def shadow(self) -> Sequence[tuple[str, Sequence[ExchangeLike]]]: ...


class LearnerLike(ClientFacts, Protocol):
    """What the server needs from the numerics (see simfl.train.learner.Learner)."""

    @property
    def needs_losses(self) -> bool: ...
    @property
    def model_bytes(self) -> int: ...
    @property
    def loss_report_bytes(self) -> int: ...
    @property
    def wants_checkins(self) -> bool: ...
    @property
    def cohort_fraction(self) -> float: ...

    def selection_weights(self) -> np.ndarray | None: ...

    def observe_online(self, t_s: float, client_idx: np.ndarray) -> None: ...

    def lr(self, round_idx: int) -> float: ...
    def report_losses(self, client_idx: np.ndarray) -> np.ndarray: ...
    # who trains, and the round's bias.parquet columns (None: no estimator panel)
    def select(self, losses: np.ndarray, client_idx: np.ndarray, round_idx: int,
               t_s: float) -> tuple[SelectionLike, Mapping[str, Any] | None]: ...
    # (K,) train losses; NaN marks an update with NaN/Inf values, which is never aggregated
    def train(self, round_idx: int, client_idx: np.ndarray) -> np.ndarray: ...
    def aggregate(self, client_idx: np.ndarray, losses: np.ndarray) -> None: ...


@dataclass
class _Server:
    """One synchronous server: what it runs in, its configuration, the numerics, and which
    devices are in a task (set as a task starts, freed as it ends)."""

    wiring: Wiring
    cfg: ServerConfig
    learner: LearnerLike
    busy: np.ndarray  # (N,) bool
    freed: simpy.Event | None = None  # while the server waits for devices: a task ended


@dataclass(kw_only=True)
class _Round:
    """What happened to each selected device of one round, filled in as events arrive."""

    index: int
    t_select_s: float  # when the devices were picked (after any wait for enough online)
    num_online: int
    devices: np.ndarray  # (K,) selected device (= client) indices
    gone_at_s: np.ndarray  # (K,) when each device goes offline or fails
    log: MessageLog  # every message of the round
    status: np.ndarray  # (K,) object: aggregated / filtered / dropped / late / nonfinite
    loss: np.ndarray  # (K,) reported F_k(w_t), NaN if none
    train_loss: np.ndarray  # (K,)
    t_done_s: np.ndarray  # (K,) when the device finished (or left)
    reported: np.ndarray  # (K,) bool: the device's F_k(w_t) is in ``loss``
    trained: np.ndarray  # (K,) bool: the device was sent to train (``train_loss`` is its)
    left: np.ndarray  # (K,) bool: its task was interrupted (the device went offline or failed)
    tasks: list[simpy.Process] = field(default_factory=list)  # every device process
    threshold: float | None = None
    num_kept: int = 0
    t_start_s: float = math.nan  # when the server began the round
    t_end_s: float = math.nan


class _FirstArrivals:
    """The positions (in the round's (K,) arrays) of the devices whose updates arrived in
    time, until ``needed`` have: then ``enough``."""

    def __init__(self, env: simpy.Environment, needed: int) -> None:
        self.arrived: list[int] = []
        self.enough, self.needed = env.event(), needed

    def arrive(self, pos: int) -> None:
        if not self.enough.triggered:
            self.arrived.append(pos)
            if len(self.arrived) >= self.needed:
                self.enough.succeed()


def sync_server(wiring: Wiring, cfg: ServerConfig, learner: LearnerLike,
                after_round: RoundHook) -> Generator[simpy.Event, Any, None]:
    """Run rounds ``0 .. cfg.num_rounds - 1``."""
    env, availability = wiring.env, wiring.fleet.availability
    server = _Server(wiring, cfg, learner, np.zeros(availability.num_devices, dtype=bool))
    for r in range(cfg.num_rounds):
        t_begin = env.now  # the round's start: waiting for devices is part of the round
        while True:
            if availability.num_online(env.now) >= cfg.min_online:
                rnd = _select(server, r)
                if len(rnd.devices):
                    break  # else every online device is still busy with a late task
            check_wait(env.now, t_begin, cfg, wiring.fleet, f"round {r}")
            server.freed = env.event()
            yield wait_for_devices(env, availability, cfg.min_online, t_begin, cfg,
                                   server.freed)
            server.freed = None
        rnd.t_start_s = t_begin
        if learner.wants_checkins:  # every online device checks in when the round opens
            learner.observe_online(env.now, availability.online_devices(env.now))
        server.busy[rnd.devices] = True
        yield from _run_round(server, rnd)
        wiring.health.round_done(r, int((rnd.status == "aggregated").sum()), rnd.threshold,
                                 rnd.status.tolist())
        env.process(_finish(server, rnd))  # waits for stragglers
        after_round(r + 1, env.now)
        wait_s = rnd.t_start_s + cfg.round_interval_s - env.now
        if wait_s > 0:
            yield env.timeout(wait_s)


def _select(server: _Server, r: int) -> _Round:
    """Draw the round's devices among those online and idle, uniformly or with the rule's
    chances; the rule may ask for a share of ``clients_per_round`` (nearest integer, >= 1)."""
    wiring, cfg = server.wiring, server.cfg
    now, fleet, streams = wiring.env.now, wiring.fleet, wiring.streams
    size = max(1, round(cfg.clients_per_round * server.learner.cohort_fraction))
    wanted = math.ceil(size * (1 + cfg.over_selection))
    devices = np.sort(sample_online(
        fleet.availability, now, wanted, streams.numpy("selection", r), server.busy,
        server.learner.selection_weights()))
    gone_at = leave_times(fleet, devices, now, streams.numpy("failure", r))
    k = len(devices)
    return _Round(index=r, t_select_s=now, num_online=fleet.availability.num_online(now),
                  devices=devices, gone_at_s=gone_at, log=MessageLog(wiring.env, wiring.net),
                  status=np.full(k, "", dtype=object), loss=np.full(k, np.nan),
                  train_loss=np.full(k, np.nan), t_done_s=np.full(k, math.nan),
                  reported=np.zeros(k, dtype=bool), trained=np.zeros(k, dtype=bool),
                  left=np.zeros(k, dtype=bool))


def _run_round(server: _Server, rnd: _Round) -> Generator[simpy.Event, Any, None]:
    """The round's timeline up to aggregation; sets statuses and ``rnd.t_end_s``."""
    env, fleet, cfg, learner = server.wiring.env, server.wiring.fleet, server.cfg, server.learner
    deadline = env.timeout(cfg.deadline_s) if cfg.deadline_s > 0 else env.event()
    samples = learner.num_samples(rnd.devices)
    keep = np.arange(len(rnd.devices))
    download = learner.model_bytes
    if learner.needs_losses:  # download, evaluate F_k(w_t), report; then filter
        keep = yield from _loss_reports(server, rnd, samples, deadline)
        download = 0
    rnd.num_kept = len(keep)
    rnd.train_loss[keep] = learner.train(rnd.index, rnd.devices[keep])
    rnd.trained[keep] = True
    train_s = fleet.train_s_per_sample[rnd.devices] * samples * fleet.local_epochs
    first = _FirstArrivals(env, math.ceil(len(keep) / (1 + cfg.over_selection)))
    tasks = [env.process(_task(server, rnd, int(i), TaskPlan(
        download, "model", train_s[i], learner.model_bytes, "update"), first)) for i in keep]
    rnd.tasks += tasks
    if tasks and not first.enough.triggered:
        yield simpy.AllOf(env, tasks) | first.enough | deadline
    on_time = np.sort(np.array(first.arrived, dtype=np.int64))  # sum order: not arrivals'
    nonfinite = np.isnan(rnd.train_loss[on_time])  # the learner's mark of a NaN/Inf update
    rnd.status[on_time] = np.where(nonfinite, "nonfinite", "aggregated")
    rnd.status[np.setdiff1d(keep, on_time)] = "late"  # or dropped: decided in _finish
    kept = on_time[~nonfinite]
    learner.aggregate(rnd.devices[kept], rnd.loss[kept])
    rnd.t_end_s = env.now


def _loss_reports(server: _Server, rnd: _Round, samples: np.ndarray,
                  deadline: simpy.Event) -> Generator[simpy.Event, Any, np.ndarray]:
    """Every selected device downloads, evaluates and reports; returns the positions of
    the kept ones."""
    env, fleet, learner = server.wiring.env, server.wiring.fleet, server.learner
    eval_s = fleet.train_s_per_sample[rnd.devices] * samples * EVAL_COST_FRACTION
    tasks = [env.process(_task(server, rnd, i, TaskPlan(
        learner.model_bytes, "model", eval_s[i], learner.loss_report_bytes, "loss")))
        for i in range(len(rnd.devices))]
    rnd.tasks += tasks
    yield simpy.AllOf(env, tasks) | deadline
    finished = np.array([p.triggered for p in tasks], dtype=bool)
    survived = np.array([p.triggered and p.value for p in tasks], dtype=bool)
    rnd.status[~finished] = "late"  # or dropped: decided in _finish
    rnd.status[finished & ~survived] = "dropped"
    ready = np.flatnonzero(rnd.status == "")
    if len(ready) == 0:
        return ready
    rnd.loss[ready] = learner.report_losses(rnd.devices[ready])
    rnd.reported[ready] = True
    selection, bias = learner.select(rnd.loss[ready], rnd.devices[ready], rnd.index, env.now)
    if bias is not None:
        server.wiring.recorder.append("bias", **bias)
    for rows in shadow_rows(rnd.index, rnd.devices[ready], selection.shadow):
        server.wiring.recorder.write(rows)
    rnd.threshold = selection.threshold
    finished_protocol = yield from _protocol(server, rnd, ready, selection.exchanges, deadline)
    if not finished_protocol:
        rnd.status[ready] = "late"  # the deadline passed during the threshold protocol
        return ready[:0]
    rnd.status[ready[~selection.keep]] = "filtered"
    return ready[selection.keep]


def _protocol(server: _Server, rnd: _Round, positions: np.ndarray,
              exchanges: Sequence[ExchangeLike],
              deadline: simpy.Event) -> Generator[simpy.Event, Any, bool]:
    """The threshold protocol's exchanges: in each, every device uploads its message, then
    the server answers each; returns False if the deadline passed first."""
    env = server.wiring.env
    for exchange in exchanges:
        steps: tuple[tuple[Direction, int], ...] = (("up", exchange.up_bytes),
                                                    ("down", exchange.down_bytes))
        for direction, num_bytes in steps:
            if num_bytes == 0:
                continue
            sends = [env.process(rnd.log.send(int(rnd.devices[i]), direction, num_bytes,
                                              exchange.kind)) for i in positions]
            rnd.tasks += sends
            yield simpy.AllOf(env, sends) | deadline
            if deadline.processed:  # (a Timeout counts as triggered from its creation)
                return False
    return True


def _task(server: _Server, rnd: _Round, pos: int, plan: TaskPlan,
          first: _FirstArrivals | None = None) -> Generator[simpy.Event, Any, bool]:
    """The round's device at position ``pos`` runs ``plan``; returns whether it finished
    before going offline (then, if its update counts towards closing the round, it tells
    ``first``). Where it goes offline first, the task ends then (interrupted)."""
    env, device = server.wiring.env, int(rnd.devices[pos])
    server.busy[device] = True
    interrupt_at(env, float(rnd.gone_at_s[pos]))
    try:
        yield from device_task(rnd.log, device, plan)
    except simpy.Interrupt:
        rnd.left[pos] = True
    rnd.t_done_s[pos] = env.now
    server.busy[device] = False
    if server.freed is not None and not server.freed.triggered:
        server.freed.succeed()
    if first is not None and not rnd.left[pos]:
        first.arrive(pos)
    return not rnd.left[pos]


def _finish(server: _Server, rnd: _Round) -> Generator[simpy.Event, Any, None]:
    """Wait for the round's stragglers, then write the round's rows."""
    yield simpy.AllOf(server.wiring.env, rnd.tasks)
    rnd.status[(rnd.status == "late") & rnd.left] = "dropped"
    server.wiring.health.devices_done(rnd.status.tolist())
    _record(server, rnd)


def _record(server: _Server, rnd: _Round) -> None:
    recorder, learner = server.wiring.recorder, server.learner
    comm = comm_rows(rnd.index, rnd.log.messages)
    k = len(rnd.devices)
    msg_up = np.array([d == "up" for d in comm.direction], dtype=bool)
    pos = np.searchsorted(rnd.devices, comm.client_idx)  # each message's device in the round
    down = np.bincount(pos[~msg_up], comm.bytes[~msg_up], minlength=k).astype(np.int64)
    up = np.bincount(pos[msg_up], comm.bytes[msg_up], minlength=k).astype(np.int64)
    if rnd.log.messages:
        recorder.write(comm)
    if k:
        recorder.write(client_rows(rnd.index, Outcomes(
            devices=rnd.devices, status=rnd.status.astype(str), loss=rnd.loss,
            reported=rnd.reported, train_loss=rnd.train_loss, trained=rnd.trained,
            bytes_down=down, bytes_up=up, t_dispatch_s=rnd.t_select_s, t_done_s=rnd.t_done_s,
            staleness=0, model_version=rnd.index), learner))
    recorder.write(RoundRow(
        round=rnd.index, t_start_s=rnd.t_start_s, t_end_s=rnd.t_end_s,
        num_online=rnd.num_online, num_selected=k, num_kept=rnd.num_kept,
        num_aggregated=int((rnd.status == "aggregated").sum()),
        num_dropped=int((rnd.status == "dropped").sum()), quantile_estimate=rnd.threshold,
        lr=learner.lr(rnd.index), bytes_down=int(down.sum()), bytes_up=int(up.sum())))
