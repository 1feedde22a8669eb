"""Checkpoints as plain data: what a checkpoint holds, turned into a tree that
``torch.load(..., weights_only=True)`` reads back without importing or calling anything.

A checkpoint is read from a run folder that anyone may have written (a study shared
between researchers, an archive), so reading one must execute nothing it names. The
tree holds only None, bools, ints, floats, strings, lists, string-keyed dicts and
torch tensors; everything else simfl puts in a checkpoint is tagged on the way in:

- a numpy array: ``{"__ndarray__": tensor, "dtype": name}`` (bool and numeric dtypes);
  a numpy scalar: ``{"__npscalar__": tensor, "dtype": name}``;
- a tuple: ``{"__tuple__": [...]}``; a dict whose keys are not all strings:
  ``{"__items__": [[key, value], ...]}``;
- an instance of one of :data:`TYPES` (the learner's answers in the journal: a rule's
  Selection, a protocol's Exchange, an evaluation, the Parquet parts committed):
  ``{"__type__": name, "fields": {...}}``, rebuilt from this table, never from a name
  found in the file.

Anything else is a TypeError on the way in, and an unknown tag or type name a
ValueError on the way out. Decoding gives back equal values of the same types.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from simfl.aggregate.base import Selection
from simfl.quantile.secagg import Exchange
from simfl.records import Committed
from simfl.train.evaluate import CohortEval

TYPES: dict[str, type] = {t.__name__: t for t in (Selection, Exchange, CohortEval, Committed)}
_DTYPES = {np.dtype(name) for name in ("bool", "int8", "int16", "int32", "int64", "uint8",
                                       "float16", "float32", "float64")}


def encode(value: Any) -> Any:
    """``value`` as a plain tree (module docstring); TypeError for what it cannot hold."""
    if value is None or isinstance(value, bool | int | float | str | torch.Tensor) and \
            not isinstance(value, np.generic):
        return value
    if isinstance(value, np.ndarray | np.generic):
        if value.dtype not in _DTYPES:
            raise TypeError(f"a checkpoint holds no numpy {value.dtype} values")
        tag = "__ndarray__" if isinstance(value, np.ndarray) else "__npscalar__"
        return {tag: torch.from_numpy(np.array(value, copy=True)), "dtype": value.dtype.name}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: encode(v) for k, v in value.items()}
        return {"__items__": [[encode(k), encode(v)] for k, v in value.items()]}
    name = type(value).__name__
    if TYPES.get(name) is type(value) and dataclasses.is_dataclass(value) \
            and not isinstance(value, type):
        return {"__type__": name, "fields": {f.name: encode(getattr(value, f.name))
                                             for f in dataclasses.fields(value)}}
    raise TypeError(f"a checkpoint holds no {type(value).__qualname__} values")


def decode(tree: Any) -> Any:
    """The value :func:`encode` made ``tree`` from; ValueError for a tree it cannot
    have made (an unknown tag or type name)."""
    if isinstance(tree, list):
        return [decode(v) for v in tree]
    if not isinstance(tree, dict):
        return tree
    if "__ndarray__" in tree or "__npscalar__" in tree:
        dtype = np.dtype(str(tree["dtype"]))
        if dtype not in _DTYPES:
            raise ValueError(f"a checkpoint holds no numpy {dtype} values")
        if "__ndarray__" in tree:
            return tree["__ndarray__"].numpy().astype(dtype, copy=True)
        return dtype.type(tree["__npscalar__"].numpy().astype(dtype).item())
    if "__tuple__" in tree:
        return tuple(decode(v) for v in tree["__tuple__"])
    if "__items__" in tree:
        return {decode(k): decode(v) for k, v in tree["__items__"]}
    if "__type__" in tree:
        cls = TYPES.get(str(tree["__type__"]))
        if cls is None:
            raise ValueError(f"a checkpoint holds no {tree['__type__']!r} values")
        return cls(**{k: decode(v) for k, v in tree["fields"].items()})
    if any(k.startswith("__") for k in tree):
        raise ValueError(f"unknown tag among {sorted(tree)[:3]} in a checkpoint")
    return {k: decode(v) for k, v in tree.items()}
