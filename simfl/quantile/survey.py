"""Survey-sampling estimators of the Δ-FL threshold (docs/design.md §7).

A round's cohort is drawn among the devices online when the round opens, and being
online correlates with the data, so the cohort's α-weighted quantile is a biased
estimate of Q_pop, the α-weighted (1 − θ) quantile of every training device's loss
(docs/bias.md). Survey sampling corrects a sample whose inclusion depends on what is
known of every unit; what a server may know of every training device is its region
(from registration) and its check-ins on earlier UTC days (the record
``CheckIns(earlier_days=True)``, seen at ``estimator.checkin_share`` and kept for
``checkin_memory_days``). Each estimator here weighs the cohort s and returns the lower
weighted quantile of its losses; each reads them in the clear, as ``cohort_exact``.

Write y_k(x) = α_k 1[F_k ≤ x]. The population's CDF is F(x) = Σ_U y_k(x) / Σ_U α_k; with
weights d_k the cohort estimates both totals by Σ_s d_k y_k(x) and Σ_s d_k α_k, so η̂ is
the quantile with weights α_k d_k (a common factor of the d_k cancels). It is
consistent for Q_pop when d_k ∝ 1/π_k, π_k device k's chance of being in the cohort: a
cohort of K drawn at random among the devices online now has π_k ≈ K p_k / Σ_U p_j,
p_k the chance that k is online now (Horvitz and Thompson, JASA 1952).

- ``rake``: calibration (Deville and Särndal, "Calibration estimators in survey
  sampling", JASA 1992): the d_k nearest to equal weights under the raking distance
  Σ d_k log(d_k / d⁰) − d_k + d⁰ such that the cohort reproduces the population's
  device count of every category of each margin, Σ_{s ∩ c} d_k = N_c. The solution has
  the form d_k = d⁰ Π_m f_m(c_m(k)) and is found by raking, i.e. iterative
  proportional fitting (Deming and Stephan, Ann. Math. Stat. 1940; :func:`raking`).
  The margins (``estimator.rake``): region; hour, the block of ``hour_classes`` equal
  blocks of the UTC day in which the device's earlier check-in rate is highest
  (:func:`hour_class_of`; UTC, not local, blocks: a device's time zone is fixed, so
  within a region a UTC block is a local one shifted by the region's offset, which the
  panel does not hold); rate, ``rate_classes`` equal-count bins of its earlier
  check-in rate (:func:`rate_class_of`). Raking assumes, for consistency, that 1/p_k
  is a product of one factor per margin category: being online now depends on the
  margins only, without interactions (raking's implicit response model, Kott,
  Survey Methodology 2006). It fails where the propensity has an interaction of
  margins, or depends on what no margin sees (when in its block a device is online,
  a routine that changed since the earlier days), and on the first day (no history:
  hour and rate are one category each, and ``rake`` is ``poststrat``). A category
  absent from the cohort cannot be reproduced: its share is lost, spread over the
  margin's present categories in proportion to their counts (as ``poststrat`` loses an
  absent region's).
- ``ipw_shrunk``: weights 1/π̂_k, π̂_k the device's empirical-Bayes online rate at the
  round's UTC hour (:func:`shrunk_rates`): its check-ins at that hour on the earlier
  days, shrunk toward its region's rate by a beta-binomial prior fitted to the region's
  counts by moments. The weights are stabilised (divided by their cohort mean: Robins,
  Hernán and Brumback, Epidemiology 2000, multiply by the marginal rate, a constant
  within a round, so the quantile is unchanged; the cap below reads in units of it)
  and trimmed: capped at ``trim`` times the cohort's median (Potter, "A study of
  procedures to identify and trim extreme sampling weights", 1990; Cole and Hernán,
  Am. J. Epidemiol. 2008), which bounds the variance one device seen once can add and
  leaves a bias where the cap binds. Consistent as the days grow (the posterior mean
  tends to the device's own rate) when each device's rate at an hour is the same on
  every day and check-ins are a random share of the online devices; with few days the
  shrinkage leaves part of the correction undone (weights between ``poststrat``'s and
  ``ipw_days``'s). It fails where today's rates are not the earlier days' (a changed
  routine), and where a region's devices are too few to fit its prior.
- ``poststrat_shrunk``: ``poststrat_history`` on strata of region × equal-count bins of
  π̂_k at the round's hour, the rate that decides who is online now (the daily rate of
  ``poststrat_history`` does not see when in the day a device is online). The number
  of bins is ``bins``, or with ``bins`` = 0 by the rule: per region the most bins, up
  to Cochran's five (Cochran, Biometrics 1968: five subclasses on a covariate remove
  about 90 % of its bias, as Rosenbaum and Rubin, JASA 1984, found for the propensity
  score), such that every bin expects at least ``min_expected`` cohort members,
  E m_b = K Σ_{k ∈ b} π̂_k / Σ_U π̂_j. Unbiased where being online is independent of
  the loss within each stratum: where the rates that π̂ estimates decide who is online,
  up to the spread within a bin.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from simfl.quantile.estimators import HOURS_PER_DAY, CheckIns, Cohort, Estimate
from simfl.quantile.kernels import weighted_quantile
from simfl.quantile.panel import EstimatorContext

T = TypeVar("T")
COCHRAN_STRATA = 5  # the most strata the rule of poststrat_shrunk makes in a region
MAX_RHO = 0.5  # the beta-binomial's intra-device correlation at most: prior strength >= 1


@dataclass
class _Memo:
    """The last value derived from a check-in record, made again once the record has
    counted or forgotten rounds (its arrays, their round counts, the days forgotten) or
    ``extra`` differs."""

    key: Any = None
    value: Any = None

    def get(self, record: CheckIns, extra: object, make: Callable[[], T]) -> T:
        key = (id(record.seen), id(record.rounds), record.rounds.tobytes(), record.forgotten,
               extra)
        if key != self.key:
            self.key, self.value = key, make()
        return self.value


def hour_class_of(record: CheckIns, classes: int) -> np.ndarray:
    """(N,) for each device, the block b of the UTC day (``classes`` blocks, hour h in
    block ⌊h · classes / 24⌋) with the highest check-in rate Σ_{h ∈ b} c_kh / Σ_{h ∈ b} n_h
    over the blocks with counted rounds (ties: the earliest); ``classes`` for a device
    the record never saw."""
    block = np.arange(HOURS_PER_DAY) * classes // HOURS_PER_DAY
    one_hot = block[:, None] == np.arange(classes)[None, :]  # (24, classes)
    seen = record.seen @ one_hot  # (N, classes)
    rounds = record.rounds @ one_hot
    rate = np.where(rounds > 0, seen / np.maximum(rounds, 1), -1.0)
    return np.where(seen.sum(axis=1) > 0, np.argmax(rate, axis=1), classes)


def rate_class_of(record: CheckIns, bins: int) -> np.ndarray:
    """(N,) each device's bin of its check-in rate r_k = Σ_h c_kh / Σ_h n_h, cut at the
    population's b / bins quantiles (ties in one bin, so a bin may stay empty); 0 for
    every device before any round is counted."""
    rounds = record.rounds.sum()
    if rounds == 0:
        return np.zeros(record.num_devices, dtype=np.int64)
    return equal_count_bins(record.seen.sum(axis=1) / rounds, bins)


def raking(labels: Sequence[np.ndarray], totals: Sequence[np.ndarray], tol: float,
           max_iterations: int) -> tuple[np.ndarray, int, bool]:
    """Raking (iterative proportional fitting) of cohort weights to margin totals.

    ``labels[m]``: (K,) each cohort member's category in margin m; ``totals[m]``: (C_m,)
    the population's devices in each category (each margin summing to N). A category
    with no cohort member is dropped and the margin's present targets scaled by
    N / Σ_present N_c, so that every margin sums to N (its share is lost). From d⁰ = N / K
    each sweep scales, margin after margin, the weights of each category by its target
    over their sum. Returns (d, sweeps, converged): converged once after a sweep every
    present category's sum is within relative ``tol`` of its target; after
    ``max_iterations`` sweeps without it, the last sweep's weights (they match its last
    margin exactly; a pattern of empty cohort cells can leave the others unattainable).
    """
    n = float(totals[0].sum())
    goals = []
    for lab, tot in zip(labels, totals, strict=True):
        present = np.bincount(lab, minlength=tot.size) > 0
        goal = np.where(present, tot, 0.0)
        goals.append(goal * (n / goal.sum()))
    d = np.full(len(labels[0]), n / len(labels[0]))
    for sweep in range(1, max_iterations + 1):
        for lab, goal in zip(labels, goals, strict=True):
            d *= goal[lab] / np.bincount(lab, d, goal.size)[lab]
        error = max(np.abs(np.bincount(lab, d, goal.size)[lab] / goal[lab] - 1).max()
                    for lab, goal in zip(labels, goals, strict=True))
        if error <= tol:
            return d, sweep, True
    return d, max_iterations, False


def fit_beta_binomial(counts: np.ndarray, rounds: int, groups: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Per group g, the beta-binomial prior of the devices' counts c_k ~ Binomial(n, p_k),
    p_k ~ Beta(μ_g M_g, (1 − μ_g) M_g), fitted by moments (Kleinman, "Proportions with
    extraneous variance", Biometrics 1973): with N_g devices, their mean count c̄ and
    variance S² = Σ (c_k − c̄)² / N_g,

        μ̂ = (Σ_g c_k + 1/2) / (N_g n + 1),
        Var c = n μ (1 − μ) (1 + (n − 1) ρ),  ρ = 1 / (M + 1),
        ρ̂ = (S² / (n μ̂ (1 − μ̂)) − 1) / (n − 1), clipped to [0, 1/2],  M̂ = 1/ρ̂ − 1.

    The half count keeps μ̂ inside (0, 1) for a group never (or always) seen; the clip
    keeps the prior worth at least one round (M̂ ≥ 1), and M̂ = ∞ where the counts spread
    no more than binomially (every device at the group's rate). With n ≤ 1 round ρ is
    not identified: M̂ = ∞. Returns (G,) μ̂ and M̂."""
    size = np.bincount(groups).astype(float)
    total = np.bincount(groups, counts, size.size)
    mu = (total + 0.5) / (size * rounds + 1)
    if rounds <= 1:
        return mu, np.full(mu.shape, np.inf)
    mean = total / np.maximum(size, 1)
    spread = np.bincount(groups, (counts - mean[groups]) ** 2, size.size) / np.maximum(size, 1)
    rho = np.clip((spread / (rounds * mu * (1 - mu)) - 1) / (rounds - 1), 0.0, MAX_RHO)
    with np.errstate(divide="ignore"):
        return mu, 1.0 / rho - 1.0


