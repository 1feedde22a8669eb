"""Availability: diurnal marginals and sessions, exact queries, sampling, traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simfl.errors import InputError
from simfl.population.availability import (
    Availability,
    PastHorizon,
    always_online,
    build_availability,
    from_csr,
    from_intervals,
    sample_online,
)
from simfl.population.devices import build_devices
from simfl.population.diurnal import (
    DAY_S,
    HOUR_S,
    DayHazard,
    ProfileRates,
    diurnal_hazards,
    diurnal_intervals,
    online_prob,
)
from simfl.population.trace import read_trace, write_trace
from simfl.rng import Streams
from simfl.scenario import AvailabilityConfig, PopulationConfig, Region

PROFILE = tuple(0.1 + 0.5 * (1 + np.cos(2 * np.pi * (h - 2) / 24)) / 2 for h in range(24))
REGIONS = (Region("west", -6.0, 1.0), Region("east", 5.5, 1.0))


def diurnal(num_devices: int, session_mean_s: float = 1800.0, horizon_days: float = 4,
            seed: int = 0) -> tuple[Availability, np.ndarray]:
    cfg = PopulationConfig(regions=REGIONS, availability=AvailabilityConfig(
        mode="diurnal", online_prob_by_hour=PROFILE, session_mean_s=session_mean_s,
        horizon_s=horizon_days * DAY_S))
    devices = build_devices(cfg, num_devices, None, Streams(seed))
    return build_availability(cfg.availability, devices, Streams(seed)), devices.utc_offset_s


@pytest.fixture(scope="module")
def large() -> tuple[Availability, np.ndarray]:
    return diurnal(40_000)


def test_online_fraction_follows_local_hour(large: tuple[Availability, np.ndarray]) -> None:
    av, offset_s = large
    per_region = np.bincount(av.region_idx)
    times = DAY_S + np.arange(0, DAY_S, 1800.0)  # every half hour of the second day
    counts = av.num_online_by_region(times)
    for r, region in enumerate(REGIONS):
        p = online_prob(PROFILE, times + region.utc_offset_h * HOUR_S)
        frac = counts[:, r] / per_region[r]
        se = np.sqrt(p * (1 - p) / per_region[r])
        assert np.all(np.abs(frac - p) < 4.5 * se), (frac - p) / se


def test_profile_rates_are_each_devices_online_probability(
        large: tuple[Availability, np.ndarray]) -> None:
    """ipw_known's oracle: at each time, the devices it gives probability p are online
    in share p (within 4.5 standard errors), in every region."""
    av, offset_s = large
    rates = ProfileRates(offset_s, PROFILE)
    for t in DAY_S + np.array([0.0, 5.25, 13.5, 20.0]) * HOUR_S:
        online = av.is_online(np.arange(av.num_devices), np.full(av.num_devices, t))
        p = rates.online_prob(np.arange(av.num_devices), t)
        for value in np.unique(np.round(p, 12)):  # one value per region
            group = np.isclose(p, value)
            se = np.sqrt(value * (1 - value) / group.sum())
            assert abs(online[group].mean() - value) < 4.5 * se


def test_online_fraction_at_time_zero_and_late(large: tuple[Availability, np.ndarray]) -> None:
    av, offset_s = large
    for t in (0.0, 3.7 * DAY_S):
        p = online_prob(PROFILE, t + offset_s).mean()
        frac = av.num_online(t) / av.num_devices
        assert abs(frac - p) < 4.5 * np.sqrt(p * (1 - p) / av.num_devices)


def test_mean_session_length(large: tuple[Availability, np.ndarray]) -> None:
    av, _ = large
    _, t_on, t_off = av.intervals()
    # sessions that start inside the window (not cut at t = 0), far from the horizon
    keep = (t_on > 0) & (t_on < av.horizon_s - DAY_S)
    length = (t_off - t_on)[keep]
    se = length.std() / np.sqrt(length.size)
    assert abs(length.mean() - 1800.0) < 4 * se
    assert abs(length.std() - 1800.0) < 0.02 * 1800.0  # exponential: sd = mean


def test_steep_profile_keeps_marginal_exact() -> None:
    # Sessions of 6 h cannot follow a drop of 0.6 per hour: the off hazard is raised
    # there, and the online fraction still tracks the profile.
    steep = tuple([0.7] * 12 + [0.1] * 12)
    offset = np.zeros(30_000)
    offsets, t_on, t_off = diurnal_intervals(offset, steep, 6 * HOUR_S, 3 * DAY_S,
                                             np.random.default_rng(5))
    av = from_csr(offsets, t_on, t_off, np.zeros(30_000, dtype=np.int32), 1, 3 * DAY_S)
    for hour in (1.0, 11.5, 12.5, 13.0, 20.0):
        t = DAY_S + hour * HOUR_S
        p = float(online_prob(steep, np.array([t]))[0])
        assert abs(av.num_online(t) / 30_000 - p) < 4.5 * np.sqrt(p * (1 - p) / 30_000)


def brute_force(device: np.ndarray, t_on: np.ndarray, t_off: np.ndarray, d: int,
                t: float) -> tuple[bool, float]:
    mine = device == d
    inside = mine & (t_on <= t) & (t < t_off)
    return bool(inside.any()), float(t_off[inside][0]) if inside.any() else t


def test_queries_match_brute_force() -> None:
    av, _ = diurnal(60, session_mean_s=3 * HOUR_S, seed=2)
    device, t_on, t_off = av.intervals()
    rng = np.random.default_rng(0)
    d = rng.integers(0, 60, 3000)
    t = rng.uniform(0, av.horizon_s, 3000)
    t[:200] = t_on[rng.integers(0, t_on.size, 200)]  # exactly at switch times
    t[200:400] = np.minimum(t_off[rng.integers(0, t_off.size, 200)], av.horizon_s)
    online = av.is_online(d, t)
    until = av.online_until(d, t)
    for i in range(3000):
        want_online, want_until = brute_force(device, t_on, t_off, int(d[i]), float(t[i]))
        assert online[i] == want_online
        assert until[i] == want_until
    counts = av.num_online_by_region(t[:50])
    for i in range(50):
        on_now = av.is_online(np.arange(60), t[i])
        assert list(counts[i]) == list(np.bincount(av.region_idx[on_now], minlength=2))


def test_online_devices_at_increasing_and_earlier_times_match_brute_force() -> None:
    """online_devices advances each device's intervals between times asked in increasing
    order (a run's rounds, some 10 s apart, some hours), searches again after an earlier
    one, and always gives the devices online then."""
    av, _ = diurnal(300, session_mean_s=0.5 * HOUR_S, seed=4)
    device, t_on, t_off = av.intervals()
    rng = np.random.default_rng(1)
    times = np.concatenate([[0.0], np.sort(rng.uniform(0, av.horizon_s, 40)),
                            [t_on[5], t_on[5], t_off[9]],  # at switches, twice in a row
                            [DAY_S, 10.0, 10.0 + 600, 3 * DAY_S, 2 * DAY_S]])  # earlier ones
    for t in times:
        want = np.unique(device[(t_on <= t) & (t < t_off)])
        assert av.online_devices(t).tolist() == want.tolist(), t
        assert av.online_devices(t).tolist() == np.flatnonzero(
            av.is_online(np.arange(300), t)).tolist()


def test_query_past_horizon_raises() -> None:
    av, _ = diurnal(10, horizon_days=1)
    with pytest.raises(PastHorizon, match="population.availability.horizon_s"):
        av.is_online(0, DAY_S + 1)


def test_sample_online_returns_online_idle_distinct(
        large: tuple[Availability, np.ndarray]) -> None:
    av, _ = large
    rng = np.random.default_rng(1)
    busy = rng.random(av.num_devices) < 0.3
    for t in np.linspace(0, 3 * DAY_S, 20):
        chosen = sample_online(av, t, 100, rng, busy)
        assert chosen.size == 100 == np.unique(chosen).size
        assert av.is_online(chosen, t).all() and not busy[chosen].any()


def test_sample_online_when_few_are_eligible() -> None:
    region = np.zeros(1000, dtype=np.int32)
    device = np.array([3, 10, 500, 999])
    av = from_intervals(device, np.zeros(4), np.full(4, 10.0), region, 1)
    busy = np.zeros(1000, dtype=bool)
    busy[10] = True
    got = sample_online(av, 5.0, 100, np.random.default_rng(0), busy)
    assert sorted(got) == [3, 500, 999]
    assert sample_online(av, 20.0, 100, np.random.default_rng(0)).size == 0


def test_sample_online_is_uniform() -> None:
    av = always_online(np.zeros(50, dtype=np.int32), 1)
    busy = np.arange(50) % 5 == 0  # 40 eligible devices
    rng = np.random.default_rng(7)
    hits = np.zeros(50)
    for _ in range(2000):
        hits[sample_online(av, 1.0, 10, rng, busy)] += 1
    assert hits[busy].sum() == 0
    expected = 2000 * 10 / 40
    assert np.all(np.abs(hits[~busy] - expected) < 5 * np.sqrt(expected))


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_trace_round_trip(tmp_path: Path, suffix: str) -> None:
    av, _ = diurnal(200, seed=4)
    path = tmp_path / f"trace{suffix}"
    av.write_trace(path)
    cfg = PopulationConfig(regions=REGIONS, availability=AvailabilityConfig(
        mode="trace", trace_path=str(path)))
    devices = build_devices(cfg, 200, None, Streams(4))
    replay = build_availability(cfg.availability, devices, Streams(4))
    for got, want in zip(replay.intervals(), av.intervals(), strict=True):
        np.testing.assert_array_equal(got, want)
    t = np.linspace(0, av.horizon_s, 97)
    np.testing.assert_array_equal(replay.num_online_by_region(t), av.num_online_by_region(t))


def test_trace_rows_in_any_order(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    write_trace(path, np.array([1, 0, 1]), np.array([55.0, 0.0, 0.0]),
                np.array([60.0, np.inf, 50.0]))
    device, t_on, t_off = read_trace(path, 2)
    assert list(device) == [0, 1, 1] and list(t_on) == [0, 0, 55] and t_off[0] == np.inf


def test_touching_intervals_of_a_device_are_joined(tmp_path: Path) -> None:
    # [0, 100) then [100, 200): online throughout, so a task over [50, 150) finds the
    # device online and online_until says 200 (it said 100: the task was lost at 100)
    path = tmp_path / "t.csv"
    write_trace(path, np.array([0, 0, 1, 0]), np.array([0.0, 100.0, 5.0, 200.0]),
                np.array([100.0, 200.0, 10.0, 250.0]))
    device, t_on, t_off = read_trace(path, 2)
    assert (list(device), list(t_on), list(t_off)) == ([0, 1], [0, 5], [250, 10])
    av = from_intervals(device, t_on, t_off, np.zeros(2, np.int64), 1)
    assert av.online_until(0, 50.0) == 250.0 and av.online_until(1, 6.0) == 10.0


@pytest.mark.parametrize(("rows", "message"), [
    (([0, 0], [0.0, 5.0], [10.0, 20.0]), "overlapping"),
    (([0, 7], [0.0, 5.0], [10.0, 20.0]), "outside"),
    (([0], [5.0], [5.0]), "t_off_s > t_on_s"),
])
def test_bad_traces_are_rejected(tmp_path: Path, rows: tuple[list[int], list[float],
                                                               list[float]],
                                 message: str) -> None:
    path = tmp_path / "bad.parquet"
    write_trace(path, *(np.array(r) for r in rows))
    with pytest.raises(InputError, match=message):
        read_trace(path, 3)


def test_trace_missing_column_and_file(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("client_idx,t_on_s\n0,1.0\n")
    with pytest.raises(InputError, match="t_off_s"):
        read_trace(path, 3)
    path.write_text("device,t_on_s,t_off_s\n0,1.0,2.0\n")  # the column's former name
    with pytest.raises(InputError, match="rename 'device'"):
        read_trace(path, 3)
    with pytest.raises(InputError, match="not found"):
        read_trace(tmp_path / "none.csv", 3)


def test_always_mode_is_the_default() -> None:
    cfg = PopulationConfig()
    devices = build_devices(cfg, 100, None, Streams(0))
    av = build_availability(cfg.availability, devices, Streams(0))
    assert av.num_online(1e9) == 100
    assert np.all(av.online_until(np.arange(100), 5.0) == np.inf)


def test_diurnal_is_reproducible() -> None:
    a, _ = diurnal(300, seed=9)
    b, _ = diurnal(300, seed=9)
    for x, y in zip(a.intervals(), b.intervals(), strict=True):
        np.testing.assert_array_equal(x, y)


def test_day_hazard_inverse_is_exact() -> None:
    one = np.zeros(100_000, dtype=np.int64)
    for hazard in diurnal_hazards(PROFILE, 1800.0):
        local = np.random.default_rng(0).uniform(0, 9 * DAY_S, 100_000)
        h = hazard.at(local, one)
        assert np.all(np.diff(hazard.at(np.sort(local), one)) >= 0)
        np.testing.assert_allclose(hazard.inverse(h, one), local, rtol=0, atol=1e-6)


def test_day_hazard_classes_are_each_their_own_table() -> None:
    """Rows of a many-class table answer as the one-class tables they were built from."""
    rng = np.random.default_rng(1)
    tables = [diurnal_hazards(PROFILE, s) for s in (600.0, 1800.0, 7200.0)]
    rates = [np.diff(t[1].cumulative[0]) / 60.0 for t in tables]
    stacked = DayHazard.from_rates(tables[0][1].grid_s, np.stack(rates))
    cls = rng.integers(0, 3, 50_000)
    local = rng.uniform(0, 5 * DAY_S, 50_000)
    for c, (_, alone) in enumerate(tables):
        mine = cls == c
        zeros = np.zeros(mine.sum(), dtype=np.int64)
        np.testing.assert_allclose(stacked.at(local, cls)[mine], alone.at(local[mine], zeros),
                                   rtol=1e-12)
        h = alone.at(local[mine], zeros)
        np.testing.assert_allclose(stacked.inverse(h, cls[mine]), local[mine], atol=1e-6)
