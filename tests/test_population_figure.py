"""simfl.study.population_figure on a hand-made bias table: the per-cell means and 95 %
t-intervals of the driving estimator's terms, counted as the objective prescribes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

from simfl.plots import save_figure
from simfl.study import population_figure as module
from tests.kept_runs import collected


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
    cells = module.cells(table(), "num_clients")
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
    cells = module.cells(table(), "num_clients")
    text = module.markdown(cells, "num_clients")
    assert "| 100 | 20 | 3 | +0.0220 ± " in text
    save_figure(module.figure(cells, "num_clients"), tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 10_000


def test_at_most_leaves_out_the_larger_populations(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """--at-most 1000 drops N = 10000 (availability 9 there): the table stops at 1000 and
    the availability slope is the two smaller sizes' (0.01 at 100, -0.01 at 1000)."""
    big = [row(10000, 20, seed, "cohort_exact", rnd, 0.002, 9.0)
           for seed in range(3) for rnd in range(5)]
    pl.concat([table(), pl.DataFrame(big)]).write_parquet(tmp_path / "bias.parquet")
    assert module.main([str(tmp_path), "--at-most", "1e3"]) == 0
    out = capsys.readouterr().out
    assert "| 1000 | 20 | 3 |" in out and "| 10000 |" not in out
    assert "| 20 | 6 | " in out and "-0.0200 ± " in out
    assert module.main([str(tmp_path), "--at-most", "500"]) == 2
    assert "--at-most 500: fewer than two population sizes" in capsys.readouterr().err


def test_one_seed_has_a_mean_and_no_interval() -> None:
    cells = module.cells(table().filter(pl.col("seed") == 1), "num_clients")
    assert cells["availability_bias"].to_list() == pytest.approx([0.01, -0.01])
    assert all(h != h for h in cells["availability_bias_half"].to_list())  # nan
    assert "| 100 | 20 | 1 | +0.0220 ± nan |" in module.markdown(cells, "num_clients")


def test_slopes_are_least_squares_per_decade_with_t_intervals() -> None:
    """Per run, availability is +seed/100 at N = 100 and -seed/100 at N = 1000: against
    x = log10 N (2, 3) the slope is mean(-s) - mean(s) = -0.02 per decade; by hand its
    standard error is sqrt(SSE / (n - 2) / Sxx), SSE the residuals around the two means."""
    fit = module.slopes(table(), "num_clients")
    assert fit["clients_per_round"].to_list() == [20] and fit["runs"].to_list() == [6]
    assert fit["availability_bias"][0] == pytest.approx(-0.02)
    sse = 2 * sum((v - 0.01) ** 2 for v in (0.0, 0.01, 0.02))  # each N's spread
    sxx = 6 * 0.25
    half = stats.t.ppf(0.975, 4) * (sse / 4 / sxx) ** 0.5
    assert fit["availability_bias_half"][0] == pytest.approx(half)
    assert fit["sampling_bias"][0] == pytest.approx(0.0, abs=1e-12)  # 0.002 at both N
    assert "| 20 | 6 | " in module.slope_markdown(fit)


def test_cohort_difference_pairs_runs_by_population_and_seed() -> None:
    """K = 100 copies of the table with sampling 0.002 + seed / 1000 against K = 20's 0.002:
    the paired difference is -seed / 1000, mean -0.001 over the six (N, seed) pairs."""
    base = table()
    other = base.filter(pl.col("round") > 0).with_columns(
        pl.lit(100, pl.Int64).alias("clients_per_round"),
        pl.lit(100, pl.Int64).alias("cohort_size"),
        (0.002 + pl.col("seed") / 1000).alias("sampling_bias"),
        pl.col("run_id").str.replace("clients_per_round=20", "clients_per_round=100"))
    diff = module.cohort_difference(pl.concat([base, other]), "num_clients")
    assert diff["pairs"].to_list() == [6]
    assert diff["sampling_bias"][0] == pytest.approx(-0.001)
    values = [-s / 1000 for s in (0, 1, 2)] * 2
    sd = float(np.std(values, ddof=1))
    assert diff["sampling_bias_half"][0] == pytest.approx(
        stats.t.ppf(0.975, 5) * sd / 6**0.5)
    assert diff["availability_bias"][0] == pytest.approx(0.0, abs=1e-12)
    assert "| 20 − 100 | 6 | " in module.difference_markdown(diff)


