"""Checks of a scenario that involve more than one key: the plug-in names and their
``params``, what async mode supports, and hyper-parameters of a rule, estimator or
availability mode that the scenario does not use."""

from __future__ import annotations

import dataclasses
import difflib
import math
from typing import TYPE_CHECKING

from simfl import plugins
from simfl.errors import InputError
from simfl.scenario.aggregator import AggregatorConfig
from simfl.scenario.estimator import MAX_BISECTION_SUMS, EstimatorConfig
from simfl.scenario.population import AvailabilityConfig, HabitsConfig
from simfl.scenario.server import check_server

if TYPE_CHECKING:
    from simfl.scenario import Scenario


# The keys of [aggregator] and [estimator] some rule or estimator reads (simfl.plugins says
# which): one set away from its default when none that reads it runs is an error, as
# for the server modes' keys.
RULE_KEYS = ("theta", "mu", "q", "tilt", "lambda_step", "participation", "fedau_cutoff")
# Keys of [population.availability] that only the modes reading them use (simfl.plugins)
MODE_KEYS = ("trace_mapping", "trace_covariate_correlation")
ESTIMATOR_KEYS = ("secure_mm", "secure_bisection", "tracking", "ipw", "poststrat_history",
                  "shifted", "model_assisted", "noise_std", "rake", "ipw_shrunk",
                  "poststrat_shrunk", "checkin_share", "checkin_memory_days")


def _check_meaning(scenario: Scenario, source: str) -> None:
    """Hyperparameters of a rule or estimator that the run does not use (set away from
    their defaults) are errors naming the key and what is chosen instead.

    The comparison is with the default, not with what the file spells out, so that
    ``--set aggregator.name=fedavg`` on a Δ-FL scenario at the default θ still loads.
    """
    agg, default = scenario.aggregator, AggregatorConfig()
    rule = plugins.AGGREGATORS.lookup(agg.name, "aggregator.name", source)
    for key in RULE_KEYS:
        if key not in rule.keys and getattr(agg, key) != getattr(default, key):
            raise InputError(f"{source}: 'aggregator.{key}' = {getattr(agg, key)!r} has no "
                             f"meaning with 'aggregator.name' = {agg.name!r}")
    if agg.participation != "fedau" and agg.fedau_cutoff != default.fedau_cutoff:
        raise InputError(f"{source}: 'aggregator.fedau_cutoff' = {agg.fedau_cutoff!r} has no "
                         f"meaning with 'aggregator.participation' = {agg.participation!r}")
    est, est_default = scenario.estimator, EstimatorConfig()
    used = estimators_used(scenario, source)
    for key in ESTIMATOR_KEYS:
        if (all(key not in (*p.keys, *p.reads) for p in used)
                and getattr(est, key) != getattr(est_default, key)):
            raise InputError(f"{source}: 'estimator.{key}' is set but no estimator that "
                             f"reads it ({', '.join(plugins.ESTIMATORS.readers(key))}) is "
                             f"'estimator.name' or in 'estimator.shadow'")
    availability = scenario.population.availability
    mode = plugins.AVAILABILITY.lookup(availability.mode, "population.availability.mode", source)
    if "habits" not in mode.reads and availability.habits != HabitsConfig():
        changed = next(f.name for f in dataclasses.fields(HabitsConfig)
                       if getattr(availability.habits, f.name) != getattr(HabitsConfig(), f.name))
        raise InputError(f"{source}: 'population.availability.habits.{changed}' has no meaning "
                         f"with 'population.availability.mode' = {availability.mode!r} "
                         f"({_only(plugins.AVAILABILITY, 'habits')})")
    default_availability = AvailabilityConfig()
    for key in MODE_KEYS:
        if (key not in mode.reads
                and getattr(availability, key) != getattr(default_availability, key)):
            raise InputError(f"{source}: 'population.availability.{key}' has no meaning with "
                             f"'population.availability.mode' = {availability.mode!r} "
                             f"({_only(plugins.AVAILABILITY, key)})")
    habits, regions = availability.habits, scenario.population.regions
    if len(habits.class_logit_means) != len(habits.class_shares):
        raise InputError(f"{source}: 'population.availability.habits.class_logit_means' has "
                         f"{len(habits.class_logit_means)} values, 'class_shares' "
                         f"{len(habits.class_shares)}: one per device class")
    if len(habits.weekend_logit_shift) not in (1, len(regions)):
        raise InputError(f"{source}: 'population.availability.habits.weekend_logit_shift' has "
                         f"{len(habits.weekend_logit_shift)} values: one, or one per region "
                         f"({len(regions)})")
    if est.bias_every == 0 and est.decomposition_draws != est_default.decomposition_draws:
        raise InputError(f"{source}: 'estimator.decomposition_draws' has no meaning with "
                         f"'estimator.bias_every' = 0 (no bias rounds)")


def estimators_used(scenario: Scenario, source: str = "<scenario>") -> list[plugins.Plugin]:
    """The driver, the shadows and each estimator one of them wraps (its ``base`` hook:
    ``shifted``'s ``estimator.shifted.base``), in that order: the estimators whose keys
    and needs are the scenario's."""
    est = scenario.estimator
    named = [plugins.ESTIMATORS.lookup(name, "estimator.name", source)
             for name in (est.name, *est.shadow)]
    bases = [plugin.hook("base", "estimator.name", source) for plugin in named]
    return [*named, *(plugins.ESTIMATORS.lookup(base(est), "estimator.name", source)
                      for base in bases if base is not None)]


