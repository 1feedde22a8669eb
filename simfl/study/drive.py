"""The drive where the bias is large (docs/drive.md): Δ-FL driven by cohort_exact, by a
corrected estimator and by the population quantile on the heavy-tailed phones, FedAvg
as the reference, paired by seed.

    python -m simfl.study.drive docs/runs/drive_phones [--figure FILE]
    python -m simfl.study.drive --pilot docs/runs/drive_pilot

The first prints the registered comparisons (the primary p90(C) − p90(O) with its 95 %
t-interval and verdict; the two secondary ones with Holm-adjusted p-values) and, per arm,
the final test mean and p90, its driver's bias and kept share over the bias rounds after
the burn-in, and its bytes; ``--figure`` draws the test p90 against bytes sent, one line
per arm and seed. The second prints the pilot's table: each estimator's mean bias, mean
|bias|, availability term and kept share over the pilot's seeds.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import polars as pl

from simfl.errors import InputError
from simfl.plugins import registered_filters_by_threshold
from simfl.rundir import MANIFEST
from simfl.study import run_command
from simfl.study.dose import BURN_IN, POINT
from simfl.study.intervals import holm, paired

# arm -> (aggregator, driving estimator) as the sweep's variants name them
ARMS = {"C": "cohort_exact", "B": "ipw", "O": "population_quantile", "F": "fedavg"}
PRIMARY = ("C", "O")
SECONDARY = (("B", "C"), ("F", "O"))
MARGIN = POINT  # ±0.5 points of p90: the verdict's equivalence margin


def _bias_rows(run_dir: Path, num_rounds: int) -> pl.DataFrame:
    path = run_dir / "bias.parquet"
    if not path.is_file():
        return pl.DataFrame()
    return pl.read_parquet(path).filter(pl.col("oracle_quantile").is_not_null()
                                        & (pl.col("round") >= BURN_IN * num_rounds))


def run_row(run_dir: Path) -> dict[str, object] | None:
    """One complete run's arm, seed and outcomes (None unless complete)."""
    manifest = json.loads((run_dir / MANIFEST).read_text())
    if manifest.get("status") != "complete":
        return None
    scenario = manifest["scenario"]
    rule = scenario["aggregator"]["name"]
    name = scenario["estimator"]["name"] if registered_filters_by_threshold(rule) else rule
    arm = next((a for a, n in ARMS.items() if n == name), name)
    bias = _bias_rows(run_dir, scenario["server"]["num_rounds"])
    driver = bias.filter(pl.col("driver")) if len(bias) else bias
    rounds = pl.read_parquet(run_dir / "rounds.parquet")
    return {"arm": arm, "seed": int(manifest["seed"]),
            "test_p90": float(manifest["summary"]["test"]["p90"]),
            "test_mean": float(manifest["summary"]["test"]["mean"]),
            "bias": _mean(driver, "bias"), "kept_share": _mean(driver, "realized_conformity"),
            "mbytes": float(rounds["bytes_up"].to_numpy().sum()
                            + rounds["bytes_down"].to_numpy().sum()) / 1e6,
            "run": run_dir.name}


def _mean(table: pl.DataFrame, column: str) -> float:
    return float(table[column].to_numpy().mean()) if len(table) else math.nan


def read_runs(folder: Path) -> pl.DataFrame:
    """Every complete run under ``folder`` (a sweep's folder of run folders)."""
    rows = [r for d in sorted(folder.iterdir()) if (d / MANIFEST).is_file()
            if (r := run_row(d)) is not None]
    if not rows:
        raise InputError(f"{folder}: no complete run of the drive")
    return pl.DataFrame(rows)


def _diff(runs: pl.DataFrame, a: str, b: str) -> np.ndarray:
    """p90(a) − p90(b) in points, over the seeds where both arms are complete."""
    left = runs.filter(pl.col("arm") == a).select("seed", pl.col("test_p90").alias("a"))
    right = runs.filter(pl.col("arm") == b).select("seed", pl.col("test_p90").alias("b"))
    both = left.join(right, on="seed").sort("seed")
    return ((both["a"] - both["b"]) * 100).to_numpy()


def verdict(low: float, high: float, margin_points: float = MARGIN * 100) -> str:
    """The registered verdicts: different, equivalent within ±margin, not detected."""
    if low > 0 or high < 0:
        return "different"
    if -margin_points < low and high < margin_points:
        return f"equivalent within ±{margin_points:g}"
    return "not detected"


