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

from simfl.errors import InputError, RunFailed
from simfl.plugins import AVAILABILITY, build
from simfl.population.diurnal import (
    DAY_S,
    GRID_STEP_S,
    ProfileRates,
    diurnal_hazards,
    online_prob,
)
from simfl.population.habits import (
    HabitRates,
    Habits,
    class_sessions_per_day,
    propensity,
)
from simfl.population.table import DeviceTable
from simfl.population.trace import TraceMetadata, write_trace
from simfl.population.trace_map import (
    MappedTrace,
    TraceRates,
    assign,
    load_trace_devices,
    map_trace,
)
from simfl.rng import Streams
from simfl.scenario import AvailabilityConfig

_EMPTY = np.zeros(0, dtype=np.int64)
_KEY = "population.availability.mode"
# The diurnal precomputation holds ~48 bytes per online interval at its peak: refuse a
# configuration that needs more than this many intervals (~5 GB) before drawing any.
MAX_INTERVALS = 100_000_000
INTERVAL_BYTES = 48
# The most memory one precomputation of availability, or of its statistics or fit, may
# take by its estimate (MAX_INTERVALS intervals of the diurnal model's draw, 4.5 GiB):
# refused above it before anything is allocated (check_work_bytes).
MAX_WORK_BYTES = INTERVAL_BYTES * MAX_INTERVALS
# The diurnal and habits draws advance every device one session a step (0.06 to 0.2 ms a
# step once few devices are left, measured at one thread on a 2-core CPU), so the device
# with the most sessions sets the number of steps: refused above this (3 to 10 s).
MAX_SESSION_STEPS = 50_000
# A habit class's hazard tables (simfl.population.diurnal.exact_hazards): about 8 arrays
# of the day's grid at their peak (measured: 83 kB a class at 28,000 classes).
_CLASS_TABLE_BYTES = 8 * 8 * (DAY_S / GRID_STEP_S + 1)


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


@dataclass(frozen=True)
class Drawn:
    """What an availability mode draws for the training devices: their availability and
    what a run keeps beside it (devices.parquet, the ipw_known oracle)."""

    availability: Availability
    habits: Habits | None = None  # each device's own habits (mode habits)
    trace: MappedTrace | None = None  # the trace device each replays (mode trace)


def build_availability(cfg: AvailabilityConfig, devices: DeviceTable,
                       streams: Streams) -> Availability:
    """The availability of ``devices`` for the configured mode: its factory's
    (simfl.plugins.AVAILABILITY; simfl's own are in simfl.population.modes)."""
    mode = AVAILABILITY.lookup(cfg.mode, _KEY)
    made: Availability = build(mode, _KEY, cfg, cfg, devices, streams, expect=Availability)
    return made


def populate(cfg: AvailabilityConfig, devices: DeviceTable, streams: Streams,
             covariate: np.ndarray | None = None) -> Drawn:
    """The training devices' availability and what the mode keeps beside it: its
    ``populate`` hook's (habits, a trace: tied to each device's population.covariate),
    else its factory's intervals alone. A plug-in's hook that returns no Drawn is an
    InputError naming it."""
    mode = AVAILABILITY.lookup(cfg.mode, _KEY)
    made = mode.hook("populate", _KEY)
    if made is None:
        return Drawn(build_availability(cfg, devices, streams))
    drawn = made(cfg, devices, streams, covariate)
    if not isinstance(drawn, Drawn):
        raise InputError(f"'{_KEY}' = {mode.name!r}: its populate hook returned a "
                         f"{type(drawn).__name__}, not a simfl.population.availability.Drawn")
    return drawn


def device_habits(cfg: AvailabilityConfig, devices: DeviceTable, covariate: np.ndarray | None,
                  streams: Streams) -> Habits | None:
    """Each device's own habits where the mode draws them (its ``habits`` hook); None
    otherwise."""
    draw = AVAILABILITY.lookup(cfg.mode, _KEY).hook("habits", _KEY)
    return None if draw is None else draw(cfg, devices, covariate, streams)


def trace_availability(cfg: AvailabilityConfig, devices: DeviceTable, streams: Streams,
                       covariate: np.ndarray | None = None) -> tuple[Availability, MappedTrace]:
    """A trace replayed by ``devices``: each data device replays the trace device that
    ``trace_mapping`` (coupled to ``covariate`` by ``trace_covariate_correlation``)
    gives it, drawn from the stream ``population.trace_map`` (simfl.population.trace_map).
    InputError (one line) where the counts do not fit the mapping, where the copies a
    mapping makes would take more than MAX_WORK_BYTES (counted before any is made) and
    where no device is ever online."""
    if not cfg.trace_path:
        raise InputError("population.availability.mode = 'trace' needs "
                         "population.availability.trace_path")
    trace = load_trace_devices(cfg.trace_path)
    given = assign(trace, cfg, devices.region_idx, covariate, streams.numpy("population.trace_map"))
    total = float(np.diff(trace.offsets)[given].sum())
    check_work_bytes(INTERVAL_BYTES * total,
                     f"population.availability.trace_mapping = {cfg.trace_mapping!r}: the "
                     f"{devices.num_devices} training devices' {total:.3g} intervals (copies of "
                     f"{cfg.trace_path}'s {trace.t_on_s.size})", "use a shorter trace")
    mapped = map_trace(trace, given, cfg.trace_mapping)
    if mapped.t_on_s.size == 0:
        raise InputError(f"{cfg.trace_path}: no training device's trace device is ever online "
                         "(population.availability.trace_path)")
    traced = from_csr(mapped.offsets, mapped.t_on_s, mapped.t_off_s, devices.region_idx,
                      len(devices.region_names))
    return traced, mapped


