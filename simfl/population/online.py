"""When each device is online: exact queries over precomputed online intervals.

Every device's online time is a sorted list of half-open intervals ``[t_on_s, t_off_s)``
(CSR layout: the intervals of device d are rows ``offsets[d]:offsets[d + 1]``), made once
by the diurnal model (simfl.population.diurnal), read from a trace
(simfl.population.trace), or one interval ``[0, inf)`` per device (mode "always").
Queries are vectorised binary searches, so nothing is scheduled per device and the
online set at any instant is exact (the whole set, asked at increasing times, advances
each device's intervals from the time before). Per-region sorted copies of the switch times give
the number of devices online at any time in O(R log M), independent of N.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simfl.errors import RunFailed
from simfl.population.trace import TraceMetadata, write_trace

_EMPTY = np.zeros(0, dtype=np.int64)


class PastHorizon(RunFailed):
    """The run's simulated time went past the precomputed availability."""


@dataclass
class _Cursor:
    """Availability.online_devices' last time and each device's first interval starting
    after it: a run asks at increasing times, so these advance instead of searching."""

    t_s: float = math.inf
    next_rows: np.ndarray | None = None


@dataclass(frozen=True)
class RegionCounts:
    """Each region's switch times, sorted: the number of its devices online at any time
    is two binary searches, O(log M) whatever the number of devices."""

    offsets: np.ndarray  # (R + 1,): region r's switches are rows [offsets[r], offsets[r + 1])
    on_s: np.ndarray  # (M,) the intervals' t_on_s, sorted within each region
    off_s: np.ndarray  # (M,) their t_off_s, sorted within each region

    @property
    def num_regions(self) -> int:
        return int(self.offsets.shape[0] - 1)

    def count(self, times: np.ndarray) -> np.ndarray:
        """(T, R) int64: devices online in each region at each of the (T,) times."""
        counts = np.zeros((times.shape[0], self.num_regions), dtype=np.int64)
        for r in range(self.num_regions):
            a, b = self.offsets[r], self.offsets[r + 1]
            started = np.searchsorted(self.on_s[a:b], times, side="right")
            ended = np.searchsorted(self.off_s[a:b], times, side="right")
            counts[:, r] = started - ended  # intervals with t_on <= t < t_off
        return counts


def region_counts(interval_region: np.ndarray, t_on_s: np.ndarray, t_off_s: np.ndarray,
                  num_regions: int) -> RegionCounts:
    """The sorted switch times of each region, from each interval's region."""
    offsets = np.concatenate(
        [[0], np.cumsum(np.bincount(interval_region, minlength=num_regions))]).astype(np.int64)
    sorted_on, sorted_off = np.empty_like(t_on_s), np.empty_like(t_off_s)
    for r in range(num_regions):
        a, b = offsets[r], offsets[r + 1]
        mask = interval_region == r
        sorted_on[a:b] = t_on_s[mask]
        sorted_on[a:b].sort()
        sorted_off[a:b] = t_off_s[mask]
        sorted_off[a:b].sort()
    return RegionCounts(offsets, sorted_on, sorted_off)


