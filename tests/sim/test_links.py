"""Max-min fair link sharing: hand-computed finish times and a brute-force fluid model."""

from __future__ import annotations

import math
from collections.abc import Generator

import numpy as np
import pytest
import simpy

from simfl.population.devices import build_devices
from simfl.population.network import NetworkPaths, build_topology, network_paths
from simfl.rng import Streams
from simfl.scenario import NetworkConfig, PopulationConfig, Region
from simfl.sim.links import LinkSharing


def max_min_rates(caps: np.ndarray, member: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """The reference: max-min fair rates by progressive filling over every transfer and
    link at once (what simfl.sim.links recomputed at every start and end before its
    rates were kept by path level).

    Args:
        caps: (K,) each transfer's own limit (its access link), > 0.
        member: (K, S) bool, transfer k crosses shared link s.
        capacity: (S,) shared link capacities, > 0.

    Returns:
        (K,) rates. All transfers not yet frozen share one level; the next event is
        either the smallest cap (those transfers freeze at their caps) or the first link
        to saturate (its transfers freeze at the level).
    """
    rates = np.zeros(caps.shape[0])
    frozen = np.zeros(caps.shape[0], dtype=bool)
    remaining = capacity.astype(float).copy()
    while not frozen.all():
        count = member[~frozen].sum(axis=0)
        level = np.full(remaining.shape, np.inf)
        np.divide(np.maximum(remaining, 0.0), count, out=level, where=count > 0)
        fill = float(level.min()) if level.size else math.inf
        capped = ~frozen & (caps <= fill)
        if capped.any():
            rates[capped] = caps[capped]
            frozen |= capped
            remaining -= np.where(member[capped], caps[capped][:, None], 0.0).sum(axis=0)
            continue
        saturated = ~frozen & member[:, int(np.argmin(level))]
        rates[saturated] = fill
        frozen |= saturated
        remaining -= fill * member[saturated].sum(axis=0)
    return rates


def make_paths(caps_up: list[float], region_of: list[int], link_capacity: list[float],
               region_up_links: list[tuple[int, ...]], latency_s: float = 0.0) -> NetworkPaths:
    """Hand-made paths: every device has the same cap down and up."""
    num_regions = len(region_up_links)
    caps = np.array(caps_up, dtype=float)
    return NetworkPaths(
        region_idx=np.array(region_of),
        access_bytes_per_s={"down": caps, "up": caps},
        access_latency_s=np.full(len(caps_up), latency_s),
        link_names=tuple(f"l{i}" for i in range(len(link_capacity))),
        link_capacity_bytes_per_s=np.array(link_capacity, dtype=float),
        region_links={"up": tuple(region_up_links), "down": tuple(region_up_links)},
        region_latency_s={"up": np.zeros(num_regions), "down": np.zeros(num_regions)},
    )


def run_transfers(paths: NetworkPaths, jobs: list[tuple[float, int, float]]) -> list[float]:
    """Start (t_start_s, device, num_bytes) uploads; return each one's arrival time."""
    env = simpy.Environment()
    net = LinkSharing(env, paths)
    finish = [np.nan] * len(jobs)

    def job(i: int, t_start: float, device: int,
            num_bytes: float) -> Generator[simpy.Event, float, None]:
        yield env.timeout(t_start)
        finish[i] = yield net.transfer(device, num_bytes, "up")

    for i, (t_start, device, num_bytes) in enumerate(jobs):
        env.process(job(i, t_start, device, num_bytes))
    env.run()
    assert net.num_active == 0
    return finish


def test_two_transfers_share_one_link() -> None:
    # 10 B/s shared: both at 5 B/s; B (50 B) ends at 10; A then alone at 10 B/s: 50 B more.
    paths = make_paths([100, 100], [0, 0], [10.0], [(0,)])
    assert run_transfers(paths, [(0, 0, 100), (0, 1, 50)]) == pytest.approx([15.0, 10.0])


def test_two_transfers_with_latency() -> None:
    paths = make_paths([100, 100], [0, 0], [10.0], [(0,)], latency_s=1.0)
    assert run_transfers(paths, [(0, 0, 100), (0, 1, 50)]) == pytest.approx([16.0, 11.0])


def test_two_transfers_on_different_links() -> None:
    paths = make_paths([100, 100], [0, 1], [10.0, 10.0], [(0,), (1,)])
    assert run_transfers(paths, [(0, 0, 100), (0, 1, 50)]) == pytest.approx([10.0, 5.0])


def test_staggered_start() -> None:
    # A alone at 10 B/s for 5 s (50 B left); from t=5 both at 5 B/s with 50 B left: t=15.
    paths = make_paths([100, 100], [0, 0], [10.0], [(0,)])
    assert run_transfers(paths, [(0, 0, 100), (5, 1, 50)]) == pytest.approx([15.0, 15.0])


def test_access_link_caps_and_refill() -> None:
    # Fair share 5 each (A's cap 8 does not bind); B (30 B) ends at 6; A has 70 B left
    # and then runs at its cap 8 B/s: 6 + 70 / 8 = 14.75.
    paths = make_paths([8, 100], [0, 0], [10.0], [(0,)])
    assert run_transfers(paths, [(0, 0, 100), (0, 1, 30)]) == pytest.approx([14.75, 6.0])


def test_cap_below_fair_share_leaves_rest_to_others() -> None:
    # A capped at 2 B/s, B gets the other 8 B/s: A 20 B -> 10 s, B 40 B -> 5 s.
    paths = make_paths([2, 100], [0, 0], [10.0], [(0,)])
    assert run_transfers(paths, [(0, 0, 20), (0, 1, 40)]) == pytest.approx([10.0, 5.0])


def test_zero_bytes_arrive_after_latency() -> None:
    paths = make_paths([100], [0], [10.0], [(0,)], latency_s=0.25)
    assert run_transfers(paths, [(1.0, 0, 0)]) == pytest.approx([1.25])


def test_max_min_rates_two_links() -> None:
    # f0 crosses both links, f1 only L0 (10 B/s), f2 only L1 (4 B/s): L1 saturates first
    # at 2 each; f1 takes what f0 leaves of L0.
    member = np.array([[True, True], [True, False], [False, True]])
    rates = max_min_rates(np.full(3, np.inf), member, np.array([10.0, 4.0]))
    assert rates == pytest.approx([2.0, 8.0, 2.0])


def fluid_reference(caps: np.ndarray, links: list[tuple[int, ...]], capacity: np.ndarray,
                    starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Brute force: recompute every rate over all links at every start and end."""
    k = len(caps)
    member = np.zeros((k, len(capacity)), dtype=bool)
    for i, flow_links in enumerate(links):
        member[i, list(flow_links)] = True
    remaining, finish = sizes.astype(float).copy(), np.full(k, np.nan)
    t = 0.0
    while np.isnan(finish).any():
        active = (starts <= t + 1e-12) & np.isnan(finish)
        rates = np.zeros(k)
        if active.any():
            rates[active] = max_min_rates(caps[active], member[active], capacity)
        pending = starts[starts > t + 1e-12]
        t_next = pending.min() if pending.size else np.inf
        with np.errstate(divide="ignore", invalid="ignore"):
            t_done = np.where(active, t + remaining / rates, np.inf)
        t_step = min(t_next, t_done.min())
        remaining -= rates * (t_step - t)
        t = t_step
        done = active & (np.abs(t_done - t) < 1e-9)
        finish[done] = t
        remaining[done] = 0.0
    return finish


@pytest.mark.parametrize("seed", range(5))
def test_matches_brute_force_fluid_model(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 40
    caps = rng.uniform(1.0, 20.0, n)
    region = rng.integers(0, 3, n)
    # links: 0-2 region links, 3 the server link
    capacity = [15.0, 40.0, 1000.0, 45.0]
    region_links: list[tuple[int, ...]] = [(0, 3), (1, 3), (2, 3)]
    paths = make_paths(list(caps), list(region), capacity, region_links)
    starts = np.round(rng.uniform(0, 20, n), 3)
    sizes = rng.uniform(1, 200, n)
    got = run_transfers(paths, [(starts[i], i, sizes[i]) for i in range(n)])
    want = fluid_reference(caps, [region_links[r] for r in region], np.array(capacity),
                           starts, sizes)
    assert got == pytest.approx(list(want), rel=1e-7, abs=1e-7)


def population_paths(num_devices: int, server_bytes_per_s: float) -> NetworkPaths:
    cfg = PopulationConfig(regions=(Region("r", 0.0, 1.0),),
                           network=NetworkConfig(server_capacity_bytes_per_s=server_bytes_per_s))
    devices = build_devices(cfg, num_devices, None, Streams(0))
    return network_paths(devices, build_topology(devices.region_names, cfg.network))


def round_duration_s(paths: NetworkPaths, num_uploads: int, num_bytes: float) -> float:
    return max(run_transfers(paths, [(0.0, d, num_bytes) for d in range(num_uploads)]))


def test_thousand_uploads_behind_thin_link_slower_than_ten() -> None:
    thin_bytes_per_s, num_bytes = 1e6, 1e6
    paths = population_paths(1000, thin_bytes_per_s)
    t_10 = round_duration_s(paths, 10, num_bytes)
    t_1000 = round_duration_s(paths, 1000, num_bytes)
    assert t_1000 > 10 * t_10
    # The thin link is busy throughout: at least total bytes / capacity.
    assert t_1000 >= 1000 * num_bytes / thin_bytes_per_s


def test_uncongested_transfer_runs_at_access_rate() -> None:
    paths = population_paths(5, 1.25e9)
    d, num_bytes = 3, 2e6
    (t,) = run_transfers(paths, [(0.0, d, num_bytes)])
    expected = paths.path_latency_s(d, "up") + num_bytes / paths.access_bytes_per_s["up"][d]
    assert t == pytest.approx(expected)


def test_topology_paths_and_latency() -> None:
    cfg = PopulationConfig()
    devices = build_devices(cfg, 30, None, Streams(1))
    graph = build_topology(devices.region_names, cfg.network, devices)
    assert graph.number_of_nodes() == 30 + len(cfg.regions) + 2
    paths = network_paths(devices, graph)
    net = cfg.network
    d = 7
    want = devices.latency_s[d] + net.region_latency_s + net.server_latency_s
    assert paths.path_latency_s(d, "down") == pytest.approx(want)
    names = [paths.link_names[i] for i in paths.links(d, "up")]
    region = devices.region_names[devices.region_idx[d]]
    assert names == [f"region:{region}->backbone", "backbone->server"]


def test_events_per_transfer_do_not_grow_with_concurrency() -> None:
    # Latency timeout, done event and at most a timer per start or end: a few SimPy
    # events a transfer, however many run at once (none per tick or per rate change).
    paths = population_paths(300, 1e6)  # a thin server link: every transfer constrained
    env = simpy.Environment()
    net = LinkSharing(env, paths)
    for d in range(300):
        net.transfer(d, 1e5, "up")
    events = 0
    while env.peek() < np.inf:
        env.step()
        events += 1
    assert net.num_active == 0
    assert events <= 4 * 300


def test_bad_direction() -> None:
    net = LinkSharing(simpy.Environment(), make_paths([1.0], [0], [1.0], [(0,)]))
    with pytest.raises(ValueError, match="direction"):
        net.transfer(0, 1.0, "sideways")  # type: ignore[arg-type]
