"""A million devices that learn: scenarios/million_synthetic.toml's wall time, split by
part, and its peak memory, at N training devices.

    SIMFL_DATA_DIR=../shared/data OMP_NUM_THREADS=1 python bench/million.py
        [--sizes 1e4,1e5,1e6] [--rounds R] [--out DIR] [--json FILE] [--set KEY=VALUE ...]

Each N runs the scenario (data.synthetic.num_clients set so that N devices train and 1 %
more are unseen test devices; --rounds shortens it, with the oracle and the evaluation
at their rounds) in a fresh subprocess, so its peak resident memory (VmHWM) is its own.
Wall-clock timers wrap the parts (cProfile would slow the many small calls of a round);
each second goes to the innermost part running, so the parts add up to the run:

- data: the sample counts and the writer split (simfl.data.load_data);
- availability: device table, habits, availability intervals, topology (build_population);
- fingerprint: the data's sha256 for the manifest (the labels of each side's first chunk);
- training: the cohorts' local training (LocalWork.train); loss reports (LocalWork.losses);
- selection: the estimators and the bias decomposition's random cohorts (PanelFilter.select);
- oracle: every training device's loss on bias rounds; evaluation: every device's error;
- parquet: writing parts and merging tables (Recorder.flush, merge);
- checkpoints: the learner's state and journal (Checkpointer.write, less its parquet);
- engine: the rest (SimPy rounds, message timing, manifest, imports).

Making samples (GeneratedClients.subset) is shown inside the part that asked for them
("of which samples"). Peak RSS: VmHWM at the end, and the manifest's peak_rss_mb (reset
as the run starts). The torch threads and the load average at the start and the end of
each run are printed with it: take the figures on a quiet machine, or say how busy it was.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[1]
SCENARIO = ROOT / "scenarios" / "million_synthetic.toml"
TEST_SHARE = 0.01  # the scenario's data.test_client_fraction
PARTS = ("data", "availability", "fingerprint", "training", "loss reports", "selection",
         "oracle", "evaluation", "parquet", "checkpoints")


class Timers:
    """Seconds by part, each to the innermost part running (``samples`` inside another
    part is kept apart, by the part that asked)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.stack: list[list[Any]] = []  # [label, start, seconds of inner parts]

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            # the oracle's losses are LocalWork.losses over every device: the oracle's
            inside_oracle = bool(self.stack) and self.stack[-1][0] == "oracle"
            name = "oracle" if label == "loss reports" and inside_oracle else label
            self.stack.append([name, time.perf_counter(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                name, start, inner = self.stack.pop()
                elapsed = time.perf_counter() - start
                outer = self.stack[-1][0] if self.stack else "engine"
                key = f"samples:{outer}" if name == "samples" else name
                self.seconds[key] += elapsed - inner
                if self.stack:
                    self.stack[-1][2] += elapsed

        return timed


def instrument(timers: Timers) -> None:
    """Wrap the parts of a run (module attributes and methods, before the run starts)."""
    import simfl.runs.build as run_build
    from simfl.data.packed import FederatedData, GeneratedClients
    from simfl.records import Recorder
    from simfl.runs.checkpoint import Checkpointer
    from simfl.train.learner import Learner
    from simfl.train.local import LocalWork
    from simfl.train.threshold import PanelFilter

    run_build.load_data = timers.wrap("data", run_build.load_data)
    run_build.build_population = timers.wrap("availability", run_build.build_population)
    for cls, name, label in ((FederatedData, "fingerprint", "fingerprint"),
                             (LocalWork, "train", "training"),
                             (LocalWork, "losses", "loss reports"),
                             (Learner, "evaluate", "evaluation"),
                             (Recorder, "flush", "parquet"), (Recorder, "merge", "parquet"),
                             (Checkpointer, "write", "checkpoints"),
                             (GeneratedClients, "subset", "samples")):
        setattr(cls, name, timers.wrap(label, getattr(cls, name)))
    select = PanelFilter.select

    def select_timed(self: Any, losses: Any, weights: Any, client_idx: Any, round_idx: int,
                     t_s: float, population: Any) -> Any:
        return select(self, losses, weights, client_idx, round_idx, t_s,
                      timers.wrap("oracle", population))

    PanelFilter.select = timers.wrap("selection", select_timed)  # type: ignore[method-assign]


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_one(num_devices: int, rounds: int | None, out: Path | None,
            settings: list[str]) -> dict[str, Any]:
    """Run the scenario at ``num_devices`` training devices; its wall time, split, memory."""
    start, load_start = time.perf_counter(), os.getloadavg()[0]
    from simfl.cli import main

    timers = Timers()
    instrument(timers)
    num_clients = round(num_devices / (1 - TEST_SHARE))
    sets = [f"data.synthetic.num_clients={num_clients}", *settings]
    if rounds is not None:
        sets.append(f"server.num_rounds={rounds}")
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = out / f"n{num_devices}" if out is not None else Path(tmp) / "run"
        args = [str(SCENARIO), "--out", str(run_dir), "--quiet", "--overwrite"]
        code = main([*args, *(a for s in sets for a in ("--set", s))])
        wall_s = time.perf_counter() - start
        manifest = json.loads((run_dir / "manifest.json").read_text())
    if code != 0:
        raise SystemExit(f"exit {code}: {manifest.get('reason')}")
    seconds = dict(timers.seconds)
    seconds["engine"] = wall_s - sum(seconds.values()) + seconds.get("engine", 0.0)
    import torch

    return {"num_devices": num_devices, "num_clients": num_clients, "wall_s": wall_s,
            "peak_rss_mb": peak_rss_mb(), "manifest_peak_rss_mb": manifest["peak_rss_mb"],
            "rounds": manifest["scenario"]["server"]["num_rounds"],
            "summary": manifest["summary"], "seconds": seconds,
            "threads": torch.get_num_threads(), "load": [load_start, os.getloadavg()[0]],
            "cpus": os.cpu_count()}


def report(r: dict[str, Any]) -> None:
    s = r["seconds"]
    print(f"N = {r['num_devices']:,} training devices ({r['num_clients']:,} clients), "
          f"{r['rounds']} rounds: wall {r['wall_s']:.1f} s, peak RSS {r['peak_rss_mb']:.0f} MiB "
          f"(manifest {r['manifest_peak_rss_mb']:.0f}); {r['threads']} torch thread(s), "
          f"load average {r['load'][0]:.1f} at the start, {r['load'][1]:.1f} at the end "
          f"on {r['cpus']} CPUs")
    for part in (*PARTS, "engine"):
        made = s.get(f"samples:{part}", 0.0)
        total = s.get(part, 0.0) + made
        extra = f"  (of which samples {made:8.1f} s)" if made else ""
        print(f"  {part:13s} {total:9.1f} s {100 * total / r['wall_s']:5.1f} %{extra}")
    test = r["summary"].get("test", {})
    print(f"  test error: mean {test.get('mean', float('nan')):.3f}, "
          f"p90 {test.get('p90', float('nan')):.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1e4,1e5", help="comma-separated training devices")
    parser.add_argument("--rounds", type=int, help="server.num_rounds (default the scenario's)")
    parser.add_argument("--out", type=Path, help="keep the runs under DIR/n<N> (default: none)")
    parser.add_argument("--json", type=Path, help="append each size's figures to this file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="another scenario setting (repeatable)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # child process
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args.one, args.rounds, args.out, args.set)))
        return
    for size in (int(float(s)) for s in args.sizes.split(",")):
        extra = [*(["--rounds", str(args.rounds)] if args.rounds else []),
                 *(["--out", str(args.out)] if args.out else []),
                 *(a for s in args.set for a in ("--set", s))]
        out = subprocess.run([sys.executable, __file__, "--one", str(size), *extra],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"N = {size}: {out.stderr.strip()[-2000:]}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        report(result)
        if args.json is not None:
            with args.json.open("a") as f:
                f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
