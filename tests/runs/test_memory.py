"""simfl.runs.memory's peak: a run's own, not an earlier run's of the same process."""

from __future__ import annotations

import numpy as np

from simfl.runs.memory import peak_bytes, reset_peak


def test_the_peak_rises_with_an_allocation_and_resets_after_it_is_freed() -> None:
    reset_peak()
    before = peak_bytes()
    block = np.ones(300 * 2**20 // 8)  # 300 MiB, touched
    grown = peak_bytes()
    del block
    reset_peak()
    after = peak_bytes()
    assert grown - before >= 250 * 2**20
    assert grown - after >= 250 * 2**20  # the reset forgot the freed block
