"""Make simfl's FEMNIST ``.npz`` from the forms researchers have it in.

Two sources, both FEMNIST as the LEAF benchmark preprocessed it (Caldas et al.,
"LEAF: A Benchmark for Federated Settings", 2018; EMNIST: Cohen et al. 2017):

- LEAF's json shards, ``data/femnist/data/{train,test}/*.json`` (or a directory of
  ``*.json`` such as ``all_data/``), read exactly as :mod:`simfl.data.leaf` reads them;
- TensorFlow Federated's HDF5 files (``fed_emnist_train.h5``, ``fed_emnist_test.h5``,
  or the ``_digitsonly`` pair of ``tff.simulation.datasets.emnist.load_data``):
  ``examples/<writer>/pixels`` (n, 28, 28) float32 and ``examples/<writer>/label`` (n,).
  TFF keeps LEAF's polarity (floats in [0, 1], 1.0 = white background; TFF's own
  examples invert with ``1 - pixels``). Needs h5py (``pip install -e ".[tff]"``).

Both store pixels as multiples of 1/255 (LEAF divides 8-bit grey levels by 255),
so the conversion to simfl's uint8 ``v = 255 x`` is exact; a file whose pixels are
not on that grid, or outside [0, 1], is refused rather than silently rounded.

The output is the layout of ``femnist_writers.npz`` that :mod:`simfl.data.femnist`
reads (compressed npz, no pickles):

====================  =====================================================
images  uint8 (N, 28, 28)   LEAF polarity: background 255
labels  int16 (N,)          0-9 digits, 10-35 'A'-'Z', 36-61 'a'-'z'
writer  str (N,)            writer id, one writer = one client
split   str (N,)            'train' / 'test' as the source split it (LEAF's train/
                            and test/ folders, TFF's _train / _test files), 'all'
                            where the source has no split; simfl ignores it
source  int8 (N,)           index into source_names
source_names  str (S,)      the folders / files the samples were read from (names only)
====================  =====================================================

Samples are sorted by writer id; within a writer, train before unsplit before
test, each in reading order. With it comes ``<out>.sha256``, one line in
``sha256sum`` format (``sha256sum -c`` checks it). An existing output is never
replaced; the npz is written to a temporary name and renamed into place.

``python -m simfl data femnist --from-leaf DIR --out PATH`` and
``--from-tff FILE.h5 [FILE.h5 ...] --out PATH`` call :func:`convert_femnist`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simfl.data.femnist import IMAGE_SHAPE, NUM_CLASSES
from simfl.data.leaf import IMAGE_FEATURES, read_shard, shard_files
from simfl.errors import InputError
from simfl.rundir import check_output_path, write_atomically

SPLIT_ORDER = ("train", "all", "test")  # order of a writer's samples in the output
_GRID_TOLERANCE = 1e-3  # in grey levels: float32 k / 255 * 255 is within ~1e-5 of k

# (writer, images uint8 (n, 28, 28), labels (n,), split, source index)
Piece = tuple[str, np.ndarray, np.ndarray, str, int]


@dataclasses.dataclass(frozen=True)
class ConversionSummary:
    """What :func:`convert_femnist` wrote; ``lines()`` is what the command prints."""

    out: Path
    checksum_file: Path
    sha256: str
    sources: tuple[str, ...]
    num_writers: int
    num_samples: int
    samples_by_split: dict[str, int]
    samples_per_writer: tuple[int, float, int]  # min, median, max
    num_classes_seen: int
    label_range: tuple[int, int]

    def lines(self) -> list[str]:
        low, median, high = self.samples_per_writer
        splits = ", ".join(f"{n:,} {s}" for s, n in self.samples_by_split.items() if n)
        return [
            f"wrote {self.out} ({self.out.stat().st_size / 1e6:.1f} MB)",
            f"  from: {', '.join(self.sources)}",
            f"  writers: {self.num_writers:,}; samples: {self.num_samples:,} ({splits})",
            f"  samples per writer: min {low}, median {median:g}, max {high}",
            f"  classes: {self.num_classes_seen} seen, labels {self.label_range[0]}"
            f"..{self.label_range[1]}" + ("  (digits only)" if self.label_range[1] < 10 else ""),
            f"  sha256 {self.sha256}  (in {self.checksum_file}; check with sha256sum -c)",
            f"  use: data.path = \"{self.out}\", or SIMFL_DATA_DIR=DIR with the file at"
            " DIR/femnist/femnist_writers.npz",
        ]


def convert_femnist(out: Path | str, leaf_dir: Path | str | None = None,
                    tff_files: Sequence[Path | str] = ()) -> ConversionSummary:
    """Write FEMNIST from LEAF json (``leaf_dir``) or TFF HDF5 (``tff_files``) as simfl's npz
    at ``out`` plus ``out.sha256``; exactly one of the two sources must be given.

    Raises InputError, before reading anything, if ``out`` or its checksum file exists
    or ``out`` does not end in ``.npz``; and on any malformed input.
    """
    if (leaf_dir is None) == (not tff_files):
        raise InputError("give exactly one source: a LEAF json directory or TFF .h5 file(s)")
    out = Path(out).expanduser()
    checksum_file = _check_outputs(out)
    if leaf_dir is not None:
        root = Path(leaf_dir).expanduser()
        shards = shard_files(str(root))
        sources = [f"LEAF json {root.name or root}"]
        pieces: Iterable[Piece] = _leaf_pieces(shards)
    else:
        files = [Path(f).expanduser() for f in tff_files]
        for f in files:
            if not f.is_file():
                raise InputError(f"{f}: TFF HDF5 file not found (--from-tff)")
        sources = [f"TFF h5 {f.name}" for f in files]
        pieces = _tff_pieces(files)
    arrays = _assemble(pieces, sources, str(leaf_dir or ", ".join(map(str, tff_files))))
    out.parent.mkdir(parents=True, exist_ok=True)
    digest = _write_npz(out, arrays)
    write_atomically(checksum_file, lambda tmp: tmp.write_text(f"{digest}  {out.name}\n"))
    return _summary(out, checksum_file, digest, sources, arrays)


def _check_outputs(out: Path) -> Path:
    """Refuse to replace anything; returns the checksum file's path."""
    if out.suffix != ".npz":
        raise InputError(f"{out}: --out must name the .npz file to write (e.g. "
                         "femnist/femnist_writers.npz)")
    checksum_file = out.with_name(out.name + ".sha256")
    for path in (out, checksum_file):
        if path.exists():
            raise InputError(f"{path}: already exists; not overwriting it (remove it or choose "
                             "another --out)")
    check_output_path(out)
    return checksum_file


