"""``python -m simfl.study.bias_table`` on small hand-made bias tables whose answers are
computed by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).parents[1]


def bias_table(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "simfl.study.bias_table", str(folder), *args],
                          cwd=ROOT, capture_output=True, text=True)


def row(variant: str, seed: int, estimator: str, rnd: int, online: float) -> dict[str, object]:
    """One bias round: E_online − Q_pop = ``online`` (all of it sampling), bias = 2 online."""
    return dict(round=rnd, t_s=600.0 * rnd, estimator=estimator, driver=estimator == "A",
                theta=0.5, cohort_size=13, oracle_quantile=1.0, bias=2 * online,
                realized_conformity=0.5, sampling_bias=online, availability_bias=0.0,
                selection_bias=online, run_id=f"variant={variant},seed={seed}",
                variant=variant, seed=seed)


def write_paired_table(folder: Path) -> None:
    """Two cells (variants x, y) of three seeds, estimators A and B on rounds 0-4.

    Round 0 is burn-in (rounds before 20 % of the last, 4) and holds a value that would
    show. Per run, A − B of E_online − Q_pop over the rounds both have:
    x: 0.01, 0.02, 0.03 (seeds 0, 1, 2); y: -0.002, -0.004, -0.009, where in y seed 0 B has
    no round 2 and A's round 2 (5.0) must not count.
    """
    rows = []
    for seed, diff in enumerate((0.01, 0.02, 0.03)):
        rows += [row("x", seed, "A", 0, 9.0), row("x", seed, "B", 0, 0.1)]
        for rnd in range(1, 5):
            rows += [row("x", seed, "A", rnd, 0.1 + diff), row("x", seed, "B", rnd, 0.1)]
    for seed, diff in enumerate((-0.002, -0.004, -0.009)):
        rows += [row("y", seed, "A", 0, 9.0), row("y", seed, "B", 0, 0.1)]
        for rnd in range(1, 5):
            if seed == 0 and rnd == 2:
                rows.append(row("y", seed, "A", rnd, 5.0))
                continue
            rows += [row("y", seed, "A", rnd, 0.2 + diff), row("y", seed, "B", rnd, 0.2)]
    pl.DataFrame(rows).write_parquet(folder / "bias.parquet")


@pytest.mark.slow
def test_paired_differences_are_per_run_then_a_t_interval_over_seeds(tmp_path: Path) -> None:
    write_paired_table(tmp_path)
    out = bias_table(tmp_path, "--paired", "A,B", "--paired", "B,A", "--digits", "4")
    assert out.returncode == 0, out.stderr
    # x: mean 0.02, sd 0.01, half-width t(0.975, 2) 0.01 / √3 = 4.30265 · 0.0057735 = 0.02484
    # y: mean -0.005, sd √((0.003² + 0.001² + 0.004²) / 2) = 0.0036056,
    #    half-width 4.30265 · 0.0036056 / √3 = 0.0089567
    assert out.stdout.splitlines() == [
        "| variant | seeds | A − B | B − A |",
        "|---|---|---|---|",
        "| x | 3 | +0.0200 ± 0.0248 | -0.0200 ± 0.0248 |",
        "| y | 3 | -0.0050 ± 0.0090 | +0.0050 ± 0.0090 |"]


@pytest.mark.slow
def test_paired_takes_the_pivot_quantity(tmp_path: Path) -> None:
    write_paired_table(tmp_path)  # bias = 2 · (E_online − Q_pop): differences doubled
    out = bias_table(tmp_path, "--paired", "A,B", "--pivot", "bias", "--digits", "4")
    assert out.returncode == 0, out.stderr
    assert "| x | 3 | +0.0400 ± 0.0497 |" in out.stdout.splitlines()  # 2 · 0.02484 = 0.04968


@pytest.mark.slow
def test_paired_refuses_an_estimator_the_table_lacks(tmp_path: Path) -> None:
    write_paired_table(tmp_path)
    out = bias_table(tmp_path, "--paired", "A,C")
    assert out.returncode == 2
    assert "--paired: not in" in out.stderr and "C" in out.stderr


@pytest.mark.slow
def test_cohort_sizes_count_rounds_with_fewer_reports(tmp_path: Path) -> None:
    rows = [row("x", 0, "A", rnd, 0.1) | {"clients_per_round": 10} for rnd in range(5)]
    rows[3]["cohort_size"] = 12  # one round of five lost a report
    shadow = [r | {"estimator": "B", "driver": False, "cohort_size": 1} for r in rows]
    pl.DataFrame(rows + shadow).write_parquet(tmp_path / "bias.parquet")  # driver rows only
    pl.DataFrame({"round": range(5), "clients_per_round": [10] * 5, "num_selected": [13] * 5,
                  "t_start_s": [0.0, 600, 1200, 1800, 2400],
                  "t_end_s": [1.0, 602.5, 1201, 1801, 2401]}).write_parquet(
        tmp_path / "rounds.parquet")
    out = bias_table(tmp_path, "--cohort-sizes")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[2] == "| 10 | 5 | 13 | 12 | 1 | 20.000 | 13 | 2.5 |"


def test_against_prescribed_rebases_every_estimator_on_cohort_exacts_sampling_term() -> None:
    """Hand-computed: run a, round 20: cohort_exact's E_all − Q_pop is 0.01; ipw's own
    split (0.05, −0.07, 0.02) books its weights on uniform cohorts as sampling. Against
    the prescribed threshold ipw's sampling is 0.01 and its availability E_online − E_all
    (cohort_exact) = (0.05 − 0.07) − 0.01 = −0.03; selection stays; the sum stays."""
    from simfl.plots.study import against_prescribed

    bias = pl.DataFrame({
        "run_id": ["a"] * 2, "round": [20, 20], "estimator": ["cohort_exact", "ipw"],
        "bias": [-0.02, 0.0], "sampling_bias": [0.01, 0.05],
        "availability_bias": [-0.04, -0.07], "selection_bias": [0.01, 0.02]})
    out = against_prescribed(bias).sort("estimator")
    assert out["sampling_bias"].to_list() == [0.01, 0.01]
    assert out["availability_bias"].to_list() == pytest.approx([-0.04, -0.03])
    assert out["selection_bias"].to_list() == [0.01, 0.02]
    total = out["sampling_bias"] + out["availability_bias"] + out["selection_bias"]
    assert total.to_list() == pytest.approx(out["bias"].to_list())
