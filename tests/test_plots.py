"""Figures from Parquet: data-prep helpers against hand-computed values, files written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from matplotlib.figure import Figure

from simfl.errors import InputError
from simfl.plots.runs import (
    byte_unit,
    compare_runs,
    last_round_rows,
    plot_availability,
    plot_error_ecdf,
    plot_error_vs_size_by_rule,
    plot_p90_by_round,
    plot_round_durations,
    plot_run,
    run_label,
)
from simfl.plots.study import pareto_front, plot_final_tail_vs_bytes
from simfl.tables import cumulative_bytes, error_by_round, tail_vs_bytes

RUN_FIGURES = {"test_error_hist.png", "error_vs_rounds.png", "p90_vs_bytes.png",
               "p90_vs_time.png", "round_durations.png"}


def make_eval(test_errors: dict[int, list[float]],
              train_errors: dict[int, list[float]] | None = None) -> pl.DataFrame:
    """Long eval table: one row per (round, device, split); t_s = 100 s per round."""
    rows = []
    for split, by_round in (("test", test_errors), ("train", train_errors or {})):
        for round_idx, errors in by_round.items():
            for k, error in enumerate(errors):
                rows.append({"round": round_idx, "t_s": 100.0 * round_idx,
                             "client_id": f"{split}{k}", "split": split,
                             "num_samples": 10 * (k + 1), "loss": 2.0 * error, "error": error})
    return pl.DataFrame(rows)


def make_rounds(bytes_down: list[int], bytes_up: list[int]) -> pl.DataFrame:
    """Rounds of 100 s each, back to back."""
    n = len(bytes_down)
    return pl.DataFrame({
        "round": list(range(n)), "t_start_s": [100.0 * r for r in range(n)],
        "t_end_s": [100.0 * r + 60.0 + r for r in range(n)],
        "num_online": [50] * n, "num_selected": [10] * n, "num_kept": [5] * n,
        "num_aggregated": [5] * n, "num_dropped": [0] * n,
        "quantile_estimate": [None] * n, "bytes_down": bytes_down, "bytes_up": bytes_up,
    })


def write_run(run_dir: Path, eval_df: pl.DataFrame, rounds_df: pl.DataFrame,
              aggregator: dict[str, object] | None = None) -> Path:
    run_dir.mkdir(parents=True)
    eval_df.write_parquet(run_dir / "eval.parquet")
    rounds_df.write_parquet(run_dir / "rounds.parquet")
    if aggregator is not None:
        manifest = {"status": "complete", "scenario": {"name": "s", "aggregator": aggregator}}
        (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return run_dir


# Ten test devices with errors 0.0, 0.1, ..., 0.9: mean 0.45, p90 = 0.81 (linear interpolation:
# position 0.9 * 9 = 8.1 between 0.8 and 0.9).
TEN = [k / 10 for k in range(10)]


def test_error_by_round_matches_hand_computed_mean_and_p90() -> None:
    summary = error_by_round(make_eval({0: [0.5, 0.5], 2: TEN}, {2: [0.2, 0.4]}))
    test = summary.filter(pl.col("split") == "test")
    assert test["round"].to_list() == [0, 2]
    assert test["mean"].to_list() == pytest.approx([0.5, 0.45])
    assert test["p90"].to_list() == pytest.approx([0.5, 0.81])
    assert test["num_devices"].to_list() == [2, 10]
    assert test["t_s"].to_list() == [0.0, 200.0]
    train = summary.filter(pl.col("split") == "train")
    assert train["mean"].to_list() == pytest.approx([0.3])
    assert train["p90"].to_list() == pytest.approx([0.2 + 0.9 * 0.2])


def test_cumulative_bytes_counts_rounds_before_each_eval_round() -> None:
    table = cumulative_bytes(make_rounds([10, 20, 30], [1, 2, 3]))
    # eval round r has seen rounds 0..r-1: 0, 11, 11 + 22, 11 + 22 + 33
    assert table["round"].to_list() == [0, 1, 2, 3]
    assert table["bytes_cum"].to_list() == [0, 11, 33, 66]


def test_tail_vs_bytes_aligns_eval_rounds_with_bytes() -> None:
    eval_df = make_eval({0: [1.0, 1.0], 2: TEN, 5: [0.0]}, {2: [0.9]})
    table = tail_vs_bytes(eval_df, make_rounds([10, 20, 30], [1, 2, 3]))
    assert table["round"].to_list() == [0, 2, 5]
    assert table["bytes_cum"].to_list() == [0, 33, None]  # round 5 not in rounds.parquet
    assert table["p90"].to_list() == pytest.approx([1.0, 0.81, 0.0])


def test_last_round_rows_takes_the_last_test_round() -> None:
    rows = last_round_rows(make_eval({0: [0.1], 3: [0.2, 0.3]}, {3: [0.4], 4: [0.5]}))
    assert set(rows["round"].to_list()) == {3}
    assert sorted(rows["split"].to_list()) == ["test", "test", "train"]


@pytest.mark.parametrize(("max_bytes", "expected"), [
    (0, (1.0, "B")), (999, (1.0, "B")), (1_500, (1e3, "kB")),
    (2.5e6, (1e6, "MB")), (3e9, (1e9, "GB")), (4e12, (1e12, "TB")),
])
def test_byte_unit(max_bytes: float, expected: tuple[float, str]) -> None:
    assert byte_unit(max_bytes) == expected


def test_run_label_from_manifest_or_folder(tmp_path: Path) -> None:
    rounds = make_rounds([1], [1])
    ev = make_eval({0: [0.1]})
    assert run_label(write_run(tmp_path / "a", ev, rounds, {"name": "deltafl", "theta": 0.5})) \
        == "deltafl θ=0.5"
    assert run_label(write_run(tmp_path / "b", ev, rounds, {"name": "fedavg", "theta": 0.5})) \
        == "fedavg"
    assert run_label(write_run(tmp_path / "c", ev, rounds)) == "c"


def synthetic_run(run_dir: Path, seed: int = 0, with_availability: bool = False) -> Path:
    """A 48-round run with a diurnal round-duration cycle and noisy, decreasing errors."""
    rng = np.random.default_rng(seed)
    num_rounds = 48
    test = {r: list(np.clip(rng.beta(2, 8, 40) + 0.5 / (1 + r), 0, 1)) for r in range(0, 49, 8)}
    train = {r: list(np.clip(rng.beta(2, 10, 20) + 0.4 / (1 + r), 0, 1)) for r in test}
    rounds = make_rounds([2_000_000] * num_rounds, [1_500_000] * num_rounds)
    aggregator = {"name": "deltafl", "theta": 0.1 + 0.2 * seed}
    write_run(run_dir, make_eval(test, train), rounds, aggregator)
    if with_availability:
        hours = np.arange(48)
        pl.DataFrame({
            "t_s": np.repeat(hours * 3600.0, 2),
            "region": ["eu", "us"] * 48,
            "num_online": np.stack([100 + 80 * np.sin(2 * np.pi * hours / 24),
                                    100 + 80 * np.cos(2 * np.pi * hours / 24)], 1)
            .ravel().astype(np.int64),
        }).write_parquet(run_dir / "availability.parquet")
    return run_dir


@pytest.mark.slow
def test_plot_run_writes_every_figure_and_skips_missing_availability(tmp_path: Path) -> None:
    written = plot_run(synthetic_run(tmp_path / "run"))
    assert {p.name for p in written} == RUN_FIGURES
    assert all(p.parent == tmp_path / "run" / "plots" and p.stat().st_size > 0 for p in written)
    assert not (tmp_path / "run" / "plots" / "availability.png").exists()


@pytest.mark.slow
def test_plot_run_with_availability(tmp_path: Path) -> None:
    written = plot_run(synthetic_run(tmp_path / "run", with_availability=True))
    assert {p.name for p in written} == RUN_FIGURES | {"availability.png"}


def test_plot_run_skips_figures_of_empty_tables(tmp_path: Path) -> None:
    run_dir = synthetic_run(tmp_path / "run")
    make_eval({}).write_parquet(run_dir / "eval.parquet")
    lines: list[str] = []
    assert [p.name for p in plot_run(run_dir, report=lines.append)] == ["round_durations.png"]
    assert lines == [
        f"simfl: plot {run_dir}: skipped test_error_hist.png, p90_vs_time.png, p90_vs_bytes.png,"
        " error_vs_rounds.png: eval.parquet is missing or empty (no evaluation was recorded)",
        f"simfl: plot {run_dir}: skipped availability.png: availability.parquet is missing or"
        " empty (it is written when a run completes)",
    ]


def test_plot_run_says_on_stderr_what_it_skipped(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = synthetic_run(tmp_path / "run", with_availability=True)
    (run_dir / "eval.parquet").unlink()
    written = plot_run(run_dir)
    assert {p.name for p in written} == {"round_durations.png", "availability.png"}
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "eval.parquet is missing" in err[0]
    assert "error_vs_rounds.png" in err[0] and "round_durations.png" not in err[0]


@pytest.mark.slow
def test_plot_run_reports_nothing_when_every_figure_is_drawn(tmp_path: Path) -> None:
    lines: list[str] = []
    plot_run(synthetic_run(tmp_path / "run", with_availability=True), report=lines.append)
    assert lines == []  # a synchronous run has no staleness figure to skip


def short_rounds(num_rounds: int = 20, length_s: float = 3.6) -> pl.DataFrame:
    """Back-to-back rounds of length_s each: 20 of 3.6 s = 72 s = 0.02 h of simulated time."""
    starts = np.arange(num_rounds) * length_s
    rounds = make_rounds([10] * num_rounds, [10] * num_rounds)
    return rounds.with_columns(pl.Series("t_start_s", starts),
                               pl.Series("t_end_s", starts + length_s))


def test_availability_of_a_run_shorter_than_an_hour_spans_the_run() -> None:
    avail = pl.DataFrame({"t_s": [0.0, 0.0], "region": ["eu", "us"], "num_online": [30, 12]})
    ax = plot_availability(avail, end_s=72.0).axes[0]
    assert ax.get_xlim() == pytest.approx((0.0, 72.0))  # seconds, exactly the run
    assert ax.get_xlabel() == "simulated time (s)"
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"eu", "us", "total"}
    for label, count in (("eu", 30), ("us", 12), ("total", 42)):
        assert list(lines[label].get_xdata()) == [0.0, 72.0]  # a visible step, not a point
        assert list(lines[label].get_ydata()) == [count, count]
    assert ax.get_ylim()[0] == 0.0 and ax.get_ylim()[1] > 42


def test_availability_of_a_long_run_is_in_hours_up_to_its_end() -> None:
    hours = np.arange(30.0)
    avail = pl.DataFrame({"t_s": hours * 3600.0, "region": ["eu"] * 30,
                          "num_online": np.arange(30)})
    ax = plot_availability(avail, end_s=29.5 * 3600.0).axes[0]
    assert ax.get_xlabel() == "simulated time (h)"
    assert ax.get_xlim() == pytest.approx((0.0, 29.5))
    total = next(line for line in ax.get_lines() if line.get_label() == "total")
    assert total.get_xdata()[-1] == pytest.approx(29.5) and total.get_ydata()[-1] == 29
    # without the run's end: the last count holds for one sampling interval
    assert plot_availability(avail).axes[0].get_xlim() == pytest.approx((0.0, 30.0))


def test_round_durations_of_a_short_run_span_its_data() -> None:
    ax = plot_round_durations(short_rounds()).axes[0]
    assert ax.get_xlabel() == "round start, simulated time (s)"
    low, high = ax.get_xlim()
    assert -5.0 < low <= 0.0 and 68.4 <= high < 75.0  # starts 0 .. 68.4 s, matplotlib's margin
    _, labels = ax.get_legend_handles_labels()
    legend_lines = [line for line in ax.get_lines() if line.get_label() in labels]
    assert len(legend_lines) == len(labels)
    for line in legend_lines:  # every legend entry has something drawn
        assert len(line.get_xdata()) >= 2
    assert "1-minute mean" in labels


def test_round_durations_of_a_one_bin_run_have_no_mean_line() -> None:
    ax = plot_round_durations(short_rounds(num_rounds=10, length_s=5.0)).axes[0]  # 0 .. 45 s
    assert [line.get_label() for line in ax.get_lines()] == ["round"]
    assert ax.get_legend_handles_labels()[1] == ["round"]


def test_round_durations_of_a_long_run_show_the_hourly_mean_in_hours() -> None:
    rounds = make_rounds([1] * 48, [1] * 48).with_columns(
        (pl.col("t_start_s") * 36).alias("t_start_s"), (pl.col("t_end_s") * 36).alias("t_end_s"))
    ax = plot_round_durations(rounds).axes[0]  # 48 rounds an hour apart: 0 .. 47 h
    assert ax.get_xlabel() == "round start, simulated time (h)"
    mean = next(line for line in ax.get_lines() if line.get_label() == "hourly mean")
    assert len(mean.get_xdata()) == 48 and ax.get_xlim()[1] < 50


def test_plot_run_rejects_a_directory_without_tables(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a simfl run directory") as info:
        plot_run(tmp_path)
    assert "\n" not in str(info.value)


def test_compare_runs_writes_one_figure(tmp_path: Path) -> None:
    runs = [synthetic_run(tmp_path / f"run{k}", seed=k) for k in range(3)]
    out = compare_runs(runs, tmp_path / "cmp" / "comm_vs_tail.png")
    assert out == tmp_path / "cmp" / "comm_vs_tail.png"
    assert out.stat().st_size > 0


def test_compare_runs_rejects_a_run_without_eval(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="empty"):
        compare_runs([tmp_path / "empty"], tmp_path / "cmp.png")


def test_error_ecdf_draws_each_label_up_to_one() -> None:
    errors = pl.DataFrame({"label": ["a"] * 4 + ["b"] * 2,
                           "error": [0.1, 0.2, 0.2, 0.5, 0.0, 0.3]})
    ax = plot_error_ecdf(errors, "t").axes[0]
    curves = [line for line in ax.get_lines() if len(line.get_xdata()) > 2]
    assert len(curves) == 2  # one ECDF per label, beside the 90% level line
    for line in curves:
        assert line.get_ydata()[-1] == pytest.approx(1.0)
    tops = sorted(float(np.max(line.get_xdata()[np.isfinite(line.get_xdata())]))
                  for line in curves)
    assert tops == [0.3, 0.5]


def test_p90_by_round_draws_one_line_per_run() -> None:
    runs = pl.DataFrame({"label": ["a"] * 6 + ["b"] * 3, "seed": [0, 0, 0, 1, 1, 1, 0, 0, 0],
                         "round": [20, 0, 10] * 3,
                         "p90": [0.3, 0.5, 0.4, 0.2, 0.6, 0.35, 0.1, 0.2, 0.15]})
    ax = plot_p90_by_round(runs, "t").axes[0]
    lines = sorted((tuple(line.get_xdata()), tuple(line.get_ydata())) for line in ax.get_lines()
                   if len(line.get_xdata()) == 3)
    assert lines == [((0, 10, 20), (0.2, 0.15, 0.1)), ((0, 10, 20), (0.5, 0.4, 0.3)),
                     ((0, 10, 20), (0.6, 0.35, 0.2))]  # each run in round order, not averaged
    assert set(ax.get_legend_handles_labels()[1]) == {"a", "b"}


def test_the_bias_decomposition_figure_stacks_the_three_terms(tmp_path: Path) -> None:
    import polars as pl

    from simfl.plots.study import plot_bias_decomposition

    rows = pl.DataFrame({
        "round": [10, 10], "estimator": ["a", "b"], "theta": [0.5, 0.5],
        "oracle_quantile": [1.0, 1.0], "realized_conformity": [0.5, 0.5],
        "sampling_bias": [0.1, -0.2], "availability_bias": [0.3, 0.1],
        "selection_bias": [-0.05, 0.0], "bias": [0.35, -0.1], "mc_draws": [50, 50]})
    fig = plot_bias_decomposition(rows)
    ax = fig.axes[0]
    heights = sorted(round(p.get_height(), 6) for p in ax.patches if p.get_height() != 0)
    # a: +0.1, +0.3 and -0.05; b: -0.2 and +0.1 (zero-height parts are not drawn)
    assert heights == [-0.2, -0.05, 0.1, 0.1, 0.3]
    totals = [line for line in ax.lines if line.get_marker() == "."][0]
    assert list(totals.get_ydata()) == [0.35, -0.1]


def _study_bias(ks: tuple[int, ...]) -> pl.DataFrame:
    import polars as pl

    rows = []
    for k in ks:
        for seed in (0, 1):
            for r in range(10):
                rows.append({"run_id": f"k={k},seed={seed}", "clients_per_round": k,
                             "seed": seed, "round": r, "estimator": "cohort_exact",
                             "driver": True, "theta": 0.5, "estimate": 1.0 + 0.01 * k,
                             "oracle_quantile": 1.0, "bias": 0.01 * k,
                             "realized_conformity": 0.5, "protocol_bytes": 4,
                             "secure_sums": 0, "cohort_size": k})
    return pl.DataFrame(rows)


def test_the_sweep_decomposition_averages_the_causes_over_runs_per_panel() -> None:
    import polars as pl

    from simfl.plots.study import plot_decomposition_by

    # sampling 0.02 (seed + 1) - 0.0005 K: K = 10, seeds 0 and 1: 0.015 and 0.035 (mean 0.025);
    # K = 50: -0.005 and 0.015 (mean 0.005). Availability -0.05 at θ = 0.5, 0 at θ = 0.1;
    # selection 0 throughout. Two θ: two panels.
    bias = pl.concat([_study_bias((10, 50)).with_columns(
        pl.lit(theta).alias("theta"), pl.col("run_id") + f",theta={theta}",
        sampling_bias=0.02 * (pl.col("seed") + 1) - 0.0005 * pl.col("clients_per_round"),
        availability_bias=pl.lit(-0.05 * sign), selection_bias=pl.lit(0.0),
        mc_draws=pl.lit(50)) for theta, sign in ((0.5, 1.0), (0.1, 0.0))])
    bias = bias.with_columns(bias=pl.col("sampling_bias") + pl.col("availability_bias"))
    fig = plot_decomposition_by(bias, "clients_per_round")
    assert [ax.get_title() for ax in fig.axes] == ["θ = 0.5", "θ = 0.1"]
    for ax, availability in zip(fig.axes, (-0.05, 0.0), strict=True):
        heights = sorted(round(p.get_height(), 6) for p in ax.patches if p.get_height() != 0)
        assert heights == sorted([0.025, 0.005, *[availability] * 2 * (availability != 0)])
        totals = [line for line in ax.lines if line.get_marker() == "."][0]
        assert list(totals.get_ydata()) == pytest.approx([0.025 + availability,
                                                          0.005 + availability])
        assert [t.get_text() for t in ax.get_xticklabels()] == ["10", "50"]


def test_the_cohort_axis_is_labelled_with_the_sweep_values() -> None:
    from simfl.plots.study import plot_bias_by

    ax = plot_bias_by(_study_bias((10, 50)), "clients_per_round", "bias", "bias").axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["10", "50"]
    assert all(t.get_text() == "" for t in ax.xaxis.get_minorticklabels())


def test_per_run_bias_averages_the_online_part_of_the_decomposition() -> None:
    import polars as pl

    from simfl.plots.study import per_run_bias

    bias = _study_bias((10,)).with_columns(
        sampling_bias=pl.col("round") * 0.01, availability_bias=pl.lit(-0.05))
    runs = per_run_bias(bias, ["clients_per_round"])
    # rounds 2..9 after the burn-in (20 % of the last round, 9): sampling 0.02 .. 0.09
    assert runs["online_bias"].to_list() == pytest.approx([0.055 - 0.05] * 2)


def test_runs_at_different_theta_are_drawn_in_their_own_panels() -> None:
    import polars as pl

    from simfl.plots.study import plot_bias_by

    # bias 0.1 K at θ = 0.5 and -0.1 K at θ = 0.1: averaged together they would cancel
    bias = pl.concat([_study_bias((10, 50)).with_columns(
        pl.lit(theta).alias("theta"), pl.col("run_id") + f",theta={theta}",
        pl.col("bias") * sign) for theta, sign in ((0.5, 1.0), (0.1, -1.0))])
    fig = plot_bias_by(bias, "clients_per_round", "bias", "bias")
    # in the order the (collected) sweep lists them, not sorted
    assert [ax.get_title() for ax in fig.axes] == ["θ = 0.5", "θ = 0.1"]
    for ax, sign in zip(fig.axes, (1.0, -1.0), strict=True):
        means = [line for line in ax.get_lines() if len(line.get_xdata()) == 2][0]
        assert list(means.get_ydata()) == pytest.approx([sign * 0.1, sign * 0.5])


def test_tail_vs_bytes_by_estimator_keeps_cohort_sizes_apart() -> None:
    import polars as pl

    from simfl.plots.study import plot_tail_vs_bytes_by_estimator

    bias = _study_bias((10, 50))
    runs = bias.select("run_id", "clients_per_round").unique()
    rounds = pl.concat([pl.DataFrame({"run_id": [r] * 3, "clients_per_round": [k] * 3,
                                      "round": [0, 1, 2], "bytes_down": [100, 100, 100],
                                      "bytes_up": [50, 50, 50]})
                        for r, k in runs.iter_rows()])
    ev = pl.concat([pl.DataFrame({"run_id": [r] * 4, "round": [0, 0, 3, 3],
                                  "split": ["test"] * 4, "error": [0.5, 0.7, 0.2, 0.4],
                                  "t_s": [0.0, 0.0, 1.0, 1.0]})
                    for r, _ in runs.iter_rows()])
    ax = plot_tail_vs_bytes_by_estimator(rounds, ev, bias).axes[0]
    labels = {t.get_text() for t in ax.get_legend().get_texts()}
    assert labels == {"cohort_exact, clients_per_round 10", "cohort_exact, clients_per_round 50"}


def _tail_tables(runs: list[dict[str, object]]) -> tuple[pl.DataFrame, ...]:
    """rounds, eval and bias tables of runs given as {run_id, driver or None, axes...} and
    optionally the final error and bytes down per round."""
    import polars as pl

    rounds, ev, bias = [], [], []
    for run in runs:
        axes = {k: [v] * 3 for k, v in run.items() if k not in ("driver", "final", "down")}
        rounds.append(pl.DataFrame({**axes, "round": [0, 1, 2],
                                    "bytes_down": [run.get("down", 100)] * 3,
                                    "bytes_up": [50] * 3}))
        ev.append(pl.DataFrame({"run_id": [run["run_id"]] * 2, "round": [0, 2],
                                "split": ["test"] * 2, "error": [0.5, run.get("final", 0.2)],
                                "t_s": [0.0, 1.0]}))
        if run["driver"]:
            bias.append(pl.DataFrame({"run_id": [run["run_id"]], "driver": [True],
                                      "estimator": [run["driver"]]}))
    return pl.concat(rounds), pl.concat(ev), pl.concat(bias)


def test_tail_vs_bytes_panels_by_population_and_theta_but_not_by_driver() -> None:
    from simfl.plots.study import plot_tail_vs_bytes_by_estimator

    # a study: one driver, variants are populations, two θ: a panel each, K in the line
    study = [{"run_id": f"{v},{t},{k}", "driver": "cohort_exact", "variant": v, "theta": t,
              "clients_per_round": k} for v in ("always", "diurnal") for t in (0.1, 0.5)
             for k in (10, 50)]
    fig = plot_tail_vs_bytes_by_estimator(*_tail_tables(study))
    assert [ax.get_title() for ax in fig.axes] == [
        "always, θ = 0.1", "diurnal, θ = 0.1", "always, θ = 0.5", "diurnal, θ = 0.5"]
    assert {t.get_text() for t in fig.axes[1].get_legend().get_texts()} == {
        "cohort_exact, clients_per_round 10", "cohort_exact, clients_per_round 50"}
    # the drivers sweep: the variants are the drivers, one panel with a line each
    drivers = [{"run_id": v, "driver": d, "variant": v}
               for v, d in (("fedavg", None), ("cohort_exact", "cohort_exact"))]
    fig = plot_tail_vs_bytes_by_estimator(*_tail_tables(drivers))
    assert len(fig.axes) == 1
    assert {t.get_text() for t in fig.axes[0].get_legend().get_texts()} == {
        "fedavg", "cohort_exact"}  # a driver's line is named by its variant
    # the seeds of a line are averaged at each evaluation round, in bytes and in p90
    seeds = [{"run_id": f"s{i}", "driver": "ipw", "seed": i, "final": e, "down": d}
             for i, (e, d) in enumerate(((0.2, 100), (0.4, 300)))]
    fig = plot_tail_vs_bytes_by_estimator(*_tail_tables(seeds))
    (line,) = fig.axes[0].get_lines()[:1]
    # the model of round 0 cost nothing yet, p90 0.5; after 2 rounds of 150 or 350 B: 300
    # or 700 B (mean 500), p90 0.2 or 0.4
    assert list(line.get_xdata()) == pytest.approx([0.0, 500.0])
    assert list(line.get_ydata()) == pytest.approx([0.5, 0.3])
    # the frame fits 0.3 ± 0.141 (sd of 0.2 and 0.4); the untrained 0.5 is above it, and said
    assert fig.axes[0].get_ylim()[1] == pytest.approx(0.3 + 2 ** 0.5 / 10 * 1.1, abs=1e-3)
    assert fig.get_suptitle().endswith("is above the frame")


def test_pareto_front_keeps_the_variants_nobody_beats_in_both() -> None:
    # means: a (1.0, 0.50), b (2.0, 0.40), c (2.0, 0.45) beaten by b, d (3.0, 0.40) by b
    runs = pl.DataFrame({"variant": ["a", "a", "b", "c", "d"],
                         "gb": [0.9, 1.1, 2.0, 2.0, 3.0],
                         "p90": [0.49, 0.51, 0.40, 0.45, 0.40]})
    assert sorted(pareto_front(runs)) == ["a", "b"]


def test_final_tail_vs_bytes_marks_every_variant_and_the_front() -> None:
    runs = pl.DataFrame({"variant": ["a", "a", "b", "b"], "gb": [1.0, 1.2, 2.0, 2.2],
                         "p90": [0.5, 0.52, 0.4, 0.42]})
    ax = plot_final_tail_vs_bytes(runs).axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert set(labels) == {"Pareto front", "a (2)", "b (2)"}
    front = [line for line in ax.get_lines() if line.get_label() == "Pareto front"][0]
    np.testing.assert_allclose(front.get_xdata(), [1.1, 2.1])


def test_error_vs_size_by_rule_draws_one_colour_per_rule() -> None:
    errors = pl.DataFrame({"label": ["fedavg"] * 3 + ["deltafl"] * 3,
                           "num_samples": [100, 200, 400] * 2,
                           "error": [0.5, 0.4, 0.3, 0.45, 0.4, 0.35]})
    ax = plot_error_vs_size_by_rule(errors, "t").axes[0]
    assert ax.get_xscale() == "log"
    assert set(ax.get_legend_handles_labels()[1]) == {"fedavg", "deltafl"}


@pytest.mark.slow
def test_plot_refuses_a_bad_figure_suffix_or_a_plots_file_before_writing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found before any figure is written: --compare with a suffix matplotlib cannot save,
    a run whose plots/ is a file."""
    from simfl.cli import main

    runs = [synthetic_run(tmp_path / f"run{k}", seed=k) for k in range(2)]
    assert main(["plot", *map(str, runs), "--compare", str(tmp_path / "cmp.txt")]) == 2
    assert capsys.readouterr().err == (f"simfl: error: {tmp_path / 'cmp.txt'}: a figure file "
                                       f"must end in .png, .pdf or .svg\n")
    assert not (tmp_path / "cmp.txt").exists() and not (runs[0] / "plots").exists()
    (runs[1] / "plots").write_text("my notes")
    assert main(["plot", *map(str, runs)]) == 2
    assert capsys.readouterr().err == (f"simfl: error: {runs[1] / 'plots'}: exists and is not "
                                       f"a directory (the figures go there)\n")
    assert not (runs[0] / "plots").exists() and (runs[1] / "plots").read_text() == "my notes"
    assert main(["plot", str(runs[0]), "--compare", str(tmp_path / "cmp.svg")]) == 0
    assert (tmp_path / "cmp.svg").read_text().startswith("<?xml")