@dataclass(frozen=True)
class Availability:
    """Online intervals of N devices and exact queries over them (valid up to horizon_s)."""

    offsets: np.ndarray  # (N + 1,) int64
    t_on_s: np.ndarray  # (M,) sorted within each device
    t_off_s: np.ndarray  # (M,)
    region_idx: np.ndarray  # (N,)
    horizon_s: float
    by_region: RegionCounts  # the number online in each region at any time
    max_intervals: int  # most intervals of one device (binary search depth)
    _cursor: _Cursor = field(default_factory=lambda: _Cursor(), init=False, compare=False,
                             repr=False)

    @property
    def num_devices(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def num_regions(self) -> int:
        return self.by_region.num_regions

    def _check_time(self, t_s: np.ndarray | float) -> None:
        if np.max(t_s) > self.horizon_s:
            raise PastHorizon(f"simulated time {np.max(t_s):.0f} s is past the availability "
                              f"horizon {self.horizon_s:.0f} s: raise "
                              f"population.availability.horizon_s")

    def _locate(self, device_idx: np.ndarray, t_s: np.ndarray) -> np.ndarray:
        """Row of the last interval of each device starting at or before t (-1 if none)."""
        first = self.offsets[device_idx]
        lo, hi = first.copy(), self.offsets[device_idx + 1]
        last_row = max(self.t_on_s.shape[0] - 1, 0)
        for _ in range(math.ceil(math.log2(self.max_intervals + 1)) + 1):
            active = lo < hi
            if not active.any():
                break
            mid = np.minimum((lo + hi) // 2, last_row)
            right = self.t_on_s[mid] <= t_s
            lo = np.where(active & right, mid + 1, lo)
            hi = np.where(active & ~right, mid, hi)
        return np.where(lo > first, lo - 1, -1)

    def _query(self, device_idx: object, t_s: object) -> tuple[np.ndarray, np.ndarray,
                                                               np.ndarray]:
        d, t = np.broadcast_arrays(np.asarray(device_idx, dtype=np.int64),
                                   np.asarray(t_s, dtype=np.float64))
        if d.size:
            self._check_time(t)
        row = self._locate(d, t)
        safe = np.maximum(row, 0)
        until = self.t_off_s[safe] if self.t_off_s.size else np.zeros(d.shape)
        online = (row >= 0) & (t < until)
        return online, until, t

    def is_online(self, device_idx: object, t_s: object) -> np.ndarray:
        """Whether each device is online at t_s (arrays broadcast; bool array)."""
        return self._query(device_idx, t_s)[0]

    def online_until(self, device_idx: object, t_s: object) -> np.ndarray:
        """When each device next goes offline; ``t_s`` itself where it is offline at t_s.

        A task on device d from t0 to t1 finds it online throughout iff
        ``online_until(d, t0) >= t1``.
        """
        online, until, t = self._query(device_idx, t_s)
        return np.where(online, until, t)

    def num_online(self, t_s: float) -> int:
        """Number of devices online at t_s, exact, in O(R log M)."""
        return int(self.num_online_by_region(np.array([t_s]))[0].sum())

    def num_online_by_region(self, hour_starts_s: np.ndarray) -> np.ndarray:
        """(T, R) int64: devices online in each region at each given time."""
        times = np.asarray(hour_starts_s, dtype=np.float64)
        self._check_time(times)
        return self.by_region.count(times)

    def online_devices(self, t_s: float) -> np.ndarray:
        """All devices online at t_s, O(N). At a time no earlier than the last asked (a
        run's rounds), each device's intervals are advanced from there (a few array
        passes); at an earlier one, searched again (:meth:`_locate`): the same devices."""
        if self.num_devices == 0 or self.t_on_s.size == 0:
            return _EMPTY
        self._check_time(t_s)
        nxt = self._next_intervals(float(t_s))
        started = nxt > self.offsets[:-1]
        online = started & (t_s < self.t_off_s[np.maximum(nxt - 1, 0)])
        return np.flatnonzero(online)

    def _next_intervals(self, t_s: float) -> np.ndarray:
        """(N,) each device's first interval starting after t_s (its end row if none)."""
        nxt = self._cursor.next_rows
        if nxt is None or t_s < self._cursor.t_s:
            n = self.num_devices
            row = self._locate(np.arange(n), np.full(n, t_s))
            nxt = np.where(row >= 0, row + 1, self.offsets[:-1])
        else:
            ends, idx = self.offsets[1:], np.arange(self.num_devices)
            while idx.size:  # the devices whose next interval has started by t_s
                rows = nxt[idx]
                more = rows < ends[idx]
                more[more] = self.t_on_s[rows[more]] <= t_s
                idx = idx[more]
                nxt[idx] += 1
        self._cursor.t_s, self._cursor.next_rows = t_s, nxt
        return nxt

    def intervals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(device, t_on_s, t_off_s) of every interval, sorted by device and time."""
        device = np.repeat(np.arange(self.num_devices, dtype=np.int64), np.diff(self.offsets))
        return device, self.t_on_s, self.t_off_s

    def write_trace(self, path: str | Path) -> None:
        """Write these intervals as a trace file (see simfl.population.trace), recording
        the device count and, when finite, the horizon as its window."""
        end = self.horizon_s if math.isfinite(self.horizon_s) else None
        write_trace(path, *self.intervals(), metadata=TraceMetadata(self.num_devices, end))


def sample_online(availability: Availability, t_s: float, k: int, rng: np.random.Generator,
                  busy_mask: np.ndarray | None = None,
                  weights: np.ndarray | None = None) -> np.ndarray:
    """Up to k distinct devices drawn among those online at t_s and not busy (the
    servers' selection: it asks ``availability`` only its public queries).

    Uniformly: rejection sampling of uniform random ids, O(k N / num_online) per
    call, with an exhaustive O(N) fallback when few are online or most online ones
    are busy; the result is uniform over k-subsets of the eligible devices (in draw
    order). With ``weights`` (N,) >= 0: O(N), k successive draws without replacement,
    each ∝ the weights of the eligible devices left; devices of weight 0 are never
    drawn, so fewer than k come back when fewer eligible ones have a positive weight.
    """
    num_online = availability.num_online(t_s)
    n = availability.num_devices
    if k <= 0 or num_online == 0:
        return _EMPTY
    if weights is not None or k * n > num_online * (n // 4 + 1):
        return _sample_exhaustive(availability, t_s, k, rng, busy_mask, weights)
    chosen, drawn = _EMPTY, 0
    while drawn < n:
        batch = int(1.5 * (k - chosen.size) * n / num_online) + 16
        ids = rng.integers(0, n, size=batch)
        ok = availability.is_online(ids, t_s)
        if busy_mask is not None:
            ok &= ~busy_mask[ids]
        pool = np.concatenate([chosen, ids[ok]])
        first = np.sort(np.unique(pool, return_index=True)[1])
        chosen = pool[first][:k]
        if chosen.size == k:
            return chosen
        drawn += batch
    return _sample_exhaustive(availability, t_s, k, rng, busy_mask)


def _sample_exhaustive(availability: Availability, t_s: float, k: int,
                       rng: np.random.Generator, busy_mask: np.ndarray | None,
                       weights: np.ndarray | None = None) -> np.ndarray:
    eligible = availability.online_devices(t_s)
    if busy_mask is not None:
        eligible = eligible[~busy_mask[eligible]]
    p = None
    if weights is not None:
        eligible = eligible[weights[eligible] > 0]
        p = weights[eligible] / weights[eligible].sum()
    if eligible.size <= k:
        return rng.permutation(eligible)
    return rng.choice(eligible, size=k, replace=False, p=p)


def from_intervals(device: np.ndarray, t_on_s: np.ndarray, t_off_s: np.ndarray,
                   region_idx: np.ndarray, num_regions: int,
                   horizon_s: float = math.inf) -> Availability:
    """An Availability from intervals sorted by (device, t_on_s), non-overlapping."""
    counts = np.bincount(device, minlength=region_idx.shape[0])
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return from_csr(offsets, t_on_s, t_off_s, region_idx, num_regions, horizon_s)


def from_csr(offsets: np.ndarray, t_on_s: np.ndarray, t_off_s: np.ndarray,
             region_idx: np.ndarray, num_regions: int,
             horizon_s: float = math.inf) -> Availability:
    """An Availability from CSR intervals: device d's are rows offsets[d]:offsets[d + 1]."""
    counts = np.diff(offsets)
    interval_region = np.repeat(region_idx.astype(np.int32), counts)
    return Availability(
        offsets=offsets, t_on_s=t_on_s, t_off_s=t_off_s, region_idx=region_idx,
        horizon_s=horizon_s,
        by_region=region_counts(interval_region, t_on_s, t_off_s, num_regions),
        max_intervals=int(counts.max(initial=0)))


def always_online(region_idx: np.ndarray, num_regions: int) -> Availability:
    """Every device online on [0, inf)."""
    n = region_idx.shape[0]
    return from_intervals(np.arange(n, dtype=np.int64), np.zeros(n), np.full(n, np.inf),
                          region_idx, num_regions)
