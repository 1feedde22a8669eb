"""Δ-FL: FedAvg over the clients in the upper θ-tail of the losses.

Laguel, Pillutla, Malick, Harchaoui, "A Superquantile Approach to Federated
Learning with Heterogeneous Devices", CISS 2021 (long version
arXiv:2112.09429, Algorithm 2). Each cohort client reports F_k(w_t), its loss
under the incoming model; the server computes η̂ = Q_{1-θ}, the (1−θ)
α-weighted quantile of the reported losses, and only the clients with
F_k(w_t) ≥ η̂ train; their updates are averaged with weights α_k. With θ = 1,
η̂ is the smallest loss, every client is kept and the rule is FedAvg exactly.
``participation`` corrects the kept devices' mean for unequal participation (FedAU,
MIFA: simfl.aggregate.participation, which says what "kept" means for MIFA's stored
updates); "none" is the rule above.
"""

from __future__ import annotations

import numpy as np

from simfl.aggregate.base import Aggregator, Selection, weighted_mean
from simfl.aggregate.participation import FEDAU_CUTOFF, participating
from simfl.quantile import weighted_quantile


def deltafl(theta: float, participation: str = "none",
            fedau_cutoff: int = FEDAU_CUTOFF) -> Aggregator:
    if not 0.0 < theta <= 1.0:
        raise ValueError(f"theta must be in (0, 1], got {theta}")

    def select(losses: np.ndarray, weights: np.ndarray) -> Selection:
        threshold = weighted_quantile(losses, weights, 1.0 - theta)
        return Selection(keep=np.asarray(losses) >= threshold, threshold=threshold)

    rule = Aggregator("deltafl", needs_losses=True, select=select, combine=weighted_mean)
    return participating(rule, participation, fedau_cutoff, tail=theta)
