"""The population of a run, built in one place: devices, their availability and network
paths (runs/build.py for a Scenario's training clients; the DRFL engine for its clients),
and the unseen test devices beside them (:class:`UnseenDevices`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simfl.population.availability import Availability, device_habits, populate
from simfl.population.devices import build_devices, default_data_dir
from simfl.population.habits import Habits
from simfl.population.network import NetworkPaths, build_topology, network_paths
from simfl.population.table import DeviceTable
from simfl.population.trace_map import MappedTrace
from simfl.rng import Streams
from simfl.scenario import PopulationConfig

# The stream whose seed roots the unseen test devices' own streams (unseen_streams)
UNSEEN_PURPOSE = "population.unseen"


@dataclass(frozen=True)
class UnseenDevices:
    """The unseen test devices: device d holds the data's test client d (its
    ``devices.client_idx`` is d, the client's index among the test clients), drawn from
    the same configuration as the training devices: region (by the test clients'
    covariate if configured), compute speed, access links and, with availability mode
    ``habits``, habits. No online intervals are drawn: an unseen device is never
    selected (the server samples ``Population.availability``, the training devices'
    only) and evaluates whenever the model is evaluated; its availability is its
    habits' (or the mode's) profile, as devices.parquet records it."""

    devices: DeviceTable
    habits: Habits | None
    covariate: np.ndarray | None  # (M,) population.covariate of each test client's data


@dataclass(frozen=True)
class Population:
    devices: DeviceTable
    availability: Availability
    paths: NetworkPaths
    habits: Habits | None = None  # availability mode "habits": each device's
    covariate: np.ndarray | None = None  # (N,) population.covariate of each device's data
    unseen: UnseenDevices | None = None  # the unseen test devices (None: none built)
    trace: MappedTrace | None = None  # availability mode "trace": the trace each replays


def build_population(cfg: PopulationConfig, num_devices: int, covariate: np.ndarray | None,
                     streams: Streams, model_name: str, num_unseen: int = 0,
                     unseen_covariate: np.ndarray | None = None) -> Population:
    """One device per client: regions (by ``covariate`` if the configuration says so),
    compute speed for ``model_name``, links, availability (with mode ``habits``, each
    device's habits, tied to ``covariate`` within its region as configured; with mode
    ``trace``, the trace device each replays, mapped and tied to ``covariate``); and
    ``num_unseen`` unseen test devices (:func:`build_unseen`, by ``unseen_covariate``),
    whose draws leave the training devices' as they are without them."""
    devices = build_devices(cfg, num_devices, covariate, streams, default_data_dir(),
                            model_name)
    drawn = populate(cfg.availability, devices, streams, covariate)
    paths = network_paths(devices, build_topology(devices.region_names, cfg.network))
    unseen = (build_unseen(cfg, num_unseen, unseen_covariate, streams, model_name)
              if num_unseen else None)
    return Population(devices, drawn.availability, paths, drawn.habits, covariate, unseen,
                      drawn.trace)


def unseen_streams(streams: Streams) -> Streams:
    """The unseen test devices' streams: rooted at a seed drawn from the run's stream
    ``population.unseen``. Under it the purposes the training devices draw from
    (``population.region``, ``population.compute``, ``population.network``,
    ``population.habits``) name other streams (their SeedSequences' entropy differs), so
    the unseen devices draw exactly as the training devices do, from the same code, and
    the training devices' draws are the same with or without them."""
    return Streams(streams.seed(UNSEEN_PURPOSE))


def build_unseen(cfg: PopulationConfig, num_devices: int, covariate: np.ndarray | None,
                 streams: Streams, model_name: str) -> UnseenDevices:
    """``num_devices`` unseen test devices drawn like the training devices (region
    shares, compute, links, habits of ``cfg``) from :func:`unseen_streams`."""
    own = unseen_streams(streams)
    devices = build_devices(cfg, num_devices, covariate, own, default_data_dir(), model_name)
    return UnseenDevices(devices, device_habits(cfg.availability, devices, covariate, own),
                         covariate)
