"""FEMNIST from the all-writers npz file (``femnist_writers.npz``).

FEMNIST is NIST Special Database 19 split by writer as in the LEAF benchmark
(Caldas et al., "LEAF: A Benchmark for Federated Settings", 2018), over the 62
classes of EMNIST ByClass (Cohen et al., "EMNIST: an extension of MNIST to
handwritten letters", 2017). The file stores LEAF polarity (uint8, background
255); samples are turned to MNIST polarity (ink bright), x = (255 - v) / 255,
then standardised with one mean and std taken over the training devices' pixels
(``data.standardise``), or scaled per pixel as the Δ-FL authors' code does
(``data.pixel_scaling = "authors"``, :func:`simfl.data.split.authors_pixels`).

The split is by writer (the Δ-FL papers' protocol, see :mod:`simfl.data.split`);
the file's per-sample ``split`` column (LEAF's other protocol) is ignored.
"""

from __future__ import annotations

import zipfile
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simfl.data.location import resolve_data_path
from simfl.data.packed import ClientData, FederatedData, client_rows
from simfl.data.split import authors_pixels, group_rows, split_clients
from simfl.errors import InputError
from simfl.rng import Streams
from simfl.scenario import DataConfig

NUM_CLASSES = 62
IMAGE_SHAPE = (28, 28)
DEFAULT_RELATIVE_PATH = Path("femnist") / "femnist_writers.npz"
MAKE_IT = ("To make it from LEAF's json or TFF's .h5: python -m simfl data femnist"
           " --from-leaf DIR | --from-tff FILE.h5 ... --out PATH"
           " (docs/usage.md: Getting the data)")
_CHUNK_ROWS = 4096  # images per step: temporaries (~40 MB) stay below malloc's mmap threshold
_READ_ERRORS = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)


def load_femnist(cfg: DataConfig, streams: Streams) -> FederatedData:
    """Load FEMNIST, split it by writer and standardise it with training-device stats."""
    path = resolve_data_path(cfg.path, DEFAULT_RELATIVE_PATH, "FEMNIST file", "the .npz file",
                             MAKE_IT)
    with _open_npz(path) as npz:
        labels = _read(npz, "labels", path)
        writers = _read(npz, "writer", path)
        _check_index(labels, writers, path)
        groups = group_rows(writers.astype(str) if writers.dtype.kind == "S" else writers)
        keep = _from_sources(npz, groups.order[groups.offsets[:-1]], cfg.sources, path)
        rng = streams.numpy("data_split")
        train_idx, test_idx = split_clients(np.diff(groups.offsets), cfg, rng, str(path), keep)
        images = _read(npz, "images", path)  # the one large array, read last
    if images.dtype != np.uint8 or images.shape != (len(labels), *IMAGE_SHAPE):
        raise InputError(
            f"{path}: 'images' must be uint8 of shape ({len(labels)}, 28, 28) to match"
            f" 'labels', got {images.dtype} {images.shape}"
        )
    train_rows = groups.order[client_rows(groups.offsets, train_idx)]
    test_rows = groups.order[client_rows(groups.offsets, test_idx)]
    lut = _pixel_table(_pixel_counts(images, train_rows) if cfg.standardise else None)

    def pack(client_idx: np.ndarray, rows: np.ndarray) -> ClientData:
        counts = np.diff(groups.offsets)[client_idx]
        return ClientData(
            x=_convert(images, rows, lut),
            y=torch.from_numpy(labels[rows].astype(np.int64)),
            offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            client_ids=groups.client_ids[client_idx],
        )

    train, test = pack(train_idx, train_rows), pack(test_idx, test_rows)
    if cfg.pixel_scaling == "authors":
        train_x, test_x = authors_pixels(train.x, test.x)
        train, test = replace(train, x=train_x), replace(test, x=test_x)
    return FederatedData(name="femnist", train=train, test=test, num_classes=NUM_CLASSES)


def count_train_clients(cfg: DataConfig, streams: Streams) -> int:
    """The training writers :func:`load_femnist` keeps, from the file's writer column
    (and sources) alone, split as it splits them: no image is read."""
    path = resolve_data_path(cfg.path, DEFAULT_RELATIVE_PATH, "FEMNIST file", "the .npz file",
                             MAKE_IT)
    with _open_npz(path) as npz:
        writers = _read(npz, "writer", path)
        groups = group_rows(writers.astype(str) if writers.dtype.kind == "S" else writers)
        keep = _from_sources(npz, groups.order[groups.offsets[:-1]], cfg.sources, path)
    train_idx, _ = split_clients(np.diff(groups.offsets), cfg, streams.numpy("data_split"),
                                 str(path), keep)
    return int(train_idx.size)


