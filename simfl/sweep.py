"""Sweeps: one scenario, a grid of overrides, each run a Ray task (or run in turn).

A sweep file names a scenario and the axes to vary::

    scenario = "../diurnal_emnist_small.toml"   # relative to the sweep file
    seeds = [0, 1, 2]
    include = ["chosen.toml"]                   # [set] / [variants.*] of other files, e.g.
                                                # a tuning's choice; the sweep's own win
    [set]                                       # overrides for every run
    "server.num_rounds" = 150
    [grid]                                      # every combination of these values
    "server.clients_per_round" = [10, 20, 50]
    [variants.always]                           # named bundles of overrides: one axis
    "population.availability.mode" = "always"
    [variants.diurnal]
    "population.availability.mode" = "diurnal"
    [ray]
    address = ""        # "" = a local Ray instance; "auto" or "ray://head:10001" for a cluster
    num_cpus = 1        # CPUs Ray reserves per run: match the runs' train.threads (1)
    num_gpus = 0

Runs go to ``results/<sweep name>/<run id>/``: a run id joins ``key=value`` for the
variant, each grid key (its last part) and the seed into one folder name, so a variant name
or grid value holding ``/`` (or NUL) is refused (exit 2, naming it) rather than making a
path that leaves that folder (name such a value as a variant instead), and
``results/<sweep name>`` must not be a single run's directory. A run whose manifest says
``complete`` is skipped when the sweep is launched again, and one interrupted
after a checkpoint resumes from it (``python -m simfl resume``), unless it ran
another scenario (:func:`scenario_changes`): then it starts again from round 0,
said first; a complete run of another scenario is kept, and named. Every run's overrides
are validated before the first one starts. Ray is an optional extra
(``pip install simfl[sweep]``); without it, or with ``--backend sequential``,
the runs execute one after the other in this process.
"""

from __future__ import annotations

import itertools
import json
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from simfl.errors import InputError, RunBusy, RunFailed, RunInterrupted
from simfl.metrics import error_summary
from simfl.records import read_table
from simfl.rundir import (
    MANIFEST,
    PLOTS_DIR,
    manifest_or_empty,
    prepare_run_dir,
    run_locked,
    write_atomically,
)
from simfl.scenario import Scenario, flatten, from_dict, is_plain_name, load_scenario, to_dict

SWEEP_KEYS = {"scenario", "name", "seeds", "set", "grid", "variants", "ray", "include"}
RAY_KEYS = {"address", "num_cpus", "num_gpus"}
COLLECTED_TABLES = ("rounds", "bias", "eval")
SWEEP_FIGURES = ("protocol_cost.png", "bias_vs_cohort.png", "conformity_vs_cohort.png",
                 "online_bias_vs_cohort.png", "decomposition_vs_cohort.png",
                 "p90_vs_bytes_by_estimator.png")  # simfl.plots.study.plot_sweep's, in plots/
# What collect writes (its tables, the figures) carries this mark, in a Parquet table's
# key-value metadata or a PNG's text: it replaces its own files and nothing else.
COLLECT_MARK = {"simfl": "collect"}


@dataclass(frozen=True)
class SweepRun:
    run_id: str
    params: dict[str, Any]  # axis -> value (the collected tables' extra columns)
    overrides: tuple[str, ...]  # "dotted.key=TOML value"
    run_dir: Path


@dataclass(frozen=True)
class Sweep:
    name: str
    scenario: Path
    runs: tuple[SweepRun, ...]
    ray_address: str = ""
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    source: str = ""  # the sweep file

    @property
    def out_dir(self) -> Path:
        return self.runs[0].run_dir.parent


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return repr(value)


