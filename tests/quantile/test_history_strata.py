"""poststrat_history: post-stratification on region × earlier days' check-in rate.
Hand-computed weights, equality with poststrat without history, unbiased where being
online is independent of the loss within its strata, biased where it is not."""

from __future__ import annotations

import numpy as np
import pytest

from simfl.quantile.estimators import (
    CheckIns,
    Cohort,
    CohortExact,
    HistoryStratified,
    PostStratified,
)
from simfl.quantile.kernels import weighted_quantile

NO_NOISE = np.random.default_rng(0)
HOUR_S, DAY_S = 3600.0, 86400.0


def _history(prob_at_hour, n: int, days: int, rng: np.random.Generator) -> CheckIns:
    """The earlier days' check-ins of devices online with probability prob_at_hour(h) (N,)
    at one round an hour, then the first round of the day after (which counts them)."""
    checkins = CheckIns(n, earlier_days=True)
    for day in range(days):
        for h in range(24):
            checkins.observe(day * DAY_S + h * HOUR_S,
                             np.flatnonzero(rng.random(n) < prob_at_hour(h)))
    checkins.observe(days * DAY_S, np.arange(0))
    return checkins


def test_the_weights_hand_computed_with_a_stratum_absent_from_the_cohort() -> None:
    """Region 0: devices 0-3, rates 0, 0, 1, 1 (bins 0, 0, 1, 1); region 1: devices 4-7,
    rates 0, 0, 0, 1 (bins 0, 0, 0, 1). Cohort 0, 2, 3, 4: region 0's strata have 2 and 2
    devices, 1 and 2 in the cohort -> scales 2 and 1; region 1's bin 1 is absent, so its
    bin 0 (3 devices, 1 in the cohort) carries all 4 of the region -> scale 3 * 4 / 3."""
    checkins = CheckIns(8, earlier_days=True)
    checkins.observe(0.0, np.array([2, 3, 7]))
    checkins.observe(DAY_S, np.arange(0))
    estimator = HistoryStratified(np.array([0, 0, 0, 0, 1, 1, 1, 1]), checkins, bins=2)
    np.testing.assert_array_equal(estimator.history_strata(), [0, 0, 1, 1, 2, 2, 2, 3])
    losses = np.array([1.0, 2.0, 3.0, 4.0])
    cohort = Cohort(losses, np.ones(4), np.array([0, 2, 3, 4]), DAY_S)
    scale = np.array([2.0, 1.0, 1.0, 4.0])
    for level in (0.2, 0.5, 0.8):
        assert estimator.estimate(cohort, level, NO_NOISE).threshold == weighted_quantile(
            losses, scale, level)


def test_the_strata_follow_the_record_as_its_days_are_counted() -> None:
    """The strata are kept between rounds and made again when a day is counted, or when
    the record is loaded from a checkpoint: always those of the record then."""
    rng = np.random.default_rng(5)
    strata = rng.integers(0, 3, 200)
    checkins = CheckIns(200, earlier_days=True)
    estimator = HistoryStratified(strata, checkins, bins=4)
    seen = []
    for day in range(3):
        for h in range(0, 24, 6):
            checkins.observe(day * DAY_S + h * HOUR_S, np.flatnonzero(rng.random(200) < 0.3))
            fresh = HistoryStratified(strata, checkins, bins=4).history_strata()
            np.testing.assert_array_equal(estimator.history_strata(), fresh)
            seen.append(fresh.tolist())
    assert len({str(s) for s in seen}) == 3  # one set of strata a day (day 0: the regions)
    state = CheckIns(200, earlier_days=True)
    state.load_state_dict(_history(lambda h: np.linspace(0, 1, 200), 200, 1, rng).state_dict())
    checkins.load_state_dict(state.state_dict())
    np.testing.assert_array_equal(estimator.history_strata(),
                                  HistoryStratified(strata, state, bins=4).history_strata())


