"""Transfers over the shared network in simulated time: max-min fair link sharing.

A transfer of ``num_bytes`` between a device and the server first waits its path
latency, then streams at a rate limited by every link it crosses: the device's own
access link (its drawn bandwidth) and the shared links of its region's path
(simfl.population.network). Concurrent transfers on a link share its capacity max-min
fairly, as by progressive filling (Bertsekas & Gallager, "Data Networks", 2nd ed.,
§6.5.2): all rates grow together; a transfer stops growing when its access link or a
link it crosses saturates. Rates are recomputed whenever a transfer starts or ends.

Cost: a link whose transfers' access bandwidths sum to no more than its capacity can
never bind, so while no shared link is over-subscribed each transfer simply runs at its
access bandwidth and a start or end touches nothing else. Only the transfers crossing
an over-subscribed link are re-filled. Projected completion times sit in one heap, and
one pending SimPy timeout stands for the earliest (stale ones are ignored), so a
transfer costs O(log K) and a few SimPy events (its latency, its completion, at most
one timer per start or end), not one per tick.

A transfer can be cancelled (its device went offline): it leaves its links at that
instant, the others' rates are recomputed as for an end, and :meth:`LinkSharing.cancel`
says how many of its bytes had arrived.

SimPy, numpy and networkx only: never torch.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass

import numpy as np
import simpy

from simfl.population.network import DIRECTIONS, Direction, NetworkPaths

_TIME_EPS_S = 1e-9  # completions this close to a timer are due at it
_OVERLOAD = 1.0 + 1e-12  # relative slack before a link counts as over-subscribed


def max_min_rates(caps: np.ndarray, member: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rates by progressive filling.

    Args:
        caps: (K,) each transfer's own limit (its access link), > 0.
        member: (K, S) bool, transfer k crosses shared link s.
        capacity: (S,) shared link capacities, > 0.

    Returns:
        (K,) rates. All transfers not yet frozen share one level; the next event is
        either the smallest cap (those transfers freeze at their caps) or the first link
        to saturate (its transfers freeze at the level).
    """
    rates = np.zeros(caps.shape[0])
    frozen = np.zeros(caps.shape[0], dtype=bool)
    remaining = capacity.astype(float).copy()
    while not frozen.all():
        count = member[~frozen].sum(axis=0)
        level = np.full(remaining.shape, np.inf)
        np.divide(np.maximum(remaining, 0.0), count, out=level, where=count > 0)
        fill = float(level.min()) if level.size else math.inf
        capped = ~frozen & (caps <= fill)
        if capped.any():
            rates[capped] = caps[capped]
            frozen |= capped
            remaining -= np.where(member[capped], caps[capped][:, None], 0.0).sum(axis=0)
            continue
        saturated = ~frozen & member[:, int(np.argmin(level))]
        rates[saturated] = fill
        frozen |= saturated
        remaining -= fill * member[saturated].sum(axis=0)
    return rates


@dataclass(eq=False, slots=True)
class _Flow:
    cap: float  # bytes/s: the device's access link in this direction
    links: tuple[int, ...]  # shared link ids crossed
    path_id: int  # 2 * region + direction index
    remaining_bytes: float  # as of t_update_s (free transfers only)
    done: simpy.Event
    total_bytes: float = 0.0
    rate: float = 0.0  # bytes/s since t_update_s (free transfers: the cap)
    t_update_s: float = 0.0
    version: int = 0  # bumped when the heap entry goes stale
    row: int = -1  # row in the constrained arrays, -1 when free
    started: bool = False  # past its latency: on its links


