"""Where a sweep's runs stand (``python -m simfl sweep --status``), and how the scenario
each ran differs from the one the sweep now asks for. Torch-free: a checkpoint's
progress is read by :func:`simfl.rundir.checkpoint_progress`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from simfl import plugins
from simfl.errors import InputError
from simfl.metrics import error_summary
from simfl.records import read_table, table_exists
from simfl.rundir import MANIFEST, checkpoint_progress, manifest_or_empty, run_locked
from simfl.runs.sweep.spec import Sweep, SweepRun, toml_value
from simfl.scenario import Scenario, flatten, from_dict, load_scenario, to_dict

STATUS_SCHEMA = {"run": pl.String, "cell": pl.String, "status": pl.String, "rounds": pl.Int64,
                 "num_rounds": pl.Int64, "wall_s": pl.Float64, "device": pl.String,
                 "test_mean": pl.Float64, "test_p90": pl.Float64, "changes": pl.String}


def is_complete(run_dir: Path) -> bool:
    return bool(manifest_or_empty(run_dir).get("status") == "complete")


def kept_copy(sweep: Sweep, run: SweepRun, archived: Path | None) -> Path | None:
    """The complete copy of ``run`` under ``archived/<sweep name>/`` (kept by
    bench/archive_runs.py, e.g. in docs/runs), or None."""
    if archived is None:
        return None
    kept = archived / sweep.name / run.run_id
    return kept if is_complete(kept) else None


def run_statuses(sweep: Sweep, archived: Path | None = None) -> pl.DataFrame:
    """Where each run of the sweep stands: its status (``not started``, ``running``,
    ``killed`` — a manifest saying running with no process holding the run's lock —,
    ``interrupted``, ``failed``, ``complete``, or ``archived``: not complete here but
    complete in ``archived/<sweep name>/``, the copies ``sweep --archived`` skips), the
    rounds done (at its last checkpoint, where a resume would start) of the scenario's,
    the wall seconds worked (up to that checkpoint or the end), the latest
    evaluation's test mean and p90 error, and ``changes``: how the scenario it ran
    differs from the one the sweep now asks for (:func:`scenario_changes`; null when
    the same), so a complete run of another scenario is not read as this sweep's and an
    interrupted one, which a launch would start again from round 0, is seen first."""
    return pl.DataFrame([_status(sweep, run, archived) for run in sweep.runs],
                        schema=STATUS_SCHEMA)


def _status(sweep: Sweep, run: SweepRun, archived: Path | None) -> dict[str, Any]:
    """One row of :func:`run_statuses`."""
    scenario = load_scenario(sweep.scenario, run.overrides)
    total, run_dir = scenario.server.num_rounds, run.run_dir
    manifest = manifest_or_empty(run_dir)
    status = manifest.get("status", "not started")
    kept = kept_copy(sweep, run, archived)
    if status != "complete" and kept is not None:
        run_dir, manifest, status = kept, manifest_or_empty(kept), "archived"
    elif status == "running" and not run_locked(run_dir):
        status = "killed"
    rounds, wall_s = 0, manifest.get("wall_s")
    test = {"mean": float("nan"), "p90": float("nan")}
    if status in ("complete", "archived"):
        rounds = total
    elif (progress := checkpoint_progress(run_dir)) is not None:
        rounds, wall_s = progress
    summary = (manifest.get("summary", {}).get("test") if status in ("complete", "archived")
               else None)
    if summary:  # a finished run's final evaluation (one archived --lean keeps no eval)
        test = {"mean": summary["mean"], "p90": summary["p90"]}
    elif manifest and table_exists(run_dir, "eval"):
        evals = read_table(run_dir, "eval").filter(pl.col("split") == "test")
        if evals.height:
            last = evals.filter(pl.col("round") == evals["round"].max())
            test = error_summary(last["error"].to_numpy())
    changes = "; ".join(scenario_changes(run_dir, scenario)) if manifest else ""
    cell = ",".join(f"{k}={v}" for k, v in run.params.items() if k != "seed")
    return {"run": run.run_id, "cell": cell, "status": status, "rounds": rounds,
            "num_rounds": total,
            "wall_s": wall_s, "device": manifest.get("device"), "test_mean": test["mean"],
            "test_p90": test["p90"], "changes": changes or None}


def status_lines(sweep: Sweep, archived: Path | None = None) -> list[str]:
    """What ``sweep --status`` prints: a line per run of :func:`run_statuses`, then
    :func:`sweep_progress`'s."""
    where = run_statuses(sweep, archived)
    lines = []
    for r in where.iter_rows(named=True):
        wall = "" if r["wall_s"] is None else f"  {r['wall_s'] / 60:6.1f} min"
        test = ("" if r["test_mean"] != r["test_mean"]  # NaN: no evaluation yet
                else f"  test mean {r['test_mean']:.3f} p90 {r['test_p90']:.3f}")
        other = "" if r["changes"] is None else f"  another scenario: {r['changes']}"
        lines.append(f"{r['run']}  {r['status']}  {r['rounds']}/{r['num_rounds']} rounds"
                     f"{wall}{test}{other}")
    return [*lines, sweep_progress(sweep.name, where)]


