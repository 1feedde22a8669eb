"""The heavy-tailed components of the habits model fitted to online intervals: device
classes and the weekly rhythm (``trace fit``; simfl.population.fit, whose base estimators
are simfl.population.fit_moments; bursts are simfl.population.fit_bursts, charging
windows simfl.population.fit_charging; docs/design.md §3).

- **Device classes** (``class_shares`` π_c, ``class_logit_means`` m_c): each device's
  estimated logit shift ẑ_d is its z_d plus noise of known variance v_d
  (simfl.population.fit_moments), so ẑ_d ~ Σ_c π_c N(m_c, s² + v_d), s the within-class
  spread. Fitted by EM (Dempster, Laird & Rubin 1977) for C = 1, 2, 3 classes: the E-step
  weighs each device by class, ``r_dc ∝ π_c φ(ẑ_d; m_c, s² + v_d)``; the M-step sets
  ``π_c = mean_d r_dc``, ``m_c = Σ_d r_dc ẑ_d / (s² + v_d) / Σ_d r_dc / (s² + v_d)`` and
  takes s² one Fisher-scoring step up ``Σ_dc r_dc log φ(ẑ_d; m_c, s² + v_d)``,
  ``s² = Σ r w² ((ẑ − m)² − v) / Σ r w²`` with w = 1 / (s² + v) (a generalised EM); C >= 2
  is started from quantiles and from the (C − 1)-class fit with its largest class
  split, the better kept. C is chosen by BIC, ``−2 log L + 2C log N`` (C means, C − 1
  shares and s; Schwarz 1978): classes are **found** when C >= 2 wins. The means are
  identified only up to a common shift (the profile's calibration g takes any shift
  back), so they are written with their share-weighted mean 0, largest first. With
  more than one class, g is calibrated over the mixture and the ẑ_d read again under
  it, to a fixed point. One class: the spread is the plain fit's (moments).
- **Weekly rhythm** (``weekend_logit_shift`` w): found when the devices' mean difference
  between their online share on local weekend days and on weekdays (days wholly inside
  the window) is at least ``MIN_WEEKEND_Z`` = 4 of its standard errors over the devices
  (devices taken as independent: a shock common to all devices on some weekdays, such
  as a holiday, would read as a weekly rhythm); then the rest of the fit reads weekdays
  only (the profile p is the weekdays', as in the model). Of a group of devices (all,
  or each region's where they are known) with weekday share ȳ₀ and weekend share ȳ₁
  (each the mean over the hours of the day), w solves ``E_F m(z + δ + w) = ȳ₁`` where δ
  solves ``E_F m(z + δ) = ȳ₀``: on the logit scale, the shift that takes the group's
  weekday level to its weekend one, m(z) the day's mean of σ(g(u) + z) and F the
  fitted distribution of z (the day's mean does not depend on the phase; Gauss–Hermite
  over each class). The model's weekend ramps over the hour on either side of midnight
  and follows each device's phase: local days binned from 23:30 miss about an hour of
  it, and w reads a few per cent low.
- **Bursts** (``dormant_mean_h``, ``engaged_share``): simfl.population.fit_bursts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from simfl.population.fit_moments import DeviceShares, LocalHours, logit_spread, noisy_shifts
from simfl.population.habits import calibrated_logits, habit_prob
from simfl.scenario import HabitsConfig

COMPONENTS = ("classes", "weekly", "bursts", "charging")
MAX_CLASSES = 3
MIN_WEEKEND_Z = 4.0
_NODES = 40
_DAY_GRID_S = np.arange(96) * 900.0 + 450.0


@dataclass(frozen=True)
class Decision:
    """Whether a component was found: its statistic against the threshold."""

    component: str
    statistic: str
    value: float
    threshold: float
    found: bool

    def line(self) -> str:
        verdict = "found" if self.found else "not found"
        return f"{self.component}: {verdict} ({self.statistic} {self.value:.3g}, " \
               f"threshold {self.threshold:g})"


_OFF = HabitsConfig()


@dataclass(frozen=True)
class Components:
    """The heavy-tailed components as fitted (each at its off value where not found) and
    the decisions that found them."""

    class_shares: tuple[float, ...] = _OFF.class_shares
    class_logit_means: tuple[float, ...] = _OFF.class_logit_means
    weekend_logit_shift: tuple[float, ...] = _OFF.weekend_logit_shift
    dormant_mean_h: float = _OFF.dormant_mean_h
    engaged_share: float = _OFF.engaged_share
    charge_prob: float = _OFF.charge_prob
    charge_start_h: float = _OFF.charge_start_h
    charge_start_sd_h: float = _OFF.charge_start_sd_h
    charge_hours: float = _OFF.charge_hours
    decisions: tuple[Decision, ...] = ()

    def found(self, component: str) -> bool:
        return any(d.found for d in self.decisions if d.component == component)


@dataclass(frozen=True)
class Mixture:
    """A mixture of normals for z: shares, means and the common spread."""

    shares: tuple[float, ...] = (1.0,)
    means: tuple[float, ...] = (0.0,)
    sd: float = 0.0
    log_likelihood: float = 0.0

    def centred(self) -> Mixture:
        """The means shifted to share-weighted mean 0, largest first."""
        order = np.argsort(self.means)[::-1]
        shift = float(np.dot(self.shares, self.means))
        return Mixture(tuple(float(self.shares[i]) for i in order),
                       tuple(float(self.means[i] - shift) for i in order), self.sd,
                       self.log_likelihood)

    def nodes(self) -> tuple[np.ndarray, np.ndarray]:
        """Gauss–Hermite nodes and weights of the mixture (as calibrated_logits)."""
        x, w = np.polynomial.hermite_e.hermegauss(_NODES)
        w = w / w.sum()
        return (np.concatenate([m + self.sd * x for m in self.means]),
                np.concatenate([s * w for s in self.shares]))


def _normal_log_pdf(x: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    return -0.5 * (np.log(2 * np.pi * var) + (x - mean) ** 2 / var)


def _scored_variance(weight: np.ndarray, x: np.ndarray, means: np.ndarray,
                     noise: np.ndarray, sd: float) -> float:
    """s² after one Fisher-scoring step on Σ_dc r_dc log φ(x_d; m_c, s² + v_d):
    ``Σ r w² ((x − m)² − v) / Σ r w²``, w = 1 / (s² + v), at least 0 (a generalised EM
    step: the likelihood still rises)."""
    w = weight / (sd ** 2 + noise) ** 2
    return max(0.0, float((w * ((x - means[None, :]) ** 2 - noise)).sum() / w.sum()))


def mixture_em(x: np.ndarray, noise: np.ndarray, num_classes: int,
               start: Mixture | None = None, iterations: int = 500) -> Mixture:
    """The EM fit of the module docstring: ``x`` (M,) with noise variances ``noise``;
    started from ``start``, else means at x's quantiles (c + ½)/C and equal shares."""
    if start is None or len(start.means) != num_classes:
        means = np.quantile(x, (np.arange(num_classes) + 0.5) / num_classes)
        shares = np.full(num_classes, 1 / num_classes)
        sd = max(0.1, float(np.std(x)) / num_classes)
    else:
        means, shares, sd = np.array(start.means), np.array(start.shares), start.sd
    x, noise = x[:, None], noise[:, None]
    previous = -np.inf
    for _ in range(iterations):
        log_joint = np.log(shares)[None, :] + _normal_log_pdf(x, means[None, :], sd ** 2 + noise)
        top = log_joint.max(axis=1, keepdims=True)
        log_total = top[:, 0] + np.log(np.exp(log_joint - top).sum(axis=1))
        likelihood = float(log_total.sum())
        weight = np.exp(log_joint - log_total[:, None])
        shares = np.maximum(weight.mean(axis=0), 1e-12)
        precision = weight / (sd ** 2 + noise)
        means = (precision * x).sum(axis=0) / precision.sum(axis=0)
        sd = math.sqrt(_scored_variance(weight, x, means, noise, sd))
        if likelihood - previous < 1e-8 * x.shape[0]:
            break
        previous = likelihood
    return Mixture(tuple(shares / shares.sum()), tuple(means), sd, likelihood)


