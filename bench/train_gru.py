"""Seconds per round and peak memory of the Shakespeare GRU's local training, batched vs loop.

    SIMFL_DATA_DIR=../shared/data python bench/train_gru.py [--clients 10] [--repeats 2]

``--clients`` training roles (writers with >= 101 samples, drawn with seed 0), one local
epoch of batch 16, lr 1.0, float32, one torch thread; each backend in a fresh subprocess so
that its peak resident memory (VmHWM) is its own. Also prints the largest relative
difference between the backends' updates in float64 on 4 small roles.
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
from train_cohort import peak_rss_kb  # bench/train_cohort.py

from simfl.data import load_data
from simfl.data.packed import ClientData
from simfl.rng import Streams
from simfl.scenario import DataConfig
from simfl.train.batched import TrainHParams, train_cohort
from simfl.train.models import build_model, initial_params


def roles(num_clients: int) -> ClientData:
    data = load_data(DataConfig(dataset="shakespeare", min_samples_per_client=101), Streams(0))
    pick = np.random.default_rng(0).choice(data.train.num_clients, num_clients, replace=False)
    return data.train.subset(pick)


def measure(path: str, backend: str, repeats: int) -> dict[str, float]:
    clients: ClientData = torch.load(path, weights_only=False)
    model = build_model("gru", (20,), 53)
    params = initial_params(model, 0, torch.float32)
    hp = TrainHParams(1, 16, 1.0, backend=backend)  # type: ignore[arg-type]
    seeds = list(range(clients.num_clients))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        train_cohort(model, params, clients, hp, seeds)
        times.append(time.perf_counter() - start)
    return {"s_per_round": float(np.median(times)), "peak_rss_mb": peak_rss_kb() / 1024}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.child:
        print(json.dumps(measure(args.child[0], args.child[1], args.repeats)))
        return
    clients = roles(args.clients)
    print(f"{clients.num_clients} Shakespeare roles, {int(clients.num_samples.sum())} samples "
          f"(largest {int(clients.num_samples.max())}), one local epoch, batch 16, 1 thread")
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "roles.pt")
        torch.save(clients, path)
        for backend in ("batched", "loop"):
            out = subprocess.run([sys.executable, __file__, "--repeats", str(args.repeats),
                                  "--child", path, backend],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout)
            print(f"gru {backend:8s} {r['s_per_round']:7.2f} s/round   "
                  f"peak RSS {r['peak_rss_mb']:6.0f} MB")
    small = clients.subset(np.argsort(clients.num_samples)[:4])  # --clients may be fewer
    small = ClientData(small.x.double(), small.y, small.offsets, small.client_ids)
    model = build_model("gru", (20,), 53)
    params = initial_params(model, 0, torch.float64)
    a, b = (train_cohort(model, params, small, TrainHParams(1, 16, 1.0, backend=bk),
                         [0] * small.num_clients) for bk in ("batched", "loop"))
    gap = float(((a.deltas - b.deltas).norm(dim=1) / b.deltas.norm(dim=1)).max())
    print(f"float64 max relative |batched - loop| / |loop| over {small.num_clients} roles: "
          f"{gap:.2e}")


if __name__ == "__main__":
    main()
