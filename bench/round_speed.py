"""Seconds per warm round of local training: simfl against a bare per-client PyTorch loop.

    SIMFL_DATA_DIR=../shared/data python bench/round_speed.py [--clients 100 1000]
        [--models linear mlp convnet plugin] [--repeats 5] [--clock cpu] [--root DIR]

The workload of simfl issue 71: FEMNIST writers (the writer-level training devices,
K drawn at random; without SIMFL_DATA_DIR, synthetic clients of FEMNIST's sizes),
FedAvg, one local epoch, batch 10, lr 0.1, every selected client training, no
evaluation, one torch thread. Models: the linear softmax, the MLP 784-200-200-62 as
a plug-in would write it (``nn.Sequential``), the papers' ConvNet, and the plug-in
of docs/extending.md (``mlp``: 784-32-62).

Timed per round: simfl's ``train_cohort`` as a run calls it (``auto``'s choice made in
the warm-up round and kept; the deltas written into memory reused from round to round,
``simfl.train.updates.DeltaBuffers``) with ``auto``, ``batched`` and ``loop``, and a bare
loop (one ``nn.Module``, ``torch.optim.SGD``, ``loss.backward()``, minibatches from the
same plan, DataLoader-free, the plan's shuffles included in its time, each round's
deltas written into a new tensor). Each method
has one untimed warm-up round; then the methods take turns, round by round
(interleaved, so a slow spell of the machine hits them alike), and each repetition
gives a paired ratio bare / simfl. Printed: median (range) over the repetitions.

Before timing, every method's parameters after a round of 8 clients (float64) are
checked equal to the bare loop's (relative 1e-10). ``--clock cpu`` times the process's
CPU seconds instead of wall seconds (one thread: steadier beside other busy processes).
``--root DIR`` times the simfl package of another checkout (``git archive REV simfl``
unpacked in DIR) under the same harness: the before / after figures; a checkout from
before ``auto`` chose by timing reports the backend its rule chose. Flower (``flwr``) is
not timed: a line says so, and whether it is importable.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if "--root" in sys.argv:  # another checkout's simfl under the same harness (before / after)
    sys.path.insert(0, sys.argv[sys.argv.index("--root") + 1])

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from simfl.data import load_data
from simfl.data.packed import ClientData
from simfl.rng import Streams
from simfl.scenario import DataConfig
from simfl.train.batched import TrainHParams, plan_batches, train_cohort
from simfl.train.models import ParamLayout, build_model, initial_params

try:
    from simfl.train.choose import BackendChoice
except ImportError:  # a checkout from before auto chose by timing: it chose by rule
    BackendChoice = None  # type: ignore[assignment,misc]
try:
    from simfl.train.updates import DeltaBuffers
except ImportError:  # a checkout whose runs wrote every round's deltas to fresh memory
    DeltaBuffers = None  # type: ignore[assignment,misc]

BATCH, LR = 10, 0.1
SIMFL = ("auto", "batched", "loop")


def mlp(input_shape: tuple[int, ...], num_classes: int, hidden: int = 32) -> nn.Module:
    """docs/extending.md's plug-in model."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.ReLU(),
                         nn.Linear(hidden, num_classes))


MODELS: dict[str, Callable[[], nn.Module]] = {
    "linear": lambda: build_model("linear", (1, 28, 28), 62),
    "mlp": lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 200), nn.ReLU(),
                                 nn.Linear(200, 200), nn.ReLU(), nn.Linear(200, 62)),
    "convnet": lambda: build_model("convnet", (1, 28, 28), 62),
    "plugin": lambda: mlp((1, 28, 28), 62),
}


def writers(max_clients: int) -> tuple[ClientData, str]:
    """FEMNIST's writer-level training devices, or synthetic clients of their sizes (samples
    per writer: lognormal around FEMNIST's median 179, within its 19-584)."""
    if os.environ.get("SIMFL_DATA_DIR"):
        data = load_data(DataConfig(dataset="femnist"), Streams(0)).train
        assert isinstance(data, ClientData)  # FEMNIST's samples are held in memory
        return data, f"FEMNIST writers ({data.num_clients} training devices)"
    rng = np.random.default_rng(0)
    sizes = np.clip(rng.lognormal(np.log(179), 0.55, max_clients), 19, 584).astype(np.int64)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(int(sizes.sum()), 1, 28, 28, generator=generator)
    y = torch.randint(0, 62, (int(sizes.sum()),), generator=generator)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    ids = np.array([f"s{k}" for k in range(max_clients)])
    return ClientData(x, y, offsets, ids), "synthetic clients of FEMNIST's sizes"


def bare_round(model: nn.Module, params: torch.Tensor, clients: ClientData,
               seeds: list[int]) -> torch.Tensor:
    """What one writes without simfl: per client, load the global vector, SGD with
    backward(), read the vector back. (K, P) deltas."""
    plan = plan_batches(clients.num_samples, 1, BATCH, seeds)
    counts = plan.mask.sum(dim=2).tolist()
    deltas = params.new_empty(clients.num_clients, params.numel())
    for k, steps in enumerate(plan.num_steps.tolist()):
        nn.utils.vector_to_parameters(params.clone(), model.parameters())  # views of it
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        for s in range(steps):
            rows = plan.rows[k, s, : counts[k][s]]
            optimizer.zero_grad()
            functional.cross_entropy(model(clients.x[rows]), clients.y[rows]).backward()
            optimizer.step()
        deltas[k] = nn.utils.parameters_to_vector(model.parameters()).detach() - params
    return deltas


