"""Fitting the habits availability model to online intervals (docs/design.md §3).

Given every device's online intervals over an observation window [0, T), its UTC offset
(zeros for a plain trace: local time is then taken to be UTC) and T, the parameters of
``availability.mode = "habits"`` (simfl.population.habits) are estimated by moments, each
with the finite window's noise corrected. Time is binned in local hours centred on
h:00 (``[h − ½, h + ½)``); ``D = T / 1 day``.

- **Population profile** (reported as is): y(h), the online share of all devices in the
  hour centred on h:00, ``Σ_d online_d(h) / Σ_d observed_d(h)``. Under the model it is
  the region profile p smoothed by the phase distribution, ``y = p ∗ N(0, σ_φ²)``,
  averaged over the hour. ``online_prob_by_hour`` is p **deconvolved**
  (simfl.population.fit_profile): the knots in [0.001, 0.999] whose hourly means,
  smoothed by N(0, σ̂_φ²), are y less its noise (harmonics no stronger than noise
  dropped), by bounded least squares with a small roughness penalty; so the fitted
  model, simulated, gives back y's range (not y smoothed twice).
- **Phase**: device d's hour-of-day shares s_d(h) = online / observed time in each hour
  over all days; its phase is the shift of their first harmonic against the
  population's, ``φ̂_d = wrap(arg C_y − arg C_d) / ω_1``, ``C_x = Σ_h x(h) e^{−iω_1 h}``
  (exact for a shifted copy of y; for a profile that is not symmetric the first
  harmonic's angle also moves a little with the propensity, which adds to the spread).
  Its noise is estimated by splitting the days into even and odd: each half has twice
  the noise variance of the whole, so ``v_φ = mean_d wrap(φ̂_d^even − φ̂_d^odd)² / 4``, and
  ``σ̂_φ² = max(0, var_d φ̂_d − v_φ)``.
- **Propensity**: device d's online share ŝ_d = mean_h s_d(h), clipped to
  [½ h / T, 1 − ½ h / T]; ẑ_d solves ``m(z) = mean_u σ(g(u) + z) = ŝ_d`` (m is increasing;
  a table), u over the day, g = ``calibrated_logits(p̂, σ̂_z)``. Its noise: with v_d the
  variance of d's daily shares over its whole local days, ``Var ŝ_d ≈ v_d / D`` (days
  taken as uncorrelated: sessions that cross midnight correlate neighbouring days a
  little), and by the delta method ``Var ẑ_d ≈ v_d / (D m'(ẑ_d)²)``,
  ``m'(z) = mean_u σ(1 − σ)``. m⁻¹ is curved (logit-like), so ẑ_d is biased by
  ``−m''/(2m'³) · Var ŝ_d`` (low shares come out lower still, which would widen the
  spread): that is subtracted, ``m''(z) = mean_u σ(1 − σ)(1 − 2σ)``. Then
  ``σ̂_z² = max(0, var_d ẑ_d − mean_d Var ẑ_d)``; g depends on σ̂_z, so this is iterated
  from σ̂_z = 0 to a fixed point.
- **Sessions**: only sessions wholly inside the window (0 < t_on, t_off < T; those cut
  by its ends are excluded). With m_d ≥ 2 such sessions of mean L̄_d,
  ``session_mean_s = mean_d L̄_d`` (the model's mean of the devices' means) and
  ``session_log_sd² = max(0, var_d log L̄_d − mean_d ψ₁(m_d))``, ψ₁(m) = Σ_{k≥m} 1/k² ≈ 1/m
  the variance of the log of the mean of m exponential lengths (trigamma).

Known biases: where the profile falls faster than p / session_mean_s the model ends
sessions early to keep its marginal exact (simfl.population.diurnal), so observed
sessions are a little shorter than the configured mean (and spread less); sessions cut
by the window are dropped, which favours short ones by O(mean / T); a share near 0 or 1
is clipped. The noise corrections are first and second order: where a device's share is
very noisy (few, long sessions in the window) they fall short and the propensity's
spread comes out high. Measured on 3,000 devices over 14 days with the default profile
(σ_z 0.8, σ_φ 1.5 h, τ 0.5): sessions of 1 h (10 draws) give σ̂_z +0.01, τ̂ −0.006
and the session mean within its sampling error; sessions of 4 h (one draw) give σ̂_z
+0.05, the mean −7 % and τ̂ 0.43 (the model's shortening, longest sessions most); 8 h
sessions σ̂_z +0.13, the mean −22 %, τ̂ 0.29. The propensity's and phase's within-region
correlation with a data covariate is not fitted (a trace carries no covariate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simfl.errors import InputError
from simfl.population.availability import Availability, check_work_bytes
from simfl.population.diurnal import DAY_S, HOUR_S
from simfl.population.fit_profile import OMEGA, deconvolved_profile, noise_power
from simfl.population.habits import calibrated_logits, habit_prob
from simfl.population.trace import read_trace, trace_metadata
from simfl.scenario import AvailabilityConfig, HabitsConfig

_MIN_SESSIONS = 2
_DAY_GRID_S = np.arange(96) * 900.0 + 450.0  # the day's 15-minute midpoints
# Peak bytes of a fit (check_fit_size) per device and local hour of the window (its
# online and observed seconds and their temporaries: 42 to 45 measured), and per interval.
_BYTES_PER_DEVICE_HOUR = 48
_BYTES_PER_INTERVAL = 64


@dataclass(frozen=True)
class FittedHabits:
    """The habits model's parameters fitted to online intervals (see the module's
    docstring for each estimator)."""

    online_prob_by_hour: tuple[float, ...]  # p(h), the phase's smoothing deconvolved
    population_share_by_hour: tuple[float, ...]  # y(h), all devices' share, as observed
    session_mean_s: float
    propensity_logit_sd: float
    phase_sd_h: float
    session_log_sd: float
    num_devices: int  # devices in the window (all of utc_offset_s)
    num_days: float  # window length in days
    num_sessions: int  # sessions wholly inside the window, of devices with >= 2 of them


@dataclass(frozen=True)
class LocalHours:
    """Online and observed seconds of each device in each local hour centred on h:00:
    (N, days, 24) arrays, day 0 starting half an hour before the local midnight before
    the window opens."""

    online_s: np.ndarray
    observed_s: np.ndarray

    def hourly_share(self, days: slice = slice(None)) -> np.ndarray:
        """(N, 24) each device's online share by hour of day over ``days``."""
        return self.online_s[:, days].sum(axis=1) / self.observed_s[:, days].sum(axis=1)

    def daily_share_variance(self) -> np.ndarray:
        """(N,) the variance of each device's online share over its whole days."""
        whole = self.observed_s.sum(axis=2) >= DAY_S - 1e-6
        share = np.where(whole, self.online_s.sum(axis=2) / DAY_S, np.nan)
        return np.nanvar(share, axis=1, ddof=1)


