"""Aggregation rules, one module each; ``make_aggregator`` maps a scenario section to one."""

from simfl.aggregate.base import Aggregator, Selection
from simfl.aggregate.deltafl import deltafl
from simfl.aggregate.fedavg import fedavg
from simfl.scenario import AggregatorConfig


def make_aggregator(cfg: AggregatorConfig) -> Aggregator:
    factories = {
        "fedavg": lambda: fedavg(),
        "deltafl": lambda: deltafl(cfg.theta),
    }
    return factories[cfg.name]()


__all__ = ["Aggregator", "Selection", "deltafl", "fedavg", "make_aggregator"]
