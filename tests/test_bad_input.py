"""Bad input and runs that cannot make progress (issue 19), through the command line.

Each case is a reproduction a user ran into: it must end with the documented exit
status (2: bad input, nothing written; 1: the run failed during its work, its manifest
says why) and a one-line message naming the key or file, within seconds of wall time,
and must never delete or replace what simfl did not write.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import simfl.runs.build
from simfl.cli import main
from simfl.plots.runs import plot_run
from simfl.rundir import run_lock
from simfl.runs.memory import LIMIT_ENV
from simfl.runs.run import MAX_AVAILABILITY_HOURS

SCENARIO = """
name = "tiny"
seed = 1
[data]
dataset = "synthetic"
[data.synthetic]
num_clients = 40
shared_model = 3.0
[model]
l2 = 1e-4
[aggregator]
name = "deltafl"
[server]
num_rounds = 12
clients_per_round = 6
[eval]
every = 6
[run]
checkpoint_every = 4
"""


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(SCENARIO)
    return path


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    """Exit status, stderr and wall seconds of ``python -m simfl ARGS``."""
    capsys.readouterr()
    start = time.monotonic()
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err, time.monotonic() - start


def tree(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


# (--set overrides, exit status, what the one-line message must name). Exit 2 cases are
# found before any work; exit 1 cases fail the run with the cause.
CASES = {
    "min_online above the population": (["server.min_online=1000"], 2, "server.min_online"),
    "async concurrency above the population": (
        ["server.mode=async", "server.concurrency=1000"], 2, "server.concurrency"),
    "async buffer above the population": (
        ["server.mode=async", "server.buffer_size=1000"], 2, "server.buffer_size"),
    "sessions too short to precompute": (
        ['population.availability.mode="diurnal"',
         "population.availability.session_mean_s=1e-6"], 2, "session_mean_s"),
    "no device ever online": (
        ['population.availability.mode="diurnal"',
         "population.availability.online_prob_by_hour=[1e-9, " + "1e-9, " * 22 + "1e-9]"],
        2, "online_prob_by_hour"),
    "convnet on vectors": (['model.name="convnet"'], 2, "model.name"),
    "gru on vectors": (['model.name="gru"'], 2, "model.name"),
    "absurd local epochs": (["train.local_epochs=1000000000"], 2, "train.local_epochs"),
    "synthetic features beyond memory": (["data.synthetic.dim=100000000"], 2,
                                         "'data.synthetic.dim' = 100000000"),
    "scenario name escapes results/": (['name="../../victim"'], 2, "'name'"),
    "absolute scenario name": (['name="/tmp/victim"'], 2, "'name'"),
    "every update late": (["server.deadline_s=0.001"], 1, "server.deadline_s"),
    "every device drops": (["population.failure_rate_per_h=1e9"], 1, "failure_rate_per_h"),
    "every update non-finite": (["train.lr=1e30"], 1, "train.lr"),
    "Δ-FL threshold non-finite": (
        ["train.lr=1e9", "server.num_rounds=30"], 1, "threshold is non-finite"),
    "no devices online for a day": (
        ['population.availability.mode="diurnal"', "server.min_online=19",
         "server.max_wait_s=7200"], 1, "server.max_wait_s"),
    "run longer than the availability": (
        ['population.availability.mode="diurnal"', "population.availability.horizon_s=1800",
         "server.round_interval_s=600"], 1, "horizon_s"),
    "async: every update non-finite": (
        ["server.mode=async", "train.lr=1e30"], 1, "train.lr"),
    "stall rule off, every update late": (
        ["run.idle_window=0", "server.deadline_s=0.001"], 1, "trained nothing"),
    "a compatibility key out of its range": (["server.wait_poll_s=0"], 2, "server.wait_poll_s"),
    # values that once passed validation and crashed mid-run (overflow, IndexError, ...)
    "lr beyond float32": (["train.lr=1e39"], 2, "'train.lr'"),
    "lr growing by 1e308 a decay": (
        ["train.lr_decay_every=1", "train.lr_decay_factor=1e308"], 2, "train.lr_decay_factor"),
    "l2 of 1e308": (["model.l2=1e308"], 2, "'model.l2'"),
    "l2 of 1e39": (["model.l2=1e39"], 2, "'model.l2'"),
    "FedProx mu of 1e308": (['aggregator.name="fedprox"', "aggregator.mu=1e308"], 2,
                            "'aggregator.mu'"),
    "FedProx mu of 1e39": (['aggregator.name="fedprox"', "aggregator.mu=1e39"], 2,
                           "'aggregator.mu'"),
    "AFL lambda step of 1e308": (['aggregator.name="afl"', "aggregator.lambda_step=1e308"], 2,
                                 "aggregator.lambda_step"),
    "DRFA lambda step of 1e308": (['aggregator.name="drfa"', "aggregator.lambda_step=1e308"],
                                  2, "aggregator.lambda_step"),
    "over-selection of 1e308": (["server.over_selection=1e308"], 2, "server.over_selection"),
    "bisection over ±1e308": (
        ['estimator.name="secure_bisection"', "estimator.secure_bisection.low=-1e308",
         "estimator.secure_bisection.high=1e308"], 2, "estimator.secure_bisection.low"),
    "bisection to 5e-324": (['estimator.name="secure_bisection"',
                             "estimator.secure_bisection.tol=5e-324"], 2,
                            "estimator.secure_bisection.tol"),
    "tracking from 1e308": (['estimator.name="tracking"', "estimator.tracking.initial=1e308"],
                            2, "estimator.tracking.initial"),
    "tracking steps of 1e308": (['estimator.name="tracking"',
                                 "estimator.tracking.step=1e308"], 2, "estimator.tracking.step"),
    "bandwidth sigma of 1e4": (["population.network.down_log_sigma=1e4"], 2,
                               "population.network.down_log_sigma"),
    "speed sigma of 1e4": (['population.compute.speed_source="lognormal"',
                            "population.compute.speed_log_sigma=1e4"], 2,
                           "population.compute.speed_log_sigma"),
    "two region shares of 1e308": (
        ['population.regions=[{name="a", share=1e308}, {name="b", share=1e308}]'], 2,
        "population.regions[0].share"),
    "1e5 torch threads": (["train.threads=100000"], 2, "train.threads"),
    "2**62 torch threads": (["train.threads=4611686018427387904"], 2, "train.threads"),
    "a billion decomposition draws a round": (
        ["estimator.bias_every=1", "estimator.decomposition_draws=1000000000"], 2,
        "estimator.decomposition_draws"),
    # memory: the builder's temporaries and the model are estimated before they are taken
    "ten million classes": (["data.synthetic.num_classes=10000000"], 2,
                            "'data.synthetic.num_classes' = 10000000"),
    "200,000 synthetic clients": (["data.synthetic.num_clients=200000"], 2,
                                  "'data.synthetic.num_clients' = 200000"),
    # runs that reported success wrongly
    "q-FFL whose weights underflow: the model never moves": (
        ['aggregator.name="qffl"', "aggregator.q=1000"], 1, "aggregator.q"),
}


@pytest.mark.parametrize("case", CASES)
def test_each_reproduction_ends_fast_with_its_exit_status_and_names_the_key(
        case: str, scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(LIMIT_ENV, str(16 * 2**30))  # the memory cases on any machine
    overrides, expected, named = CASES[case]
    out = tmp_path / "run"
    args: list[object] = [scenario, "--out", out, "--quiet"]
    for override in overrides:
        args += ["--set", override]
    code, err, wall_s = cli(args, capsys)
    assert code == expected, err
    assert err.count("\n") == 1 and named in err, err
    assert wall_s < 10
    if expected == 2:
        assert not out.exists()  # nothing written
    else:
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["status"] == "failed" and named in manifest["reason"]
        assert manifest["health"]["nonfinite_thresholds"] >= 0


def test_a_run_that_aggregates_nothing_reports_it_in_its_health(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code, err, _ = cli([scenario, "--out", out, "--quiet", "--set", "server.deadline_s=0.001"],
                       capsys)
    health = json.loads((out / "manifest.json").read_text())["health"]
    assert code == 1
    # the stall rule fires after the 10th idle round: every device of rounds 0-9 was late
    assert health["rounds"] == 10 and health["rounds_without_update"] == 10
    # final statuses come once a round's stragglers are done (rounds still in flight when
    # the run failed are not counted: here every one, as a round opens the instant a
    # device is freed, 1 ms after the last); devices busy with a late task are not selected
    assert set(health["updates_by_status"]) <= {"late"}
    assert health["updates_by_status"].get("late", 0) <= 60
    assert "rounds 0-9" in err and "late: arrived after the round closed" in err


def test_a_run_without_the_stall_rule_that_trained_nothing_counts_all_its_devices(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code, err, _ = cli([scenario, "--out", out, "--quiet", "--set", "run.idle_window=0",
                        "--set", "server.deadline_s=0.001"], capsys)
    health = json.loads((out / "manifest.json").read_text())["health"]
    assert code == 1 and health["rounds"] == 12 == health["rounds_without_update"]
    late = health["updates_by_status"]["late"]
    assert late > 6  # more than one round's (was: the last round's devices only)
    assert f"none of its 12 rounds aggregated an update; of their {late} devices {late} late" \
        in err


def test_a_healthy_run_records_its_health_and_completes(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code, err, _ = cli([scenario, "--out", out, "--quiet"], capsys)
    manifest = json.loads((out / "manifest.json").read_text())
    assert code == 0, err
    assert manifest["status"] == "complete"
    health = manifest["health"]
    assert health["rounds"] == 12 and health["rounds_without_update"] == 0
    assert health["nonfinite_thresholds"] == 0
    by_status = health["updates_by_status"]
    assert sum(by_status.values()) == 12 * 6 and by_status["aggregated"] > 0


@pytest.mark.parametrize("interval_s", [1e13, 1e300])
@pytest.mark.slow
def test_a_clock_run_out_to_centuries_keeps_its_hourly_table_bounded(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        interval_s: float) -> None:
    # rounds 1e13 s (300,000 years) or 1e300 s apart: hour by hour, availability.parquet
    # would need 3e10 or 3e296 rows (once: a 62 GiB allocation, or a crash after training)
    out = tmp_path / "run"
    code, err, _ = cli([scenario, "--out", out, "--quiet", "--set",
                        f"server.round_interval_s={interval_s}"], capsys)
    assert code == 0, err
    hours = pl.read_parquet(out / "availability.parquet")["t_s"].unique().sort()
    end_s = pl.read_parquet(out / "rounds.parquet")["t_end_s"].max()
    assert end_s >= 11 * interval_s  # (12 rounds)
    step_s = hours[1] - hours[0]
    assert 1000 < hours.len() <= MAX_AVAILABILITY_HOURS + 1 and hours[-1] + step_s > end_s
    assert step_s >= 3600 * end_s / 3600 / MAX_AVAILABILITY_HOURS


def test_overwrite_leaves_a_directory_that_is_no_run_untouched(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "notes.txt").write_text("precious")
    (victim / "sub" / "data.csv").write_text("1,2")
    before = tree(victim)
    code, err, _ = cli([scenario, "--out", victim, "--overwrite", "--quiet"], capsys)
    assert code == 2 and "not a simfl run" in err
    assert tree(victim) == before


@pytest.mark.slow
def test_overwrite_never_deletes_files_simfl_did_not_write_into_a_run(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert cli([scenario, "--out", out, "--quiet"], capsys)[0] == 0
    (out / "my_analysis.ipynb").write_text("{}")
    before = tree(out)
    code, err, _ = cli([scenario, "--out", out, "--overwrite", "--quiet"], capsys)
    assert code == 2 and "my_analysis.ipynb" in err
    assert tree(out) == before
    (out / "my_analysis.ipynb").unlink()
    assert cli([scenario, "--out", out, "--overwrite", "--quiet"], capsys)[0] == 0


def test_ctrl_c_while_a_run_loads_its_data_is_one_line_and_writes_nothing(
        scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(simfl.runs.build, "load_data", interrupted)
    out = tmp_path / "run"
    code, err, _ = cli([scenario, "--out", out, "--quiet"], capsys)
    assert (code, err) == (130, f"simfl: {out}: interrupted before the run began; "
                                "nothing written\n")
    assert not out.exists()


def test_a_trace_with_no_online_interval_is_bad_input(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace, out = tmp_path / "empty.csv", tmp_path / "run"
    trace.write_text("client_idx,t_on_s,t_off_s\n")
    code, err, _ = cli([scenario, "--out", out, "--quiet", "--set",
                        'population.availability.mode="trace"', "--set",
                        f'population.availability.trace_path="{trace}"'], capsys)
    assert code == 2 and str(trace) in err and err.count("\n") == 1
    assert not out.exists()


def _user_file_in(where: str, out: Path, outside: Path) -> None:
    """Put what a user might leave in a run directory (``outside``: a folder of theirs)."""
    if where in ("checkpoint", "parts/rounds", "parts"):
        (out / where).mkdir(parents=True, exist_ok=True)
        (out / where / "notes.txt").write_text("mine")
    elif where == "plots":
        (out / "plots" / "my_annotated_figure.png").write_text("mine")
    elif where == "checkpoint ->":  # a link to a folder of theirs, with simfl-like names
        (outside / "journal").mkdir()
        (outside / "journal" / "000000.pt").write_text("mine")
        (outside / "state.pt").write_text("mine")
        (out / "checkpoint").symlink_to(outside, target_is_directory=True)
    elif where == "plots ->":
        (outside / "test_error_hist.png").write_text("mine")
        shutil.rmtree(out / "plots")
        (out / "plots").symlink_to(outside, target_is_directory=True)
    else:  # manifest: a folder with a manifest.json of another program
        for entry in out.iterdir():
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        (out / "manifest.json").write_text('{"name": "my app", "version": "1"}')
        (out / "plots").mkdir()
        (out / "plots" / "icon.png").write_text("mine")


@pytest.mark.parametrize("where", ["checkpoint", "parts", "parts/rounds", "plots",
                                   "checkpoint ->", "plots ->", "manifest"])
@pytest.mark.slow
def test_overwrite_deletes_nothing_a_user_put_anywhere_in_a_run(
        where: str, scenario: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out, outside = tmp_path / "run", tmp_path / "mine"
    outside.mkdir()
    assert cli([scenario, "--out", out, "--quiet"], capsys)[0] == 0
    plot_run(out)
    _user_file_in(where, out, outside)
    before, mine = tree(out), tree(outside)
    code, err, _ = cli([scenario, "--out", out, "--overwrite", "--quiet"], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert ("not a simfl run" if where == "manifest" else "which simfl did not write") in err
    assert tree(out) == before and tree(outside) == mine


@pytest.mark.slow
def test_overwrite_replaces_a_failed_run_with_its_checkpoint_parts_and_plots(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, fresh = tmp_path / "run", tmp_path / "fresh"
    # rounds 10 minutes apart: each round's stragglers are done (its rows written) before
    # the next, so the failed run has parts of every table
    code, _, _ = cli([scenario, "--out", out, "--quiet", "--set", "server.deadline_s=0.001",
                      "--set", "server.round_interval_s=600"], capsys)
    assert code == 1  # failed at round 9, after checkpoints at rounds 4 and 8
    plot_run(out)
    written = {str(p.relative_to(out)) for p in out.rglob("*")}
    assert {"checkpoint/state.pt", "checkpoint/journal/000001.pt",
            "parts/rounds/part-000001.parquet", "plots/round_durations.png"} <= written
    assert cli([scenario, "--out", out, "--overwrite", "--quiet"], capsys)[0] == 0
    assert cli([scenario, "--out", fresh, "--quiet"], capsys)[0] == 0
    assert {p.name for p in out.rglob("*")} == {p.name for p in fresh.rglob("*")}


def test_overwrite_leaves_a_locked_run_untouched(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert cli([scenario, "--out", out, "--quiet"], capsys)[0] == 0
    before = tree(out)
    with run_lock(out):  # another process works on the run
        code, err, _ = cli([scenario, "--out", out, "--overwrite", "--quiet"], capsys)
    assert code == 2 and "another process is working on this run" in err
    assert {k: v for k, v in tree(out).items() if k != "checkpoint/lock"} == before


@pytest.mark.parametrize("where", ["file", "proc"])
def test_out_onto_a_file_or_where_nothing_can_be_written(
        where: str, scenario: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "a_file"
    target.write_text("keep")
    out = target if where == "file" else Path("/proc/simfl_run")
    code, err, _ = cli([scenario, "--out", out, "--quiet"], capsys)
    assert code == 2 and str(out) in err and err.count("\n") == 1
    assert target.read_text() == "keep"


def test_trace_and_compare_refuse_to_replace_a_file_unless_told(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert cli([scenario, "--out", out, "--quiet"], capsys)[0] == 0
    rounds = out / "rounds.parquet"
    before = rounds.read_bytes()
    code, err, _ = cli(["trace", scenario, "--out", rounds], capsys)
    assert code == 2 and "exists (use --overwrite" in err
    assert rounds.read_bytes() == before
    png = tmp_path / "compare.png"
    png.write_bytes(b"mine")
    code, err, _ = cli(["plot", out, "--compare", png], capsys)
    assert code == 2 and str(png) in err and png.read_bytes() == b"mine"
    code, err, _ = cli(["plot", out, "--compare", tmp_path / "nowhere" / "c.png"], capsys)
    assert code == 2 and "does not exist" in err
    trace = tmp_path / "trace.parquet"
    assert cli(["trace", scenario, "--out", trace], capsys)[0] == 0
    assert cli(["trace", scenario, "--out", trace, "--overwrite"], capsys)[0] == 0


def test_resume_with_a_truncated_part_file_names_it(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code, _, _ = cli([scenario, "--out", out, "--quiet", "--set", "train.lr=1e30"], capsys)
    assert code == 1  # failed with its checkpoint and parts kept
    part = sorted((out / "parts" / "clients").glob("part-*.parquet"))[0]
    part.write_bytes(part.read_bytes()[:20])
    code, err, _ = cli(["resume", out, "--quiet"], capsys)
    assert code == 2 and "parts/clients" in err and err.count("\n") == 1


def test_collect_before_any_run_finished_says_so(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "s.sweep.toml"
    sweep.write_text(f'scenario = "{scenario.name}"\nseeds = [0, 1]\n')
    code, err, _ = cli(["collect", sweep], capsys)
    assert code == 2 and "no run of sweep" in err


def test_a_sweep_with_a_repeated_seed_is_refused(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "s.sweep.toml"
    sweep.write_text(f'scenario = "{scenario.name}"\nseeds = [0, 0]\n')
    code, err, _ = cli(["sweep", sweep], capsys)
    assert code == 2 and "repeats a seed" in err


def test_a_mistyped_command_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    code, err, _ = cli(["resum", "results/x"], capsys)
    assert code == 2 and "did you mean 'resume'" in err


@pytest.mark.parametrize("args, named", [
    (["sweep", "s.sweep.toml", "--shard", "3/2"], "--shard"),
    (["plot"], "run_dirs"),
    (["tiny.toml", "--bogus"], "--bogus"),
    (["data", "femnist", "--from-leaf", "x"], "--out"),
    (["resume"], "run_dir"),
])
def test_bad_arguments_are_one_line_with_exit_status_2(
        args: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, err, _ = cli(args, capsys)
    assert code == 2 and err.count("\n") == 1 and named in err and "--help" in err, err


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for command in ("run", "resume", "plot", "trace", "sweep", "collect", "drfl", "data"):
        assert f"\n  {command} " in text


def test_ctrl_c_on_a_sequential_sweep_stops_it_with_one_line(
        scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import os
    import signal

    from simfl.train.learner import Learner

    train = Learner.train

    def interrupt(self: Learner, round_idx: int, client_idx: np.ndarray) -> np.ndarray:
        if round_idx == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return train(self, round_idx, client_idx)

    monkeypatch.setattr(Learner, "train", interrupt)
    monkeypatch.chdir(tmp_path)  # results/ of the sweep
    sweep = tmp_path / "s.sweep.toml"
    sweep.write_text(f'scenario = "{scenario.name}"\nseeds = [0, 1]\n')
    code, err, _ = cli(["sweep", sweep, "--backend", "sequential", "--quiet"], capsys)
    assert code == 128 + signal.SIGINT
    assert err.count("\n") == 1 and "continue with: python -m simfl sweep" in err
    runs = tmp_path / "results" / "s.sweep"
    assert json.loads((runs / "seed=0" / "manifest.json").read_text())["status"] == "interrupted"
    assert not (runs / "seed=1").exists()  # the sweep stopped; it did not go on


def test_plot_refuses_a_sweep_folder_instead_of_pooling_its_runs(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "sweep"
    assert cli([scenario, "--out", sweep / "seed=0", "--quiet"], capsys)[0] == 0
    code, err, _ = cli(["plot", sweep], capsys)
    assert code == 2 and "a sweep's folder" in err
    code, err, _ = cli(["plot", tmp_path / "nothing"], capsys)
    assert code == 2 and "not a run directory" in err


# --- memory, an edited manifest, output paths, disk full, signals, sweeps (issue 56) ---


def test_the_memory_guard_refuses_a_run_beyond_the_limit_set_and_names_the_key(
        scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    monkeypatch.setenv(LIMIT_ENV, str(2**20))  # 1 MiB: less than the tiny run's features
    code, err, wall_s = cli([scenario, "--out", out, "--quiet"], capsys)
    assert code == 2 and err.count("\n") == 1 and "'data.synthetic.num_clients' = 40" in err
    assert f"${LIMIT_ENV}" in err and wall_s < 10 and not out.exists()
    monkeypatch.setenv(LIMIT_ENV, str(2**30))
    assert cli([scenario, "--out", out, "--quiet"], capsys)[0] == 0


def test_the_synthetic_estimate_counts_the_samples_a_client_really_gets() -> None:
    from simfl.data.synthetic import generate, mean_samples
    from simfl.rng import Streams
    from simfl.scenario import SyntheticConfig

    cfg = SyntheticConfig(num_clients=400, dim=2)
    drawn = generate(cfg, Streams(0)).num_samples.mean()
    assert mean_samples(cfg) == pytest.approx(237, abs=2)  # was taken as 50 (min_samples)
    assert drawn == pytest.approx(mean_samples(cfg), rel=0.15)


def _failed_run_with_checkpoints(scenario: Path, out: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = cli([scenario, "--out", out, "--quiet", "--set", "server.deadline_s=0.001"],
                     capsys)
    assert code == 1  # failed at round 9, with checkpoints at rounds 4 and 8


@pytest.mark.parametrize("key, value, named", [
    ("aggregator.theta", 0.9, "aggregator.theta = 0.9, the run started with 0.5"),
    ("train.lr", 0.5, "train.lr = 0.5, the run started with 0.1"),
    ("seed", 7, "seed = 7, the run started with 1"),  # was: "its data changed"
])
def test_resume_refuses_a_manifest_whose_scenario_was_edited(
        key: str, value: float, named: str, scenario: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    _failed_run_with_checkpoints(scenario, out, capsys)
    manifest = json.loads((out / "manifest.json").read_text())
    *parents, leaf = key.split(".")
    table = manifest["scenario"]
    for part in parents:
        table = table[part]
    table[leaf] = value
    (out / "manifest.json").write_text(json.dumps(manifest))
    before = tree(out)
    code, err, wall_s = cli(["resume", out, "--quiet"], capsys)
    assert code == 2 and err.count("\n") == 1 and named in err, err
    assert err.count("the run started with") == 1  # no other key (tuples read back as lists)
    assert tree(out) == before and wall_s < 10


def test_resume_refuses_an_edited_manifest_before_its_first_checkpoint(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code, _, _ = cli([scenario, "--out", out, "--quiet", "--set", "server.deadline_s=0.001",
                      "--set", "run.checkpoint_every=0"], capsys)
    assert code == 1
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["scenario"]["aggregator"]["theta"] = 0.9
    (out / "manifest.json").write_text(json.dumps(manifest))
    code, err, _ = cli(["resume", out, "--quiet"], capsys)
    assert code == 2 and "edited" in err and "sha256" in err


def test_resume_of_an_unedited_manifest_goes_on(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    _failed_run_with_checkpoints(scenario, out, capsys)
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps(manifest, indent=4))  # reformatted only
    code, err, _ = cli(["resume", out, "--quiet"], capsys)
    assert code == 1 and "run failed" in err  # the same deadline fails it again


@pytest.mark.parametrize("where", ["long name", "long --out", "proc", "empty --out",
                                   "not UTF-8"])
def test_an_output_path_the_os_refuses_is_one_line_and_exit_2(
        where: str, scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # results/<name>
    args: list[object] = [scenario, "--quiet"]
    named = {"long name": "255", "long --out": "255", "proc": "/proc",
             "empty --out": "must not be empty", "not UTF-8": "UTF-8"}[where]
    if where == "long name":
        args += ["--set", f'name="{"n" * 300}"']
    elif where == "long --out":
        args += ["--out", tmp_path / ("d" * 256) / "run"]
    elif where == "proc":
        args += ["--out", "/proc"]
    elif where == "empty --out":
        args += ["--out", ""]
    else:
        args += ["--out", str(tmp_path / os.fsdecode(b"run\xff"))]
    code, err, wall_s = cli(args, capsys)
    assert code == 2 and err.count("\n") == 1 and named in err, err
    assert wall_s < 10 and list(tmp_path.iterdir()) == [scenario]


def test_outputs_in_a_folder_that_refuses_writes_are_refused_before_any_is_written(
        scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import tempfile

    out = tmp_path / "run"
    assert cli([scenario, "--out", out, "--quiet"], capsys)[0] == 0
    read_only = tmp_path / "ro"
    read_only.mkdir()
    mkstemp = tempfile.mkstemp

    def refuse(*args: object, dir: str | Path, **kwargs: object) -> tuple[int, str]:
        if Path(dir) == read_only or Path(dir) == out:  # a read-only folder (as non-root)
            raise PermissionError(13, "Permission denied")
        return mkstemp(*args, dir=dir, **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    for args, named in [
        ([scenario, "--out", read_only / "run", "--quiet"], "ro/run"),  # once: at the lock
        (["plot", out], "Permission denied"),
        (["plot", tmp_path / "run", "--compare", "/proc/x.png"], "/proc/x.png"),
        (["trace", scenario, "--out", "/proc/x.parquet"], "/proc/x.parquet"),
        (["trace", scenario, "--out", read_only / "t.parquet"], "t.parquet"),
        (["data", "femnist", "--from-leaf", tmp_path, "--out", "/proc/x.npz"], "/proc/x.npz"),
    ]:
        code, err, _ = cli(args, capsys)
        assert code == 2 and err.count("\n") == 1 and named in err, (args, err)
    assert not (out / "plots").exists() and list(read_only.iterdir()) == []


@pytest.mark.slow
def test_a_full_disk_fails_the_run_with_its_reason_and_resume_finishes_it_unchanged(
        scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import errno

    import pyarrow.parquet as pq

    write_table, calls = pq.write_table, []

    def full(table: object, where: object, **kwargs: object) -> None:
        calls.append(where)
        write_table(table, where, **kwargs)
        if len(calls) == 8:  # the disk fills during a part of the run's second checkpoint
            raise OSError(errno.ENOSPC, "No space left on device", str(where))

    out, fresh = tmp_path / "run", tmp_path / "fresh"
    monkeypatch.setattr(pq, "write_table", full)
    code, err, _ = cli([scenario, "--out", out, "--quiet"], capsys)
    monkeypatch.setattr(pq, "write_table", write_table)
    manifest = json.loads((out / "manifest.json").read_text())
    assert code == 1 and err.count("\n") == 1 and "No space left on device" in err
    assert manifest["status"] == "failed" and "No space left on device" in manifest["reason"]
    assert not list(out.rglob("*.tmp"))
    assert cli(["resume", out, "--quiet"], capsys)[0] == 0
    assert cli([scenario, "--out", fresh, "--quiet"], capsys)[0] == 0
    assert {k: v for k, v in tree(out).items() if k.endswith(".parquet")} == \
        {k: v for k, v in tree(fresh).items() if k.endswith(".parquet")}


def test_a_full_disk_that_refuses_the_failed_manifests_copy_still_records_the_reason(
        scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import errno

    import simfl.records.writer
    import simfl.rundir

    write_atomically = simfl.rundir.write_atomically
    out = tmp_path / "run"
    calls: list[Path] = []

    def no_room(path: Path, write: object) -> None:
        calls.append(path)
        if path.name == "part-000001.parquet" or (calls.count(path) > 1
                                                  and path.name == "manifest.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        write_atomically(path, write)  # type: ignore[arg-type]

    monkeypatch.setattr(simfl.rundir, "write_atomically", no_room)
    monkeypatch.setattr(simfl.records.writer, "write_atomically", no_room)
    code, err, _ = cli([scenario, "--out", out, "--quiet"], capsys)
    manifest = json.loads((out / "manifest.json").read_text())
    assert code == 1 and "No space left on device" in err
    assert manifest["status"] == "failed" and "No space left on device" in manifest["reason"]


def test_a_file_size_limit_fails_the_run_with_the_os_reason(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import resource

    out = tmp_path / "run"
    before = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, before[1]))  # (ulimit -f)
    try:
        code, err, _ = cli([scenario, "--out", out, "--quiet"], capsys)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, before)
    manifest = json.loads((out / "manifest.json").read_text())
    assert code == 1 and "File too large" in err and "unexpected pos" not in err, err
    assert manifest["status"] == "failed" and "File too large" in manifest["reason"]
    assert not list(out.rglob("*.tmp"))


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_a_stop_signal_after_the_manifest_says_complete_changes_nothing(
        signum: str, scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import signal

    from simfl.records import Recorder

    remove_parts = Recorder.remove_parts

    def stopped(self: Recorder) -> None:
        os.kill(os.getpid(), getattr(signal, signum))
        remove_parts(self)

    monkeypatch.setattr(Recorder, "remove_parts", stopped)
    out = tmp_path / "run"
    code, err, _ = cli([scenario, "--out", out, "--quiet"], capsys)
    assert code == 0 and err == ""
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
    assert not (out / "parts").exists() and not (out / "checkpoint").exists()


def _crash_seed_0(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of seed 0 crash in their first round (a bug, not bad input)."""
    from simfl.train.learner import Learner

    train = Learner.train

    def crash(self: Learner, round_idx: int, client_idx: np.ndarray) -> np.ndarray:
        if self.work.streams.root_seed == 0:
            raise ZeroDivisionError("float division by zero")
        return train(self, round_idx, client_idx)

    monkeypatch.setattr(Learner, "train", crash)