def shrunk_rates(record: CheckIns, groups: np.ndarray, t_s: float) -> np.ndarray:
    """(N,) each device's empirical-Bayes online rate at the UTC hour h of ``t_s``: from
    its check-ins c_k at h on the rounds the record counts (n of them) and its group's
    prior (:func:`fit_beta_binomial`), the posterior mean (c_k + μ̂ M̂) / (n + M̂) (μ̂ where
    M̂ = ∞), divided by the record's share s of check-ins seen (the counts are binomial
    in s p_k)."""
    h = record.hour(t_s)
    counts, n = record.seen[:, h].astype(float), int(record.rounds[h])
    mu, strength = fit_beta_binomial(counts, n, groups)
    mu_k, m_k = mu[groups], strength[groups]
    finite = np.isfinite(m_k)
    posterior = np.divide(counts + mu_k * np.where(finite, m_k, 0.0), n + m_k, out=mu_k,
                          where=finite)
    return posterior / record.share


def equal_count_bins(values: np.ndarray, count: int) -> np.ndarray:
    """(n,) the bin of each value among ``count`` cut at the values' b / count quantiles
    (ties in one bin, so a bin may stay empty)."""
    return np.searchsorted(np.quantile(values, np.arange(1, count) / count), values,
                           side="left")


def bins_by_rule(rates: np.ndarray, expected: np.ndarray, min_expected: float) -> np.ndarray:
    """One region's bins of its devices' ``rates``: the most equal-count bins, at most
    :data:`COCHRAN_STRATA`, whose every non-empty bin expects (the sum of ``expected``,
    each device's expected cohort membership) at least ``min_expected`` members; one
    bin if no count of two or more does."""
    for count in range(COCHRAN_STRATA, 1, -1):
        bin_of = equal_count_bins(rates, count)
        per_bin = np.bincount(bin_of, expected)
        if per_bin[per_bin > 0].min() >= min_expected:
            return bin_of
    return np.zeros(rates.size, dtype=np.int64)


