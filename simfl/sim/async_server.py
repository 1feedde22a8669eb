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
goes offline or fails before its upload ends ("dropped") never contributes: its
task is interrupted then (simfl.sim.tasks.interrupt_at), its transfer in flight
cancelled, and its slot freed (the server sees the connection close). Tasks
that end after the last server update are "late". ``rounds.parquet`` gets one
row per server update, ``clients.parquet`` one per task, in the update interval
in which it ended.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import simpy

from simfl.population.availability import sample_online
from simfl.records import RoundRow
from simfl.scenario import ServerConfig
from simfl.sim.server import LearnerLike
from simfl.sim.tasks import (
    EVAL_COST_FRACTION,
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
    next_switch_on_s,
    shadow_rows,
)


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


@dataclass(eq=False)
class _Task:
    """One device's download, compute and upload from one model version."""

    device: int
    version: int
    t_dispatch_s: float
    gone_at_s: float  # when the device goes offline or fails
    log: MessageLog  # the task's messages
    status: str = ""
    loss: float = math.nan  # F_k(w_version), reported with the update
    train_loss: float = math.nan
    trained: bool = False
    staleness: int = 0
    t_done_s: float = math.nan


class _Slots:
    """Keeps ``concurrency`` devices in tasks: a dispatcher process that, whenever a draw
    is wanted (a slot freed, a device came online, the model moved on), lets every other
    event of that instant happen, then fills the free slots with one draw of idle online
    devices that have not started from this model version. While too few are found, it
    is woken the instant the next device comes online (simfl.sim.tasks.next_switch_on_s),
    or ``server.max_wait_s`` after the server went idle (check_wait then says why)."""

    def __init__(self, wiring: Wiring, cfg: ServerConfig, learner: AsyncLearnerLike,
                 start: Callable[[int, float], None]) -> None:
        self.wiring, self.env, self.cfg, self.learner = wiring, wiring.env, cfg, learner
        self.start = start  # (device, when it leaves): a task from the current version
        self.concurrency = cfg.concurrency or cfg.clients_per_round
        n = wiring.fleet.availability.num_devices
        self.busy = np.zeros(n, dtype=bool)
        self.started = np.zeros(n, dtype=bool)  # devices that started from this version
        self.version = 0
        self.in_flight = 0
        self.num_dispatched = 0  # since the last server update
        self.num_draws = 0  # device draws at this version
        self.t_idle_s = 0.0  # since when no task has been in flight
        self.wanted = self.env.event()  # succeeds when a draw is due
        self.wake_at_s = math.inf  # the pending wake for devices coming online
        self.env.process(self._dispatch())

    def schedule_refill(self) -> None:
        """A draw is due (several asks before it happens make one draw)."""
        if not self.wanted.triggered:
            self.wanted.succeed()

    def _dispatch(self) -> Generator[simpy.Event, Any, None]:
        while True:
            yield self.wanted
            while self.env.peek() <= self.env.now:  # every other event of this instant first
                yield self.env.timeout(0)
            self.wanted = self.env.event()
            self._refill()

    def task_ended(self, device: int) -> None:
        self.busy[device] = False
        self.in_flight -= 1
        if self.in_flight == 0:
            self.t_idle_s = self.env.now

    def next_version(self) -> int:
        """The server updated the model: returns the tasks dispatched since the last update."""
        dispatched, self.num_dispatched = self.num_dispatched, 0
        self.version, self.num_draws = self.version + 1, 0
        self.started[:] = False
        return dispatched

    def _refill(self) -> None:
        """Fill the free slots with idle online devices, in one draw."""
        free = self.concurrency - self.in_flight
        if self.version >= self.cfg.num_rounds or free <= 0:
            return
        now, fleet, streams = self.env.now, self.wiring.fleet, self.wiring.streams
        # The first draw at version v uses sync round v's streams: with buffer = concurrency
        # = clients_per_round and equal task times, async selects what sync selects.
        key = (self.version,) if self.num_draws == 0 else (self.version, self.num_draws)
        self.num_draws += 1
        devices = np.sort(sample_online(
            fleet.availability, now, free, streams.numpy("selection", *key),
            self.busy | self.started, self.learner.selection_weights()))
        gone_at = leave_times(fleet, devices, now, streams.numpy("failure", *key))
        if self.in_flight == 0 and len(devices) == 0:
            check_wait(now, self.t_idle_s, self.cfg, fleet, f"server update {self.version}")
        for device, leave_s in zip(devices.tolist(), gone_at.tolist(), strict=True):
            self.busy[device] = self.started[device] = True
            self.in_flight += 1
            self.num_dispatched += 1
            self.start(device, leave_s)
        if len(devices) < free:
            self._wake()

    def _wake(self) -> None:
        """Draw again when the next device comes online, or ``max_wait_s`` after the server
        went idle (a task's end asks for a draw anyway)."""
        now = self.env.now
        wake_s = next_switch_on_s(self.wiring.fleet.availability, now)
        if self.in_flight == 0:
            wake_s = min(wake_s, self.t_idle_s + self.cfg.max_wait_s)
        if wake_s >= self.wake_at_s or math.isinf(wake_s):
            return  # an earlier wake is pending (or nothing will change)
        self.wake_at_s = wake_s
        self.env.timeout(wake_s - now).callbacks.append(self._woken)

    def _woken(self, _event: simpy.Event) -> None:
        if self.env.now >= self.wake_at_s:
            self.wake_at_s = math.inf
        self.schedule_refill()


