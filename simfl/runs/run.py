"""Wire a Scenario into a run: the one module that sees both the simulator and the numerics."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import platform
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import simpy
import torch
from tqdm import tqdm

from simfl.aggregate import make_aggregator
from simfl.data import FederatedData, load_data
from simfl.data.covariates import client_covariate
from simfl.data.packed import Clients
from simfl.errors import InputError, RunFailed, RunInterrupted
from simfl.metrics import error_summary
from simfl.plugins import MODELS, check_origins, filters_by_threshold, source_sha256
from simfl.population import known_rates
from simfl.population.availability import habit_columns
from simfl.population.build import Population, build_population
from simfl.population.compute import TRAIN_TO_FORWARD, describe_origin
from simfl.population.habits import Habits
from simfl.population.table import DeviceTable
from simfl.population.trace_map import MappedTrace
from simfl.quantile.panel import EstimatorPanel
from simfl.records import (
    AvailabilityRows,
    DeviceRows,
    EvalRows,
    Recorder,
)
from simfl.rng import Streams
from simfl.rundir import (
    INTERVALS_FILE,
    MANIFEST,
    check_output_path,
    check_simfl_run,
    clear_run_dir,
    drop_complete_lock,
    json_default,
    overwrite_manifest_in_place,
    prepare_run_dir,
    read_manifest,
    run_lock,
    write_manifest,
)
from simfl.runs.checkpoint import (
    Checkpoint,
    Checkpointer,
    checkpoint_rounds,
    checkpoint_scenario,
    load_checkpoint,
    signals_deferred,
)
from simfl.runs.memory import check_memory, key_sizes, peak_bytes, reset_peak
from simfl.runs.replay import JournaledLearner
from simfl.scenario import (
    EstimatorConfig,
    PopulationConfig,
    Scenario,
    flatten,
    from_manifest,
    plugins_of,
    to_dict,
    unused_server_keys,
)
from simfl.sim.async_server import async_server
from simfl.sim.health import Health, RunStalled
from simfl.sim.links import LinkSharing
from simfl.sim.server import sync_server
from simfl.sim.tasks import Fleet, Wiring
from simfl.train import build_model, initial_params
from simfl.train.local import LocalWork
from simfl.train.models import check_fits, forward_macs

MAX_PLAN_BYTES = 4 * 2**30  # a cohort's minibatch indices and mask (simfl.train.batched)
MAX_AVAILABILITY_HOURS = 1_000_000  # availability.parquet: at most this many rows a region
PACKAGES = ("simfl", "torch", "numpy", "simpy", "polars", "pyarrow", "networkx", "seaborn")


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
        built = _build(scenario)
        report(built.learner.data.describe())
        report(describe_origin(built.population.devices.speed_origin))
        trace = built.population.trace
        if trace is not None and (warning := trace.warning()):
            report(warning)
        if unused := unused_server_keys(scenario):
            report(f"note: server.mode = {scenario.server.mode!r} does not use "
                   f"{', '.join(unused)} (the other mode's keys): ignored")
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
            return _execute(scenario, built, run_dir, _manifest(scenario, built), None,
                            progress)


def resume_run(run_dir: Path, progress: bool = True,
               report: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Continue the run in ``run_dir`` from its last checkpoint (from the start if it has
    none); it ends with the files an uninterrupted run writes. Returns the manifest.

    The manifest is read again under the run's lock and checked again: another resume may
    have finished the run while this one built (a finished run is never opened again: it
    stays as it was, and this one is refused), or stopped it with a longer history (the
    manifest written back is the one read under the lock)."""
    manifest = _resumable(run_dir)
    for line in check_origins(manifest.get("plugins") or {}, run_dir):  # before importing
        report(line)
    scenario = from_manifest(manifest, str(run_dir / MANIFEST))
    _check_plugins_unchanged(run_dir, manifest, scenario)
    with torch_threads(scenario.train.threads):
        built = _build(scenario)
        inputs = _inputs(scenario, built)
        _check_built(run_dir, manifest, built, inputs)
        with run_lock(run_dir):
            manifest = _resumable(run_dir, locked=True, built_from=manifest["scenario"])
            _check_plugins_unchanged(run_dir, manifest, scenario)
            _check_built(run_dir, manifest, built, inputs)
            checkpoint = load_checkpoint(run_dir, built.device)
            for ended in ("reason", "health"):  # the last session's; a running run has none
                manifest.pop(ended, None)
            manifest.setdefault("resumes", []).append(  # a session may run on another machine
                {"from_round": checkpoint.rounds_done if checkpoint else 0,
                 "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **_machine(built.device)})
            return _execute(scenario, built, run_dir, manifest, checkpoint, progress)


def _resumable(run_dir: Path, locked: bool = False,
               built_from: dict[str, Any] | None = None) -> dict[str, Any]:
    """``run_dir``'s manifest, checked for a resume: InputError if the run is complete,
    is not a simfl run holding only what simfl wrote, or its scenario was edited. Under
    the lock (``locked``), also if it is not the run of the scenario the resume built
    (``built_from``: a ``run --overwrite`` replaced it meanwhile); the lock of a run found
    complete goes again (a complete run has no checkpoint folder)."""
    manifest = read_manifest(run_dir)
    if manifest.get("status") == "complete":
        if locked:
            drop_complete_lock(run_dir)
        raise InputError(f"{run_dir}: the run is already complete")
    if not locked:  # its probe file once is enough
        check_output_path(run_dir)
    # resuming rewrites the run's tables around what else is there
    check_simfl_run(run_dir, manifest, ("; nothing to resume", "; move it out before resuming"))
    _check_scenario_unedited(run_dir, manifest)
    if built_from is not None and manifest["scenario"] != built_from:
        raise InputError(f"{run_dir}: another run replaced this one while the resume "
                         "prepared (its manifest holds another scenario now); resume again")
    return manifest


def _check_built(run_dir: Path, manifest: dict[str, Any], built: _Built,
                 inputs: dict[str, str | None]) -> None:
    """InputError when what the resume built differs from what the run started with:
    device speeds from elsewhere, other data or another trace."""
    _check_speed_origin(run_dir, manifest, built.population)
    _check_inputs(run_dir, manifest, inputs)


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Within the block torch uses ``n`` intra-op threads (``train.threads``; 0 leaves
    torch's default, one per core). Float sums depend on the thread count, so a run is
    reproducible at a given ``n``; one thread also keeps small ops fast beside other
    busy processes (docs/usage.md, "Threads")."""
    if n == 0:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class _Built:
    """What a run is built from, before it writes anything."""

    streams: Streams
    device: torch.device
    learner: JournaledLearner
    population: Population
    initial: torch.Tensor  # the global model's parameters before the first round


def _build(scenario: Scenario) -> _Built:
    """Everything a run needs, from the scenario; InputError before any output if the
    scenario cannot run on its data (see :func:`check_feasible`) or in the memory
    available (:func:`simfl.runs.memory.check_memory`, before anything is allocated)."""
    check_memory(scenario)
    check_trace_before_data(scenario)
    reset_peak()  # the manifest's peak_rss_mb is this run's, from its data on
    streams = Streams(scenario.seed)
    device = _device(scenario.train.device)
    data = load_data(scenario.data, streams).to(device)
    check_feasible(scenario, data)
    dtype = getattr(torch, scenario.train.dtype)
    model = build_model(scenario.model.name, data.input_shape, data.num_classes,
                        scenario.model.bias, scenario.model.params).to(device)
    check_fits(model, _one_sample(data).to(device), data.num_classes, scenario.model.name)
    params = initial_params(model, streams.seed("init"), dtype, scenario.model.init).to(device)
    work = LocalWork(model, data, scenario.train, scenario.model.l2, scenario.eval.batch_size,
                     streams, scenario.eval.class_major)
    population = _population(scenario, data, streams)
    panel = None
    if filters_by_threshold(scenario.aggregator.name):  # its threshold from the panel
        panel = EstimatorPanel(scenario.estimator, scenario.aggregator.theta,
                               data.train.num_clients, streams,
                               strata=population.devices.region_idx,
                               known_rates=known_rates(scenario.population.availability,
                                                       population.devices, population.habits,
                                                       population.trace))
    learner = JournaledLearner(work, params, make_aggregator(scenario.aggregator), panel,
                               scenario.estimator.bias_every)
    return _Built(streams, device, learner, population, params.clone())


def check_trace_before_data(scenario: Scenario) -> None:
    """InputError (one line) for an availability mode that cannot serve the training
    devices (its ``check_devices`` hook: a trace that cannot be mapped onto them,
    simfl.population.trace_map.check_trace_devices), before the data are loaded where
    the scenario's keys fix exactly how many there are (simfl.runs.memory.key_sizes:
    synthetic data with every client kept, ``data.min_samples_per_client`` <=
    ``data.synthetic.min_samples`` and no validation split). Elsewhere only loading the
    data tells, and the population's build refuses it then, before drawing anything."""
    availability = scenario.population.availability
    check = plugins_of(scenario)["population.availability.mode"].hook(
        "check_devices", "population.availability.mode")
    sizes = key_sizes(scenario)
    if check is not None and sizes is not None and sizes.exact:
        check(availability, sizes.train)


def check_feasible(scenario: Scenario, data: FederatedData) -> None:
    """InputError for a scenario that can never make progress on its population."""
    n, server = data.train.num_clients, scenario.server
    if server.mode == "sync" and server.min_online > n:
        raise InputError(f"'server.min_online' = {server.min_online} is more than the {n} "
                         f"training devices: no round could ever start")
    if server.mode == "async":
        for key in ("concurrency", "buffer_size"):
            if getattr(server, key) > n:
                raise InputError(f"'server.{key}' = {getattr(server, key)} is more than the {n} "
                                 f"training devices (a device runs one task per model version)")
    train, largest = scenario.train, int(data.train.num_samples.max(initial=1))
    batch = min(train.batch_size, largest)
    key = "concurrency" if server.concurrency > server.clients_per_round else "clients_per_round"
    cohort = min(getattr(server, key), n)  # a round trains at most every device
    plan_bytes = cohort * train.local_epochs * -(-largest // batch) * batch * 9
    if plan_bytes > MAX_PLAN_BYTES:
        raise InputError(f"'train.local_epochs' = {train.local_epochs} over a cohort of {cohort} "
                         f"('server.{key}') with batches of {batch} and {largest} samples on "
                         f"the largest device: a cohort's minibatch plan would take "
                         f"{plan_bytes / 2**30:.3g} GiB (limit {MAX_PLAN_BYTES / 2**30:.0f} GiB)")


def _execute(scenario: Scenario, built: _Built, run_dir: Path, manifest: dict[str, Any],
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
                summary, end_s = _simulate(scenario, built, recorder, progress, checkpoints,
                                           health)
                health.check_end()
                _check_model_moved(scenario, built, health)
            _record_availability(built.population, recorder, run_dir, scenario, end_s)
            _record_devices(built, scenario, recorder)
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


def _check_model_moved(scenario: Scenario, built: _Built, health: Health) -> None:
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


def _population(scenario: Scenario, data: FederatedData, streams: Streams) -> Population:
    """One device per training client (regions by the clients' covariate if configured),
    computing the scenario's model, and one per unseen test client, drawn alike from
    streams of their own (simfl.population.build.build_unseen)."""
    cfg = _counted_cost(scenario, data)
    return build_population(cfg, data.train.num_clients,
                            client_covariate(data.train, cfg.covariate, data.num_classes), streams,
                            scenario.model.name, data.test.num_clients,
                            client_covariate(data.test, cfg.covariate, data.num_classes))


def _one_sample(data: FederatedData) -> torch.Tensor:
    """(1, *input_shape): the first training device's first sample."""
    first = data.train.subset(np.zeros(1, dtype=np.int64))
    return first.x[:1]


def _counted_cost(scenario: Scenario, data: FederatedData) -> PopulationConfig:
    """The population's configuration, with the model's training cost per sample counted
    from its forward pass (3 × its multiply-accumulates, simfl.train.models.forward_macs)
    where neither ``population.compute.train_flops_per_sample`` nor the model's
    ``train_flops`` hook (simfl.plugins.MODELS, simfl.population.compute) gives it: the
    cnn's, or a plug-in's that declares none."""
    cfg = scenario.population
    model = MODELS.lookup(scenario.model.name, "model.name")
    if cfg.compute.train_flops_per_sample > 0 or model.has_hook("train_flops"):
        return cfg
    macs = forward_macs(scenario.model, data.input_shape, data.num_classes,
                        _one_sample(data).dtype)
    counted = dataclasses.replace(cfg.compute, train_flops_per_sample=TRAIN_TO_FORWARD * macs)
    return dataclasses.replace(cfg, compute=counted)


def scenario_population(scenario: Scenario) -> Population:
    """The population a run of ``scenario`` builds (its data loaded for the clients)."""
    check_memory(scenario)
    check_trace_before_data(scenario)
    streams = Streams(scenario.seed)
    return _population(scenario, load_data(scenario.data, streams), streams)


def write_availability_trace(scenario: Scenario, out: Path) -> int:
    """Write the scenario's availability (e.g. the diurnal model's draws) as a trace file
    that ``population.availability.mode = "trace"`` replays; returns the interval count."""
    population = scenario_population(scenario)
    population.availability.write_trace(out)
    return int(population.availability.t_on_s.size)


def _record_availability(population: Population, recorder: Recorder, run_dir: Path,
                         scenario: Scenario, end_s: float) -> None:
    """Online devices per region at the start of every simulated hour of the run, or of
    every k-th hour, the least k that keeps to MAX_AVAILABILITY_HOURS rows per region
    (a run whose clock went that far, centuries, has implausible times or rates)."""
    span_s = min(end_s, population.availability.horizon_s)
    step_h = max(1, math.ceil(span_s / 3600.0 / MAX_AVAILABILITY_HOURS))
    hours = np.arange(0.0, span_s + 1.0, 3600.0 * step_h)
    counts = population.availability.num_online_by_region(hours)  # (T, R)
    names = np.array(population.devices.region_names)
    recorder.write(AvailabilityRows(t_s=np.repeat(hours, len(names)),
                                    region=np.tile(names, len(hours)).tolist(),
                                    num_online=counts.ravel()))
    if scenario.population.availability.log_intervals:
        population.availability.write_trace(run_dir / INTERVALS_FILE)


def _peak_rss_mb(manifest: dict[str, Any]) -> float:
    """The run's peak resident memory in MiB, the largest over its sessions (a resumed
    run's manifest holds the earlier sessions')."""
    return round(max(peak_bytes() / 2**20, manifest.get("peak_rss_mb", 0.0)), 1)


def _record_devices(built: _Built, scenario: Scenario, recorder: Recorder) -> None:
    """devices.parquet: every device's region, habits, speed, links and data, the
    training devices' rows (split "train") then the unseen test devices' ("test", whose
    ``client_idx`` is null as in eval.parquet: eval joins on client_id and split)."""
    population, data = built.population, built.learner.data
    recorder.write(_device_rows(scenario, population.devices, population.habits,
                                population.covariate, data.train, "train", population.trace))
    if population.unseen is not None:
        unseen = population.unseen
        recorder.write(_device_rows(scenario, unseen.devices, unseen.habits,
                                    unseen.covariate, data.test, "test"))


def _device_rows(scenario: Scenario, devices: DeviceTable, habits: Habits | None,
                 covariate: np.ndarray | None, clients: Clients, split: str,
                 trace: MappedTrace | None = None) -> DeviceRows:
    """devices.parquet's rows of one split's devices, ``clients`` their data."""
    n = devices.num_devices
    habit = habit_columns(scenario.population.availability, n, habits, trace)
    covariate = covariate if covariate is not None else np.full(n, np.nan)
    client_idx = np.ma.masked_array(devices.client_idx, mask=split == "test")
    return DeviceRows(
        client_idx=client_idx, client_id=list(clients.client_ids), split=split,
        region=np.array(devices.region_names)[devices.region_idx].tolist(),
        utc_offset_h=devices.utc_offset_s / 3600.0,
        propensity=np.ma.masked_invalid(habit["propensity"]),
        logit_shift=habit["logit_shift"], phase_h=habit["phase_h"],
        session_mean_s=np.ma.masked_invalid(habit["session_mean_s"]),
        engaged_share=habit["engaged_share"],
        charge_start_h=np.ma.masked_invalid(habit["charge_start_h"]),
        speed_rel=devices.speed_rel, train_s_per_sample=devices.train_s_per_sample,
        down_bytes_per_s=devices.down_bytes_per_s, up_bytes_per_s=devices.up_bytes_per_s,
        latency_s=devices.latency_s, num_samples=clients.num_samples, covariate=covariate)


def _simulate(scenario: Scenario, built: _Built, recorder: Recorder, progress: bool,
              checkpoints: Checkpointer,
              health: Health) -> tuple[dict[str, dict[str, float]], float]:
    """Run the rounds; return the last evaluation's mean and p90 error per split, and
    the simulated time at the end."""
    learner, population, streams = built.learner, built.population, built.streams
    env = simpy.Environment()
    num_rounds = scenario.server.num_rounds
    bar = tqdm(total=num_rounds, desc=scenario.name, unit="round", disable=not progress,
               dynamic_ncols=True)
    summary: dict[str, dict[str, float]] = {}
    evaluated = 0  # the round of the latest evaluation, which the bar shows

    def evaluate(rounds_done: int, t_s: float) -> None:
        nonlocal evaluated
        evaluated = rounds_done
        for split, (clients, result) in learner.evaluate().items():
            index = np.ma.masked_array(np.arange(clients.num_clients), mask=split == "test")
            recorder.write(EvalRows(
                round=rounds_done, t_s=t_s, client_id=clients.client_ids, client_idx=index,
                split=split, num_samples=result.num_samples, loss=result.losses,
                error=result.errors))
            summary[split] = error_summary(result.errors)

    def after_round(rounds_done: int, t_s: float) -> None:
        if rounds_done % scenario.eval.every == 0 or rounds_done == num_rounds:
            evaluate(rounds_done, t_s)
        # the latest evaluation and its round: after the last round, the final evaluation
        test = summary["test"]
        bar.set_postfix(aggregated=health.last_aggregated, eval_round=evaluated,
                        test_mean=f"{test['mean']:.3f}", test_p90=f"{test['p90']:.3f}",
                        refresh=False)
        bar.update(1)

    evaluate(0, 0.0)
    devices = population.devices
    fleet = Fleet(population.availability, devices.train_s_per_sample,
                  devices.failure_rate_per_h, scenario.train.local_epochs)
    wiring = Wiring(env, fleet, LinkSharing(env, population.paths), recorder, streams, health)
    server = async_server if scenario.server.mode == "async" else sync_server
    env.process(server(wiring, scenario.server, learner, checkpoints.wrap(after_round)))
    env.run()
    bar.close()
    return summary, env.now


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError("'train.device' = 'cuda' but no CUDA device is available")
    return torch.device(name)


def _check_speed_origin(run_dir: Path, manifest: dict[str, Any], population: Population) -> None:
    """InputError when the device speeds would come from elsewhere than when the run
    started (``speed_source = "auto"`` follows $SIMFL_DATA_DIR/devices): the replay could
    not retrace the simulated clock. Manifests from before this record are not checked."""
    started, now = manifest.get("device_speeds"), population.devices.speed_origin
    if started is not None and started != now:
        raise InputError(
            f"{run_dir}: the run started with device speeds from {started} but here they "
            f"would come from {now}: resume where $SIMFL_DATA_DIR/devices is as it was "
            "(population.compute.speed_source = 'auto' uses it when present)")


def scenario_sha256(scenario: dict[str, Any]) -> str:
    """The sha256 of a scenario as plain data (as a manifest holds it): its JSON with
    sorted keys, so the manifest's copy read back hashes the same."""
    text = json.dumps(scenario, sort_keys=True, default=json_default)
    return hashlib.sha256(text.encode()).hexdigest()


def _check_scenario_unedited(run_dir: Path, manifest: dict[str, Any]) -> None:
    """InputError when the manifest's scenario is not the one the run started with (its
    sha256, recorded at the start, differs): the rounds after the checkpoint would run
    another scenario than those before, under a manifest that names only one. Names the
    keys that differ from the last checkpoint's copy when there is one. Manifests from
    before this record are not checked."""
    recorded = manifest.get("scenario_sha256")
    if recorded is None or recorded == scenario_sha256(manifest["scenario"]):
        return
    started = checkpoint_scenario(run_dir)
    what = "its sha256 differs from the one recorded when the run started"
    if started is not None:  # compared as JSON reads it back (tuples as lists)
        started = json.loads(json.dumps(started, default=json_default))
        now, then = dict(flatten(manifest["scenario"])), dict(flatten(started))
        changed = sorted(set(now) | set(then), key=str)
        what = "; ".join(f"{key} = {now.get(key)!r}, the run started with {then.get(key)!r}"
                         for key in changed if now.get(key) != then.get(key)) or what
    raise InputError(f"{run_dir / MANIFEST}: its scenario was edited after the run "
                     f"started ({what}): a run resumes only with the scenario it started "
                     "with; restore it, or start a new run with the new values")


def _check_plugins_unchanged(run_dir: Path, manifest: dict[str, Any],
                             scenario: Scenario) -> None:
    """InputError naming the first user plug-in whose module is not the one the run
    started with (the sha256 of its file, recorded at the start in ``plugin_sha256``,
    differs): the rounds after the checkpoint would run other code than those before.
    Only the module's own file counts, not what it imports. Manifests from before this
    record are not checked (the resume goes on), nor a plug-in whose module had no file."""
    recorded = manifest.get("plugin_sha256") or {}
    for key, plugin in plugins_of(scenario, str(run_dir / MANIFEST)).items():
        then = recorded.get(key)
        if plugin.builtin or then is None:
            continue
        now = source_sha256(plugin.path)
        if now != then:
            where = f" ({plugin.path})" if plugin.path != plugin.name else ""
            raise InputError(f"{run_dir}: plug-in '{key}' = {plugin.name!r}{where} changed "
                             f"since the run started (sha256 of its module's file "
                             f"{then[:12]} then, {str(now)[:12]} now): resume with the code "
                             "it started with, or start a new run")


def _inputs(scenario: Scenario, built: _Built) -> dict[str, str | None]:
    """What the run reads besides its scenario: the data's fingerprint (device ids,
    sample counts, labels) and the availability trace's sha256 (None: no trace)."""
    replayed = built.population.trace  # the availability trace the run replays, if any
    trace = None
    if replayed is not None:
        trace = hashlib.sha256(Path(replayed.path).read_bytes()).hexdigest()
    return {"data": built.learner.data.fingerprint(), "trace": trace}


def _check_inputs(run_dir: Path, manifest: dict[str, Any], now: dict[str, str | None]) -> None:
    """InputError when the data or the trace differ from those the run started with:
    its rounds after the checkpoint would mix two populations. Manifests from before
    this record are not checked."""
    started = manifest.get("inputs") or {}
    for key, where in (("data", "its data (data.path, $SIMFL_DATA_DIR)"),
                       ("trace", "its availability trace (population.availability.trace_path)")):
        if key in started and started[key] != now[key]:
            raise InputError(f"{run_dir}: {where} changed since the run started (sha256 "
                             f"{str(started[key])[:12]} then, {str(now[key])[:12]} now): "
                             "resume with the inputs it started with")


def _manifest(scenario: Scenario, built: _Built) -> dict[str, Any]:
    user_plugins = {key: plugin for key, plugin in plugins_of(scenario).items()
                    if not plugin.builtin}
    versions: dict[str, str | None] = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "status": "running",
        "scenario": to_dict(scenario),
        "scenario_sha256": scenario_sha256(to_dict(scenario)),
        "seed": scenario.seed,
        "versions": {"python": platform.python_version(), **versions},
        "git_commit": _git_commit(),
        **_machine(built.device),
        "device_speeds": built.population.devices.speed_origin,
        "inputs": _inputs(scenario, built),
        # each plug-in's import path and the version of the package providing it
        "plugins": {key: plugin.record() for key, plugin in user_plugins.items()},
        # the sha256 of each one's module file: resume refuses other code
        "plugin_sha256": {key: source_sha256(plugin.path)
                          for key, plugin in user_plugins.items()},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _machine(device: torch.device) -> dict[str, Any]:
    """Where a session of the run trains: the device's name and the host's CPUs/threads."""
    return {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
            "host": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads()}}


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


