"""What both servers share: the devices as a server sees them, device tasks and the
messages they log, when a device leaves, waiting for devices, and the clients rows.

A device task is one SimPy process: download, compute, upload (each skipped when
empty), every transfer over the shared links (simfl.sim.links) and logged as a
message. When its device goes offline or fails, the task is interrupted
(:func:`interrupt_at`, a SimPy ``Interrupt``): a transfer in flight is cancelled and
its link share released at that instant, and its message logged with the bytes that
had arrived (``completed`` false). Whether it finished in time, and what that means
for the round or the buffer, is the server's to decide.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np
import simpy

from simfl.population import Availability
from simfl.population.network import Direction
from simfl.records import ClientRows, CommRows, Recorder
from simfl.rng import Streams
from simfl.scenario import ServerConfig
from simfl.sim.health import Health, RunStalled
from simfl.sim.links import LinkSharing

EVAL_COST_FRACTION = 1 / 3  # a forward pass costs about a third of a training step

RoundHook = Callable[[int, float], None]  # (rounds completed, simulated time) after each round


@dataclass(frozen=True)
class Fleet:
    """The devices as the server sees them: when they are online, how fast they compute."""

    availability: Availability
    train_s_per_sample: np.ndarray  # (N,) seconds per training sample on the device
    failure_rate_per_h: np.ndarray  # (N,) failure hazard per hour of participation
    local_epochs: int


@dataclass(frozen=True)
class Wiring:
    """What a server process runs in: the clock, the devices, the links, the tables, the
    random streams and the judge of the run's health."""

    env: simpy.Environment
    fleet: Fleet
    net: LinkSharing
    recorder: Recorder
    streams: Streams
    health: Health


class ExchangeLike(Protocol):
    """One step of a threshold protocol (simfl.quantile.secagg.Exchange)."""

    @property
    def up_bytes(self) -> int: ...
    @property
    def down_bytes(self) -> int: ...
    @property
    def kind(self) -> str: ...


class Message(NamedTuple):  # a tuple: thousands a round, made and read in C
    device: int
    direction: Direction
    kind: str  # model / update / loss / quantile_protocol / secagg
    num_bytes: int
    t_start_s: float
    t_end_s: float
    completed: bool = True  # False: its device left; num_bytes is what had arrived


class MessageLog:
    """Messages in the order their transfers ended (a sync round's, or one async task's)."""

    def __init__(self, env: simpy.Environment, net: LinkSharing) -> None:
        self.env, self.net = env, net
        self.messages: list[Message] = []

    def send(self, device: int, direction: Direction, num_bytes: int,
             kind: str) -> Generator[simpy.Event, Any, None]:
        """Send ``num_bytes``; interrupted, the transfer is cancelled, its message logged
        with the bytes that had arrived, and the Interrupt goes on."""
        start = self.env.now
        done = self.net.transfer(device, num_bytes, direction)
        try:
            yield done
        except simpy.Interrupt:
            sent = int(self.net.cancel(done))
            self.messages.append(Message(device, direction, kind, sent, start, self.env.now,
                                         completed=False))
            raise
        self.messages.append(Message(device, direction, kind, num_bytes, start, self.env.now))

    def bytes(self, direction: Direction) -> int:
        return sum(m.num_bytes for m in self.messages if m.direction == direction)


class TaskPlan(NamedTuple):
    """What a device task does: download, compute, upload (0 bytes or seconds: skipped)."""

    down_bytes: int
    down_kind: str
    compute_s: float
    up_bytes: int
    up_kind: str


def device_task(log: MessageLog, device: int,
                plan: TaskPlan) -> Generator[simpy.Event, Any, None]:
    """One device's task, ending when its last step does, or with an Interrupt where its
    device left (:func:`interrupt_at`)."""
    if plan.down_bytes:
        yield from log.send(device, "down", plan.down_bytes, plan.down_kind)
    if plan.compute_s > 0:
        yield log.env.timeout(plan.compute_s)
    if plan.up_bytes:
        yield from log.send(device, "up", plan.up_bytes, plan.up_kind)


