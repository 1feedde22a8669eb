"""The engine's figures of runs, side by side (issue 72's before/after measurement).

    python bench/engine_figures.py RUN_DIR [RUN_DIR ...]

Per run: rounds (sync rounds or async server updates), round duration (t_end_s −
t_start_s: mean and median, s), waiting before a round's devices were drawn (sync: the
round's dispatch time − its start; mean s and the share of rounds that waited), bytes
per round (up + down, mean), devices dropped (went offline or failed mid-task) and
messages cut short (comm.parquet's ``completed`` false, where the run has the column),
the final test mean and p90 error, and the run's wall time. Reads the run's tables only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import polars as pl


def figures(run_dir: Path) -> dict[str, object]:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    rounds = pl.read_parquet(run_dir / "rounds.parquet")
    clients = pl.read_parquet(run_dir / "clients.parquet")
    comm = pl.read_parquet(run_dir / "comm.parquet", columns=None)
    duration = (rounds["t_end_s"] - rounds["t_start_s"]).to_numpy()
    waits = (clients.group_by("round").agg(pl.col("t_dispatch_s").min())
             .join(rounds.select("round", "t_start_s"), on="round")
             .select(wait=pl.col("t_dispatch_s") - pl.col("t_start_s")))["wait"].to_numpy()
    sync = manifest["scenario"]["server"]["mode"] == "sync"
    cut = (int((~comm["completed"]).sum()) if "completed" in comm.columns
           and comm["completed"].null_count() < len(comm) else None)
    return {
        "run": run_dir.name, "rounds": len(rounds),
        "round_s_mean": float(duration.mean()), "round_s_median": float(np.median(duration)),
        "wait_s_mean": float(waits.mean()) if sync else None,
        "rounds_waiting": float((waits > 0).mean()) if sync else None,
        "bytes_per_round": float((rounds["bytes_up"] + rounds["bytes_down"]).to_numpy().mean()),
        "dropped": int(rounds["num_dropped"].sum()), "messages_cut": cut,
        "test_mean": manifest["summary"]["test"]["mean"],
        "test_p90": manifest["summary"]["test"]["p90"], "wall_s": manifest["wall_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args()
    rows = [figures(run) for run in args.runs]
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(f"{v:.4g}" if isinstance(v, float) else str(v)
                                  for v in row.values()) + " |")


if __name__ == "__main__":
    main()
