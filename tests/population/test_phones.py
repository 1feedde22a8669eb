"""The heavy-tailed components of the habits mode (device classes, weekly rhythm, bursts,
charging windows): each device's online probability stays exactly the one HabitRates
states, the components do what their keys say, and the interval algebra is exact."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from simfl.errors import InputError
from simfl.population.availability import check_diurnal_work, from_csr
from simfl.population.habits import (
    HabitRates,
    calibrated_logits,
    draw_habits,
    habit_intervals,
    propensity,
)
from simfl.population.overlays import burst_intervals, charging_intervals, combine
from simfl.scenario import DEFAULT_ONLINE_PROB_BY_HOUR, AvailabilityConfig, HabitsConfig, from_dict

PROFILE = DEFAULT_ONLINE_PROB_BY_HOUR
DAY_S = 86400.0
PHONES = HabitsConfig(propensity_logit_sd=0.8, class_shares=(0.1, 0.5, 0.4),
                      class_logit_means=(3.0, 0.0, -2.0), weekend_logit_shift=(0.6, -0.6, 0.0),
                      dormant_mean_h=30.0, engaged_share=0.4, charge_prob=0.5,
                      charge_start_h=22.5, charge_start_sd_h=1.5, charge_hours=6.0)


def _population(n: int, cfg: HabitsConfig, seed: int = 0,
                covariate: np.ndarray | None = None):
    region = np.repeat(np.arange(3), n // 3 + 1)[:n]
    offsets = np.array([-5.0, 1.0, 8.0])[region] * 3600.0
    habits = draw_habits(cfg, PROFILE, 3600.0, region, covariate, np.random.default_rng(seed))
    return region, offsets, habits


def _csr(per_device: list[list[tuple[float, float]]]):
    counts = [len(d) for d in per_device]
    flat = [iv for d in per_device for iv in d]
    return (np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            np.array([a for a, _ in flat], dtype=float),
            np.array([b for _, b in flat], dtype=float))


def test_combine_on_hand_written_intervals() -> None:
    a = _csr([[(0, 2), (5, 8)], [(1, 3)], []])
    b = _csr([[(1, 6)], [(3, 4)], [(0, 1)]])
    offsets, on, off = combine(a, b, need=2)
    assert offsets.tolist() == [0, 2, 2, 2]
    assert list(zip(on, off, strict=True)) == [(1, 2), (5, 6)]
    offsets, on, off = combine(a, b, need=1)  # device 1's [1, 3) and [3, 4) joined
    assert offsets.tolist() == [0, 1, 2, 3]
    assert list(zip(on, off, strict=True)) == [(0, 8), (1, 4), (0, 1)]


def test_combine_equals_a_dense_grid() -> None:
    rng = np.random.default_rng(0)
    n, grid = 40, np.arange(0, 100, 0.25) + 0.125

    def random_set():
        rows = []
        for _ in range(n):
            cuts = np.sort(rng.choice(np.arange(0, 101), size=2 * rng.integers(0, 6),
                                      replace=False)).astype(float)
            rows.append(list(zip(cuts[::2], cuts[1::2], strict=True)))
        return _csr(rows)

    def dense(s):
        out = np.zeros((n, grid.size), dtype=bool)
        for d in range(n):
            for a, b in zip(s[1][s[0][d]:s[0][d + 1]], s[2][s[0][d]:s[0][d + 1]], strict=True):
                out[d] |= (grid >= a) & (grid < b)
        return out

    for _ in range(20):
        a, b = random_set(), random_set()
        np.testing.assert_array_equal(dense(combine(a, b, 2)), dense(a) & dense(b))
        union = combine(a, b, 1)
        np.testing.assert_array_equal(dense(union), dense(a) | dense(b))
        same = np.diff(np.repeat(np.arange(n), np.diff(union[0]))) == 0
        assert np.all(union[1][1:][same] > union[2][:-1][same])  # disjoint, none touching


@pytest.mark.slow
def test_every_device_keeps_its_stated_probability_with_every_component() -> None:
    """z-scores of the number online (by propensity decile, at random times of two weeks,
    over independent draws) against the sums of HabitRates' probabilities: mean 0, sd 1."""
    n = 3000
    region, offsets, habits = _population(n, PHONES)
    rates = HabitRates(offsets, habits)
    decile = np.minimum(stats.rankdata(propensity(habits)).astype(int) * 10 // (n + 1), 9)
    idx, z = np.arange(n), []
    for seed in range(6):
        availability = from_csr(*habit_intervals(offsets, habits, 14 * DAY_S,
                                                 np.random.default_rng(10 + seed)),
                                region, 3, 14 * DAY_S)
        for t in np.random.default_rng(seed).uniform(0, 14 * DAY_S, 40):
            online, p = availability.is_online(idx, t), rates.online_prob(idx, t)
            for k in range(10):
                m = decile == k
                z.append((online[m].sum() - p[m].sum()) / np.sqrt((p[m] * (1 - p[m])).sum()))
    z = np.array(z)
    assert abs(z.mean()) < 0.12 and 0.85 < z.std() < 1.15, (z.mean(), z.std())


def test_propensity_is_each_devices_long_run_online_share() -> None:
    n, horizon = 600, 56 * DAY_S
    _, offsets, habits = _population(n, PHONES)
    offsets_, on, off = habit_intervals(offsets, habits, horizon, np.random.default_rng(4))
    online = np.bincount(np.repeat(np.arange(n), np.diff(offsets_)),
                         weights=np.minimum(off, horizon) - on, minlength=n) / horizon
    share = propensity(habits)
    assert abs(online.mean() - share.mean()) < 0.01
    assert stats.pearsonr(online, share).statistic > 0.9


def test_device_classes_draw_the_mixture_and_keep_the_rank_correlation() -> None:
    n = 30_000
    covariate = np.random.default_rng(5).gamma(2.0, size=n)
    cfg = HabitsConfig(propensity_logit_sd=0.3, class_shares=(0.2, 0.8),
                       class_logit_means=(4.0, -1.0), covariate_correlation=0.5)
    region, _, habits = _population(n, cfg, covariate=covariate)
    assert abs(np.mean(habits.logit_shift > 1.5) - 0.2) < 0.01
    assert abs(np.median(habits.logit_shift[habits.logit_shift > 1.5]) - 4.0) < 0.05
    for r in range(3):
        m = region == r
        assert abs(stats.spearmanr(habits.logit_shift[m], covariate[m]).statistic - 0.5) < 0.03
    # classes without spread: exactly the class means, in their shares
    discrete = draw_habits(HabitsConfig(propensity_logit_sd=0.0, class_shares=(0.3, 0.7),
                                        class_logit_means=(2.0, -1.0)), PROFILE, 3600.0,
                           region, None, np.random.default_rng(1))
    assert set(np.round(discrete.logit_shift, 6)) == {2.0, -1.0}
    assert abs(np.mean(discrete.logit_shift == 2.0) - 0.3) < 0.01


def test_calibration_over_the_mixture_keeps_the_population_mean_at_the_profile() -> None:
    g = calibrated_logits(PROFILE, 0.5, (0.25, 0.75), (2.0, -1.0))
    rng = np.random.default_rng(0)
    z = np.where(rng.random(400_000) < 0.25, 2.0, -1.0) + rng.normal(0, 0.5, 400_000)
    for h in (0, 9, 15):
        assert abs(np.mean(1 / (1 + np.exp(-(g[h] + z)))) - PROFILE[h]) < 2e-3


def test_weekend_shift_scales_the_weekend_odds() -> None:
    cfg = HabitsConfig(propensity_logit_sd=0.0, phase_sd_h=0.0, session_log_sd=0.0,
                       weekend_logit_shift=(1.0,))
    region = np.zeros(1, dtype=np.int64)
    habits = draw_habits(cfg, PROFILE, 3600.0, region, None, np.random.default_rng(0))
    rates = HabitRates(np.zeros(1), habits)
    g = calibrated_logits(PROFILE, 0.0)
    for day, shift in ((2, 0.0), (5, 1.0), (6, 1.0)):  # Wednesday, Saturday, Sunday at 15:00
        p = rates.online_prob(np.zeros(1, dtype=np.int64), day * DAY_S + 15 * 3600.0)
        assert p[0] == pytest.approx(1 / (1 + np.exp(-(g[15] + shift))))
    # Friday 23:30 is half-way up the ramp to Saturday's shift
    p = rates.online_prob(np.zeros(1, dtype=np.int64), 4 * DAY_S + 23.5 * 3600.0)
    mid = (g[23] + g[0]) / 2
    assert p[0] == pytest.approx(1 / (1 + np.exp(-(mid + 0.5))))


def test_burst_spells_are_engaged_their_share_with_the_stated_means() -> None:
    n, horizon = 4000, 400 * DAY_S
    engaged = np.full(n, 0.25)
    offsets, on, off = burst_intervals(engaged, 10 * 3600.0, horizon, np.random.default_rng(0))
    inside = (on > 0) & (off < horizon)
    assert np.mean(off[inside] - on[inside]) / 3600 == pytest.approx(10 / 3, rel=0.02)
    share = (np.minimum(off, horizon) - on).sum() / (n * horizon)
    assert share == pytest.approx(0.25, abs=0.005)
    always = burst_intervals(np.ones(3), 3600.0, horizon, np.random.default_rng(0))
    assert always[0].tolist() == [0, 1, 2, 3] and np.all(always[2] == np.inf)


def test_bursts_make_gaps_heavier_tailed_than_the_habits_alone() -> None:
    n, horizon = 600, 28 * DAY_S
    plain = HabitsConfig(propensity_logit_sd=0.0, phase_sd_h=0.0, session_log_sd=0.0)
    bursty = HabitsConfig(propensity_logit_sd=0.0, phase_sd_h=0.0, session_log_sd=0.0,
                          dormant_mean_h=48.0, engaged_share=0.4)

    def gap_cv(cfg: HabitsConfig) -> float:
        _, offsets, habits = _population(n, cfg)
        o, on, off = habit_intervals(offsets, habits, horizon, np.random.default_rng(1))
        same = np.diff(np.repeat(np.arange(n), np.diff(o))) == 0
        gaps = on[1:][same] - off[:-1][same]
        return float(gaps.std() / gaps.mean())

    assert gap_cv(bursty) > 1.5 * gap_cv(plain)


def test_charging_windows_open_at_each_devices_hour_with_the_stated_probability() -> None:
    n, horizon = 2000, 30 * DAY_S
    start_h = np.random.default_rng(0).uniform(0, 24, n)
    utc = np.random.default_rng(1).choice([-5.0, 1.0, 8.0], n) * 3600.0
    offsets, on, off = charging_intervals(utc, start_h, 6.0, 0.3, horizon,
                                          np.random.default_rng(2))
    dev = np.repeat(np.arange(n), np.diff(offsets))
    whole = (on > 0) & (off < horizon)
    assert np.allclose(off[whole] - on[whole], 6 * 3600.0)
    local_open_h = np.mod((on[whole] + utc[dev[whole]]) / 3600.0, 24)
    assert np.allclose(np.mod(local_open_h - start_h[dev[whole]] + 12, 24) - 12, 0, atol=1e-6)
    nights = whole.sum() / (n * (horizon / DAY_S - 1))
    assert nights == pytest.approx(0.3, abs=0.01)


def test_charging_hour_follows_the_covariate_within_regions() -> None:
    n = 30_000
    covariate = np.random.default_rng(5).gamma(2.0, size=n)
    cfg = HabitsConfig(charge_prob=0.4, charge_start_h=12.0, charge_start_sd_h=2.0,
                       charge_correlation=-0.4)
    region, _, habits = _population(n, cfg, covariate=covariate)
    assert abs(habits.charge_start_h.std() - 2.0) < 0.05
    for r in range(3):
        m = region == r
        rho = stats.spearmanr(habits.charge_start_h[m], covariate[m]).statistic
        assert abs(rho + 0.4) < 0.03


def test_the_default_habits_draw_the_same_as_without_the_components() -> None:
    _, offsets, habits = _population(300, HabitsConfig())
    assert not habits.weekly and np.all(habits.engaged == 1) and habits.charge_prob == 0
    assert np.all(np.isnan(habits.charge_start_h))


def test_component_keys_are_checked() -> None:
    with pytest.raises(InputError, match="class_logit_means' has 1 values"):
        from_dict({"population": {"availability": {"mode": "habits", "habits": {
            "class_shares": [0.5, 0.5]}}}})
    with pytest.raises(InputError, match="class_shares"):
        from_dict({"population": {"availability": {"mode": "habits", "habits": {
            "class_shares": [0.5, 0.6], "class_logit_means": [0.0, 1.0]}}}})
    with pytest.raises(InputError, match="weekend_logit_shift' has 2 values"):
        from_dict({"population": {"availability": {"mode": "habits", "habits": {
            "weekend_logit_shift": [0.5, 0.6]}}}})
    with pytest.raises(InputError, match="trace_mapping' has no meaning"):
        from_dict({"population": {"availability": {"mode": "habits",
                                                   "trace_mapping": "modulo"}}})
    with pytest.raises(InputError, match="dormant_mean_h"):
        from_dict({"population": {"availability": {"mode": "diurnal", "habits": {
            "dormant_mean_h": 5.0}}}})


def test_too_many_engaged_spells_are_refused_before_drawing() -> None:
    cfg = HabitsConfig(dormant_mean_h=0.001, engaged_share=0.5)
    region = np.zeros(10, dtype=np.int64)
    habits = draw_habits(cfg, PROFILE, 3600.0, region, None, np.random.default_rng(0))
    with pytest.raises(InputError, match="dormant_mean_h = 0.001.*engaged spells"):
        check_diurnal_work(AvailabilityConfig(mode="habits", habits=cfg), 10, habits)
