"""Wire a Scenario into a run: with the modules it calls, the one place that sees both
the simulator and the numerics.

:func:`run_scenario` starts a run, :func:`resume_run` continues one from its last
checkpoint; both build it (:mod:`simfl.runs.build`: data, model, learner, population),
simulate its rounds (:mod:`simfl.runs.loop`) and keep its manifest's status: running,
then complete, failed or interrupted with the reason (:mod:`simfl.runs.manifest`
writes what a run starts with and checks a resume against it)."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import torch

from simfl.errors import InputError, RunFailed, RunInterrupted
from simfl.plugins import check_origins, filters_by_threshold
from simfl.population.compute import describe_origin
from simfl.records import Recorder
from simfl.rundir import (
    MANIFEST,
    clear_run_dir,
    overwrite_manifest_in_place,
    prepare_run_dir,
    run_lock,
    write_manifest,
)
from simfl.runs.build import (
    Built,
    build_run,
    scenario_population,
    torch_threads,
    write_availability_trace,
)
from simfl.runs.checkpoint import (
    Checkpoint,
    Checkpointer,
    checkpoint_rounds,
    load_checkpoint,
    signals_deferred,
)
from simfl.runs.loop import MAX_AVAILABILITY_HOURS, record_availability, record_devices, simulate
from simfl.runs.manifest import (
    check_built,
    check_plugins_unchanged,
    machine,
    new_manifest,
    resumable,
    run_inputs,
    scenario_sha256,
)
from simfl.runs.memory import peak_bytes
from simfl.scenario import (
    EstimatorConfig,
    Scenario,
    from_manifest,
    plugins_of,
    unscaled_rule_note,
    unused_server_keys,
)
from simfl.sim.health import Health, RunStalled

# the names callers import from here (the API, the CLI), some of them defined above
__all__ = ["MAX_AVAILABILITY_HOURS", "resume_run", "run_scenario", "scenario_population",
           "scenario_sha256", "write_availability_trace"]


def run_scenario(scenario: Scenario, run_dir: Path, overwrite: bool = False,
                 progress: bool = True,
                 report: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Run ``scenario`` and write its tables and manifest into ``run_dir``; return the
    manifest. Bad input (scenario against data, output directory) stops before any output.
    ``report`` gets lines on the population (data, device speeds) before the run starts,
    and one more when the scenario configures a threshold estimator its aggregator does
    not use."""
    prepare_run_dir(run_dir, overwrite)
    with torch_threads(scenario.train.threads):
        built = build_run(scenario)
        report(built.learner.data.describe())
        report(describe_origin(built.population.devices.speed_origin))
        trace = built.population.trace
        if trace is not None and (warning := trace.warning()):
            report(warning)
        if unused := unused_server_keys(scenario):
            report(f"note: server.mode = {scenario.server.mode!r} does not use "
                   f"{', '.join(unused)} (the other mode's keys): ignored")
        if note := unscaled_rule_note(scenario):
            report(note)
        if (not filters_by_threshold(scenario.aggregator.name)
                and scenario.estimator != EstimatorConfig()):
            report(f"note: aggregator '{scenario.aggregator.name}' sets no threshold, so "
                   "[estimator] is not used and bias.parquet stays empty")
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"{run_dir}: cannot create the run directory "
                             f"({e.strerror})") from None
        with run_lock(run_dir):
            prepare_run_dir(run_dir, overwrite)  # again, now that no other process can start
            clear_run_dir(run_dir)
            return _execute(scenario, built, run_dir, new_manifest(scenario, built), None,
                            progress)