def known_rates(cfg: AvailabilityConfig, devices: DeviceTable, habits: Habits | None = None,
                trace: MappedTrace | None = None
                ) -> ProfileRates | HabitRates | TraceRates | None:
    """The true online probability of each device, for a mode that states it (its
    ``rates`` hook): each device's ``habits`` where given, else the mode's (a trace's:
    its own empirical rates by local hour, ``trace`` the trace mapped onto ``devices``,
    None without it; simfl.population.trace_map.TraceRates); None for a mode without
    rates. The oracle of the ``ipw_known`` estimator."""
    rates = AVAILABILITY.lookup(cfg.mode, _KEY).hook("rates", _KEY)
    if rates is None:
        return None
    if habits is not None:
        return HabitRates(devices.utc_offset_s, habits)
    stated: ProfileRates | TraceRates | None = rates(cfg, devices, trace)
    return stated


def check_work_bytes(need_bytes: float, what: str, fix: str = "") -> None:
    """InputError (one line) when a computation's estimated peak memory ``need_bytes``,
    made before any of it is allocated, exceeds MAX_WORK_BYTES; ``what`` names the key
    or file and what the estimate counts, ``fix`` what to change."""
    if need_bytes <= MAX_WORK_BYTES:
        return
    raise InputError(f"{what} would take about {need_bytes / 2**30:.3g} GiB of memory "
                     f"(limit {MAX_WORK_BYTES / 2**30:.3g} GiB)" + (f": {fix}" if fix else ""))


def expected_intervals(cfg: AvailabilityConfig, num_devices: int,
                       habits: Habits | None = None) -> np.ndarray:
    """(N,) each device's expected number of online intervals over ``[0, horizon_s)``
    in the diurnal model, or in habits mode with each device's own ``habits``: its
    sessions a day, ``∫ p(u) μ(u) du`` (online probability times off-hazard, which the
    exact-marginal construction makes the rate of online -> offline switches), times
    the horizon's days, plus one (a session under way at the horizon). Exact for each
    device's drawn habits: the tail of short sessions a wide ``session_log_sd`` gives
    counts as it is, not through the devices' mean."""
    days = cfg.horizon_s / DAY_S
    if habits is not None:
        return (class_sessions_per_day(habits)[habits.habit_class] * days + 1
                + overlay_intervals(habits, cfg.horizon_s))
    _, off_hazard = diurnal_hazards(cfg.online_prob_by_hour, cfg.session_mean_s)
    mid = np.arange(GRID_STEP_S / 2, DAY_S, GRID_STEP_S)
    per_day = float(online_prob(cfg.online_prob_by_hour, mid)
                    @ np.diff(off_hazard.cumulative[0]))
    return np.full(num_devices, per_day * days + 1)


def overlay_intervals(habits: Habits, horizon_s: float, charging: bool = True
                      ) -> np.ndarray:
    """(N,) each device's expected number of engaged spells (bursts) and, with
    ``charging``, charging windows over ``[0, horizon_s)`` (simfl.population.overlays),
    each plus one (a spell or window under way at 0)."""
    n = habits.habit_class.shape[0]
    count = np.zeros(n)
    if habits.dormant_mean_s > 0:
        a = habits.engaged
        cycle = habits.dormant_mean_s / np.maximum(1 - a, 1e-300)  # engaged + dormant mean
        count += np.where(a < 1, horizon_s / cycle + 1, 1.0)
    if charging and habits.charge_prob > 0:
        count += habits.charge_prob * horizon_s / DAY_S + 2
    return count


