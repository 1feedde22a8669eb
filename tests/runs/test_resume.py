"""Reproducible, resumable, fail-safe runs (issue 7).

A run killed (SIGKILL, at a random round or in the middle of a checkpoint) or stopped
(SIGINT / SIGTERM) and then resumed ends with exactly the files of an uninterrupted
run; the same seed gives the same bytes whatever the global RNGs hold; a NaN/Inf
update is dropped and logged; a NaN/Inf global model fails the run and keeps the last
good checkpoint.
"""

from __future__ import annotations

import ast
import dataclasses
import fcntl
import json
import logging
import os
import pickle
import pickletools
import random
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl
import pytest
import torch

import simfl.runs.build
import simfl.runs.run
from simfl.aggregate import Aggregator, Combined, RoundInputs, make_aggregator
from simfl.cli import main
from simfl.data import FederatedData, load_data
from simfl.plots.runs import plot_run
from simfl.plots.study import plot_run_bias
from simfl.quantile.estimators import Cohort
from simfl.records import TableWriter, read_table
from simfl.rng import Streams
from simfl.rundir import CHECKPOINT_DIR, PARTS_DIR, RUN_PLOTS, STATE_FILE
from simfl.runs import checkpoint, plain, replay
from simfl.scenario import AggregatorConfig, DataConfig, from_dict
from simfl.sim import interface
from simfl.sim.server import LearnerLike
from simfl.train.learner import Learner
from simfl.train.threshold import PanelFilter

NUM_ROUNDS = 9
# Δ-FL with shadow estimators (IPW keeps check-in counts), over-selection on a diurnal
# population: stragglers of a round are still transferring when later rounds run, so
# checkpoints fall while work is pending. Checkpoints after rounds 2, 4, 6 and 8.
SCENARIO = f"""
seed = {{seed}}
[data.synthetic]
num_clients = 80
[model]
name = "linear"
[train]
lr = 0.05
batch_size = 1000
backend = "{{backend}}"
[aggregator]
name = "{{aggregator}}"
[estimator]
shadow = ["ipw", "tracking"]
bias_every = 2
[server]
num_rounds = {NUM_ROUNDS}
clients_per_round = 5
over_selection = 0.5
[eval]
every = 3
batch_size = 8192
[run]
checkpoint_every = 2
[population.availability]
mode = "diurnal"
horizon_s = 86400.0
"""
VOLATILE = {"started_at", "wall_s", "resumes", "peak_rss_mb",
            "train_backend"}  # machine facts (auto's measured choice), in the manifest only

# Run the CLI in a child that SIGKILLs itself: "train R" just before round R trains;
# "commit N" while writing checkpoint N, after its parts and journal, before its state;
# "merge I" when the finished run merges its I-th table (the ones before are merged).
KILLER = """
import os, signal, sys
from simfl import records
from simfl.runs import checkpoint
from simfl.cli import main
from simfl.plots.runs import plot_run
from simfl.train import learner

where, at = sys.argv[1], int(sys.argv[2])
if where == "train":
    train = learner.Learner.train
    def patched(self, round_idx, client_idx):
        if round_idx == at:
            os.kill(os.getpid(), signal.SIGKILL)
        return train(self, round_idx, client_idx)
    learner.Learner.train = patched
elif where == "merge":
    merge = records.TableWriter.merge
    def patched(self):
        if self.name == list(records.SCHEMAS)[at]:
            os.kill(os.getpid(), signal.SIGKILL)
        merge(self)
    records.TableWriter.merge = patched
else:
    write, states = checkpoint.write_atomically, []
    def patched(path, fn):
        if path.name == "state.pt":
            states.append(path)
            if len(states) == at:
                os.kill(os.getpid(), signal.SIGKILL)
        write(path, fn)
    checkpoint.write_atomically = patched
sys.exit(main(sys.argv[3:]))
"""


def write_scenario(directory: Path, seed: int = 3, aggregator: str = "deltafl",
                   backend: str = "auto") -> Path:
    path = directory / f"s{seed}_{aggregator}_{backend}.toml"
    path.write_text(SCENARIO.format(seed=seed, aggregator=aggregator, backend=backend))
    return path


def run(scenario: Path, out: Path) -> int:
    return main([str(scenario), "--out", str(out), "--quiet"])


def resume(out: Path) -> int:
    return main(["resume", str(out), "--quiet"])


