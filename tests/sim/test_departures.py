"""Issue 72's engine: a device that leaves mid-task stops using the network at that
instant, and rounds open the moment enough devices are online (no polling). Event times
computed by hand."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import simpy

from simfl.population.availability import from_intervals
from simfl.population.network import NetworkPaths
from simfl.scenario import ServerConfig
from simfl.sim.links import LinkSharing
from simfl.sim.tasks import next_online_s, next_switch_on_s
from tests.sim.test_links import make_paths
from tests.sim.test_server import FakeLearner, simulate


def shared(link_bytes_per_s: float, caps: list[float]) -> NetworkPaths:
    """One region whose devices (access ``caps``) all cross one link of that capacity."""
    return make_paths(caps, [0] * len(caps), [link_bytes_per_s], [(0,)])


def test_a_cancelled_transfer_frees_its_share_at_once() -> None:
    # Two 1000 B uploads over one 1000 B/s link (each access 1000 B/s): 500 B/s each. The
    # second is cancelled at 1 s with 500 B sent; the first has 500 B left and runs at
    # 1000 B/s from then: it arrives at 1.5 s (2.0 s had both gone on).
    env = simpy.Environment()
    net = LinkSharing(env, shared(1000.0, [1000.0, 1000.0]))
    arrived: list[float] = []
    sent: list[float] = []

    def stays() -> Generator[simpy.Event, float, None]:
        arrived.append((yield net.transfer(0, 1000, "up")))

    def leaves() -> Generator[simpy.Event, float, None]:
        done = net.transfer(1, 1000, "up")
        yield env.timeout(1.0)
        sent.append(net.cancel(done))
        assert not done.triggered

    env.process(stays())
    env.process(leaves())
    env.run()
    assert arrived == [pytest.approx(1.5)]
    assert sent == [pytest.approx(500.0)]
    assert net.num_active == 0


def test_a_transfer_cancelled_in_its_latency_sends_nothing() -> None:
    env = simpy.Environment()
    net = LinkSharing(env, make_paths([1000.0], [0], [1e9], [(0,)], latency_s=1.0))
    sent: list[float] = []

    def leaves() -> Generator[simpy.Event, float, None]:
        done = net.transfer(0, 1000, "up")
        yield env.timeout(0.5)
        sent.append(net.cancel(done))

    env.process(leaves())
    env.run()
    assert sent == [0.0] and net.num_active == 0 and env.now == pytest.approx(1.0)


def test_a_device_leaving_mid_upload_speeds_up_the_other_and_logs_what_it_sent(
        tmp_path: Path) -> None:
    # FedAvg, two devices sharing a 1000 B/s link (access 1000 B/s each way): downloads of
    # 1000 B together at 500 B/s end at 2 s; compute 10 x 0.1 s = 1 s; uploads start at 3 s
    # at 500 B/s. Device 1 goes offline at 3.5 s (250 B up): device 0's 750 B left then go
    # at 1000 B/s, so it arrives at 4.25 s (5 s before the fix) and the round ends there.
    availability = from_intervals(np.array([0, 1]), np.array([0.0, 0.0]),
                                  np.array([100.0, 3.5]), np.zeros(2, np.int64), 1,
                                  horizon_s=100.0)
    cfg = ServerConfig(num_rounds=1, clients_per_round=2)
    tables = simulate(tmp_path, cfg, availability, shared(1000.0, [1000.0, 1000.0]),
                      FakeLearner(needs_losses=False), np.array([0.1, 0.1]))
    clients = tables["clients"].sort("client_idx")
    assert clients["status"].to_list() == ["aggregated", "dropped"]
    np.testing.assert_allclose(clients["t_done_s"], [4.25, 3.5])
    up = tables["comm"].filter(pl.col("direction") == "up").sort("client_idx")
    assert up["bytes"].to_list() == [1000, 250]
    assert up["completed"].to_list() == [True, False]
    np.testing.assert_allclose(up["t_end_s"], [4.25, 3.5])
    assert clients["bytes_up"].to_list() == [1000, 250]  # the sums of the messages
    rounds = tables["rounds"]
    np.testing.assert_allclose(rounds["t_end_s"], [4.25])
    assert rounds["bytes_up"].to_list() == [1250]


def test_a_round_opens_when_the_min_online_th_device_comes_online(tmp_path: Path) -> None:
    # min_online = 2: device 0 is online from 0 s, device 1 from 100.25 s. The round opens
    # at 100.25 s exactly (polling every 60 s would have opened it at 120 s).
    availability = from_intervals(np.array([0, 1]), np.array([0.0, 100.25]),
                                  np.array([1000.0, 1000.0]), np.zeros(2, np.int64), 1,
                                  horizon_s=1000.0)
    cfg = ServerConfig(num_rounds=1, clients_per_round=2, min_online=2)
    tables = simulate(tmp_path, cfg, availability, shared(1e12, [1000.0, 1000.0]),
                      FakeLearner(needs_losses=False), np.array([0.1, 0.1]))
    assert tables["clients"]["t_dispatch_s"].to_list() == [100.25, 100.25]
    assert tables["rounds"]["t_start_s"].to_list() == [0.0]  # the wait is the round's


def test_next_online_counts_switches_across_regions() -> None:
    # region 0: [0, 10), [20, 30); region 1: [5, 25), [40, 50)
    availability = from_intervals(np.array([0, 0, 1, 1]), np.array([0.0, 20.0, 5.0, 40.0]),
                                  np.array([10.0, 30.0, 25.0, 50.0]),
                                  np.array([0, 1], dtype=np.int64), 2, horizon_s=60.0)
    assert next_online_s(availability, 0.0, 1) == 0.0
    assert next_online_s(availability, 0.0, 2) == 5.0
    assert next_online_s(availability, 10.0, 2) == 20.0  # one online at 10 and 15
    assert next_online_s(availability, 26.0, 1) == 26.0  # [20, 30) is on
    assert next_online_s(availability, 30.0, 1) == 40.0
    assert next_online_s(availability, 30.0, 2) == np.inf
    assert next_switch_on_s(availability, 5.0) == 20.0
    assert next_switch_on_s(availability, 40.0) == np.inf


def test_next_online_equals_brute_force_over_every_switch() -> None:
    # many devices and switches (more than one batch of 64 a region), random queries
    rng = np.random.default_rng(0)
    devices, ons, offs = [], [], []
    for d in range(60):
        t = 0.0
        for _ in range(int(rng.integers(1, 12))):
            t += rng.exponential(50.0)
            end = t + rng.exponential(20.0)
            devices.append(d)
            ons.append(t)
            offs.append(end)
            t = end
    availability = from_intervals(np.array(devices), np.array(ons), np.array(offs),
                                  rng.integers(0, 3, 60), 3, horizon_s=1e6)
    candidates = np.sort(np.array(ons))
    for now in rng.uniform(0.0, 600.0, 40):
        for at_least in (1, 3, 8, 15):
            times = [now, *candidates[candidates > now]]
            want = next((t for t in times if availability.num_online(t) >= at_least), np.inf)
            assert next_online_s(availability, now, at_least) == want
        later = candidates[candidates > now]
        assert next_switch_on_s(availability, now) == (later[0] if len(later) else np.inf)