def bic(mixture: Mixture, count: int) -> float:
    return -2 * mixture.log_likelihood + 2 * len(mixture.means) * math.log(count)


def fit_classes(z: np.ndarray, noise: np.ndarray, max_classes: int = MAX_CLASSES
                ) -> tuple[Mixture, Decision]:
    """The mixture with the best BIC over 1..max_classes classes, and the decision
    (ΔBIC of one class against the chosen)."""
    ok = np.isfinite(z) & np.isfinite(noise)
    fits = [mixture_em(z[ok], noise[ok], 1)]
    for c in range(2, max_classes + 1):  # from quantiles, and the last fit's widest split
        last = fits[-1]
        wide = int(np.argmax(last.shares))
        split = Mixture(last.shares[:wide] + (last.shares[wide] / 2,) * 2 + last.shares[wide + 1:],
                        last.means[:wide] + (last.means[wide] - last.sd - 0.5,
                                             last.means[wide] + last.sd + 0.5)
                        + last.means[wide + 1:], max(last.sd / 2, 0.1))
        fits.append(max(mixture_em(z[ok], noise[ok], c), mixture_em(z[ok], noise[ok], c, split),
                        key=lambda m: m.log_likelihood))
    scores = [bic(f, int(ok.sum())) for f in fits]
    best = int(np.argmin(scores))
    decision = Decision("classes", "BIC(1 class) - BIC(best)", scores[0] - scores[best],
                        0.0, best > 0)
    return fits[best].centred(), decision


