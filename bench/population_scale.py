"""Scale of the engine: 7 simulated days, a round every 10 minutes, N devices.

    SIMFL_DATA_DIR=../shared/data python bench/population_scale.py [--sizes 1e3,1e4,1e5,1e6]

Diurnal availability (default profile, 3 regions, 1 h sessions), phone speeds from
the benchmark files when $SIMFL_DATA_DIR is set, default network. The real server
(simfl.sim.server.sync_server) runs a round every 10 simulated minutes: it picks
100 devices uniformly among those online and idle, each downloads a ConvNet-sized
model, trains (its compute time) and uploads through simfl.sim.links, with a
10-minute deadline; the numerics are a no-op learner and the Parquet rows are
buffered and written as in a run. Each N runs in a fresh subprocess so that its
peak resident memory (VmHWM) is its own.

Reported per N: precompute wall seconds (device table, availability, topology),
simulation wall seconds, SimPy events processed, peak RSS, the wall cost per
round, and what happened to the tasks.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
import simpy

from simfl.aggregate.base import Selection
from simfl.population import (
    build_availability,
    build_devices,
    build_topology,
    default_data_dir,
    network_paths,
)
from simfl.records import Recorder
from simfl.rng import Streams
from simfl.scenario import AvailabilityConfig, PopulationConfig, ServerConfig
from simfl.sim.health import Health
from simfl.sim.links import LinkSharing
from simfl.sim.server import sync_server
from simfl.sim.tasks import Fleet, Wiring

DAYS = 7
ROUND_EVERY_S = 600.0
CLIENTS_PER_ROUND = 100
MODEL_BYTES = 4 * 115_646  # the FEMNIST ConvNet in float32
SAMPLES_PER_CLIENT = 180  # about the median FEMNIST writer's training samples


class NoopLearner:
    """The numerics replaced by nothing: FedAvg-shaped (no loss reports), no training."""

    needs_losses = False
    model_bytes = MODEL_BYTES

    def num_samples(self, client_idx: np.ndarray) -> np.ndarray:
        return np.full(len(client_idx), SAMPLES_PER_CLIENT)

    def client_ids(self, client_idx: np.ndarray) -> np.ndarray:
        return client_idx.astype(str)

    def lr(self, round_idx: int) -> float:
        return 0.0

    def report_losses(self, client_idx: np.ndarray) -> np.ndarray:
        return np.zeros(len(client_idx))

    loss_report_bytes = 4
    wants_checkins = False
    cohort_fraction = 1.0

    def selection_weights(self) -> np.ndarray | None:
        return None

    def observe_online(self, t_s: float, client_idx: np.ndarray) -> None:
        pass

    def select(self, losses: np.ndarray, client_idx: np.ndarray, round_idx: int,
               t_s: float) -> tuple[Selection, None]:
        return Selection(np.ones(len(losses), dtype=bool)), None

    def train(self, round_idx: int, client_idx: np.ndarray) -> np.ndarray:
        return np.zeros(len(client_idx))

    def aggregate(self, client_idx: np.ndarray, losses: np.ndarray) -> None:
        pass


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_one(num_devices: int, seed: int) -> dict[str, float]:
    horizon_s = DAYS * 86400.0
    num_rounds = int(horizon_s // ROUND_EVERY_S) - 1
    t0 = time.perf_counter()
    cfg = PopulationConfig(availability=AvailabilityConfig(mode="diurnal", horizon_s=horizon_s))
    streams = Streams(seed)
    devices = build_devices(cfg, num_devices, None, streams, default_data_dir(), "convnet")
    availability = build_availability(cfg.availability, devices, streams)
    paths = network_paths(devices, build_topology(devices.region_names, cfg.network))
    precompute_s = time.perf_counter() - t0

    server = ServerConfig(num_rounds=num_rounds, clients_per_round=CLIENTS_PER_ROUND,
                          deadline_s=ROUND_EVERY_S, round_interval_s=ROUND_EVERY_S)
    fleet = Fleet(availability, devices.train_s_per_sample, devices.failure_rate_per_h, 1)
    with tempfile.TemporaryDirectory() as tmp:
        t1 = time.perf_counter()
        env = simpy.Environment()
        recorder = Recorder(Path(tmp))
        wiring = Wiring(env, fleet, LinkSharing(env, paths), recorder, streams,
                        Health(idle_window=10, idle_share=1.0))
        env.process(sync_server(wiring, server, NoopLearner(), lambda r, t: None))
        events = 0
        while env.peek() < float("inf"):
            env.step()
            events += 1
        recorder.merge()
        simulate_s = time.perf_counter() - t1
        status = pl.read_parquet(Path(tmp) / "clients.parquet")["status"].value_counts()
    counts = dict(zip(status["status"].to_list(), status["count"].to_list(), strict=True))
    return {
        "num_devices": num_devices, "precompute_s": precompute_s, "simulate_s": simulate_s,
        "events": events, "peak_rss_mb": peak_rss_mb(), "rounds": num_rounds,
        "ms_per_round": 1e3 * simulate_s / num_rounds,
        **{k: counts.get(k, 0) for k in ("aggregated", "late", "dropped")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1e3,1e4,1e5,1e6",
                        help="comma-separated numbers of devices")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # child process
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args.one, args.seed)))
        return
    header = ("N", "precompute_s", "simulate_s", "events", "peak_rss_mb", "ms/round",
              "rounds", "aggregated", "late", "dropped")
    print(" ".join(f"{h:>12}" for h in header))
    for size in (int(float(s)) for s in args.sizes.split(",")):
        out = subprocess.run([sys.executable, __file__, "--one", str(size), "--seed",
                              str(args.seed)], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        row = (r["num_devices"], f"{r['precompute_s']:.2f}", f"{r['simulate_s']:.2f}",
               r["events"], f"{r['peak_rss_mb']:.0f}", f"{r['ms_per_round']:.2f}",
               r["rounds"], r["aggregated"], r["late"], r["dropped"])
        print(" ".join(f"{v:>12}" for v in row), flush=True)


if __name__ == "__main__":
    main()