def _poststratified(stratum_of: np.ndarray, per_region: int, idx: np.ndarray) -> np.ndarray:
    """(K,) the post-stratification factor N_s / m_s · N_g / Σ_{s' ⊂ g, m_s' > 0} N_s' of
    each cohort member (``idx``), stratum s = g · per_region + b of region g
    (``poststrat_history``'s: a region keeps its share when some of its strata are
    absent from the cohort)."""
    size = int(stratum_of.max()) + 1
    population = np.bincount(stratum_of, minlength=size).astype(float)
    stratum = stratum_of[idx]
    in_cohort = np.bincount(stratum, minlength=size)
    region = np.arange(size) // per_region
    region_total = np.bincount(region, population)
    region_present = np.bincount(region, population * (in_cohort > 0))
    g = stratum // per_region
    return population[stratum] / in_cohort[stratum] * region_total[g] / region_present[g]


@dataclass(frozen=True)
class Raked:
    """Cohort weights α_k d_k, d raked to the margins' device counts (module docstring)."""

    strata: np.ndarray  # (N,) the region of every training device
    checkins: CheckIns  # the earlier days' record
    margins: tuple[str, ...] = ("region", "hour", "rate")
    hour_classes: int = 3
    rate_classes: int = 3
    tol: float = 1e-6
    max_iterations: int = 100
    name: str = "rake"
    losses_in_clear: bool = True
    _memo: _Memo = field(default_factory=_Memo, compare=False, repr=False)

    def population_classes(self) -> tuple[np.ndarray, list[np.ndarray]]:
        """(M, N) every training device's category in each margin, and (C_m,) the devices
        of each category: made again only when the record counts or forgets rounds."""
        def make() -> tuple[np.ndarray, list[np.ndarray]]:
            of = {"region": lambda: self.strata,
                  "hour": lambda: hour_class_of(self.checkins, self.hour_classes),
                  "rate": lambda: rate_class_of(self.checkins, self.rate_classes)}
            classes = np.stack([of[m]() for m in self.margins]).astype(np.int64)
            classes.flags.writeable = False
            return classes, [np.bincount(c).astype(float) for c in classes]
        return self._memo.get(self.checkins, None, make)

    def weights(self, cohort: Cohort) -> tuple[np.ndarray, int, bool]:
        """(K,) d (:func:`raking`), sweeps and whether the margins were matched."""
        classes, totals = self.population_classes()
        return raking([c[cohort.client_idx] for c in classes], totals, self.tol,
                      self.max_iterations)

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        weights = cohort.weights * self.weights(cohort)[0]
        return Estimate(weighted_quantile(cohort.losses, weights, level), weights=weights)


