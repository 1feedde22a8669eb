"""Device-availability traces of FedScale and FLASH, converted into simfl's trace format.

**FedScale** (Lai et al., 2022; ``benchmark/dataset/data/device_info/client_behave_trace``
of SymbioticLab/FedScale, described in that folder's README.md): a pickled dict mapping
a client id to ``{'active': [..], 'inactive': [..], 'finish_time': T, 'duration': ..,
'model': ..}``, times in seconds. As FedScale's ``ClientMetadata.is_active``
(fedscale/cloud/internal/client_metadata.py) reads it, a client is online at time t
when ``active[i] <= t mod finish_time <= inactive[i]`` for some i: the i-th ``active``
and ``inactive`` times pair into an online interval, and the pattern repeats every
``finish_time`` seconds from 0; ``duration`` and ``model`` play no part. Departures:
intervals are half-open ``[active[i], inactive[i])``, cut at ``finish_time`` (which
FedScale never reaches); overlapping ones are joined; a client with fewer ``inactive``
than ``active`` times (an IndexError in FedScale) is refused.

**FLASH** (Yang et al., 2021, "Characterizing impacts of heterogeneity in federated
learning upon large-scale smartphone data"; ``data/state_traces.json`` of
PKU-Chengxu/FLASH, read by its models/client.py and models/timer.py): a json object
mapping a user id to ``{'guid': .., 'model': .., 'messages': ..}``, where ``messages``
holds lines ``YYYY-MM-DD HH:MM:SS<TAB>state``; states ``battery_charged_on`` /
``battery_charged_off``, ``wifi`` / ``2g`` ``3g`` ``4g`` ``5g`` ``unknown``,
``screen_on`` / ``screen_off``, ``screen_lock`` / ``screen_unlock`` and battery levels
``NN%``. As FLASH's ``Timer`` does, a user is ready (online) while locked, on wifi and
charging, from the message that makes all three hold to the one that ends it (a ready
span still open at the last message is dropped); a line that is not ``time<TAB>state``
or a user whose last message is not a second after the first make the user invalid
(never ready: left out here, and counted); an unknown state is refused (FLASH stops
on it). The pattern repeats every (last - first message time) seconds, as in
``Timer.ready``. Departure: FLASH turns the wall-clock strings into seconds with the
running machine's ``time.mktime``; here they are read as UTC (no daylight saving).

**Into simfl.** The clients with at least one online interval get ``client_idx``
0 .. N - 1 in the order of their ids (as integers when all ids are integers, else as
strings); the trace keeps each row's source id in a ``client_id`` column. Time origin:
FedScale's second 0, or midnight (00:00:00) of the first day in a FLASH file, is
simulated second ``start_s`` (so a FLASH trace keeps its clock's time of day when
``start_s`` is a whole number of days). Without ``horizon_s`` each client's recorded
span appears once; with it, the pattern is repeated, as both simulators repeat it,
to cover simulated time [0, horizon_s). Intervals are cut to [0, horizon_s). A
repetition into more than MAX_INTERVALS intervals is refused, counted before any is made.
The converted trace keeps what its rows cannot tell (simfl.population.trace's
metadata, in a Parquet file): the source's client count (``num_source``: the clients
never online and FLASH's invalid users included, as devices never online) and the end
of the window it covers, ``horizon_s`` or else the latest end of a client's recorded
span in simulated time (FedScale's ``finish_time``, a FLASH user's last message).
"""

from __future__ import annotations

import json
import math
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from simfl.errors import InputError
from simfl.population.availability import MAX_INTERVALS
from simfl.population.trace import TraceMetadata

DAY_S = 86400.0
FLASH_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
_FLASH_STATES: dict[str, tuple[str, bool]] = {
    "battery_charged_on": ("charged", True), "battery_charged_off": ("charged", False),
    "wifi": ("wifi", True), "unknown": ("wifi", False), "2g": ("wifi", False),
    "3g": ("wifi", False), "4g": ("wifi", False), "5g": ("wifi", False),
    "screen_lock": ("locked", True), "screen_unlock": ("locked", False),
    "screen_on": ("screen", True), "screen_off": ("screen", False),
}


