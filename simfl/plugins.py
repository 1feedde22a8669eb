"""Plug-ins: the names a scenario may give its data set, model, aggregation rule,
threshold estimators and availability mode, and where each one's factory lives.

Each plug-in point has one registry (:data:`REGISTRIES`), name -> :class:`Plugin`:
the factory's import path, the keys of its scenario section it reads, and (rules,
estimators) why asynchronous mode cannot run it. simfl's own names are a registry's
first rows; a name comes in three more ways, all alike from then on:

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
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from simfl.errors import InputError, RunFailed

F = TypeVar("F", bound=Callable[..., Any])

# The leading parameters of each point's factory, passed by position; the factory's
# other parameters are its hyper-parameters.
FIXED: dict[str, tuple[str, ...]] = {
    "aggregators": (),  # -> simfl.aggregate.Aggregator
    "models": ("input_shape", "num_classes"),  # -> torch.nn.Module
    "datasets": ("cfg", "streams"),  # (DataConfig, Streams) -> simfl.data.FederatedData
    "estimators": ("ctx",),  # simfl.quantile.EstimatorContext -> an Estimator
    "availability": ("cfg", "devices", "streams"),  # -> simfl.population.Availability
}
# What simfl asks a plug-in beside its factory, by point: functions its row names (simfl's
# own by import path; a plug-in's as keyword arguments of its decorator or attributes of
# its factory), each optional. Data sets (simfl.runs.memory, before loading):
# input_shape(cfg) -> (a sample's shape, classes); memory_terms(cfg) -> the loader's peak
# memory as [(bytes, key, what)]; sizes(cfg) -> simfl.data.known.KeySizes, the devices and
# samples its keys fix. Availability modes (simfl.population.modes says which of simfl's
# declares what): populate(cfg, devices, streams, covariate) -> Drawn, the intervals
# with the habits or mapped trace a run keeps; habits(cfg, devices, covariate, streams)
# -> each device's Habits; rates(cfg, devices, mapped trace) -> the true online rates
# (ipw_known's oracle); profile(cfg) -> (online share, mean session s) for devices.parquet;
# intervals(cfg, training devices) -> a device's expected online intervals (the memory
# guard); check_devices(cfg, training devices) -> InputError for a count it cannot serve.
HOOKS: dict[str, tuple[str, ...]] = {
    "aggregators": (), "models": (), "estimators": (),
    "datasets": ("input_shape", "memory_terms", "sizes"),
    "availability": ("populate", "habits", "rates", "profile", "intervals", "check_devices"),
}


@dataclass(frozen=True)
class Plugin:
    """One name of a plug-in point."""

    name: str
    path: str  # "package.module:function": where its factory lives
    keys: tuple[str, ...] = ()  # its hyper-parameters: keys of its section or of its params
    required: tuple[str, ...] = ()  # those of ``keys`` the factory has no default for
    reads: tuple[str, ...] = ()  # other keys of its section it reads (simfl's own)
    async_refused: str = ""  # why server.mode = "async" cannot run it ("" = it can)
    builtin: bool = False
    # an aggregation rule that trains the reporters whose loss is at or above a threshold
    # the estimator panel sets (Δ-FL's filter): it gets the panel, bias.parquet and the
    # panel's memory in the guard, whoever wrote it
    filters_by_threshold: bool = False
    factory: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    # its hooks (:data:`HOOKS`): name -> "package.module:function" or the function
    hooks: tuple[tuple[str, str | Callable[..., Any]], ...] = field(default=(), repr=False)

    def load(self, key: str = "", source: str = "<plugin>") -> Callable[..., Any]:
        """The factory (imported from ``path`` on first use)."""
        return self.factory if self.factory is not None else import_path(self.path, key,
                                                                         source)

    def has_hook(self, name: str) -> bool:
        return any(hook == name for hook, _ in self.hooks)

    def hook(self, name: str, key: str = "", source: str = "<plugin>"
             ) -> Callable[..., Any] | None:
        """The hook ``name`` (:data:`HOOKS`), imported on first use; None if it has none."""
        for hook, target in self.hooks:
            if hook == name:
                return import_path(target, key, source) if isinstance(target, str) else target
        return None

    def record(self) -> dict[str, str]:
        """What the manifest keeps: name, import path and the providing package's version."""
        return {"name": self.name, "path": self.path, "version": distribution_version(self.path)}


def one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())


