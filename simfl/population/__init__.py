"""The device population: device table, availability, compute speed, network topology.

Built once per run from ``Scenario.population`` with seeded streams (docs/design.md §3);
numpy and networkx only, no SimPy and no torch. The SimPy side of the network is
simfl.sim.links.
"""

from simfl.population.availability import (
    Availability,
    always_online,
    build_availability,
    from_csr,
    from_intervals,
    known_rates,
    sample_online,
)
from simfl.population.devices import assign_regions, build_devices, default_data_dir
from simfl.population.network import NetworkPaths, build_topology, network_paths
from simfl.population.table import DeviceTable
from simfl.population.trace import read_trace, write_trace

__all__ = [
    "Availability",
    "DeviceTable",
    "NetworkPaths",
    "always_online",
    "assign_regions",
    "build_availability",
    "build_devices",
    "build_topology",
    "default_data_dir",
    "from_csr",
    "from_intervals",
    "known_rates",
    "network_paths",
    "read_trace",
    "sample_online",
    "write_trace",
]
