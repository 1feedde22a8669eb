"""Build a run from its scenario, before it writes anything: the data on the training
device, the model and its initial parameters, the learner (local work, aggregator,
estimator panel), the population; and the checks that refuse a scenario before any
output (a trace that cannot serve the devices, settings the data can never run)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from simfl.aggregate import make_aggregator
from simfl.data import FederatedData, load_data
from simfl.data.covariates import client_covariate
from simfl.errors import InputError
from simfl.plugins import MODELS, filters_by_threshold
from simfl.population import known_rates
from simfl.population.build import Population, build_population
from simfl.population.compute import TRAIN_TO_FORWARD
from simfl.quantile.panel import EstimatorPanel
from simfl.rng import Streams
from simfl.runs.memory import check_memory, key_sizes, reset_peak
from simfl.runs.replay import JournaledLearner
from simfl.scenario import PopulationConfig, Scenario, plugins_of
from simfl.train import build_model, initial_params
from simfl.train.local import LocalWork
from simfl.train.models import check_fits, forward_macs

MAX_PLAN_BYTES = 4 * 2**30  # a cohort's minibatch indices and mask (simfl.train.batched)


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
class Built:
    """What a run is built from, before it writes anything."""

    streams: Streams
    device: torch.device
    learner: JournaledLearner
    population: Population
    initial: torch.Tensor  # the global model's parameters before the first round


def build_run(scenario: Scenario) -> Built:
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
    return Built(streams, device, learner, population, params.clone())


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


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError("'train.device' = 'cuda' but no CUDA device is available")
    return torch.device(name)


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
