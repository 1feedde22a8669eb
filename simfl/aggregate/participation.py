"""Participation-aware aggregation: FedAU and MIFA, as options of FedAvg and Δ-FL.

When devices take part unequally (some are online, idle and charging far more often
than others), FedAvg's mean over the devices that took part leans toward the frequent
ones: it minimises Σ_k p_k α_k F_k instead of Σ_k α_k F_k. Δ-FL's filter corrects
*which* devices train; these options correct the *average* for unequal participation.
One key, ``aggregator.participation = "none" | "fedau" | "mifa"``, read by ``fedavg``
and ``deltafl`` alike (each passes its rule through :func:`participating`), keeps one
home for each correction; other rules refuse it as a key without meaning.
``"none"`` returns the rule unchanged. α_k = n_k (the device's samples) throughout,
A = Σ_{i=1}^N α_i over the N training devices.

**FedAU** (Wang & Ji, "A Lightweight Method for Tackling Unknown Participation
Statistics in Federated Averaging", ICLR 2024, Algorithm 1; the interval rule as in the
authors' code, github.com/IBM/fedau main.py, weighting "adaptive"). For every device k
the server keeps S_k, the rounds since k's last interval closed, M_k its closed
intervals and Ω_k their mean. In round t:

    ω_k^t = Ω_k if M_k > 0, else 1              (before round t's own interval)
    S_k ← S_k + 1; if k took part in round t, or S_k = K (the cutoff):
        Ω_k ← (M_k Ω_k + S_k) / (M_k + 1),  M_k ← M_k + 1,  S_k ← 0
    w_{t+1} = w_t + Σ_{k∈S_t} α_k ω_k^t Δ_k / (τ A)

With independent participation of probability p_k the intervals are geometric, and Ω_k
→ E[min(G_k, K)] = (1 − (1 − p_k)^K) / p_k: 1/p_k when (1 − p_k)^K is small, at most K
for devices seldom seen (bounded weights for a bias below p_k ≈ 1/K: the paper's
trade-off; the authors' code defaults to K = 100000, in effect none, and runs K = 50).
ω_k^t does not depend on whether k takes part in round t, so E[Σ_{k∈S_t} α_k ω_k Δ_k]
≈ Σ_k α_k Δ_k: the step is a Horvitz–Thompson estimate of the full-participation
update, the paper's
(1/N) Σ_k ω_k Δ_k (global step 1) with equal α. τ = 1 for FedAvg; for Δ-FL τ = θ,
the share of the population in the loss tail whose mean update Δ-FL takes, and the
kept devices' weighted updates estimate that tail's sum. A device *takes part*, for
FedAvg, when its update is aggregated (arrived in time, finite); for Δ-FL, when it
reports its loss, kept or filtered: the filter's choice by loss is Δ-FL's objective,
not a participation bias, and counting only kept devices would weigh each by
1 / P(kept) and undo the tail.

**MIFA** (Gu, Huang, Zhang, Huang, "Fast Federated Learning in the Presence of
Arbitrary Device Unavailability", NeurIPS 2021, Algorithm 1). The server keeps every
device's latest update as G_i = Δ_i / η_{τ_i} (η_{τ_i} the local lr it was trained
with) and steps every round with their mean, fresh or stale:

    w_{t+1} = w_t + η_t Σ_{i∈T_t} (α_i / Σ_{j∈T_t} α_j) G_i

devices not yet heard from counting as G_i = 0 (the memory starts at zero, as in the
MIFA baseline of FedAU's authors' code). For FedAvg, T_t is every training device.
For Δ-FL, *kept* means for a stored update what it means for a fresh one: T_t holds the
devices whose latest loss report is at or above round t's threshold η̂_t, the filter
applied to the whole memory: a reporter of round t by its fresh report (a kept one
counts with its fresh update, or its stored one if the fresh did not arrive; a
filtered one not at all), every other device by the loss it last reported. Losses fall
as training goes on, so a stale report overstates a device's loss now; and at θ = 1
this is not MIFA-FedAvg (stale losses below round t's lowest report are left out). A
round without loss reports has no threshold: the model stays. Under full participation
MIFA-FedAvg is FedAvg (with a constant lr, to the bit: every G_i is fresh and the ratio
η_t / η_{τ_i} is 1). Memory: N × P numbers of the training dtype, allocated at the
first update and written in place (copying it every round would double it); above
:data:`MAX_MEMORY_BYTES` the run fails naming the key, and simfl.runs.memory counts it
before the run where the data's keys give N.

Both combine every round (``Aggregator.every_round``): FedAU counts rounds without an
update, MIFA steps from its memory. Both are defined over synchronous rounds; async
mode refuses them (simfl.plugins.PARTICIPATION_ASYNC_REFUSED).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from simfl.aggregate.base import Aggregator, Combined, CombineFn, InitFn, RoundInputs, State, need
from simfl.errors import RunFailed

PARTICIPATION = ("none", "fedau", "mifa")
FEDAU_CUTOFF = 50  # K; scenario.AggregatorConfig.fedau_cutoff's default
MAX_MEMORY_BYTES = 16 * 2**30  # MIFA's memory of N × P numbers, at most


def participating(rule: Aggregator, participation: str, cutoff: int = FEDAU_CUTOFF,
                  tail: float | None = None) -> Aggregator:
    """``rule`` (FedAvg's weighted mean; ``tail`` = θ for Δ-FL's upper tail, None for
    FedAvg) with its combine corrected for unequal participation (module docstring)."""
    if participation == "none":
        return rule
    if participation == "fedau":
        combine, init = _fedau(rule.name, cutoff, 1.0 if tail is None else tail)
    elif participation == "mifa":
        combine, init = _mifa(rule.name, tail is not None)
    else:
        raise ValueError(f"participation must be one of {PARTICIPATION}, got {participation!r}")
    return dataclasses.replace(rule, name=f"{rule.name}+{participation}", combine=combine,
                               init=init, every_round=True)


def _participants(inputs: RoundInputs, rule: str) -> np.ndarray:
    """Who took part in the round: its reporters for a rule that asked for losses, else
    the devices whose updates arrived."""
    if inputs.reports is not None:
        return np.asarray(inputs.reports.client_idx)
    return np.asarray(need(inputs.client_idx, "client_idx", rule))


def fedau_init(num_samples: np.ndarray) -> dict[str, Any]:
    """FedAU's state before round 0: no interval closed, none open."""
    n = len(num_samples)
    return {"samples": np.asarray(num_samples, dtype=np.float64),
            "mean_interval": np.zeros(n), "intervals": np.zeros(n, dtype=np.int64),
            "since": np.zeros(n, dtype=np.int64)}


