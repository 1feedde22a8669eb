"""The synchronous server as a SimPy process (docs/design.md §5).

SimPy owns the clock; this module decides who takes part and when, and asks a
:class:`LearnerLike` object (numpy in, numpy out) what they compute; it never
imports torch. A round:

1. waits until at least ``min_online`` devices are online (the wait counts in the
   round's duration), then selects
   ``clients_per_round × (1 + over_selection)`` of the devices online now and idle;
2. each downloads the model over its network path (simfl.sim.network); if the
   rule needs losses, computes F_k(w_t) on its data and uploads it;
3. once every report is in (or the deadline passed) the server filters, and the
   kept devices train (their compute time) and upload their update;
4. the round closes when the first ``ceil(kept / (1 + over_selection))`` updates
   have arrived, all kept devices are done, or the deadline passes; the updates
   that arrived are aggregated.

A device that goes offline (availability) or fails (hazard per hour of
participation) before its task ends loses its work ("dropped"); one that
finishes after the round closed is "late". The numerics run once per phase
for the whole cohort, from the model version the devices downloaded. A round's
rows are written once all of its devices are done (stragglers keep their
links busy after the round closed), so every message is logged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import simpy

from simfl.population import Availability
from simfl.population.network import Direction
from simfl.records import Recorder
from simfl.rng import Streams
from simfl.scenario import ServerConfig
from simfl.sim.health import Health, RunStalled
from simfl.sim.network import LinkSharing

EVAL_COST_FRACTION = 1 / 3  # a forward pass costs about a third of a training step


class ExchangeLike(Protocol):
    @property
    def up_bytes(self) -> int: ...
    @property
    def down_bytes(self) -> int: ...
    @property
    def kind(self) -> str: ...


class SelectionLike(Protocol):
    @property
    def keep(self) -> np.ndarray: ...
    @property
    def threshold(self) -> float | None: ...
    @property
    def exchanges(self) -> Sequence[ExchangeLike]: ...


class LearnerLike(Protocol):
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

    def num_samples(self, client_idx: np.ndarray) -> np.ndarray: ...
    def client_ids(self, client_idx: np.ndarray) -> np.ndarray: ...
    def lr(self, round_idx: int) -> float: ...
    def report_losses(self, client_idx: np.ndarray) -> np.ndarray: ...
    # who trains, and the round's bias.parquet columns (None: no estimator panel)
    def select(self, losses: np.ndarray, client_idx: np.ndarray, round_idx: int,
               t_s: float) -> tuple[SelectionLike, Mapping[str, Any] | None]: ...
    # (K,) train losses; NaN marks an update with NaN/Inf values, which is never aggregated
    def train(self, round_idx: int, client_idx: np.ndarray) -> np.ndarray: ...
    def aggregate(self, client_idx: np.ndarray, losses: np.ndarray) -> None: ...


@dataclass(frozen=True)
class Fleet:
    """The devices as the server sees them: when they are online, how fast they compute."""

    availability: Availability
    train_s_per_sample: np.ndarray  # (N,) seconds per training sample on the device
    failure_rate_per_h: np.ndarray  # (N,) failure hazard per hour of participation
    local_epochs: int


RoundHook = Callable[[int, float], None]  # (rounds completed, simulated time) after each round


@dataclass
class _Round:
    """What happened to each selected device of one round, filled in as events arrive."""

    index: int
    t_select_s: float  # when the devices were picked (after any wait for enough online)
    num_online: int
    devices: np.ndarray  # (K,) selected device (= client) indices
    gone_at_s: np.ndarray  # (K,) when each device goes offline or fails
    busy: np.ndarray  # (N,) the server's mask of devices in a task; freed as tasks end
    status: np.ndarray  # (K,) object: aggregated / filtered / dropped / late / nonfinite
    loss: np.ndarray  # (K,) reported F_k(w_t), NaN if none
    train_loss: np.ndarray  # (K,)
    t_done_s: np.ndarray  # (K,) when the device finished (or left)
    reported: np.ndarray  # (K,) bool: the device's F_k(w_t) is in ``loss``
    trained: np.ndarray  # (K,) bool: the device was sent to train (``train_loss`` is its)
    messages: list[tuple[int, str, str, int, float, float]] = field(default_factory=list)
    tasks: list[simpy.Process] = field(default_factory=list)  # every device process
    threshold: float | None = None
    num_kept: int = 0
    t_start_s: float = math.nan  # when the server began the round
    t_end_s: float = math.nan


def sync_server(
    env: simpy.Environment,
    cfg: ServerConfig,
    fleet: Fleet,
    net: LinkSharing,
    learner: LearnerLike,
    recorder: Recorder,
    streams: Streams,
    health: Health,
    after_round: RoundHook,
) -> Generator[simpy.Event, Any, None]:
    """Run rounds ``0 .. cfg.num_rounds - 1``."""
    busy = np.zeros(fleet.availability.num_devices, dtype=bool)
    for r in range(cfg.num_rounds):
        t_begin = env.now  # the round's start: waiting for devices is part of the round
        while True:
            if fleet.availability.num_online(env.now) >= cfg.min_online:
                rnd = _select(env.now, cfg, fleet, busy, streams, r, learner)
                if len(rnd.devices):
                    break  # else every online device is still busy with a late task
            check_wait(env.now, t_begin, cfg, fleet, f"round {r}")
            yield env.timeout(cfg.wait_poll_s)
        rnd.t_start_s = t_begin
        if learner.wants_checkins:  # every online device checks in when the round opens
            learner.observe_online(env.now, fleet.availability.online_devices(env.now))
        busy[rnd.devices] = True
        yield from _run_round(env, cfg, fleet, net, learner, rnd, recorder)
        health.round_done(r, int((rnd.status == "aggregated").sum()), rnd.threshold,
                          rnd.status.tolist())
        env.process(_finish(env, rnd, learner, recorder, health))  # waits for stragglers
        after_round(r + 1, env.now)
        wait_s = rnd.t_start_s + cfg.round_interval_s - env.now
        if wait_s > 0:
            yield env.timeout(wait_s)


def check_wait(now: float, since: float, cfg: ServerConfig, fleet: Fleet, what: str) -> None:
    """RunStalled if the server has waited for devices since ``since`` for longer than
    ``server.max_wait_s``, or no device will ever come online again."""
    if now >= fleet.availability.t_off_s.max(initial=0.0):
        raise RunStalled(f"{what}: no device comes online after t = {now:.0f} s (the "
                         f"availability ends: population.availability.horizon_s or the "
                         f"trace's last interval)")
    if now - since >= cfg.max_wait_s:
        raise RunStalled(f"{what}: waited {(now - since) / 3600:.1f} h of simulated time "
                         f"for idle online devices (server.max_wait_s = {cfg.max_wait_s:.0f})")


def _select(now: float, cfg: ServerConfig, fleet: Fleet, busy: np.ndarray, streams: Streams,
            r: int, learner: LearnerLike) -> _Round:
    """Draw the round's devices among those online and idle, uniformly or with the rule's
    chances; the rule may ask for a share of ``clients_per_round`` (nearest integer, >= 1)."""
    size = max(1, round(cfg.clients_per_round * learner.cohort_fraction))
    wanted = math.ceil(size * (1 + cfg.over_selection))
    devices = np.sort(fleet.availability.sample_online(
        now, wanted, streams.numpy("selection", r), busy, learner.selection_weights()))
    gone_at = leave_times(fleet, devices, now, streams.numpy("failure", r))
    k = len(devices)
    return _Round(r, now, fleet.availability.num_online(now), devices, gone_at, busy,
                  np.full(k, "", dtype=object), np.full(k, np.nan), np.full(k, np.nan),
                  np.full(k, math.nan), np.zeros(k, dtype=bool), np.zeros(k, dtype=bool))


def leave_times(fleet: Fleet, devices: np.ndarray, now: float,
                rng: np.random.Generator) -> np.ndarray:
    """(K,) when each device, starting a task at ``now``, goes offline or fails (hazard
    ``failure_rate_per_h`` per hour of participation, one exponential draw each)."""
    failure_rate_per_s = fleet.failure_rate_per_h[devices] / 3600.0
    with np.errstate(divide="ignore"):
        fail_after_s = rng.exponential(1.0, len(devices)) / failure_rate_per_s
    return np.minimum(fleet.availability.online_until(devices, now), now + fail_after_s)


def _run_round(env: simpy.Environment, cfg: ServerConfig, fleet: Fleet, net: LinkSharing,
               learner: LearnerLike, rnd: _Round,
               recorder: Recorder) -> Generator[simpy.Event, Any, None]:
    """The round's timeline up to aggregation; sets statuses and ``rnd.t_end_s``."""
    deadline = env.timeout(cfg.deadline_s) if cfg.deadline_s > 0 else env.event()
    samples = learner.num_samples(rnd.devices)
    keep = np.arange(len(rnd.devices))
    download = learner.model_bytes
    if learner.needs_losses:  # download, evaluate F_k(w_t), report; then filter
        keep = yield from _loss_reports(env, net, fleet, learner, rnd, samples, deadline,
                                        recorder)
        download = 0
    rnd.num_kept = len(keep)
    rnd.train_loss[keep] = learner.train(rnd.index, rnd.devices[keep])
    rnd.trained[keep] = True
    train_s = fleet.train_s_per_sample[rnd.devices] * samples * fleet.local_epochs
    arrived: list[int] = []
    enough = env.event()
    needed = math.ceil(len(keep) / (1 + cfg.over_selection))
    tasks = [env.process(_phase(env, net, rnd, int(i), download, "model", train_s[i],
                                learner.model_bytes, "update", arrived, enough, needed))
             for i in keep]
    rnd.tasks += tasks
    if tasks and not enough.triggered:
        yield simpy.AllOf(env, tasks) | enough | deadline
    on_time = np.sort(np.array(arrived, dtype=np.int64))  # sum order independent of arrivals
    nonfinite = np.isnan(rnd.train_loss[on_time])  # the learner's mark of a NaN/Inf update
    rnd.status[on_time] = np.where(nonfinite, "nonfinite", "aggregated")
    rnd.status[np.setdiff1d(keep, on_time)] = "late"  # or dropped: decided in _finish
    kept = on_time[~nonfinite]
    learner.aggregate(rnd.devices[kept], rnd.loss[kept])
    rnd.t_end_s = env.now