PAGE = Path(__file__).parents[1] / "docs" / "population_size.md"
ROOT_RUNS = Path(__file__).parents[1] / "docs" / "runs"
SWEEPS = {"population_size": "scenarios/study/population_size.sweep.toml",
          "population_size_habits": "scenarios/study/population_size_habits.sweep.toml"}


@pytest.mark.parametrize("sweep", ["population_size", "population_size_habits"])
def test_the_page_s_tables_are_the_kept_runs(sweep: str) -> None:
    """Every row of the three tables the script prints from docs/runs/<sweep> (cells,
    slopes per decade, K − K′) stands in docs/population_size.md as printed (minus signs
    typeset)."""
    bias = pl.read_parquet(collected(SWEEPS[sweep]) / "bias.parquet")
    axis = "num_clients"
    printed = "\n".join([module.markdown(module.cells(bias, axis), axis),
                         module.slope_markdown(module.slopes(bias, axis)),
                         module.difference_markdown(module.cohort_difference(bias, axis))])
    rows = [line for line in printed.splitlines()
            if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) >= 6 + 2 + 1
    page = PAGE.read_text()
    for line in rows:
        assert re.sub(r"-(\d)", r"−\1", line) in page, line


def test_the_10_3_to_10_5_slopes_the_page_compares_are_the_kept_runs() -> None:
    """The edition-two slopes over N ≤ 10⁵ that the habits section compares with
    (``--at-most 1.1e5``) and H1's 0.0054."""
    bias = pl.read_parquet(collected(SWEEPS["population_size"]) / "bias.parquet")
    bias = bias.filter(pl.col("num_clients") <= 1.1e5)
    slopes = module.slope_markdown(module.slopes(bias, "num_clients"))
    difference = module.difference_markdown(module.cohort_difference(bias, "num_clients"))
    page = PAGE.read_text()
    for cited in ("+0.0040 ± 0.0029", "+0.0037 ± 0.0023"):
        assert cited in slopes and cited in page
    assert "+0.0054 ± 0.0032" in difference and "0.0054" in page


def test_the_page_s_costs_are_the_kept_manifests() -> None:
    """The cost table's wall-time and peak-RSS ranges per N, and the habits runs' ranges,
    are the kept runs' manifests (wall_s, peak_rss_mb), rounded to the unit."""
    def ranges(sweep: str) -> dict[int, tuple[int, int, int, int, int]]:
        per_n: dict[int, list[tuple[float, float]]] = {}
        for manifest in (ROOT_RUNS / sweep).glob("*/manifest.json"):
            m = json.loads(manifest.read_text())
            n = m["scenario"]["data"]["synthetic"]["num_clients"]
            per_n.setdefault(n, []).append((m["wall_s"], m["peak_rss_mb"]))
        return {n: (len(v), round(min(w for w, _ in v)), round(max(w for w, _ in v)),
                    round(min(p for _, p in v)), round(max(p for _, p in v)))
                for n, v in per_n.items()}

    page = " ".join(PAGE.read_text().split())
    label = {1010: "10³", 10101: "10⁴", 101010: "10⁵", 1010101: "10⁶"}
    for n, (runs, w0, w1, p0, p1) in ranges("population_size").items():
        assert f"| {label[n]} | {runs} | {w0}–{w1} s | {p0}–{p1} MiB |" in page, n
    habits = ranges("population_size_habits").values()
    assert (f"Each took {min(r[1] for r in habits)}–{max(r[2] for r in habits)} s and "
            f"peaked at {min(r[3] for r in habits)}–{max(r[4] for r in habits)} MiB") in page
