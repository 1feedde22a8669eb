"""``[aggregator]``: the aggregation rule and its hyper-parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from simfl.scenario.fields import (
    NON_NEGATIVE,
    NON_NEGATIVE_BOUNDED,
    POSITIVE,
    THETA,
    opt,
    params_table,
)


@dataclass(frozen=True)
class AggregatorConfig:
    """The aggregation rule (simfl/aggregate/, one module each) and its hyperparameters."""

    # fedavg, fedprox, deltafl, fedavg_sub, qffl, term, afl, drfa or a plug-in
    # (simfl.plugins; the keys each reads: plugins.AGGREGATORS)
    name: str = "fedavg"
    # Delta-FL: keep the clients in the top-theta loss tail; fedavg_sub: select
    # round(theta * server.clients_per_round) devices (Delta-FL's count varies: fedavg_sub.py)
    theta: float = opt(0.5, THETA)
    # FedProx: (mu / 2) * ||w - w_t||^2 in every local loss
    mu: float = opt(0.01, NON_NEGATIVE_BOUNDED)
    q: float = opt(1.0, NON_NEGATIVE)  # q-FFL: updates weighted by F_k(w_t)^q (0 = uniform FedAvg)
    # TERM: weights ∝ alpha_k * exp(tilt * F_k(w_t)); > 0 for fairness, < 0 against outliers
    tilt: float = 1.0
    # AFL (gamma_lambda) and DRFA (tau * gamma): projected-ascent step of the mixture
    # weights lambda per round. A round moves lambda_k by about step * (N / K) * F_k,
    # against lambda_k ~ 1 / N: keep step << K / (N^2 * loss).
    lambda_step: float = opt(1e-5, NON_NEGATIVE_BOUNDED)
    # fedavg, deltafl: correct the mean for unequal participation (sync only;
    # simfl/aggregate/participation.py): "fedau" weights each update by its device's mean
    # interval between participations (Wang & Ji 2024), "mifa" averages every device's
    # latest update, stale ones too (Gu et al. 2021; N x P numbers of memory)
    participation: Literal["none", "fedau", "mifa"] = "none"
    # FedAU's cutoff K: an interval closes after K rounds without participation, so no
    # weight exceeds K (participation.FEDAU_CUTOFF)
    fedau_cutoff: int = opt(50, POSITIVE)
    params: dict[str, Any] = params_table()