def _binned(dev: np.ndarray, start: np.ndarray, end: np.ndarray, num_devices: int,
            num_bins: int) -> np.ndarray:
    """(N, num_bins) seconds of the intervals [start, end) (seconds, >= 0) of devices
    ``dev`` in each hour bin: a difference array, a cumulative sum and partial hours."""
    first = np.floor(start / HOUR_S).astype(np.int64)
    last = np.floor(end / HOUR_S).astype(np.int64)
    size = num_devices * num_bins
    i, j = dev * num_bins + first, dev * num_bins + last
    rate = np.bincount(i, minlength=size) - np.bincount(j, minlength=size)
    part = (np.bincount(j, weights=end - last * HOUR_S, minlength=size)
            - np.bincount(i, weights=start - first * HOUR_S, minlength=size))
    return HOUR_S * np.cumsum(rate.reshape(num_devices, num_bins), axis=1) + part.reshape(
        num_devices, num_bins)


def local_hours(device: np.ndarray, t_on_s: np.ndarray, t_off_s: np.ndarray,
                utc_offset_s: np.ndarray, horizon_s: float) -> LocalHours:
    """Each device's online and observed time by local hour over [0, horizon_s), its
    intervals clipped to the window."""
    n = int(utc_offset_s.shape[0])
    days = math.ceil(horizon_s / DAY_S) + 2
    shift = np.mod(np.asarray(utc_offset_s, dtype=float), DAY_S) + HOUR_S / 2
    on = np.maximum(t_on_s, 0.0)
    off = np.minimum(t_off_s, horizon_s)
    keep = off > on
    dev = np.asarray(device, dtype=np.int64)[keep]
    online = _binned(dev, on[keep] + shift[dev], off[keep] + shift[dev], n, 24 * days)
    everyone = np.arange(n, dtype=np.int64)
    observed = _binned(everyone, shift, horizon_s + shift, n, 24 * days)
    return LocalHours(online.reshape(n, days, 24), observed.reshape(n, days, 24))


def _first_harmonic_angle(share: np.ndarray) -> np.ndarray:
    """arg C of each row's first harmonic C = Σ_h x(h) e^{−iω h}; NaN where C = 0."""
    c = share @ np.exp(-1j * OMEGA * np.arange(24))
    return np.where(np.abs(c) > 0, np.angle(c), np.nan)


