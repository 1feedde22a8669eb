"""Plug-ins: the names a scenario may give its data set, model, aggregation rule,
threshold estimators and availability mode, and where each one's factory lives.

Each plug-in point has one registry (:data:`REGISTRIES`), name -> :class:`Plugin`:
the factory's import path, the keys of its scenario section it reads, (rules,
estimators) why asynchronous mode cannot run it, the functions simfl asks of it beside
its factory (its hooks, :data:`HOOKS`) and what it declares of itself (:data:`FLAGS`).
simfl's own names are a registry's first rows; a name comes in three more ways, all
alike from then on:

* a decorator in user code, ``@simfl.register_aggregator("trimmed_mean")``;
* an entry point of an installed package, in the group ``simfl.aggregators`` (or
  ``simfl.models``, ``simfl.datasets``, ``simfl.estimators``, ``simfl.availability``),
  its name the plug-in's and its value ``package.module:function``;
* the scenario itself naming ``"package.module:function"``: the form a fresh process
  (``resume``, a Ray worker) can always import again.

A factory's first parameters are fixed per point (:data:`FIXED`); those after them
are its hyper-parameters, read from the scenario section's key of that name (an
aggregation rule's ``theta``, ``mu``, ...) or from the section's ``params`` table.
A name that cannot be imported (its module raising anything, or calling ``sys.exit``),
or a factory that does not fit its point, raises or returns what the point does not
take, is an InputError of one line naming the key and the import path. What a plug-in
returns during a run is checked where simfl first receives it (simfl.aggregate.base,
simfl.quantile.panel): one that breaks its point's contract (docs/extending.md) is a
:class:`PluginBroke`, a RunFailed naming the plug-in and the contract (exit 1).

Torch-free: simfl's own factories are named by path and imported when a run builds
them; a plug-in's module is imported when a scenario naming it is loaded, which runs
that module's code.

The package, by concern: :mod:`simfl.plugins.registry` (a point's rows and names,
importing and building them, a plug-in's broken contract), :mod:`simfl.plugins.builtin`
(simfl's own names, the registries' first rows: a new built-in name is a row there) and
:mod:`simfl.plugins.origins` (where a resumed run's plug-ins come from). Every name is
imported from here.
"""

from simfl.plugins.builtin import (
    AGGREGATORS,
    AVAILABILITY,
    DATASETS,
    ESTIMATORS,
    KEYS,
    MODELS,
    PARTICIPATION_ASYNC_REFUSED,
    REGISTRIES,
    filters_by_threshold,
    register_aggregator,
    register_availability,
    register_dataset,
    register_estimator,
    register_model,
    registered_filters_by_threshold,
)
from simfl.plugins.origins import check_origins, import_recorded, source_sha256
from simfl.plugins.registry import (
    FIXED,
    FLAGS,
    HOOKS,
    Plugin,
    PluginBroke,
    Registry,
    broke,
    build,
    code_of,
    distribution_version,
    hyperparameters,
    import_path,
    one_line,
)

__all__ = [
    "AGGREGATORS",
    "AVAILABILITY",
    "DATASETS",
    "ESTIMATORS",
    "FIXED",
    "FLAGS",
    "HOOKS",
    "KEYS",
    "MODELS",
    "PARTICIPATION_ASYNC_REFUSED",
    "REGISTRIES",
    "Plugin",
    "PluginBroke",
    "Registry",
    "broke",
    "build",
    "check_origins",
    "code_of",
    "distribution_version",
    "filters_by_threshold",
    "hyperparameters",
    "import_path",
    "import_recorded",
    "one_line",
    "register_aggregator",
    "register_availability",
    "register_dataset",
    "register_estimator",
    "register_model",
    "registered_filters_by_threshold",
    "source_sha256",
]
