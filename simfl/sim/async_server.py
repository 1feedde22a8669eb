"""The asynchronous server (FedBuff) as a SimPy process (docs/design.md §6, docs/async.md).

Nguyen, Malik, Zhao, Sanjabi, Rabbat, Esmaeili, Huba, "Federated Learning with
Buffered Asynchronous Aggregation", AISTATS 2022. The server keeps
``concurrency`` devices busy: whenever slots are free it draws idle online
devices (all the slots that free at one instant are filled by one draw, after
every other event of that instant); a device starts at most one task per model
version (a second would redo the first's work). Each device downloads the
current model version v, computes (F_k(w_v) first when the rule filters, then
local training) and uploads its update (with its loss report). An arrival τ = (current version
− v) stale is dropped if τ > ``max_staleness``, else buffered; every
``buffer_size`` buffered arrivals the server updates the model,

    w ← w + η_g Σ_k (α_k / Σ_j α_j) s(τ_k) Δ_k,

over the buffer (Δ-FL: over the buffered updates whose F_k(w_{v_k}) ≥ η̂, the
threshold estimated from the buffer's losses), and the version increases by
one. s is 1, (1 + τ)^−a, or the hinge 1 if τ ≤ b else 1 / (a(τ − b) + 1) (Xie,
Koyejo, Gupta, "Asynchronous Federated Optimization", 2019). The weights are
normalised by Σ α only, so stale updates count less in absolute terms, as in
FedBuff; with s = 1, η_g = 1 and the whole cohort arriving at once this is sync
FedAvg's step.

The numerics stay batched: the devices that started from one model version are
trained in one call when the first of them arrives (those certain to leave
before their compute ends are skipped), from the kept version. A device that
goes offline or fails before its upload ends ("dropped") never contributes; it
holds its slot until its task would have ended (the server's timeout). Tasks
that end after the last server update are "late". ``rounds.parquet`` gets one
row per server update, ``clients.parquet`` one per task, in the update interval
in which it ended.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import simpy

from simfl.population.network import Direction
from simfl.records import Recorder
from simfl.rng import Streams
from simfl.scenario import ServerConfig
from simfl.sim.health import Health
from simfl.sim.network import LinkSharing
from simfl.sim.server import (
    EVAL_COST_FRACTION,
    Fleet,
    LearnerLike,
    RoundHook,
    check_wait,
    leave_times,
)

LATER = simpy.events.EventPriority(simpy.events.NORMAL + 1)  # after the normal events of an instant


class AsyncLearnerLike(LearnerLike, Protocol):
    """What the async server needs beyond the sync one (see simfl.train.learner.Learner)."""

    # (K,) train losses (NaN: a NaN/Inf update), (K,) F_k(w_version) (NaN: not needed)
    def train_from(self, version: int, client_idx: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]: ...
    # the rule's combine over the buffer kept, losses F_k(w_{v_k}), scales η_g s(τ_k)
    def aggregate_buffer(self, client_idx: np.ndarray, versions: np.ndarray,
                         losses: np.ndarray, scales: np.ndarray) -> None: ...
    def discard(self, versions: np.ndarray, client_idx: np.ndarray) -> None: ...
    def forget(self, version: int) -> None: ...


def staleness_weight(cfg: ServerConfig, staleness: np.ndarray) -> np.ndarray:
    """s(τ) of ``cfg.staleness`` for (K,) staleness values τ >= 0."""
    tau = np.asarray(staleness, dtype=np.float64)
    a, b = cfg.staleness_a, cfg.staleness_b
    if cfg.staleness == "polynomial":
        return np.asarray((1.0 + tau) ** -a)
    if cfg.staleness == "hinge":
        return np.where(tau <= b, 1.0, 1.0 / (a * (tau - b) + 1.0))
    return np.ones_like(tau)


class _Later(simpy.Event):
    """Succeeds now, after every event of this instant at normal priority (also those they
    schedule now): built as simpy's own Timeout is, at a lower priority."""

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, LATER)


