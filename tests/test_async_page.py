"""simfl.study.async_table: its time to a level equals simfl.plots.runs.time_to_level, its
kept evidence refuses to replace what it did not write, and docs/async.md's two tables
are what it prints from the runs kept in docs/runs/async_check."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from simfl.plots.runs import time_to_level
from simfl.study import async_table
from simfl.tables import error_by_round

ROOT = Path(__file__).parents[1]
KEPT = ROOT / "docs" / "runs" / "async_check"
PAGE = ROOT / "docs" / "async.md"
FULL = {"sync_fedavg": "sync FedAvg", "sync_deltafl": "sync Δ-FL θ=0.5",
        "async_fedavg": "async FedAvg", "async_deltafl": "async Δ-FL θ=0.5"}
SMALL = {"small_sync_fedavg": "sync FedAvg", "small_sync_deltafl": "sync Δ-FL θ=0.5",
         "small_unpaced_fedavg": "sync FedAvg, unpaced",
         "small_unpaced_deltafl": "sync Δ-FL, unpaced",
         "small_async_fedavg": "async FedAvg", "small_async_deltafl": "async Δ-FL θ=0.5"}


def per_device_eval() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Three test evaluations of 10 devices (errors k/10 shifted down by 0.1 an
    evaluation) and a train one, after rounds of 5 + 7 bytes each."""
    rows = []
    for rnd in (0, 2, 4):
        for k in range(10):
            rows.append({"round": rnd, "split": "test", "t_s": 600.0 * rnd, "client_idx": k,
                         "error": max(0.0, k / 10 - 0.1 * rnd / 2)})
        rows.append({"round": rnd, "split": "train", "t_s": 600.0 * rnd, "client_idx": 0,
                     "error": 0.0})
    rounds = pl.DataFrame({"round": list(range(5)), "bytes_down": [5] * 5,
                           "bytes_up": [7] * 5, "t_end_s": [600.0 * (r + 1) for r in range(5)]})
    return pl.DataFrame(rows), rounds


@pytest.mark.parametrize("level", [1.0, 0.75, 0.7, 0.6, 0.5])
def test_first_at_is_time_to_level_from_the_per_evaluation_summary(level: float) -> None:
    ev, rounds = per_device_eval()
    got = async_table.first_at(error_by_round(ev), rounds, level)
    want = time_to_level(ev, rounds, level)
    if want is None:
        assert got is None
    else:
        assert got is not None and {k: got[k] for k in want} == want
    # p90 of k/10 − shift: 0.81, 0.71, 0.61 at rounds 0, 2, 4 (bytes 0, 24, 48)
    expected = {1.0: (0, 0), 0.75: (2, 24), 0.7: (4, 48), 0.6: None, 0.5: None}[level]
    assert (None if got is None else (got["round"], got["bytes_cum"])) == expected


def test_keep_refuses_a_folder_holding_other_files(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"status": "complete"}))
    mine = tmp_path / "keep" / "run"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("the user's")
    assert async_table.main([str(run), "--levels", "0.5", "--keep", str(tmp_path / "keep")]) == 2
    assert f"{mine}: holds what this command did not write" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def page_rows(header_start: str) -> dict[str, list[str]]:
    """The rows of docs/async.md's table whose header begins so: label -> cells."""
    lines = PAGE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.parametrize(("runs", "levels", "digits", "header"), [
    (FULL, (0.55, 0.50), 1, "| run | final test p90 | final mean | simulated time | total bytes"
                            " | devices aggregated | p90 ≤ 0.55"),
    (SMALL, (0.65, 0.60), 2, "| run | final test p90 | final mean | simulated time | total "
                             "bytes | devices aggregated | p90 ≤ 0.65"),
])
def test_the_page_s_tables_are_the_kept_runs(runs: dict[str, str], levels: tuple[float, ...],
                                            digits: int, header: str) -> None:
    page = page_rows(header)
    assert sorted(page) == sorted(runs.values())
    for folder, label in runs.items():
        printed = async_table.row(KEPT / folder, list(levels), digits)
        assert printed[0] == folder
        assert page[label] == [re.sub(r"−(?=\d)", "-", c) for c in printed[1:]], label