@dataclass(frozen=True)
class ShrunkIPW:
    """Cohort weights α_k / π̂_k, stabilised and trimmed (module docstring)."""

    strata: np.ndarray  # (N,) the region of every training device
    checkins: CheckIns  # the earlier days' record
    trim: float = 10.0  # cap of 1/π̂ in units of the cohort's median (0: none)
    name: str = "ipw_shrunk"
    losses_in_clear: bool = True
    _memo: _Memo = field(default_factory=_Memo, compare=False, repr=False)

    def rates(self, t_s: float) -> np.ndarray:
        """(N,) π̂ at the UTC hour of ``t_s`` (:func:`shrunk_rates`), read-only."""
        def make() -> np.ndarray:
            rates = shrunk_rates(self.checkins, self.strata, t_s)
            rates.flags.writeable = False
            return rates
        return self._memo.get(self.checkins, CheckIns.hour(t_s), make)

    def inverse_rates(self, cohort: Cohort) -> np.ndarray:
        """(K,) 1/π̂_k over its cohort mean, capped at ``trim`` times the cohort's median."""
        inverse = 1.0 / self.rates(cohort.t_s)[cohort.client_idx]
        inverse /= inverse.mean()
        return np.minimum(inverse, self.trim * np.median(inverse)) if self.trim else inverse

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        weights = cohort.weights * self.inverse_rates(cohort)
        return Estimate(weighted_quantile(cohort.losses, weights, level), weights=weights)


