"""A directory of LEAF json shards (Caldas et al., "LEAF: A Benchmark for Federated Settings").

Each shard is ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...],
"y": [...]}}}``. If the directory has LEAF's ``train/`` and ``test/`` subfolders,
the shards of both are read and each user's samples merged (train first);
otherwise the ``*.json`` files of the directory itself are read. The split is
then by user (writer), as for the npz file (:mod:`simfl.data.split`).

Samples of 784 values are FEMNIST images (EMNIST, Cohen et al. 2017) in LEAF
polarity (floats in [0, 1], 1.0 = white background): they become (1, 28, 28),
inverted (1 - x) to MNIST polarity and standardised with one scalar mean/std
(or scaled per pixel as the Δ-FL authors' code does, ``data.pixel_scaling``).
Any other length is a flat feature vector standardised per feature. Both use
the training devices' statistics only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simfl.data.packed import ClientData, FederatedData
from simfl.data.split import federate
from simfl.errors import InputError
from simfl.rng import Streams
from simfl.scenario import DataConfig

IMAGE_SHAPE = (28, 28)
IMAGE_FEATURES = 28 * 28
IMAGE_NUM_CLASSES = 62  # FEMNIST's label space, even if a small shard misses some classes
# Flat features take max label + 1 classes: a stray huge label would size the model's
# output layer (LEAF's largest label space, Reddit's vocabulary, has 10k entries).
MAX_FLAT_CLASSES = 100_000

UserSamples = dict[str, list[tuple[np.ndarray, np.ndarray]]]  # user -> [(x (n, D), y (n,))]


# Peak bytes of loading per byte of json: the shards' parsed lists (a Python float
# takes 32 bytes for the about 19 characters of its text) then float32 arrays.
LOAD_BYTES_PER_JSON_BYTE = 3.0


def memory_terms(cfg: DataConfig) -> list[tuple[float, str, str]]:
    """Peak bytes of :func:`load_leaf` as (bytes, key, what), from the shards' sizes."""
    size = sum(shard.stat().st_size for shard in shard_files(cfg.path))
    return [(LOAD_BYTES_PER_JSON_BYTE * size, f"'data.path' = {cfg.path!r}",
             "the LEAF shards")]


def load_leaf(cfg: DataConfig, streams: Streams) -> FederatedData:
    """Read every shard under ``cfg.path``, split by user and standardise."""
    shards = shard_files(cfg.path)
    samples: UserSamples = {}
    num_features: int | None = None
    for shard in shards:
        for user, x, y in read_shard(shard):
            if num_features is None:
                num_features = x.shape[1]
            elif x.shape[1] != num_features:
                raise InputError(
                    f"{shard}: user '{user}' has {x.shape[1]} features,"
                    f" earlier users have {num_features}"
                )
            _check_label_range(shard, user, y, x.shape[1] == IMAGE_FEATURES)
            samples.setdefault(user, []).append((x, y))
    clients = _pack(samples)
    is_image = clients.x.shape[1] == IMAGE_FEATURES
    max_label = int(clients.y.max())
    if is_image:
        inverted = 1.0 - clients.x.reshape(-1, 1, *IMAGE_SHAPE)  # ink bright, as MNIST
        clients = ClientData(inverted, clients.y, clients.offsets, clients.client_ids)
    num_classes = IMAGE_NUM_CLASSES if is_image else max_label + 1
    return federate("leaf", clients, cfg, streams, num_classes, not is_image, cfg.path)


def shard_files(path: str) -> list[Path]:
    """Shards to read: ``train/*.json`` + ``test/*.json`` if both folders exist, else ``*.json``."""
    if not path:
        raise InputError("data.path must name a directory of LEAF json shards (dataset = 'leaf')")
    root = Path(path).expanduser()
    if root.is_file():
        raise InputError(f"{root}: data.path must be the directory holding the LEAF json shards")
    if not root.is_dir():
        raise InputError(f"{root}: LEAF data directory not found (data.path)")
    if (root / "train").is_dir() and (root / "test").is_dir():
        shards = sorted((root / "train").glob("*.json")) + sorted((root / "test").glob("*.json"))
    else:
        shards = sorted(root.glob("*.json"))
    if not shards:
        raise InputError(f"{root}: no LEAF *.json shards found (nor in train/ and test/)")
    return shards