def plugins_of(scenario: Scenario, source: str = "<scenario>") -> dict[str, plugins.Plugin]:
    """The plug-in each name of the scenario stands for, by its key (``estimator.shadow[i]``
    for a shadow estimator); InputError for a name that none is."""
    est = scenario.estimator
    named = {"data.dataset": scenario.data.dataset, "model.name": scenario.model.name,
             "aggregator.name": scenario.aggregator.name, "estimator.name": est.name,
             **{f"estimator.shadow[{i}]": name for i, name in enumerate(est.shadow)},
             "population.availability.mode": scenario.population.availability.mode}
    return {key: plugins.KEYS[key.partition("[")[0]].lookup(name, key, source)
            for key, name in named.items()}


def _check_plugins(scenario: Scenario, source: str) -> dict[str, plugins.Plugin]:
    """Every name is a plug-in's; each key of a section's params table is a
    hyper-parameter of one it uses, and each hyper-parameter without a default is set.
    The plug-ins found (:func:`plugins_of`)."""
    found = plugins_of(scenario, source)
    for where, section in (("data", scenario.data), ("model", scenario.model),
                           ("aggregator", scenario.aggregator),
                           ("estimator", scenario.estimator),
                           ("population.availability", scenario.population.availability)):
        used = [p for key, p in found.items() if key.startswith(where + ".")]
        fields = {f.name for f in dataclasses.fields(section)} - {"params"}
        takes = sorted({k for p in used for k in p.keys} - fields)
        for key in section.params:
            if key not in takes:
                near = difflib.get_close_matches(key, takes, n=1)
                hint = f" (did you mean '{where}.params.{near[0]}'?)" if near else ""
                raise InputError(f"{source}: '{where}.params.{key}' is no hyper-parameter of "
                                 f"{[p.name for p in used]} (they take {takes}){hint}")
        for p in used:
            for key in set(p.required) - fields - set(section.params):
                raise InputError(f"{source}: {p.name!r} needs '{where}.params.{key}'")
    return found


def _only(registry: plugins.Registry, key: str) -> str:
    """Which of simfl's names read ``key``, as an error says it."""
    return f"only {' or '.join(repr(name) for name in registry.readers(key))} reads it"


def check_relations(scenario: Scenario, source: str) -> None:
    """Checks that involve more than one key; of the names, only what their registry
    rows say (the keys each reads, the hooks each has) is asked."""
    found = _check_plugins(scenario, source)
    check_server(scenario, source)
    bisection = scenario.estimator.secure_bisection
    if bisection.high <= bisection.low:
        raise InputError(f"{source}: 'estimator.secure_bisection.high' = {bisection.high!r} "
                         f"must be > 'estimator.secure_bisection.low' = {bisection.low!r}")
    sums = math.log2((bisection.high - bisection.low) / bisection.tol)
    if sums > MAX_BISECTION_SUMS:
        raise InputError(f"{source}: 'estimator.secure_bisection.tol' = {bisection.tol!r} would "
                         f"take {sums:.3g} secure sums to narrow [low, high] to it (limit "
                         f"{MAX_BISECTION_SUMS}): raise tol")
    mode = scenario.population.availability.mode
    # the true online rates: the availability mode's rates hook (simfl.population.modes)
    if not found["population.availability.mode"].has_hook("rates"):
        for estimator in estimators_used(scenario, source):
            if estimator.needs_rates:
                raise InputError(f"{source}: estimator {estimator.name!r} needs the online "
                                 f"rates of the availability model; "
                                 f"'population.availability.mode' = {mode!r} has none")
    data, dataset = scenario.data, found["data.dataset"]
    if data.pixel_scaling == "authors" and (data.standardise
                                            or "pixel_scaling" not in dataset.reads):
        raise InputError(f"{source}: 'data.pixel_scaling' = 'authors' rescales FEMNIST images "
                         f"itself: it needs 'data.dataset' "
                         f"{' or '.join(plugins.DATASETS.readers('pixel_scaling'))} (got "
                         f"{data.dataset!r}) and 'data.standardise' = false")
    if data.sources and "sources" not in dataset.reads:
        raise InputError(f"{source}: 'data.sources' names copies in the FEMNIST .npz's "
                         f"'source_names': it needs 'data.dataset' = "
                         f"{' or '.join(map(repr, plugins.DATASETS.readers('sources')))} (got "
                         f"{data.dataset!r})")
    model, reads = scenario.model, (*found["model.name"].keys, *found["model.name"].reads)
    if (not model.bias and "bias" not in reads) or (model.init != "pytorch"
                                                    and "init" not in reads):
        readers = dict.fromkeys(plugins.MODELS.readers("bias") + plugins.MODELS.readers("init"))
        raise InputError(f"{source}: 'model.bias' = false and 'model.init' = 'zeros' are for "
                         f"the {' or '.join(readers)} model only (got 'model.name' = "
                         f"{model.name!r})")
    _check_meaning(scenario, source)

