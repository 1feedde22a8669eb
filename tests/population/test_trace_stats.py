"""Availability statistics: hand-checked on three devices; a trace and a model alike."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from simfl.cli import main
from simfl.errors import InputError
from simfl.population.trace import write_trace
from simfl.population.trace_stats import STATISTICS, availability_stats, trace_file_stats

QUICK = str(Path(__file__).parents[2] / "scenarios" / "quick_synthetic.toml")
DAY, HOUR = 86400.0, 3600.0
# device 0: 01:00-02:00 and 03:00-05:00 of day 0 (written as two touching intervals);
# device 1: 00:00-01:00 of day 0 (starts at 0: its length unseen), 02:00-03:00 of day 1;
# device 2: never online
DEVICE = np.array([0, 0, 0, 1, 1])
T_ON = np.array([HOUR, 3 * HOUR, 4 * HOUR, 0.0, DAY + 2 * HOUR])
T_OFF = np.array([2 * HOUR, 4 * HOUR, 5 * HOUR, HOUR, DAY + 3 * HOUR])


def summary(stats: object, name: str) -> dict[str, object]:
    frame = stats.summary  # type: ignore[attr-defined]
    return frame.row(STATISTICS.index(name), named=True)


def test_statistics_by_hand() -> None:
    stats = availability_stats(DEVICE, T_ON, T_OFF, 3, 2 * DAY)
    # 3 devices x 2 days x 3600 s of each hour; one device-hour online in hours 0..4
    shares = stats.hourly["online_share"].to_list()
    assert shares[:5] == pytest.approx([1 / 6] * 5) and shares[5:] == [0.0] * 19
    share = summary(stats, "device online share")
    assert share["count"] == 3 and share["q50"] == pytest.approx(2 * HOUR / (2 * DAY))
    assert share["mean"] == pytest.approx(5 * HOUR / (2 * DAY) / 3)
    sessions = summary(stats, "session length (s)")  # 1 h, 2 h (joined), 1 h
    assert (sessions["count"], sessions["mean"], sessions["q50"]) == (3, 4800.0, 3600.0)
    gaps = summary(stats, "gap length (s)")  # device 0: 1 h; device 1: 25 h
    assert gaps["count"] == 2 and gaps["mean"] == pytest.approx(13 * HOUR)
    assert gaps["q05"] == pytest.approx(HOUR + 0.05 * 24 * HOUR)
    per_day = summary(stats, "devices online per day")  # day 0: devices 0, 1; day 1: 1
    assert (per_day["count"], per_day["mean"], per_day["q95"]) == (2, 1.5, pytest.approx(1.95))


def test_local_hours_follow_the_utc_offsets() -> None:
    stats = availability_stats(DEVICE, T_ON, T_OFF, 3, 2 * DAY,
                               utc_offset_s=np.array([HOUR, 0.0, 0.0]))
    shares = stats.hourly["online_share"].to_list()
    # device 0 an hour later: local 02:00-03:00 and 04:00-06:00
    assert shares[:6] == pytest.approx([1 / 6, 0.0, 2 / 6, 0.0, 1 / 6, 1 / 6])
    assert stats.local_time


def test_a_short_window_has_no_whole_day() -> None:
    stats = availability_stats(DEVICE, T_ON, T_OFF, 3, 6 * HOUR)
    per_day = summary(stats, "devices online per day")
    assert per_day["count"] == 0 and per_day["mean"] is None
    assert math.isclose(summary(stats, "device online share")["q50"], HOUR / (6 * HOUR))


def test_a_trace_file_counts_its_named_devices(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    write_trace(path, DEVICE, T_ON, T_OFF)
    named = trace_file_stats(path)  # devices 0 and 1, window up to the last switch
    assert named.num_devices == 2 and named.end_s == DAY + 3 * HOUR and not named.local_time
    everyone = trace_file_stats(path, num_devices=3)
    assert everyone.summary.equals(
        availability_stats(DEVICE, T_ON, T_OFF, 3, DAY + 3 * HOUR).summary)
    with pytest.raises(InputError, match="outside"):
        trace_file_stats(path, num_devices=1)


def test_stats_command_prints_the_same_headings_for_a_model_and_a_trace(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = QUICK
    diurnal = ["--set", "population.availability.mode=diurnal",
               "--set", "population.availability.horizon_s=172800"]
    trace = tmp_path / "t.parquet"
    capsys.readouterr()
    assert main(["trace", "stats", str(scenario), *diurnal]) == 0
    model = capsys.readouterr().out.splitlines()
    assert main(["trace", str(scenario), "--out", str(trace), *diurnal]) == 0
    capsys.readouterr()
    assert main(["trace", "stats", str(trace)]) == 0
    replay = capsys.readouterr().out.splitlines()
    assert "local (the regions' UTC offsets)" in model[1] and "UTC (no offsets" in replay[1]

    def headings(lines: list[str]) -> list[str]:  # all but the numbers
        hours = [word for line in lines[2:6] for word in line.split()[::2]]
        week = re.sub(r"\d\.\d+|(?<= )-(?=\W)", "#", lines[6].split(";")[0])
        return [lines[1].split(",")[0], *hours, week, lines[7],
                *(line[:24] for line in lines[8:])]

    assert len(model) == len(replay) == 12 and headings(model) == headings(replay)
    assert model[6].endswith("days local, t = 0 is a Monday 00:00 UTC")
    assert replay[6].endswith("days UTC, t = 0 is a Monday 00:00 UTC")
    assert [line[:24].strip() for line in model[7:]] == ["quantiles", *STATISTICS]


@pytest.mark.parametrize("args, message", [
    (["missing.parquet"], "trace file not found"),
    (["t.csv", "--set", "seed=1"], "--set is for a scenario"),
    ([QUICK, "--set", 'population.region_assignment="covariate"', "--num-devices", "3"],
     "data covariate, so the data must be loaded"),
    (["t.csv", "--num-devices", "0"], "expected a whole number >= 1"),
])
def test_stats_bad_input_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         args: list[str], message: str) -> None:
    write_trace(tmp_path / "t.csv", DEVICE, T_ON, T_OFF)
    args = [str(tmp_path / a) if a.startswith(("t.", "missing")) else a for a in args]
    assert main(["trace", "stats", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