def _table(raw: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise InputError(f"{source}: [{key}] must be a table")
    return value


def read_toml(path: Path, what: str) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: {what} file not found") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise InputError(f"{path}: invalid TOML: {e}") from None


def load_sweep(path: str | Path, results_dir: Path = Path("results")) -> Sweep:
    """Read a sweep file, expand its grid and validate every run's scenario."""
    path = Path(path)
    return sweep_from_table(read_toml(path, "sweep"), path, results_dir)


def _include(raw: dict[str, Any], path: Path, source: str) -> None:
    """Merge the ``[set]`` and ``[variants.*]`` tables of the files listed in ``include``
    (e.g. a tuning's chosen.toml) under the sweep's own, which win."""
    files = raw.pop("include", [])
    if not (isinstance(files, list) and all(isinstance(f, str) for f in files)):
        raise InputError(f"{source}: 'include' must be an array of file names")
    for name in files:
        included = read_toml(path.parent / name, "included")
        for key in included.keys() - {"set", "variants"}:
            raise InputError(f"{path.parent / name}: unknown key '{key}' (expected set, variants)")
        raw["set"] = {**_table(included, "set", name), **_table(raw, "set", source)}
        variants = _table(raw, "variants", source)
        for vname, bundle in _table(included, "variants", name).items():
            if vname not in variants:
                raise InputError(f"{path.parent / name}: variant '{vname}' is not in {source}")
            variants[vname] = {**bundle, **variants[vname]}


def sweep_from_table(raw: dict[str, Any], path: Path, results_dir: Path) -> Sweep:
    """A sweep from the parsed file ``path`` (relative names are resolved from it)."""
    source = str(path)
    for key in raw.keys() - SWEEP_KEYS:
        raise InputError(f"{source}: unknown key '{key}' (expected one of {sorted(SWEEP_KEYS)})")
    if not isinstance(raw.get("scenario"), str):
        raise InputError(f"{source}: 'scenario' (the scenario file) is required")
    _include(raw, path, source)
    scenario = (path.parent / raw["scenario"]).resolve()
    seeds = raw.get("seeds", [0])
    if not (isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds)):
        raise InputError(f"{source}: 'seeds' must be a non-empty array of integers")
    grid = _table(raw, "grid", source)
    for key, values in grid.items():
        if not (isinstance(values, list) and values):
            raise InputError(f"{source}: grid key '{key}' must be a non-empty array")
    common = _table(raw, "set", source)
    variants = _table(raw, "variants", source)
    for vname, bundle in variants.items():
        if not isinstance(bundle, dict):
            raise InputError(f"{source}: [variants.{vname}] must be a table of overrides")
    ray_cfg = _table(raw, "ray", source)
    for key in ray_cfg.keys() - RAY_KEYS:
        raise InputError(f"{source}: unknown key 'ray.{key}' (expected one of {sorted(RAY_KEYS)})")
    if not isinstance(ray_cfg.get("address", ""), str):
        raise InputError(f"{source}: 'ray.address' = {ray_cfg['address']!r} must be a string "
                         f"(\"\" for a local Ray instance, \"auto\" or \"ray://HOST:PORT\")")
    for key in ("num_cpus", "num_gpus"):
        value = ray_cfg.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise InputError(f"{source}: 'ray.{key}' = {value!r} must be a number >= 0 "
                             f"(what Ray reserves per run)")
    name = str(raw.get("name", path.stem))
    if not is_plain_name(name):
        raise InputError(f"{source}: 'name' = {name!r} must be a plain name (it names the "
                         f"folder results/<name>; no path separators, not '.' or '..')")
    out_dir = results_dir / name
    if (out_dir / MANIFEST).is_file():
        raise InputError(f"{out_dir}: a single run's directory (it has manifest.json), not "
                         f"the folder of sweep '{name}' ({source}): give the sweep another "
                         f"'name'")
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a directory (the folder of sweep "
                         f"'{name}', {source})")
    if len(set(seeds)) != len(seeds):
        raise InputError(f"{source}: 'seeds' = {seeds} repeats a seed")
    for key, values in grid.items():
        if key == "seed" or len({toml_value(v) for v in values}) != len(values):
            raise InputError(f"{source}: grid key '{key}' repeats a value or is the seed "
                             f"(use 'seeds')")
    _check_run_id_parts(source, grid, variants)
    runs = _expand(name, common, grid, variants, seeds, results_dir)
    ids = [run.run_id for run in runs]
    if len(set(ids)) < len(ids):
        twice = next(i for i in ids if ids.count(i) > 1)
        raise InputError(f"{source}: two runs would share the folder {twice!r} (grid values "
                         f"or keys that print alike, e.g. 1 and \"1\"): make them differ")
    for run in runs:  # bad overrides stop the sweep before any run starts
        load_scenario(scenario, run.overrides)
    return Sweep(name, scenario, runs, ray_cfg.get("address", ""),
                 float(ray_cfg.get("num_cpus", 1)), float(ray_cfg.get("num_gpus", 0)), source)