def classes_fixed_point(shares: DeviceShares, profile: np.ndarray, start: Mixture,
                        extra_variance: np.ndarray | float = 0.0) -> Mixture:
    """The mixture at a fixed point of mixture ↦ the ẑ's under its calibrated g."""
    mixture = start
    for _ in range(30):
        g = calibrated_logits(tuple(profile), mixture.sd, mixture.shares, mixture.means)
        z, noise = noisy_shifts(shares, g, extra_variance)
        ok = np.isfinite(z) & np.isfinite(noise)
        new = mixture_em(z[ok], noise[ok], len(mixture.means), mixture).centred()
        if max(abs(new.sd - mixture.sd), *np.abs(np.subtract(new.means, mixture.means))) < 1e-4:
            return new
        mixture = new
    return mixture


def mixture_day_mean(mixture: Mixture, hour_logits: np.ndarray, shift: float) -> float:
    """E_F m(z + shift): the day's mean online probability over the mixture."""
    z, w = mixture.nodes()
    return float(habit_prob(hour_logits, z[:, None] + shift, _DAY_GRID_S[None, :]).mean(
        axis=1) @ w)


def _shift_to(mixture: Mixture, hour_logits: np.ndarray, target: float, base: float = 0.0
              ) -> float:
    """s with E_F m(z + base + s) = target (m is increasing in s; ±25 at the ends)."""
    def gap(s: float) -> float:
        return mixture_day_mean(mixture, hour_logits, base + s) - target

    if gap(-25.0) >= 0 or gap(25.0) <= 0:
        return -25.0 if gap(-25.0) >= 0 else 25.0
    return float(brentq(gap, -25.0, 25.0, xtol=1e-8))


def weekend_shift(mixture: Mixture, hour_logits: np.ndarray, weekday: float,
                  weekend: float) -> float:
    """w of the module docstring for a group with weekday share ``weekday`` and weekend
    share ``weekend``, within the scenario's bounds [−5, 5]."""
    level = _shift_to(mixture, hour_logits, weekday)
    return float(np.clip(_shift_to(mixture, hour_logits, weekend, level), -5.0, 5.0))


def weekend_test(hours: LocalHours, weekend: np.ndarray, whole: np.ndarray) -> Decision:
    """z of the devices' mean difference between their weekend and weekday online shares
    (their local days wholly inside the window, ``whole`` (N, days)), against its
    standard error over the devices."""
    online, observed = hours.online_s.sum(axis=2), hours.observed_s.sum(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = ((online * (weekend & whole)).sum(axis=1) / (observed * (weekend & whole)).sum(
            axis=1) - (online * (~weekend & whole)).sum(axis=1)
               / (observed * (~weekend & whole)).sum(axis=1))
    gap = gap[np.isfinite(gap)]
    se = float(np.std(gap, ddof=1)) / math.sqrt(gap.size) if gap.size >= 2 else 0.0
    mean = float(np.mean(gap)) if gap.size else 0.0
    z = mean / se if se > 0 else (math.inf if mean else 0.0)
    return Decision("weekly", "|z| weekend - weekday share", abs(z), MIN_WEEKEND_Z,
                    abs(z) >= MIN_WEEKEND_Z)


def propensity_mixture(shares: DeviceShares, profile: np.ndarray, classes: bool,
                extra: np.ndarray | float = 0.0, start: Mixture | None = None
                ) -> tuple[Mixture, Decision | None]:
    """The distribution of z: one normal (the plain spread), or where ``classes`` the
    mixture BIC chooses (from ``start`` where given: its number of classes kept)."""
    sd = logit_spread(shares, profile, extra)
    decision = None
    if classes and start is None:
        z, noise = noisy_shifts(shares, calibrated_logits(tuple(profile), sd), extra)
        start, decision = fit_classes(z, noise)
    if start is None or len(start.means) == 1:
        return Mixture(sd=sd), decision
    return classes_fixed_point(shares, profile, start, extra), decision


def weekend_shifts(hours: LocalHours, weekend: np.ndarray, region: np.ndarray,
                    num_regions: int, mixture: Mixture, hour_logits: np.ndarray
                    ) -> tuple[float, ...]:
    """w of each region (one for all where ``num_regions`` is 1) from its devices'
    weekday and weekend shares (each the mean over the hours of the day)."""
    def share(devices: np.ndarray, days: np.ndarray) -> float:
        keep = (days & devices[:, None])[:, :, None]
        return float(np.mean((hours.online_s * keep).sum(axis=(0, 1))
                             / (hours.observed_s * keep).sum(axis=(0, 1))))

    shifts = []
    for r in range(num_regions):
        devices = region == r
        if not (weekend & devices[:, None]).any() or not (~weekend & devices[:, None]).any():
            devices = np.ones_like(devices)
        shifts.append(weekend_shift(mixture, hour_logits, share(devices, ~weekend),
                                    share(devices, weekend)))
    return tuple(shifts)
