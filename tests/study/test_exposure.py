"""simfl.study.exposure on a constructed run: selections counted before each evaluation,
their rank correlation with the loss, and the quintiles, all by hand."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from simfl.study.exposure import by_quintile, exposure, main, selections_and_losses


def _run(tmp_path: Path) -> Path:
    """10 devices; device k is selected in rounds 0 .. k-1 (k times before round 10) and
    once more at round 12; evaluations at rounds 0, 10 and 20, train loss 1 / (k + 1) at
    10 and 20 (the more selected, the better fitted), test rows ignored."""
    clients = pl.DataFrame({"round": [r for k in range(10) for r in [*range(k), 12]],
                            "client_idx": [k for k in range(10) for _ in range(k + 1)]})
    # the even devices' updates were aggregated, the odd ones' filtered
    clients = clients.with_columns(status=pl.when(pl.col("client_idx") % 2 == 0).then(
        pl.lit("aggregated")).otherwise(pl.lit("filtered")))
    rows = [{"round": r, "client_idx": k, "split": split, "loss": 1.0 / (k + 1)}
            for r in (0, 10, 20) for k in range(10) for split in ("train", "test")]
    clients.write_parquet(tmp_path / "clients.parquet")
    pl.DataFrame(rows).write_parquet(tmp_path / "eval.parquet")
    return tmp_path


def test_selections_before_each_evaluation_against_the_loss(tmp_path: Path) -> None:
    table = selections_and_losses(_run(tmp_path))
    at10 = table.filter(pl.col("round") == 10).sort("client_idx")
    assert at10["selections"].to_list() == list(range(10))
    assert at10["aggregated"].to_list() == [k if k % 2 == 0 else 0 for k in range(10)]
    at20 = table.filter(pl.col("round") == 20).sort("client_idx")
    assert at20["selections"].to_list() == [k + 1 for k in range(10)]
    got = exposure(table)
    assert got["round"].to_list() == [10, 20]
    assert got["spearman"].to_list() == pytest.approx([-1.0, -1.0])
    # aggregated 0, 0, 2, 0, 4, 0, 6, 0, 8, 0 against losses falling with k, by hand: ranks
    # 3.5 (the six ties), 7, 8, 9, 10 against 10 .. 1; centred, their products sum to -20,
    # their squares to 65 and 82.5: -20 / sqrt(65 x 82.5)
    assert got["spearman_aggregated"][0] == pytest.approx(-20 / (65 * 82.5) ** 0.5)
    quintiles = by_quintile(table)
    assert quintiles["selections"].to_list() == pytest.approx([1.5, 3.5, 5.5, 7.5, 9.5])
    assert quintiles["devices"].to_list() == [2] * 5


def test_a_lean_run_is_refused_in_one_line(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 2
    assert "no clients.parquet" in capsys.readouterr().err