class _Constrained:
    """Transfers crossing an over-subscribed link: compact numpy rows, refilled together."""

    def __init__(self) -> None:
        self.flows: list[_Flow] = []
        self.cap = np.zeros(16)
        self.remaining = np.zeros(16)  # bytes as of synced_s
        self.rate = np.zeros(16)
        self.finish_s = np.zeros(16)
        self.path_id = np.zeros(16, dtype=np.int64)
        self.synced_s = 0.0

    @property
    def size(self) -> int:
        return len(self.flows)

    def sync(self, now: float) -> None:
        n = self.size
        self.remaining[:n] = np.maximum(
            self.remaining[:n] - self.rate[:n] * (now - self.synced_s), 0.0)
        self.synced_s = now

    def add(self, flow: _Flow, remaining_bytes: float) -> None:
        n = self.size
        if n == self.cap.shape[0]:
            for name in ("cap", "remaining", "rate", "finish_s", "path_id"):
                old = getattr(self, name)
                setattr(self, name, np.concatenate([old, np.zeros_like(old)]))
        self.cap[n], self.remaining[n], self.rate[n] = flow.cap, remaining_bytes, 0.0
        self.finish_s[n], self.path_id[n] = math.inf, flow.path_id
        flow.row = n
        self.flows.append(flow)

    def remove(self, flow: _Flow) -> float:
        """Take a transfer out (swap with the last row); returns its remaining bytes."""
        i, last = flow.row, self.size - 1
        remaining = float(self.remaining[i])
        for a in (self.cap, self.remaining, self.rate, self.finish_s, self.path_id):
            a[i] = a[last]
        self.flows[i] = self.flows[last]
        self.flows[i].row = i
        self.flows.pop()
        flow.row = -1
        return remaining

    def refill(self, load: _LinkLoad, path_links: list[tuple[int, ...]]) -> None:
        """Max-min fair rates over the congested links of ``load`` (``path_links``: the
        shared links of each path id), and the finish times they give."""
        n = self.size
        if n == 0:
            return
        congested = sorted(load.congested)
        table = np.array([[link in links for link in congested] for links in path_links],
                         dtype=bool).reshape(len(path_links), len(congested))
        capacity = np.array([load.capacity[link] for link in congested])
        self.rate[:n] = max_min_rates(self.cap[:n], table[self.path_id[:n]], capacity)
        self.finish_s[:n] = self.synced_s + self.remaining[:n] / self.rate[:n]

    def next_s(self) -> float:
        """The earliest finish time (inf without a row)."""
        n = self.size
        return float(self.finish_s[:n].min()) if n else math.inf

    def due(self, until_s: float) -> list[_Flow]:
        """The transfers that finish at or before ``until_s`` (still in their rows)."""
        if not self.flows:
            return []
        return [self.flows[i] for i in np.flatnonzero(self.finish_s[:self.size] <= until_s)]