def test_a_crashing_run_is_one_failed_run_of_its_sweep(
        scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _crash_seed_0(monkeypatch)
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "s.sweep.toml"
    sweep.write_text(f'scenario = "{scenario.name}"\nseeds = [0, 1]\n')
    code, err, _ = cli(["sweep", sweep, "--backend", "sequential", "--quiet"], capsys)
    runs = tmp_path / "results" / "s.sweep"
    assert code == 1 and "Traceback" not in err
    crashed = json.loads((runs / "seed=0" / "manifest.json").read_text())
    assert crashed["status"] == "failed" and "ZeroDivisionError" in crashed["reason"]
    assert json.loads((runs / "seed=1" / "manifest.json").read_text())["status"] == "complete"


def test_a_tuning_whose_only_grid_point_crashes_has_no_choice(
        scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _crash_seed_0(monkeypatch)
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "t.tune.toml"
    spec.write_text(f'scenario = "{scenario.name}"\ncriterion = "train_loss"\nseeds = [0]\n'
                    '[grid]\n"train.lr" = [0.1]\n')
    code, err, _ = cli(["tune", spec, "--backend", "sequential", "--quiet"], capsys)
    assert code == 1 and "no choice" in err and "Traceback" not in err


def test_plot_level_must_be_an_error_level(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert cli([scenario, "--out", out, "--quiet"], capsys)[0] == 0
    for level in ("nan", "-1", "2"):
        code, err, _ = cli(["plot", out, "--level", level], capsys)
        assert code == 2 and "--level" in err and err.count("\n") == 1
    assert not (out / "plots").exists()


def test_a_huge_cohort_is_every_device_not_a_minibatch_plan_of_local_epochs(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code, err, _ = cli([scenario, "--out", out, "--quiet", "--set",
                        "server.clients_per_round=1000000000", "--set", "server.num_rounds=2"],
                       capsys)
    assert code == 0 and "local_epochs" not in err, err


@pytest.mark.parametrize("bad, named", [
    ("dev zero", "not a regular file"),
    ("random bytes", "not an .npz archive"),
])
def test_a_bad_data_file_is_named_for_what_it_is(
        bad: str, named: str, scenario: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = Path("/dev/zero")
    if bad == "random bytes":
        path = tmp_path / "femnist.npz"
        path.write_bytes(np.random.default_rng(0).bytes(4096))
    code, err, _ = cli([scenario, "--out", tmp_path / "run", "--quiet", "--set",
                        'data.dataset="femnist"', "--set", f'data.path="{path}"'], capsys)
    assert code == 2 and err.count("\n") == 1 and named in err and "allow_pickle" not in err


def test_a_bad_csv_trace_is_one_line_without_the_readers_advice(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text("client_idx,t_on_s,t_off_s\n0,1,2\n1,abc,3\n")
    code, err, _ = cli([scenario, "--out", tmp_path / "run", "--quiet", "--set",
                        'population.availability.mode="trace"', "--set",
                        f'population.availability.trace_path="{trace}"'], capsys)
    assert code == 2 and err.count("\n") == 1 and "abc" in err and "\\n" not in err


def test_numpy_warnings_do_not_print_before_simfls_line(
        scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from simfl.errors import InputError

    def overflowing(*args: object) -> None:
        np.exp(np.array([1e4]))  # RuntimeWarning: overflow encountered in exp
        raise InputError("'some.key' = 1e4: refused")

    monkeypatch.setattr(simfl.runs.build, "load_data", overflowing)
    code, err, _ = cli([scenario, "--out", tmp_path / "run", "--quiet"], capsys)
    assert code == 2 and err == "simfl: error: 'some.key' = 1e4: refused\n"