def _from_sources(npz: Any, first_rows: np.ndarray, sources: tuple[str, ...],
                  path: Path) -> np.ndarray | None:
    """Per writer (``first_rows``: a row of each), whether its samples come from one of
    ``sources``, names in the file's ``source_names`` (``source`` indexes them per
    sample); None when ``sources`` is empty (every writer)."""
    if not sources:
        return None
    names = [str(name) for name in _read(npz, "source_names", path)]
    unknown = [name for name in sources if name not in names]
    if unknown:
        raise InputError(f"{path}: data.sources: no source {unknown[0]!r} in the file "
                         f"(its source_names: {', '.join(names)})")
    wanted = [names.index(name) for name in sources]
    return np.isin(_read(npz, "source", path)[first_rows], wanted)


# Peak bytes of loading per byte of the file's uint8 images: the images, their float32
# copy and the chunks between (measured with getrusage on femnist_writers.npz: 5.03).
LOAD_BYTES_PER_PIXEL = 5.2


def memory_terms(cfg: DataConfig) -> list[tuple[float, str, str]]:
    """Peak bytes of :func:`load_femnist` as (bytes, key, what), from the sizes the npz
    archive lists for its arrays (nothing is read; an unreadable file adds nothing here
    and is refused by the loader)."""
    path = resolve_data_path(cfg.path, DEFAULT_RELATIVE_PATH, "FEMNIST file", "the .npz file",
                             MAKE_IT)
    try:
        with zipfile.ZipFile(path) as archive:
            sizes = {info.filename: info.file_size for info in archive.infolist()}
    except _READ_ERRORS:
        return []
    images = sizes.get("images.npy", 0)
    rest = sum(sizes.values()) - images
    return [(LOAD_BYTES_PER_PIXEL * images + 4 * rest, f"'data.path' = {str(path)!r}",
             "the FEMNIST images as float32")]


def _open_npz(path: Path) -> Any:
    try:
        npz = np.load(path, allow_pickle=False)
    except _READ_ERRORS as e:  # numpy takes bytes that are neither npz nor npy for a pickle
        why = "not an .npz archive" if "allow_pickle" in str(e) else str(e)
        raise InputError(f"{path}: cannot read as an .npz file ({why})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise InputError(f"{path}: not an .npz archive (a single array)")
    return npz


def _read(npz: Any, key: str, path: Path) -> np.ndarray:
    if key not in npz.files:
        raise InputError(f"{path}: missing key '{key}' (has {sorted(npz.files)})")
    try:
        return np.asarray(npz[key])
    except _READ_ERRORS as e:
        raise InputError(
            f"{path}: cannot read '{key}', the file is corrupt or truncated ({e})"
        ) from None


def _check_index(labels: np.ndarray, writers: np.ndarray, path: Path) -> None:
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise InputError(f"{path}: 'labels' must be a 1-D integer array, got {labels.dtype}")
    if writers.ndim != 1 or writers.dtype.kind not in "US":
        raise InputError(f"{path}: 'writer' must be a 1-D string array, got {writers.dtype}")
    if len(writers) != len(labels):
        raise InputError(
            f"{path}: 'writer' has {len(writers)} entries but 'labels' has {len(labels)}"
        )
    if len(labels) and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise InputError(
            f"{path}: labels must be in 0..{NUM_CLASSES - 1}, found {labels.min()}..{labels.max()}"
        )


def _pixel_counts(images: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(256,) how often each uint8 value occurs in the given images (exact statistics)."""
    counts = np.zeros(256, np.int64)
    for start in range(0, len(rows), _CHUNK_ROWS):
        counts += np.bincount(images[rows[start : start + _CHUNK_ROWS]].ravel(), minlength=256)
    return counts


def _pixel_table(counts: np.ndarray | None) -> np.ndarray:
    """(256,) float32: stored value v -> MNIST-polarity value, standardised with the
    training pixels' histogram ``counts`` (or left in [0, 1] when it is None)."""
    inverted = (255.0 - np.arange(256)) / 255.0  # ink bright, background 0
    if counts is None:
        return inverted.astype(np.float32)
    total = max(int(counts.sum()), 1)
    mean = float(counts @ inverted) / total
    std = float(np.sqrt(counts @ (inverted - mean) ** 2 / total))
    return ((inverted - mean) / (std if std > 0 else 1.0)).astype(np.float32)


def _convert(images: np.ndarray, rows: np.ndarray, lut: np.ndarray) -> torch.Tensor:
    """(len(rows), 1, 28, 28) float32 of the given rows, a chunk at a time (no full float copy)."""
    out = np.empty((len(rows), 1, *IMAGE_SHAPE), np.float32)
    for start in range(0, len(rows), _CHUNK_ROWS):
        stop = min(start + _CHUNK_ROWS, len(rows))
        np.take(lut, images[rows[start:stop]], out=out[start:stop, 0])  # 2x lut[...]'s speed
    return torch.from_numpy(out)


def input_shape(cfg: DataConfig) -> tuple[tuple[int, ...], int]:
    """A sample's shape and the classes, before loading (simfl.plugins.HOOKS)."""
    return (1, *IMAGE_SHAPE), NUM_CLASSES
