"""The population of a run, built in one place: devices, their availability and network
paths (runs/run.py for a Scenario's training clients; the DRFL engine for its clients)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simfl.population.availability import Availability, build_availability
from simfl.population.devices import build_devices, default_data_dir
from simfl.population.habits import Habits, draw_habits
from simfl.population.network import NetworkPaths, build_topology, network_paths
from simfl.population.table import DeviceTable
from simfl.rng import Streams
from simfl.scenario import PopulationConfig


@dataclass(frozen=True)
class Population:
    devices: DeviceTable
    availability: Availability
    paths: NetworkPaths
    habits: Habits | None = None  # availability mode "habits": each device's
    covariate: np.ndarray | None = None  # (N,) population.covariate of each device's data


def build_population(cfg: PopulationConfig, num_devices: int, covariate: np.ndarray | None,
                     streams: Streams, model_name: str) -> Population:
    """One device per client: regions (by ``covariate`` if the configuration says so),
    compute speed for ``model_name``, links, availability (with mode ``habits``, each
    device's habits, tied to ``covariate`` within its region as configured)."""
    devices = build_devices(cfg, num_devices, covariate, streams, default_data_dir(),
                            model_name)
    avail = cfg.availability
    habits = None
    if avail.mode == "habits":
        habits = draw_habits(avail.habits, avail.online_prob_by_hour, avail.session_mean_s,
                             devices.region_idx, covariate, streams.numpy("population.habits"))
    availability = build_availability(avail, devices, streams, habits)
    paths = network_paths(devices, build_topology(devices.region_names, cfg.network))
    return Population(devices, availability, paths, habits, covariate)