def run_killed(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", KILLER, *args], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def manifest(run_dir: Path) -> dict[str, Any]:
    return dict(json.loads((run_dir / "manifest.json").read_text()))


def files(run_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))


def assert_same_files(got: Path, want: Path) -> None:
    """Every file byte for byte; the manifest up to its wall-clock entries."""
    assert files(got) == files(want)
    for name in files(want):
        if name == "manifest.json":
            strip = lambda m: {k: v for k, v in m.items() if k not in VOLATILE}  # noqa: E731
            assert strip(manifest(got)) == strip(manifest(want))
        else:
            assert (got / name).read_bytes() == (want / name).read_bytes(), name


def checkpoint_state(run_dir: Path) -> dict[str, Any]:
    path = run_dir / CHECKPOINT_DIR / STATE_FILE
    return dict(plain.decode(torch.load(path, weights_only=True)))


def save_checkpoint_state(run_dir: Path, state: dict[str, Any]) -> None:
    torch.save(plain.encode(state), run_dir / CHECKPOINT_DIR / STATE_FILE)


def assert_committed_prefix(run_dir: Path, baseline: Path) -> None:
    """A killed run's tables are readable and hold a prefix of the full run's rows."""
    for table in ("rounds", "clients", "comm", "eval", "bias"):
        rows = read_table(run_dir, table)
        assert rows.equals(pl.read_parquet(baseline / f"{table}.parquet").head(rows.height))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_scenario(tmp_path_factory.mktemp("scenario"))


@pytest.fixture(scope="module")
def baseline(scenario: Path) -> Path:
    """The uninterrupted run."""
    out = scenario.parent / "baseline"
    assert run(scenario, out) == 0
    clients = pl.read_parquet(out / "clients.parquet")
    rounds = pl.read_parquet(out / "rounds.parquet")
    # The scenario does what it is for: stragglers outlive their round.
    late = clients.filter(pl.col("status") == "late").join(
        rounds.select("round", "t_end_s"), on="round")
    assert (late["t_done_s"] > late["t_end_s"]).any()
    return out


# ---- determinism --------------------------------------------------------------------------


@pytest.mark.slow
def test_same_seed_same_bytes_whatever_the_global_rngs_other_seed_other_rows(
        scenario: Path, baseline: Path, tmp_path: Path) -> None:
    np.random.seed(12345)  # noqa: NPY002  (the global state the runs must ignore)
    random.seed(12345)
    torch.manual_seed(12345)
    again = tmp_path / "again"
    assert run(scenario, again) == 0
    assert_same_files(again, baseline)
    other = tmp_path / "other"
    assert run(write_scenario(tmp_path, seed=4), other) == 0
    for table in ("rounds", "clients", "eval"):
        assert not pl.read_parquet(other / f"{table}.parquet").equals(
            pl.read_parquet(baseline / f"{table}.parquet")), table


GLOBAL_RNG_CALLS = {"seed", "rand", "randn", "randint", "random", "choice", "shuffle",
                    "permutation", "normal", "uniform", "default_rng", "manual_seed",
                    "randperm", "rand_like", "randn_like", "randint_like", "bernoulli",
                    "multinomial", "exponential", "get_rng_state", "set_rng_state"}


def global_rng_uses(path: Path) -> list[str]:
    """Calls that draw from (or seed) numpy's, torch's or Python's global generators."""
    uses = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            uses += [f"import {n}" for n in names if n == "random"]
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner, name = ast.unparse(node.func.value), node.func.attr
        explicit = any(k.arg == "generator" for k in node.keywords)
        if name in GLOBAL_RNG_CALLS and owner in ("np.random", "numpy.random", "torch",
                                                  "random") and not explicit:
            uses.append(f"line {node.lineno}: {owner}.{name}")
    return uses


def test_library_code_never_touches_a_global_rng() -> None:
    package = Path(simfl.__file__).parent
    found = {str(p.relative_to(package)): u for p in sorted(package.rglob("*.py"))
             if (u := global_rng_uses(p))}
    assert found == {}


def test_the_rng_check_catches_global_draws(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import random\nimport numpy as np\nimport torch\n"
                   "a = np.random.rand(3)\nb = torch.randperm(4)\n"
                   "c = torch.randperm(4, generator=g)\nd = rng.normal()\n")
    assert global_rng_uses(bad) == ["import random", "line 4: np.random.rand",
                                    "line 5: torch.randperm"]


