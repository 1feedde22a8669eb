"""Max-min fair levels by path: the state and the solver behind simfl.sim.links.

The transfers of one path (a region and a direction) cross the same shared links, so
the max-min fair rates give each path p one level λ_p and each of its transfers the
rate min(cap, λ_p); λ_p = ∞ while no link of the path is over-subscribed (its
transfers' caps sum to more than its capacity). Progressive filling over paths finds
the levels (:func:`fill`; Bertsekas & Gallager, "Data Networks", 2nd ed., §6.5.2): a
link s with room R_s (its capacity less what the paths frozen so far take) saturates
at the level L where Σ_p D_p(L) = R_s over its unfrozen paths, D_p(L) = Σ_{k ∈ p}
min(c_k, L); the link of least L freezes its paths at L. Each L is the fixed point of
L ← (R_s − A)/B (:func:`solve`), A the sum of the caps at or below L and B the number
above: the line A + B·L lies on or above Σ_p D_p for any split of the caps (min(c, L)
is at most c and at most L), so the first step from any split is at or below the
solution, and later steps climb to it, moving transfers across the split one at a
time. Solves start from the last levels, and the links that bound last are tried
first (a link whose paths do not fill it at the least level so far is skipped), so a
start or an end costs O(paths × links + transfers moved across a split).

A path's transfers above its split (its group) share a virtual clock, V_p(t) = ∫ λ_p
dt, the bytes each of them has received since the group formed (the virtual time of
fair queueing: Demers, Keshav & Shenker, SIGCOMM 1989; Parekh & Gallager, IEEE/ACM
ToN 1993), in a heap by the clock value at which each has arrived, which a change of
λ_p leaves in place. V_p carries a relative error of about 1e-16 of the bytes its
group moves before it next empties.

The caps summed below a split are exact (Python integers in units of 2^-1074, in
which every float is whole: :func:`exact`), so the levels depend on the transfers
present, not on the order in which they came and went.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from dataclasses import dataclass
from operator import attrgetter

import simpy

_UNIT = 2**1074  # exact sums: the float x is the integer x * _UNIT
_ORDER = attrgetter("order")


def exact(x: float) -> int:
    """``x`` (finite, >= 0) in units of 2^-1074: an integer, exactly."""
    num, den = x.as_integer_ratio()
    return num << (1075 - den.bit_length())


@dataclass(eq=False, slots=True)
class Flow:
    """One transfer: at its cap, the bytes left as of ``t_update_s``; in its path's group,
    the path's clock value at which it has arrived."""

    cap: float  # bytes/s: the device's access link in this direction
    cap_exact: int  # exact(cap)
    path: Path
    order: tuple[float, int]  # (cap, arrival): its place among its path's transfers
    remaining_bytes: float  # as of t_update_s, while it runs at its cap
    done: simpy.Event
    total_bytes: float
    t_update_s: float = 0.0
    v_finish: float = 0.0  # in its path's group: the path's clock when it has arrived
    grouped: bool = False  # above its path's split: at the path's level
    version: int = 0  # bumped when its heap entry goes stale
    started: bool = False  # past its latency: on its links
    slot: int = -1  # its place in its path's list while that is not sorted


class Path:
    """The running transfers of one path: ``flows[:split]`` run at their caps (cap <=
    level), the others (the group) at the level, on the path's clock. Sorted by cap
    once it has a level (``ordered``); before, every transfer runs at its cap and the
    list is kept in any order, for O(1) insertions and removals."""

    def __init__(self, index: int, links: tuple[int, ...]) -> None:
        self.index, self.links = index, links
        self.flows: list[Flow] = []
        self.j, self.a = 0, 0  # a split and its exact sum, while levels are solved
        self.reset()

    def reset(self) -> None:
        """No level (an empty path's state, or a path whose links all fit)."""
        self.ordered = False
        for slot, flow in enumerate(self.flows):
            flow.slot = slot
        self.split = len(self.flows)
        self.below = sum(flow.cap_exact for flow in self.flows)  # of flows[:split], exact
        self.level = math.inf
        self.clock, self.clock_s = 0.0, 0.0  # V_p as of clock_s
        self.heap: list[tuple[float, int, int, Flow]] = []  # (v_finish, seq, version, flow)

    def order(self) -> None:
        """Sort the transfers by cap (the split is unchanged: without a level it is all)."""
        if not self.ordered:
            self.flows.sort(key=_ORDER)
            self.ordered = True

    def add(self, flow: Flow) -> None:
        """Insert a transfer, below the split if its cap is at most the level."""
        if self.ordered:
            self.flows.insert(bisect_left(self.flows, flow.order, key=_ORDER), flow)
        else:
            flow.slot = len(self.flows)
            self.flows.append(flow)
        flow.grouped = flow.cap > self.level
        if not flow.grouped:
            self.split += 1
            self.below += flow.cap_exact

    def remove(self, flow: Flow) -> None:
        if self.ordered:
            del self.flows[bisect_left(self.flows, flow.order, key=_ORDER)]
        else:
            last = self.flows.pop()
            if last is not flow:
                self.flows[flow.slot], last.slot = last, flow.slot
        if not flow.grouped:
            self.split -= 1
            self.below -= flow.cap_exact

    def advance(self, now: float) -> None:
        """Bring the clock to ``now`` (at the current level)."""
        if self.level < math.inf:
            self.clock += self.level * (now - self.clock_s)
        self.clock_s = now

    def clock_at(self, now: float) -> float:
        return self.clock + self.level * (now - self.clock_s)

    def next_s(self) -> float:
        """The group's earliest completion (inf without one), stale entries dropped."""
        heap = self.heap
        while heap and not (heap[0][3].grouped and heap[0][2] == heap[0][3].version):
            heapq.heappop(heap)
        return self.clock_s + (heap[0][0] - self.clock) / self.level if heap else math.inf

    def pop_due(self, until_s: float) -> list[Flow]:
        due = []
        while self.next_s() <= until_s:
            due.append(heapq.heappop(self.heap)[3])
        return due

    def align(self, level: float) -> None:
        """Move the solving split ``j`` to ``level``: caps at most ``level`` below it."""
        flows = self.flows
        while self.j < len(flows) and flows[self.j].cap <= level:
            self.a += flows[self.j].cap_exact
            self.j += 1
        while self.j > 0 and flows[self.j - 1].cap > level:
            self.j -= 1
            self.a -= flows[self.j].cap_exact


