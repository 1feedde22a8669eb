"""mean ± half-width of the 95 % t-interval, as the study tables print it (bench scripts)."""

from __future__ import annotations

import numpy as np
from scipy import stats


def ci(values: np.ndarray, digits: int = 3, signed: bool = True) -> str:
    """mean ± half-width of the 95 % t-interval (n - 1 degrees of freedom; nan for n = 1)."""
    n = len(values)
    half = stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / np.sqrt(n) if n > 1 else np.nan
    sign = "+" if signed else ""
    return f"{values.mean():{sign}.{digits}f} ± {half:.{digits}f}"
