"""Habits and diurnal availability at the edge of their ranges (issue 70, item 3): the
pre-check counts each device's expected intervals from its own drawn habits (the tail
of short sessions a wide ``session_log_sd`` gives, not the devices' mean), so a
configuration either draws within seconds or is refused in one line, exit status 2,
naming the key, before any interval is drawn."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from simfl.population import availability
from simfl.population.availability import (
    MAX_SESSION_STEPS,
    check_diurnal_work,
    expected_intervals,
)
from simfl.population.build import build_population
from simfl.population.diurnal import diurnal_intervals
from simfl.population.habits import draw_habits, habit_intervals
from simfl.rng import Streams
from simfl.scenario import DEFAULT_ONLINE_PROB_BY_HOUR, AvailabilityConfig, HabitsConfig, from_dict
from tests.population.test_trace_limits import _refused_small

ROOT = Path(__file__).parents[2]
QUICK = ROOT / "scenarios" / "quick_synthetic.toml"  # 100 training devices
CAP_BYTES = 3 * 2**30  # the CLI's address space (torch included)
PROFILE = DEFAULT_ONLINE_PROB_BY_HOUR
WIDE = "population.availability.habits.session_log_sd"
HABITS = ["--set", "population.availability.mode=habits", "--set", f"{WIDE}=3.0"]
EVERY_SPREAD_AT_ITS_MAXIMUM = [
    *HABITS, "--set", "population.availability.habits.propensity_logit_sd=5.0",
    "--set", "population.availability.habits.phase_sd_h=12.0"]


def _habits(n: int, cfg: HabitsConfig, seed: int = 3):
    region = np.zeros(n, dtype=np.int64)
    return draw_habits(cfg, PROFILE, 3600.0, region, None, np.random.default_rng(seed))


def test_expected_intervals_are_the_draws_device_by_device() -> None:
    """The estimate is each device's expectation for its own habits: the total and the
    busiest device (the number of steps the draw takes) come out as drawn."""
    cfg = AvailabilityConfig(mode="habits", horizon_s=3 * 86400.0,
                             habits=HabitsConfig(session_log_sd=1.5))
    habits = _habits(200, cfg.habits)
    expected = expected_intervals(cfg, 200, habits)
    offsets, _, _ = habit_intervals(np.zeros(200), habits, cfg.horizon_s,
                                    np.random.default_rng(4))
    drawn = np.diff(offsets)
    assert drawn.sum() == pytest.approx(expected.sum(), rel=0.03)
    assert drawn.max() == pytest.approx(expected.max(), rel=0.1)
    assert np.argmax(drawn) == np.argmax(expected)
    diurnal = AvailabilityConfig(mode="diurnal", session_mean_s=60.0)
    offsets, _, _ = diurnal_intervals(np.zeros(200), PROFILE, 60.0, diurnal.horizon_s,
                                      np.random.default_rng(5))
    assert offsets[-1] == pytest.approx(expected_intervals(diurnal, 200).sum(), rel=0.02)


def _refused(call: Callable[[], object], seconds: float = 5.0) -> str:
    """The one-line message of the InputError ``call`` raises within ``seconds``, before
    it allocated more than trace_limits' ALLOWED_BYTES."""
    start = time.monotonic()
    message = _refused_small(call)
    assert time.monotonic() - start < seconds
    return message


def _population_cfg(**habits: float):
    return from_dict({"population": {"availability": {"mode": "habits", "habits": habits}}}
                     ).population


@pytest.mark.parametrize("habits", [
    {"session_log_sd": 3.0},
    {"session_log_sd": 3.0, "propensity_logit_sd": 5.0, "phase_sd_h": 12.0},
], ids=["wide sessions", "every spread at its maximum"])
def test_a_wide_session_spread_on_few_devices_is_refused_by_its_key(habits) -> None:
    """100 devices pass a check on the mean session; their few devices of millisecond
    sessions would take millions of steps: refused naming session_log_sd."""
    cfg = _population_cfg(**habits)
    message = _refused(lambda: build_population(cfg, 100, None, Streams(0), "linear"))
    assert message.startswith(f"{WIDE} = 3.0: its device with the most sessions")
    assert f"limit {MAX_SESSION_STEPS:.0e} steps" in message
    assert "lower session_log_sd, raise session_mean_s or shorten horizon_s" in message


