"""The dose-response of the tail error to a known error in the Δ-FL threshold
(docs/dose_response.md; the dose is ``simfl.quantile.dose``'s ``shifted`` estimator).

    python -m simfl.study.dose RUN_OR_SWEEP_DIR ... [--figure FILE]

reads each complete run under the folders given (a run folder, or a sweep's folder of
them, as ``bench/archive_runs.py`` keeps them), pairs the runs of one θ by seed with the
undosed run (offset 0, level shift 0), and prints, per θ and dose, the paired difference
of the final test p90, the mean test error and the kept share, each with its 95 %
t-interval and verdict, and the offset at which p90 moves by 0.5 points with a
bootstrap interval over seeds.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import polars as pl

from simfl.errors import InputError
from simfl.rng import Streams
from simfl.rundir import MANIFEST
from simfl.study import run_command, run_folders
from simfl.study.intervals import Difference, paired

OUTCOMES = ("test_p90", "test_mean", "kept_share")
BURN_IN = 0.2  # the kept share averages the bias rounds after this share of the rounds
POINT = 0.005  # half a percentage point of error
MARGINS = {"test_p90": POINT, "test_mean": POINT, "kept_share": 0.05}  # the verdicts' ±m


def run_row(run_dir: Path) -> dict[str, object] | None:
    """One finished run's dose and outcomes (None while it is running or stopped): θ, the
    driver's offset and level shift (0 unless it is ``shifted``), the seed, its status
    and, when complete, the final test mean and p90 (the manifest's summary) and the kept
    share, the driver's ``realized_conformity`` (α-weight of all training devices at or
    above its applied threshold) averaged over the bias rounds after the first
    ``BURN_IN`` of the run. A failed run (learning stopped: simfl's health rule) has NaN
    outcomes and its reason."""
    manifest = json.loads((run_dir / MANIFEST).read_text())
    status = manifest.get("status")
    if status not in ("complete", "failed"):
        return None
    scenario = manifest["scenario"]
    estimator = scenario["estimator"]
    dose = estimator.get("shifted", {}) if estimator["name"] == "shifted" else {}
    row: dict[str, object] = {
        "theta": float(scenario["aggregator"]["theta"]),
        "offset_nats": float(dose.get("offset_nats", 0.0)),
        "level_shift": float(dose.get("level_shift", 0.0)),
        "seed": int(manifest["seed"]), "status": status,
        "reason": str(manifest.get("reason", "")), "test_p90": math.nan,
        "test_mean": math.nan, "kept_share": math.nan, "run": run_dir.name}
    if status == "complete":
        bias = pl.read_parquet(run_dir / "bias.parquet").filter(
            pl.col("driver") & pl.col("oracle_quantile").is_not_null()
            & (pl.col("round") >= BURN_IN * scenario["server"]["num_rounds"]))
        row |= {"test_p90": float(manifest["summary"]["test"]["p90"]),
                "test_mean": float(manifest["summary"]["test"]["mean"]),
                "kept_share": (float(bias["realized_conformity"].to_numpy().mean())
                               if len(bias) else math.nan)}
    return row


def read_runs(folders: Iterable[Path]) -> pl.DataFrame:
    """Every finished run in ``folders`` (each a run folder or a folder of them)."""
    folders = list(folders)
    rows = [row for d in run_folders(folders) if (row := run_row(d)) is not None]
    if not rows:
        raise InputError(f"no finished run in {', '.join(map(str, folders))}")
    return pl.DataFrame(rows)


def complete(runs: pl.DataFrame) -> pl.DataFrame:
    return runs.filter(pl.col("status") == "complete")


def verdict(d: Difference, margin: float) -> str:
    """The study pages' verdicts on a 95 % interval: *different* when it excludes 0
    (", within ±margin" added when it also lies inside ±margin), *equivalent within
    ±margin* when it lies inside ±margin and holds 0, else *not detected*."""
    inside = -margin < d.low and d.high < margin
    if d.low > 0 or d.high < 0:
        return f"different, within ±{margin:g}" if inside else "different"
    return f"equivalent within ±{margin:g}" if inside else "not detected"


def paired_table(runs: pl.DataFrame, margins: dict[str, float]) -> pl.DataFrame:
    """Per θ and dose (offset, level shift) other than none: each outcome's mean paired
    difference with the undosed run of the same θ and seed, its 95 % t-interval, its
    verdict against the outcome's margin, and the seeds paired."""
    rows = []
    for (theta,), group in complete(runs).group_by(["theta"], maintain_order=True):
        control = group.filter((pl.col("offset_nats") == 0) & (pl.col("level_shift") == 0))
        doses = group.select("offset_nats", "level_shift").unique().sort(
            "level_shift", "offset_nats")
        for offset, shift in doses.iter_rows():
            if offset == 0 and shift == 0:
                continue
            dosed = group.filter((pl.col("offset_nats") == offset)
                                 & (pl.col("level_shift") == shift))
            both = dosed.join(control, on="seed", suffix="_0")
            if len(both) < 2:
                continue
            row: dict[str, object] = {"theta": theta, "offset_nats": offset,
                                      "level_shift": shift, "seeds": len(both)}
            for outcome in OUTCOMES:
                d = paired((both[outcome] - both[f"{outcome}_0"]).to_numpy())
                row |= {f"{outcome}": d.estimate, f"{outcome}_low": d.low,
                        f"{outcome}_high": d.high,
                        f"{outcome}_verdict": verdict(d, margins[outcome])}
            rows.append(row)
    return pl.DataFrame(rows)


def crossing(offsets: np.ndarray, moves: np.ndarray, amount: float) -> float:
    """The smallest |offset| on one side of 0 at which |move| reaches ``amount``, by
    linear interpolation of |move| between consecutive offsets from (0, 0) outward
    (``offsets`` all of one sign, ``moves`` the mean paired differences there); inf when
    it is not reached on the grid."""
    order = np.argsort(np.abs(offsets))
    xs = np.concatenate([[0.0], np.abs(offsets[order])])
    ys = np.concatenate([[0.0], np.abs(moves[order])])
    for i in range(1, len(xs)):
        if ys[i] >= amount:
            return float(xs[i - 1] + (amount - ys[i - 1]) / (ys[i] - ys[i - 1])
                         * (xs[i] - xs[i - 1]))
    return math.inf


def crossings(runs: pl.DataFrame, outcome: str = "test_p90", amount: float = POINT,
              draws: int = 2000, seed: int = 0) -> pl.DataFrame:
    """Per θ and side (offsets below and above 0, level shift 0): :func:`crossing` of the
    mean paired curve, and its 95 % percentile interval over ``draws`` resamples of the
    seeds (whole seeds, every offset of a seed together; inf: not reached on the grid)."""
    rng = Streams(seed).numpy("dose_bootstrap")
    rows = []
    for (theta,), group in complete(runs).filter(pl.col("level_shift") == 0).group_by(
            ["theta"], maintain_order=True):
        wide = group.pivot(on="offset_nats", index="seed", values=outcome).drop_nulls()
        cols = [c for c in wide.columns if c != "seed"]
        if "0.0" not in cols or len(wide) < 2:
            continue
        diffs = np.column_stack([wide[c].to_numpy() - wide["0.0"].to_numpy() for c in cols])
        offsets = np.array([float(c) for c in cols])
        for side, mask in (("below 0", offsets < 0), ("above 0", offsets > 0)):
            if not mask.any():
                continue
            point = crossing(offsets[mask], diffs[:, mask].mean(axis=0), amount)
            boot = [crossing(offsets[mask], diffs[rng.integers(0, len(diffs), len(diffs))][
                :, mask].mean(axis=0), amount) for _ in range(draws)]
            with np.errstate(invalid="ignore"):  # inf - inf: a crossing beyond the grid
                low, high = np.percentile(boot, [2.5, 97.5], method="inverted_cdf")
            rows.append({"theta": theta, "side": side, "seeds": len(diffs),
                         "offset_nats": point, "low": float(low), "high": float(high)})
    return pl.DataFrame(rows)


def _cell(mean: float, low: float, high: float, scale: float) -> str:
    return f"{scale * mean:+.2f} [{scale * low:+.2f}, {scale * high:+.2f}]"


def _size(value: float) -> str:
    return "beyond the grid" if math.isinf(value) else f"{value:.3f}"


def report(runs: pl.DataFrame) -> list[str]:
    """The page's tables as markdown lines: errors in percentage points."""
    table = paired_table(runs, MARGINS)
    lines = ["| θ | offset (nats) | level shift | seeds | Δ p90 (points) | verdict | "
             "Δ mean (points) | Δ kept share (points) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in table.iter_rows(named=True):
        lines.append(
            f"| {r['theta']:g} | {r['offset_nats']:+g} | {r['level_shift']:+g} | "
            f"{r['seeds']} | {_cell(r['test_p90'], r['test_p90_low'], r['test_p90_high'], 100)}"
            f" | {r['test_p90_verdict']} | "
            f"{_cell(r['test_mean'], r['test_mean_low'], r['test_mean_high'], 100)} | "
            f"{_cell(r['kept_share'], r['kept_share_low'], r['kept_share_high'], 100)} |")
    lines += ["", "| θ | side | seeds | offset moving p90 by 0.5 points (nats) | 95 % interval |",
              "|---|---|---|---|---|"]
    for r in crossings(runs).iter_rows(named=True):
        lines.append(f"| {r['theta']:g} | {r['side']} | {r['seeds']} | "
                     f"{_size(r['offset_nats'])} | [{_size(r['low'])}, {_size(r['high'])}] |")
    lines += ["", "| θ | offset (nats) | level shift | complete | learning stopped (seeds) | "
              "test p90 | test mean | kept share |", "|---|---|---|---|---|---|---|---|"]
    means = runs.group_by("theta", "offset_nats", "level_shift").agg(
        (pl.col("status") == "complete").sum().alias("complete"),
        pl.col("seed").filter(pl.col("status") == "failed").sort().alias("failed"),
        *(pl.col(o).filter(pl.col("status") == "complete").mean() for o in OUTCOMES)).sort(
        "theta", "level_shift", "offset_nats", descending=[True, False, False])
    for r in means.iter_rows(named=True):
        failed = ", ".join(map(str, r["failed"])) or "none"
        values = " | ".join("—" if r[o] is None else f"{r[o]:.4f}" for o in OUTCOMES)
        lines.append(f"| {r['theta']:g} | {r['offset_nats']:+g} | {r['level_shift']:+g} | "
                     f"{r['complete']} | {failed} | {values} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simfl.study.dose",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run or sweep folders")
    parser.add_argument("--figure", type=Path, help="also draw the paired curves here")
    args = parser.parse_args(argv)

    def work() -> None:
        runs = read_runs(args.folders)
        print("\n".join(report(runs)))
        if args.figure:
            from simfl.plots import save_figure
            from simfl.plots.study import plot_dose_response
            save_figure(plot_dose_response(paired_table(runs, MARGINS)), args.figure)

    return run_command(work)


if __name__ == "__main__":
    sys.exit(main())
