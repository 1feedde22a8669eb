"""Per-device availability habits (availability mode ``habits``; docs/design.md §3).

The ``diurnal`` mode gives every device of a region the one profile p(u) at its local
time u, so region is the only thing availability depends on. Real phones differ device
by device, by one or more orders of magnitude in how much they are used (Falaki et al.,
"Diversity in smartphone usage", MobiSys 2010: 10 to 200 interactions a day across
255 users), in when (chronotypes), and in how long their sessions last. Here device d
has three habits of its own:

- a **propensity** shift z_d on the logit scale: its online probability at local time
  u is ``p_d(u) = σ(g(u) + z_d)``, with z_d ~ N(0, s²), s = ``propensity_logit_sd``;
  g is calibrated hour by hour so that the population's mean stays the region profile,
  ``E_z σ(g(h) + z) = p(h)`` (Gauss–Hermite quadrature), and linear between hours;
  its long-run online share (the propensity) is the day's mean of p_d;
- a **phase** φ_d ~ N(0, ``phase_sd_h``²) hours: its profile is the region's shifted in
  time, ``p_d(u - φ_d)`` (a late device peaks later);
- a **mean session length** ``session_mean_s · exp(τ ε_d − τ²/2)``, ε_d ~ N(0, 1),
  τ = ``session_log_sd``, so the devices' mean is ``session_mean_s``.

Within each region, the propensity (and the phase, with ``phase_correlation``) can be
tied to a data covariate of the device by a Gaussian copula: the latent normal is
``r q_d + sqrt(1 − r²) e_d``, q_d the normal score of the device's covariate rank in its
region and ``r = 2 sin(π ρ / 6)`` for the requested Spearman rank correlation ρ
(Pearson's formula for the normal copula). This is independent of how devices were
assigned to regions, so availability can depend on the data *inside* a region, which
post-stratification by region cannot see.

Each device is a two-state Markov process with its own hazards, built by the diurnal
model's exact-marginal construction (simfl.population.diurnal) from p_d, so every
device's probability of being online at any time is exactly its p_d. To keep that
construction vectorised, devices share hazard tables by habit class: z is rounded to
``Z_STEP`` and the log session mean to ``LOG_SESSION_STEP`` (the rounded values are the
device's habits, recorded in devices.parquet); the phase needs no table (it shifts the
device's clock). A departure from the literature: no published study gives these
spreads as distributions; the defaults (scenario.HabitsConfig) say where each comes from.

**Heavy-tailed components** (each off at its default; docs/populations.md):

- **device classes**: z_d is drawn from a mixture of normals, class c with share π_c,
  mean m_c and the spread s: ``z_d = F⁻¹(Φ(x_d))``, F the mixture's distribution
  function and x_d the copula latent above, so its rank correlation with the covariate
  is still ρ; g is calibrated over the mixture (quadrature per class);
- **weekly rhythm**: on the device's Saturday and Sunday its logit gains w_r, its
  region's ``weekend_logit_shift`` (linear over the hour before and after, as g is
  between hours; simulated t = 0 is Monday 00:00 UTC, days counted on the device's clock
  u − φ_d); the hazard tables then span a week;
- **bursts** and **nightly charging windows** (simfl.population.overlays): a hidden
  engaged/dormant chain per device, engaged a share a_c of the time (``engaged_share``,
  raised for a class whose p_d would exceed ``MAX_ENGAGED_PROB · a``), and the habits
  process drawn at ``p_d / a_c``, so that "engaged and online" keeps p_d exactly; a
  nightly window from the device's own start hour c_d (drawn N(c̄, s_c²), tied to the
  covariate by ``charge_correlation``) during which it is online with probability q
  whatever its habits: ``P(online) = 1 − (1 − p_d(u))(1 − q 1[u in window])``, exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

from simfl.population.diurnal import (
    DAY_S,
    GRID_STEP_S,
    HOUR_S,
    WEEK_S,
    exact_hazards,
    markov_intervals,
)
from simfl.population.overlays import (
    Intervals,
    burst_intervals,
    charging_intervals,
    combine,
)
from simfl.scenario import HabitsConfig

Z_STEP = 0.1  # propensity shifts share a hazard table within 0.1 on the logit scale
LOG_SESSION_STEP = 0.1  # session means within a factor exp(0.1) of each other
# A bursty device's habits process is drawn at p_d / a: a is raised until that stays below
# this (the exact-marginal hazards need p < 1).
MAX_ENGAGED_PROB = 0.99
_QUADRATURE_NODES = 40
_CLASS_BLOCK = 256  # classes at a time in class_sessions_per_day
# The weekend indicator at the week's hourly knots (Saturday and Sunday: days 5 and 6).
_WEEKEND_KNOTS = (np.arange(168) // 24 >= 5).astype(float)


@dataclass(frozen=True)
class Habits:
    """Each device's habits (all (N,) arrays) and the class of its hazard table."""

    logit_shift: np.ndarray  # z_d, rounded to Z_STEP
    phase_s: np.ndarray  # φ_d: its profile is the region's shifted later by this
    session_mean_s: np.ndarray  # its mean session length, rounded on the log scale
    habit_class: np.ndarray  # (N,) int: the row of its class in class_shift / class_session
    class_shift: np.ndarray  # (C,) z of each class
    class_session_s: np.ndarray  # (C,) session mean of each class
    hour_logits: np.ndarray  # (24,) g(h), calibrated so the devices' mean is the profile
    # The heavy-tailed components (zeros, ones or nan where off):
    weekend_shift: np.ndarray  # (N,) w_d, its region's weekend logit shift
    charge_start_h: np.ndarray  # (N,) local hour its charging window opens (nan: none)
    class_weekend: np.ndarray  # (C,) w of each class
    class_engaged: np.ndarray  # (C,) a: long-run share of time engaged (1: no bursts)
    dormant_mean_s: float = 0.0  # mean dormant spell (0: no bursts)
    charge_prob: float = 0.0  # q: probability of a night's charging window
    charge_hours: float = 0.0  # W: its length

    @property
    def weekly(self) -> bool:
        return bool(np.any(self.class_weekend != 0))

    @property
    def period_s(self) -> float:
        """The hazard tables' period: a week with a weekly rhythm, else a day."""
        return WEEK_S if self.weekly else DAY_S

    @property
    def engaged(self) -> np.ndarray:
        """(N,) each device's long-run engaged share a."""
        return self.class_engaged[self.habit_class]


