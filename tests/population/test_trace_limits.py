"""Trace commands refuse work beyond their memory limit from an estimate made before
they allocate (issue 70, item 2): each hostile trace, written by the writer of its
format, is refused in one line with exit status 2, naming the file or option and the
estimate against the limit, by the CLI under an address-space limit the test sets and
by the library functions while tracemalloc watches what they allocate."""

from __future__ import annotations

import json
import os
import pickle
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from simfl.errors import InputError
from simfl.population.availability import MAX_WORK_BYTES
from simfl.population.fit import fit_trace
from simfl.population.trace import write_trace
from simfl.population.trace_formats import convert_trace
from simfl.population.trace_stats import trace_file_stats

ROOT = Path(__file__).parents[2]
CAP_BYTES = 2 * 2**30  # the CLI's address space: far below every estimate refused here
ALLOWED_BYTES = 64 * 2**20  # what a refusal may allocate before it refuses


def fedscale(folder: Path, finish_time: float, active: float, inactive: float) -> Path:
    """A FedScale client_behave_trace (a pickled dict, as FedScale writes it) of one
    client online on [active, inactive) every finish_time seconds."""
    path = folder / "client_behave_trace"
    path.write_bytes(pickle.dumps({0: {"active": [active], "inactive": [inactive],
                                       "finish_time": finish_time, "duration": 1,
                                       "model": "Pixel 4"}}))
    return path


def flash(folder: Path) -> Path:
    """FLASH's state_traces.json: one user ready 00:00-06:00, its span one day."""
    messages = "\n".join(["2020-01-01 00:00:00\tscreen_lock", "2020-01-01 00:00:00\twifi",
                          "2020-01-01 00:00:00\tbattery_charged_on",
                          "2020-01-01 06:00:00\tscreen_unlock",
                          "2020-01-02 00:00:00\tscreen_lock"])
    path = folder / "state_traces.json"
    path.write_text(json.dumps({"7": {"guid": "g", "model": "Mi 9", "messages": messages}}))
    return path


def trace(folder: Path, device: list[int], t_on: list[float], t_off: list[float]) -> Path:
    """simfl's own Parquet trace, by simfl's writer."""
    path = folder / "trace.parquet"
    write_trace(path, np.array(device), np.array(t_on), np.array(t_off))
    return path


# name: (the command's arguments, given the folder to write the trace into; what the
# one-line message must hold)
Case = tuple[Callable[[Path], list[str]], list[str]]
CASES: dict[str, Case] = {
    "fedscale period 1e-300 s to a day": (
        lambda d: ["convert", "--from-fedscale", str(fedscale(d, 1e-300, 0.0, 5e-301)),
                   "--horizon-s", "86400"],
        ["client_behave_trace", "8.64e+304 intervals", "limit 1e+08", "--horizon-s"]),
    "fedscale period 1 s to 1e9 s": (
        lambda d: ["convert", "--from-fedscale", str(fedscale(d, 1.0, 0.0, 0.5)),
                   "--horizon-s", "1e9"],
        ["client_behave_trace", "1e+09 intervals", "limit 1e+08"]),
    "flash repeated to 1e15 s": (
        lambda d: ["convert", "--from-flash", str(flash(d)), "--horizon-s", "1e15"],
        ["state_traces.json", "1.16e+10 intervals", "limit 1e+08"]),
    "stats of an interval [0, 1e300)": (
        lambda d: ["stats", str(trace(d, [0], [0.0], [1e300]))],
        ["trace.parquet", "device-days", "GiB of memory (limit"]),
    "stats of a switch at 1e15 s": (
        lambda d: ["stats", str(trace(d, [0, 0], [0.0, 1e15], [3600.0, 1e15 + 3600]))],
        ["trace.parquet", "1.16e+10 whole days", "GiB of memory (limit"]),
    "fit of a switch at 1e15 s": (
        lambda d: ["fit", str(trace(d, [0, 0], [0.0, 1e15], [3600.0, 1e15 + 3600]))],
        ["trace.parquet", "1.16e+10 days", "GiB of memory (limit"]),
    "stats of client_idx 1e12": (
        lambda d: ["stats", str(trace(d, [10**12], [0.0], [3600.0]))],
        ["trace.parquet", "client_idx up to 1000000000000", "GiB of memory (limit"]),
    "fit of client_idx 1e12": (
        lambda d: ["fit", str(trace(d, [10**12], [0.0], [3600.0]))],
        ["trace.parquet", "client_idx up to 1000000000000", "GiB of memory (limit"]),
    "stats --num-devices 1e20": (
        lambda d: ["stats", str(trace(d, [0], [0.0], [3600.0])), "--num-devices", "1" + "0" * 20],
        ["--num-devices", "1" + "0" * 20, "GiB of memory (limit"]),
    "stats --num-devices 1e12": (
        lambda d: ["stats", str(trace(d, [0], [0.0], [3600.0])), "--num-devices", "1" + "0" * 12],
        ["--num-devices", "1" + "0" * 12, "GiB of memory (limit"]),
}


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_the_command_refuses_in_one_line_under_a_memory_cap(case: str, tmp_path: Path) -> None:
    args, named = CASES[case]
    out = tmp_path / "out.parquet"
    argv = ["trace", *args(tmp_path)]
    if argv[1] == "convert":
        argv += ["--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "simfl", *argv], capture_output=True,
                          text=True, timeout=60, env=env, cwd=ROOT, preexec_fn=_capped)
    elapsed = time.monotonic() - start
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("simfl: error: "), done.stderr[-2000:]
    for part in named:
        assert part in lines[0], lines[0]
    assert done.stdout == "" and not out.exists()
    assert elapsed < 30