def check_diurnal_work(cfg: AvailabilityConfig, num_devices: int,
                       habits: Habits | None = None) -> None:
    """InputError (one line, naming the key) when drawing the diurnal or habits model's
    intervals would take too long or too much memory, judged before any is drawn from
    each device's expected number of intervals (:func:`expected_intervals`).

    The draw takes one step per session of the device with the most (refused above
    MAX_SESSION_STEPS: a wide ``habits.session_log_sd`` gives a few devices sessions
    of milliseconds, millions of them, however few devices there are); its memory is
    INTERVAL_BYTES an interval and, in habits mode, each habit class's hazard tables
    (refused above MAX_WORK_BYTES)."""
    per_device = expected_intervals(cfg, num_devices, habits)
    if not per_device.size:
        return
    spread = habits is not None and cfg.habits.session_log_sd > 0
    horizon = f"horizon_s = {cfg.horizon_s:.6g} s"
    sessions = per_device  # of the habits process, drawn a step each
    if habits is not None and (habits.dormant_mean_s > 0 or habits.charge_prob > 0):
        sessions = per_device - overlay_intervals(habits, cfg.horizon_s)
        spells = float(np.max(overlay_intervals(habits, cfg.horizon_s, charging=False)))
        if not spells <= MAX_SESSION_STEPS:
            raise InputError(
                f"population.availability.habits.dormant_mean_h = "
                f"{cfg.habits.dormant_mean_h!r}: a device would have about {spells:.3g} "
                f"engaged spells over {horizon}, drawn one step each (limit "
                f"{MAX_SESSION_STEPS:.0e} steps): raise dormant_mean_h or engaged_share")
    busiest = int(np.argmax(sessions))
    steps = float(sessions[busiest])
    if not steps <= MAX_SESSION_STEPS:
        if habits is not None and spread and \
                habits.session_mean_s[busiest] < cfg.session_mean_s:
            raise InputError(
                f"population.availability.habits.session_log_sd = "
                f"{cfg.habits.session_log_sd!r}: its device with the most sessions (of "
                f"mean {habits.session_mean_s[busiest]:.3g} s against session_mean_s = "
                f"{cfg.session_mean_s!r} s) would have about {steps:.3g} online sessions "
                f"over {horizon}, drawn one step each (limit {MAX_SESSION_STEPS:.0e} steps, "
                f"seconds of work): lower session_log_sd, raise session_mean_s or shorten "
                f"horizon_s")
        raise InputError(
            f"population.availability.session_mean_s = {cfg.session_mean_s!r} s: a device "
            f"would have about {steps:.3g} online sessions over {horizon}, drawn one step "
            f"each (limit {MAX_SESSION_STEPS:.0e} steps, seconds of work): raise "
            f"session_mean_s or shorten horizon_s")
    total = float(per_device.sum())
    num_classes = 0 if habits is None else int(habits.class_shift.shape[0])
    days_a_table = 1 if habits is None else habits.period_s / DAY_S
    tables = _CLASS_TABLE_BYTES * days_a_table * num_classes
    if tables > INTERVAL_BYTES * total:
        check_work_bytes(
            INTERVAL_BYTES * total + tables,
            f"population.availability.habits.propensity_logit_sd = "
            f"{cfg.habits.propensity_logit_sd!r} with session_log_sd = "
            f"{cfg.habits.session_log_sd!r}: the hazard tables of the {num_devices} devices' "
            f"{num_classes} habit classes", "lower the spreads or use fewer devices")
    key = (f"population.availability.habits.session_log_sd = {cfg.habits.session_log_sd!r} "
           f"with session_mean_s = {cfg.session_mean_s!r} s" if spread else
           f"population.availability.session_mean_s = {cfg.session_mean_s!r} s")
    check_work_bytes(
        INTERVAL_BYTES * total + tables,
        f"{key}: the {num_devices} devices' {total:.3g} online sessions over {horizon}",
        "raise session_mean_s or shorten horizon_s"
        + (" or lower session_log_sd" if spread else ""))


def habit_columns(cfg: AvailabilityConfig, num_devices: int, habits: Habits | None,
                  trace: MappedTrace | None = None) -> dict[str, np.ndarray]:
    """Each device's availability habits as devices.parquet columns: propensity (its
    long-run online share; a trace's: over the trace's window, NaN without ``trace``),
    logit_shift, phase_h and session_mean_s (NaN where the mode has no sessions; a
    trace's: of the sessions wholly in its window), engaged_share (bursts; else 1) and
    charge_start_h (NaN without charging windows). Without habits every device has the
    mode's."""
    plain = {"engaged_share": np.ones(num_devices), "charge_start_h": np.full(num_devices,
                                                                              math.nan)}
    if trace is not None:
        return {"propensity": trace.propensity, "logit_shift": np.zeros(num_devices),
                "phase_h": np.zeros(num_devices), "session_mean_s": trace.session_mean_s,
                **plain}
    if habits is not None:
        return {"propensity": propensity(habits), "logit_shift": habits.logit_shift,
                "phase_h": habits.phase_s / 3600.0, "session_mean_s": habits.session_mean_s,
                "engaged_share": habits.engaged, "charge_start_h": habits.charge_start_h}
    profile = AVAILABILITY.lookup(cfg.mode, _KEY).hook("profile", _KEY)
    share, session = (math.nan, math.nan) if profile is None else profile(cfg)
    return {"propensity": np.full(num_devices, share),
            "logit_shift": np.zeros(num_devices), "phase_h": np.zeros(num_devices),
            "session_mean_s": np.full(num_devices, session), **plain}