def fedau_round(state: dict[str, Any], took_part: np.ndarray,
                cutoff: int) -> tuple[np.ndarray, dict[str, Any]]:
    """(ω^t (N,): every device's weight for round t, from the intervals before it; the
    state after round t, in which the devices ``took_part``). The module docstring's
    interval rule, for every device at once."""
    mean, count, since = state["mean_interval"], state["intervals"], state["since"]
    weights = np.where(count > 0, mean, 1.0)
    since = since + 1
    closes = since >= cutoff
    closes[took_part] = True
    mean = np.where(closes, (count * mean + since) / (count + 1), mean)
    return weights, {**state, "mean_interval": mean, "intervals": count + closes,
                     "since": np.where(closes, 0, since)}


def _fedau(rule: str, cutoff: int, tail: float) -> tuple[CombineFn, InitFn]:
    if cutoff < 1:
        raise ValueError(f"fedau_cutoff must be >= 1, got {cutoff}")
    name = f"{rule}+fedau"

    def combine(global_params: torch.Tensor, inputs: RoundInputs, state: State) -> Combined:
        weights, state = fedau_round(state, _participants(inputs, name), cutoff)
        client_idx = need(inputs.client_idx, "client_idx", name)
        if len(client_idx) == 0:
            return Combined(global_params.clone(), state)
        coef = inputs.weights * weights[client_idx] / (tail * state["samples"].sum())
        deltas = inputs.deltas
        step = torch.as_tensor(coef, dtype=deltas.dtype, device=deltas.device) @ deltas
        return Combined(global_params + step, state)

    return combine, fedau_init


def mifa_init(num_samples: np.ndarray) -> dict[str, Any]:
    """MIFA's state before round 0: no loss report, no update (the memory is allocated at
    the first)."""
    n = len(num_samples)
    return {"samples": np.asarray(num_samples, dtype=np.float64), "loss": np.full(n, np.nan),
            "lr": np.full(n, np.nan), "updates": None}


def _memory(deltas: torch.Tensor, num_devices: int, rule: str) -> torch.Tensor:
    """MIFA's memory, (N, P) zeros like ``deltas``; RunFailed above MAX_MEMORY_BYTES."""
    size = num_devices * deltas.shape[1] * deltas.element_size()
    if size > MAX_MEMORY_BYTES:
        raise RunFailed(f"'aggregator.participation' = 'mifa' ({rule}) would keep the latest "
                        f"update of {num_devices} devices of {deltas.shape[1]} parameters: "
                        f"{size / 2**30:.3g} GiB, over MIFA's limit of "
                        f"{MAX_MEMORY_BYTES / 2**30:.0f} GiB")
    return deltas.new_zeros((num_devices, deltas.shape[1]))


def _mifa(rule: str, filtered: bool) -> tuple[CombineFn, InitFn]:
    name = f"{rule}+mifa"

    def combine(global_params: torch.Tensor, inputs: RoundInputs, state: State) -> Combined:
        client_idx = need(inputs.client_idx, "client_idx", name)
        lr = need(inputs.lr, "lr", name)
        samples, loss, lrs = state["samples"], state["loss"].copy(), state["lr"].copy()
        reports, updates = inputs.reports, state["updates"]
        if reports is not None:
            loss[reports.client_idx] = reports.losses
        if len(client_idx) > 0:
            if updates is None:
                updates = _memory(inputs.deltas, len(samples), name)
            updates[torch.as_tensor(client_idx, device=updates.device)] = inputs.deltas
            lrs[client_idx] = lr
        state = {**state, "loss": loss, "lr": lrs, "updates": updates}
        if not filtered:
            counted = np.ones(len(samples), dtype=bool)
        elif reports is None or reports.threshold is None:
            counted = np.zeros(len(samples), dtype=bool)
        else:
            counted = loss >= reports.threshold  # never for a device with no report (NaN)
        stored = counted & ~np.isnan(lrs)
        if updates is None or not stored.any() or samples[counted].sum() <= 0:
            return Combined(global_params.clone(), state)
        coef = np.where(stored, samples / samples[counted].sum() * (lr / lrs), 0.0)
        step = torch.as_tensor(coef, dtype=updates.dtype, device=updates.device) @ updates
        return Combined(global_params + step, state)

    return combine, mifa_init