def _wrap_h(phase_h: np.ndarray) -> np.ndarray:
    """Hours wrapped into [−12, 12)."""
    return np.mod(phase_h + 12.0, 24.0) - 12.0


def device_phases_h(hours: LocalHours, population: np.ndarray, days: slice = slice(None)
                    ) -> np.ndarray:
    """(N,) each device's shift φ̂_d (hours, later > 0) of its hour-of-day shares over
    ``days`` against the population's ``population`` (24,), by the first harmonic."""
    lag = _first_harmonic_angle(population[None, :])[0] - _first_harmonic_angle(
        hours.hourly_share(days))
    return _wrap_h(lag / OMEGA)


def phase_sd_h(hours: LocalHours, population: np.ndarray) -> float:
    """σ̂_φ: the devices' phase spread less the split-half estimate of its noise."""
    phase = device_phases_h(hours, population)
    half = _wrap_h(device_phases_h(hours, population, slice(0, None, 2))
                   - device_phases_h(hours, population, slice(1, None, 2)))
    ok = np.isfinite(phase) & np.isfinite(half)
    noise = np.mean(half[ok] ** 2) / 4
    return math.sqrt(max(0.0, float(np.var(phase[ok])) - noise))


def _day_mean_prob(hour_logits: np.ndarray, z: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """m(z) = mean_u σ(g(u) + z), m'(z) = mean_u σ(1 − σ) and m''(z) =
    mean_u σ(1 − σ)(1 − 2σ), for each z."""
    p = habit_prob(hour_logits, z[:, None], _DAY_GRID_S[None, :])
    slope = p * (1 - p)
    return p.mean(axis=1), slope.mean(axis=1), (slope * (1 - 2 * p)).mean(axis=1)


def logit_shifts(share: np.ndarray, hour_logits: np.ndarray) -> np.ndarray:
    """ẑ_d with m(ẑ_d) = share_d: m is increasing, so logit m is tabulated on a grid of z
    (step 0.005) and inverted by linear interpolation."""
    grid = np.arange(-25.0, 25.0 + 1e-9, 0.005)
    m = _day_mean_prob(hour_logits, grid)[0]
    return np.interp(_logit(share), _logit(m), grid)


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p) - np.log1p(-p)


def propensity_logit_sd(hours: LocalHours, profile: np.ndarray, num_days: float) -> float:
    """σ̂_z: the sd of the devices' ẑ less their finite-window noise, at a fixed point of
    σ̂_z ↦ the ẑ's under g = calibrated_logits(profile, σ̂_z)."""
    eps = HOUR_S / 2 / (num_days * DAY_S)
    share = np.clip(hours.hourly_share().mean(axis=1), eps, 1 - eps)
    share_var = hours.daily_share_variance() / num_days
    sd = 0.0
    for _ in range(30):
        g = calibrated_logits(tuple(profile), sd)
        z = logit_shifts(share, g)
        _, slope, curvature = _day_mean_prob(g, z)
        noise = share_var / slope ** 2
        z = z + curvature / (2 * slope ** 3) * share_var  # E ẑ − z = −m''/(2m'³) Var ŝ
        ok = np.isfinite(noise)
        new = math.sqrt(max(0.0, float(np.var(z[ok])) - float(np.mean(noise[ok]))))
        if abs(new - sd) < 1e-5:
            break
        sd = new
    return new


def _trigamma_int(m: np.ndarray) -> np.ndarray:
    """ψ₁(m) = Σ_{k≥m} 1/k² for integers m >= 1."""
    inverse_squares = 1.0 / np.arange(1, int(m.max(initial=1)) + 1) ** 2
    below = np.concatenate([[0.0], np.cumsum(inverse_squares)])
    return np.pi ** 2 / 6 - below[m - 1]


@dataclass(frozen=True)
class DeviceSessions:
    """Each device's sessions wholly inside the window: (N,) count and mean length."""

    count: np.ndarray
    mean_s: np.ndarray  # NaN for a device with none


def device_sessions(device: np.ndarray, t_on_s: np.ndarray, t_off_s: np.ndarray,
                    num_devices: int, horizon_s: float) -> DeviceSessions:
    """Count and mean length of each device's sessions with 0 < t_on_s, t_off_s < T."""
    inside = (t_on_s > 0) & (t_off_s < horizon_s)
    dev = np.asarray(device, dtype=np.int64)[inside]
    count = np.bincount(dev, minlength=num_devices)
    total = np.bincount(dev, weights=(t_off_s - t_on_s)[inside], minlength=num_devices)
    with np.errstate(invalid="ignore", divide="ignore"):
        return DeviceSessions(count, total / count)


