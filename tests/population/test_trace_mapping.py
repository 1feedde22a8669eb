"""Traces that fit any data set: trace devices mapped onto data devices (identity,
modulo, sample), coupled to the data covariate, the recorded client count and window,
and what a run reads from the trace (devices.parquet, the ipw_known oracle)."""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

import simfl.runs.build
from simfl.cli import main
from simfl.errors import InputError
from simfl.population.availability import known_rates, trace_availability
from simfl.population.devices import build_devices
from simfl.population.trace import TraceMetadata, trace_metadata, write_trace
from simfl.population.trace_formats import convert_trace
from simfl.population.trace_map import MappedTrace, TraceRates, check_trace_devices
from simfl.population.trace_stats import trace_file_stats
from simfl.rng import Streams
from simfl.scenario import AvailabilityConfig, PopulationConfig, Region

DAY, HOUR = 86400.0, 3600.0
REGIONS = (Region("west", -6.0, 1.0), Region("east", 5.0, 1.0))
# Four trace devices over a recorded window of two days: 0 has two whole sessions, 1 is
# online throughout (its session cut by both ends), 2 one session, 3 never online.
ROWS = ([0, 0, 1, 2], [HOUR, 10 * HOUR, 0.0, 10000.0], [2 * HOUR, 12 * HOUR, np.inf, 20000.0])
END = 2 * DAY
SHARE = np.array([3 * HOUR / END, 1.0, 10000.0 / END, 0.0])
SESSION = np.array([1.5 * HOUR, np.nan, 10000.0, np.nan])


def tiny_trace(folder: Path, num_clients: int | None = 4) -> Path:
    path = folder / "tiny.parquet"
    write_trace(path, *(np.array(r) for r in ROWS),
                metadata=TraceMetadata(num_clients, END if num_clients else None))
    return path


def replay(path: Path, n: int, mapping: str, rho: float = 0.0, seed: int = 0,
           covariate: np.ndarray | None = None, regions: tuple[Region, ...] = REGIONS
           ) -> MappedTrace:
    cfg = PopulationConfig(regions=regions, availability=AvailabilityConfig(
        mode="trace", trace_path=str(path), trace_mapping=mapping,  # type: ignore[arg-type]
        trace_covariate_correlation=rho))
    devices = build_devices(cfg, n, None, Streams(seed))
    availability, mapped = trace_availability(cfg.availability, devices, Streams(seed),
                                              covariate)
    assert np.array_equal(availability.offsets, mapped.offsets)
    return mapped


def intervals_of(mapped: MappedTrace, k: int) -> list[tuple[float, float]]:
    rows = slice(mapped.offsets[k], mapped.offsets[k + 1])
    return list(zip(mapped.t_on_s[rows].tolist(), mapped.t_off_s[rows].tolist(), strict=True))


TRACE_OF = {0: [(HOUR, 2 * HOUR), (10 * HOUR, 12 * HOUR)], 1: [(0.0, np.inf)],
            2: [(10000.0, 20000.0)], 3: []}


def test_identity_replays_device_k_as_device_k(tmp_path: Path) -> None:
    mapped = replay(tiny_trace(tmp_path), 4, "identity")
    assert mapped.trace_device.tolist() == [0, 1, 2, 3]
    assert [intervals_of(mapped, k) for k in range(4)] == [TRACE_OF[k] for k in range(4)]
    np.testing.assert_allclose(mapped.propensity, SHARE)
    np.testing.assert_allclose(mapped.session_mean_s, SESSION)
    assert mapped.num_never_online == 1


def test_modulo_replays_device_k_mod_the_trace(tmp_path: Path) -> None:
    mapped = replay(tiny_trace(tmp_path), 10, "modulo")
    assert mapped.trace_device.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert [intervals_of(mapped, k) for k in range(10)] == [TRACE_OF[k % 4] for k in range(10)]
    assert mapped.num_never_online == 2  # data devices 3 and 7
    assert mapped.warning() == (
        f"warning: {tmp_path / 'tiny.parquet'}: 2 of the 10 training devices are never "
        "online (their trace devices have no online interval; "
        "population.availability.trace_mapping = 'modulo')")


def test_sample_draws_distinct_trace_devices_from_its_stream(tmp_path: Path) -> None:
    mapped = replay(tiny_trace(tmp_path), 3, "sample", seed=5)
    expected = Streams(5).numpy("population.trace_map").choice(4, size=3, replace=False)
    assert mapped.trace_device.tolist() == expected.tolist()
    assert len(set(mapped.trace_device.tolist())) == 3
    assert [intervals_of(mapped, k) for k in range(3)] == [TRACE_OF[j] for j in expected]
    again = replay(tiny_trace(tmp_path), 3, "sample", seed=5)
    assert again.trace_device.tolist() == expected.tolist()  # reproducible