def _check_run_id_parts(source: str, grid: dict[str, list[Any]],
                        variants: dict[str, dict[str, Any]]) -> None:
    """InputError for a variant name or grid value that cannot be part of a run id. A run
    id (:func:`_expand`) is ``key=value`` pieces joined by commas: each piece holds an
    ``=``, so the id is never empty, ``.`` or ``..``; without ``/`` and NUL in its pieces it
    is one plain path component, a folder inside ``results/<sweep>/``."""
    def bad(piece: str) -> bool:
        return "/" in piece or "\0" in piece

    for vname in variants:
        if bad(vname):
            raise InputError(f"{source}: variant name {vname!r} cannot name a run folder "
                             f"(no '/' or NUL)")
    for key, values in grid.items():
        for value in values:
            if bad(f"{key.rsplit('.', 1)[-1]}={value}"):
                raise InputError(f"{source}: grid key '{key}': {value!r} cannot be part of a run "
                                 f"folder's name (no '/' or NUL); give such values a name as "
                                 f"[variants.NAME] instead")


def _expand(name: str, common: dict[str, Any], grid: dict[str, list[Any]],
            variants: dict[str, dict[str, Any]], seeds: list[int],
            results_dir: Path) -> tuple[SweepRun, ...]:
    variant_items = list(variants.items()) or [("", {})]
    runs = []
    # Seeds outermost: a sweep cut short has run every configuration before repeating any.
    for seed, (vname, bundle), values in itertools.product(
            seeds, variant_items, itertools.product(*grid.values())):
        params: dict[str, Any] = {"variant": vname} if vname else {}
        params |= {key.rsplit(".", 1)[-1]: v for key, v in zip(grid, values, strict=True)}
        params["seed"] = seed
        overrides = [f"{k}={toml_value(v)}" for k, v in (common | bundle).items()]
        overrides += [f"{k}={toml_value(v)}" for k, v in zip(grid, values, strict=True)]
        overrides.append(f"seed={seed}")
        run_id = ",".join(f"{k}={v}" for k, v in params.items())
        runs.append(SweepRun(run_id, params, tuple(overrides), results_dir / name / run_id))
    return tuple(runs)


def is_complete(run_dir: Path) -> bool:
    return bool(manifest_or_empty(run_dir).get("status") == "complete")


def kept_copy(sweep: Sweep, run: SweepRun, archived: Path | None) -> Path | None:
    """The complete copy of ``run`` under ``archived/<sweep name>/`` (kept by
    bench/archive_runs.py, e.g. in docs/runs), or None."""
    if archived is None:
        return None
    kept = archived / sweep.name / run.run_id
    return kept if is_complete(kept) else None


def _run_one(scenario: Path, overrides: Sequence[str], run_dir: Path,
             progress: bool = False) -> str:
    """One run, resumed if it was interrupted with the same scenario; its torch threads are
    its ``train.threads`` (1 unless set), whichever the backend, so both backends write
    the same files. ``progress`` shows the run's round bar (one run at a time only)."""
    from simfl.run import resume_run, run_scenario  # imported in the worker, not the CLI

    resolved = load_scenario(scenario, overrides)
    if _resumes(run_dir, resolved):
        manifest = resume_run(run_dir, progress)  # an interrupted run goes on
    else:  # run_sweep said so first when this replaces a checkpoint of another scenario
        manifest = run_scenario(resolved, run_dir, overwrite=True, progress=progress)
    return str(manifest["status"])


