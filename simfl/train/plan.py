"""A round's local-training plan: the hyper-parameters (TrainHParams) and every client's
minibatches (BatchPlan, plan_batches), shared by the batched and the loop backends
(simfl.train.batched, simfl.train.loop)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

Backend = Literal["auto", "batched", "loop"]
Precision = Literal["fp32", "tf32", "bf16"]


@dataclass(frozen=True)
class TrainHParams:
    local_epochs: int
    batch_size: int
    lr: float
    l2: float = 0.0  # (l2 / 2) ||w||^2
    prox_mu: float = 0.0  # (mu / 2) ||w - w_t||^2
    backend: Backend = "auto"
    precision: Precision = "fp32"
    chunk: int = 0  # slots: clients per batched step; 0: chunk_size decides (halved on GPU OOM)


@dataclass(frozen=True)
class BatchPlan:
    """Every client's minibatches: ``rows[k, s, :]`` are rows of the cohort's ``x`` (of a
    view's: rows of the whole side, simfl.data.packed.ClientData.view)."""

    rows: torch.Tensor  # (K, S, B) int64; padded entries point at row 0
    mask: torch.Tensor  # (K, S, B) bool, True for real samples
    num_steps: np.ndarray  # (K,) steps per client = epochs * ceil(n_k / B)


def steps_of(num_samples: np.ndarray, epochs: int, batch_size: int) -> tuple[np.ndarray, int]:
    """(K,) steps per client and the minibatch size used. A minibatch larger than every
    client is the whole client: the same steps and means without padding."""
    batch_size = max(1, min(batch_size, int(np.max(num_samples, initial=1))))
    return epochs * -(-np.asarray(num_samples, dtype=np.int64) // batch_size), batch_size


def plan_batches(
    num_samples: np.ndarray, epochs: int, batch_size: int, seeds: Sequence[int],
    starts: np.ndarray | None = None,
) -> BatchPlan:
    """Shuffle each client's samples every epoch (its own generator) and cut minibatches;
    ``starts``: each client's first row (a view's ``ClientData.starts``; None: packed)."""
    num_samples = np.asarray(num_samples, dtype=np.int64)
    num_steps, batch_size = steps_of(num_samples, epochs, batch_size)
    steps_per_epoch = num_steps // epochs
    offsets = np.concatenate([[0], np.cumsum(num_samples)]) if starts is None else starts
    k_total, s_max = len(num_samples), int(num_steps.max(initial=0))
    rows = torch.zeros(k_total, s_max * batch_size, dtype=torch.int64)
    mask = torch.zeros(k_total, s_max * batch_size, dtype=torch.bool)
    for k, (n, seed) in enumerate(zip(num_samples.tolist(), seeds, strict=True)):
        generator = torch.Generator().manual_seed(int(seed))
        span = steps_per_epoch[k] * batch_size
        for e in range(epochs):
            start = e * span
            rows[k, start : start + n] = offsets[k] + torch.randperm(n, generator=generator)
            mask[k, start : start + n] = True
    shape = (k_total, s_max, batch_size)
    return BatchPlan(rows.view(shape), mask.view(shape), num_steps)
