"""Keep the evidence of a sweep's complete runs in the repository, small.

    python bench/archive_runs.py scenarios/paper/linear.sweep.toml [--to docs/runs]
    python bench/archive_runs.py scenarios/paper/linear_afl.tune.toml   # a tuning file too
    python bench/archive_runs.py scenarios/study/drivers.sweep.toml --whole-eval
    python bench/archive_runs.py scenarios/study/population_size.sweep.toml --lean

A paper run took 20-84 min on the 2-core CPU (measured, beside other jobs), the runs of
one table take longer than a machine is kept, and ``results/`` does not outlive the
machine it was written on. So for every complete run of the sweep this writes
``<to>/<sweep name>/<run id>/`` with the run's ``manifest.json`` (scenario, seed,
versions, wall time, summary), ``eval.parquet`` cut to the final evaluation round (one
row per device and split), ``eval_rounds.parquet``, every evaluation round's mean and
90th-percentile error per split (``simfl.plots.runs.error_by_round``: how far the final
read moves from one evaluation to the next), and, whole, the small tables
``rounds.parquet`` and ``bias.parquet``, ``devices.parquet`` (where the run wrote one)
with only the columns a page reads of a kept run (``simfl.study.theory.DEVICE_COLUMNS``
and ``split``: the oracle rates and weights of docs/theory.md's check; the ids,
propensities, speeds, links, sessions and covariates, about three quarters of the file,
are left out), and ``comm_by_round.parquet``, the run's messages summed by round,
direction and kind (columns ``round``, ``direction``, ``kind``, ``messages``, ``bytes``:
each kind's traffic, the threshold protocol's too, without a row per message): tens of
KB per run.
``--whole-eval`` keeps ``eval.parquet`` whole instead, every evaluation round (for a
small population whose study figures read every evaluation, e.g. the drivers study's p90
against cumulative bytes). ``--lean`` keeps neither ``eval.parquet`` nor ``devices.parquet``
(a row per device: about 5 MB per run at 10⁵ devices, 50 MB at 10⁶) and the rest as
above; ``collect`` then gathers no ``eval.parquet`` for that sweep and says so. That
directory has the layout of a run directory, so ``python -m simfl.study.paper_table`` (which looks
in ``docs/runs`` after ``results``), ``python -m simfl sweep --archived docs/runs`` and
``python -m simfl tune --archived docs/runs`` (skip what is archived) and ``python -m
simfl collect --results docs/runs`` read it as a run. A run archived before is left as
it is when its manifest is the same (the same run), else
replaced, each file whole (written aside, then renamed); the script says when the
re-run's summary differs (a re-run at the same seed and thread count should reproduce
it); a run archived before ``eval_rounds.parquet`` was kept gains it where its run
directory is still there. Every destination is checked before anything is written: a
run's folder is only replaced when it holds a run archived here and nothing else, a
``tuning.md`` or ``chosen.toml`` only when ``tune`` wrote it; else the script names the
path and exits with status 2, having written nothing. Nothing outside
``<to>/<sweep name>/<run id>/`` is written, except, for a tuning file whose choice
``tune`` has made, ``<to>/<tuning name>/tuning.md`` and ``chosen.toml`` (copied: a final
sweep includes that ``chosen.toml``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl

from simfl.errors import InputError
from simfl.rundir import (
    FILE,
    MANIFEST,
    TUNE_BEGINS,
    Layout,
    foreign_entry,
    is_run_manifest,
    manifest_or_empty,
    written_by_tune,
)
from simfl.runs.sweep import Sweep, SweepRun, is_complete, load_sweep, load_tuning
from simfl.study.theory import DEVICE_COLUMNS
from simfl.tables import error_by_round, sent

SUMMARY_KEYS = ("mean", "p90")
WHOLE = ("rounds", "bias")  # small tables, kept whole
# devices.parquet (runs from 2026-11-28 on write it): only what simfl.study.theory reads
KEPT_DEVICE_COLUMNS = (*DEVICE_COLUMNS, "split")
TABLES = ("eval", "eval_rounds", "comm_by_round", *WHOLE, "devices")  # a run's archive
PER_DEVICE = ("eval", "devices")  # what --lean leaves out
# what the study tools keep beside an archived run (simfl.study.theory, .exposure --keep)
STUDY_KEPT = ("theory.parquet", "exposure.parquet")
ARCHIVE_LAYOUT: Layout = {re.escape(name): FILE for name in
                          (MANIFEST, *(f"{t}.parquet" for t in TABLES), *STUDY_KEPT)}


class Archived(NamedTuple):
    """A complete run to archive in ``dest``; ``before``: the manifest archived there."""

    run: SweepRun
    dest: Path
    manifest: dict[str, Any]
    text: str  # the manifest.json to write
    before: dict[str, Any] | None


class Plan(NamedTuple):
    """What archiving a sweep writes, checked: its runs to (re)write, how many of its runs
    are complete, and the files of tune's folder to copy."""

    sweep: Sweep
    to: Path
    runs: list[Archived]
    complete: int
    copies: list[str]


def _is_tuning(path: str) -> bool:
    with open(path, "rb") as f:
        return "criterion" in tomllib.load(f)


def comm_by_round(comm: pl.DataFrame) -> pl.DataFrame:
    """A run's sent messages (:func:`simfl.tables.sent`) summed by round, direction and
    kind; a shadowing estimator's are in its bias.parquet rows (protocol_bytes)."""
    return (sent(comm).group_by("round", "direction", "kind")
            .agg(pl.len().cast(pl.Int64).alias("messages"), pl.col("bytes").sum())
            .sort("round", "direction", "kind"))