@dataclass(frozen=True)
class Pattern:
    """One client's online intervals (sorted, disjoint) within its recorded span
    ``[start_s, end_s)``, which repeats with period ``end_s - start_s``."""

    on_s: np.ndarray
    off_s: np.ndarray
    start_s: float
    end_s: float


@dataclass(frozen=True)
class ConvertedTrace:
    """A source trace in simfl's form: rows sorted by (client_idx, t_on_s)."""

    client_idx: np.ndarray
    t_on_s: np.ndarray
    t_off_s: np.ndarray
    client_ids: tuple[str, ...]  # client_idx k is client_ids[k]
    num_source: int  # clients in the source file
    num_invalid: int  # of them, unusable (FLASH's invalid users)
    end_s: float  # the end of the window [0, end_s) the trace covers (module docstring)

    @property
    def row_client_id(self) -> np.ndarray:
        return np.asarray(self.client_ids, dtype=str)[self.client_idx]

    @property
    def metadata(self) -> TraceMetadata:
        """What the trace file records beside its rows: the source's clients, the window."""
        return TraceMetadata(self.num_source, self.end_s)


class _RefusedGlobal(pickle.UnpicklingError):
    pass


class _PlainUnpickler(pickle.Unpickler):
    """Loads only what a pickle builds without naming a global (dicts, lists, tuples,
    strings, numbers): any class or function, the only way a pickle runs code, is
    refused before it is looked up."""

    def find_class(self, module: str, name: str) -> Any:
        raise _RefusedGlobal(f"{module}.{name}")


def load_plain_pickle(path: Path) -> Any:
    """The plain data of a pickle file; InputError (one line) for anything else."""
    try:
        with path.open("rb") as f:
            return _PlainUnpickler(f).load()
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    except _RefusedGlobal as e:
        raise InputError(f"{path}: the pickle asks for {e}; simfl loads only plain "
                         "containers and numbers from a pickle (one can run code)") from None
    except Exception as e:  # a malformed pickle fails in many ways
        raise InputError(f"{path}: not a readable pickle ({type(e).__name__}: {e})") from None


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def _numbers(path: Path, cid: object, key: str, value: object) -> np.ndarray:
    if not isinstance(value, (list, tuple)) or not all(map(_is_number, value)):
        raise InputError(f"{path}: client {cid!r}: '{key}' must be a list of finite numbers")
    return np.asarray(value, dtype=np.float64)


def _fedscale_client(path: Path, cid: object, record: object) -> Pattern:
    if not isinstance(record, dict) or not {"active", "inactive", "finish_time"} <= set(record):
        raise InputError(f"{path}: client {cid!r}: not a FedScale availability record (a dict "
                         "with 'active', 'inactive' and 'finish_time')")
    active = _numbers(path, cid, "active", record["active"])
    inactive = _numbers(path, cid, "inactive", record["inactive"])
    finish = record["finish_time"]
    if not _is_number(finish) or finish <= 0 or len(inactive) < len(active):
        raise InputError(f"{path}: client {cid!r}: needs a number finish_time > 0 and an "
                         f"'inactive' time for each of its {len(active)} 'active' times")
    on = np.maximum(active, 0.0)
    off = np.minimum(inactive[:len(active)], finish)
    return _pattern(on, off, 0.0, finish)


def _pattern(on: np.ndarray, off: np.ndarray, start_s: float, end_s: float) -> Pattern:
    """Intervals [on, off) with the empty ones dropped, sorted, overlapping ones joined."""
    keep = on < off
    on, off = on[keep], off[keep]
    order = np.argsort(on, kind="stable")
    on, off = on[order], off[order]
    reach = np.maximum.accumulate(off) if off.size else off
    starts = np.ones(on.size, dtype=bool)
    starts[1:] = on[1:] > reach[:-1]
    ends = np.append(np.flatnonzero(starts)[1:] - 1, on.size - 1) if on.size else starts
    return Pattern(on[starts], reach[ends], start_s, end_s)


