"""The rules from a scenario: the registry builds each with its hyperparameters, bad ones
are rejected with the key's name."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

from simfl.aggregate import Aggregator, make_aggregator
from simfl.errors import InputError
from simfl.scenario import AggregatorConfig, from_dict
from tests.aggregate.helpers import GLOBAL, close, inputs


def test_registry_builds_every_rule_with_its_hyperparameters() -> None:
    cfg = AggregatorConfig(theta=0.25, mu=0.5, q=2.0, tilt=-1.0, lambda_step=0.3)
    names = ("fedavg", "fedprox", "deltafl", "fedavg_sub", "qffl", "term", "afl", "drfa")
    rules: dict[str, Aggregator] = {
        name: make_aggregator(dataclasses.replace(cfg, name=name)) for name in names}
    assert {name: rule.name for name, rule in rules.items()} == {n: n for n in names}
    assert rules["fedprox"].prox_mu == 0.5 and rules["fedavg_sub"].cohort_fraction == 0.25
    assert [name for name, rule in rules.items() if rule.needs_losses] == [
        "deltafl", "qffl", "term", "afl"]
    # q = 2 through the registry: the q2 hand case above.
    close(rules["qffl"].combine(GLOBAL, inputs(lr=1.0), None).params,
          [1 - 3 / 48, 1 + 14 / 48])


@pytest.mark.parametrize("key, value, message", [
    ("mu", -0.1, "'aggregator.mu' = -0.1 must be in [0, 1e30]"),
    ("q", -1.0, "'aggregator.q' = -1.0 must be >= 0"),
    ("tilt", math.inf, "'aggregator.tilt' must be a finite number"),
    ("lambda_step", -1e-3, "'aggregator.lambda_step' = -0.001 must be in [0, 1e30]"),
    ("name", "fedsgd", "'aggregator.name' = 'fedsgd' must be one of"),
])
def test_bad_hyperparameters_are_rejected(key: str, value: object, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        from_dict({"aggregator": {key: value}})


def test_mu_has_one_home() -> None:
    with pytest.raises(InputError, match="unknown key 'train.prox_mu'"):
        from_dict({"train": {"prox_mu": 0.1}})