def session_moments(sessions: DeviceSessions) -> tuple[float, float, int]:
    """(session_mean_s, session_log_sd, sessions used) from devices with >= 2 sessions."""
    ok = sessions.count >= _MIN_SESSIONS
    if not ok.any():
        raise InputError("no device has two sessions wholly inside the window: "
                         "cannot fit session lengths")
    log_mean = np.log(sessions.mean_s[ok])
    noise = float(np.mean(_trigamma_int(sessions.count[ok])))
    log_sd = math.sqrt(max(0.0, float(np.var(log_mean, ddof=1 if ok.sum() > 1 else 0))
                           - noise))
    return float(np.mean(sessions.mean_s[ok])), log_sd, int(sessions.count[ok].sum())


def check_fit_size(num_devices: int, horizon_s: float, num_intervals: int, source: str,
                   devices: str = "") -> None:
    """InputError (one line) when a fit of ``num_devices`` devices over [0, horizon_s)
    would take more than MAX_WORK_BYTES: it holds each device's online and observed
    seconds in every local hour of the window (:func:`local_hours`). Judged before
    anything is allocated; ``source`` names the trace or key, ``devices`` where
    ``num_devices`` comes from."""
    hours = 24 * (math.ceil(horizon_s / DAY_S) + 2) if math.isfinite(horizon_s) else math.inf
    check_work_bytes(_BYTES_PER_DEVICE_HOUR * float(num_devices) * hours
                     + _BYTES_PER_INTERVAL * num_intervals,
                     f"{source}: a fit of {num_devices} device{'s' * (num_devices != 1)}"
                     f"{devices} hour by hour over {horizon_s / DAY_S:.3g} days "
                     f"({num_devices * hours:.3g} device-hours)")


def fit_habits(device: np.ndarray, t_on_s: np.ndarray, t_off_s: np.ndarray,
               utc_offset_s: np.ndarray, horizon_s: float,
               source: str = "availability") -> FittedHabits:
    """The habits model's parameters from online intervals ``[t_on_s, t_off_s)`` of
    ``device`` (as read_trace returns them: non-overlapping within a device) observed
    over [0, horizon_s), devices 0..N−1 at UTC offsets ``utc_offset_s`` (N,) seconds
    (zeros: local time is UTC). The window must span at least 3 days (two whole local
    days per device, two halves of every hour of the day), and the fit fit in memory
    (:func:`check_fit_size`, naming ``source``)."""
    if not horizon_s >= 3 * DAY_S or not math.isfinite(horizon_s):
        raise InputError(f"fitting habits needs a finite window of at least 3 days, "
                         f"not {horizon_s} s")
    n = int(np.asarray(utc_offset_s).shape[0])
    check_fit_size(n, horizon_s, int(np.asarray(t_on_s).shape[0]), source)
    num_days = horizon_s / DAY_S
    hours = local_hours(device, t_on_s, t_off_s, utc_offset_s, horizon_s)
    population = hours.online_s.sum(axis=(0, 1)) / hours.observed_s.sum(axis=(0, 1))
    phase = phase_sd_h(hours, population)
    profile = deconvolved_profile(population, phase, noise_power(
        hours.online_s.sum(axis=0), hours.observed_s.sum(axis=0)))
    session_mean, session_log_sd, used = session_moments(
        device_sessions(device, t_on_s, t_off_s, n, horizon_s))
    return FittedHabits(
        online_prob_by_hour=tuple(float(p) for p in profile),
        population_share_by_hour=tuple(float(p) for p in population),
        session_mean_s=session_mean,
        propensity_logit_sd=propensity_logit_sd(hours, profile, num_days),
        phase_sd_h=phase, session_log_sd=session_log_sd, num_devices=n,
        num_days=num_days, num_sessions=used)


@dataclass(frozen=True)
class Observed:
    """Online intervals to fit (and to check the fit against), sorted by (device, t_on_s)
    as read_trace and Availability.intervals give them, and what frames them."""

    device: np.ndarray
    t_on_s: np.ndarray
    t_off_s: np.ndarray
    utc_offset_s: np.ndarray  # (N,) devices 0..N-1; zeros for a trace
    horizon_s: float  # the window [0, horizon_s)
    local_time: bool  # the offsets are known (a scenario's devices); else UTC (a trace)
    source: str  # the trace or key, for messages

    @property
    def num_devices(self) -> int:
        return int(self.utc_offset_s.shape[0])


