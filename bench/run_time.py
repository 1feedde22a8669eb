"""Wall time of whole runs, split by where it goes, so README's cost column is measured.

    SIMFL_DATA_DIR=../shared/data python bench/run_time.py [--only NAME ...] [--repeat N]
        [--no-split] [--busy]

Each scenario runs in a fresh subprocess (so imports count) under cProfile; the split is
the cumulative time of: importing simfl.runs.run, loading the data, local training
(train_cohort), loss reports (Learner.report_losses), selection with its bias oracle
(Learner.select, which evaluates every training device every estimator.bias_every
rounds), evaluation (Learner.evaluate), Parquet (Recorder.flush / merge), and the rest
(the SimPy engine, the population, checkpoints, reading parts back). Parquet is every
atomic write (parts, merged tables, the manifest). cProfile slows Python-heavy parts a
little; the wall time is measured in separate runs without it (the median of
``--repeat`` runs; ``--no-split`` skips the profiled run, e.g. for the whole
diurnal_emnist). ``--busy`` also times each scenario beside a CPU-bound neighbour (a
single-thread float32 matmul loop in another process), the case of a user running two
simulations at once on a 2-core machine, and prints the ratio to the quiet median.
Take the figures on a quiet machine.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).parents[1]
SCENARIOS = {
    "quick_synthetic": ["scenarios/quick_synthetic.toml"],
    "demo_synthetic": ["scenarios/demo_synthetic.toml"],
    "diurnal_emnist_small": ["scenarios/diurnal_emnist_small.toml"],
    "diurnal_emnist_50": ["scenarios/diurnal_emnist.toml", "--set", "server.num_rounds=50",
                          "--set", "eval.every=50"],
    "diurnal_emnist": ["scenarios/diurnal_emnist.toml"],
}
DEFAULT = ["quick_synthetic", "demo_synthetic", "diurnal_emnist_small", "diurnal_emnist_50"]
NEIGHBOUR = ("import torch\ntorch.set_num_threads(1)\na = torch.randn(512, 512)\n"
             "while True:\n    a @ a\n")
PARTS = {  # (file suffix, function name) -> label
    ("data/__init__.py", "load_data"): "data",
    ("train/batched.py", "train_cohort"): "training",
    ("train/learner.py", "report_losses"): "loss reports",
    ("train/learner.py", "select"): "selection + bias oracle",
    ("train/learner.py", "evaluate"): "evaluation",
    ("rundir.py", "write_atomically"): "parquet",
}


def child(args: list[str], out: str) -> None:
    """Run one scenario under cProfile; write {label: seconds} to ``out``."""
    start = time.perf_counter()
    import simfl.runs.run  # noqa: F401  (timed: the import itself)

    imported = time.perf_counter() - start
    from simfl.cli import main

    profile = cProfile.Profile()
    with tempfile.TemporaryDirectory() as tmp:
        profile.enable()
        code = main([*args, "--out", str(Path(tmp) / "run"), "--quiet"])
        profile.disable()
    if code != 0:
        raise SystemExit(f"{args}: exit {code}")
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    split = {"import": imported}
    for (path, _, name), (_, _, _, cumulative, _) in stats.items():
        for (suffix, function), label in PARTS.items():
            if name == function and path.endswith(suffix):
                split[label] = split.get(label, 0.0) + cumulative
    total = max((c for (p, _, n), (_, _, _, c, _) in stats.items()
                 if n == "main" and p.endswith("simfl/cli/__init__.py")), default=0.0)
    split["profiled total"] = imported + total
    Path(out).write_text(json.dumps(split))


def wall(args: list[str]) -> float:
    """Seconds of one plain run of ``python -m simfl ARGS`` (start-up included)."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "simfl", *args, "--out", str(Path(tmp) / "run"),
                        "--quiet"], cwd=ROOT, check=True, capture_output=True)
        return time.perf_counter() - start


def split_of(args: list[str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "split.json"
        subprocess.run([sys.executable, __file__, "--child", str(out), *args], cwd=ROOT,
                       check=True, capture_output=True)
        return dict(json.loads(out.read_text()))


def busy_wall(args: list[str], repeat: int) -> float:
    """The median wall time of ``repeat`` runs beside a CPU-bound single-thread process."""
    neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR])
    try:
        time.sleep(1.0)  # let it start its loop
        return statistics.median(wall(args) for _ in range(repeat))
    finally:
        neighbour.kill()
        neighbour.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(SCENARIOS))
    parser.add_argument("--repeat", type=int, default=1, help="plain runs per scenario (median)")
    parser.add_argument("--no-split", action="store_true", help="skip the profiled run")
    parser.add_argument("--busy", action="store_true", help="also time beside a busy process")
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[1:], args.child[0])
        return
    labels = ["import", "data", "training", "loss reports", "selection + bias oracle",
              "evaluation", "parquet"]
    busy = " busy (s) | ratio |" if args.busy else ""
    print(f"| scenario | wall (s) |{busy} " + " | ".join(labels) + " | rest |")
    print("|---|---|" + "---|---|" * args.busy + "---|" * (len(labels) + 1))
    for name in args.only or DEFAULT:
        runs = [wall(SCENARIOS[name]) for _ in range(args.repeat)]
        quiet = statistics.median(runs)
        cells = f"{quiet:.1f}"
        if args.repeat > 1:
            cells += f" ({min(runs):.1f}-{max(runs):.1f})"
        if args.busy:
            loaded = busy_wall(SCENARIOS[name], args.repeat)
            cells += f" | {loaded:.1f} | {loaded / quiet:.2f}"
        if args.no_split:
            print(f"| {name} | {cells} |" + " - |" * (len(labels) + 1))
            continue
        split = split_of(SCENARIOS[name])
        parts = [split.get(label, 0.0) for label in labels]
        rest = split["profiled total"] - sum(parts)
        print(f"| {name} | {cells} | " + " | ".join(f"{p:.1f}" for p in parts)
              + f" | {rest:.1f} |")


if __name__ == "__main__":
    main()