def _resumes(run_dir: Path, scenario: Scenario) -> bool:
    """Whether the sweep resumes the run in ``run_dir`` (it has a checkpoint of
    ``scenario``) rather than start it from round 0, replacing the folder."""
    from simfl.checkpoint import checkpoint_progress  # reads the torch checkpoint

    return checkpoint_progress(run_dir) is not None and not scenario_changes(run_dir, scenario)


def _check_run_dirs(sweep: Sweep, pending: Sequence[SweepRun]) -> None:
    """InputError, before any run starts, when a run the sweep would start from round 0 is
    in a folder that it may not replace (``rundir.prepare_run_dir`` with overwrite: a folder
    without a manifest, a file simfl did not write, ...); runs that another process holds
    are left to it. So a sweep stopped by such a folder has run nothing (exit 2)."""
    for run in pending:
        if run_locked(run.run_dir) or _resumes(run.run_dir, load_scenario(sweep.scenario,
                                                                          run.overrides)):
            continue
        try:
            prepare_run_dir(run.run_dir, overwrite=True, advise=False)
        except InputError as e:
            problem = str(e)
            if run.run_dir.is_dir() and not (run.run_dir / MANIFEST).exists():
                names = sorted(repr(p.name) for p in run.run_dir.iterdir())
                problem += f", holding {', '.join(names[:3])}{', ...' * (len(names) > 3)}"
            raise InputError(f"sweep '{sweep.name}': {problem}; the sweep would start run "
                             f"{run.run_id} there from round 0, deleting only what simfl "
                             f"wrote: move the rest away, then launch the sweep again (no "
                             f"run was started)") from None


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
    from simfl.checkpoint import checkpoint_progress  # reads the torch checkpoint

    rows = []
    for run in sweep.runs:
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
        progress = None if status in ("complete", "archived") else checkpoint_progress(run_dir)
        if status in ("complete", "archived"):
            rounds = total
        elif progress is not None:
            rounds, wall_s = progress
        if manifest:
            evals = read_table(run_dir, "eval").filter(pl.col("split") == "test")
            if evals.height:
                last = evals.filter(pl.col("round") == evals["round"].max())
                test = error_summary(last["error"].to_numpy())
        changes = "; ".join(scenario_changes(run_dir, scenario)) if manifest else ""
        rows.append({"run": run.run_id, "status": status, "rounds": rounds,
                     "num_rounds": total, "wall_s": wall_s, "device": manifest.get("device"),
                     "test_mean": test["mean"], "test_p90": test["p90"],
                     "changes": changes or None})
    return pl.DataFrame(rows, schema={"run": pl.String, "status": pl.String,
                                      "rounds": pl.Int64, "num_rounds": pl.Int64,
                                      "wall_s": pl.Float64, "device": pl.String,
                                      "test_mean": pl.Float64, "test_p90": pl.Float64,
                                      "changes": pl.String})