def report(runs: pl.DataFrame) -> list[str]:
    lines = [f"{'comparison':20s} pairs  p90 difference, points [95 % interval]  p (Holm)  "
             f"verdict"]
    d = _diff(runs, *PRIMARY)
    if len(d) >= 2:
        r = paired(d)
        label = f"{PRIMARY[0]} - {PRIMARY[1]} (primary)"
        lines.append(f"{label:20s} {len(d):5d}  {r.estimate:+.2f} [{r.low:+.2f}, {r.high:+.2f}]"
                     f"  p {r.p:.3f}  {verdict(r.low, r.high)}")
    found = [(a, b, paired(x)) for a, b in SECONDARY if len(x := _diff(runs, a, b)) >= 2]
    for (a, b, r), p in zip(found, holm([r.p for _, _, r in found]), strict=True):
        label = f"{a} - {b} (secondary)"
        lines.append(f"{label:20s} {len(_diff(runs, a, b)):5d}  {r.estimate:+.2f} "
                     f"[{r.low:+.2f}, {r.high:+.2f}]  p {p:.3f}  {verdict(r.low, r.high)}")
    lines.append("")
    lines.append("arm  seeds  test p90       test mean      driver bias (nats)  kept share  MB")
    for arm in ARMS:
        rows = runs.filter(pl.col("arm") == arm)
        if not len(rows):
            continue
        lines.append(f"{arm:4s} {len(rows):5d}  {_ms(rows['test_p90'] * 100)}  "
                     f"{_ms(rows['test_mean'] * 100)}  {_ms(rows['bias'], 4):>18s}  "
                     f"{_ms(rows['kept_share'], 3):>10s}  {_mean(rows, 'mbytes'):.1f}")
    return lines


def _ms(values: pl.Series, digits: int = 2) -> str:
    """mean ± standard deviation over seeds (blank where nothing was measured)."""
    v = values.drop_nans().drop_nulls().to_numpy()
    if not v.size:
        return "-"
    sd = v.std(ddof=1) if v.size > 1 else math.nan
    return f"{v.mean():.{digits}f} ± {sd:.{digits}f}"


def pilot_table(folder: Path) -> pl.DataFrame:
    """Per estimator over the pilot's complete runs: mean bias, mean |bias| (of each
    run's mean over its bias rounds after the burn-in), availability term, kept share."""
    rows = []
    for d in sorted(folder.iterdir()):
        if not (d / MANIFEST).is_file():
            continue
        manifest = json.loads((d / MANIFEST).read_text())
        if manifest.get("status") != "complete":
            continue
        bias = _bias_rows(d, manifest["scenario"]["server"]["num_rounds"])
        rows.append(bias.group_by("estimator").agg(
            pl.col("bias").mean(), pl.col("availability_bias").mean(),
            pl.col("realized_conformity").mean()).with_columns(seed=manifest["seed"]))
    if not rows:
        raise InputError(f"{folder}: no complete pilot run")
    return (pl.concat(rows).group_by("estimator")
            .agg(pl.len().alias("seeds"), pl.col("bias").mean().alias("mean_bias"),
                 pl.col("bias").abs().mean().alias("mean_abs_bias"),
                 pl.col("availability_bias").mean().alias("availability"),
                 pl.col("realized_conformity").mean().alias("kept_share"))
            .sort("mean_abs_bias"))


def figure(runs_dir: Path, runs: pl.DataFrame, out: Path) -> Path:
    """Test p90 against cumulative MB sent, per arm (a line per seed), from each run's
    evaluation summary (eval_rounds.parquet, which a lean archive keeps: the p90 of the
    manifest's summary), from the first evaluation after round 0 (every arm starts at the
    initial model's 99.5 %, which would flatten the differences)."""
    from simfl.plots import new_axes, save_figure

    fig, ax = new_axes()
    colours = dict(zip(ARMS, ("C0", "C1", "C2", "C3"), strict=True))
    for row in runs.iter_rows(named=True):
        run = runs_dir / row["run"]
        ev = (pl.read_parquet(run / "eval_rounds.parquet")
              .filter((pl.col("split") == "test") & (pl.col("round") > 0)).select("round", "p90"))
        mb = (pl.read_parquet(run / "rounds.parquet").sort("round")
              .select("round", ((pl.col("bytes_up") + pl.col("bytes_down")).cum_sum()
                                / 1e6).alias("mb")))
        both = ev.join(mb, left_on=pl.col("round") - 1, right_on="round", how="left").sort(
            "round").with_columns(pl.col("mb").fill_null(0.0))
        ax.plot(both["mb"], both["p90"] * 100, color=colours.get(row["arm"], "k"), alpha=0.5,
                label=row["arm"] if row["seed"] == runs["seed"].min() else None)
    ax.set_xlabel("MB sent (up + down), cumulative")
    ax.set_ylabel("test p90 error, % (evaluations after round 0)")
    ax.legend(title="arm")
    return save_figure(fig, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simfl.study.drive",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the drive's (or pilot's) run folders")
    parser.add_argument("--pilot", action="store_true", help="print the pilot's table")
    parser.add_argument("--figure", type=Path, help="draw p90 against bytes to this file")
    args = parser.parse_args(argv)

    def work() -> None:
        if not args.folder.is_dir():
            raise InputError(f"{args.folder}: no such folder")
        if args.pilot:
            with pl.Config(tbl_rows=-1, float_precision=4, tbl_hide_dataframe_shape=True):
                print(pilot_table(args.folder))
            return
        runs = read_runs(args.folder)
        print("\n".join(report(runs)))
        if args.figure:
            print(f"wrote {figure(args.folder, runs, args.figure)}")

    return run_command(work)


if __name__ == "__main__":
    sys.exit(main())
