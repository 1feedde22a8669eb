"""simfl.study.compare on hand-made run folders: grid points, paired differences, Holm and
the three verdicts computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from scipy import stats

from simfl.study.compare import main, read_runs, verdict, versus_table

# (grid point, seed) -> (p90, mean) as fractions
RUNS = {("name=fedavg,opt=none", 0): (0.50, 0.30), ("name=fedavg,opt=none", 1): (0.52, 0.32),
        ("name=fedavg,opt=none", 2): (0.54, 0.34),
        ("name=fedavg,opt=x", 0): (0.51, 0.30), ("name=fedavg,opt=x", 1): (0.54, 0.33),
        ("name=fedavg,opt=x", 2): (0.57, 0.36),
        ("name=deltafl,opt=none", 0): (0.45, 0.31), ("name=deltafl,opt=none", 1): (0.47, 0.31),
        ("name=deltafl,opt=none", 2): (0.49, 0.31),
        ("name=deltafl,opt=x", 0): (0.45, 0.31), ("name=deltafl,opt=x", 1): (0.47, 0.31)}


def make(root: Path) -> Path:
    for (point, seed), (p90, mean) in RUNS.items():
        run = root / f"{point},seed={seed}"
        run.mkdir(parents=True)
        (run / "manifest.json").write_text(json.dumps(
            {"status": "complete", "seed": seed,
             "summary": {"test": {"p90": p90, "mean": mean}}}))
        pl.DataFrame({"bytes_up": [1e9, 1e9], "bytes_down": [0.5e9, 0.5e9]}).write_parquet(
            run / "rounds.parquet")
    stopped = root / "name=fedavg,opt=none,seed=3"  # not complete: left out
    stopped.mkdir()
    (stopped / "manifest.json").write_text(json.dumps({"status": "interrupted", "seed": 3}))
    return root


def test_the_points_and_the_paired_differences_are_the_hand_computed_ones(
        tmp_path: Path) -> None:
    runs = read_runs(make(tmp_path / "sweep"))
    assert len(runs) == 11 and set(runs["point"]) == {p for p, _ in RUNS}
    assert runs.filter(pl.col("point") == "name=fedavg,opt=none")["gb"].to_list() == [3.0] * 3
    lines = versus_table(runs, "opt", "none", margin=0.5)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[2:]}
    # fedavg: x − none = +1, +2, +3 points: mean 2, sd 1, n 3
    half = stats.t.ppf(0.975, 2) * 1 / 3 ** 0.5
    p = 2 * stats.t.sf(2 / (1 / 3 ** 0.5), 2)
    assert rows["name=fedavg,opt=x"].split(" | ")[2] == f"+2.00 [{2 - half:+.2f}, {2 + half:+.2f}]"
    # deltafl: x − none = 0, 0 on the two seeds both have: sd 0, p 1
    assert rows["name=deltafl,opt=x"].split(" | ")[1:3] == ["2", "+0.00 [+0.00, +0.00]"]
    # Holm over the two: the smaller p times 2, the larger at least that
    assert rows["name=fedavg,opt=x"].split(" | ")[3] == f"{min(1.0, 2 * p):.3f}"
    assert rows["name=deltafl,opt=x"].split(" | ")[3] == "1.000"
    assert rows["name=deltafl,opt=x"].split(" | ")[4] == "equivalent within ±0.5"


def test_the_three_verdicts() -> None:
    assert verdict(0.1, 0.9, 0.01, 0.5) == "different"
    assert verdict(0.1, 0.4, 0.2, 0.5) == "equivalent within ±0.5"  # Holm keeps it from "different"
    assert verdict(-0.2, 0.9, 0.3, 0.5) == "not detected"


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    sweep = make(tmp_path / "sweep")
    assert main([str(sweep), "--versus", "rule=none"]) == 2
    assert "no axis 'rule'" in capsys.readouterr().err
    assert main([str(sweep), "--versus", "opt=y"]) == 2
    assert "no run has opt = 'y'" in capsys.readouterr().err
    assert main([str(tmp_path / "none")]) == 2
    assert main([str(sweep)]) == 0
    assert "| name=deltafl,opt=x | 2 | 46.00 ± 12.71 |" in capsys.readouterr().out