class _Untrained:
    """The tasks in flight not trained yet, by the model version they started from: trained
    in one call per version when the first of them arrives; an old version is released
    once none of its tasks awaits training."""

    def __init__(self, learner: AsyncLearnerLike, plan: list[TaskPlan]) -> None:
        self.learner, self.plan = learner, plan
        self.groups: dict[int, list[_Task]] = {}  # version -> tasks

    def add(self, task: _Task) -> None:
        self.groups.setdefault(task.version, []).append(task)

    def train(self, version: int, current: int) -> None:
        """Train every task in flight from ``version`` that can still arrive, in one call."""
        group = self.groups.pop(version)
        viable = sorted((t for t in group
                         if t.gone_at_s >= t.t_dispatch_s + self.plan[t.device].compute_s),
                        key=lambda t: t.device)
        devices = np.array([t.device for t in viable], dtype=np.int64)
        train_losses, losses = self.learner.train_from(version, devices)
        for task, train_loss, loss in zip(viable, train_losses.tolist(), losses.tolist(),
                                          strict=True):
            task.trained, task.train_loss, task.loss = True, train_loss, loss
        self.release(version, current)

    def abandon(self, task: _Task, current: int) -> None:
        """A task whose update will never be aggregated."""
        if task.trained:
            self.learner.discard(np.array([task.version]), np.array([task.device]))
            return
        group = self.groups.get(task.version, [])
        if task in group:
            group.remove(task)
            if not group:
                del self.groups[task.version]
                self.release(task.version, current)

    def release(self, version: int, current: int) -> None:
        if version < current and version not in self.groups:
            self.learner.forget(version)


class _AsyncServer:
    """The server's state between events: model version, buffer, tasks in flight."""

    def __init__(self, wiring: Wiring, cfg: ServerConfig, learner: AsyncLearnerLike,
                 after_round: RoundHook) -> None:
        self.wiring, self.env, self.cfg = wiring, wiring.env, cfg
        self.learner, self.after_round = learner, after_round
        self.buffer_size = cfg.buffer_size or cfg.clients_per_round
        self.plan = _plans(wiring, learner)  # (N,) each device's task
        self.slots = _Slots(wiring, cfg, learner, self._start)
        self.untrained = _Untrained(learner, self.plan)
        self.version = 0
        self.buffer: list[_Task] = []
        self.ended: list[_Task] = []  # tasks ended since the last server update
        self.t_update_s = 0.0
        self.finished = self.env.event()

    def _start(self, device: int, leave_s: float) -> None:
        task = _Task(device, self.version, self.env.now, leave_s,
                     MessageLog(self.env, self.wiring.net))
        self.untrained.add(task)
        self.env.process(self._run(task))

    def _run(self, task: _Task) -> Generator[simpy.Event, Any, None]:
        interrupt_at(self.env, task.gone_at_s)
        left = False
        try:
            yield from device_task(task.log, task.device, self.plan[task.device])
        except simpy.Interrupt:
            left = True
        now = self.env.now
        task.t_done_s, task.staleness = now, self.version - task.version
        self.slots.task_ended(task.device)
        self.ended.append(task)
        if left:
            task.status = "dropped"
            self.untrained.abandon(task, self.version)
        elif self.version >= self.cfg.num_rounds:
            task.status = "late"
            self.untrained.abandon(task, self.version)
        else:
            self._arrive(task)
        if self.version < self.cfg.num_rounds:
            none_left = self.slots.in_flight == 0 and bool(self.slots.started.all())
            self.wiring.health.tasks_ended(self.version, [t.status for t in self.ended],
                                           self.buffer_size, none_left)
            self.slots.schedule_refill()
        elif self.slots.in_flight == 0:
            _record_tasks(self.wiring, self.learner, self._take_ended(), self.cfg.num_rounds)
            self.finished.succeed()

    def _arrive(self, task: _Task) -> None:
        if not task.trained:
            self.untrained.train(task.version, self.version)
        if math.isnan(task.train_loss):
            task.status = "nonfinite"
        elif 0 <= self.cfg.max_staleness < task.staleness:
            task.status = "stale"
            self.untrained.abandon(task, self.version)
        else:
            self.buffer.append(task)
            if len(self.buffer) >= self.buffer_size:
                self._update()

    def _take_ended(self) -> list[_Task]:
        tasks, self.ended = self.ended, []
        return tasks

    def _update(self) -> None:
        """Aggregate the buffer (in client order: the sum is independent of arrivals)."""
        now, r = self.env.now, self.version
        buffer = sorted(self.buffer, key=lambda t: (t.device, t.version))
        self.buffer = []
        devices = np.array([t.device for t in buffer], dtype=np.int64)
        versions = np.array([t.version for t in buffer], dtype=np.int64)
        staleness = np.array([t.staleness for t in buffer], dtype=np.int64)
        losses = np.array([t.loss for t in buffer])
        keep, threshold = self._filter(losses, devices)
        scales = self.cfg.server_lr * staleness_weight(self.cfg, staleness)
        self.learner.aggregate_buffer(devices[keep], versions[keep], losses[keep], scales[keep])
        self.learner.discard(versions[~keep], devices[~keep])
        for task, kept in zip(buffer, keep.tolist(), strict=True):
            task.status = "aggregated" if kept else "filtered"
        self.version = r + 1
        num_dispatched = self.slots.next_version()
        self.untrained.release(r, self.version)
        tasks = _record_tasks(self.wiring, self.learner, self._take_ended(), r)
        self.wiring.recorder.write(RoundRow(
            round=r, t_start_s=self.t_update_s, t_end_s=now,
            num_online=self.wiring.fleet.availability.num_online(now),
            num_selected=num_dispatched, num_kept=int(keep.sum()),
            num_aggregated=int(keep.sum()),
            num_dropped=sum(t.status == "dropped" for t in tasks),
            quantile_estimate=threshold, lr=self.learner.lr(r),
            bytes_down=sum(t.log.bytes("down") for t in tasks),
            bytes_up=sum(t.log.bytes("up") for t in tasks)))
        self.t_update_s = now
        self.wiring.health.round_done(r, int(keep.sum()), threshold, [t.status for t in buffer])
        self.after_round(self.version, now)

    def _filter(self, losses: np.ndarray, devices: np.ndarray) -> tuple[np.ndarray, float | None]:
        """Which buffered updates are aggregated (Δ-FL: F_k(w_{v_k}) >= η̂), and η̂."""
        now = self.env.now
        if self.learner.wants_checkins:
            self.learner.observe_online(now, self.wiring.fleet.availability.online_devices(now))
        if not self.learner.needs_losses:
            return np.ones(len(losses), dtype=bool), None
        selection, bias = self.learner.select(losses, devices, self.version, now)
        if bias is not None:
            self.wiring.recorder.append("bias", **bias)
        for rows in shadow_rows(self.version, devices, selection.shadow):
            self.wiring.recorder.write(rows)
        return np.asarray(selection.keep, dtype=bool), selection.threshold


