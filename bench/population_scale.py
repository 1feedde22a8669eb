"""Scale of the population side: 7 simulated days, a round every 10 minutes, N devices.

    SIMFL_DATA_DIR=../shared/data python bench/population_scale.py [--sizes 1e3,1e4,1e5,1e6]

Diurnal availability (default profile, 3 regions, 1 h sessions), phone speeds from
the benchmark files when $SIMFL_DATA_DIR is set, default network. Every 10 simulated
minutes a small server process (this file's, not simfl.sim.server) picks 100 devices
uniformly among those online and idle, and each does download -> local training ->
upload of a ConvNet-sized model through simfl.sim.network; the numerics are a no-op.
A task counts as completed when its device stayed online throughout
(``online_until`` at dispatch >= end time). Each N runs in a fresh subprocess so its
peak resident memory (ru_maxrss) is its own.

Reported per N: precompute wall seconds (device table, availability, topology),
simulation wall seconds, SimPy events processed, peak RSS, and the server's mean
wall cost per round (selection + dispatch), which should not grow with N.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Generator
from dataclasses import asdict, dataclass

import numpy as np
import simpy

from simfl.population import (
    Availability,
    build_availability,
    build_devices,
    build_topology,
    default_data_dir,
    network_paths,
)
from simfl.population.compute import TRAIN_FLOPS_PER_SAMPLE
from simfl.rng import Streams
from simfl.scenario import AvailabilityConfig, PopulationConfig
from simfl.sim.network import LinkSharing

DAYS = 7
ROUND_EVERY_S = 600.0
CLIENTS_PER_ROUND = 100
MODEL_BYTES = 4 * 115_646  # the FEMNIST ConvNet in float32
SAMPLES_PER_CLIENT = 180  # about the median FEMNIST writer's training samples
LOCAL_EPOCHS = 1
assert TRAIN_FLOPS_PER_SAMPLE["convnet"] > 0


@dataclass
class Stats:
    rounds: int = 0
    selected: int = 0
    completed: int = 0
    dropped: int = 0
    server_wall_s: float = 0.0
    online_sum: int = 0


def device_task(env: simpy.Environment, net: LinkSharing, device: int, compute_s: float,
                online_until_s: float, busy: np.ndarray,
                stats: Stats) -> Generator[simpy.Event, object, None]:
    yield net.transfer(device, MODEL_BYTES, "down")
    yield env.timeout(compute_s)
    yield net.transfer(device, MODEL_BYTES, "up")
    busy[device] = False
    if env.now <= online_until_s:
        stats.completed += 1
    else:
        stats.dropped += 1


def server(env: simpy.Environment, avail: Availability, net: LinkSharing,
           compute_s: np.ndarray, busy: np.ndarray, streams: Streams,
           stats: Stats) -> Generator[simpy.Event, object, None]:
    while True:
        start = time.perf_counter()
        now = env.now
        stats.online_sum += avail.num_online(now)
        rng = streams.numpy("selection", stats.rounds)
        chosen = avail.sample_online(now, CLIENTS_PER_ROUND, rng, busy)
        busy[chosen] = True
        until = avail.online_until(chosen, now)
        for device, until_s in zip(chosen.tolist(), until.tolist(), strict=True):
            env.process(device_task(env, net, device, float(compute_s[device]), until_s,
                                    busy, stats))
        stats.selected += chosen.size
        stats.rounds += 1
        stats.server_wall_s += time.perf_counter() - start
        yield env.timeout(ROUND_EVERY_S)


def run_one(num_devices: int, seed: int) -> dict[str, float]:
    horizon_s = DAYS * 86400.0
    t0 = time.perf_counter()
    cfg = PopulationConfig(availability=AvailabilityConfig(mode="diurnal",
                                                           horizon_s=horizon_s))
    streams = Streams(seed)
    devices = build_devices(cfg, num_devices, None, streams, default_data_dir(), "convnet")
    avail = build_availability(cfg.availability, devices, streams)
    paths = network_paths(devices, build_topology(devices.region_names, cfg.network))
    compute_s = devices.train_s_per_sample * SAMPLES_PER_CLIENT * LOCAL_EPOCHS
    precompute_s = time.perf_counter() - t0

    t1 = time.perf_counter()
    env = simpy.Environment()
    net = LinkSharing(env, paths)
    stats = Stats()
    busy = np.zeros(num_devices, dtype=bool)
    env.process(server(env, avail, net, compute_s, busy, streams, stats))
    events = 0
    while env.peek() < horizon_s:
        env.step()
        events += 1
    simulate_s = time.perf_counter() - t1
    return {
        "num_devices": num_devices, "precompute_s": precompute_s, "simulate_s": simulate_s,
        "events": events, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        / 1024, "num_intervals": int(avail.t_on_s.size),
        "server_us_per_round": 1e6 * stats.server_wall_s / max(stats.rounds, 1),
        "mean_online_frac": stats.online_sum / max(stats.rounds, 1) / num_devices,
        **{k: v for k, v in asdict(stats).items() if k not in ("server_wall_s", "online_sum")},
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
    header = ("N", "precompute_s", "simulate_s", "events", "peak_rss_mb", "server_us/round",
              "rounds", "selected", "completed", "dropped")
    print(" ".join(f"{h:>15}" for h in header))
    for size in (int(float(s)) for s in args.sizes.split(",")):
        out = subprocess.run([sys.executable, __file__, "--one", str(size), "--seed",
                              str(args.seed)], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        row = (r["num_devices"], f"{r['precompute_s']:.2f}", f"{r['simulate_s']:.2f}",
               r["events"], f"{r['peak_rss_mb']:.0f}", f"{r['server_us_per_round']:.0f}",
               r["rounds"], r["selected"], r["completed"], r["dropped"])
        print(" ".join(f"{v:>15}" for v in row), flush=True)


if __name__ == "__main__":
    main()