def sweep_progress(name: str, statuses: pl.DataFrame) -> str:
    """One line from :func:`run_statuses`' table: runs complete, rounds done, run time so
    far and, at that pace (wall seconds per round over every round done), the run time of
    the rounds left; at each device's pace when runs started on several (a GPU's and a
    CPU's differ by an order of magnitude)."""
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
        return line + (f"; at that pace the {total - rounds} rounds left take about "
                       f"{_duration(wall / rounds * (total - rounds))} of one process")
    left = [f"{_duration(w / r * (total - rounds))} at the pace of the runs started on {d}"
            for d, w, r in paces.iter_rows() if r and w]
    return line + f"; the {total - rounds} rounds left take about " + ", ".join(left)


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def scenario_changes(run_dir: Path, scenario: Scenario) -> list[str]:
    """How the scenario the run in ``run_dir`` was started from (its manifest's) differs
    from ``scenario``: one ``key = the run's value (the sweep: value)`` per key, sorted, or
    why the two cannot be compared; [] when they are the same. The manifest's scenario is
    read as ``resume`` reads it, so a key that simfl gained after the run started takes
    its default (which keeps the old behaviour) and is no change."""
    started = manifest_or_empty(run_dir).get("scenario")
    if not isinstance(started, dict):
        return ["its manifest holds no scenario"]
    try:
        ran = dict(flatten(to_dict(from_dict(started, source=str(run_dir / MANIFEST)))))
    except InputError as e:  # a key simfl no longer has, or a value it no longer takes
        return [f"its scenario no longer loads ({e})"]
    now = dict(flatten(to_dict(scenario)))
    return [f"{key} = {toml_value(ran[key])} (the sweep: {toml_value(now[key])})"
            for key in sorted(ran) if ran[key] != now[key]]


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
    from simfl.checkpoint import checkpoint_progress  # reads the torch checkpoint

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


BUSY = "skipped: another process is working on it"  # the status of a run left to it


def run_sweep(sweep: Sweep, backend: str = "auto", report: Callable[[str], None] = print,
              progress: bool = False) -> dict[str, str]:
    """Run the sweep's unfinished runs; return run id -> final status. ``progress``: the
    sequential backend shows each run's round bar (Ray runs report when they end)."""
    pending = [r for r in sweep.runs if not is_complete(r.run_dir)]
    _check_run_dirs(sweep, pending)
    report(f"{sweep.name}: {len(sweep.runs)} runs, {len(sweep.runs) - len(pending)} "
           f"already complete, {len(pending)} to run")
    for line in other_scenarios(sweep, [r for r in sweep.runs if r not in pending]):
        report(line)
    for line in restarts(sweep, pending):
        report(line)
    if backend == "auto":
        try:
            import ray  # noqa: F401
            backend = "ray"
        except ImportError:
            backend = "sequential"
    if backend == "ray":
        return _run_ray(sweep, pending, report)
    statuses = {}
    for i, run in enumerate(pending):
        if is_complete(run.run_dir):  # another process running this sweep finished it
            statuses[run.run_id] = "complete (by another process)"
        elif run_locked(run.run_dir):
            statuses[run.run_id] = BUSY
        else:
            if progress:
                report(f"[{i + 1}/{len(pending)}] {run.run_id}: running")
            try:
                statuses[run.run_id] = _run_one(sweep.scenario, run.overrides, run.run_dir,
                                                progress)
            except RunInterrupted:  # a stop signal stops the sweep
                raise
            except RunFailed as e:  # the run's manifest says why; the sweep goes on
                statuses[run.run_id] = f"failed: {e}"
            except RunBusy:  # another process took the run since run_locked looked
                statuses[run.run_id] = BUSY
            except Exception as e:  # a crash is one failed run, as a Ray task's is
                statuses[run.run_id] = f"failed: {type(e).__name__}: {e}"
        report(f"[{i + 1}/{len(pending)}] {run.run_id}: {statuses[run.run_id]}")
    return statuses


