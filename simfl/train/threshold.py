"""Who of a round's reporters trains: the rule's own selection, or Δ-FL's filter when a
panel of estimators sets its threshold (docs/design.md §7).

The learner asks one of these two, never whether there is a panel. With a panel, the
driving estimator's η̂ decides who trains; every estimator's estimate (and, on bias
rounds, the population quantile it aims at) becomes a row of ``bias.parquet``, returned
for the server to write.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from simfl.aggregate import Aggregator, Selection
from simfl.quantile.dose import dose
from simfl.quantile.estimators import Cohort
from simfl.quantile.panel import EstimatorPanel
from simfl.quantile.secagg import LOSS_REPORT

BiasColumns = dict[str, Any]  # the columns of one round's bias.parquet rows
# (F_k(w_t), n_k) over every training device, asked for on bias rounds only
Population = Callable[[], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class RuleSelection:
    """Without a panel: the rule's ``select`` on the reported losses, which devices send
    in the clear; nobody checks in, no bias rows, nothing to checkpoint."""

    aggregator: Aggregator
    loss_report_bytes: int = LOSS_REPORT.up_bytes
    wants_checkins: bool = False

    def observe_online(self, t_s: float, online_idx: np.ndarray) -> None:
        """Nothing to record."""

    def select(self, losses: np.ndarray, weights: np.ndarray, client_idx: np.ndarray,
               round_idx: int, t_s: float, population: Population
               ) -> tuple[Selection, BiasColumns | None]:
        """Who trains, by the rule, from the reporters' F_k(w_t) and sample counts n_k."""
        return self.aggregator.select(losses, weights), None

    def state_dict(self) -> None:
        return None

    def load_state_dict(self, state: None) -> None:
        """Nothing to restore."""


@dataclass
class PanelFilter:
    """Δ-FL's filter from a panel of estimators (it holds their state over rounds)."""

    panel: EstimatorPanel
    bias_every: int  # every so many rounds, the bias rows hold the population quantile
    mean_samples: float  # the training devices' mean n_k: a device weighs α_k = n_k / it

    @property
    def loss_report_bytes(self) -> int:
        """A loss report in the clear when the driver reads losses so (0: its protocol)."""
        return LOSS_REPORT.up_bytes if self.panel.driver.losses_in_clear else 0

    @property
    def wants_checkins(self) -> bool:
        return self.panel.wants_checkins

    def observe_online(self, t_s: float, online_idx: np.ndarray) -> None:
        self.panel.observe_online(t_s, online_idx)

    def select(self, losses: np.ndarray, weights: np.ndarray, client_idx: np.ndarray,
               round_idx: int, t_s: float, population: Population
               ) -> tuple[Selection, BiasColumns]:
        """Who of the cohort (the reporters' F_k(w_t) and n_k at ``t_s``) trains: F_k(w_t)
        >= the driver's η̂; and the round's bias rows, with ``population()`` on bias
        rounds. The estimators' state advances by one round."""
        cohort = Cohort(losses, weights / self.mean_samples, client_idx, t_s)
        bias_round = self.bias_every and round_idx % self.bias_every == 0
        everyone = population() if bias_round or self.panel.reads_population else None
        whole = None if everyone is None else Cohort(
            everyone[0], everyone[1] / self.mean_samples, np.arange(len(everyone[0])), t_s)
        estimates = self.panel.estimate(cohort, round_idx, whole)
        bias = self.panel.bias_columns(round_idx, cohort, estimates,
                                       everyone if bias_round else None)
        offsets, shifts = zip(*(dose(e, round_idx) for e in self.panel.estimators), strict=True)
        bias.update(offset_nats=np.array(offsets), level_shift=np.array(shifts))
        driver = estimates[self.panel.driver.name]
        selection = Selection(keep=cohort.losses >= driver.threshold,
                              threshold=driver.threshold, exchanges=driver.exchanges,
                              shadow=self.panel.shadow_messages(estimates))
        return selection, bias

    def state_dict(self) -> dict[str, Any]:
        return self.panel.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.panel.load_state_dict(state)
