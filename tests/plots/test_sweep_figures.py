"""Any collected sweep's figures (simfl.plots.sweep): the grid points, seed means and
95 % t-intervals against hand-computed values, the files written and the ones skipped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from simfl.errors import InputError
from simfl.plots.sweep import (
    final_errors,
    grid_axes,
    plot_curves,
    plot_final,
    run_curves,
    seed_means,
    sweep_figures,
    t_interval,
)
from simfl.rundir import COLLECT_MARK, GRID_FIGURES

T_975_2 = 4.302652729911275  # Student's t, 0.975 quantile, 2 degrees of freedom (tables)


def collected(out: Path, runs: list[dict[str, object]], rounds: bool = True) -> Path:
    """A collected sweep folder: each run ``{axes..., seed, final}`` evaluated at rounds 0,
    2 and 4 on one test device (its p90 is that device's error: 1.0, then ``final`` + 0.1,
    then ``final``) and one training device; 100 B down and 10 · (seed + 1) B up a round."""
    out.mkdir()
    ev, rnd = [], []
    for run in runs:
        axes = {k: v for k, v in run.items() if k != "final"}
        run_id = ",".join(f"{k}={v}" for k, v in axes.items())
        final = float(run["final"])  # type: ignore[arg-type]
        for r, error in ((0, 1.0), (2, final + 0.1), (4, final)):
            for split in ("test", "train"):
                ev.append({"round": r, "t_s": 10.0 * r, "client_id": "d", "client_idx": None,
                           "split": split, "num_samples": 5, "loss": 1.0,
                           "error": error if split == "test" else 0.0, "run_id": run_id,
                           **axes})
        for r in range(4):
            rnd.append({"round": r, "bytes_down": 100, "bytes_up": 10 * (int(run["seed"]) + 1),
                        "run_id": run_id, **axes})
    pl.DataFrame(ev).write_parquet(out / "eval.parquet")
    if rounds:
        pl.DataFrame(rnd).write_parquet(out / "rounds.parquet")
    return out


THETA_SWEEP = [{"theta": t, "seed": s, "final": f}
               for t, finals in ((0.5, (0.2, 0.3, 0.4)), (0.8, (0.5, 0.5, 0.5)))
               for s, f in enumerate(finals)]


def test_t_interval_is_the_textbook_one() -> None:
    # 0.2, 0.3, 0.4: mean 0.3, s = 0.1, half-width t(0.975, 2) · 0.1 / sqrt(3)
    low, high = t_interval(np.array([0.2, 0.3, 0.4]))
    half = T_975_2 * 0.1 / np.sqrt(3)
    assert (low, high) == pytest.approx((0.3 - half, 0.3 + half))
    assert t_interval(np.array([0.7])) == (0.7, 0.7)  # one seed: no spread to measure


def test_grid_axes_are_the_columns_collect_added_but_the_seed(tmp_path: Path) -> None:
    runs = [{"variant": v, "clients_per_round": k, "seed": s, "final": 0.3}
            for v in ("a", "b") for k in (10, 20) for s in (0, 1)]
    ev = pl.read_parquet(collected(tmp_path / "s", runs) / "eval.parquet")
    assert grid_axes(ev) == ["variant", "clients_per_round"]
    assert grid_axes(ev.drop("variant", "clients_per_round")) == []


def test_seed_means_and_intervals_per_grid_point(tmp_path: Path) -> None:
    out = collected(tmp_path / "s", THETA_SWEEP)
    ev, rounds = (pl.read_parquet(out / f"{t}.parquet") for t in ("eval", "rounds"))
    curves = run_curves(ev.filter(pl.col("split") == "test"), rounds, ["theta"])
    means = seed_means(curves, "bytes_cum")
    assert means["point"].unique(maintain_order=True).to_list() == ["theta = 0.5",
                                                                   "theta = 0.8"]
    last = means.filter(pl.col("round") == 4)
    assert last["p90"].to_list() == pytest.approx([0.3, 0.5])
    half = T_975_2 * 0.1 / np.sqrt(3)
    assert last["low"].to_list() == pytest.approx([0.3 - half, 0.5])
    assert last["high"].to_list() == pytest.approx([0.3 + half, 0.5])
    # 4 rounds of 100 B down and 10, 20 or 30 B up: 440, 480, 520 B, mean 480
    assert last["bytes_cum"].to_list() == pytest.approx([480.0, 480.0])
    assert final_errors(curves)["p90"].to_list() == pytest.approx([0.2, 0.3, 0.4, 0.5, 0.5,
                                                                   0.5])


def test_the_curves_draw_a_line_and_a_band_per_grid_point(tmp_path: Path) -> None:
    out = collected(tmp_path / "s", THETA_SWEEP)
    ev, rounds = (pl.read_parquet(out / f"{t}.parquet") for t in ("eval", "rounds"))
    curves = run_curves(ev.filter(pl.col("split") == "test"), rounds, ["theta"])
    fig = plot_curves(curves, ["theta"], "round")
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"theta = 0.5", "theta = 0.8"}
    assert list(lines["theta = 0.5"].get_xdata()) == [0, 2, 4]
    assert list(lines["theta = 0.5"].get_ydata()) == pytest.approx([1.0, 0.4, 0.3])
    assert len(ax.collections) == 2  # a band each (θ = 0.8's has width 0)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["theta = 0.5",
                                                                  "theta = 0.8"]
    assert "3 seeds a grid point" in fig.get_suptitle()


def test_two_axes_make_a_panel_per_variant_with_the_same_colours(tmp_path: Path) -> None:
    runs = [{"variant": v, "clients_per_round": k, "seed": s, "final": 0.1 * k / 10}
            for v in ("always", "diurnal") for k in (10, 20) for s in (0, 1)]
    out = collected(tmp_path / "s", runs)
    ev, rounds = (pl.read_parquet(out / f"{t}.parquet") for t in ("eval", "rounds"))
    axes = grid_axes(ev)
    fig = plot_curves(run_curves(ev.filter(pl.col("split") == "test"), rounds, axes), axes,
                      "bytes_cum")
    assert [ax.get_title() for ax in fig.axes] == ["always", "diurnal"]
    colours = [{line.get_label(): line.get_color() for line in ax.get_lines()}
               for ax in fig.axes]
    assert set(colours[0]) == {"clients_per_round = 10", "clients_per_round = 20"}
    assert colours[0] == colours[1]
    assert fig.axes[1].get_xlabel() == "cumulative communication, down + up (B)"


def test_the_final_figure_gives_each_grid_point_its_t_interval(tmp_path: Path) -> None:
    out = collected(tmp_path / "s", THETA_SWEEP)
    ev = pl.read_parquet(out / "eval.parquet").filter(pl.col("split") == "test")
    ax = plot_final(final_errors(run_curves(ev, None, ["theta"])), ["theta"]).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.5", "0.8"]
    # seaborn draws each interval with its caps as one line, the pieces split by nan
    bars = [np.asarray(line.get_ydata(), float) for line in ax.get_lines()
            if np.isnan(np.asarray(line.get_ydata(), float)).any()]
    half = T_975_2 * 0.1 / np.sqrt(3)
    spans = sorted((float(np.nanmin(b)), float(np.nanmax(b))) for b in bars)
    assert spans[0] == pytest.approx((0.3 - half, 0.3 + half))
    assert spans[1] == pytest.approx((0.5, 0.5))
    assert ax.get_ylim()[0] <= 0.3 - half and ax.get_ylim()[1] >= 0.5


def test_sweep_figures_writes_the_grid_figures_marked_as_collects(tmp_path: Path) -> None:
    out = collected(tmp_path / "s", THETA_SWEEP)
    lines: list[str] = []
    written = sweep_figures(out, out / "plots", report=lines.append)
    assert [p.name for p in written] == list(GRID_FIGURES) and lines == []
    for path in written:
        with Image.open(path) as image:
            assert image.info.get("simfl") == COLLECT_MARK["simfl"]


def test_sweep_figures_name_what_they_skip_and_why(tmp_path: Path) -> None:
    out = collected(tmp_path / "no_rounds", THETA_SWEEP, rounds=False)
    lines: list[str] = []
    written = sweep_figures(out, out / "plots", report=lines.append)
    assert [p.name for p in written] == ["p90_vs_round.png", "final_p90.png"]
    assert lines == [f"simfl: collect {out}: skipped p90_vs_bytes.png: rounds.parquet was "
                     "not collected or is empty"]
    (out / "eval.parquet").unlink()
    lines.clear()
    assert sweep_figures(out, out / "plots", report=lines.append) == []
    assert lines == [f"simfl: collect {out}: skipped p90_vs_round.png, p90_vs_bytes.png, "
                     "final_p90.png: eval.parquet was not collected"]


def test_a_sweep_of_seeds_alone_is_one_grid_point(tmp_path: Path) -> None:
    runs = [{"seed": s, "final": f} for s, f in enumerate((0.2, 0.3, 0.4))]
    out = collected(tmp_path / "s", runs)
    written = sweep_figures(out, out / "plots")
    assert len(written) == 3
    ev = pl.read_parquet(out / "eval.parquet").filter(pl.col("split") == "test")
    fig = plot_curves(run_curves(ev, None, []), [], "round")
    assert [line.get_label() for line in fig.axes[0].get_lines()] == ["all runs"]


def test_a_table_collect_did_not_write_is_refused_in_one_line(tmp_path: Path) -> None:
    out = collected(tmp_path / "s", THETA_SWEEP)
    pl.read_parquet(out / "eval.parquet").drop("run_id").write_parquet(out / "eval.parquet")
    with pytest.raises(InputError, match="eval.parquet: not a collected sweep table") as info:
        sweep_figures(out, out / "plots")
    assert "\n" not in str(info.value)
    assert not (out / "plots").exists()