@pytest.mark.slow
def test_plot_level_says_when_the_bytes_to_reach_it_are_not_known_yet(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A stopped sync run has the evaluation of its last round before that round's row
    # (written once its stragglers end): here round 1's. The level is first reached at
    # that evaluation (round 2: p90 0.81), whose bytes are unknown. Before, a TypeError.
    from simfl.cli import main

    run = write_run(tmp_path / "run", make_eval({0: [0.9] * 10, 1: [0.9] * 10, 2: TEN}),
                    make_rounds([100], [50]), {"name": "fedavg"})
    assert main(["plot", str(run), "--level", "0.85"]) == 0
    out = capsys.readouterr().out
    assert (f"{run}: p90 <= 0.85 at 0.06 h, round 2, bytes not known yet (the round's row "
            "is written when its stragglers end)") in out
    assert main(["plot", str(run), "--level", "0.95"]) == 0  # reached at round 0: 0 bytes
    assert f"{run}: p90 <= 0.95 at 0.00 h, round 0, 0.00 GB" in capsys.readouterr().out


def _beside(fig: Figure) -> bool:
    """Whether the legend of ``fig``'s first axes lies right of the axes, off the data."""
    fig.draw_without_rendering()
    ax = fig.axes[0]
    legend = ax.get_legend()
    return legend is not None and legend.get_window_extent().x0 >= ax.get_window_extent().x1


def test_round_durations_are_on_a_log_axis_in_seconds() -> None:
    # most rounds close in 0.4 s, two wait 8 minutes: both show on a log axis
    rounds = short_rounds(num_rounds=40, length_s=0.4)
    ends = rounds["t_end_s"].to_numpy().copy()
    ends[[5, 30]] += 480.0
    ends[7] = rounds["t_start_s"][7]  # a round of zero length: not drawable, counted
    fig = plot_round_durations(rounds.with_columns(pl.Series("t_end_s", ends)))
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_ylabel() == "round duration (s, log scale)"
    low, high = ax.get_ylim()
    assert low < 0.4 and high > 480.4
    points = next(line for line in ax.get_lines() if line.get_label() == "round")
    assert len(points.get_ydata()) == 39
    assert ax.get_title() == "Round durations (40 rounds; 1 of zero length not drawn)"
    assert _beside(fig)


def test_error_vs_rounds_legend_is_beside_the_curves() -> None:
    from simfl.plots.runs import plot_error_vs_rounds

    assert _beside(plot_error_vs_rounds(make_eval({0: TEN, 5: TEN}, {0: TEN, 5: TEN})))


def test_the_bias_decomposition_says_which_rounds_it_averages() -> None:
    from simfl.plots.study import plot_bias_decomposition

    rounds = list(range(0, 101, 10))  # burn-in: rounds before 20 (20 % of 100) are left out
    bias = pl.DataFrame({
        "round": rounds, "estimator": ["a"] * 11, "theta": [0.5] * 11,
        "oracle_quantile": [1.0] * 11, "realized_conformity": [0.5] * 11,
        "sampling_bias": [0.1] * 11, "availability_bias": [0.3] * 11,
        "selection_bias": [-0.05] * 11, "bias": [0.35] * 11, "mc_draws": [50] * 11})
    fig = plot_bias_decomposition(bias)
    assert " ".join(fig.get_suptitle().split("\n")[1:]) == (
        "mean over the 9 rounds from 20 to 100 with the population quantile, after a "
        "burn-in (the first 20% of the run)")
    assert _beside(fig) and _title_fits(fig)


def _title_fits(fig: Figure) -> bool:
    """Whether ``fig``'s (drawn) title is inside the figure, not cut off on either side."""
    title = fig._suptitle.get_window_extent()  # type: ignore[union-attr]
    return bool(title.x0 >= 0 and title.x1 <= fig.bbox.x1)


def _variant_bias() -> pl.DataFrame:
    """_study_bias's runs at one cohort size, as two variants with two estimators."""
    return pl.concat([_study_bias((20,)).with_columns(
        pl.lit(v).alias("variant"), pl.lit(e).alias("estimator"),
        pl.col("run_id") + f",{v},{e}") for v in ("b", "a") for e in ("x", "y")])


def test_sweep_figures_join_numbers_by_lines_and_never_categories() -> None:
    from simfl.plots.study import plot_bias_by

    # variants side by side, in the sweep's order, each estimator's dot apart: no line
    ax = plot_bias_by(_variant_bias().drop("clients_per_round"), "variant", "bias", "b").axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["b", "a"]
    dots = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert len(dots) == 2 and all(line.get_linestyle() == "None" for line in dots)
    assert [list(line.get_xdata()) for line in dots] == [pytest.approx([-0.15, 0.85]),
                                                         pytest.approx([0.15, 1.15])]
    # the cohort size is a number: drawn at its values, on a log axis, joined
    ax = plot_bias_by(_study_bias((10, 20, 80)), "clients_per_round", "bias", "b").axes[0]
    assert ax.get_xscale() == "log"
    (dots,) = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert list(dots.get_xdata()) == [10, 20, 80] and dots.get_linestyle() == "-"
    assert ax.get_legend().get_title().get_text() == "estimator\n(mean ± 1 sd over seeds)"


def test_the_sweep_decomposition_has_bars_at_the_cohort_sizes_and_a_title_that_fits() -> None:
    from simfl.plots.study import plot_decomposition_by

    bias = _study_bias((10, 20, 80)).with_columns(
        sampling_bias=pl.lit(0.01), availability_bias=pl.lit(-0.02),
        selection_bias=pl.lit(0.0), mc_draws=pl.lit(50), estimator=pl.lit("a_long_name"))
    fig = plot_decomposition_by(bias, "clients_per_round")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    centres = sorted({round((p.get_x() * (p.get_x() + p.get_width())) ** 0.5, 6)
                      for p in ax.patches if p.get_height() != 0})
    assert centres == pytest.approx([10.0, 20.0, 80.0])  # geometric centres on the log axis
    fig.draw_without_rendering()
    assert _title_fits(fig)
    assert "mean over" in fig.get_suptitle()
    assert "(mean ± 1 sd over seeds)" in ax.get_legend().get_title().get_text()


def test_protocol_cost_writes_counts_as_integers_and_no_zero_sums() -> None:
    from simfl.plots.study import plot_protocol_cost

    bias = pl.DataFrame({"estimator": ["exact", "secure", "odd"],
                         "protocol_bytes": [0.0, 4096.0, 100.0],
                         "secure_sums": [0.0, 12.0, 2.5]})
    notes = [t.get_text() for t in plot_protocol_cost(bias).axes[0].texts]
    assert notes == [" nothing beyond the model", " 2.5 secure sums a round",
                     " 12 secure sums a round"]


@pytest.mark.parametrize("fmt", ["pdf", "svg"])
@pytest.mark.slow
def test_plot_format_writes_every_figure_in_that_format(
        tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    from simfl.cli import main
    from simfl.rundir import RUN_PLOTS

    runs = [synthetic_run(tmp_path / f"run{k}", seed=k) for k in range(2)]
    assert main(["plot", *map(str, runs), "--format", fmt, "--all",
                 "--compare", str(tmp_path / f"cmp.{fmt}")]) == 0
    names = {p.name for p in (runs[0] / "plots").iterdir()}
    assert names == {Path(n).with_suffix(f".{fmt}").name for n in RUN_FIGURES}
    assert names <= set(RUN_PLOTS)  # --overwrite and resume accept the folder
    assert (tmp_path / f"cmp.{fmt}").stat().st_size > 0
    head = (runs[0] / "plots" / f"round_durations.{fmt}").read_bytes()[:5]
    assert head == (b"%PDF-" if fmt == "pdf" else b"<?xml")
    assert "skipped availability" in capsys.readouterr().err


def test_plot_format_and_compare_suffix_must_agree(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from simfl.cli import main

    run = synthetic_run(tmp_path / "run")
    assert main(["plot", str(run), "--format", "svg", "--compare", str(tmp_path / "c.png")]) == 2
    assert capsys.readouterr().err == (f"simfl: error: {tmp_path / 'c.png'}: the figures are "
                                       "written as svg files; name it c.svg (or use --format)\n")
    assert not (run / "plots").exists()


@pytest.mark.slow
def test_plot_redraws_a_runs_own_figures_and_nothing_else(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """plots/ is the run's, simfl's to redraw (no --overwrite); --compare's file is not."""
    from simfl.cli import main
    from simfl.rundir import RUN_LAYOUT, foreign_entry

    run = synthetic_run(tmp_path / "run")
    assert main(["plot", str(run)]) == 0
    figure = run / "plots" / "error_vs_rounds.png"
    figure.write_bytes(b"stale")
    (run / "plots" / "notes.txt").write_text("mine")
    assert main(["plot", str(run), "--all", "--compare", str(tmp_path / "cmp.png")]) == 0
    assert figure.read_bytes().startswith(b"\x89PNG")  # redrawn
    assert (run / "plots" / "notes.txt").read_text() == "mine"
    assert main(["plot", str(run), "--compare", str(tmp_path / "cmp.png")]) == 2
    assert "exists (use --overwrite to replace it)" in capsys.readouterr().err
    (run / "plots" / "notes.txt").unlink()
    assert main(["plot", str(run), "--format", "pdf"]) == 0
    assert foreign_entry(run, RUN_LAYOUT) is None  # figures of every format are the run's


def _collected(out: Path, bias: pl.DataFrame) -> Path:
    """A collected sweep folder with ``bias`` and a run's rounds and eval tables."""
    out.mkdir()
    bias.write_parquet(out / "bias.parquet")
    make_rounds([10, 10], [5, 5]).with_columns(pl.lit("r").alias("run_id")) \
        .write_parquet(out / "rounds.parquet")
    make_eval({0: TEN, 2: TEN}).with_columns(pl.lit("r").alias("run_id")) \
        .write_parquet(out / "eval.parquet")
    return out


def test_collect_names_each_figure_it_skips_and_why(tmp_path: Path) -> None:
    from simfl.plots.study import plot_sweep

    bias = _study_bias((10,)).with_columns(oracle_quantile=pl.lit(None, pl.Float64))
    out = _collected(tmp_path / "sweep", bias)
    lines: list[str] = []
    written = plot_sweep(out, report=lines.append)
    assert [p.name for p in written] == ["protocol_cost.png", "p90_vs_bytes_by_estimator.png"]
    assert lines == [f"simfl: collect {out}: skipped bias_vs_cohort.png, "
                     "conformity_vs_cohort.png, online_bias_vs_cohort.png, "
                     "decomposition_vs_cohort.png: bias.parquet has no round with the "
                     "population quantile after the burn-in (estimator.bias_every)"]
    lines.clear()
    out = _collected(tmp_path / "no_bias", bias.clear())
    assert plot_sweep(out, report=lines.append) == []
    assert len(lines) == 1 and lines[0].startswith(f"simfl: collect {out}: skipped "
                                                   "protocol_cost.png, bias_vs_cohort.png")
    assert lines[0].endswith(": bias.parquet is empty (no run logged a threshold estimate: "
                             "the study's figures need Δ-FL runs)")