def test_without_a_recorded_count_a_trace_has_its_highest_index_plus_one(
        tmp_path: Path) -> None:
    path = tiny_trace(tmp_path, num_clients=None)  # device 3 has no row: 3 devices
    assert replay(path, 3, "identity").trace_device.tolist() == [0, 1, 2]
    with pytest.raises(InputError, match="the trace has 3 devices and the data 4 training"):
        replay(path, 4, "identity")


@pytest.mark.parametrize(("mapping", "n", "named"), [
    ("identity", 5, ["the trace has 4 devices and the data 5 training devices",
                     "trace_mapping = 'identity'", "'modulo'", "'sample'"]),
    ("identity", 3, ["the trace has 4 devices and the data 3 training devices"]),
    ("sample", 5, ["trace_mapping = 'sample'", "5 training devices", "the trace has 4",
                   "'modulo'"]),
])
def test_counts_that_do_not_fit_the_mapping_are_refused(
        tmp_path: Path, mapping: str, n: int, named: list[str]) -> None:
    cfg = AvailabilityConfig(mode="trace", trace_path=str(tiny_trace(tmp_path)),
                             trace_mapping=mapping)  # type: ignore[arg-type]
    with pytest.raises(InputError) as refused:
        check_trace_devices(cfg, n)
    message = str(refused.value)
    assert all(part in message for part in named) and "\n" not in message, message
    check_trace_devices(AvailabilityConfig(mode="trace", trace_path=cfg.trace_path,
                                           trace_mapping="modulo"), n)  # modulo fits any


SCENARIO = """
name = "traced"
seed = 1
[data]
dataset = "synthetic"
[data.synthetic]
num_clients = 40
[model]
l2 = 1e-4
[aggregator]
name = "deltafl"
[estimator]
shadow = ["ipw_known"]
[server]
num_rounds = 4
clients_per_round = 4
[eval]
every = 4
[population.availability]
mode = "trace"
trace_path = "{trace}"
trace_mapping = "{mapping}"
"""


def write_scenario(folder: Path, trace: Path, mapping: str) -> Path:
    path = folder / "traced.toml"
    path.write_text(SCENARIO.format(trace=trace, mapping=mapping))
    return path