def _check_run_folder(dest: Path) -> dict[str, Any] | None:
    """The manifest of the run archived in ``dest`` earlier (None when ``dest`` is absent
    or empty); InputError unless ``dest`` is such an archived simfl run holding only what
    this script writes there, which is all that it may replace."""
    if not dest.exists():
        return None
    if not dest.is_dir():
        raise InputError(f"{dest}: exists and is not a directory")
    if not any(dest.iterdir()):
        return None
    manifest = manifest_or_empty(dest)
    if not (is_run_manifest(manifest) and manifest["status"] == "complete"):
        raise InputError(f"{dest}: not an archived simfl run (no complete simfl run's "
                         "manifest.json), not replaced; move it or choose another --to")
    foreign = foreign_entry(dest, ARCHIVE_LAYOUT)
    if foreign is not None:
        raise InputError(f"{dest}: holds {str(foreign.relative_to(dest))!r}, which simfl "
                         "did not write; move it or choose another --to")
    return manifest


def plan_archive(sweep_path: str, to: Path, results: Path = Path("results")) -> Plan:
    """What archiving ``sweep_path`` into ``to`` writes, every destination checked first:
    InputError (naming the path) where it would replace what simfl did not write."""
    tuning = _is_tuning(sweep_path)
    sweep = load_tuning(Path(sweep_path), results)[0] if tuning else load_sweep(sweep_path,
                                                                                  results)
    for folder in (to, to / sweep.name):
        if folder.exists() and not folder.is_dir():
            raise InputError(f"{folder}: exists and is not a directory")
    runs, complete = [], 0
    for run in sweep.runs:
        if not is_complete(run.run_dir):
            continue
        complete += 1
        manifest = json.loads((run.run_dir / MANIFEST).read_text())
        dest = to / sweep.name / run.run_id
        text = json.dumps(manifest, indent=2) + "\n"
        old = dest / MANIFEST
        if (old.is_file() and old.read_bytes() == text.encode()  # this very run, archived
                and (dest / "eval_rounds.parquet").is_file()):  # before: left as it is
            continue
        runs.append(Archived(run, dest, manifest, text, _check_run_folder(dest)))
    copies = [name for name in TUNE_BEGINS if tuning and (sweep.out_dir / name).is_file()]
    for name in copies:  # what tune wrote from them, replacing only an earlier copy
        path = to / sweep.name / name
        if (path.exists() or path.is_symlink()) and not written_by_tune(path):
            raise InputError(f"{path}: not written by simfl tune, not replaced; move it or "
                             "choose another --to")
    return Plan(sweep, to, runs, complete, copies)


def archive(plan: Plan, whole_eval: bool = False, lean: bool = False) -> None:
    """Write what ``plan`` found to write, each file whole (written aside, then renamed);
    ``lean``: without the per-device tables eval.parquet and devices.parquet."""
    sweep, to = plan.sweep, plan.to
    for run, dest, manifest, text, before in plan.runs:
        if before is not None:  # a re-run of an archived run
            was, now = before["summary"]["test"], manifest["summary"]["test"]
            if any(was[k] != now[k] for k in SUMMARY_KEYS):
                print(f"{run.run_id}: re-run differs from the archived run "
                      f"(p90 {was['p90']:.4f} archived, {now['p90']:.4f} now); "
                      "archived copy replaced")
        dest.mkdir(parents=True, exist_ok=True)
        evals = pl.read_parquet(run.run_dir / "eval.parquet")
        tables = {"eval": evals if whole_eval else evals.filter(
                      pl.col("round") == evals["round"].max()),
                  "eval_rounds": error_by_round(evals),
                  "comm_by_round": comm_by_round(pl.read_parquet(run.run_dir / "comm.parquet")),
                  **{t: pl.read_parquet(run.run_dir / f"{t}.parquet") for t in (*WHOLE, "devices")
                     if (run.run_dir / f"{t}.parquet").is_file()}}
        if "devices" in tables:
            tables["devices"] = tables["devices"].select(
                c for c in tables["devices"].columns if c in KEPT_DEVICE_COLUMNS)
        for table in PER_DEVICE if lean else ():
            tables.pop(table, None)
            (dest / f"{table}.parquet").unlink(missing_ok=True)  # an earlier archive's
        for table, frame in tables.items():  # each file whole or not at all, manifest last
            frame.write_parquet(dest / f"{table}.parquet.tmp", compression="zstd")
            (dest / f"{table}.parquet.tmp").replace(dest / f"{table}.parquet")
        (dest / f"{MANIFEST}.tmp").write_text(text)
        (dest / f"{MANIFEST}.tmp").replace(dest / MANIFEST)
    print(f"{sweep.name}: {plan.complete} complete runs of {len(sweep.runs)} archived in "
          f"{to / sweep.name}")
    for name in plan.copies:
        (to / sweep.name).mkdir(parents=True, exist_ok=True)
        (to / sweep.name / name).write_text((sweep.out_dir / name).read_text())
        print(f"{to / sweep.name / name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", nargs="+")
    parser.add_argument("--to", type=Path, default=Path("docs/runs"))
    parser.add_argument("--results", type=Path, default=Path("results"),
                        help="where the run directories are")
    kept = parser.add_mutually_exclusive_group()
    kept.add_argument("--whole-eval", action="store_true",
                      help="keep every evaluation round's eval.parquet, not the final one")
    kept.add_argument("--lean", action="store_true",
                      help="keep no per-device table (eval.parquet, devices.parquet)")
    args = parser.parse_args()
    try:  # every sweep's destinations checked before anything is written
        plans = [plan_archive(path, args.to, args.results) for path in args.sweep]
    except InputError as e:
        print(f"archive_runs: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    for each in plans:
        archive(each, args.whole_eval, args.lean)


if __name__ == "__main__":
    main()