# ---- kill and resume ----------------------------------------------------------------------


def assert_checkpointed_before(run_dir: Path, kill_round: int, baseline: Path) -> None:
    """Killed as round ``kill_round`` was to train: the last checkpoint is the one after
    round kill_round - kill_round % 2 (one every two rounds; none before round 2), and the
    rows on disk are a prefix of the full run's, of the rounds before it."""
    last = kill_round - kill_round % 2
    state = run_dir / CHECKPOINT_DIR / STATE_FILE
    assert checkpoint_state(run_dir)["rounds_done"] == last if last else not state.exists()
    assert_committed_prefix(run_dir, baseline)
    assert (read_table(run_dir, "rounds")["round"] < last).all()


# (kill, kill of the resumed run): before any checkpoint, then between two; at the round
# right after a checkpoint, then in the last round
@pytest.mark.parametrize("first, second", [(1, 5), (4, 8)])
@pytest.mark.slow
def test_sigkill_at_a_round_then_resume_gives_the_uninterrupted_files(
        scenario: Path, baseline: Path, tmp_path: Path, first: int, second: int) -> None:
    out = tmp_path / "run"
    run_killed(["train", str(first), str(scenario), "--out", str(out), "--quiet"])
    assert manifest(out)["status"] == "running"  # SIGKILL leaves no time to say more
    assert_checkpointed_before(out, first, baseline)
    run_killed(["train", str(second), "resume", str(out), "--quiet"])
    assert_checkpointed_before(out, second, baseline)
    assert resume(out) == 0
    assert manifest(out)["status"] == "complete"
    assert_same_files(out, baseline)


