"""The diurnal availability model (docs/design.md §3), precomputed for all devices at once.

Each device is a two-state (offline/online) Markov process in its local time ``u``:

- online -> offline at hazard ``mu(u) = max(1 / session_mean_s, -p'(u) / p(u))``;
- offline -> online at hazard ``lambda(u) = (p'(u) + mu(u) p(u)) / (1 - p(u))``,

where ``p(u)`` is the configured online probability at local time ``u`` (linear
between the hourly values). Then ``P(online at u)`` solves ``P' = lambda (1 - P) - mu P``
and, started at ``P = p`` (the state at t = 0 is drawn from ``p``), it equals ``p(u)``
at all times: the online fraction follows the profile exactly, not with a lag. Sessions
are exponential with the configured mean wherever ``p`` falls no faster than
``p / session_mean_s``; where it falls faster (steep evenings, long sessions), the
off hazard is raised just enough to keep the marginal exact, shortening those sessions.
(A time-inhomogeneous Markov model of availability as in e.g. Yang et al. 2021, FLASH;
the exact-marginal construction is this project's.)

Hazards are integrated on a 60 s grid of one local day (piecewise-constant hazard
within a cell; a local week for a profile with a weekly rhythm, simfl.population.habits),
and each device's next switch is drawn by inverting the cumulative
hazard at ``H(u) + Exp(1)``: one vectorised numpy step per session for all devices, no
SimPy events. Output: the online intervals ``[t_on_s, t_off_s)`` per device, in UTC.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DAY_S = 86400.0
WEEK_S = 7 * DAY_S  # simulated t = 0 is Monday 00:00 UTC
HOUR_S = 3600.0
GRID_STEP_S = 60.0
_MIN_HAZARD_PER_S = 1e-12  # keeps the cumulative hazard strictly increasing


def online_prob(profile: tuple[float, ...] | np.ndarray, local_s: np.ndarray) -> np.ndarray:
    """The configured online probability at local time (seconds), linear between hours."""
    values = np.append(np.asarray(profile, dtype=float), profile[0])
    return np.interp(np.mod(local_s, DAY_S), np.arange(25) * HOUR_S, values)


@dataclass(frozen=True)
class ProfileRates:
    """Each device's true probability of being online at a UTC time: its profile at its
    local time, which the model keeps exact (for ``always``, a profile of ones).

    An oracle for the estimation study (the ``ipw_known`` estimator): a real server
    does not know it; it tests whether inverse-probability weighting would remove the
    availability bias if the online rates were known, apart from estimating them.
    """

    utc_offset_s: np.ndarray  # (N,) local time = UTC + offset
    profile: tuple[float, ...]  # 24 hourly online probabilities

    def online_prob(self, device_idx: np.ndarray, t_s: float) -> np.ndarray:
        return online_prob(self.profile, t_s + self.utc_offset_s[device_idx])


@dataclass(frozen=True)
class DayHazard:
    """Cumulative hazards of one local day (or week: ``period_s``) on a uniform grid, one
    row per class of devices, repeated every period.

    Piecewise linear between grid points; ``inverse`` is its exact inverse, found
    through buckets of equal hazard width instead of a binary search per value.
    """

    grid_s: np.ndarray  # (G + 1,) local seconds from the period's start, 0 .. period_s
    cumulative: np.ndarray  # (C, G + 1) integral of the hazard from midnight, starts at 0
    bucket_first: np.ndarray  # (C, B) int32: first grid cell of each bucket of hazard
    constant_rate_per_s: np.ndarray  # (C,) the rate where a class's never varies, else nan

    @classmethod
    def from_rates(cls, grid_s: np.ndarray, rate_per_s: np.ndarray) -> DayHazard:
        """From (C, G) rates, piecewise constant on the grid's cells."""
        rates = np.atleast_2d(rate_per_s)
        cumulative = np.concatenate([np.zeros((rates.shape[0], 1)),
                                     np.cumsum(rates * GRID_STEP_S, axis=1)], axis=1)
        num_cells = grid_s.shape[0] - 1
        first = np.empty((rates.shape[0], num_cells), dtype=np.int32)
        for c, row in enumerate(cumulative):
            edges = np.arange(num_cells) * (row[-1] / num_cells)
            first[c] = np.clip(np.searchsorted(row, edges, side="right") - 1, 0, num_cells - 1)
        constant = np.where(np.all(rates == rates[:, :1], axis=1), rates[:, 0], np.nan)
        return cls(grid_s, cumulative, first, constant)

    @property
    def period_s(self) -> float:
        return float(self.grid_s[-1])

    def per_day(self, cls: np.ndarray) -> np.ndarray:
        """The cumulative hazard over one period (a day unless the grid is a week's)."""
        return self.cumulative[cls, -1]

    def at(self, local_s: np.ndarray, cls: np.ndarray) -> np.ndarray:
        days = np.floor(local_s / self.period_s)
        # The grid is uniform: index arithmetic instead of np.interp's binary search.
        cells = (local_s - days * self.period_s) / GRID_STEP_S
        cell = np.minimum(cells.astype(np.int64), self.grid_s.shape[0] - 2)
        lower = self.cumulative[cls, cell]
        upper = self.cumulative[cls, cell + 1]
        return days * self.per_day(cls) + lower + (upper - lower) * (cells - cell)

    def inverse(self, hazard: np.ndarray, cls: np.ndarray) -> np.ndarray:
        per_day = self.per_day(cls)
        days = np.floor(hazard / per_day)
        rest = np.minimum(hazard - days * per_day, per_day)
        num_buckets = self.bucket_first.shape[1]
        bucket = np.minimum((rest * (num_buckets / per_day)).astype(np.int64),
                            num_buckets - 1)
        cell = self.bucket_first[cls, bucket].astype(np.int64)
        behind = np.flatnonzero(self.cumulative[cls, cell + 1] < rest)
        while behind.size:  # cells of low hazard: several per bucket
            cell[behind] += 1
            behind = behind[self.cumulative[cls[behind], cell[behind] + 1] < rest[behind]]
        lower = self.cumulative[cls, cell]
        upper = self.cumulative[cls, cell + 1]
        return (days * self.period_s + self.grid_s[cell]
                + GRID_STEP_S * (rest - lower) / (upper - lower))


