"""trace stats' weekday and weekend shares (by hand), and ``trace stats`` / ``trace fit``
of a scenario: only its devices' count taken from the data (none loaded), the same
draws as a run's, an assumed or given count said so."""

from __future__ import annotations

import argparse
import math
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

import simfl.data
import simfl.data.femnist
from simfl.cli import main
from simfl.cli.trace_stats import ASSUMED_NUM_DEVICES, _scenario_population
from simfl.population.trace import write_trace
from simfl.population.trace_stats import availability_stats
from simfl.runs.memory import population_only
from simfl.runs.run import scenario_population
from simfl.scenario import load_scenario
from tests.data.test_femnist import fixture_arrays, write_npz

ROOT = Path(__file__).parents[2]
DAY, HOUR = 86400.0, 3600.0
# Two weeks from Monday 00:00 UTC. Device 0 (UTC): all of Saturday (day 5) and Monday
# 00:00-12:00 of the second week. Device 1 (UTC+12): Saturday local, [4.5 d, 5.5 d)
# UTC, and [0, 12 h) UTC, Monday 12:00-24:00 local. Device 2 (UTC-5): [0, 1 h) UTC,
# Sunday 19:00-20:00 local (the day before the window opens, locally).
DEVICE = np.array([0, 0, 1, 1, 2])
T_ON = np.array([5 * DAY, 7 * DAY, 0.0, 4.5 * DAY, 0.0])
T_OFF = np.array([6 * DAY, 7 * DAY + 12 * HOUR, 12 * HOUR, 5.5 * DAY, HOUR])
OFFSETS = np.array([0.0, 12 * HOUR, -5 * HOUR])


def test_weekday_and_weekend_shares_by_hand() -> None:
    """Local days: every device sees 4 weekend days of the 14 (12 d in all, 30 d of
    weekdays); online on weekends 1 d + 1 d + 1 h = 49 h, on weekdays 12 h + 12 h."""
    local = availability_stats(DEVICE, T_ON, T_OFF, 3, 14 * DAY, OFFSETS)
    assert local.weekend_share == pytest.approx(49 / 288)
    assert local.weekday_share == pytest.approx(24 / 720)
    assert local.weekend_ratio == pytest.approx(49 / 288 * 30)
    # UTC days: device 1's Saturday is half Friday, device 2's hour a Monday's
    utc = availability_stats(DEVICE, T_ON, T_OFF, 3, 14 * DAY)
    assert utc.weekend_share == pytest.approx(36 / 288)
    assert utc.weekday_share == pytest.approx(37 / 720)
    # a window of Monday to Wednesday holds no weekend (a device at UTC-5 one of 5 h)
    short = availability_stats(DEVICE, T_ON, T_OFF, 3, 3 * DAY)
    assert math.isnan(short.weekend_share) and math.isnan(short.weekend_ratio)
    assert short.weekday_share == pytest.approx((12 + 1) * HOUR / (9 * DAY))
    west = availability_stats(DEVICE, T_ON, T_OFF, 3, 3 * DAY, OFFSETS)
    assert west.weekend_share == pytest.approx(HOUR / (5 * HOUR))


def test_the_stats_command_prints_them(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.csv"
    write_trace(path, DEVICE, T_ON, T_OFF)
    assert main(["trace", "stats", str(path)]) == 0
    line = capsys.readouterr().out.splitlines()[6]
    window = 7 * DAY + 12 * HOUR  # up to the last switch: 2 weekend days a device
    expected = (37 * HOUR / (3 * window - 6 * DAY), 36 / 144)
    assert line.startswith(f"online share on weekdays {expected[0]:.3f}, on weekends "
                           f"{expected[1]:.3f} (weekend / weekday "
                           f"{expected[1] / expected[0]:.3f}); "
                           "days UTC")


def _never(*args: object, **kwargs: object) -> None:
    raise AssertionError("the data set was loaded")


def _no_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simfl.data, "load_data", _never)
    monkeypatch.setattr(simfl.data.femnist, "load_femnist", _never)