def _refused_small(call: Callable[[], object]) -> str:
    """The one-line message of the InputError ``call`` raises, checked to come before
    it allocated more than ALLOWED_BYTES (numpy's arrays are traced by tracemalloc)."""
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as refused:
            call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < ALLOWED_BYTES
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_a_pattern_repeated_beyond_the_limit_is_counted_not_made(tmp_path: Path) -> None:
    tiny = fedscale(tmp_path, 1e-300, 0.0, 5e-301)
    assert "8.64e+304 intervals" in _refused_small(
        lambda: convert_trace(tiny, "fedscale", horizon_s=86400.0))
    # copies from -inf to +inf (an origin far from 0 over a period of 1e-300 s)
    assert "inf intervals" in _refused_small(
        lambda: convert_trace(tiny, "fedscale", start_s=1e10, horizon_s=86400.0))
    second = fedscale(tmp_path, 1.0, 0.0, 0.5)
    message = _refused_small(lambda: convert_trace(second, "fedscale", horizon_s=1e9))
    assert "1e+09 intervals (limit 1e+08); client '0' has 1e+09" in message
    assert "1.16e+10 intervals" in _refused_small(
        lambda: convert_trace(flash(tmp_path), "flash", horizon_s=1e15))
    # within the limit the pattern is laid down as before
    made = convert_trace(second, "fedscale", horizon_s=1000.0)
    assert made.t_on_s.size == 1000 and made.t_on_s[-1] == 999.0


def test_statistics_beyond_the_limit_are_refused_before_they_are_made(tmp_path: Path) -> None:
    limit = f"(limit {MAX_WORK_BYTES / 2**30:.3g} GiB)"
    message = _refused_small(lambda: trace_file_stats(trace(tmp_path, [0], [0.0], [1e300])))
    assert "1.16e+295 device-days" in message and limit in message
    late = trace(tmp_path, [0, 0], [0.0, 1e15], [3600.0, 1e15 + 3600])
    assert "1.16e+10 whole days" in _refused_small(lambda: trace_file_stats(late))
    big = trace(tmp_path, [10**12], [0.0], [3600.0])
    assert "1000000000001 devices (client_idx up to 1000000000000)" in _refused_small(
        lambda: trace_file_stats(big))
    small = trace(tmp_path, [0, 1], [0.0, 100.0], [50.0, 300.0])
    for many in (10**20, 10**12):
        assert f"num_devices = {many} devices (--num-devices)" in _refused_small(
            lambda many=many: trace_file_stats(small, many))
    assert trace_file_stats(small, 5).num_devices == 5


def test_a_fit_beyond_the_limit_is_refused_before_it_is_made(tmp_path: Path) -> None:
    late = trace(tmp_path, [0, 0], [0.0, 1e15], [3600.0, 1e15 + 3600])
    assert "hour by hour over 1.16e+10 days" in _refused_small(lambda: fit_trace(late))
    big = trace(tmp_path, [10**12], [0.0], [3600.0])
    assert "client_idx up to 1000000000000" in _refused_small(lambda: fit_trace(big))
