"""simfl.study.dose against hand computations: the crossing of a paired curve, the
verdicts, the paired table and its bootstrap, and the rows read from run folders."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from simfl.records import SCHEMAS
from simfl.study.dose import (
    crossing,
    crossings,
    main,
    paired_table,
    read_runs,
    report,
    verdict,
)
from simfl.study.intervals import Difference


def test_crossing_interpolates_the_first_offset_where_the_move_reaches_the_amount() -> None:
    # |move| 0 at 0, 0.002 at 0.1, 0.010 at 0.3: 0.005 is reached 3/8 of the way to 0.3
    assert crossing(np.array([0.1, 0.3]), np.array([0.002, -0.010]), 0.005) == \
        pytest.approx(0.1 + 0.2 * 3 / 8)
    assert crossing(np.array([-0.3, -0.1]), np.array([0.010, 0.006]), 0.005) == \
        pytest.approx(0.1 * 5 / 6)  # the order of the offsets given does not matter
    assert crossing(np.array([0.1, 0.3]), np.array([0.001, 0.004]), 0.005) == math.inf


def test_verdicts_say_only_what_the_interval_supports() -> None:
    assert verdict(Difference(0.01, 0.006, 0.014, 0.01), 0.005) == "different"
    assert verdict(Difference(0.002, 0.001, 0.003, 0.01), 0.005) == "different, within ±0.005"
    assert verdict(Difference(0.0, -0.003, 0.004, 0.9), 0.005) == "equivalent within ±0.005"
    assert verdict(Difference(0.0, -0.009, 0.004, 0.9), 0.005) == "not detected"


def _runs() -> pl.DataFrame:
    """Three seeds at offsets 0, +0.1, +0.3; p90 moves by exactly 0.002 s + 0.004 at 0.1
    and 0.01 at 0.3 (s the seed), the mean never."""
    rows = []
    for seed in range(3):
        base = 0.4 + 0.01 * seed
        for offset, move in ((0.0, 0.0), (0.1, 0.002 * seed + 0.002), (0.3, 0.01)):
            rows.append({"theta": 0.5, "offset_nats": offset, "level_shift": 0.0,
                         "seed": seed, "status": "complete", "reason": "",
                         "test_p90": base + move, "test_mean": 0.3,
                         "kept_share": 0.5 - offset, "run": f"{offset},{seed}"})
    rows.append({"theta": 0.5, "offset_nats": 0.3, "level_shift": 0.0, "seed": 3,
                 "status": "failed", "reason": "RunStalled: every device filtered",
                 "test_p90": float("nan"), "test_mean": float("nan"),
                 "kept_share": float("nan"), "run": "0.3,3"})  # its seed has no control
    return pl.DataFrame(rows)


def test_paired_table_pairs_by_seed_against_the_undosed_run() -> None:
    table = paired_table(_runs(), {"test_p90": 0.005, "test_mean": 0.005, "kept_share": 0.05})
    first = table.row(0, named=True)
    assert (first["offset_nats"], first["seeds"]) == (0.1, 3)
    assert first["test_p90"] == pytest.approx(0.004)  # mean of 0.002, 0.004, 0.006
    t = 4.302652729749462  # t(0.975, 2 df); the differences' sd is 0.002
    assert first["test_p90_high"] - first["test_p90"] == pytest.approx(t * 0.002 / math.sqrt(3))
    assert first["test_mean"] == 0.0 and first["test_mean_verdict"] == "equivalent within ±0.005"
    assert table.row(1, named=True)["kept_share"] == pytest.approx(-0.3)


def test_crossings_bootstrap_whole_seeds() -> None:
    got = crossings(_runs(), draws=200).row(0, named=True)
    # mean curve: 0.004 at 0.1, 0.01 at 0.3 -> 0.1 + 0.2 * (0.001 / 0.006)
    assert got["offset_nats"] == pytest.approx(0.1 + 0.2 / 6)
    # each resample's curve at 0.1 lies in [0.002, 0.006]: the crossing within [0.075, 0.18]
    assert 0.075 <= got["low"] <= got["offset_nats"] <= got["high"] <= 0.1 + 0.2 * 3 / 8
    assert got["side"] == "above 0" and got["seeds"] == 3


def _write_run(folder: Path, seed: int, offset: float, p90: float, status: str) -> None:
    folder.mkdir(parents=True)
    estimator = {"name": "shifted", "shifted": {"base": "cohort_exact", "offset_nats": offset,
                                                "level_shift": 0.0}}
    manifest = {"status": status, "seed": seed,
                "scenario": {"aggregator": {"theta": 0.5}, "estimator": estimator,
                             "server": {"num_rounds": 10}},
                "summary": {"test": {"mean": 0.3, "p90": p90}}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    n = 4  # bias rounds 0, 3, 6, 9: those from round 2 on are averaged (0.6, 0.4, 0.5)
    table = {name: [None] * n for name in SCHEMAS["bias"].names}
    table |= {"round": [0, 3, 6, 9], "driver": [True] * n, "oracle_quantile": [1.0] * n,
              "realized_conformity": [0.9, 0.6, 0.4, 0.5]}
    pl.from_arrow(pl.DataFrame(table).to_arrow().cast(SCHEMAS["bias"])).write_parquet(
        folder / "bias.parquet")


def test_read_runs_takes_complete_runs_and_their_kept_share(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    _write_run(tmp_path / "sweep" / "a", 0, 0.0, 0.40, "complete")
    _write_run(tmp_path / "sweep" / "b", 0, 0.3, 0.42, "complete")
    _write_run(tmp_path / "sweep" / "c", 1, 0.3, 0.50, "running")
    _write_run(tmp_path / "sweep" / "d", 2, 0.3, 0.50, "failed")
    runs = read_runs([tmp_path / "sweep"]).sort("run")
    assert runs["run"].to_list() == ["a", "b", "d"]
    assert runs["status"].to_list() == ["complete", "complete", "failed"]
    assert runs["kept_share"].to_list()[:2] == pytest.approx([0.5, 0.5])
    assert np.isnan(runs["test_p90"][2])
    table = "\n".join(report(runs))
    assert "| 0.5 | +0.3 | +0 | 1 | 2 | 0.4200 |" in table  # seed 2 stopped learning
    alone = "\n".join(report(runs.filter(pl.col("run") != "b")))  # no +0.3 run complete
    assert "| 0.5 | +0.3 | +0 | 0 | 2 | — | — | — |" in alone
    assert main([str(tmp_path / "nowhere")]) == 2
    assert "nowhere: no such folder" in capsys.readouterr().err


def test_the_figure_draws_one_panel_an_outcome_with_the_points_and_intervals(
        tmp_path: Path) -> None:
    from simfl.plots.study import plot_dose_response
    from simfl.study.dose import MARGINS
    fig = plot_dose_response(paired_table(_runs(), MARGINS))
    axes = fig.get_axes()
    assert [a.get_ylabel() for a in axes] == ["Δ test p90 (points)", "Δ test mean (points)",
                                              "Δ kept share (points)"]
    x, y = axes[0].get_lines()[0].get_data()  # offsets 0, 0.1, 0.3 with the control at 0
    np.testing.assert_allclose(x, [0.0, 0.1, 0.3])
    np.testing.assert_allclose(y, [0.0, 0.4, 1.0])
    assert main([str(tmp_path / "nowhere"), "--figure", str(tmp_path / "f.png")]) == 2
