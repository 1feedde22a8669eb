"""The exposure term: devices selected more often are fitted better (docs/dose_response.md).

Under partial participation a device's chance to be in a cohort grows with how often it
is online, so even when availability has nothing to do with the data, the devices the
server sees most are the ones the model has trained on most, and their losses fall below
the population's. This measures it from one run's tables:

- per training device, how many times it was selected before each evaluation, and its
  loss on its training data at that evaluation (``eval.parquet``, split train);
- the rank correlation (Spearman) of the two at each evaluation round: negative when
  the devices selected more are fitted better;
- the mean loss of the devices by quintile of their selections at the last evaluation.

    python -m simfl.study.exposure RUN_DIR [RUN_DIR ...] [--keep DIR]

``--keep DIR`` writes what the measure reads of each run, small, into
``DIR/<run name>/``: its ``manifest.json`` and ``exposure.parquet`` (one row per
evaluation and training device: selections, aggregated, loss), which this module then
reads in place of the run's tables.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import polars as pl
from scipy import stats

from simfl.errors import InputError
from simfl.records import read_table
from simfl.rundir import MANIFEST
from simfl.study import run_command
from simfl.study.intervals import paired

KEPT = "exposure.parquet"  # what --keep writes beside the manifest


def selections_and_losses(run_dir: Path) -> pl.DataFrame:
    """Per evaluation round after the first and training device: ``selections`` (rounds
    before that evaluation in which it was selected), ``aggregated`` (those in which its
    update was aggregated: what the model was fitted on) and ``loss`` (its training-data
    loss at the evaluation)."""
    if (run_dir / KEPT).is_file():
        return pl.read_parquet(run_dir / KEPT)
    for table in ("clients", "eval"):
        if not ((run_dir / f"{table}.parquet").is_file() or (run_dir / "parts" / table).is_dir()):
            raise InputError(f"{run_dir}: no {table}.parquet (a lean archive keeps none)")
    clients = read_table(run_dir, "clients").select("round", "client_idx", "status")
    evals = read_table(run_dir, "eval").filter(
        (pl.col("split") == "train") & (pl.col("round") > 0)).select("round", "client_idx",
                                                                     "loss")
    rounds = evals["round"].unique().sort().to_list()
    parts = []
    for r in rounds:
        counts = clients.filter(pl.col("round") < r).group_by("client_idx").agg(
            pl.len().cast(pl.Int64).alias("selections"),
            (pl.col("status") == "aggregated").sum().cast(pl.Int64).alias("aggregated"))
        at = evals.filter(pl.col("round") == r).join(counts, on="client_idx", how="left")
        parts.append(at.with_columns(pl.col("selections", "aggregated").fill_null(0)))
    return pl.concat(parts)


def keep(run_dir: Path, to: Path) -> Path:
    """Write ``run_dir``'s manifest and its :func:`selections_and_losses` table into
    ``to/<run name>/`` (replacing only those two files); returns that folder."""
    table = selections_and_losses(run_dir)
    out = to / run_dir.name
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run_dir / MANIFEST, out / MANIFEST)
    table.write_parquet(out / KEPT)
    return out


def exposure(table: pl.DataFrame) -> pl.DataFrame:
    """Per evaluation round: Spearman's rank correlation with the loss, over the training
    devices, of their selections and of their aggregated updates, with two-sided
    p-values, and the devices counted."""
    rows = []
    for (r,), part in table.group_by(["round"], maintain_order=True):
        loss = part["loss"].to_numpy()
        rho, p = stats.spearmanr(part["selections"].to_numpy(), loss)
        rho_agg, p_agg = stats.spearmanr(part["aggregated"].to_numpy(), loss)
        rows.append({"round": r, "devices": len(part), "spearman": float(rho), "p": float(p),
                     "spearman_aggregated": float(rho_agg), "p_aggregated": float(p_agg)})
    return pl.DataFrame(rows).sort("round")


def by_quintile(table: pl.DataFrame) -> pl.DataFrame:
    """At the last evaluation: mean selections and mean loss by quintile of selections
    (ties broken by device order, so each quintile holds a fifth of the devices)."""
    last = table.filter(pl.col("round") == table["round"].max()).sort("selections",
                                                                      "client_idx")
    quintile = (np.arange(len(last)) * 5 // max(len(last), 1)) + 1
    return last.with_columns(pl.Series("quintile", quintile)).group_by("quintile").agg(
        pl.col("selections").mean(), pl.col("aggregated").mean(), pl.col("loss").mean(),
        pl.len().alias("devices")).sort("quintile")


def across_seeds(folder: Path) -> list[str]:
    """The registered readout (docs/exposure.md) over the runs kept in ``folder``: per
    rule, the rank correlation of aggregated updates with the training loss at each
    evaluation, per seed and as the mean with its 95 % t-interval over seeds; and the
    change from the first evaluation to the last, paired by seed. Markdown lines."""
    rows = []
    for run in sorted(d for d in folder.iterdir() if (d / MANIFEST).is_file()):
        manifest = json.loads((run / MANIFEST).read_text())
        for r in exposure(selections_and_losses(run)).iter_rows(named=True):
            rows.append({"rule": manifest["scenario"]["aggregator"]["name"],
                         "seed": int(manifest["seed"]), "round": r["round"],
                         "rho": r["spearman_aggregated"]})
    if not rows:
        raise InputError(f"{folder}: no kept run")
    table = pl.DataFrame(rows)
    rounds = table["round"].unique().sort().to_list()
    lines = ["| rule | seed | " + " | ".join(f"round {r}" for r in rounds) + " |",
             "|---|---|" + "---|" * len(rounds)]
    for (rule,), part in table.group_by(["rule"], maintain_order=True):
        wide = part.pivot(on="round", index="seed", values="rho").sort("seed")
        for row in wide.iter_rows(named=True):
            lines.append(f"| {rule} | {row['seed']} | "
                         + " | ".join(f"{row[str(r)]:+.3f}" for r in rounds) + " |")
        cells = [paired(wide[str(r)].to_numpy()) for r in rounds]
        lines.append(f"| {rule} | mean [95 %] | "
                     + " | ".join(f"{d.estimate:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"
                                  for d in cells) + " |")
        change = paired((wide[str(rounds[-1])] - wide[str(rounds[0])]).to_numpy())
        lines.append(f"| {rule} | round {rounds[-1]} − round {rounds[0]} | "
                     f"{change.estimate:+.3f} [{change.low:+.3f}, {change.high:+.3f}] |"
                     + " |" * (len(rounds) - 1))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simfl.study.exposure",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--keep", type=Path, help="also keep each run's measure, small, here")
    parser.add_argument("--across-seeds", action="store_true",
                        help="RUN_DIR is a folder of kept runs: the registered readout")
    args = parser.parse_args(argv)

    def work() -> None:
        if args.across_seeds:
            for folder in args.runs:
                print("\n".join(across_seeds(folder)))
            return
        for run in args.runs:
            table = selections_and_losses(run)
            if args.keep:
                keep(run, args.keep)
            print(f"## {run}\n\n| round | devices | Spearman(selections, loss) | p | "
                  "Spearman(aggregated, loss) | p |\n|---|---|---|---|---|---|")
            for r in exposure(table).iter_rows(named=True):
                print(f"| {r['round']} | {r['devices']} | {r['spearman']:+.3f} | {r['p']:.2g} | "
                      f"{r['spearman_aggregated']:+.3f} | {r['p_aggregated']:.2g} |")
            print("\n| quintile of selections | devices | mean selections | mean aggregated | "
                  "mean loss |\n|---|---|---|---|---|")
            for q in by_quintile(table).iter_rows(named=True):
                print(f"| {q['quintile']} | {q['devices']} | {q['selections']:.2f} | "
                      f"{q['aggregated']:.2f} | {q['loss']:.4f} |")
            print()

    return run_command(work)


if __name__ == "__main__":
    sys.exit(main())