@dataclass(frozen=True)
class ShrunkStrata:
    """Post-stratification on region × bins of π̂ at the round's hour (module docstring)."""

    strata: np.ndarray  # (N,) the region of every training device
    checkins: CheckIns  # the earlier days' record
    bins: int = 0  # per region; 0: by the rule
    min_expected: float = 5.0  # the rule's least expected cohort members of a bin
    name: str = "poststrat_shrunk"
    losses_in_clear: bool = True
    _rates: ShrunkIPW = field(init=False, compare=False, repr=False)
    _memo: _Memo = field(default_factory=_Memo, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_rates", ShrunkIPW(self.strata, self.checkins))

    @property
    def per_region(self) -> int:
        return self.bins or COCHRAN_STRATA

    def propensity_strata(self, t_s: float, cohort_size: int) -> np.ndarray:
        """(N,) each device's stratum g · per_region + b for a cohort of ``cohort_size`` at
        ``t_s``: b its bin of π̂ within its region g (:func:`equal_count_bins`, ``bins``
        of them or :func:`bins_by_rule`); read-only."""
        def make() -> np.ndarray:
            rates = self._rates.rates(t_s)
            expected = cohort_size * rates / rates.sum()
            stratum = np.empty_like(self.strata)
            for region in np.unique(self.strata):
                members = self.strata == region
                bin_of = (equal_count_bins(rates[members], self.bins) if self.bins else
                          bins_by_rule(rates[members], expected[members], self.min_expected))
                stratum[members] = region * self.per_region + bin_of
            stratum.flags.writeable = False
            return stratum
        return self._memo.get(self.checkins, (CheckIns.hour(t_s), cohort_size), make)

    def estimate(self, cohort: Cohort, level: float, rng: np.random.Generator) -> Estimate:
        stratum_of = self.propensity_strata(cohort.t_s, len(cohort.losses))
        weights = cohort.weights * _poststratified(stratum_of, self.per_region,
                                                   cohort.client_idx)
        return Estimate(weighted_quantile(cohort.losses, weights, level), weights=weights)


def _days(ctx: EstimatorContext, name: str) -> CheckIns:
    if ctx.checkins_days is None:  # the panel keeps it for every name of DAYS_READERS
        raise ValueError(f"estimator {name!r} without its record of earlier days' check-ins")
    return ctx.checkins_days


def rake(ctx: EstimatorContext) -> Raked:
    cfg = ctx.cfg.rake
    return Raked(ctx.strata, _days(ctx, "rake"), cfg.margins, cfg.hour_classes,
                 cfg.rate_classes, cfg.tol, cfg.max_iterations)


def ipw_shrunk(ctx: EstimatorContext) -> ShrunkIPW:
    return ShrunkIPW(ctx.strata, _days(ctx, "ipw_shrunk"), ctx.cfg.ipw_shrunk.trim)


def poststrat_shrunk(ctx: EstimatorContext) -> ShrunkStrata:
    cfg = ctx.cfg.poststrat_shrunk
    return ShrunkStrata(ctx.strata, _days(ctx, "poststrat_shrunk"), cfg.bins,
                        cfg.min_expected)