@dataclass(eq=False)
class _Task:
    """One device's download, compute and upload from one model version."""

    device: int
    version: int
    t_dispatch_s: float
    gone_at_s: float  # when the device goes offline or fails
    compute_s: float
    status: str = ""
    loss: float = math.nan  # F_k(w_version), reported with the update
    train_loss: float = math.nan
    trained: bool = False
    staleness: int = 0
    t_done_s: float = math.nan
    messages: list[tuple[str, str, int, float, float]] = field(default_factory=list)


class _AsyncServer:
    """The server's state between events: model version, buffer, tasks in flight."""

    def __init__(self, env: simpy.Environment, cfg: ServerConfig, fleet: Fleet,
                 net: LinkSharing, learner: AsyncLearnerLike, recorder: Recorder,
                 streams: Streams, health: Health, after_round: RoundHook) -> None:
        self.env, self.cfg, self.fleet, self.net = env, cfg, fleet, net
        self.learner, self.recorder, self.streams = learner, recorder, streams
        self.health, self.after_round = health, after_round
        self.concurrency = cfg.concurrency or cfg.clients_per_round
        self.buffer_size = cfg.buffer_size or cfg.clients_per_round
        n = fleet.availability.num_devices
        samples = learner.num_samples(np.arange(n)).astype(np.float64)
        eval_share = EVAL_COST_FRACTION if learner.needs_losses else 0.0
        train_s = fleet.train_s_per_sample * samples * fleet.local_epochs
        self.compute_s = train_s + fleet.train_s_per_sample * samples * eval_share  # (N,)
        self.up_bytes = learner.model_bytes + (learner.loss_report_bytes
                                               if learner.needs_losses else 0)
        self.version = 0
        self.busy = np.zeros(n, dtype=bool)
        self.started = np.zeros(n, dtype=bool)  # devices that started from this version
        self.in_flight = 0
        self.untrained: dict[int, list[_Task]] = {}  # version -> tasks in flight, not trained
        self.buffer: list[_Task] = []
        self.ended: list[_Task] = []  # tasks ended since the last server update
        self.num_dispatched = 0  # since the last server update
        self.num_draws = 0  # device draws at this version
        self.t_update_s = 0.0
        self.t_idle_s = 0.0  # since when no task has been in flight
        self.refill_due = self.poll_due = False
        self.finished = env.event()

    # --- dispatch ---

    def schedule_refill(self) -> None:
        if not self.refill_due:
            self.refill_due = True
            _Later(self.env).callbacks.append(self._refill)

    def _refill(self, _event: simpy.Event | None = None) -> None:
        """Fill the free slots with idle online devices, in one draw."""
        self.refill_due = False
        free = self.concurrency - self.in_flight
        if self.version >= self.cfg.num_rounds or free <= 0:
            return
        now, availability = self.env.now, self.fleet.availability
        # The first draw at version v uses sync round v's streams: with buffer = concurrency
        # = clients_per_round and equal task times, async selects what sync selects.
        key = (self.version,) if self.num_draws == 0 else (self.version, self.num_draws)
        self.num_draws += 1
        devices = np.sort(availability.sample_online(
            now, free, self.streams.numpy("selection", *key), self.busy | self.started,
            self.learner.selection_weights()))
        gone_at = leave_times(self.fleet, devices, now, self.streams.numpy("failure", *key))
        if self.in_flight == 0 and len(devices) == 0:
            check_wait(now, self.t_idle_s, self.cfg, self.fleet,
                       f"server update {self.version}")
        for device, leave_s in zip(devices.tolist(), gone_at.tolist(), strict=True):
            task = _Task(device, self.version, now, leave_s, float(self.compute_s[device]))
            self.busy[device] = self.started[device] = True
            self.in_flight += 1
            self.num_dispatched += 1
            self.untrained.setdefault(self.version, []).append(task)
            self.env.process(self._run(task))
        if len(devices) < free:
            self._poll()

    def _poll(self) -> None:
        """Look again in ``wait_poll_s`` for idle online devices."""
        if self.poll_due:
            return
        self.poll_due = True
        self.env.timeout(self.cfg.wait_poll_s).callbacks.append(self._polled)

    def _polled(self, _event: simpy.Event) -> None:
        self.poll_due = False
        self._refill()

    # --- one device ---

    def _run(self, task: _Task) -> Generator[simpy.Event, Any, None]:
        yield from self._send(task, "down", self.learner.model_bytes, "model")
        yield self.env.timeout(task.compute_s)
        yield from self._send(task, "up", self.up_bytes, "update")
        self._end(task)

    def _send(self, task: _Task, direction: Direction, num_bytes: int,
              kind: str) -> Generator[simpy.Event, Any, None]:
        start = self.env.now
        yield self.net.transfer(task.device, num_bytes, direction)
        task.messages.append((direction, kind, num_bytes, start, self.env.now))

    def _end(self, task: _Task) -> None:
        now = self.env.now
        task.t_done_s = now
        task.staleness = self.version - task.version
        self.busy[task.device] = False
        self.in_flight -= 1
        if self.in_flight == 0:
            self.t_idle_s = now
        self.ended.append(task)
        if now > task.gone_at_s:
            task.status, task.t_done_s = "dropped", task.gone_at_s
            self._abandon(task)
        elif self.version >= self.cfg.num_rounds:
            task.status = "late"
            self._abandon(task)
        else:
            self._arrive(task)
        if self.version >= self.cfg.num_rounds:
            if self.in_flight == 0:
                self._record_tasks(self.cfg.num_rounds)
                self.finished.succeed()
        else:
            self.health.tasks_ended(self.version, [t.status for t in self.ended],
                                    self.buffer_size, len(self.busy))
            self.schedule_refill()

    def _abandon(self, task: _Task) -> None:
        """A task whose update will never be aggregated."""
        if task.trained:
            self.learner.discard(np.array([task.version]), np.array([task.device]))
            return
        group = self.untrained.get(task.version, [])
        if task in group:
            group.remove(task)
            if not group:
                del self.untrained[task.version]
                self._release(task.version)

    def _release(self, version: int) -> None:
        if version < self.version and version not in self.untrained:
            self.learner.forget(version)

    def _train(self, version: int) -> None:
        """Train every task in flight from ``version`` that can still arrive, in one call."""
        group = self.untrained.pop(version)
        viable = sorted((t for t in group if t.gone_at_s >= t.t_dispatch_s + t.compute_s),
                        key=lambda t: t.device)
        devices = np.array([t.device for t in viable], dtype=np.int64)
        train_losses, losses = self.learner.train_from(version, devices)
        for task, train_loss, loss in zip(viable, train_losses.tolist(), losses.tolist(),
                                          strict=True):
            task.trained, task.train_loss, task.loss = True, train_loss, loss
        self._release(version)

    def _arrive(self, task: _Task) -> None:
        if not task.trained:
            self._train(task.version)
        if math.isnan(task.train_loss):
            task.status = "nonfinite"
        elif 0 <= self.cfg.max_staleness < task.staleness:
            task.status = "stale"
            self._abandon(task)
        else:
            self.buffer.append(task)
            if len(self.buffer) >= self.buffer_size:
                self._update()

    # --- server update ---

    def _update(self) -> None:
        """Aggregate the buffer (in client order: the sum is independent of arrivals)."""
        now, r = self.env.now, self.version
        buffer = sorted(self.buffer, key=lambda t: (t.device, t.version))
        self.buffer = []
        devices = np.array([t.device for t in buffer], dtype=np.int64)
        versions = np.array([t.version for t in buffer], dtype=np.int64)
        staleness = np.array([t.staleness for t in buffer], dtype=np.int64)
        keep, threshold = np.ones(len(buffer), dtype=bool), None
        if self.learner.wants_checkins:
            self.learner.observe_online(now, self.fleet.availability.online_devices(now))
        losses = np.array([t.loss for t in buffer])
        if self.learner.needs_losses:
            selection, bias = self.learner.select(losses, devices, r, now)
            keep, threshold = np.asarray(selection.keep, dtype=bool), selection.threshold
            if bias is not None:
                self.recorder.append("bias", **bias)
        scales = self.cfg.server_lr * staleness_weight(self.cfg, staleness)
        self.learner.aggregate_buffer(devices[keep], versions[keep], losses[keep], scales[keep])
        self.learner.discard(versions[~keep], devices[~keep])
        for task, kept in zip(buffer, keep.tolist(), strict=True):
            task.status = "aggregated" if kept else "filtered"
        self.version, self.num_draws = r + 1, 0
        self.started[:] = False
        self._release(r)
        tasks = self._record_tasks(r)
        self.recorder.append(
            "rounds", round=r, t_start_s=self.t_update_s, t_end_s=now,
            num_online=self.fleet.availability.num_online(now),
            num_selected=self.num_dispatched, num_kept=int(keep.sum()),
            num_aggregated=int(keep.sum()),
            num_dropped=sum(t.status == "dropped" for t in tasks),
            quantile_estimate=threshold, lr=self.learner.lr(r),
            bytes_down=sum(m[2] for t in tasks for m in t.messages if m[0] == "down"),
            bytes_up=sum(m[2] for t in tasks for m in t.messages if m[0] == "up"))
        self.t_update_s, self.num_dispatched = now, 0
        self.health.round_done(r, int(keep.sum()), threshold, [t.status for t in buffer])
        self.after_round(self.version, now)

    def _record_tasks(self, r: int) -> list[_Task]:
        """Write the rows of the tasks ended since the last update, as interval ``r``."""
        tasks, self.ended = self.ended, []
        self.health.devices_done(t.status for t in tasks)
        if not tasks:
            return tasks
        msg = [(t.device, *m) for t in tasks for m in t.messages]
        self.recorder.append(
            "comm", round=r, client_idx=np.array([m[0] for m in msg], dtype=np.int64),
            direction=[m[1] for m in msg], kind=[m[2] for m in msg],
            bytes=np.array([m[3] for m in msg], dtype=np.int64),
            t_start_s=np.array([m[4] for m in msg]), t_end_s=np.array([m[5] for m in msg]))
        devices = np.array([t.device for t in tasks], dtype=np.int64)
        untrained = np.array([not t.trained for t in tasks], dtype=bool)
        not_reported = untrained | (not self.learner.needs_losses)
        self.recorder.append(
            "clients", round=r, client_id=self.learner.client_ids(devices), client_idx=devices,
            status=[t.status for t in tasks],
            loss_reported=np.ma.masked_array([t.loss for t in tasks], not_reported),
            train_loss=np.ma.masked_array([t.train_loss for t in tasks], untrained),
            num_samples=self.learner.num_samples(devices),
            bytes_down=np.array([sum(m[2] for m in t.messages if m[0] == "down")
                                 for t in tasks], dtype=np.int64),
            bytes_up=np.array([sum(m[2] for m in t.messages if m[0] == "up")
                               for t in tasks], dtype=np.int64),
            t_dispatch_s=np.array([t.t_dispatch_s for t in tasks]),
            t_done_s=np.array([t.t_done_s for t in tasks]),
            staleness=np.array([t.staleness for t in tasks], dtype=np.int64),
            model_version=np.array([t.version for t in tasks], dtype=np.int64))
        return tasks


def async_server(
    env: simpy.Environment,
    cfg: ServerConfig,
    fleet: Fleet,
    net: LinkSharing,
    learner: AsyncLearnerLike,
    recorder: Recorder,
    streams: Streams,
    health: Health,
    after_round: RoundHook,
) -> Generator[simpy.Event, Any, None]:
    """Run ``cfg.num_rounds`` server updates, then wait for the tasks still in flight."""
    server = _AsyncServer(env, cfg, fleet, net, learner, recorder, streams, health,
                          after_round)
    server.schedule_refill()
    yield server.finished
