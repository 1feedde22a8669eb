"""The reproduction table of a paper sweep: final test mean and 90th-percentile error.

    python bench/paper_table.py scenarios/paper/convnet.sweep.toml [--errors OUT.parquet]
        [--ecdf OUT.png]

Reads the manifest of every complete run of the sweep (its final evaluation's
summary, wall time and device) and prints one markdown row per variant: mean
± std over the seeds present of the unseen test devices' mean and 90th-percentile
error, their sample-weighted mean (what the authors' code reports as the mean;
its percentiles are unweighted, as ours), the number of seeds, and the wall
time per run. ``--errors`` also writes
the final per-device test errors of every run; ``--ecdf`` draws their ECDF, one line
per variant (its lowest seed).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import polars as pl

from simfl.plots import plot_error_ecdf
from simfl.sweep import is_complete, load_sweep


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sweep")
    parser.add_argument("--errors", help="write the final test errors of every run here")
    parser.add_argument("--ecdf", help="draw the ECDF of the final test errors here (PNG)")
    args = parser.parse_args()
    sweep = load_sweep(args.sweep)
    rows, errors = [], []
    for run in sweep.runs:
        if not is_complete(run.run_dir):
            continue
        manifest = json.loads((run.run_dir / "manifest.json").read_text())
        test = manifest["summary"]["test"]
        evals = pl.read_parquet(run.run_dir / "eval.parquet")
        last = evals.filter((pl.col("split") == "test") & (pl.col("round") == evals["round"].max()))
        weighted = float((last["error"] * last["num_samples"]).sum() / last["num_samples"].sum())
        rows.append({"variant": run.params.get("variant", ""), "seed": run.params["seed"],
                     "mean": test["mean"], "p90": test["p90"], "wmean": weighted,
                     "wall_s": manifest["wall_s"], "device": manifest.get("device", "")})
        errors.append(last.select("client_id", "error").with_columns(
            variant=pl.lit(rows[-1]["variant"]), seed=pl.lit(run.params["seed"])))
    if not rows:
        raise SystemExit(f"{args.sweep}: no complete run yet")
    table = pl.DataFrame(rows)
    print(f"{sweep.name}: {table.height} complete runs of {len(sweep.runs)}; "
          f"devices: {', '.join(sorted(set(table['device'])))}")
    print("| rule | test mean error | test p90 error | sample-weighted mean | seeds "
          "| wall time per run |")
    print("|---|---|---|---|---|---|")
    order = list(dict.fromkeys(r.params.get("variant", "") for r in sweep.runs))
    for variant in order:
        part = table.filter(pl.col("variant") == variant)
        if part.height == 0:
            continue
        mean, p90, wmean, wall = (part[c].to_numpy() for c in ("mean", "p90", "wmean", "wall_s"))
        print(f"| {variant} | {_pm(mean)} | {_pm(p90)} | {_pm(wmean)} | {part.height} | "
              f"{wall.mean() / 60:.1f} min |")
    if args.errors:
        pl.concat(errors).write_parquet(args.errors)
    if args.ecdf:
        first = (pl.concat(errors).filter(pl.col("seed") == pl.col("seed").min().over("variant"))
                 .with_columns(label=pl.col("variant")))
        fig = plot_error_ecdf(first, f"{sweep.name}: final test error per device")
        fig.savefig(args.ecdf, dpi=120)
        print(args.ecdf)


def _pm(values: np.ndarray) -> str:
    """Percent, mean ± sample std over seeds (just the value for one seed)."""
    if len(values) == 1:
        return f"{100 * values[0]:.1f}"
    return f"{100 * values.mean():.1f} ± {100 * values.std(ddof=1):.1f}"


if __name__ == "__main__":
    main()
