"""``drfl``: DRFL's breast-cancer noise study (simfl.algorithms.drfl), its tables and
figures written to an output folder that holds nothing else."""

from __future__ import annotations

import argparse
from pathlib import Path

from simfl.cli.checks import check_study_dir
from simfl.cli.common import Parser, output_path, say


def drfl_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m simfl drfl",
        description="DRFL's breast-cancer noise study (needs the drfl extra).")
    parser.add_argument("study", type=Path, nargs="?",
                        help="study TOML (default: the paper's protocol, as in "
                             "docs/drfl_breast_cancer.toml)")
    parser.add_argument("--out", type=output_path, help="output directory "
                        "(default results/<study stem>, or results/drfl_breast_cancer)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the study's files in an existing output directory")
    return parser


def drfl_command(args: argparse.Namespace) -> int:
    from simfl.algorithms.drfl.experiment import (
        ExperimentConfig,
        load_experiment,
        run_experiment,
        summary_table,
    )
    from simfl.plots.drfl import write_figures

    cfg = load_experiment(args.study) if args.study else ExperimentConfig()
    stem = args.study.stem if args.study else "drfl_breast_cancer"
    out_dir = args.out or Path("results") / stem
    check_study_dir(out_dir, args.overwrite)
    tables = run_experiment(cfg, out_dir)
    for path in write_figures(tables, out_dir):
        say(path)
    say(summary_table(tables["accuracy"]))
    return 0