def read_shard(shard: Path) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Validated (user, x (n, D) float32, y (n,) int64) of one shard, in the shard's user order."""
    try:
        table = json.loads(shard.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{shard}: cannot read LEAF json ({e})") from None
    except RecursionError:
        raise InputError(f"{shard}: cannot read LEAF json (nested too deeply)") from None
    if not isinstance(table, dict):
        raise InputError(f"{shard}: expected a json object with users, num_samples, user_data")
    for key in ("users", "num_samples", "user_data"):
        if key not in table:
            raise InputError(f"{shard}: missing key '{key}'")
    users, num_samples, user_data = table["users"], table["num_samples"], table["user_data"]
    if not isinstance(users, list) or not isinstance(num_samples, list):
        raise InputError(f"{shard}: 'users' and 'num_samples' must be lists")
    if len(users) != len(num_samples):
        raise InputError(
            f"{shard}: {len(users)} users but {len(num_samples)} entries in 'num_samples'"
        )
    if not isinstance(user_data, dict):
        raise InputError(f"{shard}: 'user_data' must be an object keyed by user")
    names = [str(user) for user in users]
    if len(set(names)) != len(names):
        raise InputError(f"{shard}: 'users' lists a user twice")
    return [
        (user, *_user_arrays(shard, user, user_data.get(user), count))
        for user, count in zip(names, num_samples, strict=True)
    ]


def _user_arrays(shard: Path, user: str, data: Any, count: Any) -> tuple[np.ndarray, np.ndarray]:
    where = f"{shard}: user '{user}'"
    if not isinstance(data, dict) or "x" not in data or "y" not in data:
        raise InputError(f"{where}: missing from 'user_data' or lacks 'x' / 'y'")
    try:
        x = np.asarray(data["x"], dtype=np.float32)
        y = np.asarray(data["y"])
    except (TypeError, ValueError) as e:
        raise InputError(f"{where}: 'x' must be a list of equal-length lists ({e})") from None
    if len(x) == 0:
        raise InputError(f"{where}: has no samples")
    if x.ndim != 2 or y.ndim != 1 or len(x) != len(y):
        raise InputError(f"{where}: 'x' must be (n, D) and 'y' (n,), got {x.shape} and {y.shape}")
    if count != len(y):
        raise InputError(f"{where}: num_samples says {count!r} but 'x'/'y' hold {len(y)}")
    if y.dtype.kind not in "iu" or y.min() < 0:
        raise InputError(f"{where}: labels must be non-negative integers")
    if not np.isfinite(x).all():
        raise InputError(f"{where}: features must be finite numbers")
    return x, y.astype(np.int64)


def _check_label_range(shard: Path, user: str, y: np.ndarray, is_image: bool) -> None:
    limit, what = ((IMAGE_NUM_CLASSES, "784-value (image) samples") if is_image
                   else (MAX_FLAT_CLASSES, "flat-feature samples"))
    if y.max() >= limit:
        raise InputError(f"{shard}: user '{user}': labels of {what} must be < {limit}, "
                         f"found {y.max()}")


def _pack(samples: UserSamples) -> ClientData:
    """One ClientData over all users, sorted by user id, each user's pieces in reading order."""
    client_ids = np.array(sorted(samples), dtype=str)
    pieces = [piece for user in client_ids for piece in samples[str(user)]]
    counts = np.array([sum(len(y) for _, y in samples[str(u)]) for u in client_ids], np.int64)
    return ClientData(
        x=torch.from_numpy(np.concatenate([x for x, _ in pieces])),
        y=torch.from_numpy(np.concatenate([y for _, y in pieces])),
        offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        client_ids=client_ids,
    )


def input_shape(cfg: DataConfig) -> tuple[tuple[int, ...], int]:
    """A sample's shape and the classes, before loading: FEMNIST's images at most
    (simfl.plugins.HOOKS)."""
    return (1, *IMAGE_SHAPE), IMAGE_NUM_CLASSES