@pytest.mark.slow
def test_spreads_that_can_run_still_draw_within_seconds() -> None:
    cfg = from_dict({"population": {"availability": {
        "mode": "habits", "horizon_s": 2 * 86400.0,
        "habits": {"session_log_sd": 2.0, "propensity_logit_sd": 5.0, "phase_sd_h": 12.0}}}}
    ).population
    start = time.monotonic()
    built = build_population(cfg, 100, None, Streams(0), "linear")
    assert time.monotonic() - start < 20
    assert built.availability.t_on_s.size > 0


def test_diurnal_sessions_too_short_are_refused_by_session_mean_s() -> None:
    cfg = AvailabilityConfig(mode="diurnal", session_mean_s=1.0)  # ~1.2e5 sessions a device
    message = _refused(lambda: check_diurnal_work(cfg, 10))
    assert message.startswith("population.availability.session_mean_s = 1.0 s: a device "
                              "would have about 1.")
    check_diurnal_work(AvailabilityConfig(mode="diurnal", session_mean_s=20.0), 10)


def test_memory_counts_intervals_and_the_habit_classes_tables(monkeypatch) -> None:
    cfg = AvailabilityConfig(mode="habits", habits=HabitsConfig(propensity_logit_sd=5.0))
    habits = _habits(2000, cfg.habits)
    check_diurnal_work(cfg, 2000, habits)
    monkeypatch.setattr(availability, "MAX_WORK_BYTES", 50 * 2**20)
    message = _refused(lambda: check_diurnal_work(cfg, 2000, habits))
    assert message.startswith("population.availability.habits.propensity_logit_sd = 5.0 "
                              "with session_log_sd = 0.49: the hazard tables of the 2000 "
                              "devices'")
    assert "GiB of memory (limit 0.0488 GiB)" in message
    diurnal = AvailabilityConfig(mode="diurnal", session_mean_s=600.0)
    check_diurnal_work(diurnal, 2000)  # 4e5 intervals, 20 MB
    message = _refused(lambda: check_diurnal_work(diurnal, 20000))
    assert message.startswith("population.availability.session_mean_s = 600.0 s: the 20000 "
                              "devices' 4.")
    assert message.endswith("online sessions over horizon_s = 604800 s would take about "
                            "0.181 GiB of memory (limit 0.0488 GiB): raise session_mean_s "
                            "or shorten horizon_s")


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES))


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "run every spread at its maximum", "trace fit",
                                     "trace stats", "trace"])
def test_the_commands_refuse_in_one_line_under_a_memory_cap(command: str, tmp_path: Path
                                                            ) -> None:
    """Before, each grew by ~16 MB/s for minutes (the run until a MemoryError and a glibc
    abort at 5.2 GB) and printed nothing."""
    argv = {"run": [str(QUICK), "--out", str(tmp_path / "run"), "--quiet", *HABITS],
            "run every spread at its maximum": [str(QUICK), "--out", str(tmp_path / "run"),
                                                "--quiet", *EVERY_SPREAD_AT_ITS_MAXIMUM],
            "trace fit": ["trace", "fit", str(QUICK), *HABITS],
            "trace stats": ["trace", "stats", str(QUICK), *HABITS],
            "trace": ["trace", str(QUICK), "--out", str(tmp_path / "t.parquet"), *HABITS],
            }[command]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "simfl", *argv], capture_output=True,
                          text=True, timeout=60, env=env, cwd=tmp_path, preexec_fn=_capped)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"simfl: error: {WIDE} = 3.0: ")
    assert done.stdout == ""
    assert "online sessions over horizon_s = 604800 s" in lines[0]
    assert time.monotonic() - start < 30
    assert not (tmp_path / "t.parquet").exists()
