"""Shared fixtures: small packed cohorts and the real-data location."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from simfl.data.packed import ClientData


def data_dir() -> Path | None:
    """$SIMFL_DATA_DIR when set (CI sets it to ../shared/data), else None."""
    value = os.environ.get("SIMFL_DATA_DIR")
    return Path(value) if value else None


requires_data = pytest.mark.skipif(data_dir() is None, reason="SIMFL_DATA_DIR is not set")


def make_cohort(num_samples: list[int], input_shape: tuple[int, ...], num_classes: int,
                dtype: torch.dtype = torch.float64, seed: int = 0) -> ClientData:
    """Random packed client data with the given per-client sizes."""
    generator = torch.Generator().manual_seed(seed)
    total = sum(num_samples)
    offsets = np.concatenate([[0], np.cumsum(num_samples)]).astype(np.int64)
    x = torch.randn(total, *input_shape, generator=generator, dtype=dtype)
    y = torch.randint(0, num_classes, (total,), generator=generator)
    ids = np.array([f"c{k}" for k in range(len(num_samples))])
    return ClientData(x, y, offsets, ids)