def calibrated_logits(profile: tuple[float, ...], logit_sd: float,
                      class_shares: tuple[float, ...] = (1.0,),
                      class_means: tuple[float, ...] = (0.0,)) -> np.ndarray:
    """g(h) with E[σ(g(h) + z)] = p(h) for each hour h, z ~ N(0, logit_sd²) or the
    mixture of classes: share π_c of N(m_c, logit_sd²)."""
    p = np.asarray(profile, dtype=float)
    g = np.log(p / (1 - p))
    if logit_sd == 0 and class_means == (0.0,):
        return g
    nodes, weights = np.polynomial.hermite_e.hermegauss(_QUADRATURE_NODES)
    weights = weights / weights.sum()
    node_z = np.concatenate([m + logit_sd * nodes for m in class_means])
    node_w = np.concatenate([share * weights for share in class_shares])
    for _ in range(100):  # Newton on each hour; the mean is increasing in g
        s = 1 / (1 + np.exp(-(g[:, None] + node_z[None, :])))
        mean, slope = s @ node_w, (s * (1 - s)) @ node_w
        step = (mean - p) / slope
        g = g - step
        if np.max(np.abs(step)) < 1e-13:
            break
    return g


def copula_latent(region_idx: np.ndarray, covariate: np.ndarray | None, rank_corr: float,
                   rng: np.random.Generator) -> np.ndarray:
    """(N,) standard normal latents whose Spearman correlation with ``covariate`` within
    each region is ``rank_corr`` (ties broken at random); independent when 0."""
    n = int(region_idx.shape[0])
    noise = rng.standard_normal(n)
    if rank_corr == 0 or covariate is None:
        return noise
    r = 2 * np.sin(np.pi * rank_corr / 6)
    scores = np.empty(n)
    tie_break = rng.random(n)
    for region in np.unique(region_idx):
        members = np.flatnonzero(region_idx == region)
        order = members[np.lexsort((tie_break[members], covariate[members]))]
        scores[order] = _normal_scores(members.size)
    return r * scores + np.sqrt(1 - r * r) * noise


