"""Bursts (``dormant_mean_h`` D, ``engaged_share`` a) read from how a device's online
hours some hours apart go together (``trace fit``'s bursts component;
simfl.population.fit; docs/design.md §3).

Under the model (simfl.population.overlays) a device is online when its engaged
indicator E(t) and its habits process H(t) both are, independently, with P(H(t)) =
p(t)/a. E is a stationary two-state chain, dormant spells of mean D and engaged ones of
mean D a / (1 − a): its exit rates (1 − a)/(D a) and 1/D add to 1/θ, θ = D a, and
``Cov(E(s), E(t)) = a(1 − a) e^{−|t−s|/θ}``. The habits process forgets within a few of
its sessions, so for times L apart, L beyond that,

    E[X(s) X(s + L)] = p(s) p(s + L) (1 + ρ e^{−L/θ}),   ρ = (1 − a) / a.

Let x_d(t) be device d's online share of local hour t (hours fully observed only: its
charging windows set aside), weekend hours scaled to the weekday level by its fitted
rhythm, and M(L) the sum over devices and hours t of ``x_d(t) x_d(t + L)`` over its count
(each device weighs by its p², so no device's own mean divides its products). The
product of hours h and h + L depends on the devices' profiles there, so per residue
r = L mod 24 (pooled over h)

    M(r + 24k) = B_r (1 + ρ κ e^{−(r + 24k)/θ}),   κ = (θ/1 h)² (2 cosh(1 h/θ) − 2)

(κ >= 1: the two hours' mean of e^{−|t−s|/θ} over e^{−L/θ}). For given ρκ and θ each
B_r is a weighted mean; ρκ and θ minimise the weighted residuals (a grid, then
Nelder–Mead), and ``a = 1 / (1 + ρ)``, ``D = θ / a``. Lags run from ``BUFFER_SESSIONS``
= 4 mean sessions (4 to 12 h, where the habits process's own correlation, at most
e^{−L/L_d}, is gone) to one day short of the half-window (10 days at most).

Which devices: draw_habits raises a device's a to its top p / 0.99 where that passes a,
so only devices below the floor carry a itself. Choosing them by their own online share
would choose by their bursts (a device dormant for days reads low), so the window is cut
in two halves, each half's products taken with the device's logit shift read from the
other half's weekdays (cross-fitting); the third of (device, half) pairs with the lowest
top p enters first, then those with top p / 0.99 below ``SELECT`` = 0.9 of the â just
fitted, while that shrinks the set. The halves' noisier shifts let some raised devices in:
â comes out high by about 0.06 (tests/population/test_fit_phones.py, bench/fit_phones.py).

**Found** when ρ̂ of one exponential fitted to all devices' products is at least
``MIN_BURST_Z`` = 4 of its standard errors (jackknife over 20 groups of devices, θ held
at the full fit's): under the habits model alone ρ̂ is noise about 0 (|z| < 3 measured),
and no device is chosen there, so the test reads all of them. Dormant spells much longer
than the half-window read as propensity spread (too few lags to see them decay).

Then the days of a device are correlated: the noise of its online share ŝ_d over D_d
days becomes ``Var ŝ_d = v_d / D + G / (D − 1)``, ``G = 2 Σ_{k>=1} (1 − k/D) γ_k``,
``γ_k = ŝ_d² ρ_d κ_day e^{−k/θ_d}`` the covariance of its shares k days apart (κ_day =
∫p(t)e^{−t/θ}dt ∫p(s)e^{s/θ}ds / (∫p)² over the day, t in days, from the population
profile; ρ_d and θ_d = D a_d from its own a_d): v_d, the variance of its daily shares
about their own mean, falls short of the days' variance by just that much.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import minimize

from simfl.population.diurnal import HOUR_S
from simfl.population.fit_moments import LocalHours, logit_shifts
from simfl.population.fit_phones import Decision
from simfl.population.habits import MAX_ENGAGED_PROB, habit_prob

MIN_BURST_Z = 4.0
BUFFER_SESSIONS = 4.0
MAX_LAG_DAYS = 10
START_QUANTILE = 1 / 3
SELECT = 0.9
_GROUPS = 20  # jackknife groups of devices


@dataclass(frozen=True)
class Bursts:
    """The fitted a (the floor, before any device's raise) and D, and the decision."""

    engaged_share: float
    dormant_mean_h: float
    decision: Decision


def _none(statistic: str) -> Bursts:
    return Bursts(1.0, 0.0, Decision("bursts", statistic, 0.0, MIN_BURST_Z, False))


def lag_sums(x: np.ndarray, lags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N, K) each device's sums of x(t) x(t + L) over its hours seen at both, and their
    counts, for each lag L of ``lags`` (hours), from its (N, hours) series (NaN unseen)."""
    sums = np.zeros((x.shape[0], lags.size))
    counts = np.zeros((x.shape[0], lags.size))
    for i, lag in enumerate(lags):
        product = x[:, :-lag] * x[:, lag:]
        seen = np.isfinite(product)
        sums[:, i] = np.where(seen, product, 0.0).sum(axis=1)
        counts[:, i] = seen.sum(axis=1)
    return sums, counts


def _residues(m: np.ndarray, n: np.ndarray, lags: np.ndarray, theta_h: float
              ) -> tuple[float, float]:
    """(weighted residual sum of squares, ρ κ) of the per-residue lines
    ``B_r + C_r e^{−L/θ}`` at θ; ρ κ = Σ_r w_r C_r / Σ_r w_r B_r."""
    decay = np.exp(-lags / theta_h)
    sse, base, excess = 0.0, 0.0, 0.0
    for r in range(24):
        at = (lags % 24 == r) & (n > 0)
        if at.sum() < 2:
            continue
        w = n[at]
        design = np.stack([np.ones(at.sum()), decay[at]], axis=1) * np.sqrt(w)[:, None]
        (b, c), *_ = np.linalg.lstsq(design, m[at] * np.sqrt(w), rcond=None)
        sse += float(np.sum((design @ (b, c) - m[at] * np.sqrt(w)) ** 2))
        base, excess = base + w.sum() * b, excess + w.sum() * c
    return sse, excess / base if base > 0 else 0.0


def _kappa_hour(theta_h: np.ndarray | float) -> np.ndarray:
    theta = np.asarray(theta_h, dtype=float)
    return theta ** 2 * (2 * np.cosh(1 / theta) - 2)


def burst_test(sums: np.ndarray, counts: np.ndarray, lags: np.ndarray) -> Decision:
    """ρ̂ / its jackknife standard error (20 groups of devices) of one exponential fitted
    to all devices' products (θ held at the full fit's)."""
    total_s, total_n = sums.sum(axis=0), counts.sum(axis=0)

    def ratio(s: np.ndarray, n: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, s / n, 0.0)

    m = ratio(total_s, total_n)
    grid = np.geomspace(lags.min(), lags.max() / 2, 60)
    theta = grid[int(np.argmin([_residues(m, total_n, lags, t)[0] for t in grid]))]
    rho = _residues(m, total_n, lags, theta)[1]
    group = np.arange(sums.shape[0]) % _GROUPS
    jack = np.array([_residues(ratio(total_s - sums[group == g].sum(axis=0),
                                     total_n - counts[group == g].sum(axis=0)),
                               total_n - counts[group == g].sum(axis=0), lags, theta)[1]
                     for g in range(_GROUPS)])
    se = math.sqrt((_GROUPS - 1) / _GROUPS * float(np.sum((jack - jack.mean()) ** 2)))
    z = rho / se if se > 0 else 0.0
    return Decision("bursts", "rho / its se", z, MIN_BURST_Z, z >= MIN_BURST_Z)


def _common_sse(m: np.ndarray, n: np.ndarray, lags: np.ndarray, rho_kappa: float,
                theta_h: float) -> float:
    """The weighted residuals of ``M(L) = B_r (1 + ρ κ e^{−L/θ})``, each residue's B_r
    fitted (a weighted mean of M / shape)."""
    shape = 1 + rho_kappa * np.exp(-lags / theta_h)
    sse = 0.0
    for r in range(24):
        at = (lags % 24 == r) & (n > 0)
        if at.any():
            base = np.sum(n[at] * m[at] * shape[at]) / np.sum(n[at] * shape[at] ** 2)
            sse += float(np.sum(n[at] * (m[at] - base * shape[at]) ** 2))
    return sse


def fit_bursts(sums: np.ndarray, counts: np.ndarray, lags: np.ndarray) -> tuple[float, float]:
    """(a, D) of the module docstring from the devices' lag sums and counts (N, K): ρ κ
    and θ minimising :func:`_common_sse` (a grid, then Nelder–Mead on their logs)."""
    total_n = counts.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.where(total_n > 0, sums.sum(axis=0) / total_n, 0.0)

    def sse(log_params: np.ndarray) -> float:
        theta = float(np.clip(np.exp(log_params[1]), lags.min() / 4, lags.max()))
        return _common_sse(m, total_n, lags, float(np.exp(log_params[0])), theta)

    grid = [np.log([r, t]) for r in np.geomspace(0.01, 30, 16)
            for t in np.geomspace(lags.min() / 2, lags.max() / 2, 16)]
    start = min(grid, key=sse)
    best = minimize(sse, start, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-14})
    theta = float(np.clip(np.exp(best.x[1]), lags.min() / 4, lags.max()))
    rho = float(np.exp(best.x[0])) / float(_kappa_hour(theta))
    return 1 / (1 + rho), theta * (1 + rho)


def top_prob(hour_logits: np.ndarray, z: np.ndarray, weekend: np.ndarray | float
             ) -> np.ndarray:
    """The device's highest p over the week at an hour's knot (as draw_habits)."""
    return 1 / (1 + np.exp(-(hour_logits.max() + z + np.maximum(weekend, 0))))


def engaged_shares(top: np.ndarray, engaged: float) -> np.ndarray:
    """Each device's a: raised from ``engaged`` where its top p needs it (draw_habits)."""
    return np.minimum(np.maximum(engaged, top / MAX_ENGAGED_PROB), 1.0)


