"""FedScale and FLASH availability traces into simfl's trace format, and the refusals."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from simfl.cli import main
from simfl.errors import InputError
from simfl.population.availability import from_intervals
from simfl.population.trace import read_trace, write_trace
from simfl.population.trace_formats import ConvertedTrace, convert_trace, load_plain_pickle

DAY_S = 86400.0

# FedScale's client_behave_trace: client id -> active/inactive times, wrapping at
# finish_time. Ids 2 < 10 numerically (as text, "10" < "2"); 7 is never online.
FEDSCALE = {
    10: {"active": [0, 30], "inactive": [10, 50], "finish_time": 40, "duration": 40,
         "model": "Pixel 4"},
    2: {"active": [5], "inactive": [15], "finish_time": 20, "duration": 20, "model": "Mi 9"},
    7: {"active": [], "inactive": [], "finish_time": 20, "duration": 20, "model": "Mi 9"},
}


def flash_messages(*lines: tuple[str, str]) -> str:
    return "\n".join(f"{stamp}\t{state}" for stamp, state in lines) + "\n"


# FLASH's state_traces.json: ready = screen locked, on wifi and charging.
FLASH = {
    "3": {"guid": "g3", "model": "Redmi Note 8", "messages": flash_messages(
        ("2020-01-02 08:00:00", "screen_lock"), ("2020-01-02 08:00:00", "wifi"),
        ("2020-01-02 08:30:00", "battery_charged_on"),  # ready from 08:30
        ("2020-01-02 09:00:00", "4g"),  # ... to 09:00
        ("2020-01-02 09:10:00", "wifi"),  # ready again
        ("2020-01-02 09:20:00", "55%"),  # a battery level: no change
        ("2020-01-02 09:40:00", "screen_unlock"),  # ... to 09:40
        ("2020-01-02 10:00:00", "Screen_Lock"))},  # ready at the last message: dropped
    "12": {"guid": "g12", "model": "Pixel 4", "messages": flash_messages(
        ("2020-01-03 00:00:00", "screen_lock"), ("2020-01-03 00:00:00", "wifi"),
        ("2020-01-03 00:00:00", "battery_charged_on"),
        ("2020-01-03 01:00:00", "battery_charged_off"))},
    "5": {"guid": "g5", "model": "Pixel 4", "messages": "2020-01-02 08:00:00 screen_lock\n"},
}
HOUR = 3600.0


def write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    if name.endswith(".json"):
        path.write_text(json.dumps(data))
    else:
        path.write_bytes(pickle.dumps(data))
    return path


def rows(trace: ConvertedTrace) -> list[tuple[int, float, float]]:
    return list(zip(trace.client_idx.tolist(), trace.t_on_s.tolist(), trace.t_off_s.tolist(),
                    strict=True))


def test_fedscale_pairs_active_and_inactive_times(tmp_path: Path) -> None:
    trace = convert_trace(write(tmp_path, "behave", FEDSCALE), "fedscale")
    assert trace.client_ids == ("2", "10") and trace.num_source == 3
    # client 10: [0, 10), [30, 50) cut at finish_time 40
    assert rows(trace) == [(0, 5.0, 15.0), (1, 0.0, 10.0), (1, 30.0, 40.0)]
    assert trace.row_client_id.tolist() == ["2", "10", "10"]


def test_fedscale_pattern_repeats_every_finish_time(tmp_path: Path) -> None:
    trace = convert_trace(write(tmp_path, "behave", FEDSCALE), "fedscale", start_s=10.0,
                          horizon_s=60.0)
    assert rows(trace) == [
        (0, 0.0, 5.0), (0, 15.0, 25.0), (0, 35.0, 45.0), (0, 55.0, 60.0),  # period 20
        (1, 0.0, 10.0), (1, 10.0, 20.0), (1, 40.0, 50.0), (1, 50.0, 60.0)]  # period 40 from 10


def test_online_where_fedscale_says_active(tmp_path: Path) -> None:
    # the record and the answers of FedScale's own test of ClientMetadata.is_active
    # (fedscale/tests/cloud/internal/test_client_metadata.py)
    record = {"active": [1, 3, 6, 9], "inactive": [1, 4, 7, 10], "finish_time": 10}
    trace = convert_trace(write(tmp_path, "behave", {"client_1": record}), "fedscale",
                          horizon_s=20.0)
    availability = from_intervals(trace.client_idx, trace.t_on_s, trace.t_off_s,
                                  np.zeros(1, dtype=np.int64), 1)
    times = [2, 6, 8, 9, 10, 15]
    assert availability.is_online(0, times).tolist() == [False, True, False, True, False, False]


def test_fedscale_overlaps_joined_and_short_inactive_refused(tmp_path: Path) -> None:
    overlapping = {1: {"active": [0, 5, 20], "inactive": [10, 8, 30, 99], "finish_time": 40}}
    trace = convert_trace(write(tmp_path, "a", overlapping), "fedscale")
    assert rows(trace) == [(0, 0.0, 10.0), (0, 20.0, 30.0)]  # the 4th inactive: unused
    short = {1: {"active": [0, 5], "inactive": [3], "finish_time": 40}}
    with pytest.raises(InputError, match="client 1: needs a number finish_time > 0"):
        convert_trace(write(tmp_path, "b", short), "fedscale")
    with pytest.raises(InputError, match="not FedScale's client_behave_trace"):
        convert_trace(write(tmp_path, "c", [1, 2]), "fedscale")


class _Evil:
    """Unpickling it would call ``call(*args)``."""

    def __init__(self, call: object, args: tuple[object, ...]) -> None:
        self.call, self.args = call, args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return self.call, self.args


@pytest.mark.parametrize("how", ["open", "system"])
def test_a_pickle_carrying_code_is_refused_unrun(tmp_path: Path, how: str) -> None:
    marker = tmp_path / "ran"
    payload = _Evil(open, (str(marker), "w")) if how == "open" else \
        _Evil(os.system, (f"touch {marker}",))
    path = write(tmp_path, "behave", {1: {"active": payload, "inactive": [1],
                                          "finish_time": 5}})
    with pytest.raises(InputError, match="the pickle asks for .*only plain") as caught:
        load_plain_pickle(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)
    assert not marker.exists()


def test_flash_ready_while_locked_on_wifi_and_charging(tmp_path: Path) -> None:
    trace = convert_trace(write(tmp_path, "t.json", FLASH), "flash")
    # origin: midnight of 2020-01-02, the first day; user 5's line has no tab: invalid
    assert trace.client_ids == ("3", "12") and trace.num_invalid == 1
    assert rows(trace) == [(0, 8.5 * HOUR, 9 * HOUR), (0, 9 * HOUR + 600, 9 * HOUR + 2400),
                           (1, DAY_S, DAY_S + HOUR)]


def test_flash_pattern_repeats_over_its_recorded_span(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    trace = convert_trace(write(tmp_path, "t.json", FLASH), "flash", horizon_s=DAY_S)
    write_trace(path, trace.client_idx, trace.t_on_s, trace.t_off_s, trace.row_client_id)
    device, t_on, t_off = read_trace(path, 2)
    # user 3: 08:00 .. 10:00, period 2 h: its two spans at 00:30 .. 01:00, 01:10 .. 01:40, ...
    first = device == 0
    assert first.sum() == 24 and t_on[first][:2].tolist() == [0.5 * HOUR, HOUR + 600]
    # user 12: ready throughout its 1 h span: its copies touch, read as one interval
    assert (t_on[~first].tolist(), t_off[~first].tolist()) == ([0.0], [DAY_S])


def test_flash_unknown_state_and_bad_json_refused(tmp_path: Path) -> None:
    odd = {"1": {"messages": flash_messages(("2020-01-02 08:00:00", "airplane_mode"),
                                            ("2020-01-02 09:00:00", "wifi"))}}
    with pytest.raises(InputError, match="user '1': unknown state"):
        convert_trace(write(tmp_path, "odd.json", odd), "flash")
    bad = tmp_path / "bad.json"
    bad.write_text('{"1": ')
    with pytest.raises(InputError, match="not json"):
        convert_trace(bad, "flash")


def test_convert_command_writes_ids_beside_the_trace(tmp_path: Path) -> None:
    out = tmp_path / "fedscale.parquet"
    source = write(tmp_path, "behave", FEDSCALE)
    assert main(["trace", "convert", "--from-fedscale", str(source), "--out", str(out)]) == 0
    frame = pl.read_parquet(out)
    assert frame.columns == ["client_idx", "t_on_s", "t_off_s", "client_id"]
    assert frame["client_id"].to_list() == ["2", "10", "10"]
    device, _, _ = read_trace(out, 2)
    np.testing.assert_array_equal(device, [0, 1, 1])


@pytest.mark.parametrize("flag, content", [
    ("--from-fedscale", b'{"1": {}}'),  # json given as FedScale's pickle
    ("--from-fedscale", None),  # a pickle carrying code
    ("--from-flash", b"\x80\x04K\x01."),  # a pickle given as FLASH's json
    ("--from-flash", b"{}"),  # no user ever online
])
def test_convert_bad_files_one_line_exit_2_nothing_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str,
        content: bytes | None) -> None:
    source = tmp_path / "source"
    source.write_bytes(pickle.dumps(_Evil(os.system, ("true",))) if content is None
                       else content)
    out = tmp_path / "t.parquet"
    assert main(["trace", "convert", flag, str(source), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"simfl: error: {source}: ") and err.count("\n") == 1
    assert not out.exists()