def test_a_count_mismatch_is_exit_2_before_the_data_are_loaded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """40 synthetic clients, half of them training devices: 20 against the trace's 4,
    found from the keys before any data are made (loading them here would fail)."""
    def unreachable(*args: object) -> None:
        raise AssertionError("the data were loaded")

    monkeypatch.setattr(simfl.runs.build, "load_data", unreachable)
    trace, out = tiny_trace(tmp_path), tmp_path / "run"
    capsys.readouterr()
    start = time.monotonic()
    code = main([str(write_scenario(tmp_path, trace, "identity")), "--out", str(out),
                 "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - start < 10
    assert err.count("\n") == 1 and err.startswith("simfl: error: ")
    assert all(part in err for part in (
        str(trace), "the trace has 4 devices and the data 20 training devices",
        "'identity'", "'modulo'", "'sample'")), err
    assert not out.exists()


def test_a_run_maps_its_trace_records_it_and_weighs_by_its_rates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """modulo over 20 training devices: the 5 devices replaying trace device 3 are never
    online (one warning line); devices.parquet holds each device's share and mean
    session from the trace; ipw_known reads the trace's own rates."""
    trace, out = tiny_trace(tmp_path), tmp_path / "run"
    capsys.readouterr()
    assert main([str(write_scenario(tmp_path, trace, "modulo")), "--out", str(out),
                 "--quiet"]) == 0
    said = capsys.readouterr().out
    warnings = [line for line in said.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: {trace}: 5 of the 20 training devices are never online "
                        "(their trace devices have no online interval; "
                        "population.availability.trace_mapping = 'modulo')"]
    devices = pl.read_parquet(out / "devices.parquet").filter(pl.col("split") == "train")
    k = devices["client_idx"].to_numpy() % 4
    np.testing.assert_allclose(devices["propensity"].to_numpy(), SHARE[k])
    session = devices["session_mean_s"].to_numpy(allow_copy=True).astype(float)
    np.testing.assert_allclose(session, SESSION[k])  # null (NaN) where none is whole
    bias = pl.read_parquet(out / "bias.parquet").filter(pl.col("estimator") == "ipw_known")
    assert bias.height > 0 and bias["estimate"].is_finite().all()


def test_trace_rates_are_online_shares_by_local_hour(tmp_path: Path) -> None:
    """Device 0 (UTC+1 h) is online [0, 2 h) UTC: local hours 1 and 2, on the first of
    the window's two days; device 1 (UTC) [30 min, 90 min): half of hours 0 and 1."""
    mapped = MappedTrace("t", "identity", 2 * DAY, np.arange(2), np.zeros(2), np.zeros(2),
                         np.array([0, 1, 2]), np.array([0.0, 1800.0]),
                         np.array([2 * HOUR, 5400.0]))
    rates = TraceRates(mapped, np.array([HOUR, 0.0]))
    expected = np.zeros((2, 24))
    expected[0, [1, 2]] = 0.5  # one of the two days
    expected[1, [0, 1]] = 0.25  # half an hour of each, one day of two
    np.testing.assert_allclose(rates.by_hour, expected)
    np.testing.assert_allclose(rates.online_prob(np.array([0, 0, 1]), 1.5 * HOUR),
                               [0.5, 0.5, 0.25])  # local 02:30, 02:30, 01:30
    np.testing.assert_allclose(rates.online_prob(np.array([0]), DAY + 1.5 * HOUR), [0.5])


def test_known_rates_of_a_trace_are_its_empirical_rates(tmp_path: Path) -> None:
    """Brute force: the rate of each device and local hour is the share of a fine grid
    of the window's instants in that hour at which the device is online."""
    path = tiny_trace(tmp_path)
    cfg = PopulationConfig(regions=REGIONS, availability=AvailabilityConfig(
        mode="trace", trace_path=str(path), trace_mapping="modulo"))
    devices = build_devices(cfg, 8, None, Streams(0))
    availability, mapped = trace_availability(cfg.availability, devices, Streams(0))
    rates = known_rates(cfg.availability, devices, None, mapped)
    assert isinstance(rates, TraceRates)
    assert known_rates(cfg.availability, devices) is None  # no trace given
    grid = np.arange(0.0, END, 10.0) + 5.0  # every switch and offset is whole 10 s
    for d in range(8):
        online = availability.is_online(np.full(grid.size, d), grid)
        hour = (np.mod(grid + devices.utc_offset_s[d], DAY) // HOUR).astype(int)
        want = np.bincount(hour, weights=online, minlength=24) / np.bincount(hour, minlength=24)
        np.testing.assert_allclose(rates.by_hour[d], want, atol=1e-12)


def coupled_spearman(tmp_path: Path, rho: float, mapping: str, seed: int = 0,
                     n: int = 3000) -> np.ndarray:
    """Spearman correlation, within each of the regions, of each data device's trace
    online share with its covariate, over n devices replaying a trace of n devices with
    distinct online shares."""
    shares = (np.arange(n) + 1.0) / (n + 1)
    path = tmp_path / "shares.parquet"
    write_trace(path, np.arange(n), np.full(n, 60.0), 60.0 + shares * (DAY - 120.0),
                metadata=TraceMetadata(n, DAY))
    covariate = np.random.default_rng(seed + 100).standard_normal(n)
    regions = (*REGIONS, Region("north", 0.0, 1.0))
    mapped = replay(path, n, mapping, rho, seed, covariate, regions)
    region = build_devices(PopulationConfig(regions=regions), n, None, Streams(seed)).region_idx
    return np.array([stats.spearmanr(mapped.propensity[region == r], covariate[region == r])[0]
                     for r in range(3)])


@pytest.mark.parametrize(("rho", "mapping"), [(0.6, "sample"), (-0.4, "identity"),
                                              (0.3, "modulo")])
def test_the_coupling_recovers_its_rank_correlation(tmp_path: Path, rho: float,
                                                    mapping: str) -> None:
    """About 1000 devices a region: a Spearman correlation's standard error is below
    (1 − ρ²) / sqrt(1000) · 1.1 < 0.035; the mean over 3 regions within 0.06 is over
    3 of its standard errors."""
    within = coupled_spearman(tmp_path, rho, mapping)
    assert abs(within.mean() - rho) < 0.06, within
    assert np.all(np.abs(within - rho) < 0.12), within


def test_full_coupling_orders_the_shares_by_the_covariate(tmp_path: Path) -> None:
    np.testing.assert_allclose(coupled_spearman(tmp_path, 1.0, "sample", n=600), 1.0)
    np.testing.assert_allclose(coupled_spearman(tmp_path, -1.0, "identity", n=600), -1.0)


def test_no_coupling_leaves_the_mapping_and_no_correlation(tmp_path: Path) -> None:
    """ρ = 0: identity stays identity; sample's random pairing is uncorrelated with the
    covariate (mean within-region Spearman within 0.06, 3 standard errors of 1/sqrt(3000))."""
    within = coupled_spearman(tmp_path, 0.0, "sample")
    assert abs(within.mean()) < 0.06, within
    path = tmp_path / "shares.parquet"
    covariate = np.random.default_rng(0).standard_normal(3000)
    assert np.array_equal(replay(path, 3000, "identity", 0.0, 0, covariate).trace_device,
                          np.arange(3000))


def test_coupling_needs_a_covariate(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="trace_covariate_correlation = 0.5 needs"):
        replay(tiny_trace(tmp_path), 4, "identity", rho=0.5)


FEDSCALE = {  # client 7 is never online; the latest finish_time is 7200 s
    10: {"active": [0, 3600], "inactive": [1800, 5400], "finish_time": 7200},
    2: {"active": [600], "inactive": [1200], "finish_time": 3600},
    7: {"active": [], "inactive": [], "finish_time": 3600},
}


@pytest.mark.parametrize(("horizon", "end", "online"), [
    ([], 7200.0, 1800 + 1800 + 600),  # each client's span once
    (["--horizon-s", "14400"], 14400.0, 2 * 3600 + 4 * 600)])  # 2 and 4 periods
def test_convert_records_the_client_count_and_window_that_stats_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], horizon: list[str],
        end: float, online: float) -> None:
    source, out = tmp_path / "client_behave_trace", tmp_path / "converted.parquet"
    source.write_bytes(pickle.dumps(FEDSCALE))
    assert main(["trace", "convert", "--from-fedscale", str(source), "--out", str(out),
                 *horizon]) == 0
    assert trace_metadata(out) == TraceMetadata(3, end)
    stats_ = trace_file_stats(out)
    assert (stats_.num_devices, stats_.end_s) == (3, end)
    share = stats_.summary.filter(pl.col("statistic") == "device online share")
    assert share["count"].item() == 3
    assert share["mean"].item() == pytest.approx(online / end / 3)  # client 7's 0 counts
    capsys.readouterr()
    assert main(["trace", "stats", str(out)]) == 0
    assert capsys.readouterr().out.startswith(
        f"{out}: 3 devices over simulated [0, {end / 3600:.1f} h)")
    csv = tmp_path / "converted.csv"  # a CSV has no place for them: inferred
    assert main(["trace", "convert", "--from-fedscale", str(source), "--out", str(csv),
                 *horizon]) == 0
    assert trace_metadata(csv) == TraceMetadata()
    assert trace_file_stats(csv).num_devices == 2


def test_bad_recorded_metadata_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    pl.DataFrame({"client_idx": [0], "t_on_s": [0.0], "t_off_s": [1.0]}).write_parquet(
        path, metadata={"simfl.num_clients": "many"})
    with pytest.raises(InputError, match=r"bad.parquet: its metadata simfl.num_clients = "
                                         r"'many'.*must be a count >= 1"):
        trace_metadata(path)


def test_a_flash_trace_records_its_users_and_their_last_message(tmp_path: Path) -> None:
    """User "a" is ready 08:30-09:00 and last heard of at 10:00 of the first day (from
    midnight: 36,000 s); user "b" is invalid (one message) yet counts as a device."""
    lines = [("2020-01-02 08:00:00", "screen_lock"), ("2020-01-02 08:00:00", "wifi"),
             ("2020-01-02 08:30:00", "battery_charged_on"), ("2020-01-02 09:00:00", "4g"),
             ("2020-01-02 10:00:00", "screen_unlock")]
    source = tmp_path / "state_traces.json"
    source.write_text(json.dumps({
        "a": {"messages": "".join(f"{t}\t{s}\n" for t, s in lines)},
        "b": {"messages": "2020-01-02 08:00:00\tscreen_lock\n"}}))
    converted = convert_trace(source, "flash")
    assert converted.metadata == TraceMetadata(2, 10 * HOUR)
    shifted = convert_trace(source, "flash", start_s=DAY)
    assert shifted.metadata == TraceMetadata(2, DAY + 10 * HOUR)
