"""FedProx and fedavg_sub combine as FedAvg; what differs is what they ask of training
(the proximal term μ) and of selection (a share θ of the cohort)."""

from __future__ import annotations

import pytest

from simfl.aggregate import fedavg, fedavg_sub, fedprox
from tests.aggregate.helpers import GLOBAL, close, inputs


def test_fedprox_combines_as_fedavg_and_carries_mu_to_training() -> None:
    rule = fedprox(0.3)
    assert rule.prox_mu == 0.3 and fedavg().prox_mu == 0.0
    # 1 + (1/4·1 + 1/4·0 + 1/2·(−1)), 1 + (0 + 1/4·2 + 1/2·(−1))
    close(rule.combine(GLOBAL, inputs(), None).params, [0.75, 1.0])
    with pytest.raises(ValueError, match="mu"):
        fedprox(-1.0)


def test_fedavg_sub_asks_for_theta_of_the_cohort() -> None:
    rule = fedavg_sub(0.25)
    assert rule.cohort_fraction == 0.25 and fedavg().cohort_fraction == 1.0
    assert not rule.needs_losses
    close(rule.combine(GLOBAL, inputs(), None).params, [0.75, 1.0])
