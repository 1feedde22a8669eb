"""docs/async.md's tables: per run, the final test error, the simulated time and bytes of
the whole run, how many distinct devices were ever aggregated, and when the run first
reached each test-p90 level (the first evaluation at or below it: its simulated time,
server updates and bytes down + up, as simfl.plots.runs.reach_level).

    python -m simfl.study.async_table results/async_check/{sync,async}_{fedavg,deltafl} \\
        --levels 0.55 0.50 [--keep docs/runs/async_check]
    python -m simfl.study.async_table results/async_check/small_* --levels 0.65 0.60 \\
        --gb-digits 2
    python -m simfl.study.async_table docs/runs/async_check/sync_fedavg ...  # the kept evidence

``--keep DIR`` copies what the table reads into ``DIR/<run folder name>/``, tens of KB a
run: ``manifest.json``, ``rounds.parquet``, ``eval_rounds.parquet`` (each evaluation's
mean and p90 per split, simfl.tables.error_by_round) and ``aggregated.parquet`` (the
distinct devices aggregated); the command reads such a folder as it reads a run. A folder
there is only replaced when it holds nothing else. A time of an hour or more is written in
hours (one decimal), a shorter one in whole seconds; bytes in GB (10⁹) with
``--gb-digits`` decimals.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import polars as pl

from simfl.errors import InputError
from simfl.plots.runs import first_at_level
from simfl.rundir import MANIFEST
from simfl.study import run_command
from simfl.tables import error_by_round, summary_vs_bytes

KEPT = (MANIFEST, "rounds.parquet", "eval_rounds.parquet", "aggregated.parquet")


def evidence(run_dir: Path) -> tuple[dict[str, Any], dict[str, pl.DataFrame]]:
    """A run's manifest and the three tables the row needs, from a run directory or from
    a folder ``--keep`` wrote."""
    manifest = json.loads((run_dir / MANIFEST).read_text())
    if (run_dir / "eval_rounds.parquet").is_file():
        return manifest, {t: pl.read_parquet(run_dir / f"{t}.parquet")
                          for t in ("rounds", "eval_rounds", "aggregated")}
    clients = pl.read_parquet(run_dir / "clients.parquet", columns=["client_idx", "status"])
    aggregated = (clients.filter(pl.col("status") == "aggregated")
                  .select("client_idx").unique().sort("client_idx"))
    return manifest, {"rounds": pl.read_parquet(run_dir / "rounds.parquet"),
                      "eval_rounds": error_by_round(pl.read_parquet(run_dir / "eval.parquet")),
                      "aggregated": aggregated}


def first_at(eval_rounds: pl.DataFrame, rounds: pl.DataFrame,
             level: float) -> dict[str, Any] | None:
    """simfl.plots.runs.time_to_level from the per-evaluation summary: the first test
    evaluation with p90 ≤ ``level`` (t_s, round, bytes_cum), or None."""
    return first_at_level(summary_vs_bytes(eval_rounds, rounds), level)


def duration(seconds: float) -> str:
    """An hour or more in hours (one decimal), less in whole seconds."""
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds:.0f} s"


def row(run_dir: Path, levels: list[float], gb_digits: int) -> list[str]:
    """The table's cells for one run (its folder's name first)."""
    return cells(run_dir.name, *evidence(run_dir), levels, gb_digits)


def cells(name: str, manifest: dict[str, Any], tables: dict[str, pl.DataFrame],
          levels: list[float], gb_digits: int) -> list[str]:
    """:func:`row` from the run's :func:`evidence`."""
    summary, rounds = manifest["summary"]["test"], tables["rounds"]
    total = int((rounds["bytes_down"] + rounds["bytes_up"]).sum())
    out = [name, f"{summary['p90']:.3f}", f"{summary['mean']:.3f}",
           duration(rounds["t_end_s"].cast(pl.Float64).to_numpy().max()),
           f"{total / 1e9:.{gb_digits}f} GB", str(tables["aggregated"].height)]
    for level in levels:
        hit = first_at(tables["eval_rounds"], rounds, level)
        out.append("never" if hit is None else
                   f"{duration(hit['t_s'])}, {hit['round']}, "
                   f"{hit['bytes_cum'] / 1e9:.{gb_digits}f} GB")
    return out


def keep(dest: Path, manifest: dict[str, Any], tables: dict[str, pl.DataFrame]) -> None:
    """Write a run's :func:`evidence` into ``dest``, each file written aside and renamed,
    the manifest last."""
    dest.mkdir(parents=True, exist_ok=True)
    for table, frame in tables.items():
        frame.write_parquet(dest / f"{table}.parquet.tmp", compression="zstd")
        (dest / f"{table}.parquet.tmp").replace(dest / f"{table}.parquet")
    (dest / f"{MANIFEST}.tmp").write_text(json.dumps(manifest, indent=2) + "\n")
    (dest / f"{MANIFEST}.tmp").replace(dest / MANIFEST)


def check(run_dirs: list[Path], keep_dir: Path | None) -> None:
    """InputError, before anything is written, for a folder that is not a complete run or
    a ``--keep`` destination holding what this command did not write."""
    for run_dir in run_dirs:
        manifest = run_dir / MANIFEST
        if not manifest.is_file() or json.loads(manifest.read_text()).get("status") != \
                "complete":
            raise InputError(f"{run_dir}: not a complete run (no complete manifest.json)")
        dest = (keep_dir / run_dir.name) if keep_dir else None
        if dest is not None and dest.exists() and (
                not dest.is_dir() or any(p.name not in KEPT for p in dest.iterdir())):
            raise InputError(f"{dest}: holds what this command did not write; move it or "
                             "choose another --keep")


def table(run_dirs: list[Path], levels: list[float], gb_digits: int,
          keep_dir: Path | None = None) -> list[str]:
    """The page's table, a row per run (:func:`cells`); with ``keep_dir`` each run's
    evidence kept there (:func:`keep`)."""
    header = ["run", "final test p90", "final mean", "simulated time", "total bytes",
              "devices aggregated",
              *(f"p90 ≤ {level:g}: time, updates, bytes" for level in levels)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run_dir in run_dirs:
        manifest, tables = evidence(run_dir)
        lines.append("| " + " | ".join(cells(run_dir.name, manifest, tables, levels,
                                             gb_digits)) + " |")
        if keep_dir:
            keep(keep_dir / run_dir.name, manifest, tables)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simfl.study.async_table",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", type=Path, nargs="+")
    parser.add_argument("--levels", type=float, nargs="+", required=True,
                        help="test p90 levels: when each run first reached them")
    parser.add_argument("--gb-digits", type=int, default=1, help="decimals of the GB columns")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="copy what the table reads into DIR/<run folder name>/")
    args = parser.parse_args(argv)

    def work() -> None:
        check(args.run_dirs, args.keep)
        print("\n".join(table(args.run_dirs, args.levels, args.gb_digits, args.keep)))

    return run_command(work)


if __name__ == "__main__":
    sys.exit(main())
