"""Figures from Parquet: data-prep helpers against hand-computed values, files written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from simfl.errors import InputError
from simfl.plots import (
    byte_unit,
    compare_runs,
    cumulative_bytes,
    error_by_round,
    last_round_rows,
    plot_error_ecdf,
    plot_run,
    run_label,
    tail_vs_bytes,
)

RUN_FIGURES = {"test_error_hist.png", "error_vs_size.png", "error_vs_rounds.png",
               "p90_vs_bytes.png", "p90_vs_time.png", "round_durations.png"}


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


def test_plot_run_writes_every_figure_and_skips_missing_availability(tmp_path: Path) -> None:
    written = plot_run(synthetic_run(tmp_path / "run"))
    assert {p.name for p in written} == RUN_FIGURES
    assert all(p.parent == tmp_path / "run" / "plots" and p.stat().st_size > 0 for p in written)
    assert not (tmp_path / "run" / "plots" / "availability.png").exists()


def test_plot_run_with_availability(tmp_path: Path) -> None:
    written = plot_run(synthetic_run(tmp_path / "run", with_availability=True))
    assert {p.name for p in written} == RUN_FIGURES | {"availability.png"}


def test_plot_run_skips_figures_of_empty_tables(tmp_path: Path) -> None:
    run_dir = synthetic_run(tmp_path / "run")
    make_eval({}).write_parquet(run_dir / "eval.parquet")
    assert [p.name for p in plot_run(run_dir)] == ["round_durations.png"]


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
