"""The registry's mechanism: a plug-in point's rows (:class:`Plugin`), its names
(:class:`Registry`: simfl's own, registered by decorator, entry points and
``package.module:function``), importing a factory or hook by path, checking a factory's
signature, building what it makes, and the error of a plug-in that breaks its contract
(:class:`PluginBroke`). simfl's own rows are in simfl.plugins.builtin."""

from __future__ import annotations

import difflib
import importlib
import inspect
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
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
# samples its keys fix (data made from its keys, never missing); count_train(cfg, streams)
# -> the training devices it keeps, counted without loading it (``trace stats``).
# Models: train_flops() -> its training FLOPs per sample (simfl.population.compute; a
# model without it is counted from its forward pass, simfl.train.models.forward_macs).
# Estimators: base(cfg) -> the name of the estimator it wraps (its keys and needs count
# as the scenario's). Availability modes (simfl.population.modes says which of simfl's
# declares what): populate(cfg, devices, streams, covariate) -> Drawn, the intervals
# with the habits or mapped trace a run keeps; habits(cfg, devices, covariate, streams)
# -> each device's Habits; rates(cfg, devices, mapped trace) -> the true online rates
# (ipw_known's oracle); profile(cfg) -> (online share, mean session s) for devices.parquet;
# intervals(cfg, training devices) -> a device's expected online intervals (the memory
# guard); check_devices(cfg, training devices) -> InputError for a count it cannot serve.
HOOKS: dict[str, tuple[str, ...]] = {
    "aggregators": (), "models": ("train_flops",), "estimators": ("base",),
    "datasets": ("input_shape", "memory_terms", "sizes", "count_train"),
    "availability": ("populate", "habits", "rates", "profile", "intervals", "check_devices"),
}
# What a plug-in declares of itself beside its hooks, as keyword arguments of its
# decorator or attributes of its factory (simfl's own in their rows): the fields of
# :class:`Plugin` of these names, False unless declared.
FLAGS = ("filters_by_threshold", "needs_rates", "applies_scales")


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
    # an estimator that weighs by the availability model's true online rates (the
    # EstimatorContext's known_rates, ipw_known's oracle): a scenario naming it, or a
    # wrapper of it, needs an availability mode with a rates hook
    needs_rates: bool = False
    # an aggregation rule whose combine applies an async buffer's staleness scales
    # (RoundInputs.scales, simfl.aggregate.base): without it an async run says that the
    # rule may weigh a stale update as a fresh one
    applies_scales: bool = False
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
            path: str | None = None, hooks: dict[str, Any] | None = None,
            **flags: bool) -> Plugin:
        """Register ``factory`` as ``name`` (replacing a plug-in of that name, never one
        of simfl's own), with its ``hooks`` (:data:`HOOKS`) and ``flags``
        (:data:`FLAGS`); InputError if it does not fit the point."""
        what = f"{self.point} plug-in {name!r}"
        if name in self.table and self.table[name].builtin:
            raise InputError(f"{what}: {name!r} is one of simfl's own {self.point}")
        if not callable(factory):
            raise InputError(f"{what} is not a function (a {type(factory).__name__})")
        keys, required = hyperparameters(self.point, factory, what)
        where = path or f"{factory.__module__}:{factory.__qualname__}"
        plugin = Plugin(name, where, keys, required, (), async_refused, factory=factory,
                        hooks=self._hooks(hooks or {}, what), **flags)
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

    def _flags(self, factory: Callable[..., Any]) -> dict[str, bool]:
        """The flags a factory declares as attributes of its own (:data:`FLAGS`)."""
        return {flag: bool(getattr(factory, flag, False)) for flag in FLAGS}

    def register(self, name: str | None = None, *, async_refused: str = "",
                 filters_by_threshold: bool = False, needs_rates: bool = False,
                 applies_scales: bool = False, **hooks: Any) -> Callable[[F], F]:
        """Decorator: register the decorated factory under ``name`` (default: its own);
        ``filters_by_threshold`` (aggregation rules): the rule trains the reporters at or
        above the estimator panel's threshold, as Δ-FL; ``needs_rates`` (estimators): it
        weighs by the availability model's true online rates, as ``ipw_known``;
        ``applies_scales`` (aggregation rules): its combine applies
        ``RoundInputs.scales`` in async mode (:class:`Plugin`); each also an attribute of
        the factory; ``hooks``: the point's functions it provides (:data:`HOOKS`), or
        attributes of the factory."""
        def decorate(factory: F) -> F:
            declared = self._flags(factory)
            self.add(name or factory.__name__, factory, async_refused,
                     hooks={**self._declared(factory), **hooks},
                     filters_by_threshold=filters_by_threshold
                     or declared["filters_by_threshold"],
                     needs_rates=needs_rates or declared["needs_rates"],
                     applies_scales=applies_scales or declared["applies_scales"])
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
                            hooks=self._declared(found), **self._flags(found))
        if ":" in name:
            factory = import_path(name, key, source)
            what = f"{source}: '{key}' = {name!r}"
            keys, required = hyperparameters(self.point, factory, what)
            return Plugin(name, name, keys, required, (),
                          getattr(factory, "async_refused", ""), factory=factory,
                          hooks=self._hooks(self._declared(factory), what),
                          **self._flags(factory))
        near = difflib.get_close_matches(name, self.names(), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise InputError(f"{source}: '{key}' = {name!r} must be one of {self.names()} or a "
                         f"'package.module:function'{hint}")

    def readers(self, key: str) -> list[str]:
        """simfl's own names that read section key ``key``."""
        return [p.name for p in self.builtins() if key in (*p.keys, *p.reads)]
