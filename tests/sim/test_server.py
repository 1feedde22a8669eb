"""The synchronous server over a device population: exact times, invariants from the logs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import simpy

from simfl.aggregate.base import Selection
from simfl.population import always_online
from simfl.population.availability import Availability, from_intervals
from simfl.population.network import NetworkPaths
from simfl.quantile.secagg import Exchange
from simfl.records import Recorder
from simfl.rng import Streams
from simfl.scenario import ServerConfig
from simfl.sim.health import Health
from simfl.sim.links import LinkSharing
from simfl.sim.server import sync_server
from simfl.sim.tasks import Fleet, Wiring

LOSS_REPORT_BYTES = 4


@dataclass
class FakeLearner:
    """Numerics replaced by bookkeeping: losses are the client index, no training."""

    needs_losses: bool
    model_bytes: int = 1000
    samples: int = 10
    loss_report_bytes: int = LOSS_REPORT_BYTES
    exchanges: tuple[Exchange, ...] = ()  # the threshold protocol
    wants_checkins: bool = False
    cohort_fraction: float = 1.0
    aggregated: list[np.ndarray] = field(default_factory=list)

    def selection_weights(self) -> np.ndarray | None:
        return None

    def observe_online(self, t_s: float, client_idx: np.ndarray) -> None:
        pass

    def num_samples(self, client_idx: np.ndarray) -> np.ndarray:
        return np.full(len(client_idx), self.samples)

    def client_ids(self, client_idx: np.ndarray) -> np.ndarray:
        return np.array([f"c{k}" for k in client_idx])

    def lr(self, round_idx: int) -> float:
        return 0.1

    def report_losses(self, client_idx: np.ndarray) -> np.ndarray:
        return client_idx.astype(float)

    def select(self, losses: np.ndarray, client_idx: np.ndarray, round_idx: int,
               t_s: float) -> tuple[Selection, None]:
        threshold = float(np.median(losses))
        return Selection(losses >= threshold, threshold, self.exchanges), None

    def train(self, round_idx: int, client_idx: np.ndarray) -> np.ndarray:
        return np.zeros(len(client_idx))

    def aggregate(self, client_idx: np.ndarray, losses: np.ndarray) -> None:
        self.aggregated.append(np.array(client_idx))


def paths(down: list[float], up: list[float]) -> NetworkPaths:
    """One region, shared links far faster than any device, no latency."""
    n = len(down)
    return NetworkPaths(
        region_idx=np.zeros(n, dtype=np.int64),
        access_bytes_per_s={"down": np.array(down, float), "up": np.array(up, float)},
        access_latency_s=np.zeros(n), link_names=("backbone",),
        link_capacity_bytes_per_s=np.array([1e15]),
        region_links={"up": ((0,),), "down": ((0,),)},
        region_latency_s={"up": np.zeros(1), "down": np.zeros(1)})


def simulate(tmp_path: Path, cfg: ServerConfig, availability: Availability,
             net_paths: NetworkPaths, learner: FakeLearner, train_s_per_sample: np.ndarray,
             failure_rate_per_h: float = 0.0, seed: int = 0) -> dict[str, pl.DataFrame]:
    env = simpy.Environment()
    recorder = Recorder(tmp_path)
    n = availability.num_devices
    fleet = Fleet(availability, train_s_per_sample, np.full(n, failure_rate_per_h), 1)
    wiring = Wiring(env, fleet, LinkSharing(env, net_paths), recorder, Streams(seed),
                    Health(0, 1.0))
    env.process(sync_server(wiring, cfg, learner, lambda r, t: None))
    env.run()
    recorder.merge()
    return {t: pl.read_parquet(tmp_path / f"{t}.parquet") for t in ("rounds", "clients", "comm")}


def test_fixed_costs_give_exact_event_times(tmp_path: Path) -> None:
    # Device 0: 1000 B down at 1000 B/s = 1 s; 10 samples x 0.1 s = 1 s; 1000 B up at 500 B/s.
    # Device 1 is twice as fast everywhere. FedAvg: the round ends with device 0 at 4 s.
    cfg = ServerConfig(num_rounds=2, clients_per_round=2)
    tables = simulate(tmp_path, cfg, always_online(np.zeros(2, np.int64), 1),
                      paths([1000, 2000], [500, 1000]), FakeLearner(needs_losses=False),
                      np.array([0.1, 0.05]))
    rounds, clients = tables["rounds"], tables["clients"]
    np.testing.assert_allclose(rounds["t_start_s"], [0.0, 4.0])
    np.testing.assert_allclose(rounds["t_end_s"], [4.0, 8.0])
    np.testing.assert_allclose(clients.sort("round", "client_idx")["t_done_s"],
                               [4.0, 2.0, 8.0, 6.0])
    comm = tables["comm"].filter(pl.col("round") == 0).sort("client_idx", "t_start_s")
    np.testing.assert_allclose(comm["t_start_s"], [0.0, 2.0, 0.0, 1.0])
    np.testing.assert_allclose(comm["t_end_s"], [1.0, 4.0, 0.5, 2.0])


def test_loss_reports_come_before_training(tmp_path: Path) -> None:
    # Δ-FL-like: after the download (1 s), evaluating 10 samples costs a third of training
    # (1/3 s), the 4-byte report takes 4/500 s; then only the kept device trains (1 s) and
    # uploads (2 s). The fake rule keeps losses >= the median, i.e. device 1 (loss 1.0).
    cfg = ServerConfig(num_rounds=1, clients_per_round=2)
    learner = FakeLearner(needs_losses=True)
    tables = simulate(tmp_path, cfg, always_online(np.zeros(2, np.int64), 1),
                      paths([1000, 1000], [500, 500]), learner, np.array([0.1, 0.1]))
    report_s = 1 + 1 / 3 + LOSS_REPORT_BYTES / 500
    np.testing.assert_allclose(tables["rounds"]["t_end_s"], [report_s + 1 + 2])
    clients = tables["clients"].sort("client_idx")
    assert clients["status"].to_list() == ["filtered", "aggregated"]
    np.testing.assert_allclose(clients["t_done_s"], [report_s, report_s + 3])
    assert clients["bytes_up"].to_list() == [LOSS_REPORT_BYTES, LOSS_REPORT_BYTES + 1000]
    np.testing.assert_array_equal(learner.aggregated[0], [1])


def test_threshold_protocol_exchanges_take_their_time_and_bytes(tmp_path: Path) -> None:
    # As above but the losses go through a protocol (no report in the clear): two
    # exchanges, each 100 B up at 500 B/s (0.2 s) then 200 B down at 1000 B/s (0.2 s),
    # barrier after every direction; then the kept device trains (1 s) and uploads (2 s).
    cfg = ServerConfig(num_rounds=1, clients_per_round=2, deadline_s=100.0)  # not reached
    protocol = (Exchange(100, 200, "secagg"), Exchange(100, 200, "secagg"))
    learner = FakeLearner(needs_losses=True, loss_report_bytes=0, exchanges=protocol)
    tables = simulate(tmp_path, cfg, always_online(np.zeros(2, np.int64), 1),
                      paths([1000, 1000], [500, 500]), learner, np.array([0.1, 0.1]))
    protocol_end_s = 1 + 1 / 3 + 2 * (0.2 + 0.2)
    np.testing.assert_allclose(tables["rounds"]["t_end_s"], [protocol_end_s + 1 + 2])
    secagg = tables["comm"].filter(pl.col("kind") == "secagg").sort("t_start_s", "client_idx")
    assert secagg["direction"].to_list() == ["up", "up", "down", "down"] * 2
    np.testing.assert_allclose(secagg["t_end_s"][-1], protocol_end_s)
    assert tables["comm"].filter(pl.col("kind") == "loss").height == 0
    clients = tables["clients"].sort("client_idx")
    assert clients["bytes_up"].to_list() == [200, 1200]
    assert clients["bytes_down"].to_list() == [1400, 1400]
    assert clients["status"].to_list() == ["filtered", "aggregated"]


def test_deadline_during_the_threshold_protocol_makes_the_cohort_late(tmp_path: Path) -> None:
    # The same protocol ends at 2.1333 s; a 2 s deadline passes during its second exchange:
    # nobody trains, the round closes at the deadline with nothing aggregated.
    cfg = ServerConfig(num_rounds=1, clients_per_round=2, deadline_s=2.0)
    protocol = (Exchange(100, 200, "secagg"), Exchange(100, 200, "secagg"))
    learner = FakeLearner(needs_losses=True, loss_report_bytes=0, exchanges=protocol)
    tables = simulate(tmp_path, cfg, always_online(np.zeros(2, np.int64), 1),
                      paths([1000, 1000], [500, 500]), learner, np.array([0.1, 0.1]))
    np.testing.assert_allclose(tables["rounds"]["t_end_s"], [2.0])
    assert tables["rounds"]["num_aggregated"].to_list() == [0]
    assert tables["clients"]["status"].to_list() == ["late", "late"]
    assert learner.aggregated == [] or len(learner.aggregated[0]) == 0


def test_deadline_makes_the_slow_device_late(tmp_path: Path) -> None:
    cfg = ServerConfig(num_rounds=1, clients_per_round=2, deadline_s=3.0)
    learner = FakeLearner(needs_losses=False)
    tables = simulate(tmp_path, cfg, always_online(np.zeros(2, np.int64), 1),
                      paths([1000, 2000], [500, 1000]), learner, np.array([0.1, 0.05]))
    clients = tables["clients"].sort("client_idx")
    assert clients["status"].to_list() == ["late", "aggregated"]
    np.testing.assert_allclose(tables["rounds"]["t_end_s"], [3.0])
    np.testing.assert_allclose(clients["t_done_s"], [4.0, 2.0])  # the late upload is logged
    np.testing.assert_array_equal(learner.aggregated[0], [1])


def test_failure_hazard_drops_the_expected_fraction(tmp_path: Path) -> None:
    # Every task lasts 4 s (always online); with hazard λ per hour a task fails with
    # probability 1 - exp(-4 λ / 3600).
    rate_per_h = 90.0
    cfg = ServerConfig(num_rounds=400, clients_per_round=10)
    tables = simulate(tmp_path, cfg, always_online(np.zeros(10, np.int64), 1),
                      paths([1000] * 10, [500] * 10), FakeLearner(needs_losses=False),
                      np.full(10, 0.1), failure_rate_per_h=rate_per_h)
    status = tables["clients"]["status"]
    p = 1 - np.exp(-4 * rate_per_h / 3600)
    n = status.len()
    dropped = (status == "dropped").sum()
    assert abs(dropped / n - p) < 4 * np.sqrt(p * (1 - p) / n)
    assert set(status.unique()) == {"aggregated", "dropped"}


def test_diurnal_run_invariants_from_the_logs(tmp_path: Path) -> None:
    # 300 devices with random on/off intervals over two days; rounds every 10 minutes.
    rng = np.random.default_rng(1)
    device, t_on, t_off = [], [], []
    for d in range(300):
        t = rng.uniform(0, 3600)
        while t < 2 * 86400:
            on_s = rng.exponential(1800)
            device.append(d)
            t_on.append(t)
            t_off.append(t + on_s)
            t += on_s + rng.exponential(3600)
    availability = from_intervals(np.array(device), np.array(t_on), np.array(t_off),
                                  np.zeros(300, np.int64), 1, horizon_s=2 * 86400.0)
    cfg = ServerConfig(num_rounds=150, clients_per_round=20, over_selection=0.25,
                       deadline_s=400.0, round_interval_s=600.0)
    speeds = rng.uniform(0.5, 20, 300)
    tables = simulate(tmp_path, cfg, availability,
                      paths(list(rng.uniform(200, 5000, 300)), list(rng.uniform(50, 2000, 300))),
                      FakeLearner(needs_losses=True, samples=30), speeds / 30,
                      failure_rate_per_h=0.5)
    clients, rounds, comm = tables["clients"], tables["rounds"], tables["comm"]
    idx, t0 = clients["client_idx"].to_numpy(), clients["t_dispatch_s"].to_numpy()
    assert availability.is_online(idx, t0).all()  # nobody selected while offline
    done = clients["t_done_s"].to_numpy()
    agg = (clients["status"] == "aggregated").to_numpy()
    assert agg.sum() > 100
    assert (availability.online_until(idx[agg], t0[agg]) >= done[agg]).all()
    assert {"aggregated", "filtered", "dropped", "late"} >= set(clients["status"].unique())
    assert (clients["status"] == "dropped").sum() > 0
    # Every byte is a message: per-round totals in rounds and clients equal comm's sums.
    sums = comm.group_by("round").agg(
        pl.col("bytes").filter(pl.col("direction") == "down").sum().alias("down"),
        pl.col("bytes").filter(pl.col("direction") == "up").sum().alias("up")).sort("round")
    rounds = rounds.sort("round")
    assert sums["down"].to_list() == rounds["bytes_down"].to_list()
    assert sums["up"].to_list() == rounds["bytes_up"].to_list()
    per_client = clients.group_by("round").agg(pl.col("bytes_up").sum()).sort("round")
    assert per_client["bytes_up"].to_list() == rounds["bytes_up"].to_list()
    # A device is never in two rounds at once.
    spans = clients.sort("client_idx", "t_dispatch_s")
    same = spans["client_idx"].to_numpy()[1:] == spans["client_idx"].to_numpy()[:-1]
    assert (spans["t_dispatch_s"].to_numpy()[1:][same]
            >= spans["t_done_s"].to_numpy()[:-1][same]).all()