def _grid(period_s: float = DAY_S) -> tuple[np.ndarray, np.ndarray]:
    grid = np.arange(0.0, period_s + GRID_STEP_S / 2, GRID_STEP_S)
    return grid, (grid[:-1] + grid[1:]) / 2


def exact_hazards(p: np.ndarray, dp: np.ndarray, session_mean_s: np.ndarray
                  ) -> tuple[DayHazard, DayHazard]:
    """(offline -> online, online -> offline) hazards that keep P(online) = p exactly,
    from (C, G) p and dp/du at the grid's cell midpoints (G cells of a day or of a week)
    and (C,) session means."""
    mu = np.maximum(1.0 / np.asarray(session_mean_s, dtype=float)[:, None], -dp / p)
    lam = np.maximum((dp + mu * p) / (1.0 - p), _MIN_HAZARD_PER_S)
    grid, _ = _grid(p.shape[1] * GRID_STEP_S)
    return DayHazard.from_rates(grid, lam), DayHazard.from_rates(grid, mu)


def diurnal_hazards(profile: tuple[float, ...], session_mean_s: float) -> tuple[DayHazard,
                                                                                 DayHazard]:
    """(offline -> online, online -> offline) cumulative hazards over one local day, for
    one class: every device follows ``profile``."""
    _, mid = _grid()
    p = online_prob(profile, mid)
    values = np.asarray(profile, dtype=float)
    slope_per_s = (np.roll(values, -1) - values) / HOUR_S  # (24,) p' on each hour
    dp = slope_per_s[(mid // HOUR_S).astype(int)]
    return exact_hazards(p[None, :], dp[None, :], np.array([session_mean_s]))


def _next_switch(hazard: DayHazard, t_s: np.ndarray, shift_s: np.ndarray, cls: np.ndarray,
                 rng: np.random.Generator) -> np.ndarray:
    """UTC time of the next switch after ``t_s`` for devices with local = UTC + shift."""
    draw = rng.standard_exponential(t_s.shape[0])
    rate = hazard.constant_rate_per_s[cls]
    constant = ~np.isnan(rate)
    if constant.all():  # exponential: no need to invert
        t_next = t_s + draw / rate
    else:
        t_next = hazard.inverse(hazard.at(t_s + shift_s, cls) + draw, cls) - shift_s
        if constant.any():
            t_next = np.where(constant, t_s + draw / np.where(constant, rate, 1.0), t_next)
    return np.maximum(t_next, np.nextafter(t_s, np.inf))


def diurnal_intervals(utc_offset_s: np.ndarray, profile: tuple[float, ...],
                      session_mean_s: float, horizon_s: float,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Online intervals of every device over ``[0, horizon_s)``, in CSR layout, every
    device following ``profile`` at its local time.

    Returns (offsets, t_on_s, t_off_s): the intervals of device d, in time order, are
    rows ``offsets[d]:offsets[d + 1]``. A device online at t = 0 has an interval
    starting at 0; the last interval of a device may end after the horizon (its drawn
    end, so ``online_until`` stays exact up to the horizon).
    """
    shift = np.mod(utc_offset_s.astype(float), DAY_S)
    on_hazard, off_hazard = diurnal_hazards(profile, session_mean_s)
    return markov_intervals(shift, np.zeros(shift.shape[0], dtype=np.int64),
                            online_prob(profile, shift), on_hazard, off_hazard, horizon_s, rng)


def markov_intervals(shift: np.ndarray, cls: np.ndarray, start_prob: np.ndarray,
                     on_hazard: DayHazard, off_hazard: DayHazard, horizon_s: float,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The two-state process of every device (its hazard class ``cls``, its clock
    ``shift`` in [0, the hazards' period)), online at t = 0 with probability
    ``start_prob``."""
    num_devices = shift.shape[0]
    online = rng.random(num_devices) < start_prob
    t = np.where(online, 0.0,
                 _next_switch(on_hazard, np.zeros(num_devices), shift, cls, rng))
    keep = t < horizon_s
    dev = np.flatnonzero(keep).astype(np.int32)
    t, dev_shift, dev_cls = t[keep], shift[keep], cls[keep]
    counts = np.zeros(num_devices, dtype=np.int64)
    chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    while dev.size:  # one session of every device still active per step
        t_off = _next_switch(off_hazard, t, dev_shift, dev_cls, rng)
        chunks.append((dev, t, t_off))
        counts[dev] += 1
        keep = t_off < horizon_s
        dev, t_off, dev_shift, dev_cls = dev[keep], t_off[keep], dev_shift[keep], dev_cls[keep]
        t = _next_switch(on_hazard, t_off, dev_shift, dev_cls, rng)
        keep = t < horizon_s
        dev, t, dev_shift, dev_cls = dev[keep], t[keep], dev_shift[keep], dev_cls[keep]
    return scatter_csr(counts, chunks)


def scatter_csr(counts: np.ndarray, chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chunk k holds the k-th session of each device in it: row offsets[d] + k."""
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    t_on = np.empty(int(offsets[-1]))
    t_off = np.empty(int(offsets[-1]))
    chunks.reverse()
    k = 0
    while chunks:
        dev, chunk_on, chunk_off = chunks.pop()  # frees each chunk once placed
        rows = offsets[dev] + k
        t_on[rows] = chunk_on
        t_off[rows] = chunk_off
        k += 1
    return offsets, t_on, t_off
