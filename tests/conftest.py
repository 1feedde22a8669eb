"""Shared fixtures: small packed cohorts and the real-data location; the order in which
the test files run."""

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


# The test files that take longest (pytest --durations on the 2-core machine), run first;
# then the other files holding slow tests, then the rest. With several processes
# (make test: pytest-xdist, a file's tests in one process, files handed out in this
# order) the long files start at once and the short ones fill in, so the processes end
# together. Only the order changes: no test depends on it.
LONGEST_FIRST = ("runs/test_sweep.py", "test_tutorial.py", "test_extending.py",
                 "runs/test_resume.py", "data/test_femnist.py", "algorithms/drfl/test_admm.py")
TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def where(item: pytest.Item) -> str:
        return item.path.relative_to(TESTS).as_posix()

    with_slow = {where(item) for item in items if item.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> int:
        path = where(item)
        if path in LONGEST_FIRST:
            return LONGEST_FIRST.index(path)
        return len(LONGEST_FIRST) + (path not in with_slow)

    items.sort(key=rank)  # stable: a file's tests keep their order
