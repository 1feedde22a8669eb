"""Fitting the habits model to online intervals: the shares and sessions it reads, and the
parameters it recovers from a population drawn with known ones."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

from simfl.errors import InputError
from simfl.population.availability import from_csr, from_intervals
from simfl.population.fit import (
    device_sessions,
    fit_availability,
    fit_habits,
    fit_trace,
    local_hours,
    session_moments,
    to_toml,
)
from simfl.population.habits import draw_habits, habit_intervals
from simfl.population.trace import write_trace
from simfl.scenario import DEFAULT_ONLINE_PROB_BY_HOUR, HabitsConfig, from_dict

PROFILE = DEFAULT_ONLINE_PROB_BY_HOUR
DAY_S = 86400.0
HOUR_S = 3600.0


def _simulate(cfg: HabitsConfig, seed: int, n: int = 3000, days: int = 14):
    """n devices in 3 regions (UTC −5, +1, +8) with ``cfg``'s habits, 1 h sessions:
    (device, t_on_s, t_off_s), offsets, habits, CSR offsets."""
    region = np.arange(n) % 3
    offsets = np.array([-5.0, 1.0, 8.0])[region] * HOUR_S
    habits = draw_habits(cfg, PROFILE, 3600.0, region, None, np.random.default_rng(seed))
    csr, t_on, t_off = habit_intervals(offsets, habits, days * DAY_S,
                                       np.random.default_rng(seed + 1000))
    device = np.repeat(np.arange(n), np.diff(csr))
    return (device, t_on, t_off), offsets, habits, csr


def test_hand_written_intervals_give_their_shares_and_session_means() -> None:
    """Three devices over 3 days. Device 0 (UTC): [0, 30 min) (cut by the window's
    start), 10:00–12:00 on day 0, 10:00–11:00 on day 1, and 23:50 on day 2 to past the
    end (600 s inside, cut): online 13,200 s of 259,200. Device 1 (UTC+2): 15 minutes
    from 03:00 local. Device 2: never online."""
    device = np.array([0, 0, 0, 0, 1])
    t_on = np.array([0.0, 10 * HOUR_S, DAY_S + 10 * HOUR_S, 3 * DAY_S - 600, HOUR_S])
    t_off = np.array([1800.0, 12 * HOUR_S, DAY_S + 11 * HOUR_S, 3 * DAY_S + 5000,
                      HOUR_S + 900])
    offsets = np.array([0.0, 2 * HOUR_S, 0.0])
    hours = local_hours(device, t_on, t_off, offsets, 3 * DAY_S)
    share = hours.hourly_share()  # hours centred on h:00, each seen 3 times
    np.testing.assert_allclose(share.mean(axis=1), [13200 / (3 * DAY_S), 900 / (3 * DAY_S), 0])
    expected = np.zeros(24)
    expected[[0, 10, 11, 12]] = np.array([1800 + 600, 1800 + 1800, 3600 + 1800, 1800]) / (
        3 * HOUR_S)
    np.testing.assert_allclose(share[0], expected, atol=1e-12)
    assert share[1, 3] == pytest.approx(900 / (3 * HOUR_S))
    # Device 0's whole local days (23:30 to 23:30) are days 1 and 2: 3600 s, then none.
    assert hours.daily_share_variance()[0] == pytest.approx(np.var([1 / 24, 0.0], ddof=1))
    sessions = device_sessions(device, t_on, t_off, 3, 3 * DAY_S)
    np.testing.assert_array_equal(sessions.count, [2, 1, 0])
    np.testing.assert_allclose(sessions.mean_s[:2], [5400.0, 900.0])
    assert np.isnan(sessions.mean_s[2])
    # Only device 0 has two whole sessions: mean 5400 s, no spread to speak of.
    assert session_moments(sessions) == (5400.0, 0.0, 2)


def test_parameters_are_recovered_from_a_simulated_population() -> None:
    """3,000 devices in 3 regions over 14 days, propensity_logit_sd 0.8, phase_sd_h 1.5,
    session_log_sd 0.5, session_mean_s 3600. Over 10 draws (seeds 0–9) the fit gave
    (mean ± sd; truth of the drawn devices in brackets): logit sd 0.809 ± 0.010 (0.802),
    phase 1.514 ± 0.025 h (1.502), log sd 0.493 ± 0.008 (0.499), session mean
    3610 ± 51 s (3609, the devices' own mean), profile's largest error 0.006 ± 0.002
    (largest 0.009). Tolerances, about 4 standard deviations of the fit around the
    configured values: 0.04, 0.1 h, 0.04, 5 % and 0.02."""
    intervals, offsets, _, _ = _simulate(
        HabitsConfig(propensity_logit_sd=0.8, phase_sd_h=1.5, session_log_sd=0.5), seed=11)
    fitted = fit_habits(*intervals, offsets, 14 * DAY_S)
    assert abs(fitted.propensity_logit_sd - 0.8) < 0.04, fitted
    assert abs(fitted.phase_sd_h - 1.5) < 0.1, fitted
    assert abs(fitted.session_log_sd - 0.5) < 0.04, fitted
    assert abs(fitted.session_mean_s / 3600.0 - 1) < 0.05, fitted
    assert np.max(np.abs(np.array(fitted.online_prob_by_hour) - PROFILE)) < 0.02, fitted
    assert (fitted.num_devices, fitted.num_days) == (3000, 14.0)


def test_no_spread_is_fitted_where_there_is_none() -> None:
    """All spreads 0 (the diurnal model): over seeds 0–9 the fit gave logit sd
    0.031 ± 0.014 (largest 0.046), phase 0.09 ± 0.12 h (largest 0.27: the floor at 0
    of a noisy variance), log sd 0.008 ± 0.008 (largest 0.022), session mean
    3601 ± 11 s, profile's largest error 0.004 ± 0.001. Tolerances: 0.1, 0.5 h, 0.06,
    2 % and 0.015."""
    intervals, offsets, _, _ = _simulate(
        HabitsConfig(propensity_logit_sd=0.0, phase_sd_h=0.0, session_log_sd=0.0), seed=12)
    fitted = fit_habits(*intervals, offsets, 14 * DAY_S)
    assert fitted.propensity_logit_sd < 0.1, fitted
    assert fitted.phase_sd_h < 0.5, fitted
    assert fitted.session_log_sd < 0.06, fitted
    assert abs(fitted.session_mean_s / 3600.0 - 1) < 0.02, fitted
    assert np.max(np.abs(np.array(fitted.online_prob_by_hour) - PROFILE)) < 0.015, fitted


def test_population_share_is_the_online_share_by_local_hour() -> None:
    """The reported population profile against a direct count: every device looked up
    every 10 minutes of the window, each look binned by its local hour (centred on
    h:00). The two differ only by sampling the hour at 6 points (measured 0.0005):
    < 0.002."""
    n, days = 1500, 7
    intervals, offsets, _, csr = _simulate(HabitsConfig(phase_sd_h=2.0), seed=3, n=n,
                                           days=days)
    fitted = fit_habits(*intervals, offsets, days * DAY_S)
    availability = from_csr(csr, intervals[1], intervals[2], np.zeros(n, dtype=np.int64), 1,
                            days * DAY_S)
    t = np.arange(300.0, days * DAY_S, 600.0)
    online = availability.is_online(np.arange(n)[:, None], t[None, :])
    hour = np.floor(np.mod(t[None, :] + offsets[:, None] + 1800.0, DAY_S) / HOUR_S)
    hour = np.broadcast_to(hour, online.shape).astype(int).ravel()
    direct = np.bincount(hour, weights=online.ravel(), minlength=24) / np.bincount(
        hour, minlength=24)
    np.testing.assert_allclose(fitted.population_share_by_hour, direct, atol=0.002)
    # With a 2 h phase spread the population's profile is flatter than the region's;
    # the fitted region profile is deconvolved back towards it.
    population, region = np.ptp(fitted.population_share_by_hour), np.ptp(
        fitted.online_prob_by_hour)
    assert population < np.ptp(PROFILE) - 0.02 and abs(region - np.ptp(PROFILE)) < 0.03


def test_the_fit_renders_as_a_scenario_that_loads(tmp_path) -> None:
    intervals, offsets, _, _ = _simulate(HabitsConfig(), seed=4, n=600, days=4)
    fitted = fit_habits(*intervals, offsets, 4 * DAY_S)
    text = to_toml(fitted)
    scenario = from_dict(tomllib.loads(text), "fit.toml")
    availability = scenario.population.availability
    assert availability.mode == "habits"
    np.testing.assert_allclose(availability.online_prob_by_hour, fitted.online_prob_by_hour,
                               atol=5e-5)
    assert availability.session_mean_s == pytest.approx(fitted.session_mean_s, abs=0.05)
    for name in ("propensity_logit_sd", "phase_sd_h", "session_log_sd"):
        assert getattr(availability.habits, name) == pytest.approx(getattr(fitted, name),
                                                                   abs=5e-5)


def test_a_plain_trace_is_fitted_in_utc(tmp_path) -> None:
    """A trace file has no offsets: local time is UTC and the window is the whole days
    up to the last start; the fit equals fit_habits with zero offsets."""
    (device, t_on, t_off), _, _, _ = _simulate(HabitsConfig(), seed=5, n=300, days=4)
    path = tmp_path / "trace.parquet"
    write_trace(path, device, t_on, t_off)
    fitted = fit_trace(path)
    assert fitted == fit_habits(device, t_on, t_off, np.zeros(300), 4 * DAY_S)
    assert fitted.num_days == 4.0 and math.isfinite(fitted.session_mean_s)
    # The same intervals replayed as a scenario's trace (no horizon), at UTC offsets.
    replayed = from_intervals(device, t_on, t_off, np.zeros(300, dtype=np.int64), 1)
    assert fit_availability(replayed, np.zeros(300)) == fitted


def test_a_window_shorter_than_three_days_is_refused() -> None:
    with pytest.raises(InputError, match="at least 3 days"):
        fit_habits(np.array([0]), np.array([10.0]), np.array([20.0]), np.zeros(1), 2 * DAY_S)


def test_trace_fit_command_on_a_scenario_and_on_its_trace(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    """``trace fit`` prints (and with --out writes) tables a scenario loads, from a
    scenario's draws and from the trace of those draws; a bad source is exit 2."""
    from simfl.cli import main

    scenario = Path(__file__).parents[2] / "scenarios" / "quick_synthetic.toml"
    habits = ["--set", 'population.availability.mode="habits"']
    out = tmp_path / "fit.toml"
    assert main(["trace", "fit", str(scenario), *habits, "--out", str(out)]) == 0
    fitted = tomllib.loads(out.read_text())
    assert fitted["population"]["availability"]["mode"] == "habits"
    from_dict(fitted)
    assert "propensity_logit_sd" in capsys.readouterr().out
    trace = tmp_path / "t.parquet"
    assert main(["trace", str(scenario), *habits, "--out", str(trace)]) == 0
    assert main(["trace", "fit", str(trace)]) == 0
    assert main(["trace", "fit", str(trace), "--out", str(out)]) == 2  # exists
    assert main(["trace", "fit", str(tmp_path / "none.parquet")]) == 2
