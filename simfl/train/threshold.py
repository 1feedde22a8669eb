"""Δ-FL's filter when a panel of estimators sets its threshold (docs/design.md §7).

The driving estimator's η̂ decides who trains; every estimator's estimate (and, on
bias rounds, the population quantile it aims at) becomes a row of ``bias.parquet``,
returned for the server to write.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from simfl.aggregate import Selection
from simfl.quantile.estimators import Cohort
from simfl.quantile.panel import EstimatorPanel

BiasColumns = dict[str, Any]  # the columns of one round's bias.parquet rows


@dataclass
class PanelFilter:
    """Δ-FL's filter from a panel of estimators (it holds their state over rounds)."""

    panel: EstimatorPanel
    bias_every: int  # every so many rounds, the bias rows hold the population quantile

    def select(self, cohort: Cohort, round_idx: int,
               population: Callable[[], tuple[np.ndarray, np.ndarray]]
               ) -> tuple[Selection, BiasColumns]:
        """Who of ``cohort`` trains (F_k(w_t) >= the driver's η̂), and the round's bias rows;
        ``population()`` = (F_k(w_t), α_k) over every training device, asked for on bias
        rounds. The estimators' state advances by one round."""
        estimates = self.panel.estimate(cohort, round_idx)
        bias_round = self.bias_every and round_idx % self.bias_every == 0
        bias = self.panel.bias_columns(round_idx, cohort, estimates,
                                       population() if bias_round else None)
        driver = estimates[self.panel.driver.name]
        selection = Selection(keep=cohort.losses >= driver.threshold,
                              threshold=driver.threshold, exchanges=driver.exchanges,
                              shadow=self.panel.shadow_messages(estimates))
        return selection, bias