def read_fedscale(path: Path) -> dict[str, Pattern | None]:
    """FedScale's client_behave_trace (module docstring) as patterns by client id."""
    data = load_plain_pickle(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: not FedScale's client_behave_trace (a pickled dict of "
                         f"clients; found a {type(data).__name__})")
    return _by_id(path, {cid: _fedscale_client(path, cid, rec) for cid, rec in data.items()})


def _by_id(path: Path, patterns: dict[Any, Pattern | None]) -> dict[str, Pattern | None]:
    named = {str(cid): pattern for cid, pattern in patterns.items()}
    if len(named) < len(patterns):
        raise InputError(f"{path}: two client ids read the same as text (e.g. 1 and '1')")
    return named


def _flash_seconds(text: str) -> float:
    """Seconds since 1970-01-01 of a FLASH time string read as UTC (ValueError if bad)."""
    return datetime.strptime(text, FLASH_TIME_FORMAT).replace(tzinfo=UTC).timestamp()


def _flash_user(path: Path, uid: str, record: object) -> Pattern | None:
    """The user's ready intervals as FLASH's Timer finds them; None for an invalid user."""
    if not isinstance(record, dict) or not isinstance(record.get("messages"), str):
        raise InputError(f"{path}: user {uid!r}: not a FLASH trace record (an object with "
                         "a 'messages' string)")
    state = {"locked": False, "wifi": False, "charged": False, "screen": False}
    times: list[float] = []
    spans: list[tuple[float, float]] = []
    began: float | None = None
    for line in filter(None, (m.strip() for m in record["messages"].split("\n"))):
        try:
            stamp, what = (part.strip() for part in line.split("\t"))
            times.append(_flash_seconds(stamp))
            _flash_update(state, what.lower())
        except ValueError:
            return None
        except KeyError:
            raise InputError(f"{path}: user {uid!r}: unknown state {line!r} (FLASH knows "
                             f"{', '.join(_FLASH_STATES)} and battery levels NN%)") from None
        ready = state["locked"] and state["wifi"] and state["charged"]
        if ready and began is None:
            began = times[-1]
        elif not ready and began is not None:
            spans.append((began, times[-1]))
            began = None
    if not times or int(times[-1] - times[0]) <= 0:
        return None
    pairs = np.array(spans, dtype=np.float64).reshape(-1, 2)
    return _pattern(pairs[:, 0], pairs[:, 1], times[0], times[-1])


def _flash_update(state: dict[str, bool], what: str) -> None:
    if what.endswith("%"):
        float(what[:-1])  # a battery level: FLASH parses it and ignores it
        return
    key, value = _FLASH_STATES[what]
    state[key] = value


def read_flash(path: Path) -> dict[str, Pattern | None]:
    """FLASH's state_traces.json (module docstring) as patterns by user id, in seconds
    since 1970-01-01 (None for an invalid user)."""
    try:
        data = json.loads(path.read_bytes())
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    except (ValueError, RecursionError) as e:
        raise InputError(f"{path}: not json ({e})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a FLASH state trace (a json object of users; found "
                         f"{type(data).__name__})")
    return _by_id(path, {uid: _flash_user(path, uid, rec) for uid, rec in data.items()})


def _flash_origin(patterns: dict[str, Pattern | None]) -> float:
    """Midnight of the first day in a FLASH trace (seconds since 1970-01-01)."""
    first = min((p.start_s for p in patterns.values() if p is not None), default=0.0)
    return math.floor(first / DAY_S) * DAY_S


def _sorted_ids(ids: list[str]) -> list[str]:
    if all(re.fullmatch(r"-?\d+", i) for i in ids):
        return sorted(ids, key=int)
    return sorted(ids)


