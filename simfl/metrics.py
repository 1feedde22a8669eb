"""Summaries of the per-device error distribution (the papers' headline metrics).

The Δ-FL papers report, over the unseen test devices, the mean of the
per-device misclassification error and its 90th percentile; both are
unweighted across devices (every device counts once, whatever its size).
"""

from __future__ import annotations

import numpy as np

TAIL_LEVEL = 0.9


def error_summary(errors: np.ndarray) -> dict[str, float]:
    """Mean and 90th percentile (linear interpolation) of per-device errors."""
    errors = np.asarray(errors, dtype=np.float64)
    if errors.size == 0:
        return {"mean": float("nan"), "p90": float("nan")}
    return {"mean": float(errors.mean()), "p90": float(np.quantile(errors, TAIL_LEVEL))}
