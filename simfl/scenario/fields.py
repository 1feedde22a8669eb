"""What every section of a scenario is made of: a field with a default and a range check
(:func:`opt`), a plug-in's ``params`` table (:func:`params_table`), and the range checks
the sections share."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import field
from typing import Any

Check = tuple[Callable[[Any], bool], str]


def opt(default: Any, check: Check | None = None) -> Any:
    """A dataclass field with a default and an optional (predicate, message) range check."""
    if isinstance(default, list | dict) or dataclasses.is_dataclass(default):
        factory = default if callable(default) else (lambda: default)
        return field(default_factory=factory, metadata={"check": check})
    return field(default=default, metadata={"check": check})


POSITIVE: Check = (lambda v: v > 0, "must be > 0")
NON_NEGATIVE: Check = (lambda v: v >= 0, "must be >= 0")
FRACTION_OPEN: Check = (lambda v: 0 < v < 1, "must be in (0, 1)")
THETA: Check = (lambda v: 0 < v <= 1, "must be in (0, 1]")
# Bounds of values that scale a float32 computation or compound over rounds, so that a
# run with an extreme one fails at load (exit 2) instead of overflowing mid-run (a
# float32 conversion, an exponential, a sum of shares). They are far beyond any useful value.
LARGE = 1e30
POSITIVE_BOUNDED: Check = (lambda v: 0 < v <= LARGE, "must be in (0, 1e30]")
NON_NEGATIVE_BOUNDED: Check = (lambda v: 0 <= v <= LARGE, "must be in [0, 1e30]")
BOUNDED: Check = (lambda v: -LARGE <= v <= LARGE, "must be in [-1e30, 1e30]")
LOG_SIGMA: Check = (lambda v: 0 <= v <= 10, "must be in [0, 10] (a lognormal's sigma: "
                    "10 spreads values over a factor e^20 between -1 and +1 sd)")
UNIT_INTERVAL: Check = (lambda v: 0 <= v <= 1, "must be in [0, 1]")
RANK_CORRELATION: Check = (lambda v: -1 <= v <= 1, "must be in [-1, 1]")


def params_table() -> Any:
    """A section's ``params`` table: the hyper-parameters of a plug-in (simfl.plugins)
    that are no key of the section, passed to its factory by name."""
    return field(default_factory=dict, hash=False, metadata={"check": None})


def is_plain_name(text: str) -> bool:
    """A scenario name: empty (the file's stem) or one safe path component."""
    return text == "" or (re.fullmatch(r"[\w.=,+-]+", text) is not None
                          and text not in (".", ".."))