def sweep_progress(name: str, statuses: pl.DataFrame) -> str:
    """One line from :func:`run_statuses`' table: runs complete, rounds done, run time so
    far and the run time of the rounds left, each run's at the pace (wall seconds per round
    done) of the started runs of its grid cell (``cell``: the run's axes but the seed; a
    population ten times larger runs slower), a cell none has started at the pace of every
    round done, and how many rounds that guess covers; at each device's pace when runs
    started on several (a GPU's and a CPU's differ by an order of magnitude)."""
    done = statuses["status"].is_in(["complete", "archived"]).sum()
    rounds, total = int(statuses["rounds"].sum()), int(statuses["num_rounds"].sum())
    started = statuses.filter(pl.col("rounds") > 0).with_columns(pl.col("wall_s").fill_null(0.0))
    wall = float(started["wall_s"].sum())
    line = (f"{name}: {done} of {statuses.height} runs complete, {rounds} of {total} rounds "
            f"done ({100 * rounds / total:.1f} %) in {_duration(wall)} of run time")
    if not (rounds and wall and rounds < total):
        return line
    paces = started.group_by("device", maintain_order=True).agg(pl.col("wall_s").sum(),
                                                                  pl.col("rounds").sum())
    if paces.height == 1:
        cells = started.group_by("cell").agg(
            (pl.col("wall_s").sum() / pl.col("rounds").sum()).alias("pace"))
        left = statuses.join(cells, on="cell", how="left").with_columns(
            (pl.col("num_rounds") - pl.col("rounds")).alias("left"))
        guessed = int(left.filter(pl.col("pace").is_null())["left"].sum())
        seconds = float((left["left"] * left["pace"].fill_null(wall / rounds)).sum())
        unsure = (f"; {guessed} of them in grid cells no run has started, guessed at the "
                  f"pace of all rounds done" if guessed else "")
        return line + (f"; at the pace of each grid cell's runs the {total - rounds} rounds "
                       f"left take about {_duration(seconds)} of one process{unsure}")
    each = [f"{_duration(w / r * (total - rounds))} at the pace of the runs started on {d}"
            for d, w, r in paces.iter_rows() if r and w]
    return line + f"; the {total - rounds} rounds left take about " + ", ".join(each)


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def scenario_changes(run_dir: Path, scenario: Scenario) -> list[str]:
    """How the scenario the run in ``run_dir`` was started from (its manifest's) differs
    from ``scenario``: one ``key = the run's value (the sweep: value)`` per key, sorted, or
    why the two cannot be compared; [] when they are the same. The manifest's scenario is
    read as ``resume`` reads it, so a key that simfl gained after the run started takes
    its default (which keeps the old behaviour) and is no change; nor is a ``[data]`` key
    that only other data sets than both scenarios' read (:func:`_other_data_keys`)."""
    started = manifest_or_empty(run_dir).get("scenario")
    if not isinstance(started, dict):
        return ["its manifest holds no scenario"]
    try:
        ran = dict(flatten(to_dict(from_dict(started, source=str(run_dir / MANIFEST)))))
    except InputError as e:  # a key simfl no longer has, or a value it no longer takes
        return [f"its scenario no longer loads ({e})"]
    now = dict(flatten(to_dict(scenario)))
    unread = _other_data_keys({ran["data.dataset"], now["data.dataset"]})
    return [f"{key} = {toml_value(ran[key])} (the sweep: {toml_value(now[key])})"
            for key in sorted(ran) if ran[key] != now[key]
            and not any(key == k or key.startswith(f"{k}.") for k in unread)]


def _other_data_keys(used: set[str]) -> set[str]:
    """The ``[data]`` keys (``data.synthetic``: its whole table) that simfl's data sets read
    (their ``reads`` in simfl.plugins) but none of ``used`` does: no run of those reads
    them, so a default of theirs changed since (data.synthetic.shared_model's) moves no
    FEMNIST run. None when a plug-in data set is used: it may read any key."""
    table = plugins.DATASETS.table
    if not all(name in table and table[name].builtin for name in used):
        return set()
    read = {key for name in used for key in table[name].reads}
    return {f"data.{key}" for p in table.values() if p.builtin for key in p.reads
            if key not in read}


def other_scenarios(sweep: Sweep, complete: Sequence[SweepRun]) -> list[str]:
    """A line for each of the ``complete`` runs that ran another scenario than the sweep
    now asks for (it is kept, and counted and collected as the sweep's: never deleted)."""
    lines = []
    for run in complete:
        if changes := _changes(sweep, run):
            lines.append(f"{run.run_id}: complete, kept, though it ran another scenario: "
                         f"{'; '.join(changes)}")
    return lines


def restarts(sweep: Sweep, pending: Sequence[SweepRun]) -> list[str]:
    """A line for each of the ``pending`` runs whose checkpoint is of another scenario
    than the sweep now asks for: the sweep starts it again from round 0, deleting that
    checkpoint (said before it happens, so it can be stopped)."""
    lines = []
    for run in pending:
        done = checkpoint_progress(run.run_dir)
        if done is None or run_locked(run.run_dir):  # another process's run is left to it
            continue
        if changes := _changes(sweep, run):
            lines.append(f"{run.run_id}: starts again from round 0, replacing its checkpoint "
                         f"({done[0]} rounds done) of another scenario: {'; '.join(changes)}")
    return lines


def _changes(sweep: Sweep, run: SweepRun) -> list[str]:
    return scenario_changes(run.run_dir, load_scenario(sweep.scenario, run.overrides))