def resume_run(run_dir: Path, progress: bool = True,
               report: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Continue the run in ``run_dir`` from its last checkpoint (from the start if it has
    none); it ends with the files an uninterrupted run writes. Returns the manifest.

    The manifest is read again under the run's lock and checked again: another resume may
    have finished the run while this one built (a finished run is never opened again: it
    stays as it was, and this one is refused), or stopped it with a longer history (the
    manifest written back is the one read under the lock)."""
    manifest = resumable(run_dir)
    for line in check_origins(manifest.get("plugins") or {}, run_dir):  # before importing
        report(line)
    scenario = from_manifest(manifest, str(run_dir / MANIFEST))
    check_plugins_unchanged(run_dir, manifest, scenario)
    with torch_threads(scenario.train.threads):
        built = build_run(scenario)
        inputs = run_inputs(scenario, built)
        check_built(run_dir, manifest, built, inputs)
        with run_lock(run_dir):
            manifest = resumable(run_dir, locked=True, built_from=manifest["scenario"])
            check_plugins_unchanged(run_dir, manifest, scenario)
            check_built(run_dir, manifest, built, inputs)
            checkpoint = load_checkpoint(run_dir, built.device)
            for ended in ("reason", "health"):  # the last session's; a running run has none
                manifest.pop(ended, None)
            manifest.setdefault("resumes", []).append(  # a session may run on another machine
                {"from_round": checkpoint.rounds_done if checkpoint else 0,
                 "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **machine(built.device)})
            return _execute(scenario, built, run_dir, manifest, checkpoint, progress)


def _execute(scenario: Scenario, built: Built, run_dir: Path, manifest: dict[str, Any],
             checkpoint: Checkpoint | None, progress: bool) -> dict[str, Any]:
    """Simulate (replaying up to ``checkpoint`` if given), write the tables and keep the
    manifest's status: running, then complete, failed or interrupted with the reason."""
    # train.backend = "auto": its measured choices, written as made; a resume reuses them
    backends = built.learner.work.backends
    backends.restore(manifest.get("train_backend"), str(run_dir / MANIFEST))

    def record_backends() -> None:
        manifest["train_backend"] = backends.record()
        write_manifest(run_dir, manifest)

    backends.on_choice = record_backends
    recorder = Recorder(run_dir, committed=checkpoint.tables if checkpoint else {})
    started, before = time.perf_counter(), checkpoint.wall_s if checkpoint else 0.0

    def wall_s() -> float:
        """Seconds worked on the run, over all its sessions: those up to the checkpoint
        it resumed from, then this one's (work lost after a kill is not counted twice)."""
        return round(before + time.perf_counter() - started, 3)

    checkpoints = Checkpointer(
        run_dir, checkpoint_rounds(scenario.run.checkpoint_every, scenario.server.num_rounds),
        built.learner, recorder, wall_s, checkpoint, manifest["scenario"])
    manifest["status"] = "running"
    write_manifest(run_dir, manifest)
    health = Health(scenario.run.idle_window, scenario.run.idle_share)
    # From the end of the rounds on, a first stop signal waits for the block's end: the parts
    # and checkpoint stay until the manifest says complete, and once it does the signal has
    # nothing left to stop (the run ends as complete; the CLI exits 0).
    with signals_deferred():
        try:
            with checkpoints.on_signals():
                summary, end_s = simulate(scenario, built, recorder, progress, checkpoints,
                                          health)
                health.check_end()
                _check_model_moved(scenario, built, health)
            record_availability(built.population, recorder, run_dir, scenario, end_s)
            record_devices(built, scenario, recorder)
            recorder.merge()
            manifest.update(status="complete", wall_s=wall_s(), summary=summary,
                            health=health.summary(), peak_rss_mb=_peak_rss_mb(manifest))
            write_manifest(run_dir, manifest)
        except BaseException as e:
            _record_end(run_dir, manifest, recorder, e, wall_s(), health)
            failure = _as_failure(e)
            if failure is e:
                raise
            raise failure from e
        checkpoints.discard()
        recorder.remove_parts()
    return manifest


def _check_model_moved(scenario: Scenario, built: Built, health: Health) -> None:
    """RunStalled when the run aggregated updates but its model ended exactly as it
    started: every combination weighed the updates to nothing (q-FFL's F_k^q overflowing,
    say), and the run learned nothing while each round looked healthy."""
    if torch.equal(built.learner.model.params, built.initial):
        rule = plugins_of(scenario)["aggregator.name"]
        keys = [f"aggregator.{key}" for key in rule.keys]
        raise RunStalled(f"the model never changed: its {health.rounds} rounds aggregated "
                         f"{health.statuses['aggregated']} updates that left every parameter "
                         f"as it started (the rule's weights were zero or underflowed: "
                         f"{', '.join([*keys, 'train.lr'])})")


def _as_failure(e: BaseException) -> BaseException:
    """What a run's work raised, or a RunFailed for an output it could not write (a full
    disk, a file size limit, a folder gone read-only): the run failed, and says why."""
    if isinstance(e, OSError):
        where = e.filename or "the run's files"
        return RunFailed(f"cannot write {where}: {e.strerror or e} (free space or fix the "
                         "folder, then resume the run)")
    return e


def _record_end(run_dir: Path, manifest: dict[str, Any], recorder: Recorder, e: BaseException,
                wall_s: float, health: Health) -> None:
    """Mark the manifest interrupted or failed with the reason, keeping the rows so far
    readable in parts/ (the last checkpoint stays). On a full disk the unflushed rows are
    lost (they are after the checkpoint); a manifest that cannot be written stays as it was."""
    with suppress(OSError):
        recorder.flush()
    failure = _as_failure(e)
    interrupted = isinstance(e, RunInterrupted | KeyboardInterrupt)
    manifest.update(status="interrupted" if interrupted else "failed",
                    reason=f"{type(failure).__name__}: {failure}", wall_s=wall_s,
                    health=health.summary(), peak_rss_mb=_peak_rss_mb(manifest))
    try:
        write_manifest(run_dir, manifest)
    except OSError:  # no room even for the manifest's temporary copy
        with suppress(OSError):
            overwrite_manifest_in_place(run_dir, manifest)


def _peak_rss_mb(manifest: dict[str, Any]) -> float:
    """The run's peak resident memory in MiB, the largest over its sessions (a resumed
    run's manifest holds the earlier sessions')."""
    return round(max(peak_bytes() / 2**20, manifest.get("peak_rss_mb", 0.0)), 1)