def test_without_history_it_is_poststrat() -> None:
    rng = np.random.default_rng(3)
    strata = rng.integers(0, 3, 500)
    history = HistoryStratified(strata, CheckIns(500, earlier_days=True), bins=4)
    post = PostStratified(strata)
    for _ in range(50):
        idx = rng.choice(500, 40, replace=False)
        cohort = Cohort(rng.gamma(2.0, size=40), rng.lognormal(size=40), idx, 0.0)
        assert (history.estimate(cohort, 0.3, NO_NOISE).threshold
                == post.estimate(cohort, 0.3, NO_NOISE).threshold)


def _population(rng: np.random.Generator, n: int = 3000):
    """Two regions; in each, half the devices ('shy') have high losses (1 to 2), half low
    (0 to 1). Returns (region, shy, losses, the population's quantile at 0.3, 0.3): inside
    the low losses (at 0.5 the quantile would sit on the gap between the two kinds)."""
    region = np.arange(n) % 2
    shy = (np.arange(n) // 2) % 2 == 1
    losses = np.where(shy, 1.0 + rng.random(n), rng.random(n))
    level = 0.3
    q = CohortExact().estimate(Cohort(losses, np.ones(n), np.arange(n), 0.0), level,
                               NO_NOISE).threshold
    return region, shy, losses, q, level


def _cohort_means(estimators, prob_now: np.ndarray, losses: np.ndarray, level: float,
                  rng: np.random.Generator, draws: int = 300) -> list[np.ndarray]:
    out: list[list[float]] = [[] for _ in estimators]
    for _ in range(draws):
        online = np.flatnonzero(rng.random(losses.size) < prob_now)
        idx = rng.choice(online, size=60, replace=False)
        cohort = Cohort(losses[idx], np.ones(60), idx, 0.0)
        for i, e in enumerate(estimators):
            out[i].append(e.estimate(cohort, level, NO_NOISE).threshold)
    return [np.array(x) for x in out]


def test_unbiased_where_the_check_in_rate_identifies_the_propensity() -> None:
    """Shy devices are online 10 % of the time, the others 60 %, at every hour: the
    cohort is mostly low-loss devices, so region-only post-stratification is biased down;
    two bins of ten earlier days' check-in rate separate the two kinds, and the estimate
    is within Monte-Carlo error of the population's (the cohort's size adds a small
    sampling term of its own, bounded by the 0.02 floor)."""
    rng = np.random.default_rng(21)
    region, shy, losses, q, level = _population(rng)
    prob = np.where(shy, 0.1, 0.6)
    history = HistoryStratified(region, _history(lambda h: prob, losses.size, 10, rng), bins=2)
    kept, post = _cohort_means([history, PostStratified(region)], prob, losses, level, rng)
    tolerance = 4 * kept.std() / np.sqrt(kept.size)
    assert abs(kept.mean() - q) < max(tolerance, 0.02)
    assert q - post.mean() > 0.15


@pytest.mark.parametrize("bins", [2, 8])
def test_biased_where_a_phase_tied_to_the_loss_leaves_the_daily_rate_equal(bins: int) -> None:
    """Shy devices are online 50 % of the time in UTC hours 0-11 and 10 % after, the
    others the reverse: every device's daily rate is 0.3, so the history cannot tell
    them apart, and at 03:00 the estimate is biased up as region-only
    post-stratification: the assumption fails and the estimator says so by its bias."""
    rng = np.random.default_rng(22)
    region, shy, losses, q, level = _population(rng)

    def prob(h: int) -> np.ndarray:
        return np.where(shy == (h < 12), 0.5, 0.1)

    history = HistoryStratified(region, _history(prob, losses.size, 10, rng), bins=bins)
    kept, post = _cohort_means([history, PostStratified(region)], prob(3), losses, level, rng)
    assert kept.mean() - q > 0.3
    assert abs(kept.mean() - post.mean()) < 0.1
