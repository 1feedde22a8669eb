"""Δ-FL's filter when a panel of estimators sets its threshold (docs/design.md §7).

The driving estimator's η̂ decides who trains; every estimator's estimate (and, on
bias rounds, the population quantile it aims at) becomes a row of ``bias.parquet``,
returned for the server to write.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simfl.aggregate import Selection
from simfl.quantile.estimators import Cohort
from simfl.quantile.panel import EstimatorPanel

BiasColumns = dict[str, Any]  # the columns of one round's bias.parquet rows


def panel_selection(panel: EstimatorPanel, cohort: Cohort, round_idx: int,
                    population: tuple[np.ndarray, np.ndarray] | None
                    ) -> tuple[Selection, BiasColumns]:
    """Who of ``cohort`` trains (F_k(w_t) >= the driver's η̂), and the round's bias rows.
    ``population`` = (F_k(w_t), α_k) over every training device on bias rounds, else None.
    The estimators' state advances by one round."""
    estimates = panel.estimate(cohort, round_idx)
    bias = panel.bias_columns(round_idx, cohort, estimates, population)
    driver = estimates[panel.driver.name]
    selection = Selection(keep=cohort.losses >= driver.threshold, threshold=driver.threshold,
                          exchanges=driver.exchanges)
    return selection, bias
