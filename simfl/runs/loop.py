"""A run's simulated rounds, its progress bar, and the tables it writes as it ends.

:func:`simulate` runs the servers (sync rounds or async updates) on one SimPy clock,
evaluating the global model every ``eval.every`` rounds and after the last; then
:func:`record_availability` and :func:`record_devices` write availability.parquet
and devices.parquet (docs/design.md §8)."""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import simpy
from tqdm import tqdm

from simfl.data.packed import Clients
from simfl.metrics import error_summary
from simfl.population.availability import habit_columns
from simfl.population.build import Population
from simfl.population.habits import Habits
from simfl.population.table import DeviceTable
from simfl.population.trace_map import MappedTrace
from simfl.records import AvailabilityRows, DeviceRows, EvalRows, Recorder
from simfl.rundir import INTERVALS_FILE
from simfl.runs.build import Built
from simfl.runs.checkpoint import Checkpointer
from simfl.scenario import Scenario
from simfl.sim.async_server import async_server
from simfl.sim.health import Health
from simfl.sim.links import LinkSharing
from simfl.sim.server import sync_server
from simfl.sim.tasks import Fleet, Wiring

MAX_AVAILABILITY_HOURS = 1_000_000  # availability.parquet: at most this many rows a region
ROUND_GC_THRESHOLD = 20_000  # container allocations (net of frees) between young collections


def simulate(scenario: Scenario, built: Built, recorder: Recorder, progress: bool,
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
    with frozen_heap():
        env.run()
    bar.close()
    return summary, env.now


@contextmanager
def frozen_heap() -> Iterator[None]:
    """While the rounds run, the objects alive when they start (the modules torch, polars
    and the rest loaded: about 250,000; the population, the data, the model) are out of
    the cyclic garbage collector's reach: ``gc.freeze()`` after one collection, undone
    after (so a process that runs several runs collects each one's leftovers as before).
    Python's full collections walk every object they track: at 1,000 clients a round
    they took 0.039 s a round on average, against 0.005 s frozen (bench/engine_cost.py,
    docs/runs/speed/engine_cost.md). The rounds' own objects (events, transfers,
    messages) are collected as before, but less often: they die young, freed by their
    reference counts, so the youngest generation's threshold is raised to
    ``ROUND_GC_THRESHOLD`` allocations net of frees (Python's default: 700), after
    which the collector walks the survivors as it would have; restored after. At 1,000
    clients the collector's time fell from 0.008-0.010 s a round to 0.001
    (docs/runs/speed/engine_cost.md, "Second series")."""
    gc.collect()
    gc.freeze()
    threshold = gc.get_threshold()
    gc.set_threshold(max(threshold[0], ROUND_GC_THRESHOLD), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def record_availability(population: Population, recorder: Recorder, run_dir: Path,
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


def record_devices(built: Built, scenario: Scenario, recorder: Recorder) -> None:
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
