"""Interval statistics of the study tools' tables: the study tables' mean ± half-width
(``ci``), and the reproduction table's (:mod:`simfl.study.paper_table`) Welch interval of a
difference from summary statistics, its equivalence verdict against a margin, Holm's
adjustment, Fieller's interval of a ratio of paired means, the sample-weighted 90th
percentile and the power of a paired t-test. Pure functions of numbers; the tests work
each out by hand."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from simfl.quantile import weighted_quantile


def ci(values: np.ndarray, digits: int = 3, signed: bool = True) -> str:
    """mean ± half-width of the 95 % t-interval (n - 1 degrees of freedom; nan for n = 1)."""
    n = len(values)
    half = stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / np.sqrt(n) if n > 1 else np.nan
    sign = "+" if signed else ""
    return f"{values.mean():{sign}.{digits}f} ± {half:.{digits}f}"


@dataclass(frozen=True)
class Difference:
    """A difference of means with its 95 % interval and two-sided p (against 0)."""

    estimate: float
    low: float
    high: float
    p: float


def welch(mean_a: float, sd_a: float, n_a: int, mean_b: float, sd_b: float, n_b: int,
          level: float = 0.95) -> Difference:
    """mean_a - mean_b from summary statistics (sample standard deviations): Welch's
    interval and two-sided t-test, with the Welch-Satterthwaite degrees of freedom
    df = (va + vb)² / (va² / (n_a - 1) + vb² / (n_b - 1)), va = sd_a² / n_a."""
    va, vb = sd_a ** 2 / n_a, sd_b ** 2 / n_b
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (n_a - 1) + vb ** 2 / (n_b - 1))
    diff = mean_a - mean_b
    half = stats.t.ppf(0.5 + level / 2, df) * se
    p = 2 * stats.t.sf(abs(diff) / se, df)
    return Difference(diff, diff - half, diff + half, float(p))


def paired(diffs: np.ndarray, level: float = 0.95) -> Difference:
    """The mean of paired differences, its t-interval (n - 1 df) and the paired t-test's p."""
    n = len(diffs)
    mean, se = float(diffs.mean()), float(diffs.std(ddof=1)) / math.sqrt(n)
    half = stats.t.ppf(0.5 + level / 2, n - 1) * se
    p = 2 * stats.t.sf(abs(mean) / se, n - 1) if se > 0 else (0.0 if mean else 1.0)
    return Difference(mean, mean - half, mean + half, float(p))


def equivalence(d: Difference, margin: float) -> str:
    """The verdict of a difference's 95 % interval against ± ``margin`` (the registered
    rule of docs/reproduction.md): *equivalent* when the interval lies inside
    (-margin, +margin), i.e. both one-sided tests of |difference| ≥ margin reject at
    0.025; else *different* when it excludes 0; else *undetermined*."""
    if -margin < d.low and d.high < margin:
        return "equivalent"
    if d.low > 0 or d.high < 0:
        return "different"
    return "undetermined"


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: the i-th smallest p
    becomes max over j ≤ i of min(1, (m - j + 1) p_(j)); nan stays nan and does not
    count in m."""
    known = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    m, out, running = len(known), [math.nan] * len(pvalues), 0.0
    for rank, (p, i) in enumerate(known):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


@dataclass(frozen=True)
class Ratio:
    """mean(a) / mean(b) with Fieller's confidence set: [low, high] when bounded;
    ``outside`` when the set is the two rays (-inf, low] ∪ [high, +inf); low = -inf and
    high = +inf when it is every real number."""

    estimate: float
    low: float
    high: float
    outside: bool = False

    def __str__(self) -> str:
        if self.outside:
            return f"{self.estimate:.2f} (-∞, {self.low:.2f}] ∪ [{self.high:.2f}, +∞)"
        low = "(-∞" if math.isinf(self.low) else f"[{self.low:.2f}"
        high = "+∞)" if math.isinf(self.high) else f"{self.high:.2f}]"
        return f"{self.estimate:.2f} {low}, {high}"


def fieller(a: np.ndarray, b: np.ndarray, level: float = 0.95) -> Ratio:
    """Fieller's confidence set for mean(a) / mean(b), a and b paired (the same n
    seeds): the ρ with (ā - ρ b̄)² ≤ t² (s_aa - 2ρ s_ab + ρ² s_bb) / n, t the t-quantile
    with n - 1 df and s the sample (co)variances, i.e. the ρ that a paired t-test of
    a - ρ b does not reject. Bounded when b̄ is itself resolved from 0
    (b̄² > t² s_bb / n); otherwise two rays or the whole line."""
    n = len(a)
    t2 = stats.t.ppf(0.5 + level / 2, n - 1) ** 2 / n
    cov = np.cov(a, b, ddof=1)
    ma, mb = float(a.mean()), float(b.mean())
    qa = mb ** 2 - t2 * cov[1, 1]  # ρ² qa - 2ρ qb + qc ≤ 0
    qb = ma * mb - t2 * cov[0, 1]
    qc = ma ** 2 - t2 * cov[0, 0]
    disc = qb ** 2 - qa * qc
    estimate = ma / mb if mb else math.nan
    if disc < 0:  # qa < 0 here: the inequality holds for every ρ
        return Ratio(estimate, -math.inf, math.inf)
    if qa == 0:  # -2ρ qb + qc ≤ 0: a ray (or every ρ)
        if qb == 0:
            return Ratio(estimate, -math.inf, math.inf)
        edge = qc / (2 * qb)
        return Ratio(estimate, edge, math.inf) if qb > 0 else Ratio(estimate, -math.inf, edge)
    low, high = sorted(((qb - math.sqrt(disc)) / qa, (qb + math.sqrt(disc)) / qa))
    return Ratio(estimate, low, high, outside=qa < 0)


def weighted_p90(errors: np.ndarray, weights: np.ndarray) -> float:
    """The sample-weighted 90th percentile: the lower weighted quantile
    min{u : Σ_{k: e_k ≤ u} w_k / Σ w ≥ 0.9} (the long paper's Property 7, simfl's
    ``weighted_quantile``, by which Δ-FL filters); a value of ``errors``, no
    interpolation."""
    return weighted_quantile(errors, weights, 0.9)


def paired_power(n: int, effect: float, sd: float, level: float = 0.95) -> float:
    """The power of the two-sided paired t-test at ``level`` with ``n`` pairs to detect a
    true mean difference ``effect`` when the differences' standard deviation is ``sd``:
    P(|T| > t_crit) for T noncentral t with n - 1 degrees of freedom and noncentrality
    effect √n / sd (the lower tail counted 0 where scipy cannot reach it; power 1 for a
    nonzero effect, 0 for none, when the differences never vary: sd = 0)."""
    if n < 2:
        return math.nan
    if sd == 0:  # differences that never vary: a true effect shows at once, none never
        return 1.0 if effect else 0.0
    crit = stats.t.ppf(1 - (1 - level) / 2, n - 1)
    nc = effect * math.sqrt(n) / sd
    lower = float(stats.nct.cdf(-crit, n - 1, nc))  # scipy: nan far out in the tail
    return float(stats.nct.sf(crit, n - 1, nc)) + (0.0 if math.isnan(lower) else lower)


def seeds_for(effect: float, sd: float, power: float = 0.8, level: float = 0.95,
              most: int = 1000) -> int:
    """The fewest pairs (seeds) whose paired t-test reaches ``power`` for ``effect``
    (:func:`paired_power`); ``most`` + 1 when none up to ``most`` does."""
    return next((n for n in range(2, most + 1)
                 if paired_power(n, effect, sd, level) >= power), most + 1)