class _Free:
    """Transfers crossing no over-subscribed link, each at its access rate: their
    projected completions in a heap, whose entry goes stale when the transfer's version
    moves on (it was constrained, or its completion was taken)."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int, _Flow]] = []
        self.seq = itertools.count()

    def run(self, flow: _Flow, remaining_bytes: float, now: float) -> None:
        """Run a transfer at its access rate from ``now``; its completion goes on the heap."""
        flow.remaining_bytes, flow.rate, flow.t_update_s = remaining_bytes, flow.cap, now
        flow.version += 1
        finish_s = now + remaining_bytes / flow.cap
        heapq.heappush(self.heap, (finish_s, next(self.seq), flow.version, flow))

    @staticmethod
    def _valid(entry: tuple[float, int, int, _Flow]) -> bool:
        flow = entry[3]
        return flow.row < 0 and entry[2] == flow.version

    def next_s(self) -> float:
        """The earliest completion (inf without one), stale entries dropped."""
        while self.heap and not self._valid(self.heap[0]):
            heapq.heappop(self.heap)
        return self.heap[0][0] if self.heap else math.inf

    def pop_due(self, until_s: float) -> list[_Flow]:
        """The transfers whose completion is at or before ``until_s``, taken off the heap."""
        due = []
        while self.heap and self.heap[0][0] <= until_s:
            entry = heapq.heappop(self.heap)
            if self._valid(entry):
                due.append(entry[3])
        return due


class _LinkLoad:
    """The active transfers on each shared link and their demand (the sum of their access
    rates); a link whose demand exceeds its capacity is congested (over-subscribed)."""

    def __init__(self, capacity: list[float]) -> None:
        self.capacity = capacity
        self.demand = [0.0] * len(capacity)
        self.members: list[set[_Flow]] = [set() for _ in capacity]
        self.congested: set[int] = set()

    def crosses_congested(self, flow: _Flow) -> bool:
        return any(link in self.congested for link in flow.links)

    def change(self, flow: _Flow, sign: float) -> tuple[list[int], list[int]]:
        """Add (``sign`` +1) or remove (-1) a transfer; returns (links now congested, links
        relieved)."""
        became, relieved = [], []
        for link in flow.links:
            if sign > 0:
                self.members[link].add(flow)
                self.demand[link] += flow.cap
            else:
                self.members[link].discard(flow)
                self.demand[link] = (self.demand[link] - flow.cap
                                     if self.members[link] else 0.0)
            over = self.demand[link] > self.capacity[link] * _OVERLOAD
            if over and link not in self.congested:
                self.congested.add(link)
                became.append(link)
            elif not over and link in self.congested:
                self.congested.discard(link)
                relieved.append(link)
        return became, relieved


class LinkSharing:
    """Concurrent transfers on the network of ``paths``, in ``env``'s simulated time.

    Free transfers (crossing no over-subscribed link) run at their access rate and
    their completions sit in a heap; constrained ones are numpy rows refilled together
    (max_min_rates) whenever the constrained set changes.
    """

    def __init__(self, env: simpy.Environment, paths: NetworkPaths) -> None:
        self._env = env
        self._paths = paths
        self._load = _LinkLoad([float(c) for c in paths.link_capacity_bytes_per_s])
        self._path_links = [paths.region_links[direction][r]
                            for r in range(len(paths.region_links["up"]))
                            for direction in DIRECTIONS]
        self._region_latency_s = {d: paths.region_latency_s[d].tolist() for d in DIRECTIONS}
        self._free = _Free()
        self._constrained = _Constrained()
        self._timer: simpy.Event | None = None
        self._timer_at_s = math.inf
        self._flows: dict[simpy.Event, _Flow] = {}  # by ``done``: every transfer not ended
        self.num_active = 0

    def transfer(self, device_idx: int, num_bytes: float, direction: Direction) -> simpy.Event:
        """An event that succeeds (value: the time) when the transfer has arrived."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
        done = self._env.event()
        paths = self._paths
        region = paths.region_idx.item(device_idx)
        flow = _Flow(cap=paths.access_bytes_per_s[direction].item(device_idx),
                     links=paths.region_links[direction][region],
                     path_id=2 * region + (direction == "up"),
                     remaining_bytes=float(num_bytes), done=done,
                     total_bytes=float(num_bytes))
        self._flows[done] = flow
        latency_s = (paths.access_latency_s.item(device_idx)
                     + self._region_latency_s[direction][region])
        if latency_s > 0:
            self._env.timeout(latency_s).callbacks.append(lambda _event: self._begin(flow))
        else:
            self._begin(flow)
        return done

    def cancel(self, done: simpy.Event) -> float:
        """End the transfer whose event is ``done`` now, before it arrived; returns the
        bytes that had arrived. Its links are released at once (the other transfers'
        rates recomputed as when one ends); ``done`` never succeeds. A transfer still in
        its latency has sent nothing and never starts."""
        flow = self._flows.pop(done)
        if not flow.started:
            flow.remaining_bytes = -math.inf  # _begin skips it
            return 0.0
        now = self._env.now
        if self._constrained.flows:
            self._constrained.sync(now)
        constrained = flow.row >= 0
        if constrained:
            remaining = self._constrained.remove(flow)
        else:
            remaining = max(flow.remaining_bytes - flow.rate * (now - flow.t_update_s), 0.0)
        flow.version += 1  # its heap entry, if any, goes stale
        self.num_active -= 1
        _, relieved = self._load.change(flow, -1.0)
        self._release(relieved)
        if constrained or relieved:
            self._refill()
        self._arm_timer()
        return flow.total_bytes - remaining

    def _begin(self, flow: _Flow) -> None:
        now = self._env.now
        if flow.remaining_bytes == -math.inf:
            return  # cancelled during its latency
        flow.started = True
        if flow.remaining_bytes <= 0:
            del self._flows[flow.done]
            flow.done.succeed(now)
            return
        flow.t_update_s = now
        self.num_active += 1
        became, _ = self._load.change(flow, +1.0)
        if not became and not self._load.crosses_congested(flow):
            self._free.run(flow, flow.remaining_bytes, now)
        else:
            self._constrained.sync(now)
            for link in became:
                for other in self._load.members[link]:
                    if other.row < 0 and other is not flow:
                        self._constrain(other)
            self._constrain(flow)
            self._refill()
        self._arm_timer()

    def _constrain(self, flow: _Flow) -> None:
        """Move a free (or new, rate 0) transfer into the constrained rows."""
        now = self._env.now
        flow.version += 1
        self._constrained.add(flow, flow.remaining_bytes - flow.rate * (now - flow.t_update_s))

    def _release(self, relieved: list[int]) -> None:
        for link in relieved:
            for flow in list(self._load.members[link]):
                if flow.row >= 0 and not self._load.crosses_congested(flow):
                    self._free.run(flow, self._constrained.remove(flow), self._env.now)

    def _refill(self) -> None:
        """Max-min fair rates of the constrained transfers over the over-subscribed links."""
        self._constrained.refill(self._load, self._path_links)

    def _next_completion_s(self) -> float:
        return min(self._free.next_s(), self._constrained.next_s())

    def _arm_timer(self) -> None:
        t_next = self._next_completion_s()
        if t_next >= self._timer_at_s:
            return  # an earlier (or the same) timer is pending; none if t_next is inf
        self._timer_at_s = t_next
        self._timer = self._env.timeout(max(t_next - self._env.now, 0.0))
        self._timer.callbacks.append(self._on_timer)

    def _pop_due(self, now: float) -> list[_Flow]:
        return self._free.pop_due(now + _TIME_EPS_S) + self._constrained.due(now + _TIME_EPS_S)

    def _on_timer(self, event: simpy.Event) -> None:
        if event is not self._timer:
            return  # superseded by an earlier completion
        self._timer, self._timer_at_s = None, math.inf
        now = self._env.now
        if self._constrained.flows:
            self._constrained.sync(now)
        due = self._pop_due(now)
        refill = False
        for flow in due:
            flow.version += 1
            if flow.row >= 0:
                self._constrained.remove(flow)
                refill = True
            self.num_active -= 1
            _, relieved = self._load.change(flow, -1.0)
            self._release(relieved)
            refill = refill or bool(relieved)
        if refill:
            self._refill()
        for flow in due:
            del self._flows[flow.done]
            flow.done.succeed(now)
        self._arm_timer()
