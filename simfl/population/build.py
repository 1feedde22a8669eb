"""The population of a run, built in one place: devices, their availability and network
paths (run.py for a Scenario's training clients; the DRFL engine for its clients)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simfl.population.availability import Availability, build_availability
from simfl.population.devices import build_devices, default_data_dir
from simfl.population.network import NetworkPaths, build_topology, network_paths
from simfl.population.table import DeviceTable
from simfl.rng import Streams
from simfl.scenario import PopulationConfig


@dataclass(frozen=True)
class Population:
    devices: DeviceTable
    availability: Availability
    paths: NetworkPaths


def build_population(cfg: PopulationConfig, num_devices: int, covariate: np.ndarray | None,
                     streams: Streams, model_name: str) -> Population:
    """One device per client: regions (by ``covariate`` if the configuration says so),
    compute speed for ``model_name``, links, availability."""
    devices = build_devices(cfg, num_devices, covariate, streams, default_data_dir(),
                            model_name)
    availability = build_availability(cfg.availability, devices, streams)
    paths = network_paths(devices, build_topology(devices.region_names, cfg.network))
    return Population(devices, availability, paths)
