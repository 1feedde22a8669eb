"""The habits model's base estimators (simfl.population.fit; docs/design.md §3): shares
and sessions read from online intervals, and the moments that fit the profile, the
phases, the propensities and the session lengths.

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

import numpy as np

from simfl.errors import InputError
from simfl.population.diurnal import DAY_S, HOUR_S
from simfl.population.fit_profile import OMEGA
from simfl.population.habits import calibrated_logits, habit_prob

_MIN_SESSIONS = 2
_DAY_GRID_S = np.arange(96) * 900.0 + 450.0  # the day's 15-minute midpoints


@dataclass(frozen=True)
class LocalHours:
    """Online and observed seconds of each device in each local hour centred on h:00:
    (N, days, 24) arrays, day 0 starting half an hour before the local midnight before
    the window opens."""

    online_s: np.ndarray
    observed_s: np.ndarray

    def hourly_share(self, days: slice = slice(None)) -> np.ndarray:
        """(N, 24) each device's online share by hour of day over ``days`` (NaN for an
        hour it never observed: all of it set aside)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.online_s[:, days].sum(axis=1) / self.observed_s[:, days].sum(axis=1)

    def daily_share_variance(self) -> np.ndarray:
        """(N,) the variance of each device's online share over its whole days."""
        whole = self.observed_s.sum(axis=2) >= DAY_S - 1e-6
        share = np.where(whole, self.online_s.sum(axis=2) / DAY_S, np.nan)
        return np.nanvar(share, axis=1, ddof=1)

    def on_days(self, keep: np.ndarray) -> LocalHours:
        """Only the (N, days) days ``keep``: the others neither online nor observed."""
        return LocalHours(self.online_s * keep[:, :, None], self.observed_s * keep[:, :, None])


def inside_days(utc_offset_s: np.ndarray, num_days: int, horizon_s: float,
                bins: np.ndarray | None = None) -> np.ndarray:
    """(N, num_days) True where the local hours ``bins`` (default all 24) of day j of
    LocalHours lie wholly inside the window [0, horizon_s)."""
    bins = np.arange(24) if bins is None else bins
    shift = np.mod(np.asarray(utc_offset_s, dtype=float), DAY_S) + HOUR_S / 2
    start = (np.arange(num_days)[None, :] * 24 + bins[0]) * HOUR_S - shift[:, None]
    end = (np.arange(num_days)[None, :] * 24 + bins[-1] + 1) * HOUR_S - shift[:, None]
    return (start >= 0) & (end <= horizon_s)


def weekend_days(utc_offset_s: np.ndarray, num_days: int) -> np.ndarray:
    """(N, num_days) True on a device's local Saturday and Sunday: day j of LocalHours is
    local day ``j + floor(offset / 1 day)`` of the simulation (day 0 a Monday)."""
    day = np.arange(num_days)[None, :] + np.floor(np.asarray(utc_offset_s) / DAY_S)[:, None]
    return np.mod(day, 7) >= 5


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


Spans = tuple[np.ndarray, np.ndarray, np.ndarray]  # (device, start_s, end_s)


def local_hours(device: np.ndarray, t_on_s: np.ndarray, t_off_s: np.ndarray,
                utc_offset_s: np.ndarray, horizon_s: float,
                excluded: Spans | None = None) -> LocalHours:
    """Each device's online and observed time by local hour over [0, horizon_s), its
    intervals clipped to the window; ``excluded`` online spans (inside the window) are
    taken out of both, as if not observed."""
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
    if excluded is not None:
        dev, start, end = excluded
        out = _binned(dev, start + shift[dev], end + shift[dev], n, 24 * days)
        online, observed = online - out, observed - out
    return LocalHours(online.reshape(n, days, 24), observed.reshape(n, days, 24))


def _first_harmonic_angle(share: np.ndarray) -> np.ndarray:
    """arg C of each row's first harmonic C = Σ_h x(h) e^{−iω h}; NaN where C = 0."""
    with np.errstate(invalid="ignore"):
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


@dataclass(frozen=True)
class DeviceShares:
    """Each device's online share ŝ_d (mean over the hours of the day, clipped) and its
    noise Var ŝ_d (NaN where unknown)."""

    share: np.ndarray
    variance: np.ndarray


def device_shares(hours: LocalHours, num_days: float | None = None) -> DeviceShares:
    """ŝ_d clipped to [½ h / T, 1 − ½ h / T] and ``v_d / D``: with ``num_days`` D, v_d over
    the device's whole days; without, D its observed time in days and v_d over its days
    at least half observed (some time set aside, some days left out)."""
    observed = hours.observed_s.sum(axis=2)
    days = observed.sum(axis=1) / DAY_S if num_days is None else np.full(
        observed.shape[0], num_days)
    eps = HOUR_S / 2 / (days * DAY_S)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.clip(np.nanmean(hours.hourly_share(), axis=1), eps, 1 - eps)
        if num_days is not None:
            return DeviceShares(share, hours.daily_share_variance() / num_days)
        daily = np.where(observed >= DAY_S / 2, hours.online_s.sum(axis=2) / observed, np.nan)
    enough = np.sum(np.isfinite(daily), axis=1) >= 2
    variance = np.full(share.shape, np.nan)
    variance[enough] = np.nanvar(daily[enough], axis=1, ddof=1) / days[enough]
    return DeviceShares(share, variance)


def noisy_shifts(shares: DeviceShares, hour_logits: np.ndarray,
                 extra_variance: np.ndarray | float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(ẑ_d less its curvature bias, Var ẑ_d) under g = ``hour_logits``, the shares' noise
    raised by ``extra_variance`` (the days' correlation, simfl.population.fit_phones)."""
    z = logit_shifts(shares.share, hour_logits)
    _, slope, curvature = _day_mean_prob(hour_logits, z)
    variance = shares.variance + extra_variance
    return z + curvature / (2 * slope ** 3) * variance, variance / slope ** 2


def logit_spread(shares: DeviceShares, profile: np.ndarray,
                 extra_variance: np.ndarray | float = 0.0) -> float:
    """σ̂_z: the sd of the devices' ẑ less their noise, at a fixed point of σ̂_z ↦ the ẑ's
    under g = calibrated_logits(profile, σ̂_z)."""
    sd = 0.0
    for _ in range(30):
        z, noise = noisy_shifts(shares, calibrated_logits(tuple(profile), sd), extra_variance)
        ok = np.isfinite(noise)
        new = math.sqrt(max(0.0, float(np.var(z[ok])) - float(np.mean(noise[ok]))))
        if abs(new - sd) < 1e-5:
            break
        sd = new
    return new


def propensity_logit_sd(hours: LocalHours, profile: np.ndarray, num_days: float) -> float:
    """σ̂_z of the devices' shares over the whole window (:func:`logit_spread`)."""
    return logit_spread(device_shares(hours, num_days), profile)


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