def _record_tasks(wiring: Wiring, learner: AsyncLearnerLike, tasks: list[_Task],
                  r: int) -> list[_Task]:
    """Write the rows of ``tasks`` (ended since the last update) as interval ``r``."""
    wiring.health.devices_done(t.status for t in tasks)
    if tasks:
        wiring.recorder.write(comm_rows(r, [m for t in tasks for m in t.log.messages]))
        untrained = np.array([not t.trained for t in tasks], dtype=bool)
        # the loss goes up with the update: a task dropped on the way reported none
        reported = np.array([t.trained and t.status != "dropped" for t in tasks], dtype=bool)
        wiring.recorder.write(client_rows(r, Outcomes(
            devices=np.array([t.device for t in tasks], dtype=np.int64),
            status=[t.status for t in tasks], loss=np.array([t.loss for t in tasks]),
            reported=reported & learner.needs_losses,
            train_loss=np.array([t.train_loss for t in tasks]), trained=~untrained,
            bytes_down=np.array([t.log.bytes("down") for t in tasks], dtype=np.int64),
            bytes_up=np.array([t.log.bytes("up") for t in tasks], dtype=np.int64),
            t_dispatch_s=np.array([t.t_dispatch_s for t in tasks]),
            t_done_s=np.array([t.t_done_s for t in tasks]),
            staleness=np.array([t.staleness for t in tasks], dtype=np.int64),
            model_version=np.array([t.version for t in tasks], dtype=np.int64)), learner))
    return tasks


def _plans(wiring: Wiring, learner: AsyncLearnerLike) -> list[TaskPlan]:
    """(N,) each device's task: the model down, its loss (if the rule filters) and local
    training, the update (and loss report) up."""
    fleet = wiring.fleet
    samples = learner.num_samples(np.arange(fleet.availability.num_devices)).astype(np.float64)
    eval_share = EVAL_COST_FRACTION if learner.needs_losses else 0.0
    train_s = fleet.train_s_per_sample * samples * fleet.local_epochs
    compute_s = train_s + fleet.train_s_per_sample * samples * eval_share  # (N,)
    up_bytes = learner.model_bytes + (learner.loss_report_bytes if learner.needs_losses else 0)
    return [TaskPlan(learner.model_bytes, "model", float(c), up_bytes, "update")
            for c in compute_s.tolist()]


def async_server(wiring: Wiring, cfg: ServerConfig, learner: AsyncLearnerLike,
                 after_round: RoundHook) -> Generator[simpy.Event, Any, None]:
    """Run ``cfg.num_rounds`` server updates, then wait for the tasks still in flight."""
    server = _AsyncServer(wiring, cfg, learner, after_round)
    server.slots.schedule_refill()
    yield server.finished