def availability_observed(availability: Availability, utc_offset_s: np.ndarray
                          ) -> Observed:
    """A built population's availability (e.g. a scenario's) over its horizon, or, for a
    replayed trace (no horizon), the whole days up to its last start."""
    device, t_on, t_off = availability.intervals()
    horizon_s = availability.horizon_s
    if not math.isfinite(horizon_s):
        horizon_s = _days_to_last_start(t_on)
    return Observed(device, t_on, t_off, np.asarray(utc_offset_s, dtype=float), horizon_s,
                    True, "population.availability")


def trace_observed(path: str | Path, horizon_s: float | None = None,
                   num_devices: int | None = None) -> Observed:
    """A trace file (simfl.population.trace): devices 0..``num_devices`` − 1 (default: its
    recorded client count, else up to its highest client_idx), local time = UTC (a trace
    has no offsets), over [0, horizon_s), by default its recorded window, else the whole
    days up to the last interval's start."""
    recorded = trace_metadata(path)
    given = " (--num-devices)" if num_devices else " (recorded in the trace)"
    num_devices = num_devices or recorded.num_clients
    device, t_on, t_off = read_trace(path, num_devices or int(np.iinfo(np.int64).max))
    if device.size == 0:
        raise InputError(f"{path}: the trace holds no online interval")
    horizon_s = horizon_s or recorded.end_s or _days_to_last_start(t_on)
    count = int(device.max()) + 1 if num_devices is None else num_devices
    check_fit_size(count, horizon_s, int(device.size), str(path),
                   given if num_devices else f" (client_idx up to {count - 1})")
    return Observed(device, t_on, t_off, np.zeros(count), horizon_s, False, str(path))


def fit_observed(observed: Observed) -> FittedHabits:
    """fit_habits on ``observed``."""
    return fit_habits(observed.device, observed.t_on_s, observed.t_off_s,
                      observed.utc_offset_s, observed.horizon_s, observed.source)


def fit_availability(availability: Availability, utc_offset_s: np.ndarray) -> FittedHabits:
    """fit_habits on a built population's availability (:func:`availability_observed`)."""
    return fit_observed(availability_observed(availability, utc_offset_s))


def _days_to_last_start(t_on_s: np.ndarray) -> float:
    """The whole days [0, k days) that hold every interval's start."""
    if t_on_s.size == 0:
        raise InputError("no online interval to fit")
    return max(1, math.ceil(float(t_on_s.max()) / DAY_S)) * DAY_S


def fit_trace(path: str | Path, horizon_s: float | None = None) -> FittedHabits:
    """fit_habits on a trace file (:func:`trace_observed`)."""
    return fit_observed(trace_observed(path, horizon_s))


# The scenario's checks (simfl.scenario.HabitsConfig): fitted values are clipped into them.
_BOUNDS = {"propensity_logit_sd": 5.0, "phase_sd_h": 12.0, "session_log_sd": 3.0}


def fitted_config(fitted: FittedHabits) -> AvailabilityConfig:
    """The availability the fitted tables (:func:`to_toml`) give a scenario: mode habits,
    the values as written (4 decimals; the session mean 1), spreads clipped into the
    scenario's bounds, everything else at its default."""
    spreads = {name: round(min(getattr(fitted, name), bound), 4)
               for name, bound in _BOUNDS.items()}
    return AvailabilityConfig(
        mode="habits", online_prob_by_hour=tuple(round(p, 4) for p in
                                                 fitted.online_prob_by_hour),
        session_mean_s=round(fitted.session_mean_s, 1), habits=HabitsConfig(**spreads))


def to_toml(fitted: FittedHabits) -> str:
    """The fitted parameters as the ``[population.availability]`` (mode "habits") and
    ``[population.availability.habits]`` tables of a scenario (:func:`fitted_config`)."""
    cfg = fitted_config(fitted)
    p = cfg.online_prob_by_hour
    hours = ",\n    ".join(", ".join(f"{v:.4f}" for v in p[i:i + 8]) for i in (0, 8, 16))
    lines = [
        f"# Fitted to {fitted.num_devices} devices over {fitted.num_days:g} days "
        f"({fitted.num_sessions} whole sessions) by simfl.population.fit",
        "[population.availability]",
        'mode = "habits"',
        f"online_prob_by_hour = [\n    {hours},\n]",
        f"session_mean_s = {cfg.session_mean_s:.1f}",
        "",
        "[population.availability.habits]",
    ]
    lines += [f"{name} = {getattr(cfg.habits, name):.4f}" for name in _BOUNDS]
    return "\n".join(lines) + "\n"
