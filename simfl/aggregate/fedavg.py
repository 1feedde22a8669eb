"""FedAvg: the α-weighted mean of the client models (α_k ∝ local samples).

McMahan, Moore, Ramage, Hampson, Agüera y Arcas, "Communication-Efficient
Learning of Deep Networks from Decentralized Data", AISTATS 2017.
``participation`` corrects the mean for unequal participation (FedAU, MIFA:
simfl.aggregate.participation); "none" is the rule above.
"""

from __future__ import annotations

from simfl.aggregate.base import Aggregator, keep_all, weighted_mean
from simfl.aggregate.participation import FEDAU_CUTOFF, participating


def fedavg(participation: str = "none", fedau_cutoff: int = FEDAU_CUTOFF) -> Aggregator:
    rule = Aggregator("fedavg", needs_losses=False, select=keep_all, combine=weighted_mean)
    return participating(rule, participation, fedau_cutoff)