def device_bursts(hours: LocalHours, hour_logits: np.ndarray, weekend_shift: np.ndarray,
                  weekend: np.ndarray, leave_out: np.ndarray, buffer_h: float) -> Bursts:
    """The test and fit of the module docstring on the devices' fully observed local
    hours (what is set aside is not), each half of the window on its own with each
    device's logit shift read from the other half's weekdays, weekend days scaled to
    the weekday level by the device's fitted rhythm (``weekend_shift`` (N,)), lags from
    ``buffer_h`` hours, over the devices not left out."""
    full = hours.observed_s >= HOUR_S - 1e-6
    days = np.flatnonzero(full.any(axis=(0, 2)))
    half = (days[0] + days[-1] + 1) // 2 if days.size else 0
    span = min(half - days[0] - 1, MAX_LAG_DAYS) * 24 if days.size else 0
    lags = np.arange(int(math.ceil(buffer_h)), span + 1)
    if lags.size < 24 or (~leave_out).sum() < _GROUPS:
        return _none("too few days or devices to see the lags")
    grid = np.arange(24) * HOUR_S + HOUR_S / 2
    weekdays = hours.on_days(~weekend)
    sums, counts, floor = [], [], []
    for this, other in ((slice(days[0], half), slice(half, days[-1] + 1)),
                        (slice(half, days[-1] + 1), slice(days[0], half))):
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.nanmean(weekdays.hourly_share(other), axis=1)
        z = logit_shifts(np.clip(share, 1e-6, 1 - 1e-6), hour_logits)
        level = habit_prob(hour_logits, z[:, None], grid[None, :]).mean(axis=1)
        raised = habit_prob(hour_logits, (z + weekend_shift)[:, None], grid[None, :]).mean(
            axis=1)
        scale = np.where(weekend[:, this], (level / raised)[:, None], 1.0)[:, :, None]
        x = np.where(full[:, this], hours.online_s[:, this] / HOUR_S * scale, np.nan)
        part = lag_sums(x.reshape(x.shape[0], -1), lags)
        sums.append(part[0])
        counts.append(part[1])
        floor.append(top_prob(hour_logits, z, weekend_shift) / MAX_ENGAGED_PROB)
    read = ~leave_out
    decision = burst_test((sums[0] + sums[1])[read], (counts[0] + counts[1])[read], lags)
    pool = np.concatenate(sums), np.concatenate(counts), np.concatenate(floor)
    enter = np.concatenate([~leave_out, ~leave_out]) & np.isfinite(pool[2])
    limit = float(np.quantile(pool[2][enter], START_QUANTILE))
    engaged, dormant_h = 1.0, 0.0
    for _ in range(6):
        chosen = enter & (pool[2] <= limit)
        if chosen.sum() < _GROUPS:
            break
        engaged, dormant_h = fit_bursts(pool[0][chosen], pool[1][chosen], lags)
        if SELECT * engaged >= limit:
            break
        limit = SELECT * engaged
    if dormant_h <= 0:  # no devices to fit it on: not found whatever the test says
        return Bursts(1.0, 0.0, replace(decision, found=False))
    return Bursts(engaged, dormant_h, decision)


def burst_variance(share: np.ndarray, engaged: np.ndarray, dormant_h: float,
                   days: np.ndarray, profile: np.ndarray) -> np.ndarray:
    """(N,) G / (D − 1) of the module docstring: what correlated days add to Var ŝ_d
    (each device's a ``engaged`` and days ``days``, the population profile (24,))."""
    theta = dormant_h * engaged[:, None] / 24
    t = np.arange(24)[None, :] / 24
    kappa = (np.mean(profile * np.exp(-t / theta), axis=1)
             * np.mean(profile * np.exp(t / theta), axis=1) / np.mean(profile) ** 2)
    whole = np.maximum(np.round(days), 2)
    total = np.zeros(share.shape)
    for k in range(1, int(whole.max())):
        total += np.where(k < whole, 2 * (1 - k / whole), 0.0) * np.exp(-k / theta[:, 0])
    return total * share ** 2 * (1 - engaged) / engaged * kappa / (whole - 1)
