"""Keys at the edge of their range (issue 70, item 7): secure_mm's iterations and
tolerance, a sweep's ``[ray] num_cpus`` and Ray's own failures, and batch sizes of
2^62; each is one line naming the key (exit 2), or runs, never a traceback."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from simfl.errors import InputError
from simfl.runs.memory import LIMIT_ENV, check_memory, estimate
from simfl.scenario import MAX_MM_ITERATIONS, MIN_MM_TOL, from_dict, load_scenario
from tests.test_bad_input import cli

HUGE = 2**62  # 4611686018427387904
TINY = """
name = "tiny"
seed = 1
[data.synthetic]
num_clients = 40
[aggregator]
name = "deltafl"
[server]
num_rounds = 3
clients_per_round = 5
[eval]
every = 3
[run]
checkpoint_every = 0
"""


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


@pytest.mark.parametrize("sets, named", [
    ([f"estimator.secure_mm.iterations={HUGE}", "estimator.secure_mm.tol=5e-324"],
     f"'estimator.secure_mm.iterations' = {HUGE} must be in [1, {MAX_MM_ITERATIONS}]"),
    (["estimator.secure_mm.tol=5e-324"],
     "'estimator.secure_mm.tol' = 5e-324 must be in [1e-12, 1e30]"),
    ([f"estimator.secure_mm.iterations={HUGE}"], "'estimator.secure_mm.iterations'"),
    ([f"estimator.secure_mm.iterations={MAX_MM_ITERATIONS + 1}"],
     "'estimator.secure_mm.iterations' = 10001 must be in [1, 10000]"),
    (["estimator.secure_mm.iterations=0"], "'estimator.secure_mm.iterations' = 0"),
    (["estimator.secure_mm.tol=1e31"], "'estimator.secure_mm.tol' = 1e+31"),
])
def test_secure_mm_keys_out_of_range_are_one_line_exit_2(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], sets: list[str],
        named: str) -> None:
    """They were accepted, then an OverflowError traceback in round 0."""
    out = tmp_path / "run"
    args: list[object] = [scenario, "--out", out, "--quiet",
                          "--set", "estimator.name=secure_mm"]
    for s in sets:
        args += ["--set", s]
    code, err, wall_s = cli(args, capsys)
    assert code == 2 and err.count("\n") == 1 and named in err, err
    assert wall_s < 10 and not out.exists()


def test_secure_mm_keys_at_their_bounds_run(scenario: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, err, _ = cli([scenario, "--out", tmp_path / "run", "--quiet",
                         "--set", "estimator.name=secure_mm",
                         "--set", f"estimator.secure_mm.iterations={MAX_MM_ITERATIONS}",
                         "--set", f"estimator.secure_mm.tol={MIN_MM_TOL}"], capsys)
    assert code == 0, err
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["health"]["nonfinite_thresholds"] == 0


SWEEP = """
scenario = "tiny.toml"
name = "edge"
seeds = [1]
[ray]
num_cpus = {cpus}
"""


def test_a_sweep_asking_more_cpus_than_the_machine_has_is_refused_before_ray_starts(
        scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """num_cpus = 1000 printed Ray's raw traceback (or, once Ray started, a line)."""
    ray = pytest.importorskip("ray")

    def no_start(*args: object, **kwargs: object) -> None:
        raise AssertionError("Ray was started")

    monkeypatch.setattr(ray, "init", no_start)
    monkeypatch.chdir(tmp_path)
    cpus = (os.cpu_count() or 1) + 1
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP.format(cpus=cpus))
    code, err, _ = cli(["sweep", path, "--backend", "ray"], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err == (f"simfl: error: {path}: 'ray.num_cpus' = {cpus} but no node of the Ray "
                   f"cluster has more than {os.cpu_count()} CPUs: no run could ever start (no "
                   f"run was started)\n")
    assert not (tmp_path / "results" / "edge").exists()


def test_rays_own_failure_to_start_is_one_line(
        scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Under a memory limit Ray's node times out starting: its traceback was printed."""
    ray = pytest.importorskip("ray")

    def timed_out(*args: object, **kwargs: object) -> None:
        raise Exception("The current node timed out during startup. This could happen "
                        "because some of the raylet failed to startup.\nSee the logs.")

    monkeypatch.setattr(ray, "init", timed_out)
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP.format(cpus=1))
    code, err, _ = cli(["sweep", path, "--backend", "ray"], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("simfl: error: sweep 'edge': could not start a local Ray instance "
                          "(Exception: The current node timed out during startup.")
    assert "See the logs" not in err and "(no run was started;" in err


@pytest.mark.parametrize("key", ["train.batch_size", "eval.batch_size"])
def test_a_huge_batch_of_synthetic_data_costs_what_the_data_holds(
        scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], key: str) -> None:
    """A minibatch holds at most a client's samples, an evaluation batch at most a pass's:
    2^62 was refused by the memory guard naming 'server.clients_per_round'."""
    monkeypatch.setenv(LIMIT_ENV, str(4 * 2**30))
    code, err, _ = cli([scenario, "--out", tmp_path / "run", "--quiet",
                         "--set", f"{key}={HUGE}"], capsys)
    assert code == 0, err


@pytest.mark.parametrize("key, what", [
    ("train.batch_size", "the logits of the cohort's minibatches"),
    ("eval.batch_size", "an evaluation batch of"),
])
def test_a_huge_batch_of_data_without_bounds_names_its_key(
        key: str, what: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the data's keys do not bound a client's samples (FEMNIST), the guard refuses
    the batch naming its key, not the cohort's."""
    section, leaf = key.split(".")
    file = tmp_path / "femnist.npz"
    file.write_bytes(b"no archive: the loader's own estimate adds nothing")
    scenario = from_dict({"data": {"dataset": "femnist", "path": str(file)},
                          section: {leaf: HUGE}})
    monkeypatch.setenv(LIMIT_ENV, str(16 * 2**30))
    top = max(t for t in estimate(scenario) if t[1])
    assert top[1].startswith(f"'{key}' = {HUGE}") and top[2].startswith(what)
    with pytest.raises(InputError) as refused:
        check_memory(scenario)
    assert str(refused.value).startswith(f"'{key}' = {HUGE}")


def test_the_scenario_loads_keys_in_range() -> None:
    mm = load_scenario(Path(__file__).parents[1] / "scenarios" / "quick_synthetic.toml",
                       ["estimator.name=secure_mm", "estimator.secure_mm.iterations=100",
                        "estimator.secure_mm.tol=1e-9"]).estimator.secure_mm
    assert (mm.iterations, mm.tol) == (100, 1e-9)
    assert sys.maxsize > MAX_MM_ITERATIONS  # the bound is no platform's
