"""Keep the evidence of a sweep's complete runs in the repository, small.

    python bench/archive_runs.py scenarios/paper/linear.sweep.toml [--to docs/runs]
    python bench/archive_runs.py scenarios/paper/linear_afl.tune.toml   # a tuning file too
    python bench/archive_runs.py scenarios/study/drivers.sweep.toml --whole-eval

A paper run took 20-84 min on the 2-core CPU (measured, beside other jobs), the runs
of one table take longer than a work session, and ``results/`` does not outlive the
machine it was written on. So for every complete run of the sweep this writes
``<to>/<sweep name>/<run id>/`` with the run's ``manifest.json`` (scenario, seed,
versions, wall time, summary), ``eval.parquet`` cut to the final evaluation round
(one row per device and split), ``eval_rounds.parquet``, every evaluation round's mean
and 90th-percentile error per split (``simfl.plots.runs.error_by_round``: how far the
final read moves from one evaluation to the next), and, whole, the small per-round
tables ``rounds.parquet`` and ``bias.parquet``, and ``comm_by_round.parquet``, the
run's messages summed by round, direction and kind (columns ``round``, ``direction``,
``kind``, ``messages``, ``bytes``: each kind's traffic, the threshold protocol's too,
without a row per message): tens of KB per run. ``--whole-eval`` keeps ``eval.parquet``
whole instead, every evaluation round (for a small population whose study figures read
every evaluation, e.g. the drivers study's p90 against cumulative bytes). That directory
has the layout of a run directory, so ``bench/paper_table.py`` (which looks in ``docs/runs``
after ``results``), ``python -m simfl sweep --archived docs/runs`` and ``python -m
simfl tune --archived docs/runs`` (skip what is archived) and ``python -m simfl
collect --results docs/runs`` read it as a run. A run
archived before is left as it is when its manifest is the same (the same run), else
replaced, each file whole (written aside, then renamed); the script says when the
re-run's summary differs (a re-run at the same seed and thread count should reproduce
it); a run archived before ``eval_rounds.parquet`` was kept gains it where its run
directory is still there. Nothing outside
``<to>/<sweep name>/<run id>/`` is written, except, for a tuning file whose choice
``tune`` has made, ``<to>/<tuning name>/tuning.md`` and ``chosen.toml`` (copied: a final
sweep includes that ``chosen.toml``).
"""

from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path

import polars as pl

from simfl.plots.runs import error_by_round
from simfl.sweep import is_complete, load_sweep
from simfl.tune import load_tuning

SUMMARY_KEYS = ("mean", "p90")
WHOLE = ("rounds", "bias")  # small per-round tables, kept whole


def _is_tuning(path: str) -> bool:
    with open(path, "rb") as f:
        return "criterion" in tomllib.load(f)


def comm_by_round(comm: pl.DataFrame) -> pl.DataFrame:
    """A run's messages summed by round, direction and kind."""
    return (comm.group_by("round", "direction", "kind")
            .agg(pl.len().cast(pl.Int64).alias("messages"), pl.col("bytes").sum())
            .sort("round", "direction", "kind"))


def archive(sweep_path: str, to: Path, results: Path = Path("results"),
            whole_eval: bool = False) -> None:
    tuning = _is_tuning(sweep_path)
    sweep = load_tuning(Path(sweep_path), results)[0] if tuning else load_sweep(sweep_path,
                                                                                  results)
    kept = 0
    for run in sweep.runs:
        if not is_complete(run.run_dir):
            continue
        manifest = json.loads((run.run_dir / "manifest.json").read_text())
        dest = to / sweep.name / run.run_id
        old = dest / "manifest.json"
        text = json.dumps(manifest, indent=2) + "\n"
        if (old.is_file() and old.read_text() == text  # this very run, archived before
                and (dest / "eval_rounds.parquet").is_file()):
            kept += 1
            continue
        if old.exists():  # a re-run of an archived run
            before = json.loads(old.read_text())["summary"]["test"]
            now = manifest["summary"]["test"]
            if any(before[k] != now[k] for k in SUMMARY_KEYS):
                print(f"{run.run_id}: re-run differs from the archived run "
                      f"(p90 {before['p90']:.4f} archived, {now['p90']:.4f} now); "
                      "archived copy replaced")
        dest.mkdir(parents=True, exist_ok=True)
        evals = pl.read_parquet(run.run_dir / "eval.parquet")
        tables = {"eval": evals if whole_eval else evals.filter(
                      pl.col("round") == evals["round"].max()),
                  "eval_rounds": error_by_round(evals),
                  "comm_by_round": comm_by_round(pl.read_parquet(run.run_dir / "comm.parquet")),
                  **{t: pl.read_parquet(run.run_dir / f"{t}.parquet") for t in WHOLE}}
        for table, frame in tables.items():  # each file whole or not at all, manifest last
            frame.write_parquet(dest / f"{table}.parquet.tmp", compression="zstd")
            (dest / f"{table}.parquet.tmp").replace(dest / f"{table}.parquet")
        (dest / "manifest.json.tmp").write_text(text)
        (dest / "manifest.json.tmp").replace(old)
        kept += 1
    print(f"{sweep.name}: {kept} complete runs of {len(sweep.runs)} archived in {to / sweep.name}")
    for name in ("tuning.md", "chosen.toml") if tuning else ():  # what tune wrote from them
        if (sweep.out_dir / name).is_file():
            (to / sweep.name).mkdir(parents=True, exist_ok=True)
            (to / sweep.name / name).write_text((sweep.out_dir / name).read_text())
            print(f"{to / sweep.name / name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", nargs="+")
    parser.add_argument("--to", type=Path, default=Path("docs/runs"))
    parser.add_argument("--results", type=Path, default=Path("results"),
                        help="where the run directories are")
    parser.add_argument("--whole-eval", action="store_true",
                        help="keep every evaluation round's eval.parquet, not the final one")
    args = parser.parse_args()
    for path in args.sweep:
        archive(path, args.to, args.results, args.whole_eval)


if __name__ == "__main__":
    main()