def interrupt_at(env: simpy.Environment, t_s: float) -> None:
    """Interrupt the process running now (a device's task, as it starts) at ``t_s``,
    when its device goes offline or fails, if it is still running then. A step due to
    end at that very instant does not complete (the departure was scheduled first)."""
    process = env.active_process
    if process is None or not math.isfinite(t_s):
        return

    def depart(_event: simpy.Event) -> None:
        if process.is_alive:
            process.interrupt("left")

    env.timeout(max(t_s - env.now, 0.0)).callbacks.append(depart)


def comm_rows(round_idx: int, messages: list[Message]) -> CommRows:
    device, direction, kind, size, start, end, completed = (
        zip(*messages, strict=True) if messages else ((),) * len(Message._fields))
    return CommRows(
        round=round_idx, client_idx=np.array(device, dtype=np.int64),
        direction=list(direction), kind=list(kind), bytes=np.array(size, dtype=np.int64),
        t_start_s=np.array(start, dtype=np.float64), t_end_s=np.array(end, dtype=np.float64),
        completed=np.array(completed, dtype=bool))


def shadow_rows(round_idx: int, devices: np.ndarray,
                shadow: Sequence[tuple[str, Sequence[ExchangeLike]]]) -> list[CommRows]:
    """comm.parquet rows of the shadowing estimators' protocols over ``devices`` (the
    cohort that reported): per estimator, each exchange's upload and download per device,
    marked with its name and untimed, as they are not sent."""
    rows = []
    for name, exchanges in shadow:
        steps = [(d, b, x.kind) for x in exchanges
                 for d, b in (("up", x.up_bytes), ("down", x.down_bytes)) if b]
        if not steps:
            continue
        direction, size, kind = (np.repeat(np.array(col, dtype=object), len(devices))
                                 for col in zip(*steps, strict=True))
        rows.append(CommRows(round=round_idx, client_idx=np.tile(devices, len(steps)),
                             direction=list(direction), kind=list(kind),
                             bytes=size.astype(np.int64), t_start_s=None, t_end_s=None,
                             shadow=name))
    return rows


@dataclass(frozen=True, kw_only=True)  # 12 columns: named at every call
class Outcomes:
    """What became of K device tasks, (K,) each: the columns of their clients rows that
    the server knows (the learner adds the clients' ids and sizes)."""

    devices: np.ndarray  # (K,) device (= training client) indices
    status: list[str] | np.ndarray  # aggregated / filtered / dropped / late / nonfinite / stale
    loss: np.ndarray  # (K,) reported F_k(w_v), meaningful where ``reported``
    reported: np.ndarray  # (K,) bool
    train_loss: np.ndarray  # (K,) NaN: a NaN/Inf update; meaningful where ``trained``
    trained: np.ndarray  # (K,) bool
    bytes_down: np.ndarray  # (K,)
    bytes_up: np.ndarray  # (K,)
    t_dispatch_s: float | np.ndarray
    t_done_s: np.ndarray
    staleness: int | np.ndarray
    model_version: int | np.ndarray


class ClientFacts(Protocol):
    """What the servers ask the numerics about clients (a part of their LearnerLike)."""

    def client_ids(self, client_idx: np.ndarray) -> np.ndarray: ...
    def num_samples(self, client_idx: np.ndarray) -> np.ndarray: ...


def client_rows(round_idx: int, outcomes: Outcomes, learner: ClientFacts) -> ClientRows:
    return ClientRows(
        round=round_idx, client_id=learner.client_ids(outcomes.devices),
        client_idx=outcomes.devices, status=outcomes.status,
        loss_reported=np.ma.masked_array(outcomes.loss, ~outcomes.reported),
        train_loss=np.ma.masked_array(outcomes.train_loss, ~outcomes.trained),
        num_samples=learner.num_samples(outcomes.devices),
        bytes_down=outcomes.bytes_down, bytes_up=outcomes.bytes_up,
        t_dispatch_s=outcomes.t_dispatch_s, t_done_s=outcomes.t_done_s,
        staleness=outcomes.staleness, model_version=outcomes.model_version)