# --- readers --------------------------------------------------------------------


def _leaf_pieces(shards: list[Path]) -> Iterator[Piece]:
    """Per (shard, user): uint8 images; the split is the shard's folder (train/, test/)."""
    for shard in shards:
        split = shard.parent.name if shard.parent.name in ("train", "test") else "all"
        for user, x, y in read_shard(shard):
            if x.shape[1] != IMAGE_FEATURES:
                raise InputError(f"{shard}: user '{user}' has {x.shape[1]} values per sample; "
                                 f"FEMNIST images have {IMAGE_FEATURES} (28 x 28)")
            images = _to_uint8(x.reshape(-1, *IMAGE_SHAPE), f"{shard}: user '{user}'")
            yield user, images, y, split, 0


def _tff_pieces(files: list[Path]) -> Iterator[Piece]:
    """Per (file, writer) of ``examples/<writer>/{pixels,label}``."""
    try:
        import h5py
    except ImportError:
        raise InputError("reading TFF .h5 files needs h5py: pip install -e \".[tff]\" "
                         "(or pip install h5py)") from None
    for index, path in enumerate(files):
        split = ("test" if "test" in path.stem else "train" if "train" in path.stem else "all")
        try:
            with h5py.File(path, "r") as h5:
                examples = h5.get("examples")
                if not isinstance(examples, h5py.Group):
                    raise InputError(f"{path}: no 'examples' group; expected TFF's layout "
                                     "examples/<writer>/pixels and .../label")
                for writer in examples:
                    yield (writer, *_tff_writer(examples[writer], f"{path}: writer '{writer}'"),
                           split, index)
        except OSError as e:
            raise InputError(f"{path}: cannot read as HDF5 ({e})") from None


