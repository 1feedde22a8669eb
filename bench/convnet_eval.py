"""Seconds to evaluate the ConvNet on FEMNIST devices: simfl's evaluation pooling
(``relu_max_pool`` without autograd: a strided maximum) against ``torch.max_pool2d``.

    SIMFL_DATA_DIR=../shared/data python bench/convnet_eval.py [--devices 200] [--threads 1]

The papers' ConvNet protocol evaluates its 865 + 865 devices every 10 rounds and
every Δ-FL round asks the 100 cohort devices for their losses, forward passes
without autograd, where PyTorch's CPU ``max_pool2d`` is slow. This evaluates the
first ``--devices`` unseen test devices of the population of
``scenarios/paper/femnist_convnet.toml`` (seed 0) with the model at its seed-0
initialisation, in batches of 256 (``eval.batch_size``), both ways, twice,
and prints the seconds and whether the per-device losses and errors are equal to
the bit. Take it on a quiet machine.
"""

from __future__ import annotations

import argparse
import time
from unittest import mock

import numpy as np
import torch

from simfl.data import load_data
from simfl.rng import Streams
from simfl.scenario import load_scenario
from simfl.train import models
from simfl.train.evaluate import evaluate_cohort
from simfl.train.models import build_model, initial_params

SCENARIO = "scenarios/paper/femnist_convnet.toml"  # the papers' 865 + 865 writers

def max_pool2d_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.max_pool2d(torch.relu(x), 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data = load_data(load_scenario(SCENARIO).data, Streams(0))
    clients = data.test.subset(np.arange(min(args.devices, data.test.num_clients)))
    model = build_model("convnet", (1, 28, 28), 62)
    params = initial_params(model, 0, torch.float32)
    print(f"ConvNet evaluation of {clients.num_clients} FEMNIST test devices "
          f"({int(clients.num_samples.sum())} samples), batch 256, {args.threads} thread(s)")
    for attempt in range(2):
        start = time.perf_counter()
        fast = evaluate_cohort(model, params, clients, 256)
        fast_s = time.perf_counter() - start
        with mock.patch.object(models, "relu_max_pool", max_pool2d_reference):
            start = time.perf_counter()
            reference = evaluate_cohort(model, params, clients, 256)
            reference_s = time.perf_counter() - start
        same = (np.array_equal(fast.losses, reference.losses)
                and np.array_equal(fast.errors, reference.errors))
        print(f"  try {attempt + 1}: strided maximum {fast_s:.1f} s, max_pool2d "
              f"{reference_s:.1f} s ({reference_s / fast_s:.2f}x); losses and errors "
              f"equal to the bit: {same}")


if __name__ == "__main__":
    main()
