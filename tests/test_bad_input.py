"""Bad input and runs that cannot make progress (issue 19), through the command line.

Each case is a reproduction a user ran into: it must end with the documented exit
status (2: bad input, nothing written; 1: the run failed during its work, its manifest
says why) and a one-line message naming the key or file, within seconds of wall time,
and must never delete or replace what simfl did not write.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import simfl.run
from simfl.checkpoint import run_lock
from simfl.cli import main
from simfl.plots.runs import plot_run
from simfl.run import MAX_AVAILABILITY_HOURS

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
    "a wait that would look again 8.6e7 times": (
        ["server.wait_poll_s=0.001"], 2, "server.wait_poll_s"),
}


@pytest.mark.parametrize("case", CASES)
def test_each_reproduction_ends_fast_with_its_exit_status_and_names_the_key(
        case: str, scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
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
    # the run failed are not counted); devices busy with a late task are not selected
    late = health["updates_by_status"]["late"]
    assert set(health["updates_by_status"]) == {"late"} and 0 < late <= 60
    assert "rounds 0-9" in err


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

    monkeypatch.setattr(simfl.run, "load_data", interrupted)
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
        (outside / "journal" / "000000.pkl").write_text("mine")
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


def test_overwrite_replaces_a_failed_run_with_its_checkpoint_parts_and_plots(
        scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, fresh = tmp_path / "run", tmp_path / "fresh"
    code, _, _ = cli([scenario, "--out", out, "--quiet", "--set", "server.deadline_s=0.001"],
                     capsys)
    assert code == 1  # failed at round 9, after checkpoints at rounds 4 and 8
    plot_run(out)
    written = {str(p.relative_to(out)) for p in out.rglob("*")}
    assert {"checkpoint/state.pt", "checkpoint/journal/000001.pkl",
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
