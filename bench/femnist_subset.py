"""Write a FEMNIST file holding only the images that some seeds of a scenario read.

    python bench/femnist_subset.py scenarios/paper/femnist_convnet.toml --seeds 1 2 --out subset.npz
    xz -6 subset.npz     # seeds 1 and 2 of the ConvNet protocol: 57 MB

The papers' protocol keeps a seeded random half of the eligible writers, so a run
of one seed reads only those writers' images. A machine that cannot receive the
whole ``femnist_writers.npz`` (the GPU host of docs/reproduction/convnet_gpu.md
takes 64 MiB a transfer) can take this file instead: every row, label
and writer id is kept, so the writers each seed draws are the same, and the images
of the writers no listed seed draws are set to 0. Before the file is put in place
the script loads it for every listed seed and checks that the training and test
data equal the full file's (``torch.equal`` on pixels, labels, offsets and device
ids); a file that differs is not written. An existing ``--out`` is never
overwritten.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from simfl.data import load_data
from simfl.data.femnist import DEFAULT_RELATIVE_PATH, MAKE_IT
from simfl.data.location import resolve_data_path
from simfl.data.packed import ClientData, Clients, FederatedData
from simfl.errors import InputError
from simfl.rng import Streams
from simfl.scenario import DataConfig, load_scenario


def rows_read(writers: np.ndarray, drawn: list[FederatedData]) -> np.ndarray:
    """A mask of the rows (samples) whose writer is a device of any of ``drawn``."""
    ids = np.concatenate([np.asarray(part.client_ids) for data in drawn
                          for part in (data.train, data.test)])
    return np.isin(writers.astype(str), ids.astype(str))


def same(a: Clients, b: Clients) -> bool:
    assert isinstance(a, ClientData) and isinstance(b, ClientData)  # FEMNIST is held in memory
    return (torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
            and np.array_equal(a.offsets, b.offsets) and np.array_equal(a.client_ids, b.client_ids))


def write_subset(source: Path, out: Path, cfg: DataConfig, seeds: list[int]) -> int:
    """Write ``out``; return how many rows keep their image. Raise InputError if a seed's
    data from the new file differs from the full file's (then nothing is left at ``out``)."""
    if out.exists():
        raise InputError(f"{out}: already exists; not overwritten")
    full = {seed: load_data(replace(cfg, path=str(source)), Streams(seed)) for seed in seeds}
    with np.load(source) as npz:
        arrays = {key: npz[key] for key in npz.files}
    keep = rows_read(arrays["writer"], list(full.values()))
    arrays["images"][~keep] = 0
    partial = out.with_name(out.name + ".partial")
    with open(partial, "wb") as f:
        np.savez(f, **arrays)
    try:
        for seed in seeds:
            cut = load_data(replace(cfg, path=str(partial)), Streams(seed))
            if not (same(full[seed].train, cut.train) and same(full[seed].test, cut.test)):
                raise InputError(f"{out}: seed {seed}'s data differs from {source}'s")
    except BaseException:
        partial.unlink()
        raise
    partial.rename(out)
    return int(keep.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", help="a FEMNIST scenario (its [data] settings are used)")
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    try:
        cfg = load_scenario(args.scenario).data
        if cfg.dataset != "femnist":
            raise InputError(f"{args.scenario}: data.dataset is {cfg.dataset!r}, not 'femnist'")
        source = resolve_data_path(cfg.path, DEFAULT_RELATIVE_PATH, "FEMNIST file",
                                   "the .npz file", MAKE_IT)
        kept = write_subset(source, args.out, cfg, args.seeds)
    except InputError as err:
        print(f"femnist_subset: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"{args.out}: images of {kept} of the rows kept (seeds {args.seeds}), the rest 0;"
          f" each seed's data checked equal to {source}'s")


if __name__ == "__main__":
    main()