@pytest.mark.slow
def test_sigkill_while_committing_a_checkpoint_resumes_from_the_previous_one(
        scenario: Path, baseline: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_killed(["commit", "2", str(scenario), "--out", str(out), "--quiet"])
    state = checkpoint_state(out)
    assert state["rounds_done"] == 2 and state["journal_segments"] == 1
    # the second checkpoint's parts and journal are on disk, uncommitted
    assert (out / CHECKPOINT_DIR / "journal" / "000001.pt").is_file()
    assert len(list((out / PARTS_DIR / "rounds").glob("*.parquet"))) == 2
    assert state["tables"]["rounds"].num_parts == 1
    # no class of simfl is pickled: every global the checkpoint files name is torch's
    # tensor rebuilding (what weights_only allows), so moving or renaming simfl's classes
    # keeps checkpoints readable and reading one runs nothing it names
    assert {g.split()[0] for g in pickled_globals(out)} <= {"torch._utils", "torch",
                                                             "collections"}
    assert resume(out) == 0
    assert_same_files(out, baseline)


def pickled_globals(run_dir: Path) -> set[str]:
    """Every global ("module name") the pickles inside a run's checkpoint files name."""
    directory = run_dir / CHECKPOINT_DIR
    files = [directory / STATE_FILE, *sorted((directory / "journal").glob("*.pt"))]
    found: set[str] = set()
    for path in files:
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                if name.endswith("/data.pkl"):
                    ops = list(pickletools.genops(archive.read(name)))
                    found |= {str(arg) for op, arg, _ in ops if op.name == "GLOBAL"}
                    # protocol 2+: STACK_GLOBAL takes the two strings before it
                    strings = [arg for op, arg, _ in ops if "UNICODE" in op.name]
                    assert not any(op.name == "STACK_GLOBAL" for op, _, _ in ops), strings
    return found


def stopped_in_round_3(scenario: Path, out: Path) -> Path:
    """``scenario`` run into ``out`` and stopped by SIGINT in round 3 (a checkpoint after
    round 4)."""
    with pytest.MonkeyPatch.context() as patch:
        interrupt_round_3(patch)
        assert run(scenario, out) == 128 + signal.SIGINT
    return out


def interrupt_round_3(patch: pytest.MonkeyPatch) -> None:
    """SIGINT as round 3 trains: the run finishes the round, checkpoints, stops."""
    train = Learner.train

    def interrupting(self: Learner, round_idx: int, client_idx: np.ndarray) -> np.ndarray:
        if round_idx == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return train(self, round_idx, client_idx)

    patch.setattr(Learner, "train", interrupting)
    patch.setattr(checkpoint, "STOP_GRACE_S", 60.0)  # the round ends, however loaded


@pytest.fixture(scope="module")
def interrupted(scenario: Path, baseline: Path) -> Path:
    """The run stopped by SIGINT during round 3 (:func:`interrupt_round_3`)."""
    out = scenario.parent / "interrupted"
    with pytest.MonkeyPatch.context() as patch:
        interrupt_round_3(patch)
        assert run(scenario, out) == 128 + signal.SIGINT
    return out


@pytest.fixture
def copy_of(tmp_path: Path) -> Iterator[Any]:
    def copy(run_dir: Path) -> Path:
        return Path(shutil.copytree(run_dir, tmp_path / run_dir.name))

    yield copy


def test_sigint_finishes_the_round_checkpoints_and_resumes_to_the_same_files(
        interrupted: Path, baseline: Path, copy_of: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    info = manifest(interrupted)
    assert info["status"] == "interrupted"
    assert info["reason"] == "RunInterrupted: SIGINT: stopped with a checkpoint after round 4"
    assert checkpoint_state(interrupted)["rounds_done"] == 4  # the round in flight finished
    assert_committed_prefix(interrupted, baseline)
    out = copy_of(interrupted)
    capsys.readouterr()
    assert resume(out) == 0
    assert capsys.readouterr().err == ""
    (session,) = manifest(out)["resumes"]  # where the resumed session ran is recorded
    assert (session["from_round"], session["device"]) == (4, "cpu")
    assert session["host"] == {"cpus": os.cpu_count(), "torch_threads": 1}
    assert_same_files(out, baseline)


def test_a_resumed_run_is_running_without_the_last_sessions_ending(
        interrupted: Path, copy_of: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert {"reason", "health"} <= manifest(interrupted).keys()
    out = copy_of(interrupted)
    simulate, seen = simfl.runs.run.simulate, []

    def looking(*args: Any, **kwargs: Any) -> Any:
        seen.append(manifest(out))  # as the resumed session begins to run
        return simulate(*args, **kwargs)

    monkeypatch.setattr(simfl.runs.run, "simulate", looking)
    assert resume(out) == 0
    (running,) = seen
    assert running["status"] == "running"
    assert "reason" not in running and "health" not in running
    assert manifest(out)["health"]["rounds"] == manifest(interrupted)["scenario"]["server"][
        "num_rounds"]


def test_a_run_does_not_resume_where_its_device_speeds_would_come_from_elsewhere(
        interrupted: Path, copy_of: Any, capsys: pytest.CaptureFixture[str]) -> None:
    out = copy_of(interrupted)
    info = manifest(out)
    speeds = info["device_speeds"]
    assert speeds["speeds"] in ("benchmark", "lognormal")
    elsewhere = {"benchmark": "lognormal", "lognormal": "benchmark"}[speeds["speeds"]]
    info["device_speeds"] = {**speeds, "speeds": elsewhere}  # as if started on another machine
    (out / "manifest.json").write_text(json.dumps(info))
    resume_refused(out, capsys, "device speeds", "SIMFL_DATA_DIR/devices")


def resume_refused(out: Path, capsys: pytest.CaptureFixture[str], *named: str) -> None:
    """``resume out`` exits 2 with one line naming each of ``named``, touching nothing."""
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert resume(out) == 2
    err = capsys.readouterr().err
    assert all(name in err for name in named) and len(err.splitlines()) == 1, err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # untouched


def test_a_run_does_not_resume_on_another_trace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    trace, out = tmp_path / "trace.csv", tmp_path / "run"
    trace.write_text("client_idx,t_on_s,t_off_s\n" + "".join(
        f"{k},0,{1e7}\n" for k in range(40)))  # the 40 training devices
    traced = write_scenario(tmp_path)
    traced.write_text(traced.read_text().replace(
        'mode = "diurnal"', f'mode = "trace"\ntrace_path = "{trace}"').replace(
        "horizon_s = 86400.0\n", ""))
    interrupt_round_3(monkeypatch)
    assert run(traced, out) == 128 + signal.SIGINT
    monkeypatch.undo()
    original = trace.read_text()
    trace.write_text(original.replace(f"39,0,{1e7}", "39,0,100.0"))  # one device's hours
    resume_refused(out, capsys, "availability trace", "changed")
    trace.write_text(original)
    assert resume(out) == 0


def test_a_run_does_not_resume_on_other_data(interrupted: Path, copy_of: Any,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = copy_of(interrupted)
    info = manifest(out)
    assert len(info["inputs"]["data"]) == 64 and info["inputs"]["trace"] is None
    info["inputs"]["data"] = "0" * 64  # as if its data file had been replaced
    (out / "manifest.json").write_text(json.dumps(info))
    resume_refused(out, capsys, "its data", "changed")


def test_the_data_fingerprint_follows_devices_counts_and_labels() -> None:
    data = load_data(DataConfig(), Streams(0))
    same = load_data(DataConfig(), Streams(0))
    assert data.fingerprint() == same.fingerprint()
    y = data.train.y.clone()
    y[0] = (y[0] + 1) % data.num_classes
    relabelled = dataclasses.replace(data, train=dataclasses.replace(data.train, y=y))
    offsets = data.train.offsets.copy()
    offsets[1] += 1  # one sample moves from device 1 to device 0
    moved = dataclasses.replace(data, train=dataclasses.replace(data.train, offsets=offsets))
    assert len({data.fingerprint(), relabelled.fingerprint(), moved.fingerprint(),
                load_data(DataConfig(), Streams(1)).fingerprint()}) == 4


def test_wall_time_adds_up_over_the_sessions_of_a_run(interrupted: Path, copy_of: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    before = checkpoint_state(interrupted)["wall_s"]  # worked up to the checkpoint
    assert 0 < before <= manifest(interrupted)["wall_s"]
    out = copy_of(interrupted)
    clock = iter([100.0] + [107.5] * 1000)  # the resumed session takes 7.5 s
    monkeypatch.setattr(simfl.runs.run, "time", SimpleNamespace(
        perf_counter=lambda: next(clock), strftime=simfl.runs.run.time.strftime))
    assert resume(out) == 0
    assert manifest(out)["wall_s"] == round(before + 7.5, 3)


def test_a_second_signal_stops_at_once_and_the_last_checkpoint_still_resumes(
        scenario: Path, baseline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    train = Learner.train

    def terminate_twice(self: Learner, round_idx: int, client_idx: np.ndarray) -> np.ndarray:
        if round_idx == 5:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
        return train(self, round_idx, client_idx)

    monkeypatch.setattr(Learner, "train", terminate_twice)
    out = tmp_path / "run"
    assert run(scenario, out) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"python -m simfl resume {out}" in err
    assert manifest(out)["status"] == "interrupted"
    assert checkpoint_state(out)["rounds_done"] == 4
    monkeypatch.undo()
    assert resume(out) == 0
    assert_same_files(out, baseline)


@pytest.mark.slow
def test_sigterm_in_a_long_round_stops_within_a_second_and_resumes_to_the_same_files(
        scenario: Path, baseline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    train, sent = Learner.train, []

    def slow_round_5(self: Learner, round_idx: int, client_idx: np.ndarray) -> np.ndarray:
        if round_idx == 5:
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # a round far longer than the grace (a ConvNet round, a wait)
        return train(self, round_idx, client_idx)

    monkeypatch.setattr(Learner, "train", slow_round_5)
    out = tmp_path / "run"
    assert run(scenario, out) == 128 + signal.SIGTERM
    assert time.monotonic() - sent[0] < 1.0
    assert capsys.readouterr().err.count("\n") == 1
    info = manifest(out)
    assert info["status"] == "interrupted"
    assert info["reason"] == ("RunInterrupted: SIGTERM: stopped mid-round; its last "
                              "checkpoint is after round 4")
    assert checkpoint_state(out)["rounds_done"] == 4
    monkeypatch.undo()
    assert resume(out) == 0
    assert_same_files(out, baseline)


@pytest.mark.slow
def test_sigkill_while_the_finished_run_merges_its_tables_resumes_to_the_same_files(
        scenario: Path, baseline: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_killed(["merge", "2", str(scenario), "--out", str(out), "--quiet"])
    assert (out / "rounds.parquet").is_file() and not (out / "comm.parquet").exists()
    assert manifest(out)["status"] == "running"
    assert resume(out) == 0
    assert_same_files(out, baseline)


@pytest.mark.parametrize("signals", [1, 2])
def test_a_signal_while_the_tables_merge_waits_for_the_run_to_complete_a_second_stops_it(
        signals: int, scenario: Path, baseline: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    merge = TableWriter.merge

    def signalled(self: TableWriter) -> None:
        if self.name == "comm":  # rounds and clients are merged, the others not yet
            for _ in range(signals):
                os.kill(os.getpid(), signal.SIGTERM)
        merge(self)

    monkeypatch.setattr(TableWriter, "merge", signalled)
    out = tmp_path / "run"
    if signals == 1:  # the run had nothing left to stop: it completes
        assert run(scenario, out) == 0
        assert_same_files(out, baseline)
        return
    assert run(scenario, out) == 130
    assert capsys.readouterr().err.count("\n") == 1
    assert manifest(out)["status"] == "interrupted"
    monkeypatch.undo()
    assert resume(out) == 0
    assert_same_files(out, baseline)


@pytest.mark.slow
def test_an_interrupted_run_plots_from_its_parts(interrupted: Path, copy_of: Any) -> None:
    out = copy_of(interrupted)
    assert not (out / "rounds.parquet").exists()
    written = {p.name for p in plot_run(out)}
    assert {"error_vs_rounds.png", "round_durations.png"} <= written <= set(RUN_PLOTS)
    assert not (out / "bias.parquet").exists()  # Δ-FL's estimates are in parts/bias
    bias = [p.name for p in plot_run_bias(out)]
    assert bias == ["threshold_estimates.png", "bias_decomposition.png"]
    assert set(bias) <= set(RUN_PLOTS)  # figures --overwrite may replace


def test_a_journal_gives_back_answers_in_order_or_raises() -> None:
    journal = replay.Journal()
    assert journal.answer("train", lambda: np.array([1.0])) == [1.0]  # live: computed, kept
    again = replay.Journal(replay=journal.recorded, live=False)
    with pytest.raises(replay.ReplayError, match="asked the learner for select as its "
                                                 "answer 0, where the journal has train"):
        again.answer("select", lambda: None)
    assert again.answer("train", lambda: pytest.fail("computed while replaying")) == [1.0]
    assert again.exhausted
    with pytest.raises(replay.ReplayError, match="where the journal has none"):
        again.answer("train", lambda: None)


def test_a_replay_that_does_not_retrace_the_run_fails(interrupted: Path, copy_of: Any,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = copy_of(interrupted)
    state = checkpoint_state(out)
    state["t_s"] += 1.0  # as if the engine had changed since the checkpoint
    save_checkpoint_state(out, state)
    capsys.readouterr()
    assert resume(out) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run failed: the replay reached round 4 at t = " in err
    assert manifest(out)["status"] == "failed"
    assert manifest(out)["reason"].startswith("ReplayError: ")


def test_resume_refuses_bad_run_directories(interrupted: Path, baseline: Path, copy_of: Any,
                                            tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    def refused(run_dir: Path, message: str) -> None:
        capsys.readouterr()
        assert resume(run_dir) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and "Traceback" not in err

    refused(baseline, "the run is already complete")
    refused(tmp_path / "nowhere", "manifest.json: not found")
    out = copy_of(interrupted)
    with (out / CHECKPOINT_DIR / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a process still working on the run
        refused(out, "another process is working on this run")
    progress_file = out / CHECKPOINT_DIR / "progress.json"
    progress = json.loads(progress_file.read_text())
    progress_file.write_text(json.dumps({**progress, "format": checkpoint.FORMAT - 1}))
    refused(out, f"this simfl reads format {checkpoint.FORMAT}; remove {out} to run it again")
    progress_file.unlink()  # an older simfl's checkpoint: state.pt alone
    refused(out, "a checkpoint of an older simfl")
    progress_file.write_text(json.dumps(progress))
    (out / CHECKPOINT_DIR / STATE_FILE).write_bytes(b"torn")
    refused(out, "state.pt: cannot read the checkpoint")
    assert manifest(out)["status"] == "interrupted"  # refusals change nothing
    mine = out / "plots" / "mine.png"  # a user's file in the run
    mine.parent.mkdir(exist_ok=True)
    mine.write_text("precious")
    refused(out, "holds 'plots/mine.png', which simfl did not write")
    foreign = tmp_path / "foreign"  # a manifest.json simfl did not write, beside a table
    foreign.mkdir()
    (foreign / "manifest.json").write_text('{"scenario": {"server": {"num_rounds": 2}}}')
    (foreign / "eval.parquet").write_text("precious")
    refused(foreign, "not a simfl run (no simfl manifest.json)")
    assert mine.read_text() == (foreign / "eval.parquet").read_text() == "precious"
    assert sorted(p.name for p in foreign.iterdir()) == ["eval.parquet", "manifest.json"]


# ---- guarded numerics ---------------------------------------------------------------------


POISONED = np.arange(0, 40, 4)  # a quarter of the 40 training devices


def poisoned_loader(cfg: DataConfig, streams: Streams) -> FederatedData:
    """The scenario's data, with inf inputs on the POISONED training clients."""
    data = load_data(cfg, streams)
    data.train.x[torch.from_numpy(data.train.rows(POISONED))] = float("inf")
    return data


def test_a_nonfinite_update_is_dropped_and_logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    # The plain loop backend: in the batched one, padding rows read another client's
    # samples, and inf inputs there would poison everyone (real data is finite).
    monkeypatch.setattr(simfl.runs.build, "load_data", poisoned_loader)
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="simfl.train.local"):
        assert run(write_scenario(tmp_path, aggregator="fedavg", backend="loop"), out) == 0
    clients = pl.read_parquet(out / "clients.parquet")
    is_poisoned = pl.col("client_idx").is_in(POISONED.tolist())
    poisoned, others = clients.filter(is_poisoned), clients.filter(~is_poisoned)
    bad = poisoned.filter(pl.col("status") == "nonfinite")
    assert bad.height > 0 and "aggregated" not in poisoned["status"].to_list()
    # a NaN/Inf update keeps NaN (not null: null means "did not train")
    assert bad["train_loss"].null_count() == 0 and bad["train_loss"].is_nan().all()
    assert clients["loss_reported"].null_count() == clients.height  # FedAvg reports none
    assert "nonfinite" not in others["status"].to_list()
    assert others.filter(pl.col("status") == "aggregated")["train_loss"].is_finite().all()
    def messages(rows: pl.DataFrame) -> set[str]:
        return {f"round {r}: dropped the update of client {c} (NaN/Inf values)"
                for r, c in rows.select("round", "client_id").iter_rows()}

    # every poisoned update is logged when trained, including those that came too late
    logged = {r.getMessage() for r in caplog.records}
    assert messages(bad) <= logged <= messages(poisoned)
    aggregated = clients.filter(pl.col("status") == "aggregated").group_by("round").len()
    rounds = pl.read_parquet(out / "rounds.parquet").join(aggregated, on="round", how="left")
    assert (rounds["num_aggregated"] == rounds["len"].fill_null(0)).all()
    assert rounds["num_aggregated"].sum() > 0
    test_losses = pl.read_parquet(out / "eval.parquet").filter(pl.col("split") == "test")
    assert test_losses["loss"].is_finite().all()  # the global model never saw a NaN


def test_a_nonfinite_global_model_fails_the_run_and_keeps_the_last_good_checkpoint(
        scenario: Path, baseline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    calls = []

    def blow_up_at_the_4th_aggregation(cfg: AggregatorConfig) -> Aggregator:
        rule = make_aggregator(cfg)

        def combine(params: torch.Tensor, inputs: RoundInputs, state: Any) -> Combined:
            calls.append(1)
            combined = rule.combine(params, inputs, state)
            return dataclasses.replace(combined, params=combined.params * (
                np.nan if len(calls) == 4 else 1.0))

        return dataclasses.replace(rule, combine=combine)

    rounds = pl.read_parquet(baseline / "rounds.parquet")
    failing = rounds.filter(pl.col("num_aggregated") > 0)["round"][3]
    monkeypatch.setattr(simfl.runs.build, "make_aggregator", blow_up_at_the_4th_aggregation)
    out = tmp_path / "run"
    assert run(scenario, out) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"run failed: round {failing}: the global model has NaN/Inf parameters" in err
    info = manifest(out)
    assert info["status"] == "failed"
    assert info["reason"].startswith(f"NonFiniteModelError: round {failing}: ")
    assert checkpoint_state(out)["rounds_done"] == failing - failing % 2
    # every row up to the failure is readable, a prefix of what the run would have written
    assert_committed_prefix(out, baseline)
    assert read_table(out, "rounds").height >= failing - 1
    monkeypatch.undo()  # the fault is gone: resuming from the good checkpoint finishes the run
    assert resume(out) == 0
    assert_same_files(out, baseline)


# ---- what a checkpoint holds --------------------------------------------------------------


def test_checkpoints_fall_every_so_many_rounds_but_not_after_the_last() -> None:
    assert list(checkpoint.checkpoint_rounds(2, 9)) == [2, 4, 6, 8]
    assert list(checkpoint.checkpoint_rounds(3, 9)) == [3, 6]  # after 9 the run is complete
    assert list(checkpoint.checkpoint_rounds(0, 9)) == []


def test_every_server_question_has_a_replay_rule() -> None:
    members = {name for name in dir(LearnerLike) if not name.startswith("_")}
    assert sorted(members) == sorted(interface.SYNC)


def test_the_replaying_learner_wraps_exactly_the_answers_and_effects() -> None:
    """JournaledLearner overrides every member the table journals or skips, and no other
    the servers ask (a static member is asked again as it is)."""
    own = {n for n in vars(replay.JournaledLearner) if not n.startswith("_")}
    asked = set(interface.SYNC) | set(interface.ASYNC)
    assert own & asked == set(interface.members(interface.ANSWER)
                              + interface.members(interface.EFFECT))


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(key)
            yield from _leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


DELTA_FL = {"data": {"synthetic": {"num_clients": 12}},
            "aggregator": {"name": "deltafl", "theta": 0.5},
            "estimator": {"name": "tracking", "shadow": ["ipw", "ipw_days"]}}


def _delta_fl_learner(seed: int = 0) -> Learner:
    """A run's learner with its estimator panel wired, as simfl.runs.run wires it."""
    return simfl.runs.build.build_run(from_dict({**DELTA_FL, "seed": seed})).learner


def test_learner_state_is_plain_data_under_named_keys() -> None:
    """A checkpoint holds no object of simfl's: renaming a class or a private attribute
    cannot change what it stores or stop it loading."""
    learner = _delta_fl_learner()
    learner.observe_online(0.0, np.arange(4))
    learner.observe_online(600.0, np.arange(2, 6))
    learner.select(np.linspace(0.5, 2.0, 4), np.arange(2, 6), 1, 600.0)
    state = learner.state_dict()
    assert set(state) == {"params", "version", "aggregator_state", "updates", "estimators",
                          "kept"}
    assert set(state["estimators"]) == {"checkins", "checkins_days", "online", "estimators"}
    assert list(state["estimators"]["estimators"]["tracking"]) == ["eta"]  # format 3's layout
    plain = (str, int, float, bool, type(None), np.ndarray, np.generic, torch.Tensor)
    assert all(isinstance(leaf, plain) for leaf in _leaves(state))
    assert b"simfl" not in pickle.dumps(state)


def test_learner_state_round_trips() -> None:
    learner = _delta_fl_learner()
    for t in range(0, 4 * 3600, 1200):  # rounds over four UTC hours: check-ins counted
        learner.observe_online(float(t), np.arange(t // 1200 % 3, 6, 2))
        learner.select(np.linspace(0.5, 2.0, 4), np.arange(4), t // 1200, float(t))
    other = _delta_fl_learner(seed=1)
    assert not torch.equal(other.model.params, learner.model.params)
    other.load_state_dict(learner.state_dict())
    assert torch.equal(other.model.params, learner.model.params)
    panels = [x.filter.panel for x in (learner, other) if isinstance(x.filter, PanelFilter)]
    assert panels[0].states == panels[1].states != {"tracking": {"eta": 1.0}}  # it moved
    for records in ("checkins", "checkins_days"):
        a, b = (getattr(p.presence, records) for p in panels)
        np.testing.assert_array_equal(a.seen, b.seen)
        np.testing.assert_array_equal(a.rounds, b.rounds)
    assert panels[0].presence.checkins.rounds.sum() > 0
    ipw = [next(e for e in p.estimators if e.name == "ipw") for p in panels]
    cohort = Cohort(np.linspace(0.5, 2.0, 5), np.ones(5), np.arange(5), 4 * 3600.0)
    assert (ipw[0].estimate(cohort, 0.5, np.random.default_rng(0)).threshold
            == ipw[1].estimate(cohort, 0.5, np.random.default_rng(0)).threshold)
    afl = {"data": {"synthetic": {"num_clients": 8}}, "aggregator": {"name": "afl"}}
    learner = simfl.runs.build.build_run(from_dict(afl)).learner
    learner.model.aggregator_state = learner.model.aggregator_state * 0.5 + 0.25
    other = simfl.runs.build.build_run(from_dict({**afl, "seed": 1})).learner
    other.load_state_dict(learner.state_dict())
    np.testing.assert_array_equal(other.model.aggregator_state,
                                  learner.model.aggregator_state)
