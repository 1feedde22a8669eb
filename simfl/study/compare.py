"""Any sweep's grid points compared, paired by seed: the final tail error with intervals
and the study pages' verdicts.

    python -m simfl.study.compare SWEEP_DIR [--versus AXIS=VALUE] [--margin POINTS]

reads every complete run under ``SWEEP_DIR`` (a sweep's folder of run folders, kept under
docs/runs or in results/; nothing a run names is imported) and prints, per grid point (a
run folder's name without its ``seed=``: its variant and grid values), the seeds, the
final test p90 and mean error in points (the manifest's summary: the unseen test devices'
90th percentile and mean at the last evaluation) and the run's traffic, each as the mean
over seeds ± the half-width of its 95 % t-interval.

``--versus AXIS=VALUE`` adds, for every other grid point, its difference from the point
that has AXIS=VALUE and the same values on every other axis, paired by seed (a seed fixes
the data split, the population and the initial model, so the points' runs of one seed
share them): the mean paired difference of final p90 and of the mean with their 95 %
t-intervals, the paired t-test's p for p90 with Holm's adjustment over the comparisons
printed, and the verdict on p90, one of three: *different* (the Holm-adjusted p below
0.05: over one comparison, the interval excludes 0), *equivalent within ±m* (the
unadjusted 95 % interval inside (−m, +m), ``--margin`` points: two one-sided tests at
0.025), else *not detected*. A comparison is a description, not a test, unless it was registered
before its runs: the verdicts say what the intervals support, no more.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import polars as pl

from simfl.errors import InputError
from simfl.rundir import MANIFEST
from simfl.study import run_command, run_folders
from simfl.study.intervals import ci, holm, paired

DEFAULT_MARGIN = 0.5  # points of p90: the dose–response's margin (docs/dose_response.md)


def grid_point(run_name: str) -> dict[str, str]:
    """A run folder's grid values: its ``key=value`` parts but the seed."""
    parts = dict(part.split("=", 1) for part in run_name.split(",") if "=" in part)
    parts.pop("seed", None)
    return parts


def read_runs(folder: Path) -> pl.DataFrame:
    """One row per complete run under ``folder``: its grid point's values (a column per
    axis), ``point`` (the values as one label), seed, final test p90 and mean (points) and
    GB sent. InputError when none is complete or the runs name different axes."""
    rows, axes = [], set()
    for run_dir in run_folders([folder]):
        manifest = json.loads((run_dir / MANIFEST).read_text())
        if manifest.get("status") != "complete":
            continue
        values = grid_point(run_dir.name)
        axes.add(tuple(values))
        rounds = pl.read_parquet(run_dir / "rounds.parquet")
        rows.append({**values, "point": _label(values),
                     "seed": int(manifest["seed"]),
                     "p90": 100 * float(manifest["summary"]["test"]["p90"]),
                     "mean": 100 * float(manifest["summary"]["test"]["mean"]),
                     "gb": float(rounds["bytes_up"].to_numpy().sum()
                                 + rounds["bytes_down"].to_numpy().sum()) / 1e9})
    if not rows:
        raise InputError(f"{folder}: no complete run")
    if len(axes) > 1:
        raise InputError(f"{folder}: its runs name different axes ({sorted(axes)})")
    return pl.DataFrame(rows)


def _label(values: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in values.items()) or "(one point)"


def axes_of(runs: pl.DataFrame) -> list[str]:
    """The grid's axes: every column of :func:`read_runs` but its figures."""
    return [c for c in runs.columns if c not in ("point", "seed", "p90", "mean", "gb")]


def points_table(runs: pl.DataFrame) -> list[str]:
    """Per grid point: seeds, final test p90 and mean (points), GB; mean ± 95 % half-width."""
    lines = ["| grid point | seeds | test p90 (points) | test mean (points) | GB sent |",
             "|---|---|---|---|---|"]
    for point in sorted(set(runs["point"])):
        part = runs.filter(pl.col("point") == point)
        lines.append(f"| {point} | {len(part)} | {ci(part['p90'].to_numpy(), 2, False)} | "
                     f"{ci(part['mean'].to_numpy(), 2, False)} | "
                     f"{ci(part['gb'].to_numpy(), 2, False)} |")
    return lines


def verdict(low: float, high: float, p_adjusted: float, margin: float) -> str:
    """*different* when the Holm-adjusted p is below 0.05, *equivalent within ±margin* when
    the 95 % interval lies inside (−margin, +margin), else *not detected*."""
    if p_adjusted < 0.05:
        return "different"
    if -margin < low and high < margin:
        return f"equivalent within ±{margin:g}"
    return "not detected"


def versus_table(runs: pl.DataFrame, axis: str, value: str, margin: float) -> list[str]:
    """Each grid point minus its reference (``axis`` = ``value``, the other axes equal),
    paired by seed: p90 and mean differences (points) with 95 % t-intervals, p90's Holm-
    adjusted p and verdict."""
    axes = axes_of(runs)
    if axis not in axes:
        raise InputError(f"--versus {axis}={value}: no axis {axis!r} (the runs' axes: "
                         f"{', '.join(axes) or 'none'})")
    if value not in set(runs[axis]):
        raise InputError(f"--versus {axis}={value}: no run has {axis} = {value!r} "
                         f"({', '.join(sorted(set(runs[axis])))})")
    others = [a for a in axes if a != axis]
    base = runs.filter(pl.col(axis) == value).select(
        *others, "seed", pl.col("p90").alias("p90_ref"), pl.col("mean").alias("mean_ref"))
    pairs = runs.filter(pl.col(axis) != value).join(base, on=[*others, "seed"])
    found = []
    for point in sorted(set(pairs["point"])):
        part = pairs.filter(pl.col("point") == point).sort("seed")
        if len(part) < 2:
            continue
        found.append((point, len(part), paired((part["p90"] - part["p90_ref"]).to_numpy()),
                      paired((part["mean"] - part["mean_ref"]).to_numpy())))
    lines = [f"| grid point − its {axis}={value} | pairs | test p90 (points) | p (Holm) | "
             f"verdict | test mean (points) |", "|---|---|---|---|---|---|"]
    for (point, n, d90, dmean), p in zip(found, holm([f[2].p for f in found]), strict=True):
        lines.append(f"| {point} | {n} | {d90.estimate:+.2f} [{d90.low:+.2f}, {d90.high:+.2f}]"
                     f" | {p:.3f} | {verdict(d90.low, d90.high, p, margin)} | "
                     f"{dmean.estimate:+.2f} [{dmean.low:+.2f}, {dmean.high:+.2f}] |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simfl.study.compare",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="a sweep's folder of run folders")
    parser.add_argument("--versus", metavar="AXIS=VALUE",
                        help="pair every other grid point with the one that has this value")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                        help=f"equivalence margin in points of p90 (default {DEFAULT_MARGIN})")
    args = parser.parse_args(argv)

    def work() -> None:
        if args.versus is not None and "=" not in args.versus:
            raise InputError(f"--versus {args.versus}: write AXIS=VALUE")
        if not (args.margin > 0 and math.isfinite(args.margin)):
            raise InputError(f"--margin {args.margin}: must be a positive number of points")
        runs = read_runs(args.sweep_dir)
        lines = points_table(runs)
        if args.versus is not None:
            axis, value = args.versus.split("=", 1)
            lines += ["", *versus_table(runs, axis, value, args.margin)]
        print("\n".join(lines))

    return run_command(work)


if __name__ == "__main__":
    sys.exit(main())