def _loss_reports(env: simpy.Environment, net: LinkSharing, fleet: Fleet, learner: LearnerLike,
                  rnd: _Round, samples: np.ndarray, deadline: simpy.Event,
                  recorder: Recorder) -> Generator[simpy.Event, Any, np.ndarray]:
    """Every selected device downloads, evaluates and reports; returns the kept slots."""
    eval_s = fleet.train_s_per_sample[rnd.devices] * samples * EVAL_COST_FRACTION
    tasks = [env.process(_phase(env, net, rnd, i, learner.model_bytes, "model", eval_s[i],
                                learner.loss_report_bytes, "loss"))
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
        recorder.append("bias", **bias)
    rnd.threshold = selection.threshold
    finished_protocol = yield from _protocol(env, net, rnd, ready, selection.exchanges, deadline)
    if not finished_protocol:
        rnd.status[ready] = "late"  # the deadline passed during the threshold protocol
        return ready[:0]
    rnd.status[ready[~selection.keep]] = "filtered"
    return ready[selection.keep]


def _protocol(env: simpy.Environment, net: LinkSharing, rnd: _Round, slots: np.ndarray,
              exchanges: Sequence[ExchangeLike],
              deadline: simpy.Event) -> Generator[simpy.Event, Any, bool]:
    """The threshold protocol's exchanges: in each, every device uploads its message, then
    the server answers each; returns False if the deadline passed first."""
    for exchange in exchanges:
        steps: tuple[tuple[Direction, int], ...] = (("up", exchange.up_bytes),
                                                    ("down", exchange.down_bytes))
        for direction, num_bytes in steps:
            if num_bytes == 0:
                continue
            sends = [env.process(_message(env, net, rnd, int(rnd.devices[i]), direction,
                                          num_bytes, exchange.kind)) for i in slots]
            rnd.tasks += sends
            yield simpy.AllOf(env, sends) | deadline
            if deadline.processed:  # (a Timeout counts as triggered from its creation)
                return False
    return True


def _message(env: simpy.Environment, net: LinkSharing, rnd: _Round, device: int,
             direction: Direction, num_bytes: int, kind: str) -> Generator[simpy.Event, Any, None]:
    start = env.now
    yield net.transfer(device, num_bytes, direction)
    rnd.messages.append((device, direction, kind, num_bytes, start, env.now))


def _phase(env: simpy.Environment, net: LinkSharing, rnd: _Round, i: int, down_bytes: int,
           down_kind: str, compute_s: float, up_bytes: int, up_kind: str,
           arrived: list[int] | None = None, enough: simpy.Event | None = None,
           needed: int = 0) -> Generator[simpy.Event, Any, bool]:
    """One device: optional download, compute, optional upload. Returns whether it
    finished before going offline; records its messages and finishing time."""
    device = int(rnd.devices[i])
    rnd.busy[device] = True
    if down_bytes:
        yield from _message(env, net, rnd, device, "down", down_bytes, down_kind)
    if compute_s > 0:
        yield env.timeout(compute_s)
    if up_bytes:
        yield from _message(env, net, rnd, device, "up", up_bytes, up_kind)
    rnd.t_done_s[i] = env.now
    rnd.busy[device] = False
    survived = env.now <= rnd.gone_at_s[i]
    if arrived is not None and enough is not None and survived and not enough.triggered:
        arrived.append(i)
        if len(arrived) >= needed:
            enough.succeed()
    return survived


def _finish(env: simpy.Environment, rnd: _Round, learner: LearnerLike, recorder: Recorder,
            health: Health) -> Generator[simpy.Event, Any, None]:
    """Wait for the round's stragglers, then write the round's rows."""
    yield simpy.AllOf(env, rnd.tasks)
    left = (rnd.status == "late") & (rnd.t_done_s > rnd.gone_at_s)
    rnd.status[left] = "dropped"
    dropped = rnd.status == "dropped"
    rnd.t_done_s[dropped] = np.minimum(rnd.t_done_s[dropped], rnd.gone_at_s[dropped])
    health.devices_done(rnd.status.tolist())
    _record(rnd, learner, recorder)


def _record(rnd: _Round, learner: LearnerLike, recorder: Recorder) -> None:
    k = len(rnd.devices)
    msg = rnd.messages
    msg_device = np.array([m[0] for m in msg], dtype=np.int64)
    msg_up = np.array([m[1] == "up" for m in msg], dtype=bool)
    msg_bytes = np.array([m[3] for m in msg], dtype=np.int64)
    slot = np.searchsorted(rnd.devices, msg_device)
    down = np.bincount(slot[~msg_up], msg_bytes[~msg_up], minlength=k).astype(np.int64)
    up = np.bincount(slot[msg_up], msg_bytes[msg_up], minlength=k).astype(np.int64)
    if msg:
        recorder.append("comm", round=rnd.index, client_idx=msg_device,
                        direction=[m[1] for m in msg], kind=[m[2] for m in msg],
                        bytes=msg_bytes, t_start_s=np.array([m[4] for m in msg]),
                        t_end_s=np.array([m[5] for m in msg]))
    if k:
        recorder.append(
            "clients", round=rnd.index, client_id=learner.client_ids(rnd.devices),
            client_idx=rnd.devices, status=rnd.status.astype(str),
            loss_reported=np.ma.masked_array(rnd.loss, ~rnd.reported),
            train_loss=np.ma.masked_array(rnd.train_loss, ~rnd.trained),
            num_samples=learner.num_samples(rnd.devices),
            bytes_down=down, bytes_up=up, t_dispatch_s=rnd.t_select_s, t_done_s=rnd.t_done_s,
            staleness=0, model_version=rnd.index)
    recorder.append(
        "rounds", round=rnd.index, t_start_s=rnd.t_start_s, t_end_s=rnd.t_end_s,
        num_online=rnd.num_online, num_selected=k,
        num_kept=rnd.num_kept,
        num_aggregated=int((rnd.status == "aggregated").sum()),
        num_dropped=int((rnd.status == "dropped").sum()), quantile_estimate=rnd.threshold,
        lr=learner.lr(rnd.index), bytes_down=int(down.sum()), bytes_up=int(up.sum()))