def leave_times(fleet: Fleet, devices: np.ndarray, now: float,
                rng: np.random.Generator) -> np.ndarray:
    """(K,) when each device, starting a task at ``now``, goes offline or fails (hazard
    ``failure_rate_per_h`` per hour of participation, one exponential draw each)."""
    failure_rate_per_s = fleet.failure_rate_per_h[devices] / 3600.0
    with np.errstate(divide="ignore"):
        fail_after_s = rng.exponential(1.0, len(devices)) / failure_rate_per_s
    return np.minimum(fleet.availability.online_until(devices, now), now + fail_after_s)


def _switch_ons_after(availability: Availability, now: float, most: int) -> list[np.ndarray]:
    """Per region, its first ``most`` switch-on times after ``now``, sorted."""
    counts = availability.by_region
    bounds = zip(counts.offsets[:-1].tolist(), counts.offsets[1:].tolist(), strict=True)
    return [counts.on_s[(i := int(np.searchsorted(counts.on_s[a:b], now, side="right")) + a):
                        min(i + most, b)] for a, b in bounds]


def next_switch_on_s(availability: Availability, now: float) -> float:
    """The first time after ``now`` that a device comes online (inf if none does)."""
    return float(min((float(a[0]) for a in _switch_ons_after(availability, now, 1) if a.size),
                     default=math.inf))


def next_online_s(availability: Availability, now: float, at_least: int) -> float:
    """The first time t >= ``now`` at which at least ``at_least`` devices are online (inf
    if never, up to the availability's end). The count only rises when a device comes
    online, so the candidates are ``now`` and the switch-on times after it, taken in
    growing batches from each region's sorted switch times."""
    if availability.num_online(now) >= at_least:
        return now
    end = min(float(availability.t_off_s.max(initial=0.0)), availability.horizon_s)
    batch = 64
    while True:
        ahead = _switch_ons_after(availability, now, batch)
        times = np.unique(np.concatenate(ahead)) if ahead else np.zeros(0)
        # every switch-on up to the earliest region's last candidate is among ``times``
        exhausted = [len(a) < batch for a in ahead]
        complete_to = min((float(a[-1]) for a, done in zip(ahead, exhausted, strict=True)
                           if not done), default=math.inf)
        times = times[(times <= complete_to) & (times <= end)]
        if times.size:
            reached = np.flatnonzero(availability.by_region.count(times).sum(axis=1)
                                     >= at_least)
            if reached.size:
                return float(times[reached[0]])
        if all(exhausted) or complete_to >= end:
            return math.inf
        now, batch = complete_to, batch * 2


def wait_for_devices(env: simpy.Environment, availability: Availability, at_least: int,
                     since: float, cfg: ServerConfig,
                     freed: simpy.Event | None) -> simpy.Event:
    """The event a server waits on for devices: the first time ``at_least`` devices are
    online (a device coming online, when that many already are but none is idle), a
    device freed from its task (``freed``), or ``server.max_wait_s`` after ``since``
    (check_wait then says why the run stalls). Waiting is exact: no polling."""
    now = env.now
    if availability.num_online(now) >= at_least:  # enough online, all busy: a newcomer
        online_s = next_switch_on_s(availability, now)
    else:
        online_s = next_online_s(availability, now, at_least)
    wake_s = min(online_s, since + cfg.max_wait_s)
    events: list[simpy.Event] = [env.timeout(max(wake_s, now) - now)]
    if freed is not None:
        events.append(freed)
    return simpy.AnyOf(env, events)


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
