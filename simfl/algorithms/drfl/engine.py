"""DRFL's iterations in simulated time on simfl's device population.

Every ADMM iteration needs every client (Algorithm 1 has no partial participation), so
an iteration lasts until the slowest device has downloaded the broadcast, solved its
subproblem and uploaded its reply; a device that is offline is waited for until its next
online interval, and one that goes offline before its upload arrives loses that attempt
and starts again when it is back (docs/design.md §3: a device that goes offline mid-task loses
its work). Transfers share the network through simfl.sim.links.LinkSharing.

The numerics do not depend on the timing (all clients always answer), so the schedule is
simulated on its own and joined to the ADMM's per-iteration records by iteration.
Compute cost model (an assumption, not from the paper): one client subproblem costs
``solver_passes`` passes over its batch at the device's seconds per sample of a linear
model of the same dimension (train_flops_per_sample = 6 (d + 1): forward, backward).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import replace

import numpy as np
import polars as pl
import simpy

from simfl.population.availability import Availability
from simfl.population.build import Population, build_population
from simfl.rng import Streams
from simfl.scenario import PopulationConfig
from simfl.sim.links import LinkSharing

BYTES_PER_NUMBER = 8  # the ADMM exchanges float64 vectors


def build_fleet(cfg: PopulationConfig, num_clients: int, dim: int, solver_passes: float,
                streams: Streams) -> Population:
    """The devices of the DRFL clients (device s holds client s), their availability and
    network, for a ``dim``-parameter linear model: runs/build.py's population builder."""
    flops = 6.0 * dim * solver_passes  # per sample and subproblem
    cfg = replace(cfg, compute=replace(cfg.compute, train_flops_per_sample=flops))
    return build_population(cfg, num_clients, None, streams, "linear")


def message_bytes(dim: int) -> int:
    """One client's download (w - y1/beta, t - y2/beta) or upload (w_s, its C2 value)."""
    return (dim + 1) * BYTES_PER_NUMBER


def _next_online_s(availability: Availability, device: int, t_s: float) -> float:
    """t_s if the device is online then, else the start of its next online interval."""
    if t_s > availability.horizon_s:
        raise ValueError(f"t = {t_s:.0f} s is past population.availability.horizon_s")
    if availability.is_online(device, t_s).item():
        return t_s
    lo, hi = availability.offsets[device], availability.offsets[device + 1]
    starts = availability.t_on_s[lo:hi]
    later = starts[starts > t_s]
    if later.size == 0 or later[0] > availability.horizon_s:
        raise ValueError(f"device {device} is never online again after t = {t_s:.0f} s "
                         "within population.availability.horizon_s")
    return float(later[0])


def _client(env: simpy.Environment, net: LinkSharing, fleet: Population, device: int,
            num_bytes: int, work_s: float, log: dict[str, float]) -> Generator:
    """One client's part of an iteration, retried until it completes while online."""
    while True:
        start_s = _next_online_s(fleet.availability, device, env.now)
        log["wait_s"] = max(log["wait_s"], start_s - env.now)
        if start_s > env.now:
            yield env.timeout(start_s - env.now)
        until_s = float(fleet.availability.online_until(device, env.now))
        yield net.transfer(device, num_bytes, "down")
        log["bytes_down"] += num_bytes
        yield env.timeout(work_s)
        yield net.transfer(device, num_bytes, "up")
        log["bytes_up"] += num_bytes
        if env.now <= until_s or math.isinf(until_s):
            return
        log["num_retries"] += 1


def simulate_iterations(fleet: Population, num_iters: int, num_bytes: int,
                        batch_sizes: np.ndarray) -> pl.DataFrame:
    """One row per iteration: iteration, t_start_s, t_end_s, bytes_down, bytes_up,
    num_retries, wait_s (longest wait for an offline device)."""
    env = simpy.Environment()
    net = LinkSharing(env, fleet.paths)
    work_s = batch_sizes * fleet.devices.train_s_per_sample  # (S,)
    rows: list[dict[str, float]] = []

    def server() -> Generator:
        for k in range(1, num_iters + 1):
            log = {"iteration": k, "t_start_s": env.now, "bytes_down": 0.0, "bytes_up": 0.0,
                   "num_retries": 0.0, "wait_s": 0.0}
            yield env.all_of([env.process(_client(env, net, fleet, s, num_bytes,
                                                  float(work_s[s]), log))
                              for s in range(fleet.devices.num_devices)])
            rows.append({**log, "t_end_s": env.now})

    env.process(server())
    env.run()
    return pl.DataFrame(rows).with_columns(
        pl.col("iteration", "bytes_down", "bytes_up", "num_retries").cast(pl.Int64))
