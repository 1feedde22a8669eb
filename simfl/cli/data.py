"""``data``: FEMNIST written as simfl reads it (npz + sha256) from LEAF's json shards or
TensorFlow Federated's HDF5 files."""

from __future__ import annotations

import argparse
from pathlib import Path

from simfl.cli.common import Parser, output_path, say


def data_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m simfl data",
        description="Write FEMNIST as simfl reads it (npz + sha256) from the forms "
                    "researchers have: LEAF's json shards or TFF's HDF5 files.")
    parser.add_argument("dataset", choices=("femnist",), help="the data set")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-leaf", type=Path, metavar="DIR",
                        help="LEAF's data/femnist/data (its train/ and test/ json shards)")
    source.add_argument("--from-tff", type=Path, nargs="+", metavar="FILE.h5",
                        help="fed_emnist_train.h5 and fed_emnist_test.h5 (needs h5py)")
    parser.add_argument("--out", type=output_path, required=True, metavar="PATH.npz",
                        help="the file to write (never replaced)")
    return parser


def data_command(args: argparse.Namespace) -> int:
    from simfl.data.convert import convert_femnist

    summary = convert_femnist(args.out, leaf_dir=args.from_leaf, tff_files=args.from_tff or ())
    say("\n".join(summary.lines()))
    return 0
