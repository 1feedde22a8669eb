"""Quantile estimators: convergence to the cohort quantile, bias against order statistics,
the IPW correction, noise, tracking, and the secure-aggregation cost model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simfl.errors import InputError
from simfl.quantile.estimators import (
    IPW,
    CheckIns,
    Cohort,
    CohortExact,
    PostStratified,
    SecureBisection,
    SecureMM,
    Tracking,
)
from simfl.quantile.panel import EstimatorPanel
from simfl.quantile.secagg import secure_sum
from simfl.rng import Streams
from simfl.scenario import EstimatorConfig

NO_NOISE = np.random.default_rng(0)  # unused by noiseless estimators


def _random_cohort(rng: np.random.Generator) -> tuple[Cohort, float]:
    k = int(rng.integers(3, 150))
    weights = rng.lognormal(0.0, 1.0, k)
    cohort = Cohort(rng.gamma(2.0, 1.0, k), weights / weights.mean(), np.arange(k), 0.0)
    return cohort, float(rng.choice([0.1, 0.5, 0.9]))


def _pinball(cohort: Cohort, level: float, eta: float) -> float:
    u = cohort.losses - eta
    return float(cohort.weights @ np.maximum(level * u, (level - 1) * u))


def _keep(cohort: Cohort, threshold: float) -> np.ndarray:
    return cohort.losses >= threshold


def _tied_cohort(rng: np.random.Generator) -> tuple[Cohort, float]:
    """A weighted cohort with exact ties and near-ties (gaps of 1e-9 to 1e-4) around its
    values, integer sample-count weights, K from 2 to 150."""
    k = int(rng.integers(2, 150))
    base = np.round(rng.gamma(2.0, 1.0, k), int(rng.integers(1, 4)))  # rounding: exact ties
    jitter = rng.choice([0.0, 1e-9, 1e-7, 1e-4], k) * rng.choice([-1.0, 1.0], k)
    losses = np.clip(base + jitter, 1e-6, 15.0)
    weights = rng.integers(1, 400, k).astype(float)
    return Cohort(losses, weights / weights.mean(), np.arange(k), 0.0), float(
        rng.choice([0.1, 0.2, 0.5, 0.8, 0.9]))


def test_noiseless_secure_keep_sets_equal_cohort_exact_on_ties_and_near_ties() -> None:
    rng = np.random.default_rng(1)
    sums = {"secure_bisection": [], "secure_mm": []}
    for _ in range(400):
        cohort, level = _tied_cohort(rng) if rng.random() < 0.7 else _random_cohort(rng)
        exact = CohortExact().estimate(cohort, level, NO_NOISE).threshold
        for est in (SecureBisection(0.0, 16.0, 1e-3), SecureMM(30, 1e-4)):
            out = est.estimate(cohort, level, NO_NOISE)
            assert (_keep(cohort, out.threshold) == _keep(cohort, exact)).all(), est.name
            # the estimate is within the tolerance below the quantile, never above it
            assert exact - est.tol < out.threshold <= exact
            sums[est.name].append(out.secure_sums)
    # the bisection's tolerance costs ceil(log2(16 / 1e-3)) = 14 sums; isolating the
    # quantile's device costs a few more where devices lie within the tolerance of it
    assert min(sums["secure_bisection"]) == 14
    assert np.median(sums["secure_bisection"]) <= 16


@pytest.mark.parametrize("level", [0.0, 1e-13, 0.5, 0.8])
def test_secure_keep_sets_equal_cohort_exact_where_the_quantile_is_the_range_low_end(
        level: float) -> None:
    # θ = 1 (level 0, or within the slack of it) keeps every device; exact zero losses at
    # the bisection's low end (0) hold the quantile at levels up to their share. Before,
    # secure_mm found no bracket at level 0 (the run failed) and the bisection dropped
    # the devices at low.
    rng = np.random.default_rng(3)
    for losses in ([0.0, 1.0, 2.0], [0.0, 0.0, 0.0, 1.0], [0.5, 0.7, 2.0, 3.0], [2.5]):
        cohort = Cohort(np.array(losses), np.ones(len(losses)), np.arange(len(losses)), 0.0)
        exact = _keep(cohort, CohortExact().estimate(cohort, level, NO_NOISE).threshold)
        for est in (SecureBisection(0.0, 16.0, 1e-3), SecureMM(30, 1e-4)):
            out = est.estimate(cohort, level, rng)
            assert math.isfinite(out.threshold)
            assert (_keep(cohort, out.threshold) == exact).all(), (est.name, losses)
    for _ in range(200):  # random cohorts at θ = 1: every device kept
        cohort = _random_cohort(rng)[0]
        for est in (SecureBisection(0.0, 16.0, 1e-3), SecureMM(30, 1e-4)):
            assert _keep(cohort, est.estimate(cohort, 0.0, rng).threshold).all()


def test_the_bisection_hand_computed() -> None:
    # losses 1, 2, 3 with equal weights, level 1/2: Q = 2; the bracket (0, 16] halves
    # to (1.5, 2.0]...: after 14 steps low lies within 1e-3 below 2 and holds only 2
    cohort = Cohort(np.array([1.0, 2.0, 3.0]), np.ones(3), np.arange(3), 0.0)
    out = SecureBisection(0.0, 16.0, 1e-3).estimate(cohort, 0.5, NO_NOISE)
    assert 2.0 - 1e-3 < out.threshold < 2.0
    assert out.secure_sums == 14  # 14 halvings; the last leaves one device inside
    assert len(out.exchanges) == 14 * 4 + 1
    assert out.exchanges[2].up_bytes == 4 * 4  # four values per sum: below, total, 2 counts


def test_mm_converges_to_the_cohort_quantile() -> None:
    """MM decreases the pinball loss to its minimum (the cohort quantile); the value
    converges too, slowly where the weighted CDF nearly equals the level at the quantile."""
    rng = np.random.default_rng(2)
    value_errors = []
    for _ in range(200):
        cohort, level = _random_cohort(rng)
        exact = CohortExact().estimate(cohort, level, NO_NOISE).threshold
        mu, _ = SecureMM(iterations=1000, tol=1e-9).iterate(cohort, level, NO_NOISE)
        best = _pinball(cohort, level, exact)
        assert _pinball(cohort, level, mu) <= best * (1 + 1e-4)
        value_errors.append(abs(mu - exact))
    assert np.median(value_errors) < 1e-5
    assert np.quantile(value_errors, 0.9) < 1e-3


def test_mm_objective_never_increases() -> None:
    rng = np.random.default_rng(3)
    cohort, level = _random_cohort(rng)
    values = [_pinball(cohort, level, SecureMM(iterations=n, tol=0.0)
                       .iterate(cohort, level, NO_NOISE)[0]) for n in range(0, 40)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(values, values[1:], strict=False))


def test_mm_counts_its_secure_sums_and_stops_at_tol() -> None:
    cohort = Cohort(np.array([1.0, 2.0, 3.0]), np.ones(3), np.arange(3), 0.0)
    # level 1/2, equal weights: the mean 2 is the median and a fixed point: one MM sum
    # after the mean moves it by 0, so 2 secure sums of MM.
    mu, sums = SecureMM(iterations=30, tol=1e-4).iterate(cohort, 0.5, NO_NOISE)
    assert mu == pytest.approx(2.0) and sums == 2
    est = SecureMM(iterations=30, tol=1e-4).estimate(cohort, 0.5, NO_NOISE)
    # then F(2) >= 1/2 and F(2 - 1e-4) < 1/2 (two sums) bracket Q = 2 in (2 - 1e-4, 2],
    # and one halving leaves a single device inside
    assert est.secure_sums == 2 + 2 + 1
    assert len(est.exchanges) == 5 * 4 + 1  # four exchanges per sum, then the broadcast
    assert _keep(cohort, est.threshold).tolist() == [False, True, True]


@pytest.mark.parametrize(("k", "level"), [(10, 0.5), (10, 0.9), (25, 0.2), (50, 0.5)])
def test_cohort_exact_bias_matches_order_statistics(k: int, level: float) -> None:
    """I.i.d. U(0, 1) losses, equal weights: the lower quantile at level p is the j-th
    order statistic, j = ceil(p k), with E = j / (k + 1); the population quantile is p."""
    rng = np.random.default_rng(4)
    draws = 20_000
    estimates = np.array([
        CohortExact().estimate(Cohort(rng.random(k), np.ones(k), np.arange(k), 0.0), level,
                               NO_NOISE).threshold for _ in range(draws)])
    j = math.ceil(level * k - 1e-9)
    expected_bias = j / (k + 1) - level
    sd = math.sqrt(j * (k - j + 1) / ((k + 1) ** 2 * (k + 2)))
    assert estimates.mean() - level == pytest.approx(expected_bias, abs=4 * sd / math.sqrt(draws))


class _KnownRates:
    def __init__(self, prob: np.ndarray) -> None:
        self.prob = prob

    def online_prob(self, device_idx: np.ndarray, t_s: float) -> np.ndarray:
        return self.prob[device_idx]


def test_ipw_with_known_inclusion_is_unbiased_where_the_cohort_is_not() -> None:
    """Half the devices have high losses and are online 80% of the time, half low losses
    and 20%: a cohort of whoever is online over-represents high losses."""
    rng = np.random.default_rng(5)
    n = 2000
    high = np.arange(n) < n // 2
    losses = np.where(high, 1.0 + rng.random(n), rng.random(n))
    prob = np.where(high, 0.8, 0.2)
    weights = np.ones(n)
    level = 0.5
    population = CohortExact().estimate(Cohort(losses, weights, np.arange(n), 0.0), level,
                                        NO_NOISE).threshold
    ipw = IPW(_KnownRates(prob))
    naive, corrected, ht_cdf = [], [], []
    for _ in range(300):
        idx = np.flatnonzero(rng.random(n) < prob)  # Poisson sampling with known π
        cohort = Cohort(losses[idx], weights[idx], idx, 0.0)
        naive.append(CohortExact().estimate(cohort, level, NO_NOISE).threshold)
        corrected.append(ipw.estimate(cohort, level, NO_NOISE).threshold)
        ht_cdf.append(np.sum((losses[idx] <= population) / prob[idx]))  # Horvitz-Thompson
    assert np.mean(naive) - population > 0.3
    assert abs(np.mean(corrected) - population) < 0.02
    true_count = np.sum(losses <= population)
    assert np.mean(ht_cdf) == pytest.approx(true_count, abs=4 * np.std(ht_cdf) / np.sqrt(300))


def test_zero_noise_is_the_noiseless_estimator_and_noise_perturbs() -> None:
    rng = np.random.default_rng(6)
    cohort, level = _random_cohort(rng)
    for make in (lambda s: SecureMM(noise_std=s), lambda s: SecureBisection(noise_std=s)):
        quiet = [make(0.0).estimate(cohort, level, np.random.default_rng(seed)).threshold
                 for seed in range(3)]
        assert quiet[0] == quiet[1] == quiet[2]
    tracking = Tracking(noise_std=0.0)
    moved = [tracking.estimate(cohort, level, np.random.default_rng(seed), tracking.init())
             .state["eta"] for seed in range(3)]
    assert moved[0] == moved[1] == moved[2]
    noisy = [SecureMM(noise_std=5.0).estimate(cohort, level, np.random.default_rng(seed))
             .threshold for seed in range(3)]
    assert len(set(noisy)) == 3


def test_tracking_hand_computed_step_and_stationary_convergence() -> None:
    cohort = Cohort(np.array([0.5, 1.5, 2.5, 3.5]), np.ones(4), np.arange(4), 0.0)
    tracker = Tracking(initial=1.0, step=0.5)
    first = tracker.init()
    est = tracker.estimate(cohort, 0.5, NO_NOISE, first)
    assert est.threshold == 1.0  # this round filters with the carried value
    # b̄ = 1/4 below 1.0, so η ← 1.0 · exp(-0.5 (0.25 - 0.5)) = exp(0.125)
    assert est.state["eta"] == pytest.approx(math.exp(0.125))
    assert first == {"eta": 1.0}  # returned, not kept: the round's state is unchanged
    assert tracker.estimate(cohort, 0.5, NO_NOISE, first) == est
    rng = np.random.default_rng(7)
    tracker = Tracking(initial=0.05, step=0.05)
    state = tracker.init()
    for _ in range(3000):  # i.i.d. U(0, 1) cohorts: η settles near the 0.3 quantile
        state = tracker.estimate(Cohort(rng.random(100), np.ones(100), np.arange(100), 0.0),
                                 0.3, NO_NOISE, state).state
    assert state["eta"] == pytest.approx(0.3, abs=0.03)


def test_checkins_online_rate_with_prior_counts_only_earlier_rounds() -> None:
    checkins = CheckIns(num_devices=3, prior=1.0)
    checkins.observe(3600.0 * 5 + 10, np.array([0, 1]))  # hour 5
    # the round being weighted is not counted yet: the prior alone
    assert checkins.online_prob(np.array([0, 1, 2]), 3600.0 * 5).tolist() == [0.5] * 3
    checkins.observe(3600.0 * 29, np.array([0]))  # hour 29 = 5 the next day
    checkins.observe(3600.0 * 6, np.array([2]))
    # counted: both hour-5 rounds. Device 0: (2 + 1) / (2 + 2); 1: (1 + 1) / 4; 2: (0 + 1) / 4
    assert checkins.online_prob(np.array([0, 1, 2]), 3600.0 * 5).tolist() == [0.75, 0.5, 0.25]
    assert checkins.online_prob(np.array([2]), 3600.0 * 6).tolist() == [0.5]  # hour 6: pending


def test_lagged_checkins_estimate_the_online_rate_without_the_current_round_bias() -> None:
    """Devices online with known probabilities; every round the cohort is drawn from the
    online ones. π̂ from earlier rounds is unbiased for cohort members; counting the
    current round (the old behaviour) puts them at (c + 1 + a) / (n + 1 + 2a)."""
    rng = np.random.default_rng(11)
    n, rounds = 400, 24 * 6  # six rounds per UTC hour
    prob = rng.choice([0.1, 0.2, 0.5], n)
    checkins = CheckIns(n, prior=1.0)
    member_estimates: list[float] = []
    member_truth: list[float] = []
    for r in range(rounds):
        t_s = 3600.0 * (r % 24) + 86400.0 * (r // 24)
        online = np.flatnonzero(rng.random(n) < prob)
        checkins.observe(t_s, online)
        cohort = rng.choice(online, size=min(20, online.size), replace=False)
        if r >= rounds - 24:  # the last day: five earlier rounds at each hour
            member_estimates += checkins.online_prob(cohort, t_s).tolist()
            member_truth += prob[cohort].tolist()
    # (c + 1) / (5 + 2) with c ~ Bin(5, π): expectation (5π + 1) / 7
    expected = (5 * np.array(member_truth) + 1) / 7
    assert np.mean(member_estimates) == pytest.approx(np.mean(expected), abs=0.01)
    biased = (5 * np.array(member_truth) + 2) / 8  # what counting the round itself gives
    assert np.mean(biased) - np.mean(member_estimates) > 0.05


def test_checkins_of_earlier_days_count_a_day_once_it_is_over() -> None:
    checkins = CheckIns(num_devices=3, prior=1.0, earlier_days=True)
    checkins.observe(3600.0 * 5, np.array([0, 1]))  # day 0, hour 5
    checkins.observe(3600.0 * 5 + 600, np.array([0]))
    # today's rounds are not counted: the prior alone
    assert checkins.online_prob(np.array([0, 1, 2]), 3600.0 * 5 + 600).tolist() == [0.5] * 3
    checkins.observe(3600.0 * 29, np.array([2]))  # day 1, hour 5: day 0 is over
    # device 0: (2 + 1) / (2 + 2); 1: (1 + 1) / 4; 2: (0 + 1) / 4 (today's round not counted)
    assert checkins.online_prob(np.array([0, 1, 2]), 3600.0 * 29).tolist() == [0.75, 0.5, 0.25]
    checkins.observe(3600.0 * 29 + 600, np.array([2]))
    assert checkins.online_prob(np.array([2]), 3600.0 * 29 + 600).tolist() == [0.25]
    checkins.observe(3600.0 * 53, np.array([1]))  # day 2: both day-1 rounds count
    assert checkins.online_prob(np.array([0, 1, 2]), 3600.0 * 53).tolist() == [
        3 / 6, 2 / 6, 3 / 6]


def test_checkins_of_earlier_days_are_unbiased_when_sessions_persist() -> None:
    """Each device is online for a whole UTC hour or not at all, with probability π_k,
    independently across hours and days; six rounds an hour. For a device online now,
    its earlier rounds of this hour are online too, so counting them (``ipw``) puts π̂
    above (6 D π + 1) / (6 D + 2), the expectation from the D earlier days alone, which
    ``earlier_days`` meets."""
    rng = np.random.default_rng(5)
    n, days = 300, 4
    prob = rng.choice([0.1, 0.3, 0.6], n)
    lagged, by_day = CheckIns(n, prior=1.0), CheckIns(n, prior=1.0, earlier_days=True)
    got: dict[str, list[float]] = {"lagged": [], "days": []}
    expected: list[float] = []
    for day in range(days):
        for hour in range(24):
            online = np.flatnonzero(rng.random(n) < prob)
            for j in range(6):
                t_s = 86400.0 * day + 3600.0 * hour + 600.0 * j
                lagged.observe(t_s, online)
                by_day.observe(t_s, online)
                if day == days - 1 and online.size:
                    got["lagged"] += lagged.online_prob(online, t_s).tolist()
                    got["days"] += by_day.online_prob(online, t_s).tolist()
                    d = days - 1
                    expected += ((6 * d * prob[online] + 1) / (6 * d + 2)).tolist()
    # ~ 7,000 members; the standard error of the mean is about 0.002
    assert np.mean(got["days"]) == pytest.approx(np.mean(expected), abs=0.01)
    assert np.mean(got["lagged"]) - np.mean(expected) > 0.03


def test_poststratification_with_strata_correlated_with_losses_removes_the_bias() -> None:
    """Two regions of equal size: region 0's devices have high losses and are online 80 %
    of the time, region 1's low losses and 20 %. Cohorts of whoever is online: the cohort
    quantile is biased up; post-stratified by region it is not."""
    rng = np.random.default_rng(12)
    n = 2000
    strata = (np.arange(n) >= n // 2).astype(np.int64)
    losses = np.where(strata == 0, 1.0 + rng.random(n), rng.random(n))
    prob = np.where(strata == 0, 0.8, 0.2)
    level = 0.3  # inside region 1's losses (at 0.5 the quantile is region 1's maximum)
    population = CohortExact().estimate(Cohort(losses, np.ones(n), np.arange(n), 0.0), level,
                                        NO_NOISE).threshold
    post = PostStratified(strata)
    naive, corrected = [], []
    for _ in range(300):
        online = np.flatnonzero(rng.random(n) < prob)
        idx = rng.choice(online, size=100, replace=False)
        cohort = Cohort(losses[idx], np.ones(100), idx, 0.0)
        naive.append(CohortExact().estimate(cohort, level, NO_NOISE).threshold)
        corrected.append(post.estimate(cohort, level, NO_NOISE).threshold)
    # Monte-Carlo tolerance: 4 standard errors of the mean over the 300 cohorts
    tolerance = 4 * np.std(corrected) / np.sqrt(300)
    assert np.mean(naive) - population > 0.3
    assert abs(np.mean(corrected) - population) < max(tolerance, 0.02)
    assert np.mean(naive) - population > 10 * tolerance


def test_secure_sum_bytes_hand_computed() -> None:
    keys, shares, masked, unmask = secure_sum(num_devices=10, num_values=2)
    assert (keys.up_bytes, keys.down_bytes) == (64, 640)
    assert (shares.up_bytes, shares.down_bytes) == (9 * 92, 9 * 92)
    assert (masked.up_bytes, masked.down_bytes) == (8, 40)
    assert (unmask.up_bytes, unmask.down_bytes) == (9 * 32, 8)


def test_panel_runs_shadows_on_identical_losses() -> None:
    cfg = EstimatorConfig(name="secure_bisection", shadow=("cohort_exact", "secure_mm", "ipw"))
    panel = EstimatorPanel(cfg, theta=0.5, num_devices=5, streams=Streams(0))
    panel.observe_online(0.0, np.arange(5))
    panel.observe_online(3600.0 * 24, np.arange(5))  # counts the first round's check-ins
    cohort = Cohort(np.array([0.3, 0.9, 1.4, 2.0]), np.ones(4), np.arange(4), 3600.0 * 24)
    out = panel.estimate(cohort, round_idx=0)
    assert list(out) == ["secure_bisection", "cohort_exact", "secure_mm", "ipw"]
    assert out["cohort_exact"].threshold == 0.9
    # every device online in every observed round: equal π̂, so IPW = the cohort quantile
    assert out["ipw"].threshold == 0.9
    assert 0.9 - 1e-3 < out["secure_bisection"].threshold < 0.9  # keeps 0.9 and above


def test_panel_ipw_days_weights_equally_on_the_first_day_and_by_earlier_days_after() -> None:
    cfg = EstimatorConfig(name="cohort_exact", shadow=("ipw", "ipw_days"))
    panel = EstimatorPanel(cfg, theta=0.5, num_devices=4, streams=Streams(0))
    assert EstimatorPanel(EstimatorConfig(), 0.5, 4, Streams(0)).presence.checkins_days is None
    cohort = Cohort(np.array([0.1, 0.2, 0.3, 5.0]), np.ones(4), np.arange(4), 0.0)
    for j in range(3):  # day 0: devices 0-2 online in three rounds, device 3 in the last
        panel.observe_online(600.0 * j, np.arange(4) if j == 2 else np.arange(3))
    out = panel.estimate(cohort, round_idx=0)
    assert out["ipw_days"].threshold == out["cohort_exact"].threshold == 0.2  # prior alone
    # ipw counts today's two earlier rounds: π̂ = 3/4 for devices 0-2, 1/4 for device 3
    assert out["ipw"].threshold == 0.3
    panel.observe_online(86400.0, np.arange(4))  # day 1: day 0's rounds now count for both
    cohort = Cohort(cohort.losses, cohort.weights, cohort.client_idx, 86400.0)
    out = panel.estimate(cohort, round_idx=1)
    # hour 0 of day 0: π̂ = 4/5 for devices 0-2, 2/5 for device 3 (weights 1, 1, 1, 2)
    assert out["ipw_days"].threshold == out["ipw"].threshold == 0.3


def test_panel_poststratifies_by_the_strata_it_is_given() -> None:
    cfg = EstimatorConfig(name="cohort_exact", shadow=("poststrat",))
    strata = np.array([0, 0, 0, 1, 1, 1])  # three devices per region in the population
    panel = EstimatorPanel(cfg, theta=0.5, num_devices=6, streams=Streams(0), strata=strata)
    # the cohort has three devices of region 0 (low losses) and one of region 1 (high)
    cohort = Cohort(np.array([0.1, 0.2, 0.3, 5.0]), np.ones(4), np.array([0, 1, 2, 3]), 0.0)
    out = panel.estimate(cohort, round_idx=0)
    assert out["cohort_exact"].threshold == 0.2  # weights 1/4 each: F(0.2) = 1/2
    # post-stratified: region 0's devices weigh 3/3 each, region 1's device 3/1: F(0.3) =
    # 3/6 reaches 1/2, so the quantile is 0.3
    assert out["poststrat"].threshold == 0.3


def test_panel_ipw_known_weights_by_the_rates_it_is_given() -> None:
    cfg = EstimatorConfig(name="cohort_exact", shadow=("ipw_known",))
    rates = _KnownRates(np.array([1.0, 1.0, 1.0, 1 / 3]))  # device 3 online a third of the time
    panel = EstimatorPanel(cfg, theta=0.5, num_devices=4, streams=Streams(0), known_rates=rates)
    cohort = Cohort(np.array([0.1, 0.2, 0.3, 5.0]), np.ones(4), np.arange(4), 0.0)
    out = panel.estimate(cohort, round_idx=0)
    # weights 1, 1, 1, 3: F(0.2) = 2/6 < 1/2 <= F(0.3) = 3/6
    assert out["cohort_exact"].threshold == 0.2 and out["ipw_known"].threshold == 0.3
    with pytest.raises(InputError, match="ipw_known"):
        EstimatorPanel(cfg, theta=0.5, num_devices=4, streams=Streams(0))


def test_secure_keep_sets_agree_where_the_weights_reach_the_level_exactly() -> None:
    # three weights of 1/3 reach level 2/3 at the second value, up to rounding: every
    # estimator must take the second value (the kernels' comparison slack), not the third
    cohort = Cohort(np.array([0.5, 1.0, 4.0]), np.full(3, 1 / 3), np.arange(3), 0.0)
    exact = CohortExact().estimate(cohort, 2 / 3, NO_NOISE).threshold
    assert exact == 1.0
    for est in (SecureBisection(0.0, 16.0, 1e-3), SecureMM(30, 1e-4)):
        threshold = est.estimate(cohort, 2 / 3, NO_NOISE).threshold
        assert _keep(cohort, threshold).tolist() == [False, True, True], est.name


def _decomposition_panel(draws: int, online: np.ndarray, n: int) -> EstimatorPanel:
    cfg = EstimatorConfig(name="cohort_exact", shadow=("secure_bisection", "tracking", "ipw"),
                          bias_every=1, decomposition_draws=draws)
    panel = EstimatorPanel(cfg, theta=0.5, num_devices=n, streams=Streams(3))
    panel.observe_online(0.0, online)
    return panel


def test_the_bias_decomposition_adds_up_to_the_bias() -> None:
    rng = np.random.default_rng(13)
    n = 300
    losses, weights = rng.gamma(2.0, 1.0, n), rng.integers(50, 300, n).astype(float)
    online = np.flatnonzero(losses > 1.0)  # who is online is correlated with the loss
    panel = _decomposition_panel(40, online, n)
    idx = np.sort(rng.choice(online, 12, replace=False))
    cohort = Cohort(losses[idx], weights[idx] / weights.mean(), idx, 0.0)
    cols = panel.bias_columns(0, cohort, panel.estimate(cohort, 0), (losses, weights))
    total = cols["sampling_bias"] + cols["availability_bias"] + cols["selection_bias"]
    assert np.allclose(total, cols["bias"], rtol=0, atol=1e-12)
    assert cols["mc_draws"] == 40
    # devices online here have losses above 1: availability pushes every cohort-based
    # estimate up; tracking filters with its carried η whatever the cohort (terms 0)
    by_name = dict(zip(cols["estimator"], cols["availability_bias"], strict=True))
    assert by_name.pop("tracking") == 0.0
    assert min(by_name.values()) > 0.3
    # the draws start from the state the round's estimate started from
    tracking = list(cols["estimator"]).index("tracking")
    assert cols["selection_bias"][tracking] == 0.0


@pytest.mark.slow
def test_the_sampling_term_matches_the_order_statistic_expectation() -> None:
    """i.i.d. unweighted losses: a random cohort of K of the N devices has the lower median
    at its ceil(K/2)-th order statistic, whose expectation over K-subsets is exact."""
    from math import comb

    rng = np.random.default_rng(14)
    n, k, draws = 120, 10, 3000
    losses = np.sort(rng.exponential(1.0, n))
    panel = _decomposition_panel(draws, np.arange(n), n)
    j = 5  # the lower quantile at level 1/2 of 10 values: the 5th smallest
    expected = sum(losses[i - 1] * comb(i - 1, j - 1) * comb(n - i, k - j)
                   for i in range(1, n + 1)) / comb(n, k)
    oracle = losses[n // 2 - 1]  # the population's lower median
    cohort = Cohort(losses[:k], np.ones(k), np.arange(k), 0.0)
    cols = panel.bias_columns(0, cohort, panel.estimate(cohort, 0), (losses, np.ones(n)))
    sampling = cols["sampling_bias"][0]  # cohort_exact's row
    spread = np.std([np.sort(rng.choice(losses, k, replace=False))[j - 1] for _ in range(2000)])
    assert sampling == pytest.approx(expected - oracle, abs=4 * spread / np.sqrt(draws))
