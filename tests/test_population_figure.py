"""bench/population_figure.py on a hand-made bias table: the per-cell means and 95 %
t-intervals of the driving estimator's terms, counted as the objective prescribes."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from scipy import stats

from tests.bench_scripts import bench_module


def row(n: int, k: int, seed: int, estimator: str, rnd: int, sampling: float,
        availability: float) -> dict[str, object]:
    return dict(round=rnd, t_s=600.0 * rnd, estimator=estimator,
                driver=estimator == "cohort_exact", theta=0.5, cohort_size=k,
                oracle_quantile=1.0, bias=sampling + availability + 0.01,
                realized_conformity=0.5, sampling_bias=sampling,
                availability_bias=availability, selection_bias=0.01, mc_draws=50,
                protocol_bytes=0.0, secure_sums=0, num_clients=n, clients_per_round=k,
                run_id=f"num_clients={n},clients_per_round={k},seed={seed}", seed=seed)


def table() -> pl.DataFrame:
    """N in {100, 1000} x K = 20, seeds 0-2: cohort_exact drives; in round 0 (burn-in:
    below 20 % of the last round, 4) every term is 9 and must not count. The driving
    estimator's availability term is seed / 100 at N = 100 and -seed / 100 at N = 1000."""
    rows = []
    for n, sign in ((100, 1), (1000, -1)):
        for seed in range(3):
            rows.append(row(n, 20, seed, "cohort_exact", 0, 9.0, 9.0))
            rows.append(row(n, 20, seed, "ipw", 0, 9.0, 9.0))
            for rnd in range(1, 5):
                rows.append(row(n, 20, seed, "cohort_exact", rnd, 0.002, sign * seed / 100))
                rows.append(row(n, 20, seed, "ipw", rnd, 0.5, 0.5))
    return pl.DataFrame(rows)


def test_cells_are_the_driving_estimator_s_means_and_t_intervals() -> None:
    cells = bench_module("population_figure").cells(table(), "num_clients")
    assert cells["num_clients"].to_list() == [100, 1000]
    assert cells["seeds"].to_list() == [3, 3]
    half = stats.t.ppf(0.975, 2) * 0.01 / 3**0.5  # values 0, 0.01, 0.02: sd 0.01
    assert cells["availability_bias"].to_list() == pytest.approx([0.01, -0.01])
    assert cells["availability_bias_half"].to_list() == pytest.approx([half, half])
    assert cells["sampling_bias"].to_list() == pytest.approx([0.002, 0.002])
    assert cells["sampling_bias_half"].to_list() == pytest.approx([0.0, 0.0], abs=1e-12)
    assert cells["bias"].to_list() == pytest.approx([0.022, 0.002])


def test_the_script_prints_the_table_and_draws_the_figure(tmp_path: Path) -> None:
    table().write_parquet(tmp_path / "bias.parquet")
    module = bench_module("population_figure")
    cells = module.cells(table(), "num_clients")
    text = module.markdown(cells, "num_clients")
    assert "| 100 | 20 | 3 | +0.0220 ± " in text
    module.figure(cells, "num_clients", tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 10_000


def test_one_seed_has_a_mean_and_no_interval() -> None:
    module = bench_module("population_figure")
    cells = module.cells(table().filter(pl.col("seed") == 1), "num_clients")
    assert cells["availability_bias"].to_list() == pytest.approx([0.01, -0.01])
    assert all(h != h for h in cells["availability_bias_half"].to_list())  # nan
    assert "| 100 | 20 | 1 | +0.0220 ± nan |" in module.markdown(cells, "num_clients")
