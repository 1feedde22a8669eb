"""``[estimator]``: the threshold estimators of Δ-FL's filter (simfl/quantile/), the
driver, its shadows and each estimator's own sub-table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from simfl.scenario.fields import (
    BOUNDED,
    LARGE,
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_BOUNDED,
    opt,
    params_table,
)

MAX_DECOMPOSITION_DRAWS = 100_000  # a bias round runs 2 x draws estimates per estimator
MAX_BISECTION_SUMS = 128  # secure sums of one bisection: ceil(log2((high - low) / tol))
# secure_mm's ranges: each iteration is one secure sum of the cohort (a round trip of the
# protocol; MM converges in tens), and ``tol`` is also the width its final bisection narrows
# the bracket to, ceil(log2(bracket / tol)) sums: below MIN_MM_TOL a double cannot tell a
# loss near 1e4 from its neighbour, and a tiny tol overflows that count.
MAX_MM_ITERATIONS = 10_000
MIN_MM_TOL = 1e-12


@dataclass(frozen=True)
class SecureMMConfig:
    # secure sums after the first (the weighted mean)
    iterations: int = opt(30, (lambda v: 1 <= v <= MAX_MM_ITERATIONS,
                              f"must be in [1, {MAX_MM_ITERATIONS}] (each iteration is one "
                              f"secure sum of the cohort)"))
    # stop once an iteration moves the estimate by at most this
    tol: float = opt(1e-4, (lambda v: MIN_MM_TOL <= v <= LARGE,
                           f"must be in [{MIN_MM_TOL:g}, 1e30] (finer than a double "
                           f"resolves a loss near 1e4)"))


@dataclass(frozen=True)
class BisectionConfig:
    # the search range of the threshold (losses outside it are clamped)
    low: float = opt(0.0, BOUNDED)
    high: float = opt(16.0, BOUNDED)
    tol: float = opt(1e-3, POSITIVE)  # final bracket width: ceil(log2((high - low) / tol)) sums


@dataclass(frozen=True)
class TrackingConfig:
    initial: float = opt(1.0, POSITIVE_BOUNDED)  # the threshold of the first round
    # geometric step: eta *= exp(-step * (share below - level))
    step: float = opt(0.2, (lambda v: 0 < v <= 10, "must be in (0, 10]"))


@dataclass(frozen=True)
class IPWConfig:
    prior: float = opt(1.0, POSITIVE)  # Beta(prior, prior) pseudo-counts of the online rates


@dataclass(frozen=True)
class HistoryConfig:
    bins: int = opt(4, (lambda v: 1 <= v <= 100, "must be in [1, 100]"))  # per region


@dataclass(frozen=True)
class ShiftedConfig:
    """The dose of the ``shifted`` estimator (simfl/quantile/dose.py): its base's η̂ at
    level (1 − θ) + level_shift, plus offset_nats."""

    base: str = "cohort_exact"  # an estimator without memory across rounds
    offset_nats: float = opt(0.0, (lambda v: -100 <= v <= 100, "must be in [-100, 100]"))
    level_shift: float = opt(0.0, (lambda v: -1 <= v <= 1, "must be in [-1, 1]"))
    from_round: int = opt(0, NON_NEGATIVE)  # the rounds before it use the base's η̂ alone


@dataclass(frozen=True)
class ModelAssistedConfig:
    """``model_assisted`` (simfl/quantile/assisted.py): the largest age, in rounds, of a
    device's last loss report that predicts its current loss (older: as never reported)."""

    max_age: int = opt(100, (lambda v: 1 <= v <= 10**9, "must be in [1, 1e9]"))


