"""simfl.study.exposure on a constructed run: selections counted before each evaluation,
their rank correlation with the loss, and the quintiles, all by hand."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from simfl.study.exposure import by_quintile, exposure, keep, main, selections_and_losses


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
    tmp_path.mkdir(parents=True, exist_ok=True)
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


def test_a_kept_measure_reads_as_the_run(tmp_path: Path) -> None:
    run = _run(tmp_path / "run")
    (run / "manifest.json").write_text("{}")
    kept = keep(run, tmp_path / "kept")
    assert sorted(p.name for p in kept.iterdir()) == ["exposure.parquet", "manifest.json"]
    assert selections_and_losses(kept).equals(selections_and_losses(run))


def test_a_lean_run_is_refused_in_one_line(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 2
    assert "no clients.parquet" in capsys.readouterr().err


def test_the_readout_across_seeds_is_the_mean_correlation_with_its_interval(
        tmp_path: Path) -> None:
    import json

    from simfl.study.exposure import KEPT, across_seeds

    # two seeds of FedAvg over 5 devices: at round 10 aggregated counts rank the losses
    # exactly backwards (rho -1), at round 20 seed 0 keeps that and seed 1 is +1 (ranks
    # agree): mean 0 with a t-interval of +-12.706 (1 df); the change 20 - 10 is 0 and +2
    for seed, later in ((0, -1.0), (1, 1.0)):
        run = tmp_path / "kept" / f"seed={seed}"
        run.mkdir(parents=True)
        (run / "manifest.json").write_text(json.dumps(
            {"seed": seed, "scenario": {"aggregator": {"name": "fedavg"}}}))
        rows = [{"round": r, "client_idx": k, "loss": 1.0 / (k + 1), "selections": k,
                 "aggregated": k if (r == 10 or later < 0) else 4 - k}
                for r in (10, 20) for k in range(5)]
        pl.DataFrame(rows).write_parquet(run / KEPT)
    lines = across_seeds(tmp_path / "kept")
    assert lines[2] == "| fedavg | 0 | -1.000 | -1.000 |"
    assert lines[3] == "| fedavg | 1 | -1.000 | +1.000 |"
    assert lines[4] == ("| fedavg | mean [95 %] | -1.000 [-1.000, -1.000] | "
                        "+0.000 [-12.706, +12.706] |")
    assert lines[5].startswith("| fedavg | round 20 − round 10 | +1.000 [-11.706, +13.706] |")
