"""FedAvg on a smaller cohort: the random-subset control for Δ-FL.

FedAvg (McMahan et al., AISTATS 2017) where the server selects
round(θ × clients_per_round) devices instead of clients_per_round, drawn at random
instead of from the upper loss tail: the control of Laguel, Pillutla, Malick,
Harchaoui (CISS 2021, §V.A: "FedAvg with as many devices per round as Δ-FL"). It
separates Δ-FL's effect of training on fewer clients from that of choosing them
by their losses. θ = 1 is FedAvg exactly.

The count is fixed; Δ-FL's is not: it keeps every device whose loss reaches the
sample-weighted (1 − θ) quantile, the device at the quantile too, so the number it
keeps varies with the weights and is at least round(θ K) for distinct losses and
equal weights (51 of 100 at θ = 0.5). In the kept paper runs Δ-FL θ = 0.5 kept
52.19 devices a round on average (37–62; docs/runs/paper_linear, 5 seeds) and
54.01 (33–67; paper_convnet, 3 seeds) where FedAvg-Sub trains 50.
"""

from __future__ import annotations

from simfl.aggregate.base import Aggregator, keep_all, weighted_mean


def fedavg_sub(theta: float) -> Aggregator:
    if not 0.0 < theta <= 1.0:
        raise ValueError(f"theta must be in (0, 1], got {theta}")
    return Aggregator("fedavg_sub", needs_losses=False, select=keep_all, combine=weighted_mean,
                      cohort_fraction=theta)
