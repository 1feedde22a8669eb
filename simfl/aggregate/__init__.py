"""Aggregation rules, one module each; ``make_aggregator`` maps a scenario section to one."""

from simfl.aggregate.afl import afl
from simfl.aggregate.base import Aggregator, Combined, RoundInputs, Selection
from simfl.aggregate.deltafl import deltafl
from simfl.aggregate.drfa import drfa
from simfl.aggregate.fedavg import fedavg
from simfl.aggregate.fedavg_sub import fedavg_sub
from simfl.aggregate.fedprox import fedprox
from simfl.aggregate.qffl import qffl
from simfl.aggregate.term import term
from simfl.plugins import AGGREGATORS, build
from simfl.scenario import AggregatorConfig


def make_aggregator(cfg: AggregatorConfig) -> Aggregator:
    """The rule ``cfg.name`` (simfl.plugins.AGGREGATORS), from its factory and the keys of
    ``cfg`` it takes."""
    rule = AGGREGATORS.lookup(cfg.name, "aggregator.name")
    aggregator: Aggregator = build(rule, "aggregator.name", cfg, expect=Aggregator)
    return aggregator


__all__ = ["Aggregator", "Combined", "RoundInputs", "Selection", "afl", "deltafl", "drfa",
           "fedavg", "fedavg_sub", "fedprox", "make_aggregator", "qffl", "term"]