@dataclass(frozen=True)
class RakeConfig:
    """``rake`` (simfl/quantile/survey.py): the cohort calibrated to population margins by
    raking; the margins are among region (known at registration), hour (the block of
    the UTC day in which a device checked in most on earlier days, of ``hour_classes``
    equal blocks, or never seen) and rate (``rate_classes`` equal-count bins of its
    earlier days' check-in rate)."""

    margins: tuple[Literal["region", "hour", "rate"], ...] = opt(
        ("region", "hour", "rate"),
        (lambda v: len(v) >= 1 and len(set(v)) == len(v), "must name a margin, none twice"))
    hour_classes: int = opt(3, (lambda v: 1 <= v <= 24, "must be in [1, 24]"))
    rate_classes: int = opt(3, (lambda v: 1 <= v <= 100, "must be in [1, 100]"))
    # stop once every margin is matched within this relative error, or after max_iterations
    tol: float = opt(1e-6, (lambda v: 0 < v < 1, "must be in (0, 1)"))
    max_iterations: int = opt(100, (lambda v: 1 <= v <= 10_000, "must be in [1, 10000]"))


@dataclass(frozen=True)
class ShrunkIPWConfig:
    """``ipw_shrunk`` (simfl/quantile/survey.py): each inverse rate 1/π̂_k capped at
    ``trim`` times the cohort's median (0: no cap)."""

    trim: float = opt(10.0, (lambda v: v == 0 or 1 <= v <= LARGE,
                            "must be 0 (no cap) or in [1, 1e30]"))


@dataclass(frozen=True)
class ShrunkStrataConfig:
    """``poststrat_shrunk`` (simfl/quantile/survey.py): strata of each region by its
    devices' shrunk online rates, ``bins`` equal-count bins (0: by the rule, at most five
    with at least ``min_expected`` cohort members expected in each)."""

    bins: int = opt(0, (lambda v: 0 <= v <= 100, "must be in [0, 100] (0: by the rule)"))
    min_expected: float = opt(5.0, (lambda v: 0 < v <= 1e6, "must be in (0, 1e6]"))


@dataclass(frozen=True)
class EstimatorConfig:
    """How the server estimates the Δ-FL threshold (simfl/quantile/estimators.py)."""

    # drives the filter: one of simfl's (plugins.ESTIMATORS, which says what each reads)
    # or a plug-in
    name: str = "cohort_exact"
    # Also run on the same cohort losses every round (logged, never used to filter);
    # listing the driving estimator here too is allowed (a sweep can vary the driver).
    shadow: tuple[str, ...] = opt(
        (), (lambda v: len(set(v)) == len(v), "must not repeat an estimator"))
    # Rounds between evaluations of F_k(w_t) on every training device for the
    # population quantile and the realized conformity (0 = never).
    bias_every: int = opt(0, NON_NEGATIVE)
    # On bias rounds, Monte-Carlo draws of random cohorts (of the cohort's size) from all
    # training devices and from those online now, for the bias decomposition (0 = off).
    decomposition_draws: int = opt(50, (lambda v: 0 <= v <= MAX_DECOMPOSITION_DRAWS,
                                       f"must be in [0, {MAX_DECOMPOSITION_DRAWS}]"))
    noise_std: float = opt(0.0, NON_NEGATIVE)  # Gaussian noise on every secure sum (DP knob)
    secure_mm: SecureMMConfig = opt(SecureMMConfig)
    secure_bisection: BisectionConfig = opt(BisectionConfig)
    tracking: TrackingConfig = opt(TrackingConfig)
    ipw: IPWConfig = opt(IPWConfig)
    poststrat_history: HistoryConfig = opt(HistoryConfig)  # strata of check-in rate
    shifted: ShiftedConfig = opt(ShiftedConfig)  # the dose of a dose-response
    model_assisted: ModelAssistedConfig = opt(ModelAssistedConfig)  # last reports' max age
    rake: RakeConfig = opt(RakeConfig)  # its margins and iterations
    ipw_shrunk: ShrunkIPWConfig = opt(ShrunkIPWConfig)  # its weights' cap
    poststrat_shrunk: ShrunkStrataConfig = opt(ShrunkStrataConfig)  # its strata count
    # The check-ins the estimators that read them see (simfl.quantile.estimators.CheckIns):
    # each online device's with this probability when a round opens, and kept for the
    # round's UTC day and this many days before it (0: forever).
    checkin_share: float = opt(1.0, (lambda v: 0 < v <= 1, "must be in (0, 1]"))
    checkin_memory_days: int = opt(0, (lambda v: 0 <= v <= 3650, "must be in [0, 3650]"))
    params: dict[str, Any] = params_table()  # of the plug-in estimators, each takes those it names

