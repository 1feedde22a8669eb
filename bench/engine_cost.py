"""What a sync round costs outside local training, by cohort size: the engine's growth with K.

    SIMFL_DATA_DIR=../shared/data OMP_NUM_THREADS=1 python bench/engine_cost.py
        [--sizes 100,1000,5000] [--rounds 11] [--no-train] [--profile 15] [--gc-freeze]
        [--free-links]
        [--data auto|femnist|synthetic] [--root DIR] [--json FILE] [--compare FILE]

One FedAvg run of the linear model (scenarios/femnist_linear.toml: 784 -> 62, batch 32,
one local epoch) per cohort size K (``server.clients_per_round``; every device always
online), each in a fresh subprocess, twice: with local training stubbed out
(``train_cohort`` returns a constant (K, P) update: what is left is the engine and the
bookkeeping around training) and with real training. The first round is a warm-up; of
the others, each round's wall time is split into training (the time inside
``train_cohort``) and the rest (round time minus training: selection, the SimPy
events, link sharing, the cohort's data, the updates' checks and store, aggregation,
records), and a run's figure is the mean over its measured rounds, what a round costs
on average (the median beside it: a cost that comes every few rounds, as Python's full
garbage collections do, moves the mean, not the median): in wall-clock seconds, and in
this process's CPU seconds (``time.process_time``), which a machine busy with other
work inflates far less; also the seconds of the round spent in the cyclic garbage
collector (``gc.callbacks``). ``--gc-freeze`` calls ``gc.freeze()`` after the warm-up
round, a what-if for trees whose engine does not freeze the objects built before the
rounds (simfl.runs.loop.frozen_heap). ``--profile N`` adds a profiled run per size
(real training, the profiler paused inside ``train_cohort``), with the N functions of
largest own time over the measured rounds outside training (cProfile slows
Python-heavy parts). ``--free-links`` is a what-if that says what the shared network
costs: every transfer takes its latency plus bytes / its access cap, as if no link were
ever shared (one SimPy timeout, no max-min sharing: simfl.sim.links left out).

Data: FEMNIST (writers of any size, 10 % of them unseen test devices: 3,237 training
devices) where ``SIMFL_DATA_DIR`` holds it and it has K training devices; otherwise
synthetic clients of FEMNIST's sizes: 1.25 K training devices, 784 uniform features,
62 uniform labels, samples per device lognormal with FEMNIST's median 179 (log-sd 0.5,
an assumption of this script) clipped to FEMNIST's range 19-584, in place of the
scenario's synthetic data (whose memory estimate, LEAF's sizes, the run's guard is told
to ignore: ``$SIMFL_MEMORY_LIMIT_BYTES``). A size whose data would not fit in the
memory available is skipped with a line saying so.

``--root DIR`` runs the simfl package of another checkout (e.g. ``git archive HEAD``
unpacked in DIR) under the same harness, for before/after figures; ``--json FILE``
appends each run's figures to FILE and ``--compare FILE`` prints them (``before``)
beside this run's (``after``). Targets (simfl issue 71): at 1,000 clients the cost
outside training at most 5 % of the round, and at most 12x its cost at 100 clients.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[1]
SCENARIO = ROOT / "scenarios" / "femnist_linear.toml"
FEMNIST_TRAIN_DEVICES = 3237  # writers of any size, 10 % held out (data.test_client_fraction)
MEDIAN_SAMPLES, LOG_SD, MIN_SAMPLES, MAX_SAMPLES = 179, 0.5, 19, 584
FEATURES, CLASSES = 784, 62
SYNTHETIC_SHARE = 1.25  # training devices per cohort seat in synthetic runs


def settings(k: int, rounds: int, synthetic: bool) -> list[str]:
    """The scenario's changes for a cohort of ``k``: FedAvg, every device online, no
    evaluation before the end."""
    common = ["aggregator.name=fedavg", f"server.clients_per_round={k}",
              f"server.num_rounds={rounds}", f"eval.every={10 * rounds}",
              "data.test_client_fraction=0.1", "data.min_samples_per_client=0"]
    if not synthetic:
        return common
    return [*common, "data.dataset=synthetic", f"data.synthetic.dim={FEATURES}",
            f"data.synthetic.num_classes={CLASSES}",
            f"data.synthetic.num_clients={round(SYNTHETIC_SHARE * k / 0.9)}"]


def synthetic_data(num_clients: int) -> Any:
    """FEMNIST-sized clients (module docstring): 90 % training devices, 10 % test ones."""
    import numpy as np
    import torch

    from simfl.data.packed import ClientData, FederatedData

    rng = np.random.default_rng(0)
    counts = np.clip(np.round(MEDIAN_SAMPLES * np.exp(LOG_SD * rng.standard_normal(num_clients))),
                     MIN_SAMPLES, MAX_SAMPLES).astype(np.int64)
    generator = torch.Generator().manual_seed(0)

    def side(part: np.ndarray, prefix: str) -> ClientData:
        n = int(part.sum())
        x = torch.empty(n, FEATURES)
        for start in range(0, n, 2**16):  # bounded temporary memory
            stop = min(start + 2**16, n)
            x[start:stop] = torch.rand(stop - start, FEATURES, generator=generator)
        y = torch.randint(0, CLASSES, (n,), generator=generator)
        offsets = np.concatenate([[0], np.cumsum(part)]).astype(np.int64)
        ids = np.array([f"{prefix}{i}" for i in range(len(part))])
        return ClientData(x, y, offsets, ids)

    num_test = num_clients // 10
    return FederatedData("femnist_sized", side(counts[num_test:], "t"),
                         side(counts[:num_test], "u"), CLASSES)


def data_bytes(k: int, synthetic: bool) -> float:
    """Bytes of float32 features the run holds, twice (the packed side and a cohort)."""
    clients = SYNTHETIC_SHARE * k if synthetic else FEMNIST_TRAIN_DEVICES
    return 2 * clients * MEDIAN_SAMPLES * 1.2 * FEATURES * 4


def mem_available() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024.0
    return float("inf")


class FreeLinks:
    """--free-links: transfers at their access caps, never shared (module docstring)."""

    def __init__(self, env: Any, paths: Any) -> None:
        self.env, self.paths = env, paths

    def transfer(self, device_idx: int, num_bytes: float, direction: str) -> Any:
        cap = self.paths.access_bytes_per_s[direction].item(device_idx)
        return self.env.timeout(self.paths.path_latency_s(device_idx, direction) + num_bytes / cap)


def one(k: int, mode: str, rounds: int, synthetic: bool, top: int,
        freeze: bool, free_links: bool = False) -> dict[str, Any]:
    """Run in the child: the scenario at cohort ``k``; ``mode`` stub, train or profile;
    ``freeze``: gc.freeze() after the warm-up round; ``free_links``: FreeLinks."""
    import numpy as np
    import torch

    import simfl
    import simfl.runs.build as run_build
    import simfl.runs.loop as run_loop
    import simfl.train.local as local
    from simfl.cli import main
    from simfl.train.batched import CohortResult
    from simfl.train.learner import Learner

    train_s, eval_s, gc_s, train_cpu_s, eval_cpu_s = [0.0], [0.0], [0.0], [0.0], [0.0]
    stamps: list[tuple[float, ...]] = []  # wall, training, evaluation, gc; CPU: all, train, eval
    gc_start = [0.0]

    def collected(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_start[0] = time.perf_counter()
        else:
            gc_s[0] += time.perf_counter() - gc_start[0]

    gc.callbacks.append(collected)
    profile = cProfile.Profile()
    real_train = local.train_cohort

    def train_cohort(model: Any, params: torch.Tensor, clients: Any, hparams: Any,
                     seeds: Any, *more: Any) -> Any:
        start, start_cpu = time.perf_counter(), time.process_time()
        profiling = mode == "profile" and 1 <= len(stamps) < rounds
        if profiling:
            profile.disable()
        try:
            if mode in ("train", "profile"):
                return real_train(model, params, clients, hparams, seeds, *more)
            k_now = clients.num_clients
            return CohortResult(params.new_full((k_now, params.numel()), 1e-6),
                                clients.num_samples.copy(), np.zeros(k_now))
        finally:
            train_s[0] += time.perf_counter() - start
            train_cpu_s[0] += time.process_time() - start_cpu
            if profiling:
                profile.enable()

    aggregate, evaluate = Learner.aggregate, Learner.evaluate

    def stamped(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = aggregate(self, *args, **kwargs)
        stamps.append((time.perf_counter(), train_s[0], eval_s[0], gc_s[0],
                       time.process_time(), train_cpu_s[0], eval_cpu_s[0]))
        if freeze and len(stamps) == 1:
            gc.freeze()
        if mode == "profile" and len(stamps) == 1:
            profile.enable()
        if mode == "profile" and len(stamps) == rounds:
            profile.disable()
        return out

    def timed_eval(self: Any, *args: Any, **kwargs: Any) -> Any:
        start, start_cpu = time.perf_counter(), time.process_time()
        try:
            return evaluate(self, *args, **kwargs)
        finally:
            eval_s[0] += time.perf_counter() - start
            eval_cpu_s[0] += time.process_time() - start_cpu

    if free_links:
        run_loop.LinkSharing = FreeLinks  # type: ignore[misc,assignment]
    local.train_cohort = train_cohort  # type: ignore[assignment]
    Learner.aggregate = stamped  # type: ignore[method-assign]
    Learner.evaluate = timed_eval  # type: ignore[method-assign]
    if synthetic:
        num_clients = round(SYNTHETIC_SHARE * k / 0.9)
        run_build.load_data = lambda cfg, streams: synthetic_data(num_clients)
    with tempfile.TemporaryDirectory() as tmp:
        args = [str(SCENARIO), "--out", str(Path(tmp) / "run"), "--quiet"]
        code = main([*args, *(a for s in settings(k, rounds, synthetic) for a in ("--set", s))])
    if code != 0:
        raise SystemExit(f"K = {k} ({mode}): exit {code}")
    walls, trains, evals, collections, cpus, train_cpus, eval_cpus = np.diff(
        np.array(stamps), axis=0).T
    result: dict[str, Any] = {
        "k": k, "mode": mode, "data": "synthetic" if synthetic else "femnist",
        "rounds": len(walls), "round_s": float(np.mean(walls)),
        "train_s": float(np.mean(trains)),
        "outside_s": float(np.mean(walls - trains - evals)),
        "outside_median_s": float(np.median(walls - trains - evals)),
        "outside_each_s": (walls - trains - evals).round(4).tolist(),
        "gc_s": float(np.mean(collections)), "gc_freeze": freeze, "free_links": free_links,
        "outside_cpu_s": float(np.mean(cpus - train_cpus - eval_cpus)),
        "train_cpu_s": float(np.mean(train_cpus)),
        "load": os.getloadavg()[0], "threads": torch.get_num_threads(),
        "simfl": str(Path(simfl.__file__).parent)}
    if mode == "profile":
        stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
        rows = sorted(stats.items(), key=lambda item: -item[1][2])[:top]
        result["top"] = [(f"{Path(path).name}:{line}({name})", calls / len(walls),
                          own / len(walls), cumulative / len(walls))
                         for (path, line, name), (_, calls, own, cumulative, _) in rows]
    return result


def child(k: int, mode: str, args: argparse.Namespace, synthetic: bool) -> dict[str, Any]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if synthetic:  # the run's guard would count LEAF-sized synthetic features, not these
        env["SIMFL_MEMORY_LIMIT_BYTES"] = str(2**62)
    if args.root is not None:
        env["PYTHONPATH"] = str(Path(args.root).resolve())
    out = subprocess.run([sys.executable, __file__, "--one", str(k), mode, str(args.rounds),
                          str(int(synthetic)), str(args.profile), str(int(args.gc_freeze)),
                          str(int(args.free_links))],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"K = {k} ({mode}): {out.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def table(results: list[dict[str, Any]], before: list[dict[str, Any]]) -> None:
    """One row per (K, mode): mean seconds per round (wall clock, the median of the cost
    outside training beside it, and this process's CPU time, which a busy machine
    inflates less), and the before figures where given."""
    old = {(r["k"], r["mode"]): r for r in before}
    nan = float("nan")
    print("| K | training | data | round (s) | training (s) | outside (s) | outside, median (s) "
          "| outside share | outside, CPU (s) | gc (s) |"
          + (" outside before (s) | CPU before (s) | after / before |" if before else ""))
    print("|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if before else ""))
    for r in (r for r in results if r["mode"] != "profile"):
        cells = (f"| {r['k']:,} | {'stubbed' if r['mode'] == 'stub' else 'real'} | "
                 f"{r['data']}{', free links' if r.get('free_links') else ''} | "
                 f"{r['round_s']:.3f} | {r['train_s']:.3f} | "
                 f"{r['outside_s']:.3f} | {r.get('outside_median_s', nan):.3f} | "
                 f"{100 * r['outside_s'] / r['round_s']:.1f} % | "
                 f"{r.get('outside_cpu_s', nan):.3f} | {r.get('gc_s', nan):.3f} |")
        b = old.get((r["k"], r["mode"]))
        if before:
            cells += (f" {b['outside_s']:.3f} | {b.get('outside_cpu_s', nan):.3f} | "
                      f"{r['outside_s'] / b['outside_s']:.2f} |" if b else " - | - | - |")
        print(cells)
    for mode in ("stub", "train"):
        by_k = {r["k"]: r for r in results if r["mode"] == mode}
        if 100 in by_k and 1000 in by_k:
            a, b = by_k[100], by_k[1000]
            print(f"growth of the cost outside training, 100 -> 1,000 clients ({mode}): "
                  f"{b['outside_s'] / a['outside_s']:.1f}x wall, "
                  f"{b.get('outside_cpu_s', nan) / a.get('outside_cpu_s', nan):.1f}x CPU "
                  "(target <= 12x)")
        if mode == "train" and 1000 in by_k:
            print(f"cost outside training at 1,000 clients: "
                  f"{100 * by_k[1000]['outside_s'] / by_k[1000]['round_s']:.1f} % of the "
                  "round (target <= 5 %)")
    for r in (r for r in results if r["mode"] == "profile"):
        print(f"\nK = {r['k']:,}: largest own time per round outside training (cProfile)")
        print("| function | calls | own (s) | cumulative (s) |\n|---|---|---|---|")
        for name, calls, own, cumulative in r["top"]:
            print(f"| {name} | {calls:,.0f} | {own:.4f} | {cumulative:.4f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,5000", help="comma-separated cohort sizes")
    parser.add_argument("--rounds", type=int, default=11,
                        help="rounds per run (the first a warm-up)")
    parser.add_argument("--no-train", action="store_true", help="only the stubbed runs")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also a profiled stub run per size: its N top functions")
    parser.add_argument("--data", choices=("auto", "femnist", "synthetic"), default="auto")
    parser.add_argument("--root", type=Path, help="run the simfl package of this checkout")
    parser.add_argument("--json", type=Path, help="append each run's figures to this file")
    parser.add_argument("--compare", type=Path, help="a --json file of earlier figures")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="gc.freeze() after the warm-up round (what-if: full collections"
                             " then skip the objects built before it)")
    parser.add_argument("--free-links", action="store_true",
                        help="what-if: transfers at their access caps, no link ever shared")
    parser.add_argument("--one", nargs=7, help=argparse.SUPPRESS)  # child process
    args = parser.parse_args()
    if args.one is not None:
        k, mode, rounds, synthetic, top, freeze, free = args.one
        print(json.dumps(one(int(k), mode, int(rounds), synthetic == "1", int(top),
                             freeze == "1", free == "1")))
        return
    if args.rounds < 2:
        parser.error("--rounds must be >= 2 (the first is a warm-up)")
    have_femnist = (Path(os.environ.get("SIMFL_DATA_DIR", "/nonexistent")) / "femnist").is_dir()
    modes = ["stub"] + ([] if args.no_train else ["train"]) + (["profile"] if args.profile else [])
    results = []
    for k in (int(float(s)) for s in args.sizes.split(",")):
        synthetic = args.data == "synthetic" or (
            args.data == "auto" and not (have_femnist and k <= FEMNIST_TRAIN_DEVICES))
        if args.data == "femnist" and k > FEMNIST_TRAIN_DEVICES:
            print(f"K = {k:,}: FEMNIST has {FEMNIST_TRAIN_DEVICES:,} training devices; skipped")
            continue
        if data_bytes(k, synthetic) > 0.8 * mem_available():
            print(f"K = {k:,}: about {data_bytes(k, synthetic) / 2**30:.1f} GiB of data, more "
                  f"than 80 % of the {mem_available() / 2**30:.1f} GiB available; skipped")
            continue
        for mode in modes:
            result = child(k, mode, args, synthetic)
            results.append(result)
            print(f"K = {k:,} {mode}: {result['round_s']:.3f} s a round, "
                  f"{result['outside_s']:.3f} s outside training (load {result['load']:.1f})",
                  flush=True)
            if args.json is not None:
                with args.json.open("a") as f:
                    f.write(json.dumps(result) + "\n")
    before = ([json.loads(line) for line in args.compare.read_text().splitlines() if line]
              if args.compare else [])
    table(results, before)


if __name__ == "__main__":
    main()
