"""Sweeps: grid expansion, validation before any run, skipping finished runs, Ray and
sequential backends giving the same files, collection and the study's figures; and the
estimators end to end (bias.parquet, protocol messages in comm.parquet)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from simfl.cli import main
from simfl.errors import InputError
from simfl.plots.study import plot_sweep
from simfl.plots.sweep import sweep_figures
from simfl.rundir import run_lock
from simfl.runs.run import scenario_sha256
from simfl.runs.sweep import (
    SWEEP_FIGURES,
    check_ray_fits,
    collect,
    is_complete,
    lacking,
    load_sweep,
    run_statuses,
    status_lines,
    sweep_progress,
)
from simfl.runs.sweep.execute import BUSY, run_sweep
from simfl.study.theory import DEVICE_COLUMNS
from simfl.tables import error_by_round, sent
from simfl.train.learner import Learner

ROOT = Path(__file__).parents[2]

SCENARIO = """
[data]
dataset = "synthetic"
[data.synthetic]
num_clients = 30
[model]
name = "linear"
[train]
lr = 0.05
[aggregator]
name = "deltafl"
theta = 0.5
[estimator]
name = "cohort_exact"
shadow = ["secure_mm", "secure_bisection", "tracking", "ipw"]
bias_every = 2
[server]
num_rounds = 4
clients_per_round = 5
[eval]
every = 2
"""

SWEEP = """
scenario = "base.toml"
name = "study"
seeds = [0, 1]
[grid]
"server.clients_per_round" = [4, 6]
[variants.always]
"population.availability.mode" = "always"
[variants.diurnal]
"population.availability.mode" = "diurnal"
"server.wait_poll_s" = 600.0
[ray]
num_cpus = 1
"""


def write(tmp_path: Path, sweep: str = SWEEP) -> Path:
    (tmp_path / "base.toml").write_text(SCENARIO)
    path = tmp_path / "study.toml"
    path.write_text(sweep)
    return path


def test_grid_expands_variants_values_and_seeds(tmp_path: Path) -> None:
    sweep = load_sweep(write(tmp_path), tmp_path / "results")
    assert len(sweep.runs) == 2 * 2 * 2
    first = sweep.runs[0]
    assert first.run_id == "variant=always,clients_per_round=4,seed=0"
    assert first.params == {"variant": "always", "clients_per_round": 4, "seed": 0}
    assert first.overrides == ('population.availability.mode="always"',
                               "server.clients_per_round=4", "seed=0")
    assert first.run_dir == tmp_path / "results" / "study" / first.run_id
    assert len({r.run_id for r in sweep.runs}) == 8


@pytest.mark.parametrize(("text", "message"), [
    (SWEEP.replace('"server.clients_per_round"', '"server.clients_per_rnd"'),
     "server.clients_per_rnd"),
    (SWEEP.replace("[4, 6]", "[4, -1]"), "clients_per_round"),
    (SWEEP.replace("seeds = [0, 1]", "seed = [0, 1]"), "unknown key 'seed'"),
    (SWEEP.replace("num_cpus = 1", "cpus = 1"), "ray.cpus"),
    (SWEEP.replace("num_cpus = 1", 'num_cpus = "x"'), "'ray.num_cpus' = 'x' must be a number"),
    (SWEEP.replace("num_cpus = 1", "num_cpus = -1"), "'ray.num_cpus' = -1 must be a number"),
    (SWEEP.replace("num_cpus = 1", "num_cpus = true"), "'ray.num_cpus' = True must be"),
    (SWEEP.replace("num_cpus = 1", "num_gpus = nan"), "'ray.num_gpus' = nan must be"),
    (SWEEP.replace("num_cpus = 1", "address = 1"), "'ray.address' = 1 must be a string"),
])
def test_bad_sweeps_stop_before_any_run(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_sweep(write(tmp_path, text), tmp_path / "results")
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_sequential_sweep_skips_finished_runs_and_collects(tmp_path: Path) -> None:
    sweep = load_sweep(write(tmp_path, SWEEP.replace("seeds = [0, 1]", "seeds = [0]")),
                       tmp_path / "results")
    statuses = run_sweep(sweep, "sequential", report=lambda line: None)
    assert set(statuses.values()) == {"complete"} and len(statuses) == 4
    assert run_sweep(sweep, "sequential", report=lambda line: None) == {}  # all skipped
    rows = collect(sweep)
    bias = pl.read_parquet(sweep.out_dir / "bias.parquet")
    assert rows["bias"] == bias.height == 4 * 4 * 5  # runs x rounds x estimators
    assert set(bias["variant"]) == {"always", "diurnal"}
    assert sorted(set(bias["clients_per_round"])) == [4, 6]
    names = {p.name for p in plot_sweep(sweep.out_dir)}
    grid = {p.name for p in sweep_figures(sweep.out_dir, sweep.out_dir / "plots")}
    assert names | grid == set(SWEEP_FIGURES)  # collect checks each one's target before it writes
    assert names == {"protocol_cost.png", "bias_vs_cohort.png", "conformity_vs_cohort.png",
                     "online_bias_vs_cohort.png", "decomposition_vs_cohort.png",
                     "p90_vs_bytes_by_estimator.png"}
    # bench/archive_runs.py keeps what collect and the study tables need, in a run's layout
    path = tmp_path / "study.toml"
    subprocess.run([sys.executable, str(ROOT / "bench" / "archive_runs.py"), str(path),
                    "--to", str(tmp_path / "archive"), "--results", str(tmp_path / "results")],
                   check=True, capture_output=True)
    kept = load_sweep(path, tmp_path / "archive")
    assert all(is_complete(r.run_dir) for r in kept.runs)
    collect(kept)
    assert pl.read_parquet(kept.out_dir / "bias.parquet").equals(bias)
    final = pl.read_parquet(kept.out_dir / "eval.parquet")
    every = pl.read_parquet(sweep.out_dir / "eval.parquet")
    assert final.equals(every.filter(pl.col("round") == 4)) and final.height > 0
    for run, kept_run in zip(sweep.runs, kept.runs, strict=True):  # every evaluation, summarised
        summary = pl.read_parquet(kept_run.run_dir / "eval_rounds.parquet")
        assert summary.equals(error_by_round(pl.read_parquet(run.run_dir / "eval.parquet")))
        assert summary["round"].n_unique() > 1
        # of devices.parquet, the columns the theory check reads (no page reads the rest)
        devices = pl.read_parquet(run.run_dir / "devices.parquet")
        assert pl.read_parquet(kept_run.run_dir / "devices.parquet").equals(devices.select(
            c for c in devices.columns if c in (*DEVICE_COLUMNS, "split"))) and devices.width > 8
        # every sent message's bytes, summed by round, direction and kind
        comm = sent(pl.read_parquet(run.run_dir / "comm.parquet"))
        summed = pl.read_parquet(kept_run.run_dir / "comm_by_round.parquet")
        assert summed["messages"].sum() == comm.height
        for kind in set(comm["kind"]):
            assert (summed.filter(pl.col("kind") == kind)["bytes"].sum()
                    == comm.filter(pl.col("kind") == kind)["bytes"].sum() > 0)
    # --whole-eval keeps every evaluation round
    subprocess.run([sys.executable, str(ROOT / "bench" / "archive_runs.py"), str(path),
                    "--to", str(tmp_path / "whole"), "--results", str(tmp_path / "results"),
                    "--whole-eval"], check=True, capture_output=True)
    for run in sweep.runs:
        whole = tmp_path / "whole" / sweep.name / run.run_id / "eval.parquet"
        assert pl.read_parquet(whole).equals(pl.read_parquet(run.run_dir / "eval.parquet"))
    # --lean keeps no per-device table; collect then gathers no eval.parquet, removing its
    # own stale copy, and the figure that reads it is skipped
    subprocess.run([sys.executable, str(ROOT / "bench" / "archive_runs.py"), str(path),
                    "--to", str(tmp_path / "lean"), "--results", str(tmp_path / "results"),
                    "--lean"], check=True, capture_output=True)
    lean = load_sweep(path, tmp_path / "lean")
    assert all(is_complete(r.run_dir) for r in lean.runs)
    for run in lean.runs:
        assert {p.name for p in run.run_dir.iterdir()} == {
            "manifest.json", "eval_rounds.parquet", "comm_by_round.parquet", "rounds.parquet",
            "bias.parquet"}
    assert lacking(lean) == {"eval": len(lean.runs)}
    # --status reads a lean run's final errors from its manifest, as a kept run's eval
    kept_lines = status_lines(load_sweep(path, tmp_path / "elsewhere"), tmp_path / "archive")
    lean_lines = status_lines(load_sweep(path, tmp_path / "elsewhere"), tmp_path / "lean")
    assert lean_lines == kept_lines and all("archived" in line and "test mean" in line
                                            for line in lean_lines[:-1])
    shutil.copy(kept.out_dir / "eval.parquet", lean.out_dir / "eval.parquet")  # collect's
    assert set(collect(lean)) == {"rounds", "bias"}
    assert pl.read_parquet(lean.out_dir / "bias.parquet").equals(bias)
    assert not (lean.out_dir / "eval.parquet").exists()
    skipped: list[str] = []
    assert "p90_vs_bytes_by_estimator.png" not in {
        p.name for p in plot_sweep(lean.out_dir, report=skipped.append)}
    assert any("eval.parquet was not collected" in line for line in skipped)
    (lean.out_dir / "eval.parquet").write_bytes(b"mine")  # not collect's: stops it
    with pytest.raises(InputError, match="eval.parquet: exists and was not written"):
        collect(lean)
    assert (lean.out_dir / "eval.parquet").read_bytes() == b"mine"
    # archived again: the same runs are left alone, a re-run (another manifest) is replaced
    stamps = {f: f.stat().st_mtime_ns for f in kept.out_dir.rglob("*.parquet")}
    rerun = sweep.runs[1].run_dir / "manifest.json"
    rerun.write_text(json.dumps({**json.loads(rerun.read_text()), "wall_s": 1.0}))
    subprocess.run([sys.executable, str(ROOT / "bench" / "archive_runs.py"), str(path),
                    "--to", str(tmp_path / "archive"), "--results", str(tmp_path / "results")],
                   check=True, capture_output=True)
    changed = {f.parent.name for f, t in stamps.items() if f.stat().st_mtime_ns != t}
    assert changed == {sweep.runs[1].run_id}
    assert json.loads((kept.runs[1].run_dir / "manifest.json").read_text())["wall_s"] == 1.0
    assert not list(kept.out_dir.rglob("*.tmp"))
    # a run archived before eval_rounds.parquet was kept gains it, and only that run changes
    (kept.runs[2].run_dir / "eval_rounds.parquet").unlink()
    stamps = {f: f.stat().st_mtime_ns for f in kept.out_dir.rglob("*.parquet")}
    subprocess.run([sys.executable, str(ROOT / "bench" / "archive_runs.py"), str(path),
                    "--to", str(tmp_path / "archive"), "--results", str(tmp_path / "results")],
                   check=True, capture_output=True)
    assert (kept.runs[2].run_dir / "eval_rounds.parquet").is_file()
    assert {f.parent.name for f, t in stamps.items()
            if f.stat().st_mtime_ns != t} == {sweep.runs[2].run_id}
    # a run written before eval gained client_idx still collects, with nulls there
    old = sweep.runs[0].run_dir / "eval.parquet"
    pl.read_parquet(old).drop("client_idx").write_parquet(old)
    collect(sweep)
    evals = pl.read_parquet(sweep.out_dir / "eval.parquet")
    first = evals.filter(pl.col("run_id") == sweep.runs[0].run_id)
    assert first.height and first["client_idx"].null_count() == first.height
    assert evals.filter((pl.col("run_id") != sweep.runs[0].run_id)
                        & (pl.col("split") == "train"))["client_idx"].null_count() == 0


@pytest.mark.slow
def test_ray_backend_gives_the_sequential_files(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    text = SWEEP.replace("seeds = [0, 1]", "seeds = [3]").replace("[4, 6]", "[4]")
    seq = load_sweep(write(tmp_path, text), tmp_path / "seq")
    par = load_sweep(write(tmp_path, text), tmp_path / "ray")
    run_sweep(seq, "sequential", report=lambda line: None)
    with run_lock(par.runs[1].run_dir):  # another process works on the second run: left
        assert run_sweep(par, "ray", report=lambda line: None) == {
            par.runs[0].run_id: "complete", par.runs[1].run_id: BUSY}
    assert not (par.runs[1].run_dir / "manifest.json").exists()
    assert run_sweep(par, "ray", report=lambda line: None) == {par.runs[1].run_id: "complete"}
    for a, b in zip(seq.runs, par.runs, strict=True):
        assert is_complete(b.run_dir)
        for table in ("rounds", "clients", "comm", "bias", "eval"):
            assert pl.read_parquet(a.run_dir / f"{table}.parquet").equals(
                pl.read_parquet(b.run_dir / f"{table}.parquet")), table


def test_estimators_end_to_end(tmp_path: Path) -> None:
    """secure_bisection drives: no loss in the clear, its secure sums are in comm.parquet,
    every kept client is at or above the logged threshold, and bias rows carry the oracle."""
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO.replace('name = "cohort_exact"', 'name = "secure_bisection"'))
    out = tmp_path / "run"
    assert main([str(scenario), "--out", str(out), "--quiet"]) == 0
    comm = sent(pl.read_parquet(out / "comm.parquet"))
    assert comm.filter(pl.col("kind") == "loss").height == 0
    secagg = comm.filter(pl.col("kind") == "secagg")
    steps = 14  # ceil(log2(16 / 1e-3)) secure sums, four exchanges each, up and down
    assert secagg.height == 4 * 5 * steps * 4 * 2
    bias = pl.read_parquet(out / "bias.parquet")
    driver = bias.filter(pl.col("driver"))
    assert driver["estimator"].unique().to_list() == ["secure_bisection"]
    rounds = pl.read_parquet(out / "rounds.parquet")
    np.testing.assert_array_equal(rounds["quantile_estimate"], driver["estimate"])
    clients = pl.read_parquet(out / "clients.parquet").join(
        rounds.select("round", "quantile_estimate"), on="round")
    kept = clients.filter(pl.col("status") == "aggregated")
    assert (kept["loss_reported"] >= kept["quantile_estimate"]).all()
    filtered = clients.filter(pl.col("status") == "filtered")
    assert (filtered["loss_reported"] < filtered["quantile_estimate"]).all()
    with_oracle = bias.filter(pl.col("oracle_quantile").is_not_null())
    assert sorted(set(with_oracle["round"])) == [0, 2]
    assert with_oracle["realized_conformity"].is_between(0.0, 1.0).all()
    np.testing.assert_allclose(with_oracle["bias"],
                               with_oracle["estimate"] - with_oracle["oracle_quantile"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"


def test_shards_split_the_runs_between_processes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import simfl.runs.sweep.execute

    path = write(tmp_path)
    seen: list[list[str]] = []
    monkeypatch.setattr(simfl.runs.sweep.execute, "run_sweep", lambda sweep, *_, **__: seen.append(
        [r.run_id for r in sweep.runs]) or {})
    for shard in ("0/3", "1/3", "2/3"):
        assert main(["sweep", str(path), "--shard", shard]) == 0
    every = [r.run_id for r in load_sweep(path).runs]
    assert sorted(sum(seen, [])) == sorted(every)  # each run in exactly one shard
    assert seen[1] == every[1::3]
    for bad in ("3/3", "1", "a/b"):
        assert main(["sweep", str(path), "--shard", bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--shard" in err and repr(bad) in err, err


def test_archived_runs_are_skipped_within_a_fixed_shard(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard's runs depend on the sweep file only: a shard started after another shard's
    first runs were archived must not take the other shard's runs (two processes would
    then work on one run)."""
    import simfl.runs.sweep.execute

    path = write(tmp_path)
    every = [r.run_id for r in load_sweep(path).runs]
    archive = tmp_path / "archive"
    for run_id, status in ((every[0], "complete"), (every[2], "complete"),
                           (every[3], "failed")):
        (archive / "study" / run_id).mkdir(parents=True)
        (archive / "study" / run_id / "manifest.json").write_text(
            json.dumps({"status": status}))
    seen: list[list[str]] = []
    monkeypatch.setattr(simfl.runs.sweep.execute, "run_sweep", lambda sweep, *_, **__: seen.append(
        [r.run_id for r in sweep.runs]) or {})
    for shard in ("0/2", "1/2"):
        assert main(["sweep", str(path), "--archived", str(archive), "--shard", shard]) == 0
    assert seen == [[r for r in every[0::2] if r not in (every[0], every[2])],
                    every[1::2]]  # every[3]'s copy failed: a failed copy is no copy
    assert not set(seen[0]) & set(seen[1])


