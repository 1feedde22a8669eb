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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simfl.population.diurnal import (
    DAY_S,
    GRID_STEP_S,
    HOUR_S,
    exact_hazards,
    markov_intervals,
)
from simfl.scenario import HabitsConfig

Z_STEP = 0.1  # propensity shifts share a hazard table within 0.1 on the logit scale
LOG_SESSION_STEP = 0.1  # session means within a factor exp(0.1) of each other
_QUADRATURE_NODES = 40
_CLASS_BLOCK = 256  # classes at a time in class_sessions_per_day


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


def calibrated_logits(profile: tuple[float, ...], logit_sd: float) -> np.ndarray:
    """g(h) with E[σ(g(h) + z)] = p(h) for z ~ N(0, logit_sd²), for each hour h."""
    p = np.asarray(profile, dtype=float)
    g = np.log(p / (1 - p))
    if logit_sd == 0:
        return g
    nodes, weights = np.polynomial.hermite_e.hermegauss(_QUADRATURE_NODES)
    weights = weights / weights.sum()
    for _ in range(100):  # Newton on each hour; the mean is increasing in g
        s = 1 / (1 + np.exp(-(g[:, None] + logit_sd * nodes[None, :])))
        mean, slope = s @ weights, (s * (1 - s)) @ weights
        step = (mean - p) / slope
        g = g - step
        if np.max(np.abs(step)) < 1e-13:
            break
    return g


def _copula_latent(region_idx: np.ndarray, covariate: np.ndarray | None, rank_corr: float,
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


def draw_habits(cfg: HabitsConfig, profile: tuple[float, ...], session_mean_s: float,
                region_idx: np.ndarray, covariate: np.ndarray | None,
                rng: np.random.Generator) -> Habits:
    """Every device's habits, from the one stream ``population.habits``."""
    n = region_idx.shape[0]
    shift_latent = _copula_latent(region_idx, covariate, cfg.covariate_correlation, rng)
    phase_latent = _copula_latent(region_idx, covariate, cfg.phase_correlation, rng)
    session_latent = rng.standard_normal(n)
    z = np.round(cfg.propensity_logit_sd * shift_latent / Z_STEP) * Z_STEP
    tau = cfg.session_log_sd
    log_session = np.round((tau * session_latent - tau * tau / 2) / LOG_SESSION_STEP)
    keys = np.stack([np.round(z / Z_STEP), log_session], axis=1).astype(np.int64)
    classes, habit_class = np.unique(keys, axis=0, return_inverse=True)
    class_shift = classes[:, 0] * Z_STEP
    class_session = session_mean_s * np.exp(classes[:, 1] * LOG_SESSION_STEP)
    habit_class = habit_class.reshape(-1)
    return Habits(logit_shift=class_shift[habit_class],
                  phase_s=cfg.phase_sd_h * HOUR_S * phase_latent,
                  session_mean_s=class_session[habit_class], habit_class=habit_class,
                  class_shift=class_shift, class_session_s=class_session,
                  hour_logits=calibrated_logits(profile, cfg.propensity_logit_sd))


def habit_prob(hour_logits: np.ndarray, shift: np.ndarray, local_s: np.ndarray
               ) -> np.ndarray:
    """σ(g(u) + z): the online probability at local time ``local_s`` (g linear between
    hours) of devices with logit shift ``shift`` (arrays broadcast)."""
    values = np.append(hour_logits, hour_logits[0])
    g = np.interp(np.mod(local_s, DAY_S), np.arange(25) * HOUR_S, values)
    return 1 / (1 + np.exp(-(g + shift)))


def class_profiles(habits: Habits, classes: slice = slice(None)
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(C, G) p and dp/du of each class (of ``classes``) at the diurnal grid's cell
    midpoints."""
    mid = np.arange(GRID_STEP_S / 2, DAY_S, GRID_STEP_S)
    p = habit_prob(habits.hour_logits, habits.class_shift[classes, None], mid[None, :])
    g = habits.hour_logits
    slope = (np.roll(g, -1) - g) / HOUR_S  # g' on each hour
    dp = p * (1 - p) * slope[(mid // HOUR_S).astype(int)][None, :]
    return p, dp


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
        per_day[block] = (p * mu).sum(axis=1) * GRID_STEP_S
    return per_day


def propensity(habits: Habits) -> np.ndarray:
    """(N,) each device's long-run online share: the day's mean of its p_d."""
    p, _ = class_profiles(habits)
    return p.mean(axis=1)[habits.habit_class]


def habit_intervals(utc_offset_s: np.ndarray, habits: Habits, horizon_s: float,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Online intervals of every device over ``[0, horizon_s)`` in CSR layout, as
    simfl.population.diurnal.diurnal_intervals, each device following its own habits:
    its class's hazard tables on its clock shifted back by its phase."""
    shift = np.mod(utc_offset_s.astype(float) - habits.phase_s, DAY_S)
    on_hazard, off_hazard = exact_hazards(*class_profiles(habits), habits.class_session_s)
    start = habit_prob(habits.hour_logits, habits.logit_shift, shift)
    return markov_intervals(shift, habits.habit_class, start, on_hazard, off_hazard,
                            horizon_s, rng)


@dataclass(frozen=True)
class HabitRates:
    """Each device's true probability of being online at a UTC time, σ(g(u − φ_d) + z_d)
    at its local time u: the ``ipw_known`` oracle under habits (see ProfileRates)."""

    utc_offset_s: np.ndarray  # (N,)
    habits: Habits

    def online_prob(self, device_idx: np.ndarray, t_s: float) -> np.ndarray:
        h = self.habits
        local_s = t_s + self.utc_offset_s[device_idx] - h.phase_s[device_idx]
        return habit_prob(h.hour_logits, h.logit_shift[device_idx], local_s)
