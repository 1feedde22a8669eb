"""The device table: one row per device, built from the scenario with seeded streams.

A training device holds exactly one training client's data (docs/design.md §3), so row d
is client d; the unseen test devices' table is built the same way, row d test client d
(simfl.population.build.build_unseen, from streams of their own). Columns are numpy
arrays (read-only); the table is cheap at 10^6 rows. Random draws come from named
streams: ``population.region``, ``population.compute``, ``population.network``, so
changing one setting never reshuffles the others.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from simfl.population import compute, network
from simfl.population.table import DeviceTable
from simfl.rng import Streams
from simfl.scenario import PopulationConfig


def default_data_dir() -> Path | None:
    """$SIMFL_DATA_DIR when set, else None (built-in fallbacks are used)."""
    value = os.environ.get("SIMFL_DATA_DIR")
    return Path(value) if value else None


def region_counts(shares: np.ndarray, num_devices: int) -> np.ndarray:
    """Devices per region proportional to ``shares``, by largest remainder (sums to N)."""
    quota = shares / shares.sum() * num_devices
    counts = np.floor(quota).astype(np.int64)
    short = num_devices - int(counts.sum())
    order = np.argsort(-(quota - counts), kind="stable")  # largest fractional part first
    counts[order[:short]] += 1
    return counts


def assign_regions(shares: np.ndarray, num_devices: int, covariate: np.ndarray | None,
                   strength: float, rng: np.random.Generator) -> np.ndarray:
    """Region index per device, random or driven by a client covariate.

    Each device gets a key ``s * z_k + sqrt(1 - s^2) * e_k`` where ``z_k`` is the normal
    score of its covariate rank (ties broken at random), ``e_k`` independent N(0, 1) and
    ``s = strength`` the correlation of key and covariate (Gaussian copula). Devices are
    sorted by key and filled into the regions in the listed order, so with strength 1
    the lowest covariates all go to the first region, with strength 0 the assignment is
    uniformly random. ``covariate=None`` means random.
    """
    counts = region_counts(shares, num_devices)
    noise = rng.standard_normal(num_devices)
    if covariate is None or strength == 0:
        key = noise
    else:
        if covariate.shape != (num_devices,):
            raise ValueError(f"covariate shape {covariate.shape} != ({num_devices},)")
        rank = np.empty(num_devices, dtype=np.int64)
        rank[np.lexsort((rng.random(num_devices), covariate))] = np.arange(num_devices)
        scores = np.sort(rng.standard_normal(num_devices))[rank]  # normal scores by rank
        key = strength * scores + np.sqrt(max(0.0, 1.0 - strength**2)) * noise
    region_idx = np.empty(num_devices, dtype=np.int32)
    region_idx[np.argsort(key, kind="stable")] = np.repeat(
        np.arange(len(shares), dtype=np.int32), counts)
    return region_idx


def _readonly(*arrays: np.ndarray) -> None:
    for a in arrays:
        a.flags.writeable = False


def build_devices(cfg: PopulationConfig, num_clients: int, covariate: np.ndarray | None,
                  streams: Streams, data_dir: Path | None = None,
                  model_name: str = "linear") -> DeviceTable:
    """The device table for ``num_clients`` clients (training ones, or unseen test ones
    with their own ``streams``).

    Args:
        covariate: (num_clients,) client covariate for ``region_assignment = "covariate"``
            (e.g. the share of digits in the writer's data); ignored when random.
        data_dir: the shared data root ($SIMFL_DATA_DIR); phone benchmark files are read
            from ``data_dir/devices`` when present, else built-in fallbacks are used.
        model_name: a model whose registry row has a ``train_flops`` hook
            (compute.train_flops_per_sample), unless the config sets
            ``compute.train_flops_per_sample``.
    """
    if cfg.region_assignment == "covariate" and covariate is None:
        raise ValueError("region_assignment = 'covariate' needs a client covariate")
    shares = np.array([r.share for r in cfg.regions], dtype=float)
    offsets_s = np.array([r.utc_offset_h * 3600.0 for r in cfg.regions])
    region_idx = assign_regions(
        shares, num_clients, covariate if cfg.region_assignment == "covariate" else None,
        cfg.covariate_strength, streams.numpy("population.region"))
    folder = compute.devices_dir(data_dir)
    speed_rel = compute.draw_speed_rel(cfg.compute, num_clients,
                                       streams.numpy("population.compute"), folder)
    lenet_ref_s = compute.lenet_s_per_sample(folder, cfg.compute.calibration_batch_size)
    flops = compute.train_flops_per_sample(cfg.compute, model_name)
    down, up, latency = network.draw_access(cfg.network, num_clients,
                                            streams.numpy("population.network"))
    link_scale = np.array([r.link_scale for r in cfg.regions])[region_idx]
    down, up = down * link_scale, up * link_scale
    table = DeviceTable(
        client_idx=np.arange(num_clients, dtype=np.int64),
        region_idx=region_idx,
        utc_offset_s=offsets_s[region_idx],
        speed_rel=speed_rel,
        train_s_per_sample=compute.train_s_per_sample(speed_rel, lenet_ref_s, flops),
        down_bytes_per_s=down,
        up_bytes_per_s=up,
        latency_s=latency,
        failure_rate_per_h=np.full(num_clients, cfg.failure_rate_per_h),
        region_names=tuple(r.name for r in cfg.regions),
        speed_origin=compute.speed_origin(cfg.compute, folder),
    )
    _readonly(*table.columns().values())
    return table