def solve(paths: list[Path], room: float) -> float:
    """The level at which ``paths`` (their solving splits as a warm start) fill ``room``
    bytes/s; inf when their caps fit in it. Leaves their splits at the level."""
    a, b = sum(p.a for p in paths), sum(len(p.flows) - p.j for p in paths)
    if b == 0:
        if a <= exact(room):
            return math.inf
        top = max((p for p in paths if p.j > 0), key=lambda p: p.flows[p.j - 1].order)
        top.j -= 1
        top.a -= top.flows[top.j].cap_exact
        a, b = a - top.flows[top.j].cap_exact, 1
    level = (room - a / _UNIT) / b  # at or below the solution
    for p in paths:
        p.align(level)
    while True:  # climbs: caps only cross upwards
        a, b = sum(p.a for p in paths), sum(len(p.flows) - p.j for p in paths)
        if b == 0:
            return math.inf
        level = (room - a / _UNIT) / b
        moved = False
        for p in paths:
            flows = p.flows
            while p.j < len(flows) and flows[p.j].cap <= level:
                p.a += flows[p.j].cap_exact
                p.j += 1
                moved = True
        if not moved:
            return level


def fill(paths: list[Path], links: list[int], capacity: list[float],
         link_paths: list[list[Path]], bound: list[float]) -> dict[int, float]:
    """Progressive filling over ``paths`` (a component: the paths joined through the
    over-subscribed ``links``), from their solving splits: each path's level, by index,
    with the splits left at the levels. ``link_paths``: the paths crossing each link;
    ``bound``: the level each link last bound at (updated), which orders the links."""
    if len(links) == 1:  # one link: the paths crossing it share one level
        link = links[0]
        members = [p for p in paths if link in p.links]
        level = solve(members, max(capacity[link], 0.0)) if members else math.inf
        if level < math.inf:
            bound[link] = level
        shared = {p.index: level if link in p.links else math.inf for p in paths}
        for path in paths:
            path.align(shared[path.index])
        return shared
    room = {link: capacity[link] for link in links}
    unfrozen = {p.index for p in paths if any(link in room for link in p.links)}
    levels: dict[int, float] = {}
    order = sorted(links, key=bound.__getitem__)  # the links that bound last first
    while unfrozen:
        best, best_link = math.inf, -1
        for link in order:
            members = [p for p in link_paths[link] if p.index in unfrozen]
            if not members:
                continue
            if best < math.inf:  # a link its paths do not fill at ``best`` binds above it
                for path in members:
                    path.align(best)
                if (sum(p.a for p in members) / _UNIT
                        + sum(len(p.flows) - p.j for p in members) * best <= room[link]):
                    continue
            level = solve(members, max(room[link], 0.0))
            if level < best:
                best, best_link = level, link
        if best_link < 0:
            break
        bound[best_link] = best
        for path in link_paths[best_link]:
            if path.index in unfrozen:
                unfrozen.discard(path.index)
                path.align(best)
                levels[path.index] = best
                take = path.a / _UNIT + (len(path.flows) - path.j) * best
                for link in path.links:
                    if link in room and link != best_link:
                        room[link] -= take
    for path in paths:
        if path.index not in levels:
            path.align(math.inf)
            levels[path.index] = math.inf
    return levels
