"""Seconds per round of local training for 100 FEMNIST clients: batched vs loop vs auto.

    SIMFL_DATA_DIR=../shared/data python bench/train_cohort.py [--clients 100] [--repeats 3]

For the linear model (batch 32, lr 1.0) and the ConvNet (batch 16, lr 0.32), one
local epoch, 100 training devices drawn at random from the writer-level split
(writers with >= 100 samples). Each configuration runs in a fresh subprocess
so that its peak resident memory (VmHWM) is its own. Also prints the
largest relative difference between the backends' updates in float64.
Without SIMFL_DATA_DIR it uses synthetic clients of FEMNIST's sizes.

``--convnet-grid`` instead measures what ``auto`` chooses for the ConvNet on a CPU: the
loop and the batched backend in chunks of 10, 20, 50 and all clients, at 1 and 2 torch
threads. Take it on a quiet machine.
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
import torch

from simfl.data import load_data
from simfl.data.packed import ClientData
from simfl.rng import Streams
from simfl.scenario import DataConfig
from simfl.train.batched import TrainHParams, train_cohort
from simfl.train.models import build_model, initial_params

MODELS = {"linear": (32, 1.0), "convnet": (16, 0.32)}


def cohort(num_clients: int) -> ClientData:
    data = load_data(DataConfig(dataset="femnist", min_samples_per_client=100), Streams(0))
    pick = np.random.default_rng(0).choice(data.train.num_clients, num_clients, replace=False)
    return data.train.subset(pick)


def peak_rss_kb() -> int:
    """This process's peak resident set (VmHWM; unlike ru_maxrss it is not inherited)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def measure(path: str, model_name: str, backend: str, repeats: int) -> dict[str, float]:
    """Run in a child process: median seconds per round after one warm-up round, and
    peak RSS (the warm-up round included). ``backend``: batched, loop, auto or
    ``batched@CHUNK`` (clients per batched call)."""
    clients: ClientData = torch.load(path, weights_only=False)
    batch_size, lr = MODELS[model_name]
    model = build_model(model_name, (1, 28, 28), 62)
    params = initial_params(model, 0, torch.float32)
    backend, _, chunk = backend.partition("@")
    hp = TrainHParams(1, batch_size, lr, backend=backend,  # type: ignore[arg-type]
                      chunk=int(chunk or 0))
    seeds = list(range(clients.num_clients))
    rss_before = peak_rss_kb()
    train_cohort(model, params, clients, hp, seeds)  # warm-up: allocator, vmap tracing
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        train_cohort(model, params, clients, hp, seeds)
        times.append(time.perf_counter() - start)
    peak_kb = peak_rss_kb()
    return {"s_per_round": float(np.median(times)), "peak_rss_mb": peak_kb / 1024,
            "round_rss_growth_mb": (peak_kb - rss_before) / 1024}


def float64_gap(clients: ClientData, model_name: str, num_clients: int) -> float:
    sub = clients.subset(np.arange(num_clients))
    sub = ClientData(sub.x.double(), sub.y, sub.offsets, sub.client_ids)
    batch_size, lr = MODELS[model_name]
    model = build_model(model_name, (1, 28, 28), 62)
    params = initial_params(model, 0, torch.float64)
    out = [train_cohort(model, params, sub, TrainHParams(1, batch_size, lr, backend=b),
                        list(range(num_clients))).deltas for b in ("batched", "loop")]
    return float(((out[0] - out[1]).norm(dim=1) / out[1].norm(dim=1)).max())


def child(path: str, model_name: str, backend: str, repeats: int, threads: int) -> dict:
    """One measurement in a fresh subprocess (its own peak RSS and thread count)."""
    out = subprocess.run([sys.executable, __file__, "--repeats", str(repeats), "--threads",
                          str(threads), "--child", path, model_name, backend],
                         capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


def convnet_grid(clients: ClientData, repeats: int) -> None:
    """The ConvNet's seconds per round for each backend, chunk size and thread count."""
    print(f"ConvNet, {clients.num_clients} FEMNIST clients, {int(clients.num_samples.sum())} "
          f"samples, one local epoch of batch 16, median of {repeats} after a warm-up round")
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "cohort.pt")
        torch.save(clients, path)
        for threads in (1, 2):
            for backend in ("loop", "batched@10", "batched@20", "batched@50", "batched"):
                r = child(path, "convnet", backend, repeats, threads)
                print(f"threads {threads}  {backend:20s} {r['s_per_round']:7.2f} s/round   "
                      f"peak RSS {r['peak_rss_mb']:6.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--convnet-grid", action="store_true")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(measure(args.child[0], args.child[1], args.child[2], args.repeats)))
        return
    clients = cohort(args.clients)
    if args.convnet_grid:
        convnet_grid(clients, args.repeats)
        return
    print(f"{clients.num_clients} FEMNIST clients, {int(clients.num_samples.sum())} samples, "
          f"one local epoch, {torch.get_num_threads()} torch threads")
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "cohort.pt")
        torch.save(clients, path)
        for model_name in args.models:
            for backend in ("batched", "loop", "auto"):  # auto: measured (simfl.train.choose)
                r = child(path, model_name, backend, args.repeats, args.threads)
                label = backend
                print(f"{model_name:8s} {label:13s} {r['s_per_round']:7.3f} s/round   "
                      f"peak RSS {r['peak_rss_mb']:7.0f} MB "
                      f"(+{r['round_rss_growth_mb']:.0f} MB during the rounds)")
    for model_name, k in (("linear", 100), ("convnet", 10)):
        if model_name not in args.models:
            continue
        k = min(k, clients.num_clients)  # --clients may be fewer
        print(f"float64 max relative |batched - loop| / |loop| over {k} clients, "
              f"{model_name}: {float64_gap(clients, model_name, k):.2e}")


if __name__ == "__main__":
    main()
