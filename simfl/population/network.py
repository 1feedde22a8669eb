"""Network topology: devices -> regional access -> backbone -> server (networkx).

Every link is directed and carries ``capacity_bytes_per_s`` and ``latency_s``: the
uplink and downlink of a physical link are separate (full duplex). A device's own
access link has the bandwidth drawn for it; the shared links (region <-> backbone,
backbone <-> server) have the configured capacities. A transfer's latency is the sum
along its path; its rate is limited by every link it crosses, shared max-min fairly
with the transfers crossing the same links at the same time (simfl.sim.links).

Default access-link distributions (NetworkConfig): lognormal with medians at the
global mobile figures of the Ookla Speedtest Global Index (September 2020: download
35.96 Mbit/s = 4.5e6 B/s, upload 11.22 Mbit/s = 1.4e6 B/s, latency 40 ms). The
log-sd of 0.8 (10th-90th percentile ratio about 8) is an assumption of this
project, chosen to span the between-country spread of the same index (medians of a
few to about 50 Mbit/s). Latency is the speed-test ping, a round trip: a transfer
pays it once. Shared links default to 10 Gbit/s (1.25e9 B/s), a common data-centre
NIC, so that they only bind when configured thin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import networkx as nx
import numpy as np

from simfl.population.table import DeviceTable
from simfl.scenario import NetworkConfig

Direction = Literal["down", "up"]
DIRECTIONS: tuple[Direction, ...] = ("down", "up")
SERVER = "server"
BACKBONE = "backbone"


def region_node(name: str) -> str:
    return f"region:{name}"


def device_node(device_idx: int) -> tuple[str, int]:
    return ("device", int(device_idx))


def draw_access(cfg: NetworkConfig, num_devices: int,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-device access (down_bytes_per_s, up_bytes_per_s, latency_s), lognormal."""

    def lognormal(median: float, sigma: float) -> np.ndarray:
        return median * np.exp(sigma * rng.standard_normal(num_devices))

    down = lognormal(cfg.down_median_bytes_per_s, cfg.down_log_sigma)
    up = lognormal(cfg.up_median_bytes_per_s, cfg.up_log_sigma)
    latency = lognormal(cfg.latency_median_s, cfg.latency_log_sigma)
    return down, up, latency


def _add_duplex(graph: nx.DiGraph, lower: object, upper: object, down_bytes_per_s: float,
                up_bytes_per_s: float, latency_s: float) -> None:
    graph.add_edge(lower, upper, capacity_bytes_per_s=up_bytes_per_s, latency_s=latency_s)
    graph.add_edge(upper, lower, capacity_bytes_per_s=down_bytes_per_s, latency_s=latency_s)


def build_topology(region_names: tuple[str, ...], cfg: NetworkConfig,
                   devices: DeviceTable | None = None) -> nx.DiGraph:
    """The topology graph; device nodes only when ``devices`` is given (small populations)."""
    graph = nx.DiGraph()
    _add_duplex(graph, BACKBONE, SERVER, cfg.server_capacity_bytes_per_s,
                cfg.server_capacity_bytes_per_s, cfg.server_latency_s)
    for name in region_names:
        _add_duplex(graph, region_node(name), BACKBONE, cfg.region_capacity_bytes_per_s,
                    cfg.region_capacity_bytes_per_s, cfg.region_latency_s)
    if devices is not None:
        for d in range(devices.num_devices):
            _add_duplex(graph, device_node(d), region_node(region_names[devices.region_idx[d]]),
                        float(devices.down_bytes_per_s[d]), float(devices.up_bytes_per_s[d]),
                        float(devices.latency_s[d]))
    return graph


@dataclass(frozen=True)
class NetworkPaths:
    """What transfers need: per-device access links, and shared links per region path.

    Link ids index ``link_capacity_bytes_per_s``; ``region_links[direction][r]`` are
    the shared links a transfer of a device in region r crosses in that direction.
    """

    region_idx: np.ndarray  # (N,) int
    access_bytes_per_s: dict[str, np.ndarray]  # direction -> (N,)
    access_latency_s: np.ndarray  # (N,)
    link_names: tuple[str, ...]
    link_capacity_bytes_per_s: np.ndarray  # (L,)
    region_links: dict[str, tuple[tuple[int, ...], ...]]  # direction -> per region
    region_latency_s: dict[str, np.ndarray]  # direction -> (R,) shared-path latency

    @property
    def num_devices(self) -> int:
        return int(self.region_idx.shape[0])

    def path_latency_s(self, device_idx: int, direction: Direction) -> float:
        region = self.region_idx[device_idx]
        return float(self.access_latency_s[device_idx] + self.region_latency_s[direction][region])

    def links(self, device_idx: int, direction: Direction) -> tuple[int, ...]:
        return self.region_links[direction][self.region_idx[device_idx]]


def _is_device(node: object) -> bool:
    return isinstance(node, tuple) and len(node) == 2 and node[0] == "device"


def network_paths(devices: DeviceTable, graph: nx.DiGraph) -> NetworkPaths:
    """Resolve each region's shortest path to and from the server in ``graph``."""
    shared = [(u, v) for u, v in graph.edges if not (_is_device(u) or _is_device(v))]
    link_id = {edge: i for i, edge in enumerate(shared)}
    capacity = np.array([graph.edges[e]["capacity_bytes_per_s"] for e in shared], dtype=float)
    region_links: dict[str, tuple[tuple[int, ...], ...]] = {}
    region_latency: dict[str, np.ndarray] = {}
    for direction in DIRECTIONS:
        paths = []
        for name in devices.region_names:
            ends = (region_node(name), SERVER)
            nodes = nx.shortest_path(graph, *(ends if direction == "up" else ends[::-1]))
            paths.append(list(zip(nodes[:-1], nodes[1:], strict=True)))
        region_links[direction] = tuple(tuple(link_id[e] for e in p) for p in paths)
        region_latency[direction] = np.array(
            [sum(graph.edges[e]["latency_s"] for e in p) for p in paths], dtype=float)
    return NetworkPaths(
        region_idx=devices.region_idx,
        access_bytes_per_s={"down": devices.down_bytes_per_s, "up": devices.up_bytes_per_s},
        access_latency_s=devices.latency_s,
        link_names=tuple(f"{u}->{v}" for u, v in shared),
        link_capacity_bytes_per_s=capacity,
        region_links=region_links,
        region_latency_s=region_latency,
    )
