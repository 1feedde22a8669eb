"""Transfers over the shared network in simulated time: max-min fair link sharing.

A transfer of ``num_bytes`` between a device and the server first waits its path
latency, then streams at a rate limited by every link it crosses: the device's own
access link (its drawn bandwidth: the transfer's cap) and the shared links of its
region's path (simfl.population.network). Concurrent transfers on a link share its
capacity max-min fairly, as by progressive filling (Bertsekas & Gallager, "Data
Networks", 2nd ed., §6.5.2): all rates grow together; a transfer stops growing when its
access link or a link it crosses saturates. Rates change whenever a transfer starts or
ends, or is cancelled (its device went offline: it leaves its links at that instant,
and :meth:`LinkSharing.cancel` says how many of its bytes had arrived).

A link that another carries every path of with no more capacity never limits a rate
(:func:`can_bind`) and is left out. The rates are kept by path (simfl.sim.levels): the
transfers of one path (a region, a direction) share a level λ_p and each runs at
min(cap, λ_p). A start or an end on a path that crosses no over-subscribed link touches
nothing else: the transfer runs at its cap, its completion in one heap. Otherwise only
the paths joined to it through over-subscribed links (the connected component of its
links) get new levels, and only the transfers that cross a level move: those above it
share their path's virtual clock, which a new level leaves in place. So a start or an
end costs O(paths × links + transfers moved), not O(transfers). The earliest completion
is one pending SimPy timeout (stale ones are ignored), so a transfer costs O(log K) and
a few SimPy events (its latency, its completion, at most one timer per start or end),
not one per tick.

A transfer that never meets an over-subscribed link arrives at its start plus bytes /
cap, exactly (the links' demands are exact sums: simfl.sim.levels.exact). Under
sharing, finish times agree with a full recomputation of every rate at every start,
end and cancellation to float precision (tests/sim/test_link_levels.py).

SimPy and the standard library only: never torch.
"""

from __future__ import annotations

import heapq
import itertools
import math
from operator import attrgetter

import simpy

from simfl.population.network import DIRECTIONS, Direction, NetworkPaths
from simfl.sim.levels import Flow, Path, exact, fill

_TIME_EPS_S = 1e-9  # completions this close to a timer are due at it
_OVERLOAD = 1.0 + 1e-12  # relative slack before a link counts as over-subscribed


class _Own:
    """Transfers at their own caps: their projected completions in a heap, whose entry
    goes stale when the transfer's version moves on (it joined a group, or ended)."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int, Flow]] = []
        self.seq = itertools.count()

    def run(self, flow: Flow, remaining_bytes: float, now: float) -> None:
        """Run a transfer at its cap from ``now``; its completion goes on the heap."""
        flow.remaining_bytes, flow.t_update_s = remaining_bytes, now
        flow.version += 1
        finish_s = now + remaining_bytes / flow.cap
        heapq.heappush(self.heap, (finish_s, next(self.seq), flow.version, flow))

    @staticmethod
    def _valid(entry: tuple[float, int, int, Flow]) -> bool:
        flow = entry[3]
        return not flow.grouped and entry[2] == flow.version

    def next_s(self) -> float:
        """The earliest completion (inf without one), stale entries dropped."""
        while self.heap and not self._valid(self.heap[0]):
            heapq.heappop(self.heap)
        return self.heap[0][0] if self.heap else math.inf

    def pop_due(self, until_s: float) -> list[Flow]:
        """The transfers whose completion is at or before ``until_s``, taken off the heap."""
        due = []
        while self.heap and self.heap[0][0] <= until_s:
            entry = heapq.heappop(self.heap)
            if self._valid(entry):
                due.append(entry[3])
        return due


def can_bind(capacity: list[float], crossing: list[tuple[int, ...]]) -> list[bool]:
    """Whether each link can ever be the one that limits a rate, given the links each
    path crosses (``crossing``). A link is left out of the sharing where another link
    carries every path it carries with no more capacity: under progressive filling
    that other link saturates at a level no higher, freezing every path of this one
    before this one could fill (ties: the link of more paths, then of lower index, is
    kept). Which link dominates which is a strict order, so every path keeps a link of
    those it crosses that binds. simfl's default topology is the usual case: a
    region's link as wide as the server's, which carries every region's transfers."""
    carried: list[set[int]] = [set() for _ in capacity]
    for path, links in enumerate(crossing):
        for link in links:
            carried[link].add(path)
    key = [(c, -len(p), i) for i, (c, p) in enumerate(zip(capacity, carried, strict=True))]
    return [not any(key[j] < key[i] and carried[i] <= carried[j] for j in range(len(key)))
            for i in range(len(key))]


