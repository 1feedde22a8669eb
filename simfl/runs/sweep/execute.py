"""Running a sweep: its unfinished runs as Ray tasks or one after another in this
process, each resumed from its checkpoint when it has one of the same scenario. Imports
the run machinery (:mod:`simfl.runs.run`, torch); the rest of :mod:`simfl.runs.sweep` does not."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from simfl.errors import InputError, RunBusy, RunFailed, RunInterrupted
from simfl.rundir import MANIFEST, checkpoint_progress, prepare_run_dir, run_locked
from simfl.runs.run import resume_run, run_scenario
from simfl.runs.sweep.spec import Sweep, SweepRun, check_ray_fits
from simfl.runs.sweep.status import (
    is_complete,
    kept_copy,
    other_scenarios,
    restarts,
    scenario_changes,
)
from simfl.scenario import Scenario, load_scenario

BUSY = "skipped: another process is working on it"  # the status of a run left to it


def run_shard(sweep: Sweep, shard: tuple[int, int] = (0, 1), archived: Path | None = None,
              backend: str = "auto", report: Callable[[str], None] = print,
              progress: bool = False) -> dict[str, str]:
    """:func:`run_sweep` of the shard ``(i, n)``'s runs: every n-th run from the i-th,
    fixed by the sweep file so that shards never share a run, less those complete in
    ``archived/<sweep name>/`` (copies kept by bench/archive_runs.py)."""
    i, n = shard
    share = sweep.runs[i::n]
    runs = tuple(run for run in share if kept_copy(sweep, run, archived) is None)
    if archived is not None and len(runs) < len(share):
        report(f"{sweep.name}: {len(share) - len(runs)} runs already archived in "
               f"{archived / sweep.name}")
    return run_sweep(replace(sweep, runs=runs), backend, report=report, progress=progress)


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
            import ray  # noqa: F401  (an optional extra: whether it is installed)
            backend = "ray"
        except ImportError:
            backend = "sequential"
    if backend == "ray":
        return _run_ray(sweep, pending, report)
    return {run.run_id: _run_in_turn(run, sweep.scenario, f"[{i + 1}/{len(pending)}]",
                                     report, progress)
            for i, run in enumerate(pending)}


def _run_in_turn(run: SweepRun, scenario: Path, counter: str, report: Callable[[str], None],
                 progress: bool) -> str:
    """The sequential backend's run of ``run``, said with its ``counter``: its status."""
    if is_complete(run.run_dir):  # another process running this sweep finished it
        status = "complete (by another process)"
    elif run_locked(run.run_dir):
        status = BUSY
    else:
        if progress:
            report(f"{counter} {run.run_id}: running")
        try:
            status = _run_one(scenario, run.overrides, run.run_dir, progress)
        except RunInterrupted:  # a stop signal stops the sweep
            raise
        except RunFailed as e:  # the run's manifest says why; the sweep goes on
            status = f"failed: {e}"
        except RunBusy:  # another process took the run since run_locked looked
            status = BUSY
        except InputError as e:  # another process may have finished it since
            status = ("complete (by another process)" if is_complete(run.run_dir)
                      else f"failed: InputError: {e}")
        except Exception as e:  # a crash is one failed run, as a Ray task's is
            status = f"failed: {type(e).__name__}: {e}"
    report(f"{counter} {run.run_id}: {status}")
    return status


def _run_one(scenario: Path, overrides: Sequence[str], run_dir: Path,
             progress: bool = False) -> str:
    """One run, resumed if it was interrupted with the same scenario; its torch threads are
    its ``train.threads`` (1 unless set), whichever the backend, so both backends write
    the same files. ``progress`` shows the run's round bar (one run at a time only)."""
    resolved = load_scenario(scenario, overrides)
    if _resumes(run_dir, resolved):
        manifest = resume_run(run_dir, progress)  # an interrupted run goes on
    else:  # run_sweep said so first when this replaces a checkpoint of another scenario
        manifest = run_scenario(resolved, run_dir, overwrite=True, progress=progress)
    return str(manifest["status"])


def _resumes(run_dir: Path, scenario: Scenario) -> bool:
    """Whether the sweep resumes the run in ``run_dir`` (it has a checkpoint of
    ``scenario``) rather than start it from round 0, replacing the folder."""
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


def _run_ray(sweep: Sweep, pending: list[SweepRun],
             report: Callable[[str], None]) -> dict[str, str]:
    """The pending runs as Ray tasks. A local instance's CPUs are this machine's, so
    ``[ray] num_cpus`` beyond them is refused before Ray starts; Ray's own errors (it
    cannot start or reach its cluster, a worker dies) are one line each, not its
    traceback."""
    import ray  # an optional extra, installed when this backend was chosen

    if not sweep.ray_address:
        # the one node a local instance has: this machine's CPUs (its GPUs Ray counts)
        check_ray_fits(sweep, [{"CPU": float(os.cpu_count() or 1), "GPU": math.inf}])
    try:
        ray.init(address=sweep.ray_address or None, ignore_reinit_error=True,
                 include_dashboard=False, log_to_driver=False)
    except Exception as e:  # Ray's own: a node that timed out starting, no cluster there
        where = f"reach the Ray cluster at {sweep.ray_address!r}" if sweep.ray_address \
            else "start a local Ray instance"
        raise InputError(f"sweep '{sweep.name}': could not {where} ({_one_line(e)}) (no "
                         f"run was started; --backend sequential runs them in this "
                         f"process)") from None
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
            except ray.exceptions.RayError as e:  # its worker died (out of memory, killed)
                statuses[run_id] = f"failed: {_one_line(e)}"
            report(f"[{len(statuses)}/{len(pending)}] {run_id}: {statuses[run_id]}")
    finally:
        if not sweep.ray_address:
            ray.shutdown()  # the local instance this call started
    return statuses


def _one_line(e: BaseException) -> str:
    """An error of Ray's on one line: its type and its message's first line."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}".strip()


def finished(statuses: dict[str, str]) -> bool:
    """Whether every run a launch saw is complete, or left to another process."""
    return all(s.startswith("complete") or s == BUSY for s in statuses.values())