def import_path(path: str, key: str, source: str) -> Callable[..., Any]:
    """The object named by ``"package.module:function"``; InputError if it cannot be
    imported or is not callable."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"{source}: '{key}' = {path!r} is no 'package.module:function'")
    if module_name.partition(".")[0] in sys.stdlib_module_names:  # before importing it
        raise InputError(f"{source}: '{key}' = {path!r} names the standard library, not a "
                         f"plug-in (a scenario or manifest may name only a plug-in's own "
                         f"function)")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except SystemExit as e:  # sys.exit() in the module's code: no run, and no status 0
        raise InputError(f"{source}: '{key}' = {path!r} cannot be imported (its module "
                         f"called sys.exit({e.code!r}) as it was imported)") from None
    except Exception as e:  # any error of the plug-in's own module, on one line
        raise InputError(f"{source}: '{key}' = {path!r} cannot be imported "
                         f"({one_line(e)})") from None
    if not callable(obj):
        raise InputError(f"{source}: '{key}' = {path!r} is not a function (a "
                         f"{type(obj).__name__})")
    return obj


def distribution_version(path: str) -> str:
    """The version of the installed distribution providing ``path``'s top-level package
    ("unknown" for a module on PYTHONPATH that no distribution installed)."""
    top = path.partition(":")[0].split(".")[0]
    for dist in metadata.packages_distributions().get(top, []):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def hyperparameters(point: str, factory: Callable[..., Any], what: str) -> tuple[
        tuple[str, ...], tuple[str, ...]]:
    """(keys, required keys) of a factory of ``point``: its parameters after the fixed
    ones. InputError (``what`` names it) if it does not take the fixed ones first or
    takes ``*args`` / ``**kwargs``."""
    fixed = FIXED[point]
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError) as e:
        raise InputError(f"{what}: no signature to check ({one_line(e)})") from None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if (len(params) < len(fixed) or any(p.kind not in positional for p in params[:len(fixed)])
            or any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)):
        raise InputError(f"{what}: a factory of {point} takes ({', '.join(fixed)}) first, "
                         f"then named hyper-parameters; its signature is "
                         f"{inspect.signature(factory)}")
    rest = params[len(fixed):]
    return (tuple(p.name for p in rest),
            tuple(p.name for p in rest if p.default is inspect.Parameter.empty))


def build(plugin: Plugin, key: str, section: Any, *fixed: Any,
          expect: type | tuple[type, ...] = object) -> Any:
    """What ``plugin``'s factory makes from the fixed arguments and its hyper-parameters,
    each from ``section``'s key of that name or its ``params`` table (else the factory's
    default). A plug-in's error, or a result that is not an ``expect``, is an InputError
    naming ``key``."""
    params = getattr(section, "params", {})
    kwargs = {k: getattr(section, k) if k != "params" and hasattr(section, k) else params[k]
              for k in plugin.keys if hasattr(section, k) or k in params}
    factory = plugin.load(key)
    if plugin.builtin:
        return factory(*fixed, **kwargs)
    try:
        made = factory(*fixed, **kwargs)
    except SystemExit as e:  # sys.exit() in the factory: no run, and no status 0
        raise InputError(f"'{key}' = {plugin.name!r} ({plugin.path}) failed: it called "
                         f"sys.exit({e.code!r})") from None
    except Exception as e:  # any error of the plug-in's own code, on one line
        raise InputError(f"'{key}' = {plugin.name!r} ({plugin.path}) failed: "
                         f"{one_line(e)}") from None
    if not isinstance(made, expect):
        raise InputError(f"'{key}' = {plugin.name!r} ({plugin.path}) returned a "
                         f"{type(made).__name__}, not a {getattr(expect, '__name__', expect)}")
    return made


class PluginBroke(RunFailed):
    """A plug-in's output, received during a run, breaks the contract of its point
    (docs/extending.md): the run fails (exit 1) with one line naming the plug-in and the
    contract, instead of a traceback from inside simfl where the output is used."""


def code_of(fn: Callable[..., Any]) -> str:
    """Where a plug-in's function lives, as ``package.module:qualname`` (a closure's
    qualname names its factory: ``rules:trimmed_mean.<locals>.combine``)."""
    module = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}:{name}"


def broke(who: str, what: str, contract: str) -> PluginBroke:
    """The error of a plug-in ``who`` (its key and name, or its code) whose output is
    ``what`` (``"combine returned ..."``) against ``contract`` (what it must be)."""
    return PluginBroke(f"plug-in {who} broke its contract: {what}; {contract} "
                       f"(docs/extending.md)")


class Registry:
    """The names of one plug-in point: simfl's own, registered, and entry points."""

    def __init__(self, point: str, builtins: Iterable[Plugin]) -> None:
        self.point = point
        self.table = {p.name: p for p in builtins}
        self.entry_points: dict[str, str] | None = None  # name -> path, once looked up

    @property
    def group(self) -> str:
        return f"simfl.{self.point}"

    def builtins(self) -> list[Plugin]:
        return [p for p in self.table.values() if p.builtin]

    def add(self, name: str, factory: Callable[..., Any], async_refused: str = "",
            path: str | None = None, filters_by_threshold: bool = False,
            hooks: dict[str, Any] | None = None) -> Plugin:
        """Register ``factory`` as ``name`` (replacing a plug-in of that name, never one
        of simfl's own), with its ``hooks`` (:data:`HOOKS`); InputError if it does not
        fit the point."""
        what = f"{self.point} plug-in {name!r}"
        if name in self.table and self.table[name].builtin:
            raise InputError(f"{what}: {name!r} is one of simfl's own {self.point}")
        if not callable(factory):
            raise InputError(f"{what} is not a function (a {type(factory).__name__})")
        keys, required = hyperparameters(self.point, factory, what)
        where = path or f"{factory.__module__}:{factory.__qualname__}"
        plugin = Plugin(name, where, keys, required, (), async_refused, factory=factory,
                        filters_by_threshold=filters_by_threshold,
                        hooks=self._hooks(hooks or {}, what))
        self.table[name] = plugin
        return plugin

    def _hooks(self, hooks: dict[str, Any], what: str) -> tuple[tuple[str, Any], ...]:
        """``hooks`` checked against the point's names (:data:`HOOKS`) and callable."""
        for hook, fn in hooks.items():
            if hook not in HOOKS[self.point]:
                raise InputError(f"{what}: {hook!r} is no hook of {self.point} (they are "
                                 f"{list(HOOKS[self.point])})")
            if not callable(fn):
                raise InputError(f"{what}: its hook {hook!r} is not a function (a "
                                 f"{type(fn).__name__})")
        return tuple(hooks.items())

    def _declared(self, factory: Callable[..., Any]) -> dict[str, Any]:
        """The hooks a factory declares as attributes of its own (:data:`HOOKS`)."""
        return {hook: getattr(factory, hook) for hook in HOOKS[self.point]
                if getattr(factory, hook, None) is not None}

    def register(self, name: str | None = None, *, async_refused: str = "",
                 filters_by_threshold: bool = False, **hooks: Any) -> Callable[[F], F]:
        """Decorator: register the decorated factory under ``name`` (default: its own);
        ``filters_by_threshold`` (aggregation rules): the rule trains the reporters at or
        above the estimator panel's threshold, as Δ-FL (:class:`Plugin`); ``hooks``: the
        point's functions it provides (:data:`HOOKS`), or attributes of the factory."""
        def decorate(factory: F) -> F:
            self.add(name or factory.__name__, factory, async_refused,
                     filters_by_threshold=filters_by_threshold,
                     hooks={**self._declared(factory), **hooks})
            return factory
        return decorate

    def names(self) -> list[str]:
        return list(dict.fromkeys([*self.table, *self.discovered()]))

    def discovered(self) -> dict[str, str]:
        """The entry points of the group, name -> ``package.module:function``."""
        if self.entry_points is None:
            self.entry_points = {ep.name: ep.value
                                 for ep in metadata.entry_points(group=self.group)}
        return self.entry_points

    def lookup(self, name: str, key: str, source: str = "<scenario>") -> Plugin:
        """The plug-in a scenario's ``key`` names: a registered name, an entry point, or
        ``package.module:function``; InputError with the nearest name otherwise."""
        if name in self.table:
            return self.table[name]
        if name in self.discovered():
            path = self.discovered()[name]
            found = import_path(path, key, source)
            return self.add(name, found, getattr(found, "async_refused", ""), path=path,
                            filters_by_threshold=bool(getattr(found, "filters_by_threshold",
                                                              False)),
                            hooks=self._declared(found))
        if ":" in name:
            factory = import_path(name, key, source)
            what = f"{source}: '{key}' = {name!r}"
            keys, required = hyperparameters(self.point, factory, what)
            return Plugin(name, name, keys, required, (),
                          getattr(factory, "async_refused", ""), factory=factory,
                          filters_by_threshold=bool(getattr(factory, "filters_by_threshold",
                                                            False)),
                          hooks=self._hooks(self._declared(factory), what))
        near = difflib.get_close_matches(name, self.names(), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise InputError(f"{source}: '{key}' = {name!r} must be one of {self.names()} or a "
                         f"'package.module:function'{hint}")

    def readers(self, key: str) -> list[str]:
        """simfl's own names that read section key ``key``."""
        return [p.name for p in self.builtins() if key in (*p.keys, *p.reads)]


def _own(name: str, path: str, keys: tuple[str, ...] = (), async_refused: str = "",
         reads: tuple[str, ...] = (), **hooks: str) -> Plugin:
    return Plugin(name, path, keys, (), reads, async_refused, builtin=True,
                  hooks=tuple(hooks.items()))


_ONE_MODEL = "needs every loss report at one model w_t, and a buffer's updates start " \
             "from different versions"
# aggregator.participation (fedavg, deltafl: simfl.aggregate.participation), a key of
# two rules rather than a rule: why async mode refuses it (scenario.server.check_server)
PARTICIPATION_ASYNC_REFUSED = (
    "FedAU's participation intervals are counted in rounds and MIFA steps once a round "
    "from every device's latest update; a FedBuff server update is no round, and its "
    "buffer's updates start from different model versions")
_PARTICIPATION = ("participation", "fedau_cutoff")
# Every rule combines an async buffer through its own combine with staleness-scaled
# weights (simfl.aggregate.base), except those with a reason here.
AGGREGATORS = Registry("aggregators", [
    _own("fedavg", "simfl.aggregate.fedavg:fedavg", _PARTICIPATION),
    _own("fedprox", "simfl.aggregate.fedprox:fedprox", ("mu",)),
    dataclasses.replace(_own("deltafl", "simfl.aggregate.deltafl:deltafl",
                             ("theta", *_PARTICIPATION)), filters_by_threshold=True),
    _own("fedavg_sub", "simfl.aggregate.fedavg_sub:fedavg_sub", ("theta",),
         "its smaller cohort is a sync round's; async mode sets how many devices train "
         "with server.concurrency"),
    _own("qffl", "simfl.aggregate.qffl:qffl", ("q",),
         "its step L = 1/lr weighs updates trained with one round's lr from one model"),
    _own("term", "simfl.aggregate.term:term", ("tilt",)),
    _own("afl", "simfl.aggregate.afl:afl", ("lambda_step",), f"its λ step {_ONE_MODEL}"),
    _own("drfa", "simfl.aggregate.drfa:drfa", ("lambda_step",),
         "its λ step probes losses on the chord of one round's step from one model"),
])
MODELS = Registry("models", [
    # model.init = "zeros" (the authors' start from W = 0) is the linear model's alone
    _own("linear", "simfl.train.models:LinearSoftmax", ("bias",), reads=("init",)),
    _own("convnet", "simfl.train.models:ConvNet"),
    _own("cnn", "simfl.train.models:SmallCNN"),  # any C×H×W (not the papers')
    _own("gru", "simfl.train.models:CharGRU", ("hidden",)),  # Shakespeare's characters
])
# Each data set's hooks (HOOKS) live beside its loader; npz_folder's sizes and shapes are
# known only once it is loaded. femnist and leaf read FEMNIST's pixel scaling, femnist
# the .npz's copies (data.sources).
DATASETS = Registry("datasets", [
    _own("synthetic", "simfl.data.synthetic:load_synthetic", reads=("synthetic",),
         input_shape="simfl.data.synthetic:input_shape",
         memory_terms="simfl.data.synthetic:memory_terms", sizes="simfl.data.synthetic:sizes"),
    _own("femnist", "simfl.data.femnist:load_femnist", reads=("sources", "pixel_scaling"),
         input_shape="simfl.data.femnist:input_shape",
         memory_terms="simfl.data.femnist:memory_terms"),
    _own("leaf", "simfl.data.leaf:load_leaf", reads=("pixel_scaling",),
         input_shape="simfl.data.leaf:input_shape", memory_terms="simfl.data.leaf:memory_terms"),
    _own("shakespeare", "simfl.data.shakespeare:load_shakespeare",
         input_shape="simfl.data.shakespeare:input_shape",
         memory_terms="simfl.data.shakespeare:memory_terms"),
    _own("npz_folder", "simfl.data.own:load_npz_folder"),  # one <client>.npz each
])
# The threshold of an async buffer comes from its loss reports, sent in the clear with
# the updates: the devices of a buffer are gone by then, so no multi-round protocol runs.
_PROTOCOL = "needs the devices online during its protocol"
# the keys of the check-in record, read by every estimator that reads the record
_CHECKINS = ("checkin_share", "checkin_memory_days")
# ipw_known is an oracle for the study (the availability model's true online rates);
# ipw_days is ipw with the online rates from the check-ins of earlier UTC days only;
# poststrat_history post-stratifies on region x the earlier days' check-in rate. Keys:
# the estimator sub-tables (and noise_std) each reads.
ESTIMATORS = Registry("estimators", [
    _own("cohort_exact", "simfl.quantile.panel:cohort_exact"),
    _own("secure_mm", "simfl.quantile.panel:secure_mm", (), _PROTOCOL,
         ("secure_mm", "noise_std")),
    _own("secure_bisection", "simfl.quantile.panel:secure_bisection", (), _PROTOCOL,
         ("secure_bisection", "noise_std")),
    _own("tracking", "simfl.quantile.panel:tracking", (), _PROTOCOL, ("tracking", "noise_std")),
    _own("ipw", "simfl.quantile.panel:ipw", reads=("ipw", *_CHECKINS)),
    _own("ipw_days", "simfl.quantile.panel:ipw_days", reads=("ipw", *_CHECKINS)),
    _own("poststrat", "simfl.quantile.panel:poststrat"),
    _own("poststrat_history", "simfl.quantile.panel:poststrat_history",
         reads=("poststrat_history", *_CHECKINS)),
    _own("ipw_known", "simfl.quantile.panel:ipw_known", (), _PROTOCOL),
    # the population quantile itself, every device evaluated each round (an oracle driver)
    _own("population_quantile", "simfl.quantile.panel:population_quantile", (),
         "evaluates every training device at one model w_t each round"),
    # another estimator's η̂ moved by a known dose (a dose-response, not a server's)
    _own("shifted", "simfl.quantile.dose:shifted", reads=("shifted",)),
    # survey sampling (simfl/quantile/survey.py): raking to region and check-in margins,
    # IPW and post-strata on empirical-Bayes online rates
    _own("rake", "simfl.quantile.survey:rake", reads=("rake", *_CHECKINS)),
    _own("ipw_shrunk", "simfl.quantile.survey:ipw_shrunk", reads=("ipw_shrunk", *_CHECKINS)),
    _own("poststrat_shrunk", "simfl.quantile.survey:poststrat_shrunk",
         reads=("poststrat_shrunk", *_CHECKINS)),
    # Chambers-Dunstan: the cohort and every device's last loss report (max_age rounds)
    _own("model_assisted", "simfl.quantile.assisted:model_assisted", reads=("model_assisted",)),
])
# Each mode's factory and hooks: simfl.population.modes (habits: diurnal, each device with
# its own propensity, phase and session length). The keys each reads beyond mode.
_MODES = "simfl.population.modes"
_DIURNAL = ("online_prob_by_hour", "session_mean_s", "horizon_s")
AVAILABILITY = Registry("availability", [
    _own("always", f"{_MODES}:always", rates=f"{_MODES}:always_rates",
         profile=f"{_MODES}:always_profile", intervals=f"{_MODES}:always_interval_count"),
    _own("diurnal", f"{_MODES}:diurnal", reads=_DIURNAL, rates=f"{_MODES}:profile_rates",
         profile=f"{_MODES}:diurnal_profile", intervals=f"{_MODES}:diurnal_interval_count"),
    _own("habits", f"{_MODES}:habits", reads=("habits", *_DIURNAL),
         populate=f"{_MODES}:populate_habits", habits=f"{_MODES}:device_habits",
         rates=f"{_MODES}:profile_rates", intervals=f"{_MODES}:habits_interval_count"),
    _own("trace", f"{_MODES}:trace", reads=("trace_path", "trace_mapping",
                                            "trace_covariate_correlation"),
         populate=f"{_MODES}:populate_trace", rates=f"{_MODES}:trace_rates",
         intervals=f"{_MODES}:trace_interval_count",
         check_devices="simfl.population.trace_map:check_trace_devices"),
])
REGISTRIES = {r.point: r for r in (AGGREGATORS, MODELS, DATASETS, ESTIMATORS, AVAILABILITY)}

register_aggregator = AGGREGATORS.register


def registered_filters_by_threshold(rule: str) -> bool:
    """:func:`filters_by_threshold` for a name registered in this process, False for any
    other: for readers of a run (plots, study tables), which import nothing it names."""
    known = AGGREGATORS.table.get(rule)
    return known is not None and known.filters_by_threshold


def filters_by_threshold(rule: str, source: str = "<scenario>") -> bool:
    """Whether the aggregation rule named ``rule`` trains the reporters at or above the
    estimator panel's threshold (Δ-FL's filter; :class:`Plugin`): what makes a run build
    the panel, write bias.parquet and count the panel's memory."""
    return AGGREGATORS.lookup(rule, "aggregator.name", source).filters_by_threshold
register_model = MODELS.register
register_dataset = DATASETS.register
register_estimator = ESTIMATORS.register
register_availability = AVAILABILITY.register


# The scenario key that names each point's plug-in (estimators: also estimator.shadow).
KEYS = {"data.dataset": DATASETS, "model.name": MODELS, "aggregator.name": AGGREGATORS,
        "estimator.name": ESTIMATORS, "estimator.shadow": ESTIMATORS,
        "population.availability.mode": AVAILABILITY}


def check_origins(records: dict[str, dict[str, str]], run_dir: Path) -> list[str]:
    """Before a resume imports the user plug-ins a run's manifest names (``records``):
    InputError if one would be imported from the run folder itself or from the working
    directory by way of Python's implicit first path entry (a run folder someone else
    wrote must not bring code that runs), or if its package's installed version is not
    the one the manifest records; otherwise one line per plug-in saying where its module
    comes from. Only the top-level package is looked up, which runs none of
    its code; a module not found is left to the import's own error."""
    run_dir, cwd = run_dir.resolve(), Path.cwd().resolve()
    # the working directory is on sys.path implicitly ('' or, under -m, its path), unless
    # PYTHONPATH names it; every other entry is the installed environment or PYTHONPATH
    named = {Path(p).resolve() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    explicit = named | {Path(p).resolve() for p in sys.path if p not in ("", ".")} - {cwd}
    lines = []
    for key, record in records.items():
        top = record["path"].partition(":")[0].split(".")[0]
        spec = importlib.util.find_spec(top) if top not in sys.modules else None
        origin = (sys.modules[top].__file__ if top in sys.modules
                  else spec.origin if spec is not None else None)
        if origin is None:
            continue
        where = Path(origin).resolve()
        folder = where.parent.parent if where.name == "__init__.py" else where.parent
        if where.is_relative_to(run_dir):
            raise InputError(f"'{key}' = {record['name']!r}: its module {top!r} would be "
                             f"imported from the run folder ({where}); simfl imports no code "
                             f"from a run folder")
        if folder == cwd and folder not in explicit:
            raise InputError(f"'{key}' = {record['name']!r}: its module {top!r} would be "
                             f"imported from the working directory ({where}); install it, "
                             f"or put its folder on PYTHONPATH")
        version = distribution_version(record["path"])
        if record.get("version", version) != version:
            raise InputError(f"'{key}' = {record['name']!r}: the run started with version "
                             f"{record['version']} of its package, {version} is installed: "
                             f"resume with the version it started with")
        lines.append(f"plug-in '{key}' = {record['name']!r} from {where}")
    return lines


def import_recorded(records: dict[str, dict[str, str]], source: str) -> None:
    """Import the modules of a manifest's plug-ins that were registered by decorator,
    so that a fresh process (resume) knows their names again (a plug-in named
    ``package.module:function`` in the scenario is imported by loading it)."""
    for key, record in records.items():
        registry = KEYS[key.partition("[")[0]]
        if ":" in record["name"] or record["name"] in registry.table:
            continue
        if record["path"].startswith("__main__:"):
            raise InputError(f"{source}: '{key}' = {record['name']!r} was registered by a "
                             f"script run as __main__, which no other process can import: "
                             f"name it in the scenario as 'package.module:function'")
        import_path(record["path"], key, source)


def source_sha256(path: str) -> str | None:
    """The sha256 of the file of the module holding ``path``'s factory
    (``"package.module:function"``), its bytes on disk now: what a run's manifest records
    of each user plug-in, so that ``resume`` can tell its code changed. Only the module's
    own file counts, not the modules it imports; None when the module has no file (one
    made at run time) or it cannot be imported or read."""
    try:
        file = getattr(importlib.import_module(path.partition(":")[0]), "__file__", None)
        if file is None:
            return None
        with open(file, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except Exception:  # any error of the plug-in's own module: nothing to hash
        return None