def test_a_femnist_scenario_without_its_data_assumes_a_count_and_says_so(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: the whole data set was loaded (18 s, 3.6 GB) and, without SIMFL_DATA_DIR,
    the command failed."""
    monkeypatch.delenv("SIMFL_DATA_DIR", raising=False)
    _no_loading(monkeypatch)
    scenario = str(ROOT / "scenarios" / "diurnal_emnist.toml")
    start = time.monotonic()
    assert main(["trace", "stats", scenario]) == 0
    assert time.monotonic() - start < 10
    head = capsys.readouterr().out.splitlines()[0]
    assert head.startswith(f"{scenario}: {ASSUMED_NUM_DEVICES} devices (assumed: the data "
                           "is not at hand to count its training clients (FEMNIST file not "
                           "found: SIMFL_DATA_DIR is not set); --num-devices N sets the "
                           "number) over simulated [0, 240.0 h)")
    assert main(["trace", "stats", scenario, "--num-devices", "300"]) == 0
    assert capsys.readouterr().out.startswith(
        f"{scenario}: 300 devices (from --num-devices, not counted in the data) over")
    assert main(["trace", "stats", scenario, "--set",
                 'population.region_assignment="covariate"']) == 2  # needs the data
    assert "SIMFL_DATA_DIR is not set" in capsys.readouterr().err


def femnist_scenario(tmp_path: Path, extra: str = "") -> Path:
    """40 writers of 3 to 6 samples in a FEMNIST file; writers of >= 4 kept, half trained."""
    writers = {f"w{i:02d}": (3 + i % 4, 200) for i in range(40)}
    npz = write_npz(tmp_path / "f.npz", **fixture_arrays(writers))
    path = tmp_path / "s.toml"
    path.write_text(f'seed = 3\n[data]\ndataset = "femnist"\npath = "{npz}"\n'
                    "min_samples_per_client = 4\ntest_client_fraction = 0.5\n"
                    '[population.availability]\nmode = "habits"\nhorizon_s = 345600.0\n'
                    + extra)
    return path


@pytest.mark.parametrize("extra", ["", "[population.availability.habits]\n"
                                       "propensity_logit_sd = 1.5\nphase_sd_h = 2.0\n"])
def test_the_population_is_a_runs_without_loading_the_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: str) -> None:
    """The training devices counted from the writer column alone (30 writers kept, 15
    trained), their regions and availability drawn exactly as a run draws them."""
    path = femnist_scenario(tmp_path, extra)
    with population_only():
        run = scenario_population(load_scenario(path, []))
    _no_loading(monkeypatch)
    built = _scenario_population(argparse.Namespace(source=path, set=[], num_devices=None))
    assert built is not None and built.count_note == "" and built.seed == 3
    devices = built.population.devices
    assert devices.num_devices == run.devices.num_devices == 15
    np.testing.assert_array_equal(devices.region_idx, run.devices.region_idx)
    for ours, theirs in zip(built.population.availability.intervals(),
                            run.availability.intervals(), strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_a_covariate_correlation_loads_the_data(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = femnist_scenario(tmp_path, "[population.availability.habits]\n"
                                      "covariate_correlation = 0.5\n")
    _no_loading(monkeypatch)
    with pytest.raises(AssertionError, match="the data set was loaded"):
        _scenario_population(argparse.Namespace(source=path, set=[], num_devices=None))


def test_trace_fit_appends_its_check_as_comments(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A scenario's draws: the tables still load, the check follows as comments and no
    statistic is off. A trace of everyone online 09:00-10:00: warnings, on stderr too."""
    scenario = str(ROOT / "scenarios" / "quick_synthetic.toml")
    out = tmp_path / "fit.toml"
    assert main(["trace", "fit", scenario, "--set", 'population.availability.mode="habits"',
                 "--set", "population.availability.horizon_s=1209600", "--out",
                 str(out)]) == 0
    printed, err = capsys.readouterr()
    assert out.read_text() == printed
    assert tomllib.loads(printed)["population"]["availability"]["mode"] == "habits"
    comments = [line for line in printed.splitlines() if line.startswith("# ")]
    assert comments[1].startswith("# observed against the fitted model simulated (100 "
                                  "devices over 14 days; stream 'fit.check')")
    assert comments[-1] == "# no statistic is off" and err == ""
    nine = tmp_path / "nine.csv"
    days = np.arange(14)
    write_trace(nine, np.repeat(np.arange(50), 14), np.tile(days * DAY + 9 * HOUR, 50),
                np.tile(days * DAY + 10 * HOUR, 50))
    assert main(["trace", "fit", str(nine)]) == 0
    printed, err = capsys.readouterr()
    warned = [line for line in err.splitlines()]
    assert warned and all(line.startswith("simfl: trace fit: warning: the fitted model's ")
                          for line in warned)
    assert [line[2:] for line in printed.splitlines() if line.startswith("# warning: ")] \
        == [line.removeprefix("simfl: trace fit: ") for line in warned]


def test_made_data_is_counted_by_making_it_and_its_refusals_stand(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Synthetic data needs no file: without SIMFL_DATA_DIR it is made (its 100 training
    clients counted), and the memory guard's refusal is not taken for missing data."""
    monkeypatch.delenv("SIMFL_DATA_DIR", raising=False)
    scenario = str(ROOT / "scenarios" / "quick_synthetic.toml")
    assert main(["trace", "stats", scenario]) == 0
    assert capsys.readouterr().out.startswith(f"{scenario}: 100 devices over")
    monkeypatch.setenv("SIMFL_MEMORY_LIMIT_BYTES", "1")
    assert main(["trace", "stats", scenario]) == 2
    assert "building the population would take" in capsys.readouterr().err
