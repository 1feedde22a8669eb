"""Tuning as the papers did it: the held-out split, the criteria, the choice per variant,
the evidence written, and the choice fed into a later sweep through ``include``."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from simfl.cli import main
from simfl.data.split import split_clients
from simfl.errors import InputError
from simfl.rundir import run_lock
from simfl.runs.sweep import load_sweep
from simfl.runs.sweep.spec import TUNING_CRITERIA
from simfl.runs.tune import CRITERIA, load_tuning, tune
from simfl.scenario import DataConfig
from tests.runs.test_sweep import ROOT
from tests.test_bad_input import SCENARIO as TINY

# the bad-input table's tiny scenario, as FedAvg over 8 rounds
SCENARIO = (TINY.replace('name = "deltafl"', 'name = "fedavg"')
            .replace("num_rounds = 12", "num_rounds = 8").replace("every = 6", "every = 8"))


def test_the_validation_split_holds_out_training_clients_and_sets_the_test_ones_aside() -> None:
    sizes = np.full(100, 150)
    plain = split_clients(sizes, DataConfig(), np.random.default_rng(0), "x")
    held = split_clients(sizes, DataConfig(validation_fraction=0.2), np.random.default_rng(0),
                         "x")
    assert len(held[1]) == 10 and len(held[0]) == 40  # 20 % of the 50 training clients
    assert set(held[0]) | set(held[1]) == set(plain[0])  # only training clients are used
    assert not set(held[1]) & set(plain[1])  # the test clients are never evaluated


@pytest.mark.parametrize("criterion", ["train_loss", "holdout_p90"])
@pytest.mark.slow
def test_tune_chooses_per_variant_and_writes_the_evidence(
        criterion: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.toml").write_text(SCENARIO)
    spec = tmp_path / "lr.tune.toml"
    spec.write_text(f'''scenario = "tiny.toml"
name = "lr"
criterion = "{criterion}"
seeds = [0, 1]
[grid]
"train.lr" = [1e-4, 0.5]
[variants.fedavg]
"aggregator.name" = "fedavg"
[variants.deltafl]
"aggregator.name" = "deltafl"
''')
    result = tune(spec, backend="sequential")
    assert result.table.height == 2 * 2 * 2  # variants x lr x seeds
    for variant in ("fedavg", "deltafl"):
        rows = result.table.filter(pl.col("variant") == variant)
        means = rows.group_by("lr").agg(pl.col("criterion").mean()).sort("criterion")
        assert result.chosen[variant] == {"train.lr": means["lr"][0]}  # the lowest mean
    if criterion == "train_loss":  # 8 rounds at lr 1e-4 barely move the loss from ln 10
        assert result.chosen["fedavg"] == {"train.lr": 0.5}
    report = result.report.read_text()
    assert "## fedavg" in report and "## deltafl" in report and report.count("chosen") >= 2
    # the choice feeds a final sweep, per variant; the sweep's own values win
    final = tmp_path / "final.sweep.toml"
    final.write_text(f'''scenario = "tiny.toml"
include = ["{result.chosen_file}"]
[variants.fedavg]
"aggregator.name" = "fedavg"
[variants.deltafl]
"aggregator.name" = "deltafl"
"train.lr" = 0.01
''')
    runs = {run.params["variant"]: run.overrides for run in load_sweep(final).runs}
    assert f"train.lr={result.chosen['fedavg']['train.lr']!r}" in runs["fedavg"]
    assert "train.lr=0.01" in runs["deltafl"]
    # the held-out split is the tuning's own: the final sweep evaluates the test devices
    assert not any("validation_fraction" in o for o in runs["fedavg"])


def test_a_failed_run_is_never_chosen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.toml").write_text(SCENARIO)
    spec = tmp_path / "t.toml"
    spec.write_text('scenario = "tiny.toml"\ncriterion = "train_loss"\n'
                    '[grid]\n"train.lr" = [1e30, 0.1]\n')
    result = tune(spec, backend="sequential")
    assert result.chosen[""] == {"train.lr": 0.1}
    assert math.isinf(result.table.filter(pl.col("lr") == 1e30)["criterion"][0])
    assert "[set]" in result.chosen_file.read_text()


@pytest.mark.slow
def test_a_variant_whose_runs_all_failed_gets_no_choice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    """Every round of the `late` variant closes before any update arrives: both its runs
    fail. It gets no choice (tuning.md says why, chosen.toml has no entry, exit 1) while
    `fedavg` is chosen; when no variant is chosen, no chosen.toml is left, not even an
    earlier tuning's."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.toml").write_text(SCENARIO)
    spec = tmp_path / "t.toml"
    spec.write_text('scenario = "tiny.toml"\nname = "t"\ncriterion = "train_loss"\n'
                    '[grid]\n"train.lr" = [0.05, 0.1]\n[variants.fedavg]\n'
                    '"aggregator.name" = "fedavg"\n[variants.late]\n'
                    '"server.deadline_s" = 1e-6\n')
    assert main(["tune", str(spec), "--backend", "sequential", "--quiet"]) == 1
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"simfl: tune {spec}: late: no choice: every grid point has a "
                                f"failed run"]
    assert out.splitlines()[-3:] == ["fedavg: train.lr = 0.1", "results/t/tuning.md",
                                     "results/t/chosen.toml"]
    chosen = (tmp_path / "results" / "t" / "chosen.toml").read_text()
    assert "[variants.fedavg]" in chosen and "late" not in chosen
    report = (tmp_path / "results" / "t" / "tuning.md").read_text()
    late = report[report.index("## late"):]
    assert "| 0.05 | inf | inf |  |" in late and "| 0.1 | inf | inf |  |" in late
    assert "chosen" not in late and "No choice: every grid point has a failed run." in late
    spec.write_text(spec.read_text().split("[variants.fedavg]")[0]
                    + '[set]\n"server.deadline_s" = 1e-6\n')
    assert main(["tune", str(spec), "--backend", "sequential", "--quiet"]) == 1
    assert "all runs: no choice: every grid point has a failed run" in capsys.readouterr().err
    assert not (tmp_path / "results" / "t" / "chosen.toml").exists()  # nor fedavg's choice
    assert "| 0.1 | inf | inf |  |" in (tmp_path / "results" / "t" / "tuning.md").read_text()


