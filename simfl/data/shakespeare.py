"""Shakespeare next-character prediction, one device per speaking role: the Δ-FL papers'
third task (Laguel, Pillutla, Malick, Harchaoui, arXiv:2112.09429, App. C.1.3; the data
set is LEAF's, Caldas et al. 2018, after McMahan et al. 2017).

A sample is a window of ``WINDOW`` = 20 characters and the next character; characters
map to 53 classes: a–z → 0–25, A–Z → 26–51, anything else → 52 ("other"). A role's
text is built as LEAF builds it (``gen_all_data.py``): its lines in order joined by a
space, runs of two or more spaces collapsed to one; a text of L characters gives
L − 20 samples, in order. Inputs are stored as character indices (uint8, (N, 20):
about 80 MB for the whole corpus), never one-hot; the model encodes them.

Two sources, chosen by ``data.path`` (default ``$SIMFL_DATA_DIR/shakespeare/
shakespeare_by_role.jsonl.gz``):

- a ``.jsonl`` / ``.jsonl.gz`` file with one role per line: ``play``, ``role`` and its
  ``lines`` (the by-role corpus of ``../shared/data/shakespeare``); device id
  ``play/role``;
- a directory in LEAF's json format (``users`` / ``num_samples`` / ``user_data`` with
  string windows ``x`` and next characters ``y``; ``train/`` and ``test/`` merged per
  user, train first, as for FEMNIST): each window's last 20 characters are the input.
  LEAF's windows are 80 characters, so its first 60 samples of every role are not
  formed this way (a departure from the by-role path, stated).

The split is by role (:mod:`simfl.data.split`); inputs are never standardised.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simfl.data.leaf import shard_files
from simfl.data.location import resolve_data_path
from simfl.data.packed import ClientData, FederatedData
from simfl.data.split import federate
from simfl.errors import InputError
from simfl.rng import Streams
from simfl.scenario import DataConfig

WINDOW = 20
NUM_CLASSES = 53  # a-z, A-Z, other
DEFAULT_RELATIVE_PATH = Path("shakespeare") / "shakespeare_by_role.jsonl.gz"
_SPACES = re.compile(" {2,}")


def char_classes(text: str) -> np.ndarray:
    """The class of every character of ``text`` (uint8): a–z 0–25, A–Z 26–51, other 52."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    classes = np.full(codes.shape, NUM_CLASSES - 1, dtype=np.uint8)
    lower, upper = (codes >= ord("a")) & (codes <= ord("z")), (codes >= ord("A")) & (
        codes <= ord("Z"))
    classes[lower] = codes[lower] - ord("a")
    classes[upper] = codes[upper] - ord("A") + 26
    return classes


def role_text(lines: list[str]) -> str:
    """A role's text as LEAF builds it: lines joined by spaces, runs of spaces collapsed."""
    return _SPACES.sub(" ", " ".join(lines))


def windows(classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x (n, WINDOW) uint8, y (n,)) of a text's classes: every window and the next one."""
    if len(classes) <= WINDOW:
        return np.zeros((0, WINDOW), dtype=np.uint8), classes[:0]
    x = np.lib.stride_tricks.sliding_window_view(classes, WINDOW)[:-1]
    return x, classes[WINDOW:]


# Peak bytes of loading per byte of the corpus file (its windows, 20 uint8 per character;
# measured with getrusage on shakespeare_by_role.jsonl.gz: 118 per gzip byte); a LEAF
# directory's json holds the windows as text, about one byte per input byte.
LOAD_BYTES_PER_FILE_BYTE = {"gz": 125.0, "text": 40.0, "leaf": 3.0}


def memory_terms(cfg: DataConfig) -> list[tuple[float, str, str]]:
    """Peak bytes of :func:`load_shakespeare` as (bytes, key, what), from file sizes."""
    path = resolve_data_path(cfg.path, DEFAULT_RELATIVE_PATH, "Shakespeare data",
                             "a by-role .jsonl(.gz) file or a LEAF-format directory",
                             file_only=False)
    if path.is_dir():
        size = sum(p.stat().st_size for p in path.rglob("*.json") if p.is_file())
        kind = "leaf"
    else:
        size, kind = path.stat().st_size, "gz" if path.suffix == ".gz" else "text"
    return [(LOAD_BYTES_PER_FILE_BYTE[kind] * size, f"'data.path' = {str(path)!r}",
             "the Shakespeare windows")]