def _tff_writer(group: Any, where: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        pixels, label = np.asarray(group["pixels"][()]), np.asarray(group["label"][()])
    except (KeyError, TypeError):
        raise InputError(f"{where}: needs datasets 'pixels' and 'label'") from None
    if label.ndim == 2 and label.shape[1] == 1:
        label = label[:, 0]
    if pixels.ndim != 3 or pixels.shape[1:] != IMAGE_SHAPE or label.ndim != 1 \
            or len(label) != len(pixels):
        raise InputError(f"{where}: 'pixels' must be (n, 28, 28) and 'label' (n,), got "
                         f"{pixels.shape} and {label.shape}")
    if pixels.dtype.kind != "f":
        raise InputError(f"{where}: 'pixels' must be floats in [0, 1], got {pixels.dtype}")
    if label.dtype.kind not in "iu":
        raise InputError(f"{where}: 'label' must be integers, got {label.dtype}")
    if len(label) == 0:
        raise InputError(f"{where}: has no samples")
    return _to_uint8(pixels, where), label.astype(np.int64)


def _to_uint8(x: np.ndarray, where: str) -> np.ndarray:
    """Floats k / 255 in [0, 1] -> uint8 k, refusing anything off that grid."""
    if not np.isfinite(x).all() or x.min() < 0.0 or x.max() > 1.0:
        raise InputError(f"{where}: pixels must be finite and in [0, 1] (LEAF/TFF polarity, "
                         f"1.0 = background), found {np.nanmin(x):g}..{np.nanmax(x):g}")
    levels = x.astype(np.float64) * 255.0
    rounded = np.rint(levels)
    off = float(np.abs(levels - rounded).max())
    if off > _GRID_TOLERANCE:
        raise InputError(f"{where}: pixels are not multiples of 1/255 (off by up to {off:.3g} "
                         "grey levels); refusing to round them")
    return rounded.astype(np.uint8)


# --- assembly and output ----------------------------------------------------------


def _assemble(pieces: Iterable[Piece], sources: list[str], what: str) -> dict[str, np.ndarray]:
    """The npz arrays: sorted by writer, each writer's samples in SPLIT_ORDER, reading order."""
    by_writer: dict[str, list[Piece]] = {}
    for piece in pieces:
        by_writer.setdefault(piece[0], []).append(piece)
    if not by_writer:
        raise InputError(f"{what}: no writers found")
    ordered = [piece for writer in sorted(by_writer)
               for piece in sorted(by_writer[writer], key=lambda p: SPLIT_ORDER.index(p[3]))]
    labels = np.concatenate([p[2] for p in ordered])
    if labels.min() < 0 or labels.max() >= NUM_CLASSES:
        raise InputError(f"{what}: labels must be in 0..{NUM_CLASSES - 1}, found "
                         f"{labels.min()}..{labels.max()}")
    counts = [len(p[2]) for p in ordered]
    return {
        "images": np.concatenate([p[1] for p in ordered]),
        "labels": labels.astype(np.int16),
        "writer": np.repeat(np.array([p[0] for p in ordered], dtype=str), counts),
        "split": np.repeat(np.array([p[3] for p in ordered], dtype=str), counts),
        "source": np.repeat(np.array([p[4] for p in ordered], dtype=np.int8), counts),
        "source_names": np.array(sources, dtype=str),
    }


def _write_npz(out: Path, arrays: dict[str, np.ndarray]) -> str:
    """Write the compressed npz atomically; return its sha256 (of the bytes renamed in place)."""
    def write(tmp: Path) -> None:
        with tmp.open("wb") as f:  # a file object: np.savez would append .npz to a name
            np.savez_compressed(f, **arrays)  # type: ignore[arg-type]  # numpy's stub: allow_pickle

    tmp = out.with_name(out.name + ".tmp")
    try:
        write_atomically(out, write)
    finally:
        tmp.unlink(missing_ok=True)  # only left behind when writing failed
    digest = hashlib.sha256()
    with out.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _summary(out: Path, checksum_file: Path, digest: str, sources: list[str],
             arrays: dict[str, np.ndarray]) -> ConversionSummary:
    writers, counts = np.unique(arrays["writer"], return_counts=True)
    split, labels = arrays["split"], arrays["labels"]
    return ConversionSummary(
        out=out, checksum_file=checksum_file, sha256=digest, sources=tuple(sources),
        num_writers=len(writers), num_samples=len(labels),
        samples_by_split={s: int((split == s).sum()) for s in SPLIT_ORDER},
        samples_per_writer=(int(counts.min()), float(np.median(counts)), int(counts.max())),
        num_classes_seen=len(np.unique(labels)),
        label_range=(int(labels.min()), int(labels.max())),
    )