def test_processes_sharing_a_sweep_skip_the_runs_another_holds_or_finished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Sequential processes sharing a sweep: a run whose lock another process holds is
    skipped and left as it is, also when the other process takes it between the look at
    its lock and the start; a run another process finished after this one listed its runs
    is not run again; the closing count leaves out the skipped runs finished meanwhile."""
    import simfl.runs.sweep.execute
    from simfl.errors import RunBusy

    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, SWEEP.replace("seeds = [0, 1]", "seeds = [0]"))
    held, raced, finished, free = load_sweep(path).runs
    held.run_dir.mkdir(parents=True)  # what the other process has written so far
    (held.run_dir / "manifest.json").write_text(json.dumps({"status": "running"}))
    (held.run_dir / "rounds.parquet").write_bytes(b"the other process's rounds")
    real = simfl.runs.sweep.execute._run_one
    ran: list[Path] = []

    def other_process(scenario: Path, overrides: tuple[str, ...], run_dir: Path,
                      progress: bool) -> str:
        ran.append(run_dir)
        if run_dir == raced.run_dir:  # took `raced`'s lock first, and finished `finished`
            finished.run_dir.mkdir(parents=True)
            (finished.run_dir / "manifest.json").write_text(json.dumps({"status": "complete"}))
            raise RunBusy(f"{run_dir}: another process is working on this run")
        if run_dir == free.run_dir:  # meanwhile the other process finished `raced`
            raced.run_dir.mkdir(parents=True)
            (raced.run_dir / "manifest.json").write_text(json.dumps({"status": "complete"}))
        return real(scenario, overrides, run_dir, progress)

    monkeypatch.setattr(simfl.runs.sweep.execute, "_run_one", other_process)
    with run_lock(held.run_dir):  # the other process is working on the first run
        assert main(["sweep", str(path), "--backend", "sequential", "--quiet"]) == 0
    assert ran == [raced.run_dir, free.run_dir]
    out = capsys.readouterr().out
    assert f"[1/4] {held.run_id}: {BUSY}" in out and f"[2/4] {raced.run_id}: {BUSY}" in out
    assert f"[3/4] {finished.run_id}: complete (by another process)" in out
    assert f"[4/4] {free.run_id}: complete" in out
    assert "1 run left to the other processes working on them" in out  # held, not raced
    assert sorted(p.name for p in held.run_dir.iterdir()) == [
        "checkpoint", "manifest.json", "rounds.parquet"]
    assert (held.run_dir / "rounds.parquet").read_bytes() == b"the other process's rounds"
    assert json.loads((held.run_dir / "manifest.json").read_text()) == {"status": "running"}


@pytest.mark.parametrize("quiet", [False, True])
def test_sequential_sweep_shows_each_runs_progress(tmp_path: Path, quiet: bool,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the CLI writes to results/ under the working directory
    text = SWEEP.replace("seeds = [0, 1]", "seeds = [0]").replace("[4, 6]", "[4]")
    path = write(tmp_path, text)
    args = ["sweep", str(path), "--backend", "sequential"] + (["--quiet"] if quiet else [])
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert ("[1/2] variant=always,clients_per_round=4,seed=0: running" in out) != quiet
    assert ("4/4 [" in err) != quiet  # the round bar ran to the last of the 4 rounds
    assert "[2/2] variant=diurnal,clients_per_round=4,seed=0: complete" in out


@pytest.mark.slow
def test_status_tells_where_each_run_stands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    every_2 = '[set]\n"run.checkpoint_every" = 2\n[ray]'
    text = SWEEP.replace("[4, 6]", "[4]").replace("[ray]", every_2)
    path = write(tmp_path, text)
    monkeypatch.chdir(tmp_path)
    sweep = load_sweep(path)
    done, broken = sweep.runs[0], sweep.runs[1]
    run_sweep(replace(sweep, runs=(done,)), "sequential", report=lambda line: None)
    train = Learner.train

    def fail_in_round_3(self: Learner, round_idx: int, client_idx: np.ndarray) -> np.ndarray:
        if round_idx == 3:
            raise RuntimeError("boom")
        return train(self, round_idx, client_idx)

    monkeypatch.setattr(Learner, "train", fail_in_round_3)
    statuses = run_sweep(replace(sweep, runs=(broken,)), "sequential", report=lambda line: None)
    assert statuses == {broken.run_id: "failed: RuntimeError: boom"}  # one failed run
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)

    status = run_statuses(sweep)
    assert status["status"].to_list() == ["complete", "failed", "not started", "not started"]
    assert status["rounds"].to_list() == [4, 2, 0, 0]  # the failed run's checkpoint: round 2
    assert status["num_rounds"].to_list() == [4, 4, 4, 4]
    summary = json.loads((done.run_dir / "manifest.json").read_text())["summary"]["test"]
    assert status["test_mean"][0] == pytest.approx(summary["mean"], abs=1e-12)
    assert status["test_p90"][0] == pytest.approx(summary["p90"], abs=1e-12)
    assert status["wall_s"][1] > 0 and status["test_p90"][1] == status["test_p90"][1]  # not NaN
    assert status["wall_s"].is_null().to_list() == [False, False, True, True]

    # A manifest that says running: running while a process holds the run's lock, killed
    # when none does (what a SIGKILL leaves).
    manifest = json.loads((broken.run_dir / "manifest.json").read_text())
    (broken.run_dir / "manifest.json").write_text(json.dumps({**manifest, "status": "running"}))
    with run_lock(broken.run_dir):
        assert run_statuses(sweep)["status"][1] == "running"
    assert run_statuses(sweep)["status"][1] == "killed"

    capsys.readouterr()
    assert main(["sweep", str(path), "--status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("variant=always,clients_per_round=4,seed=0  complete  4/4 rounds")
    assert lines[1].startswith("variant=diurnal,clients_per_round=4,seed=0  killed  2/4 rounds")
    assert lines[2] == "variant=always,clients_per_round=4,seed=1  not started  0/4 rounds"
    done_s, killed_s = status["wall_s"][0], status["wall_s"][1]  # 4 and 2 rounds
    # left, each at its grid cell's pace: always's seed 1 (4 rounds at done_s / 4), then
    # diurnal's 2 + 4 rounds at killed_s / 2
    left = done_s + 3 * killed_s
    assert lines[-1] == (f"{sweep.name}: 1 of 4 runs complete, 6 of 16 rounds done (37.5 %) in "
                         f"{(done_s + killed_s) / 60:.1f} min of run time; at the pace of "
                         f"each grid cell's runs the 10 rounds left take about "
                         f"{left / 60:.1f} min of one process")

    # Kept copies (bench/archive_runs.py, e.g. docs/runs): a run not complete here but
    # complete there is "archived", with the kept run's figures; a run complete here is
    # read here.
    archive = tmp_path / "kept"
    shutil.copytree(done.run_dir, archive / sweep.name / sweep.runs[2].run_id)
    shutil.copytree(done.run_dir, archive / sweep.name / done.run_id)
    kept = run_statuses(sweep, archive)
    assert kept["status"].to_list() == ["complete", "killed", "archived", "not started"]
    assert kept["rounds"].to_list() == [4, 2, 4, 0]
    assert kept["test_p90"][2] == pytest.approx(summary["p90"], abs=1e-12)
    # that copy is seed 0's run filed as seed 1's: said, not read as the sweep's
    assert kept["changes"].to_list() == [None, None, "seed = 0 (the sweep: 1)", None]
    assert main(["sweep", str(path), "--status", "--archived", str(archive)]) == 0
    line = capsys.readouterr().out.splitlines()[2]
    assert line.startswith("variant=always,clients_per_round=4,seed=1  archived  4/4 rounds")
    assert line.endswith("  another scenario: seed = 0 (the sweep: 1)")


@pytest.mark.parametrize("edit, resumed", [
    ("drop keys simfl gained later", True),  # the run predates model.bias and model.init
    ("another lr", False),
])
@pytest.mark.slow
def test_an_interrupted_run_resumes_unless_its_scenario_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        edit: str, resumed: bool) -> None:
    """A sweep goes on with an interrupted run from its checkpoint when the run's manifest
    holds the scenario the sweep asks for, read with the defaults of keys added since it
    started; a run of another scenario starts again from round 0, which the sweep says
    (with the keys that differ) before it replaces the checkpoint, and --status before
    that; once complete, the run is kept and named by the next launch and collect."""
    import os
    import signal

    from simfl.runs import checkpoint

    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, 'scenario = "base.toml"\nname = "s"\nseeds = [0]\n')
    (tmp_path / "base.toml").write_text(SCENARIO + "[run]\ncheckpoint_every = 1\n")
    train = Learner.train

    def interrupt_round_2(self: Learner, round_idx: int, client_idx: np.ndarray) -> np.ndarray:
        if round_idx == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return train(self, round_idx, client_idx)

    with monkeypatch.context() as patch:
        patch.setattr(Learner, "train", interrupt_round_2)
        patch.setattr(checkpoint, "STOP_GRACE_S", 60.0)  # the round ends, however loaded
        assert main(["sweep", str(path), "--backend", "sequential", "--quiet"]) == 130
    run_dir = load_sweep(path).runs[0].run_dir
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    if resumed:
        for key in ("bias", "init"):
            del manifest["scenario"]["model"][key]
        manifest["scenario_sha256"] = scenario_sha256(manifest["scenario"])  # as it recorded
    else:
        manifest["scenario"]["train"]["lr"] = 0.5
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(["sweep", str(path), "--status"]) == 0
    status = capsys.readouterr().out.splitlines()[0]
    assert ("another scenario" in status) is not resumed
    assert resumed or status.endswith("another scenario: train.lr = 0.5 (the sweep: 0.05)")
    assert main(["sweep", str(path), "--backend", "sequential", "--quiet"]) == 0
    said = capsys.readouterr().out.splitlines()
    restart = (f"{run_dir.name}: starts again from round 0, replacing its checkpoint "
               f"(3 rounds done) of another scenario: train.lr = 0.5 (the sweep: 0.05)")
    assert said[1:] == ([] if resumed else [restart]) + [f"[1/1] {run_dir.name}: complete"]
    final = json.loads((run_dir / "manifest.json").read_text())
    assert final["status"] == "complete" and final["scenario"]["train"]["lr"] == 0.05
    assert [r["from_round"] for r in final.get("resumes", [])] == ([3] if resumed else [])
    # a complete run of another scenario is kept; the launch and collect name it
    final["scenario"]["train"]["lr"] = 0.5
    (run_dir / "manifest.json").write_text(json.dumps(final))
    kept = f"{run_dir.name}: complete, kept, though it ran another scenario: train.lr = 0.5 " \
           f"(the sweep: 0.05)"
    assert main(["sweep", str(path), "--backend", "sequential", "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [kept]
    assert main(["collect", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == kept


def test_progress_guesses_the_pace_of_a_grid_cell_no_run_has_started() -> None:
    statuses = pl.DataFrame({"cell": ["n=10", "n=10", "n=100"], "status": [
        "complete", "not started", "not started"], "rounds": [10, 0, 0],
        "num_rounds": [10, 10, 10], "wall_s": [60.0, None, None],
        "device": ["cpu", None, None]})
    assert sweep_progress("s", statuses) == (
        "s: 1 of 3 runs complete, 10 of 30 rounds done (33.3 %) in 1.0 min of run time; at "
        "the pace of each grid cell's runs the 20 rounds left take about 2.0 min of one "
        "process; 10 of them in grid cells no run has started, guessed at the pace of all "
        "rounds done")


def test_progress_gives_each_devices_pace_when_runs_started_on_several() -> None:
    statuses = pl.DataFrame({"status": ["complete", "interrupted", "not started"],
                             "rounds": [10, 5, 0], "num_rounds": [10, 10, 10],
                             "wall_s": [60.0, 3000.0, None], "device": ["H100", "cpu", None]})
    # 15 rounds left: 6 s a round on the H100, 600 s a round on the CPU
    assert sweep_progress("s", statuses) == (
        "s: 1 of 3 runs complete, 15 of 30 rounds done (50.0 %) in 51.0 min of run time; "
        "the 15 rounds left take about 1.5 min at the pace of the runs started on H100, "
        "2.5 h at the pace of the runs started on cpu")


def _listing(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes (to see that nothing was written)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_a_sweep_named_like_a_single_run_is_refused_before_any_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """results/<sweep name> holding a run (its manifest.json): neither the sweep nor collect
    puts anything into that run's directory."""
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, SWEEP.replace("seeds = [0, 1]", "seeds = [0]"))
    run = tmp_path / "results" / "study"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"status": "complete"}))
    (run / "rounds.parquet").write_bytes(b"the run's rounds")
    before = _listing(tmp_path)
    for command in (["sweep", str(path), "--backend", "sequential", "--quiet"],
                    ["collect", str(path)]):
        assert main(command) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith(
            f"simfl: error: {Path('results') / 'study'}: a single run's directory")
        assert _listing(tmp_path) == before


