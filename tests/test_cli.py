"""End to end through the command line: outputs, invariants across runs, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from simfl.cli import main

SMALL = """
seed = {seed}
[data]
dataset = "synthetic"
[data.synthetic]
num_clients = 40
[model]
name = "linear"
[train]
lr = 0.05
[aggregator]
name = "{aggregator}"
theta = {theta}
[server]
num_rounds = 6
clients_per_round = 8
[eval]
every = 3
"""
TABLES = ("rounds", "clients", "comm", "eval")


def run(tmp_path: Path, name: str, seed: int = 0, aggregator: str = "deltafl",
        theta: float = 0.5) -> Path:
    scenario = tmp_path / f"{name}.toml"
    scenario.write_text(SMALL.format(seed=seed, aggregator=aggregator, theta=theta))
    out = tmp_path / "results" / name
    assert main([str(scenario), "--out", str(out), "--quiet"]) == 0
    return out


def test_run_writes_consistent_tables(tmp_path: Path) -> None:
    out = run(tmp_path, "a")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["seed"] == 0
    rounds, clients, comm, evals = (pl.read_parquet(out / f"{t}.parquet") for t in TABLES)
    assert rounds["round"].to_list() == list(range(6))
    assert clients.height == 6 * 8
    # Δ-FL θ = 0.5 keeps at least half of each cohort's weight.
    kept = clients.filter(pl.col("status") == "aggregated").group_by("round").agg(
        pl.col("num_samples").sum().alias("kept"))
    total = clients.group_by("round").agg(pl.col("num_samples").sum().alias("total"))
    assert (kept.join(total, on="round").select(pl.col("kept") >= 0.5 * pl.col("total"))
            .to_series().all())
    # Every byte is one message, and messages add up to the round totals.
    per_round = comm.group_by("round", "direction").agg(pl.col("bytes").sum()).sort("round")
    for direction in ("down", "up"):
        logged = per_round.filter(pl.col("direction") == direction)["bytes"].to_numpy()
        np.testing.assert_array_equal(logged, rounds[f"bytes_{direction}"].to_numpy())
    assert set(evals["round"].unique()) == {0, 3, 6}
    num_devices = evals.filter(pl.col("round") == 0).height
    assert num_devices == 40 and evals.height == 3 * 40
    assert manifest["summary"]["test"]["p90"] >= manifest["summary"]["test"]["mean"]


def test_same_seed_same_files_other_seed_differs(tmp_path: Path) -> None:
    a, b, c = run(tmp_path, "a"), run(tmp_path, "b"), run(tmp_path, "c", seed=1)
    for table in TABLES:
        assert (a / f"{table}.parquet").read_bytes() == (b / f"{table}.parquet").read_bytes()
    assert (a / "eval.parquet").read_bytes() != (c / "eval.parquet").read_bytes()


def test_the_evaluation_cadence_does_not_change_training(tmp_path: Path) -> None:
    # Evaluating reads the model and writes eval rows only, so two ConvNet runs of
    # docs/reproduction.md could evaluate every 100 rounds, not 10, and keep the table's
    # final cells: same rounds, cohorts, messages and final evaluation, bit for bit.
    every3 = run(tmp_path, "every3")
    scenario = tmp_path / "every3.toml"
    every1 = tmp_path / "results" / "every1"
    assert main([str(scenario), "--set", "eval.every=1", "--out", str(every1), "--quiet"]) == 0
    for table in ("rounds", "clients", "comm"):
        assert (every3 / f"{table}.parquet").read_bytes() == (
            every1 / f"{table}.parquet").read_bytes()
    sparse, dense = (pl.read_parquet(d / "eval.parquet") for d in (every3, every1))
    assert dense["round"].unique().sort().to_list() == list(range(7))
    assert sparse.equals(dense.filter(pl.col("round").is_in([0, 3, 6])))
    summaries = [json.loads((d / "manifest.json").read_text())["summary"]
                 for d in (every3, every1)]
    assert summaries[0] == summaries[1]


def test_deltafl_theta_one_reproduces_fedavg(tmp_path: Path) -> None:
    delta = pl.read_parquet(run(tmp_path, "d", aggregator="deltafl", theta=1.0) / "eval.parquet")
    avg = pl.read_parquet(run(tmp_path, "f", aggregator="fedavg") / "eval.parquet")
    # Same models, bit for bit; only the simulated times differ (Δ-FL's loss reports).
    assert delta.drop("t_s").equals(avg.drop("t_s"))
    assert (delta["t_s"] >= avg["t_s"]).all()


@pytest.mark.slow
def test_bad_key_exits_2_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    scenario = tmp_path / "bad.toml"
    scenario.write_text("[aggregator]\nname = \"deltafl\"\nthetta = 0.5\n")
    proc = subprocess.run([sys.executable, "-m", "simfl", str(scenario), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "unknown key 'aggregator.thetta' (did you mean 'aggregator.theta'?)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "results").exists()


@pytest.mark.slow
def test_a_reader_that_leaves_does_not_fail_the_run(tmp_path: Path) -> None:
    """``python -m simfl S.toml | head -1``: the run's outcome does not depend on who
    reads its output. Here nobody does (the pipe's read end is closed before the run
    prints a line), and the run still completes and exits 0, with no traceback."""
    scenario = tmp_path / "s.toml"
    scenario.write_text(SMALL.format(seed=0, aggregator="deltafl", theta=0.5))
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "simfl", str(scenario), "--out",
                               str(tmp_path / "out"), "--quiet"],
                              stdout=write, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    finally:
        os.close(write)
    assert proc.returncode == 0, proc.stderr
    assert "BrokenPipeError" not in proc.stderr
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["status"] == "complete"


def test_existing_run_is_not_overwritten_without_flag(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = run(tmp_path, "a")
    before = (out / "eval.parquet").read_bytes()
    assert main([str(tmp_path / "a.toml"), "--out", str(out), "--quiet"]) == 2
    assert "use --overwrite" in capsys.readouterr().err
    assert (out / "eval.parquet").read_bytes() == before
    assert main([str(tmp_path / "a.toml"), "--out", str(out), "--quiet", "--overwrite"]) == 0


def test_trace_command_round_trips_through_replay(tmp_path: Path) -> None:
    """A diurnal run and the replay of its written trace select the same devices."""
    diurnal = tmp_path / "diurnal.toml"
    diurnal.write_text(SMALL.format(seed=0, aggregator="fedavg", theta=0.5) + """