def _normal_scores(n: int) -> np.ndarray:
    """Blom's normal scores Φ⁻¹((i − 3/8) / (n + 1/4)), i = 1..n: standard normal by rank."""
    from statistics import NormalDist

    inv = np.vectorize(NormalDist().inv_cdf)
    return inv((np.arange(1, n + 1) - 0.375) / (n + 0.25))


def _mixture_shift(cfg: HabitsConfig, latent: np.ndarray) -> np.ndarray:
    """z = F⁻¹(Φ(latent)) for the mixture of device classes (m + s·latent for one class)."""
    means, shares = np.asarray(cfg.class_logit_means), np.asarray(cfg.class_shares)
    sd = cfg.propensity_logit_sd
    if means.size == 1:
        return means[0] + sd * latent
    u = ndtr(latent)
    if sd == 0:  # classes without spread: the class whose share the rank falls in
        order = np.argsort(means, kind="stable")
        cut = np.cumsum(shares[order])
        return means[order][np.minimum(np.searchsorted(cut, u, side="right"), means.size - 1)]
    lo = np.full(u.shape, means.min() - 9 * sd)
    hi = np.full(u.shape, means.max() + 9 * sd)
    for _ in range(60):  # bisection: F is increasing
        mid = (lo + hi) / 2
        below = ndtr((mid[:, None] - means[None, :]) / sd) @ shares < u
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2


def draw_habits(cfg: HabitsConfig, profile: tuple[float, ...], session_mean_s: float,
                region_idx: np.ndarray, covariate: np.ndarray | None,
                rng: np.random.Generator) -> Habits:
    """Every device's habits, from the one stream ``population.habits`` (the charging
    hours' latents drawn last, and only with charging windows on)."""
    n = region_idx.shape[0]
    shift_latent = copula_latent(region_idx, covariate, cfg.covariate_correlation, rng)
    phase_latent = copula_latent(region_idx, covariate, cfg.phase_correlation, rng)
    session_latent = rng.standard_normal(n)
    charge_start = np.full(n, np.nan)
    if cfg.charge_prob > 0:
        latent = copula_latent(region_idx, covariate, cfg.charge_correlation, rng)
        charge_start = np.mod(cfg.charge_start_h + cfg.charge_start_sd_h * latent, 24.0)
    z = np.round(_mixture_shift(cfg, shift_latent) / Z_STEP) * Z_STEP
    tau = cfg.session_log_sd
    log_session = np.round((tau * session_latent - tau * tau / 2) / LOG_SESSION_STEP)
    weekend = np.asarray(cfg.weekend_logit_shift, dtype=float)
    weekend_shift = weekend[region_idx] if weekend.size > 1 else np.full(n, weekend[0])
    weekend_values, weekend_idx = np.unique(weekend_shift, return_inverse=True)
    keys = np.stack([np.round(z / Z_STEP), log_session, weekend_idx.reshape(-1)],
                    axis=1).astype(np.int64)
    classes, habit_class = np.unique(keys, axis=0, return_inverse=True)
    class_shift = classes[:, 0] * Z_STEP
    class_session = session_mean_s * np.exp(classes[:, 1] * LOG_SESSION_STEP)
    class_weekend = weekend_values[classes[:, 2]]
    habit_class = habit_class.reshape(-1)
    hour_logits = calibrated_logits(profile, cfg.propensity_logit_sd, cfg.class_shares,
                                    cfg.class_logit_means)
    engaged = np.ones(class_shift.shape[0])
    if cfg.dormant_mean_h > 0:  # the class's highest p over the week, at an hour's knot
        top = 1 / (1 + np.exp(-(hour_logits.max() + class_shift + np.maximum(class_weekend, 0))))
        engaged = np.minimum(np.maximum(cfg.engaged_share, top / MAX_ENGAGED_PROB), 1.0)
    return Habits(logit_shift=class_shift[habit_class],
                  phase_s=cfg.phase_sd_h * HOUR_S * phase_latent,
                  session_mean_s=class_session[habit_class], habit_class=habit_class,
                  class_shift=class_shift, class_session_s=class_session,
                  hour_logits=hour_logits, weekend_shift=weekend_shift,
                  charge_start_h=charge_start, class_weekend=class_weekend,
                  class_engaged=engaged, dormant_mean_s=cfg.dormant_mean_h * HOUR_S,
                  charge_prob=cfg.charge_prob, charge_hours=cfg.charge_hours)