@pytest.mark.parametrize(("table", "named"), [
    ('[grid]\n"data.path" = ["a/../../../ESCAPED", "b"]\n', "grid key 'data.path'"),
    ('[variants."../../ESCAPED"]\n"train.lr" = 0.1\n', "variant name '../../ESCAPED'"),
])
def test_a_run_id_that_would_be_a_path_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        table: str, named: str) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, f'scenario = "base.toml"\nname = "s"\nseeds = [0]\n{table}')
    before = _listing(tmp_path)
    assert main(["sweep", str(path), "--backend", "sequential", "--quiet"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and named in err[0] and "cannot" in err[0] and "'/'" in err[0]
    assert _listing(tmp_path) == before and not (tmp_path / "results").exists()


def test_two_runs_that_would_share_a_folder_are_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, 'scenario = "base.toml"\nname = "s"\nseeds = [0]\n'
                           '[grid]\n"aggregator.theta" = [0.5, "0.5"]\n')
    assert main(["sweep", str(path), "--backend", "sequential", "--quiet"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "share the folder 'theta=0.5,seed=0'" in err[0], err
    assert not (tmp_path / "results").exists()


def test_a_run_folder_holding_a_users_file_stops_the_sweep_before_any_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The third run's folder holds a file simfl did not write: the sweep runs nothing
    (not the first two runs either), names the folder and the file, and does not tell the
    user about an --overwrite that a sweep does not have."""
    import simfl.runs.sweep.execute

    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, SWEEP.replace("seeds = [0, 1]", "seeds = [0]"))
    third = load_sweep(path).runs[2].run_dir
    third.mkdir(parents=True)
    (third / "notes.txt").write_text("my notes")
    ran: list[Path] = []
    monkeypatch.setattr(simfl.runs.sweep.execute, "_run_one", lambda scenario, overrides, run_dir,
                        progress: ran.append(run_dir) or "complete")
    before = _listing(tmp_path)
    assert main(["sweep", str(path), "--backend", "sequential", "--quiet"]) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1 and f"{third}:" in lines[0]
    assert "'notes.txt'" in lines[0] and "--overwrite" not in lines[0]
    assert ran == [] and out == ""
    assert _listing(tmp_path) == before
    assert [p.name for p in (tmp_path / "results" / "study").iterdir()] == [third.name]


def test_collect_refuses_a_plots_file_in_the_sweeps_folder_before_writing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path)
    (tmp_path / "results" / "study").mkdir(parents=True)
    (tmp_path / "results" / "study" / "plots").write_text("my notes")
    before = _listing(tmp_path)
    assert main(["collect", str(path)]) == 2
    assert capsys.readouterr().err == (f"simfl: error: {Path('results/study/plots')}: exists "
                                       f"and is not a directory (the figures go there)\n")
    assert _listing(tmp_path) == before


def test_a_bad_ray_value_is_one_line_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, SWEEP.replace("num_cpus = 1", 'num_cpus = "x"'))
    assert main(["sweep", str(path), "--backend", "sequential", "--quiet"]) == 2
    assert capsys.readouterr().err == (f"simfl: error: {path}: 'ray.num_cpus' = 'x' must be a "
                                       f"number >= 0 (what Ray reserves per run)\n")
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_a_ray_sweep_asking_more_than_the_cluster_has_stops_at_once(tmp_path: Path) -> None:
    """Ray would wait for ever for the CPUs no node has: exit 2 before any run, in seconds."""
    pytest.importorskip("ray")
    path = write(tmp_path, 'scenario = "base.toml"\nname = "big"\n[ray]\nnum_cpus = 4096\n')
    done = subprocess.run([sys.executable, "-m", "simfl", "sweep", str(path), "--backend", "ray",
                           "--quiet"], cwd=tmp_path, capture_output=True, text=True, timeout=90)
    err = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert re.fullmatch(rf"simfl: error: {re.escape(str(path))}: 'ray.num_cpus' = 4096 but no "
                        r"node of the Ray cluster has more than \d+ CPUs: no run could ever "
                        r"start \(no run was started\)", err[-1]), err
    assert not list((tmp_path / "results" / "big").glob("*/manifest.json"))


@pytest.mark.parametrize(("ray", "nodes", "message"), [
    ("num_gpus = 1", [{"CPU": 8.0}], "'ray.num_gpus' = 1 but no node .* more than 0 GPUs"),
    ("num_cpus = 3", [{"CPU": 2.0}, {"CPU": 2.0, "GPU": 1.0}],
     "'ray.num_cpus' = 3 but no node .* more than 2 CPUs"),
    ("num_cpus = 0.5", [], "'ray.num_cpus' = 0.5 but no node .* more than 0 CPUs"),
])
def test_check_ray_fits_asks_no_more_than_one_node_has(
        tmp_path: Path, ray: str, nodes: list[dict[str, float]], message: str) -> None:
    sweep = load_sweep(write(tmp_path, f'scenario = "base.toml"\n[ray]\n{ray}\n'),
                       tmp_path / "results")
    with pytest.raises(InputError, match=message):
        check_ray_fits(sweep, nodes)
    check_ray_fits(sweep, [*nodes, {"CPU": 4.0, "GPU": 2.0}])  # a node it fits on


@pytest.mark.slow
def test_collect_replaces_its_own_files_and_no_one_elses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, 'scenario = "base.toml"\nname = "one"\n')
    sweep = load_sweep(path)
    run_sweep(sweep, "sequential", report=lambda line: None)
    assert main(["collect", str(path)]) == 0
    collected = {p.name: p.read_bytes() for p in sweep.out_dir.glob("*.parquet")}
    figures = {p.name for p in (sweep.out_dir / "plots").iterdir()}
    assert set(collected) == {"rounds.parquet", "bias.parquet", "eval.parquet"} and figures
    assert main(["collect", str(path)]) == 0  # again, over its own files
    assert {p.name: p.read_bytes() for p in sweep.out_dir.glob("*.parquet")} == collected
    assert {p.name for p in (sweep.out_dir / "plots").iterdir()} == figures
    skipped = (f"simfl: collect {Path('results/one')}: skipped bias_vs_cohort.png, "
               "conformity_vs_cohort.png, online_bias_vs_cohort.png, "
               "decomposition_vs_cohort.png: the sweep has no clients_per_round axis and no "
               "variants\n")
    assert capsys.readouterr().err.count(skipped) == 2  # said by each collect
    assert not (sweep.out_dir / "plots" / "bias_vs_cohort.png").exists()  # no cohort axis
    for name in ("rounds.parquet", "plots/protocol_cost.png", "plots/bias_vs_cohort.png"):
        user = sweep.out_dir / name
        kept = user.read_bytes() if user.exists() else None
        user.write_text("USERDATA")  # a user's file, or one collect did not mark
        before = _listing(tmp_path)
        assert main(["collect", str(path)]) == 2
        assert capsys.readouterr().err == (
            f"simfl: error: {Path('results/one') / name}: exists and was not written by simfl "
            f"collect, which would replace it: move it away, then collect again (nothing was "
            f"written)\n")
        assert _listing(tmp_path) == before
        if kept is None:
            user.unlink()
        else:
            user.write_bytes(kept)
    pl.read_parquet(sweep.out_dir / "rounds.parquet").write_parquet(
        sweep.out_dir / "rounds.parquet")  # a table simfl could read but did not collect
    assert main(["collect", str(path)]) == 2


ARCHIVE = ROOT / "bench" / "archive_runs.py"
TUNE_WROTE = {"tuning.md": "# Tuning: t.tune.toml\n", "chosen.toml":
              "# Chosen by python -m simfl tune t.tune.toml (criterion train_loss).\n[set]\n"}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with study.toml, the sweep "sw" of seeds 0 and 1, and its complete runs in
    results/ (copied by each test that archives them)."""
    folder = tmp_path_factory.mktemp("two_runs")
    sweep = load_sweep(write(folder, 'scenario = "base.toml"\nname = "sw"\nseeds = [0, 1]\n'),
                       folder / "results")
    assert set(run_sweep(sweep, "sequential", report=lambda line: None).values()) == {"complete"}
    return folder


def _archive(folder: Path, spec: str = "study.toml") -> subprocess.CompletedProcess[str]:
    """bench/archive_runs.py ``folder/spec`` --to ``folder/kept``."""
    return subprocess.run([sys.executable, str(ARCHIVE), str(folder / spec), "--to",
                           str(folder / "kept"), "--results", str(folder / "results")],
                          capture_output=True, text=True)


@pytest.mark.parametrize(("mine", "why"), [
    ({"eval.parquet": b"precious"}, "not an archived simfl run"),  # no manifest.json
    ({"manifest.json": b'{"my": "config"}'}, "not an archived simfl run"),
    ({"manifest.json": None, "notes.txt": b"mine"},  # None: the run's own manifest
     "holds 'notes.txt', which simfl did not write"),
])
@pytest.mark.slow
def test_archiving_refuses_a_run_folder_simfl_did_not_write(
        two_runs: Path, tmp_path: Path, mine: dict[str, bytes | None], why: str) -> None:
    """The second run's folder in --to holds what the archive did not write: the script
    names it in one line, exits 2 and writes nothing, not the first run either."""
    shutil.copytree(two_runs, tmp_path, dirs_exist_ok=True)
    dest = tmp_path / "kept" / "sw" / "seed=1"
    dest.mkdir(parents=True)
    for name, data in mine.items():
        (dest / name).write_bytes(data if data is not None else
                                  (tmp_path / "results" / "sw" / "seed=1" / name).read_bytes())
    before = _listing(tmp_path / "kept")
    done = _archive(tmp_path)
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and done.stdout == "" and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"archive_runs: error: {dest}: ") and why in lines[0]
    assert lines[0].endswith("; move it or choose another --to")
    assert _listing(tmp_path / "kept") == before
    assert [p.name for p in (tmp_path / "kept" / "sw").iterdir()] == ["seed=1"]


@pytest.mark.parametrize("name", sorted(TUNE_WROTE))
@pytest.mark.slow
def test_archiving_a_tuning_file_keeps_a_users_file_of_that_name(tmp_path: Path,
                                                                 name: str) -> None:
    """--to holds a tuning.md or chosen.toml that tune did not write: kept, exit 2, nothing
    written; one that tune wrote (an earlier copy) is replaced."""
    (tmp_path / "base.toml").write_text(SCENARIO)
    (tmp_path / "t.tune.toml").write_text('scenario = "base.toml"\nname = "t"\ncriterion = '
                                          '"train_loss"\nseeds = [0]\n[grid]\n"train.lr" = [0.1]\n')
    (tmp_path / "results" / "t").mkdir(parents=True)
    for each, text in TUNE_WROTE.items():
        (tmp_path / "results" / "t" / each).write_text(text)
    kept = tmp_path / "kept" / "t"
    kept.mkdir(parents=True)
    (kept / name).write_text("my notes\n")
    done = _archive(tmp_path, "t.tune.toml")
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"archive_runs: error: {kept / name}: not written by simfl tune, not replaced; move it "
        "or choose another --to"]
    assert _listing(kept) == {name: b"my notes\n"}
    (kept / name).write_text(TUNE_WROTE[name].split(" t.tune")[0] + " an earlier choice\n")
    assert _archive(tmp_path, "t.tune.toml").returncode == 0
    assert _listing(kept) == {n: t.encode() for n, t in TUNE_WROTE.items()}


@pytest.mark.slow
def test_archiving_again_replaces_the_earlier_archive(two_runs: Path, tmp_path: Path) -> None:
    """Archived again after seed 1 ran again (another manifest) and an archive interrupted
    there (a .tmp left): seed 1's copy is replaced, seed 0's left as it was."""
    shutil.copytree(two_runs, tmp_path, dirs_exist_ok=True)
    assert _archive(tmp_path).returncode == 0
    kept = tmp_path / "kept" / "sw"
    stamps = {f: f.stat().st_mtime_ns for f in kept.rglob("*")}
    rerun = tmp_path / "results" / "sw" / "seed=1" / "manifest.json"
    rerun.write_text(json.dumps({**json.loads(rerun.read_text()), "wall_s": 1.0}))
    (kept / "seed=1" / "eval.parquet.tmp").write_bytes(b"torn")
    done = _archive(tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((kept / "seed=1" / "manifest.json").read_text())["wall_s"] == 1.0
    assert {f.parent.name for f, t in stamps.items()
            if f.is_file() and f.stat().st_mtime_ns != t} == {"seed=1"}
    assert not list(kept.rglob("*.tmp"))


def test_a_run_another_process_finishes_while_this_one_resumes_it_is_complete_not_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """resume refuses a run found complete under its lock (InputError): the sweep says the
    other process completed it; any other InputError is still that run's failure."""
    import simfl.runs.sweep.execute

    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, SWEEP.replace("seeds = [0, 1]", "seeds = [0]"))
    finished, broken = load_sweep(path).runs[:2]

    def resumed_too_late(scenario: Path, overrides: tuple[str, ...], run_dir: Path,
                         progress: bool) -> str:
        run_dir.mkdir(parents=True)
        if run_dir == finished.run_dir:  # the other process completed it meanwhile
            (run_dir / "manifest.json").write_text(json.dumps({"status": "complete"}))
            raise InputError(f"{run_dir}: the run is already complete")
        raise InputError(f"{run_dir}: something else")

    monkeypatch.setattr(simfl.runs.sweep.execute, "_run_one", resumed_too_late)
    main(["sweep", str(path), "--backend", "sequential", "--quiet"])
    out = capsys.readouterr().out
    assert f"{finished.run_id}: complete (by another process)" in out
    assert f"{broken.run_id}: failed: InputError: " in out and "something else" in out
