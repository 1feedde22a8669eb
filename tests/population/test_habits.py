"""The habits availability mode: every device follows its own profile exactly, and the
spreads and within-region correlations it is configured with come back out."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from simfl.errors import InputError
from simfl.population.availability import build_availability, from_csr, known_rates, populate
from simfl.population.devices import build_devices
from simfl.population.habits import (
    Z_STEP,
    calibrated_logits,
    draw_habits,
    habit_intervals,
    habit_prob,
    propensity,
)
from simfl.rng import Streams
from simfl.scenario import (
    DEFAULT_ONLINE_PROB_BY_HOUR,
    HabitsConfig,
    PopulationConfig,
    from_dict,
)

PROFILE = DEFAULT_ONLINE_PROB_BY_HOUR
DAY_S = 86400.0


def _population(n: int, cfg: HabitsConfig, seed: int = 0, covariate: np.ndarray | None = None):
    region = np.repeat(np.arange(3), n // 3 + 1)[:n]
    offsets = np.array([-5.0, 1.0, 8.0])[region] * 3600.0
    habits = draw_habits(cfg, PROFILE, 3600.0, region, covariate,
                         np.random.default_rng(seed))
    return region, offsets, habits


def test_calibrated_logits_keep_the_population_mean_at_the_profile() -> None:
    g = calibrated_logits(PROFILE, 1.5)
    z = np.random.default_rng(0).normal(0, 1.5, 400_000)
    for h in (0, 6, 15):
        assert abs(np.mean(1 / (1 + np.exp(-(g[h] + z)))) - PROFILE[h]) < 2e-3
    np.testing.assert_allclose(calibrated_logits(PROFILE, 0.0),
                               np.log(np.array(PROFILE) / (1 - np.array(PROFILE))))


@pytest.mark.slow
def test_every_device_is_online_with_its_own_probability_at_every_time() -> None:
    """Brute force: at 400 times over a week, the devices online in each propensity
    decile number what their own probabilities σ(g(u − φ_d) + z_d) sum to (z-scores of
    independent devices: mean 0, standard deviation 1), with long and short sessions."""
    cfg = HabitsConfig(propensity_logit_sd=1.2, phase_sd_h=2.0, session_log_sd=0.8)
    n = 6000
    region, offsets, habits = _population(n, cfg)
    availability = from_csr(*habit_intervals(offsets, habits, 7 * DAY_S,
                                             np.random.default_rng(1)), region, 3, 7 * DAY_S)
    rates = known_rates(PopulationConfig().availability, _devices(region, offsets), habits)
    assert rates is not None
    decile = np.minimum((stats.rankdata(propensity(habits)) - 1) * 10 // n, 9).astype(int)
    times = np.random.default_rng(2).uniform(0, 7 * DAY_S, 400)
    z = []
    idx = np.arange(n)
    for t in times:
        online = availability.is_online(idx, t)
        p = rates.online_prob(idx, t)
        for k in range(10):
            m = decile == k
            z.append((online[m].sum() - p[m].sum()) / np.sqrt((p[m] * (1 - p[m])).sum()))
    z = np.array(z)
    assert abs(z.mean()) < 0.1 and 0.9 < z.std() < 1.1
    assert np.abs(z).max() < 4.5


def _devices(region: np.ndarray, offsets: np.ndarray):
    from simfl.population.table import DeviceTable

    n = region.shape[0]
    ones = np.ones(n)
    return DeviceTable(np.arange(n), region.astype(np.int32), offsets, ones, ones, ones, ones,
                       ones, 0 * ones, ("a", "b", "c"))


def test_spreads_and_within_region_rank_correlation_are_recovered() -> None:
    n = 30_000
    covariate = np.random.default_rng(5).gamma(2.0, size=n)
    cfg = HabitsConfig(propensity_logit_sd=0.8, phase_sd_h=1.5, session_log_sd=0.5,
                       covariate_correlation=0.6, phase_correlation=-0.3)
    region, _, habits = _population(n, cfg, covariate=covariate)
    assert abs(habits.logit_shift.std() - 0.8) < 0.02
    assert np.all(np.isclose(habits.logit_shift / Z_STEP, np.round(habits.logit_shift / Z_STEP)))
    assert abs(habits.phase_s.std() / 3600.0 - 1.5) < 0.03
    assert abs(np.log(habits.session_mean_s).std() - 0.5) < 0.02
    assert abs(habits.session_mean_s.mean() / 3600.0 - 1) < 0.02
    share = propensity(habits)
    for r in range(3):
        m = region == r
        rho = stats.spearmanr(share[m], covariate[m]).statistic
        assert abs(rho - 0.6) < 0.03, rho
        rho_phase = stats.spearmanr(habits.phase_s[m], covariate[m]).statistic
        assert abs(rho_phase + 0.3) < 0.03, rho_phase
    # The devices' mean online share is the profile's mean (the calibration), up to the
    # rounding of z and the draw.
    assert abs(share.mean() - np.mean(PROFILE)) < 0.005


def test_without_a_covariate_correlation_the_habits_ignore_the_data() -> None:
    n = 30_000
    covariate = np.arange(n, dtype=float)
    _, _, habits = _population(n, HabitsConfig(), covariate=covariate)
    assert abs(stats.spearmanr(habits.logit_shift, covariate).statistic) < 0.02


def test_habit_prob_is_the_profile_when_nothing_varies() -> None:
    u = np.linspace(0, 2 * DAY_S, 1000)
    np.testing.assert_allclose(habit_prob(calibrated_logits(PROFILE, 0.0), np.zeros(1), u),
                               np.interp(np.mod(u, DAY_S), np.arange(25) * 3600.0,
                                         (*PROFILE, PROFILE[0])), atol=0.02)


def test_habits_mode_builds_from_the_scenario_and_is_reproducible() -> None:
    cfg = from_dict({"population": {"regions": [{"name": "a", "utc_offset_h": 2.0}],
                                    "availability": {"mode": "habits", "horizon_s": 86400.0}}}
                    ).population
    devices = build_devices(cfg, 500, None, Streams(0))
    habits = draw_habits(cfg.availability.habits, PROFILE, 3600.0, devices.region_idx, None,
                         Streams(3).numpy("population.habits"))
    a = populate(cfg.availability, devices, Streams(3))  # the habits mode's own draw
    b = build_availability(cfg.availability, devices, Streams(3))
    assert a.habits is not None
    np.testing.assert_array_equal(a.habits.logit_shift, habits.logit_shift)
    for x, y in zip(a.availability.intervals(), b.intervals(), strict=True):
        np.testing.assert_array_equal(x, y)


def test_habit_keys_outside_the_habits_mode_are_refused() -> None:
    with pytest.raises(InputError, match="habits.covariate_correlation"):
        from_dict({"population": {"availability": {
            "mode": "diurnal", "habits": {"covariate_correlation": 0.5}}}})
    with pytest.raises(InputError, match="covariate_correlation"):
        from_dict({"population": {"availability": {
            "mode": "habits", "habits": {"covariate_correlation": 1.5}}}})