def test_a_run_left_to_another_process_is_not_scored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    """lr 1e30 diverges: its run fails and 1e-4 is chosen. While another process holds
    that failed run (resuming it), the run is neither +inf nor left out: no choice, and
    the earlier chosen.toml goes; once the run is free again, the choice is made."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.toml").write_text(SCENARIO)
    spec = tmp_path / "t.toml"
    spec.write_text('scenario = "tiny.toml"\nname = "t"\ncriterion = "train_loss"\n'
                    '[grid]\n"train.lr" = [1e-4, 1e30]\n')
    chosen = tmp_path / "results" / "t" / "chosen.toml"
    assert main(["tune", str(spec), "--backend", "sequential", "--quiet"]) == 0
    assert "train.lr = 0.0001" in capsys.readouterr().out and chosen.is_file()
    held = load_tuning(spec)[0].runs[1].run_dir
    assert json.loads((held / "manifest.json").read_text())["status"] == "failed"
    with run_lock(held):
        assert main(["tune", str(spec), "--backend", "sequential", "--quiet"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"simfl: tune {spec}: all runs: no choice: 1 of its 2 runs not complete "
                   f"(lr=1e+30,seed=0); tune again once they are"]
    assert not chosen.exists()
    assert "| 1e+30 | – | – |  |" in (tmp_path / "results" / "t" / "tuning.md").read_text()
    assert main(["tune", str(spec), "--backend", "sequential", "--quiet"]) == 0
    assert 'train.lr" = 0.0001' in chosen.read_text()


def test_tune_never_replaces_files_it_did_not_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    """A hand-written chosen.toml or tuning.md where tune would write: refused before any
    run (exit 2, one line), kept as it was; tune's own earlier files are replaced."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.toml").write_text(SCENARIO)
    spec = tmp_path / "t.toml"
    spec.write_text('scenario = "tiny.toml"\nname = "t"\ncriterion = "train_loss"\n'
                    '[grid]\n"train.lr" = [1e-4, 1e30]\n')
    out = tmp_path / "results" / "t"
    out.mkdir(parents=True)
    for name in ("chosen.toml", "tuning.md"):
        mine = out / name
        mine.write_text("# my own choice\n")
        assert main(["tune", str(spec), "--backend", "sequential", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err == (f"simfl: error: results/t/{name}: not written by simfl tune, and tune would "
                       f"replace it; move it, or give the tuning another name\n")
        assert sorted(p.name for p in out.iterdir()) == [name]  # no run began
        assert mine.read_text() == "# my own choice\n"
        mine.unlink()
    assert main(["tune", str(spec), "--backend", "sequential", "--quiet"]) == 0
    assert main(["tune", str(spec), "--backend", "sequential", "--quiet"]) == 0  # its own
    assert 'train.lr" = 0.0001' in (out / "chosen.toml").read_text()


def test_bad_tuning_files(tmp_path: Path) -> None:
    (tmp_path / "tiny.toml").write_text(SCENARIO)
    spec = tmp_path / "t.toml"
    spec.write_text('scenario = "tiny.toml"\ncriterion = "accuracy"\n[grid]\n"train.lr" = [1]\n')
    with pytest.raises(InputError, match="'criterion' must be one of"):
        tune(spec)
    spec.write_text('scenario = "tiny.toml"\ncriterion = "train_loss"\n')
    with pytest.raises(InputError, match=r"\[grid\]"):
        tune(spec)


def test_the_tuning_files_criteria_are_those_tune_computes() -> None:
    assert sorted(CRITERIA) == sorted(TUNING_CRITERIA)


@pytest.mark.slow
def test_tune_reuses_archived_runs_on_a_new_machine(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/archive_runs.py keeps a tuning file's runs; ``tune(archived=...)`` on a machine
    without results/ runs none of them again and chooses the same."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.toml").write_text(SCENARIO)
    spec = tmp_path / "t.tune.toml"
    spec.write_text('scenario = "tiny.toml"\nname = "t"\ncriterion = "holdout_p90"\n'
                    'seeds = [0, 1]\n[grid]\n"train.lr" = [1e-4, 0.5]\n')
    first = tune(spec, backend="sequential")
    subprocess.run([sys.executable, str(ROOT / "bench" / "archive_runs.py"), str(spec),
                    "--to", str(tmp_path / "kept")], check=True, capture_output=True)
    for name in ("tuning.md", "chosen.toml"):  # the choice travels with its runs
        assert ((tmp_path / "kept" / "t" / name).read_text()
                == (tmp_path / "results" / "t" / name).read_text())
    shutil.rmtree(tmp_path / "results")  # a new machine
    import simfl.runs.tune

    ran: list[int] = []
    monkeypatch.setattr(simfl.runs.tune, "run_sweep",
                        lambda sweep, backend, progress: ran.append(len(sweep.runs)) or {})
    again = tune(spec, backend="sequential", archived=tmp_path / "kept")
    assert ran == [0]
    assert again.table.equals(first.table) and again.chosen == first.chosen
