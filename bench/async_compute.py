"""Compute seconds per client update, sync vs async, on the small diurnal FEMNIST scenario.

    SIMFL_DATA_DIR=../shared/data OMP_NUM_THREADS=1 python bench/async_compute.py \
        [--rounds 100] [--aggregators fedavg deltafl] [--repeats 3]

Runs scenarios/diurnal_emnist_small.toml (sync) and scenarios/async_emnist_small.toml
(async: the same population and training, FedBuff's server) for ``--rounds`` rounds
(server updates), with no bias rounds and one evaluation, and times the numerics the
server asks for: local training (one batched ``train_cohort`` call per sync round; per
group of devices that started from one model version in async) and the loss reports
F_k(w_v) a filtering rule needs. A client update is one client's local training. Prints,
per run, the seconds of training and of loss reports, the client updates trained and
aggregated, the training calls, and seconds per trained and per aggregated update, for
the repeat with the least numerics time (the runs are identical; the minimum is the
least disturbed by other work on the machine).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from simfl.runs.run import run_scenario
from simfl.scenario import load_scenario
from simfl.train.local import LocalWork

SCENARIOS = {"sync": "scenarios/diurnal_emnist_small.toml",
             "async": "scenarios/async_emnist_small.toml"}


class Timers:
    """Seconds, calls and clients in the wrapped LocalWork methods."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.clients: dict[str, int] = {}

    def wrap(self, name: str, method: Callable[..., Any], clients_arg: int) -> Callable[..., Any]:
        def timed(*args: Any) -> Any:
            start = time.perf_counter()
            out = method(*args)
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            self.calls[name] = self.calls.get(name, 0) + 1
            self.clients[name] = self.clients.get(name, 0) + len(args[clients_arg])
            return out
        return timed


def measure(mode: str, aggregator: str, rounds: int) -> dict[str, float]:
    overrides = [f"server.num_rounds={rounds}", f"aggregator.name={aggregator}",
                 "estimator.bias_every=0", f"eval.every={rounds}", "estimator.shadow=[]"]
    scenario = load_scenario(SCENARIOS[mode], overrides)
    timers = Timers()
    saved = {name: getattr(LocalWork, name) for name in ("train", "losses")}
    # (self, params, round, client_idx, prox_mu), (self, params, client_idx): every local
    # training and every loss report F_k(w_v), in both modes (async trains and reports
    # inside AsyncLearner.train_from)
    LocalWork.train = timers.wrap("train", saved["train"], 3)  # type: ignore[method-assign]
    LocalWork.losses = timers.wrap("losses", saved["losses"], 2)  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            run_scenario(scenario, Path(out) / "run", progress=False)
            wall_s = time.perf_counter() - start
            clients = pl.read_parquet(Path(out) / "run" / "clients.parquet")
    finally:
        for name, method in saved.items():
            setattr(LocalWork, name, method)
    train_s = timers.seconds.get("train", 0.0)
    losses_s = timers.seconds.get("losses", 0.0)
    trained = timers.clients.get("train", 0)
    aggregated = int((clients["status"] == "aggregated").sum())
    return {"wall_s": wall_s, "train_s": train_s, "losses_s": losses_s,
            "train_calls": timers.calls.get("train", 0), "trained": trained,
            "aggregated": aggregated}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--aggregators", nargs="+", default=["fedavg", "deltafl"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'run':16} {'wall s':>7} {'train s':>8} {'loss s':>7} {'calls':>6} {'trained':>8} "
          f"{'aggr.':>6} {'ms/trained':>10} {'ms/aggr.':>9}")
    for aggregator in args.aggregators:
        per_update = {}
        for mode in ("sync", "async"):
            r = min((measure(mode, aggregator, args.rounds) for _ in range(args.repeats)),
                    key=lambda m: m["train_s"] + m["losses_s"])
            numerics_s = r["train_s"] + r["losses_s"]
            per_update[mode] = numerics_s / max(r["trained"], 1)
            print(f"{mode + ' ' + aggregator:16} {r['wall_s']:7.1f} {r['train_s']:8.2f} "
                  f"{r['losses_s']:7.2f} {r['train_calls']:6d} {r['trained']:8d} "
                  f"{r['aggregated']:6d} {1e3 * per_update[mode]:10.2f} "
                  f"{1e3 * numerics_s / max(r['aggregated'], 1):9.2f}")
        ratio = per_update["async"] / per_update["sync"]
        print(f"{aggregator}: async / sync compute per trained client update = {ratio:.2f}")


if __name__ == "__main__":
    main()
