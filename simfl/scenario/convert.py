"""TOML tables to config dataclasses and back: :func:`build_config` (types, range checks,
unknown keys with the nearest name) and :func:`flatten`, a table's dotted keys."""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Iterator
from typing import Any, Literal

from simfl.errors import InputError


def flatten(table: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) for every leaf of a nested table (a scenario as plain data)."""
    for key, value in table.items():
        if isinstance(value, dict):
            yield from flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def build_config(cls: type, table: Any, where: str, source: str) -> Any:
    """An instance of the config dataclass ``cls`` from a TOML table: unknown keys, wrong
    types and values outside their checks are InputErrors naming ``where`` + the key. A
    field whose metadata has ``expects`` (what it takes, in words) reports either as
    ``'key' = <the value as written> must be <expects>``."""
    if not isinstance(table, dict):
        raise InputError(f"{source}: [{where.rstrip('.')}] must be a table")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in table:
        if key not in names:
            near = difflib.get_close_matches(key, names, n=1)
            hint = f" (did you mean '{where}{near[0]}'?)" if near else ""
            raise InputError(f"{source}: unknown key '{where}{key}'{hint}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in table:
            continue
        key, expects = f"{where}{f.name}", f.metadata.get("expects")
        try:
            value = _convert(hints[f.name], table[f.name], key, source)
            check = f.metadata.get("check")
            if check is not None and not check[0](value):
                raise InputError(f"{source}: '{key}' = {value!r} {check[1]}")
        except InputError:
            if expects is None:
                raise
            raise InputError(f"{source}: '{key}' = {table[f.name]!r} must be {expects}") from None
        kwargs[f.name] = value
    return cls(**kwargs)


def _convert(hint: Any, value: Any, key: str, source: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return build_config(typing.cast(type, hint), value, f"{key}.", source)
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise InputError(f"{source}: '{key}' = {value!r} must be one of {list(choices)}")
        return value
    if origin is dict:  # a params table: its plug-in's factory checks the values
        if not isinstance(value, dict):
            raise InputError(f"{source}: [{key}] must be a table")
        return dict(value)
    if origin is tuple:
        (item,) = typing.get_args(hint)[:1]
        if not isinstance(value, list):
            raise InputError(f"{source}: '{key}' must be an array")
        return tuple(_convert(item, v, f"{key}[{i}]", source) for i, v in enumerate(value))
    if origin in (types.UnionType, typing.Union):
        raise TypeError(f"scenario field {key}: union types are not supported")
    return _scalar(hint, value, key, source)


def _scalar(hint: Any, value: Any, key: str, source: str) -> Any:
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        str: isinstance(value, str),
    }.get(hint)
    if ok is None:
        raise TypeError(f"scenario field {key}: unsupported type {hint}")
    if not ok:
        raise InputError(
            f"{source}: '{key}' must be {hint.__name__}, got {type(value).__name__} {value!r}"
        )
    if hint is int and not -(2**63) <= value < 2**63:
        raise InputError(f"{source}: '{key}' must be a 64-bit integer")
    if hint is float:
        try:
            value = float(value)
        except OverflowError:  # a TOML integer beyond the float range
            value = math.inf
        if not math.isfinite(value):
            raise InputError(f"{source}: '{key}' must be a finite number")
    return value