[population.availability]
mode = "diurnal"
horizon_s = 86400.0
""")
    trace = tmp_path / "trace.csv"
    assert main(["trace", str(diurnal), "--out", str(trace)]) == 0
    assert pl.read_csv(trace).columns == ["client_idx", "t_on_s", "t_off_s"]
    replay = tmp_path / "replay.toml"
    replay.write_text(diurnal.read_text().replace('mode = "diurnal"',
                                                  f'mode = "trace"\ntrace_path = "{trace}"'))
    runs = []
    for scenario in (diurnal, replay):
        out = tmp_path / scenario.stem
        assert main([str(scenario), "--out", str(out), "--quiet"]) == 0
        runs.append(pl.read_parquet(out / "clients.parquet"))
    assert runs[0].select("round", "client_idx", "t_dispatch_s").equals(
        runs[1].select("round", "client_idx", "t_dispatch_s"))


def test_a_run_says_where_its_device_speeds_come_from(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIMFL_DATA_DIR", str(tmp_path))  # no devices/ folder in it
    capsys.readouterr()
    run(tmp_path, "plain", aggregator="fedavg")
    assert ("device speeds: lognormal draws (speed_log_sigma), scaled by the built-in LeNet "
            "fit ($SIMFL_DATA_DIR/devices not found)") in capsys.readouterr().out.splitlines()


def test_a_run_says_when_its_estimator_settings_are_not_used(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    run(tmp_path, "plain", aggregator="fedavg")
    assert "not used" not in capsys.readouterr().out
    scenario = tmp_path / "with_estimator.toml"
    scenario.write_text(SMALL.format(seed=0, aggregator="fedavg", theta=0.5)
                        + '[estimator]\nname = "secure_mm"\n')
    assert main([str(scenario), "--out", str(tmp_path / "w"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "aggregator 'fedavg' sets no threshold, so [estimator] is not used" in out
    assert pl.read_parquet(tmp_path / "w" / "bias.parquet").height == 0


@pytest.mark.parametrize("threads", [1, 2])
def test_a_run_uses_train_threads_and_gives_the_count_back(tmp_path: Path, threads: int) -> None:
    import torch

    before = torch.get_num_threads()
    scenario = tmp_path / "t.toml"
    scenario.write_text(SMALL.format(seed=0, aggregator="fedavg", theta=0.5).replace(
        "lr = 0.05", f"lr = 0.05\nthreads = {threads}"))
    assert main([str(scenario), "--out", str(tmp_path / "t"), "--quiet"]) == 0
    manifest = json.loads((tmp_path / "t" / "manifest.json").read_text())
    assert manifest["host"]["torch_threads"] == threads
    assert torch.get_num_threads() == before


def test_eval_rows_name_training_devices_by_the_index_clients_and_comm_use(
        tmp_path: Path) -> None:
    out = run(tmp_path, "keys")
    evals, clients = (pl.read_parquet(out / f"{t}.parquet") for t in ("eval", "clients"))
    train = evals.filter((pl.col("split") == "train") & (pl.col("round") == 0))
    assert train["client_idx"].to_list() == list(range(train.height))
    assert evals.filter(pl.col("split") == "test")["client_idx"].null_count() == evals.filter(
        pl.col("split") == "test").height
    # the same device has the same (client_idx, client_id) pair in both tables
    pairs = clients.select("client_idx", "client_id").unique()
    joined = pairs.join(train.select("client_idx", "client_id"), on="client_idx")
    assert joined.height == pairs.height
    assert (joined["client_id"] == joined["client_id_right"]).all()
