"""Seed counts for a paired comparison: the noncentral-t power of the paired t-test,
against published values and a simulation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from simfl.study.intervals import paired_power, seeds_for


def test_power_matches_the_textbook_values() -> None:
    # G*Power, "means: difference from constant (one sample / matched pairs)", two-sided
    # alpha 0.05: d = 1 with 10 pairs gives 0.8031; d = 0.5 with 34 pairs 0.8078.
    assert paired_power(10, 1.0, 1.0) == pytest.approx(0.8031, abs=1e-4)
    assert paired_power(34, 0.5, 1.0) == pytest.approx(0.8078, abs=1e-4)
    assert paired_power(10, 0.0, 1.0) == pytest.approx(0.05, abs=1e-9)


def test_power_agrees_with_a_simulation() -> None:
    rng = np.random.default_rng(0)
    diffs = rng.normal(0.7, 1.3, size=(20_000, 8))
    p = stats.ttest_1samp(diffs, 0.0, axis=1).pvalue
    assert np.mean(p < 0.05) == pytest.approx(paired_power(8, 0.7, 1.3), abs=0.01)


def test_seeds_for_is_the_least_count_reaching_the_power() -> None:
    n = seeds_for(1.0, 1.0)
    assert n == 10 and paired_power(n - 1, 1.0, 1.0) < 0.8 <= paired_power(n, 1.0, 1.0)
    assert seeds_for(0.01, 10.0, most=50) == 51