def new_choice() -> Any:
    """A run's record of ``auto``'s choice (None in a checkout that chose by rule)."""
    return BackendChoice() if BackendChoice is not None else None


def simfl_round(method: str, choice: Any) -> Callable[..., torch.Tensor]:
    """``train_cohort`` as a run calls it: ``auto``'s choice kept over the rounds, and the
    deltas written into memory reused from round to round (``DeltaBuffers``; a checkout
    without them writes to fresh memory, as its runs did)."""
    hp = TrainHParams(1, BATCH, LR, backend=method)  # type: ignore[arg-type]
    buffers = DeltaBuffers() if DeltaBuffers is not None else None

    def run(model: nn.Module, params: torch.Tensor, clients: ClientData,
            seeds: list[int]) -> torch.Tensor:
        if choice is None:
            return train_cohort(model, params, clients, hp, seeds).deltas
        if buffers is None:
            return train_cohort(model, params, clients, hp, seeds, choice).deltas
        return train_cohort(model, params, clients, hp, seeds, choice, buffers).deltas

    return run


def check_equal(data: ClientData) -> None:
    """Every method's deltas for 8 clients in float64 equal the bare loop's."""
    part = data.subset(np.arange(8))
    part = ClientData(part.x.double(), part.y, part.offsets, part.client_ids)
    for name, make in MODELS.items():
        model = make().double()
        params = initial_params(model, 0, torch.float64)
        want = bare_round(model, params, part, list(range(8)))
        for method in SIMFL:
            got = simfl_round(method, new_choice())(model, params, part, list(range(8)))
            gap = float(((got - want).norm(dim=1) / want.norm(dim=1)).max())
            assert gap <= 1e-10, (name, method, gap)
    print("float64, 8 clients: every method's deltas equal the bare loop's (relative <= 1e-10)")


def time_workload(name: str, clients: ClientData, repeats: int, clock: Callable[[], float]
                  ) -> tuple[dict[str, list[float]], str]:
    """Seconds per round of each method (one warm-up round each, then ``repeats`` rounds
    taken in turns) by ``clock``, and the backend ``auto`` chose."""
    model = MODELS[name]()
    params = initial_params(model, 0, torch.float32)
    seeds = list(range(clients.num_clients))
    choice = new_choice()
    methods = {m: simfl_round(m, choice if m == "auto" else new_choice()) for m in SIMFL}
    methods["bare"] = bare_round
    times: dict[str, list[float]] = {m: [] for m in methods}
    for i in range(repeats + 1):
        for method, run in methods.items():
            start = clock()
            run(model, params, clients, seeds)
            if i:
                times[method].append(clock() - start)
    if choice is None:
        rule = importlib.import_module("simfl.train.batched").choose_backend  # the old rule
        return times, f"{rule('auto', model, params.device, clients.num_clients)} (rule)"
    if not choice.record():  # a model auto trains batched without measuring (the linear)
        return times, "batched (not measured)"
    (chose,) = choice.record().values()
    if chose["backend"] == "loop":
        return times, "loop"
    return times, f"batched@{chose['chunk'] or 'all'} ({chose['kernel']})"


def cell(values: list[float], digits: int = 3) -> str:
    return (f"{np.median(values):.{digits}f} ({min(values):.{digits}f}–"
            f"{max(values):.{digits}f})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--root", type=Path, metavar="DIR",
                        help="time the simfl package in DIR (another checkout) instead")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: this process's CPU seconds, steadier on a busy machine")
    args = parser.parse_args()
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    torch.set_num_threads(1)
    import simfl
    print(f"simfl from {Path(simfl.__file__).parent}")
    data, source = writers(max(args.clients))
    check_equal(data)
    print(f"{source}; FedAvg, 1 local epoch, batch {BATCH}, lr {LR}, 1 torch thread; "
          f"{args.clock} seconds per warm round, median (range) of {args.repeats}, interleaved")
    flwr = importlib.util.find_spec("flwr") is not None
    print("Flower: skipped (flwr is not installed)" if not flwr else
          "Flower: flwr is importable, but this bench has no Flower workload: not timed")
    print("| workload | simfl auto | simfl batched | simfl loop | bare loop | bare / auto "
          "| auto chose |")
    print("|---|---|---|---|---|---|---|")
    pick = np.random.default_rng(1)
    for k in args.clients:
        cohort = data.subset(np.sort(pick.choice(data.num_clients, k, replace=False)))
        for name in args.models:
            t, chose = time_workload(name, cohort, args.repeats, clock)
            ratio = list(np.array(t["bare"]) / np.array(t["auto"]))
            print(f"| {name}, {k} clients ({int(cohort.num_samples.sum())} samples, "
                  f"{ParamLayout.of(MODELS[name]()).numel:,} parameters) | {cell(t['auto'])} | "
                  f"{cell(t['batched'])} | {cell(t['loop'])} | {cell(t['bare'])} | "
                  f"{cell(ratio, 2)} | {chose} |", flush=True)


if __name__ == "__main__":
    main()