class LinkSharing:
    """Concurrent transfers on the network of ``paths``, in ``env``'s simulated time:
    max-min fair rates by path level (module docstring)."""

    def __init__(self, env: simpy.Environment, paths: NetworkPaths) -> None:
        self._env = env
        self._paths = paths
        self._capacity = [float(c) for c in paths.link_capacity_bytes_per_s]
        self._limit = [exact(c * _OVERLOAD) for c in self._capacity]
        self._demand = [0] * len(self._capacity)  # exact sum of the running transfers' caps
        self._congested = [False] * len(self._capacity)  # demand over the limit
        self._bound = [math.inf] * len(self._capacity)  # the level each link last bound at
        # each running path's component (its paths and over-subscribed links), kept until
        # a link's over-subscription or a path's being empty changes
        self._components: dict[int, tuple[list[Path], list[int]]] = {}
        self._leveled: list[Path] = []  # the paths with a level, in index order
        crossing = [paths.region_links[direction][r]
                    for r in range(len(paths.region_links["up"])) for direction in DIRECTIONS]
        binds = can_bind(self._capacity, crossing)
        self._path = [Path(index, tuple(link for link in links if binds[link]))
                      for index, links in enumerate(crossing)]
        self._link_paths: list[list[Path]] = [[] for _ in self._capacity]
        for path in self._path:
            for link in path.links:
                self._link_paths[link].append(path)
        self._region_latency_s = {d: paths.region_latency_s[d].tolist() for d in DIRECTIONS}
        self._own = _Own()
        self._seq = itertools.count()
        self._timer: simpy.Event | None = None
        self._timer_at_s = math.inf
        self._flows: dict[simpy.Event, Flow] = {}  # by ``done``: every transfer not ended
        self.num_active = 0

    def transfer(self, device_idx: int, num_bytes: float, direction: Direction) -> simpy.Event:
        """An event that succeeds (value: the time) when the transfer has arrived."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
        done = self._env.event()
        paths = self._paths
        region = paths.region_idx.item(device_idx)
        cap = paths.access_bytes_per_s[direction].item(device_idx)
        flow = Flow(cap=cap, cap_exact=exact(cap),
                    path=self._path[2 * region + DIRECTIONS.index(direction)],
                    order=(cap, next(self._seq)), remaining_bytes=float(num_bytes),
                    done=done, total_bytes=float(num_bytes))
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
        if flow.grouped:
            remaining = flow.v_finish - flow.path.clock_at(now)
        else:
            remaining = flow.remaining_bytes - flow.cap * (now - flow.t_update_s)
        self._refill(self._leave(flow))
        self._arm_timer()
        return flow.total_bytes - max(remaining, 0.0)

    def _begin(self, flow: Flow) -> None:
        now = self._env.now
        if flow.remaining_bytes == -math.inf:
            return  # cancelled during its latency
        flow.started = True
        if flow.remaining_bytes <= 0:
            del self._flows[flow.done]
            flow.done.succeed(now)
            return
        self.num_active += 1
        path = flow.path
        path.add(flow)
        if len(path.flows) == 1:
            self._components.clear()
        if flow.grouped:
            path.advance(now)
            flow.v_finish = path.clock + flow.remaining_bytes
            heapq.heappush(path.heap, (flow.v_finish, next(self._seq), flow.version, flow))
        else:
            self._own.run(flow, flow.remaining_bytes, now)
        self._refill(self._touched(path, self._load(flow, 1)))
        self._arm_timer()

    def _leave(self, flow: Flow) -> list[Path]:
        """Take an ended transfer off its path and links; the paths to refill."""
        flow.version += 1  # its heap entry goes stale
        flow.path.remove(flow)
        if not flow.path.flows:
            if flow.path.level < math.inf:
                flow.path.reset()
                self._leveled = [p for p in self._path if p.level < math.inf]
            self._components.clear()
        self.num_active -= 1
        return self._touched(flow.path, self._load(flow, -1))

    def _load(self, flow: Flow, sign: int) -> list[int]:
        """Add (``sign`` 1) or remove (-1) a transfer's demand; the links whose
        over-subscription changed."""
        flipped = []
        for link in flow.path.links:
            self._demand[link] += sign * flow.cap_exact
            over = self._demand[link] > self._limit[link]
            if over != self._congested[link]:
                self._congested[link] = over
                self._components.clear()
                flipped.append(link)
        return flipped

    def _touched(self, path: Path, flipped: list[int]) -> list[Path]:
        """The paths crossing a link of ``path`` that is over-subscribed or just changed:
        their components may change rates (none: nothing else does)."""
        return [p for link in path.links if self._congested[link] or link in flipped
                for p in self._link_paths[link]]

    def _component(self, seeds: list[Path]) -> tuple[list[Path], list[int]]:
        """The running paths joined to ``seeds`` through over-subscribed links, and those
        links, in index order."""
        found: list[tuple[list[Path], list[int]]] = []
        for seed in seeds:
            if seed.flows and not any(seed in paths for paths, _ in found):
                if seed.index not in self._components:
                    component = self._search(seed)
                    for path in component[0]:
                        self._components[path.index] = component
                found.append(self._components[seed.index])
        if len(found) == 1:
            return found[0]
        paths = sorted((p for ps, _ in found for p in ps), key=attrgetter("index"))
        return paths, sorted(link for _, links in found for link in links)

    def _search(self, seed: Path) -> tuple[list[Path], list[int]]:
        """The component of ``seed`` (a running path), by a graph search."""
        seen: dict[int, Path] = {}
        links: set[int] = set()
        stack = [seed]
        while stack:
            path = stack.pop()
            if path.index in seen:
                continue
            seen[path.index] = path
            for link in path.links:
                if self._congested[link] and link not in links:
                    links.add(link)
                    stack.extend(p for p in self._link_paths[link] if p.flows)
        return [seen[i] for i in sorted(seen)], sorted(links)

    def _refill(self, seeds: list[Path]) -> None:
        """Recompute the levels of the component of ``seeds`` and move the transfers
        whose side of their path's split changed."""
        if not seeds:
            return
        paths, links = self._component(seeds)
        for path in paths:
            path.order()
            path.j, path.a = path.split, path.below
        levels = fill(paths, links, self._capacity, self._link_paths, self._bound)
        now = self._env.now
        for path in paths:
            self._commit(path, levels[path.index], now)

    def _commit(self, path: Path, level: float, now: float) -> None:
        """Make ``level`` and the solving split the path's: the clock brought to ``now``
        at the old level, then transfers moved between their caps and the group."""
        if level == path.level and path.j == path.split:
            return
        path.advance(now)
        for flow in path.flows[path.j:path.split]:  # from their caps into the group
            flow.grouped = True
            flow.version += 1
            flow.v_finish = path.clock + max(
                flow.remaining_bytes - flow.cap * (now - flow.t_update_s), 0.0)
            heapq.heappush(path.heap, (flow.v_finish, next(self._seq), flow.version, flow))
        for flow in path.flows[path.split:path.j]:  # out of the group, to their caps
            flow.grouped = False
            self._own.run(flow, max(flow.v_finish - path.clock, 0.0), now)
        leveled = path.level < math.inf
        path.split, path.below, path.level = path.j, path.a, level
        if level == math.inf:
            path.reset()
        elif path.split == len(path.flows):  # no group: its clock starts again at 0
            path.clock = 0.0
            path.heap.clear()
        if leveled != (level < math.inf):
            self._leveled = [p for p in self._path if p.level < math.inf]

    def _next_completion_s(self) -> float:
        t_next = self._own.next_s()
        for path in self._leveled:
            t_next = min(t_next, path.next_s())
        return t_next

    def _arm_timer(self) -> None:
        t_next = self._next_completion_s()
        if t_next >= self._timer_at_s:
            return  # an earlier (or the same) timer is pending; none if t_next is inf
        self._timer_at_s = t_next
        self._timer = self._env.timeout(max(t_next - self._env.now, 0.0))
        self._timer.callbacks.append(self._on_timer)

    def _on_timer(self, event: simpy.Event) -> None:
        if event is not self._timer:
            return  # superseded by an earlier completion
        self._timer, self._timer_at_s = None, math.inf
        now = self._env.now
        due = self._own.pop_due(now + _TIME_EPS_S)
        for path in self._leveled:
            due += path.pop_due(now + _TIME_EPS_S)
        seeds = [p for flow in due for p in self._leave(flow)]
        self._refill(seeds)
        for flow in due:
            del self._flows[flow.done]
            flow.done.succeed(now)
        self._arm_timer()