def _run_ray(sweep: Sweep, pending: list[SweepRun],
             report: Callable[[str], None]) -> dict[str, str]:
    import ray

    ray.init(address=sweep.ray_address or None, ignore_reinit_error=True,
             include_dashboard=False, log_to_driver=False)
    statuses: dict[str, str] = {}
    try:
        check_ray_fits(sweep, [node["Resources"] for node in ray.nodes() if node["Alive"]])
        task = ray.remote(num_cpus=sweep.num_cpus, num_gpus=sweep.num_gpus,
                          max_retries=0)(_run_one)
        refs = {task.remote(sweep.scenario, list(run.overrides), run.run_dir): run.run_id
                for run in pending}
        remaining = list(refs)
        while remaining:
            done, remaining = ray.wait(remaining, num_returns=1)
            run_id = refs[done[0]]
            try:
                statuses[run_id] = ray.get(done[0])
            except ray.exceptions.RayTaskError as e:
                statuses[run_id] = BUSY if isinstance(e.cause, RunBusy) else \
                    f"failed: {e.cause!r}"
            report(f"[{len(statuses)}/{len(pending)}] {run_id}: {statuses[run_id]}")
    finally:
        if not sweep.ray_address:
            ray.shutdown()  # the local instance this call started
    return statuses


def check_ray_fits(sweep: Sweep, nodes: Sequence[dict[str, float]]) -> None:
    """InputError when no Ray node (``nodes``: each one's resources) has the CPUs and GPUs
    that the sweep's ``[ray]`` asks per run: Ray would wait for them for ever."""
    for key, asked, resource in (("num_cpus", sweep.num_cpus, "CPU"),
                                 ("num_gpus", sweep.num_gpus, "GPU")):
        most = max((node.get(resource, 0.0) for node in nodes), default=0.0)
        if asked > most:
            raise InputError(f"{sweep.source or sweep.name}: 'ray.{key}' = {asked:g} but no "
                             f"node of the Ray cluster has more than {most:g} {resource}s: no "
                             f"run could ever start (no run was started)")


def collect(sweep: Sweep, tables: Sequence[str] = COLLECTED_TABLES) -> dict[str, int]:
    """Concatenate each complete run's tables into ``results/<sweep>/<table>.parquet``,
    with the run id and the sweep's axes as extra columns; returns rows per table. Each
    file it writes is marked as its own, and one that is there without the mark (a file
    simfl did not write), or a figure :func:`simfl.plots.study.plot_sweep` would replace,
    stops it before it writes anything."""
    rows = {}
    done = [r for r in sweep.runs if is_complete(r.run_dir)]
    if not done:
        raise InputError(f"{sweep.out_dir}: no run of sweep '{sweep.name}' is complete yet "
                         f"(python -m simfl sweep --status shows where they stand)")
    targets = [sweep.out_dir / f"{table}.parquet" for table in tables]
    for path in [*targets, *(sweep.out_dir / PLOTS_DIR / name for name in SWEEP_FIGURES)]:
        if (path.exists() or path.is_symlink()) and not written_by_collect(path):
            raise InputError(f"{path}: exists and was not written by simfl collect, which "
                             f"would replace it: move it away, then collect again (nothing "
                             f"was written)")
    for table in tables:
        frames = [pl.read_parquet(r.run_dir / f"{table}.parquet").with_columns(
                      pl.lit(r.run_id).alias("run_id"),
                      *(pl.lit(v).alias(k) for k, v in r.params.items()))
                  for r in done]
        # a run from before a column was added lacks it: null there
        frame = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
        marked = frame.to_arrow().replace_schema_metadata(COLLECT_MARK)
        write_atomically(sweep.out_dir / f"{table}.parquet", partial(pq.write_table, marked))
        rows[table] = frame.height
    return rows


def written_by_collect(path: Path) -> bool:
    """Whether ``path`` is a file that collect wrote: a Parquet table or (``.png``) a
    figure with :data:`COLLECT_MARK`."""
    from PIL import Image

    if path.is_symlink() or not path.is_file():
        return False
    try:
        if path.suffix == ".png":
            with Image.open(path) as image:
                found = {k: image.info.get(k) for k in COLLECT_MARK}
        else:
            metadata = pq.read_schema(path).metadata or {}
            found = {k: metadata.get(k.encode(), b"").decode() for k in COLLECT_MARK}
    except (OSError, ValueError, pa.ArrowException, Image.DecompressionBombError):
        return False  # not a file simfl can read
    return found == COLLECT_MARK