def load_shakespeare(cfg: DataConfig, streams: Streams) -> FederatedData:
    """Every role of the corpus (or LEAF directory) at ``data.path``, split by role."""
    path = resolve_data_path(cfg.path, DEFAULT_RELATIVE_PATH, "Shakespeare data",
                             "a by-role .jsonl(.gz) file or a LEAF-format directory",
                             file_only=False)
    roles = _read_leaf_dir(path) if path.is_dir() else _read_by_role(path)
    clients = _pack(roles, path)
    return federate("shakespeare", clients, dataclasses.replace(cfg, standardise=False),
                    streams, NUM_CLASSES, False, str(path))


def _read_by_role(path: Path) -> list[tuple[str, np.ndarray, np.ndarray]]:
    opener: Any = gzip.open if path.suffix == ".gz" else open
    roles = []
    try:
        with opener(path, "rt", encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise InputError(f"{path}: line {number}: not json ({e.msg})") from None
                if not (isinstance(record, dict) and isinstance(record.get("lines"), list)
                        and all(isinstance(t, str) for t in record["lines"])
                        and {"play", "role"} <= record.keys()):
                    raise InputError(f"{path}: line {number}: needs 'play', 'role' and "
                                     "'lines' (a list of strings)")
                x, y = windows(char_classes(role_text(record["lines"])))
                roles.append((f"{record['play']}/{record['role']}", x, y))
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise InputError(f"{path}: cannot read the by-role corpus ({e})") from None
    return roles


def _read_leaf_dir(path: Path) -> list[tuple[str, np.ndarray, np.ndarray]]:
    pieces: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for shard in shard_files(str(path)):
        try:
            table = json.loads(shard.read_text())
            users, user_data = table["users"], table["user_data"]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise InputError(f"{shard}: not LEAF json with 'users' and 'user_data' "
                             f"({type(e).__name__}: {e})") from None
        for user in users:
            data = user_data.get(user) if isinstance(user_data, dict) else None
            xs, ys = (data or {}).get("x"), (data or {}).get("y")
            if not (isinstance(xs, list) and isinstance(ys, list) and len(xs) == len(ys)
                    and all(isinstance(s, str) and len(s) >= WINDOW for s in xs)
                    and all(isinstance(c, str) and len(c) == 1 for c in ys)):
                raise InputError(f"{shard}: user '{user}': 'x' must be strings of at least "
                                 f"{WINDOW} characters and 'y' single characters, as many")
            x = char_classes("".join(s[-WINDOW:] for s in xs)).reshape(-1, WINDOW)
            pieces.setdefault(str(user), []).append((x, char_classes("".join(ys))))
    return [(user, np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts]))
            for user, parts in sorted(pieces.items())]


def _pack(roles: list[tuple[str, np.ndarray, np.ndarray]], path: Path) -> ClientData:
    ids = [role for role, _, _ in roles]
    if len(set(ids)) != len(ids):
        twice = next(r for i, r in enumerate(ids) if r in ids[:i])
        raise InputError(f"{path}: role '{twice}' is listed twice")
    counts = np.array([len(y) for _, _, y in roles], dtype=np.int64)
    empty = np.zeros((0, WINDOW), dtype=np.uint8)
    return ClientData(
        x=torch.from_numpy(np.concatenate([x for _, x, _ in roles] or [empty])),
        y=torch.from_numpy(np.concatenate([y for _, _, y in roles] or [empty[:, 0]])
                           .astype(np.int64)),
        offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        client_ids=np.array(ids, dtype=str))


def input_shape(cfg: DataConfig) -> tuple[tuple[int, ...], int]:
    """A sample's shape (its window of character indices) and the classes, before
    loading (simfl.plugins.HOOKS)."""
    return (WINDOW,), NUM_CLASSES
