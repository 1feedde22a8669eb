"""Where two runs of the same scenario and seed part: round by round, device by device.

    python -m simfl.study.same_seed RUN_A RUN_B --rounds 12

RUN_A and RUN_B are run directories (``clients.parquet`` and ``rounds.parquet``) of
the same scenario and seed, made on two machines (docs/reproduction/convnet_noise.md:
the CPU and a GPU) or with two thread counts. For each of the first
``--rounds`` rounds it prints whether the two drew the same devices, the largest
gap between the losses the devices reported (and between their training losses,
which every rule records), the two servers' quantile estimates,
how many devices each kept, and every device kept by one and filtered by the other,
with the loss it reported in each. Runs that agree to the bit print gap 0 and
no such devices; a rule without loss reports (FedAvg) prints "-" for that gap.

``--keep DIR`` also writes the first ``--rounds`` rounds of RUN_B's two tables to
DIR (a small copy to keep as evidence when RUN_B cannot be made again here, e.g. a
run on a lent GPU); DIR must not exist. :func:`first_rounds` reads a run's two tables
as frames; :func:`compare` gives the lines.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import cast

import polars as pl

from simfl.errors import InputError
from simfl.study import run_command

TABLES = ("clients", "rounds")


def first_rounds(run: Path, rounds: int) -> dict[str, pl.DataFrame]:
    """A run's clients and rounds tables, rounds 0 .. ``rounds`` - 1; InputError for a
    folder without them."""
    tables = {}
    for name in TABLES:
        path = run / f"{name}.parquet"
        if not path.is_file():
            raise InputError(f"{path}: no such file (a run directory has clients.parquet "
                             "and rounds.parquet)")
        tables[name] = pl.read_parquet(path).filter(pl.col("round") < rounds)
    return tables


def compare(a: dict[str, pl.DataFrame], b: dict[str, pl.DataFrame], rounds: int) -> list[str]:
    """One line a round, and one more for each device whose status differs."""
    joined = a["clients"].join(b["clients"], on=["round", "client_idx"], how="full",
                               suffix="_b", coalesce=True)
    estimates = a["rounds"].join(b["rounds"], on="round", suffix="_b").select(
        "round", "quantile_estimate", "quantile_estimate_b")
    lines = []
    for r in range(rounds):
        x = joined.filter(pl.col("round") == r)
        q = estimates.filter(pl.col("round") == r)
        if x.is_empty() or q.is_empty():
            lines.append(f"round {r}: not in both runs")
            continue
        qa, qb = q["quantile_estimate"][0], q["quantile_estimate_b"][0]
        same = x["status"].null_count() == 0 and x["status_b"].null_count() == 0
        gap, train_gap = (cast("float | None", (x[c] - x[f"{c}_b"]).abs().max())
                          for c in ("loss_reported", "train_loss"))
        kept = [(x[c] == "aggregated").sum() for c in ("status", "status_b")]
        flips = x.filter(pl.col("status") != pl.col("status_b"))
        lines.append(f"round {r}: same devices {same}, largest loss gap {_gap(gap)} "
                     f"(training loss {_gap(train_gap)}), estimate "
                     f"{_num(qa)} / {_num(qb)}, kept {kept[0]} / {kept[1]}, "
                     f"status differs for {len(flips)}")
        for d in flips.iter_rows(named=True):
            lines.append(f"    device {d['client_idx']}: {d['status']} at loss "
                         f"{_num(d['loss_reported'])} / {d['status_b']} at loss "
                         f"{_num(d['loss_reported_b'])}")
    return lines


def _gap(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simfl.study.same_seed",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    parser.add_argument("--rounds", type=int, default=12, help="compare rounds 0 .. N-1")
    parser.add_argument("--keep", type=Path, help="write RUN_B's first rounds here")
    args = parser.parse_args(argv)

    def work() -> None:
        if args.rounds < 1:
            raise InputError(f"--rounds {args.rounds}: must be at least 1")
        if args.keep is not None and args.keep.exists():
            raise InputError(f"{args.keep}: already exists; not overwritten")
        a, b = first_rounds(args.run_a, args.rounds), first_rounds(args.run_b, args.rounds)
        print(f"{args.run_a} / {args.run_b}")
        print("\n".join(compare(a, b, args.rounds)))
        if args.keep is not None:
            args.keep.mkdir(parents=True)
            for name, table in b.items():
                table.write_parquet(args.keep / f"{name}.parquet")
            print(f"{args.keep}: rounds 0-{args.rounds - 1} of {args.run_b}'s clients and rounds")

    return run_command(work)


if __name__ == "__main__":
    sys.exit(main())
