"""FedProx: FedAvg's combine with a proximal term in every local objective.

Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in
Heterogeneous Networks", MLSys 2020 (Algorithm 2). Device k approximately
minimises h_k(w; w_t) = F_k(w) + μ/2 ‖w − w_t‖² from w_t (local SGD here,
simfl.train.batched), and the server averages the local models with weights α_k,
as FedAvg does. μ = 0 is FedAvg exactly.
"""

from __future__ import annotations

from simfl.aggregate.base import Aggregator, keep_all, weighted_mean


def fedprox(mu: float) -> Aggregator:
    if mu < 0:
        raise ValueError(f"mu must be >= 0, got {mu}")
    return Aggregator("fedprox", needs_losses=False, select=keep_all, combine=weighted_mean,
                      prox_mu=mu)
