"""simfl.runs.memory's estimate against the peaks that runs of 10^4 to 10^6 devices
measured, and the guard in front of what would not fit: a run, ``trace``, and the
libraries themselves (issue 70, item 6)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simfl.cli import main
from simfl.errors import InputError
from simfl.runs import memory
from simfl.runs.memory import LIMIT_ENV, check_memory, estimate, population_only
from simfl.scenario import from_dict, load_scenario

ROOT = Path(__file__).parents[2]
MILLION = ROOT / "scenarios" / "million_synthetic.toml"
# The kept runs of scenarios/million_synthetic.toml (bench/million.py) and of the
# population_size sweep, each manifest with its scenario and its peak RSS (VmHWM).
KEPT = sorted([*(ROOT / "docs" / "runs" / "population_size").glob("*/manifest.json"),
               *(ROOT / "docs" / "runs" / "million").glob("*/manifest.json")])
# The estimate is a guard: at least LOW times the measured peak (it may not let through
# what would not fit), at most HIGH times (it may not refuse what fits twice over).
LOW, HIGH = 0.8, 2.0


def _kept() -> list[tuple[str, dict[str, object]]]:
    manifests = [(p.parent.name, json.loads(p.read_text())) for p in KEPT]
    return [(name, m) for name, m in manifests
            if m["scenario"]["data"]["synthetic"]["num_clients"] >= 10_000]  # type: ignore[index]


def test_the_kept_runs_span_ten_thousand_to_a_million_devices() -> None:
    sizes = {m["scenario"]["data"]["synthetic"]["num_clients"]  # type: ignore[index]
             for _, m in _kept()}
    assert min(sizes) == 10_101 and max(sizes) == 1_010_101 and len(_kept()) >= 20


@pytest.mark.parametrize("name, manifest", _kept(), ids=[name for name, _ in _kept()])
def test_the_estimate_is_within_a_factor_of_the_measured_peak(
        name: str, manifest: dict[str, object]) -> None:
    scenario = from_dict(manifest["scenario"])  # type: ignore[arg-type]
    need = sum(t[0] for t in estimate(scenario))
    peak = float(manifest["peak_rss_mb"]) * 2**20  # type: ignore[arg-type]
    assert LOW * peak <= need <= HIGH * peak, f"{name}: {need / peak:.2f} x the measured peak"


def test_the_million_devices_estimate_is_their_documented_peak() -> None:
    """docs/foundation.md: 4,831 MiB peak RSS at 10^6 devices (the estimate was 0.29 GiB);
    the availability intervals, the check-in records and their checkpoint copies, the
    passes over every device are counted."""
    terms = estimate(load_scenario(MILLION))
    need = sum(t[0] for t in terms) / 2**20
    assert 4831 <= need <= 1.25 * 4831
    parts = {what.split(" ")[1]: size for size, _, what in terms}
    assert parts["population"] > 2**30 and parts["checkpoints'"] > 2**30


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    capsys.readouterr()
    start = time.monotonic()
    code = main(args)
    return code, capsys.readouterr().err, time.monotonic() - start


def test_a_million_devices_beyond_the_limit_are_refused_in_one_line_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(LIMIT_ENV, "2e9")  # passed the guard, then bad_alloc after 107 s
    out = tmp_path / "run"
    code, err, wall_s = _cli([str(MILLION), "--out", str(out), "--quiet"], capsys)
    assert code == 2 and err.count("\n") == 1 and wall_s < 20, err
    assert err.startswith("simfl: error: 'data.synthetic.num_clients' = 1010101 with "
                          "'population.availability.session_mean_s' = 3600.0")
    assert "the run would take about 5" in err and f"(${LIMIT_ENV})" in err
    assert not out.exists()


def test_trace_is_guarded_for_the_population_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``trace`` had no guard of its own: a million devices' population is refused in one
    line; a smaller one that fits is written although its run would not fit."""
    monkeypatch.setenv(LIMIT_ENV, "2e9")
    out = tmp_path / "million.parquet"
    code, err, wall_s = _cli(["trace", str(MILLION), "--out", str(out)], capsys)
    assert code == 2 and err.count("\n") == 1 and wall_s < 20, err
    assert "building the population would take about 2.9" in err and not out.exists()

    small = ["data.synthetic.num_clients=3000"]
    scenario = load_scenario(MILLION, small)
    held = min(memory.resident_bytes(), memory.RUNTIME_BYTES)
    population = sum(t[0] for t in estimate(scenario, "population")) - held
    run = sum(t[0] for t in estimate(scenario)) - held
    limit = population + 50 * 2**20
    assert run > limit
    monkeypatch.setenv(LIMIT_ENV, str(limit))
    with pytest.raises(InputError, match="the run would take"):
        check_memory(scenario)
    with population_only():
        check_memory(scenario)
    out = tmp_path / "small.parquet"
    code, err, _ = _cli(["trace", str(MILLION), "--out", str(out), "--set", small[0]], capsys)
    assert code == 0 and out.is_file(), err


def _limit_address_space(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@pytest.mark.slow
@pytest.mark.parametrize("command", [[], ["trace"]])
def test_too_little_memory_for_torch_is_one_line(tmp_path: Path, command: list[str]) -> None:
    """Under ``ulimit -v 1000000`` loading torch gave an ImportError traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "simfl", *command, str(MILLION), "--out",
         str(tmp_path / ("t.parquet" if command else "run"))],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        preexec_fn=lambda: _limit_address_space(1_000_000 * 1024))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("simfl: error: too little memory to load simfl's libraries "
                                  "(ImportError: ")
    assert not (tmp_path / "run").exists()


def test_a_memory_error_beyond_the_estimate_is_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import simfl.cli.run

    def allocate(args: object) -> int:
        raise MemoryError("Unable to allocate 327. MiB for an array with shape (42869539,)")

    monkeypatch.setattr(simfl.cli.run, "run_command", allocate)
    code, err, _ = _cli([str(MILLION)], capsys)
    assert code == 1 and err.count("\n") == 1
    assert err.startswith("simfl: error: out of memory (MemoryError: Unable to allocate 327.")


def test_an_import_error_of_another_kind_stays_a_traceback(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import simfl.cli.run

    def missing(args: object) -> int:
        raise ImportError("No module named 'ray'")

    monkeypatch.setattr(simfl.cli.run, "run_command", missing)
    with pytest.raises(ImportError, match="ray"):
        main([str(MILLION)])


def test_the_guard_names_the_largest_part_with_a_key() -> None:
    """The libraries and what every run takes are no key's: the message names the largest
    part that one is (a tiny run's data)."""
    scenario = from_dict({"data": {"synthetic": {"num_clients": 40}}})
    keyed = [t for t in estimate(scenario) if t[1]]
    unkeyed = [t for t in estimate(scenario) if not t[1]]
    assert {t[2] for t in unkeyed} == {"the libraries (torch, numpy, polars)",
                                       "what every run takes"}
    assert max(keyed)[1].startswith("'data.synthetic.num_clients' = 40")