def _weekend_weight(local_s: np.ndarray) -> np.ndarray:
    """0 on weekdays, 1 on Saturday and Sunday, linear over the hour on either side."""
    values = np.append(_WEEKEND_KNOTS, _WEEKEND_KNOTS[0])
    return np.interp(np.mod(local_s, WEEK_S), np.arange(169) * HOUR_S, values)


def habit_prob(hour_logits: np.ndarray, shift: np.ndarray, local_s: np.ndarray,
               weekend_shift: np.ndarray | None = None) -> np.ndarray:
    """σ(g(u) + z [+ w·weekend(u)]): the online probability of the habits process at
    local time ``local_s`` (g linear between hours) of devices with logit shift
    ``shift`` and weekend shift ``weekend_shift`` (arrays broadcast)."""
    values = np.append(hour_logits, hour_logits[0])
    g = np.interp(np.mod(local_s, DAY_S), np.arange(25) * HOUR_S, values)
    if weekend_shift is not None:
        g = g + weekend_shift * _weekend_weight(local_s)
    return 1 / (1 + np.exp(-(g + shift)))


def _use_profiles(habits: Habits, classes: slice = slice(None)
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(C, G) p and dp/du of each class's devices (of ``classes``) at the grid's cell
    midpoints over the period (a day, or a week with a weekly rhythm)."""
    mid = np.arange(GRID_STEP_S / 2, habits.period_s, GRID_STEP_S)
    weekend = habits.class_weekend[classes, None] if habits.weekly else None
    p = habit_prob(habits.hour_logits, habits.class_shift[classes, None], mid[None, :],
                   weekend)
    g = habits.hour_logits
    hour = (mid // HOUR_S).astype(int)
    slope = ((np.roll(g, -1) - g) / HOUR_S)[hour % 24][None, :]  # g' on each hour
    if weekend is not None:
        knots = _WEEKEND_KNOTS
        slope = slope + weekend * ((np.roll(knots, -1) - knots) / HOUR_S)[hour][None, :]
    return p, p * (1 - p) * slope


def class_profiles(habits: Habits, classes: slice = slice(None)
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(C, G) p and dp/du of each class's habits process (of ``classes``) at the grid's
    cell midpoints: the devices' own, divided by the engaged share a with bursts."""
    p, dp = _use_profiles(habits, classes)
    engaged = habits.class_engaged[classes, None]
    return p / engaged, dp / engaged


def class_sessions_per_day(habits: Habits) -> np.ndarray:
    """(C,) each class's expected number of online sessions a day, ``∫ p(u) μ(u) du``
    over the day: the rate of online -> offline switches, with μ the off-hazard of
    simfl.population.diurnal.exact_hazards (the device is online with probability p
    at every u). Classes are taken a block at a time, so this holds less than one of
    the hazard tables :func:`habit_intervals` builds for all of them."""
    num_classes = habits.class_shift.shape[0]
    per_day = np.empty(num_classes)
    for first in range(0, num_classes, _CLASS_BLOCK):
        block = slice(first, first + _CLASS_BLOCK)
        p, dp = class_profiles(habits, block)
        mu = np.maximum(1.0 / habits.class_session_s[block, None], -dp / p)
        per_day[block] = (p * mu).sum(axis=1) * GRID_STEP_S / (habits.period_s / DAY_S)
    return per_day


def propensity(habits: Habits) -> np.ndarray:
    """(N,) each device's long-run online share: the period's mean of its p_d, plus
    with charging windows q times the mean over its windows of 1 − p_d."""
    p, _ = _use_profiles(habits)
    share = p.mean(axis=1)[habits.habit_class]
    if habits.charge_prob > 0:
        share = share + habits.charge_prob * _charging_gain(habits, p)
    return share


def _charging_gain(habits: Habits, p: np.ndarray) -> np.ndarray:
    """(N,) ∫ (1 − p_d) over the device's charging windows in a period / the period, from
    the (C, G) class profiles ``p`` (windows on the device's habit clock u − φ_d)."""
    cum = np.concatenate([np.zeros((p.shape[0], 1)),
                          np.cumsum(1 - p, axis=1) * GRID_STEP_S], axis=1)
    period = habits.period_s
    cls = habits.habit_class

    def integral(u: np.ndarray) -> np.ndarray:  # ∫_0^u (1 − p) on the device's class
        turns = np.floor(u / period)
        cells = (u - turns * period) / GRID_STEP_S
        cell = np.minimum(cells.astype(np.int64), p.shape[1] - 1)
        lower, upper = cum[cls, cell], cum[cls, cell + 1]
        return turns * cum[cls, -1] + lower + (upper - lower) * (cells - cell)

    gain = np.zeros(cls.shape[0])
    for day in range(round(period / DAY_S)):
        opens = np.mod(habits.charge_start_h * HOUR_S - habits.phase_s, period) + day * DAY_S
        gain += integral(opens + habits.charge_hours * HOUR_S) - integral(opens)
    return gain / period


def habit_intervals(utc_offset_s: np.ndarray, habits: Habits, horizon_s: float,
                    rng: np.random.Generator) -> Intervals:
    """Online intervals of every device over ``[0, horizon_s)`` in CSR layout, as
    simfl.population.diurnal.diurnal_intervals, each device following its own habits:
    its class's hazard tables on its clock shifted back by its phase; then, where on,
    intersected with its engaged spells and joined with its charging windows (drawn
    after, from the same stream)."""
    shift = np.mod(utc_offset_s.astype(float) - habits.phase_s, habits.period_s)
    on_hazard, off_hazard = exact_hazards(*class_profiles(habits), habits.class_session_s)
    weekend = habits.weekend_shift if habits.weekly else None
    start = habit_prob(habits.hour_logits, habits.logit_shift, shift, weekend) / habits.engaged
    intervals = markov_intervals(shift, habits.habit_class, start, on_hazard, off_hazard,
                                 horizon_s, rng)
    if habits.dormant_mean_s > 0:
        engaged = burst_intervals(habits.engaged, habits.dormant_mean_s, horizon_s, rng)
        intervals = combine(intervals, engaged, need=2)
    if habits.charge_prob > 0:
        charging = charging_intervals(utc_offset_s.astype(float), habits.charge_start_h,
                                      habits.charge_hours, habits.charge_prob, horizon_s, rng)
        intervals = combine(intervals, charging, need=1)
    return intervals


@dataclass(frozen=True)
class HabitRates:
    """Each device's true probability of being online at a UTC time: σ(g(u − φ_d) + z_d
    [+ w_d weekend]) at its local time u, and with charging windows
    ``1 − (1 − that)(1 − q)`` inside its window: the ``ipw_known`` oracle under habits
    (see ProfileRates)."""

    utc_offset_s: np.ndarray  # (N,)
    habits: Habits

    def online_prob(self, device_idx: np.ndarray, t_s: float) -> np.ndarray:
        h = self.habits
        local_s = t_s + self.utc_offset_s[device_idx]
        weekend = h.weekend_shift[device_idx] if h.weekly else None
        p = habit_prob(h.hour_logits, h.logit_shift[device_idx],
                       local_s - h.phase_s[device_idx], weekend)
        if h.charge_prob > 0:
            opened_h = np.mod(local_s / HOUR_S - h.charge_start_h[device_idx], 24.0)
            p = np.where(opened_h < h.charge_hours, 1 - (1 - p) * (1 - h.charge_prob), p)
        return p