def _copy_range(pattern: Pattern, shift_s: float, horizon_s: float | None
                ) -> tuple[float, float]:
    """(first, end): the multiples k of the period, first <= k < end, at which the
    shifted pattern is laid down. Floats, so that a period far shorter than the horizon
    counts its copies (up to inf) without making any."""
    if horizon_s is None:
        return 0.0, 1.0
    period = pattern.end_s - pattern.start_s
    anchor = pattern.start_s + shift_s
    return float(np.floor(-anchor / period)), float(np.ceil((horizon_s - anchor) / period))


def _place(patterns: dict[str, Pattern | None], shift_s: float, horizon_s: float | None,
           path: Path) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    """Each client's intervals in simulated time, cut to [0, horizon_s); refused, before
    any is made, when they would be more than MAX_INTERVALS."""
    end = math.inf if horizon_s is None else horizon_s
    present = {cid: pattern for cid in _sorted_ids(list(patterns))
               if (pattern := patterns[cid]) is not None and pattern.on_s.size}
    ranges = {cid: _copy_range(pattern, shift_s, horizon_s) for cid, pattern in present.items()}
    counts = {cid: math.inf if math.isnan(last - first)  # copies from -inf to inf
              else (last - first) * present[cid].on_s.size
              for cid, (first, last) in ranges.items()}
    total = sum(counts.values())
    if total > MAX_INTERVALS:
        cid = max(counts, key=lambda c: counts[c])
        busiest = present[cid]
        repeated = ("the trace" if horizon_s is None else
                    f"repeating the trace up to --horizon-s {horizon_s:g}")
        raise InputError(
            f"{path}: {repeated} gives about {total:.3g} intervals (limit "
            f"{MAX_INTERVALS:.0e}); client {cid!r} has {counts[cid]:.3g} of them "
            f"({busiest.on_s.size} per period of {busiest.end_s - busiest.start_s:.3g} s): "
            "shorten the horizon")
    ids, ons, offs = [], [], []
    for cid, pattern in present.items():
        copies = np.arange(*ranges[cid]) * (pattern.end_s - pattern.start_s)
        on = np.clip((pattern.on_s + shift_s)[None, :] + copies[:, None], 0.0, end).ravel()
        off = np.clip((pattern.off_s + shift_s)[None, :] + copies[:, None], 0.0, end).ravel()
        if np.any(on < off):
            ids.append(cid)
            ons.append(on[on < off])
            offs.append(off[on < off])
    return ids, ons, offs


def convert_trace(path: Path, source: str, start_s: float = 0.0,
                  horizon_s: float | None = None) -> ConvertedTrace:
    """Read a ``source`` ("fedscale" or "flash") trace file into simfl's form (module
    docstring); InputError for a file that is not one, before anything is written."""
    if not math.isfinite(start_s) or horizon_s is not None and not 0 < horizon_s < math.inf:
        raise InputError(f"{path}: needs a finite start (got {start_s}) and a finite horizon "
                         f"> 0 (got {horizon_s})")
    readers: dict[str, Callable[[Path], dict[str, Pattern | None]]] = {
        "fedscale": read_fedscale, "flash": read_flash}
    patterns = readers[source](path)
    origin = _flash_origin(patterns) if source == "flash" else 0.0
    ids, ons, offs = _place(patterns, start_s - origin, horizon_s, path)
    if not ids:
        raise InputError(f"{path}: no client of the trace is ever online"
                         + (" before --horizon-s" if horizon_s is not None else ""))
    counts = [on.size for on in ons]
    spans_end = max(p.end_s for p in patterns.values() if p is not None) + start_s - origin
    return ConvertedTrace(
        client_idx=np.repeat(np.arange(len(ids), dtype=np.int64), counts),
        t_on_s=np.concatenate([np.zeros(0), *ons]), t_off_s=np.concatenate([np.zeros(0), *offs]),
        client_ids=tuple(ids), num_source=len(patterns),
        num_invalid=sum(p is None for p in patterns.values()),
        end_s=spans_end if horizon_s is None else horizon_s)
