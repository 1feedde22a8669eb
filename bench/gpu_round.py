"""Local training of a cohort on a GPU: batched (torch.func) vs the per-client loop.

    SIMFL_DATA_DIR=../shared/data python bench/gpu_round.py [--cohorts 10 100 1000] [--json F]

For the linear model (batch 32, lr 1.0) and the ConvNet (batch 16, lr 0.32), one
local epoch, cohorts of FEMNIST training writers (writers with >= 100 samples,
writer-level split) drawn at random, the data on the GPU as in a run. Prints,
per model, cohort size and backend: seconds per round (median of timed rounds
after an untimed warm-up, CUDA-synchronised), client updates per second,
achieved FLOP/s (the model's forward + backward FLOPs per sample, counted by
``torch.utils.flop_counter``, times the cohort's samples, over the round time)
and the peak GPU memory of the round above the resident data. Then: the float64
gap between the backends, and the effect of ``precision`` (tf32, bf16) on the
ConvNet's updates and time. Without SIMFL_DATA_DIR it uses synthetic clients.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from simfl.data import load_data
from simfl.data.packed import ClientData
from simfl.rng import Streams
from simfl.scenario import DataConfig
from simfl.train.batched import TrainHParams, train_cohort
from simfl.train.models import build_model, initial_params

MODELS = {"linear": (32, 1.0), "convnet": (16, 0.32)}
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # cpu: a dry run
ON_GPU = DEVICE.type == "cuda"


def training_clients() -> ClientData:
    data = load_data(DataConfig(dataset="femnist", min_samples_per_client=100), Streams(0))
    train = data.train.to(DEVICE)
    assert isinstance(train, ClientData)  # FEMNIST is held in memory
    return train


def synchronize() -> None:
    if ON_GPU:
        torch.cuda.synchronize()


def flops_per_sample(model: torch.nn.Module, clients: ClientData, batch: int) -> float:
    """Forward + backward FLOPs of one minibatch of real samples, per sample."""
    x, y = clients.x[:batch].float(), clients.y[:batch]
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / batch


def time_rounds(model, params, clients, hp, repeats: int) -> tuple[float, float]:  # noqa: ANN001
    """Median seconds per round and peak GPU memory (bytes) above what was allocated before."""
    seeds = list(range(clients.num_clients))
    train_cohort(model, params, clients, hp, seeds)  # warm-up
    synchronize()
    base = torch.cuda.memory_allocated() if ON_GPU else 0
    if ON_GPU:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        train_cohort(model, params, clients, hp, seeds)
        synchronize()
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() - base if ON_GPU else 0
    return float(np.median(times)), float(peak)


def relative_gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).norm(dim=1) / b.norm(dim=1)).max())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cohorts", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loop-repeats", type=int, default=2)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    train = training_clients()
    name = torch.cuda.get_device_name() if ON_GPU else "CPU (dry run)"
    print(f"{name}, torch {torch.__version__}, "
          f"{train.num_clients} FEMNIST training writers, {int(train.num_samples.sum())} samples")
    rng = np.random.default_rng(0)
    rows = []
    for model_name, (batch, lr) in MODELS.items():
        model = build_model(model_name, (1, 28, 28), 62).to(DEVICE)
        params = initial_params(model, 0, torch.float32).to(DEVICE)
        per_sample = flops_per_sample(model, train, batch)
        for k in args.cohorts:
            clients = train.subset(rng.choice(train.num_clients, min(k, train.num_clients),
                                              replace=False))
            samples = int(clients.num_samples.sum())
            for backend in ("batched", "loop"):
                hp = TrainHParams(1, batch, lr, backend=backend)
                repeats = args.repeats if backend == "batched" else args.loop_repeats
                s, peak = time_rounds(model, params, clients, hp, repeats)
                row = {"model": model_name, "clients": clients.num_clients, "samples": samples,
                       "backend": backend, "s_per_round": s, "updates_per_s": k / s,
                       "tflop_per_s": per_sample * samples / s / 1e12, "peak_gb": peak / 1e9}
                rows.append(row)
                print(f"{model_name:8s} K={k:5d} {backend:8s} {s * 1e3:9.1f} ms/round "
                      f"{k / s:9.0f} updates/s {row['tflop_per_s']:7.3f} TFLOP/s "
                      f"peak +{row['peak_gb']:.2f} GB", flush=True)
    checks = precision_and_float64(train, rng)
    print(json.dumps(checks, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "checks": checks}, f, indent=1)


def precision_and_float64(train: ClientData, rng: np.random.Generator) -> dict[str, float]:
    """Batched vs loop in float64, and tf32 / bf16 against exact float32 (100 clients)."""
    clients = train.subset(rng.choice(train.num_clients, 100, replace=False))
    seeds = list(range(clients.num_clients))
    out: dict[str, float] = {}
    for model_name, (batch, lr) in MODELS.items():
        model = build_model(model_name, (1, 28, 28), 62).to(DEVICE)
        p64 = initial_params(model, 0, torch.float64).to(DEVICE)
        d64 = {b: train_cohort(model, p64, clients, TrainHParams(1, batch, lr, backend=b),
                               seeds).deltas for b in ("batched", "loop")}
        out[f"{model_name}_float64_batched_vs_loop"] = relative_gap(d64["batched"], d64["loop"])
        p32 = p64.float()
        for precision in ("fp32", "tf32", "bf16"):
            hp = TrainHParams(1, batch, lr, backend="batched", precision=precision)
            d = train_cohort(model, p32, clients, hp, seeds).deltas
            out[f"{model_name}_{precision}_vs_float64"] = relative_gap(d.double(), d64["loop"])
            out[f"{model_name}_{precision}_ms_per_round"] = 1e3 * time_rounds(
                model, p32, clients, hp, 3)[0]
    return out


if __name__ == "__main__":
    main()
