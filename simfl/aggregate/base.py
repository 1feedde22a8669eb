"""What every aggregation rule provides to the server.

A rule is a small frozen object built by a factory closing over its
hyperparameters (as optax and fedjax do). Over a run the server

0. builds the rule's memory once, ``state = init(num_samples)`` (None for most rules);
1. draws ``round(cohort_fraction × clients_per_round)`` online devices, uniformly or
   with the chances ``sampling(state, num_samples)`` (DRFA: ∝ λ; q-FFL: ∝ p_k);
2. asks ``select(losses, weights)`` which cohort clients should train, when the
   rule ``needs_losses`` (clients report F_k(w_t) first); otherwise all train;
3. combines the updates that arrived,
   ``params, state = combine(global_params, RoundInputs(...), state)``: rules with
   memory across rounds return their new state instead of mutating (optax's
   init/update). Local training adds ``prox_mu / 2 ‖w − w_t‖²`` (FedProx). A rule
   that sets ``every_round`` is asked to combine in rounds without an update too, and
   reads the round's loss reports (``RoundInputs.reports``): the participation-aware
   options of FedAvg and Δ-FL (simfl.aggregate.participation).

The asynchronous server (FedBuff) combines a buffer of updates trained from older
model versions with the same ``combine``: ``RoundInputs.scales`` then holds
c_k = η_g s(τ_k), and a rule that weights updates applies it after normalising,
w + Σ_k (π_k / Σ_j π_j) c_k Δ_k (stale updates count less in absolute terms, as in
FedBuff). The rules whose step needs one round from one model (q-FFL, AFL, DRFA)
and FedAvg-Sub's smaller cohort are refused in async mode by ``simfl.scenario``.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from simfl.plugins import broke, code_of
from simfl.quantile.secagg import Exchange


@dataclass(frozen=True)
class Selection:
    keep: np.ndarray  # (K,) bool: clients that go on to train
    threshold: float | None = None  # the loss threshold used, if any
    exchanges: tuple[Exchange, ...] = ()  # the threshold protocol's messages per device
    # per shadowing estimator, the messages a device would send or receive beyond the
    # round's for its protocol (comm.parquet rows marked with its name; never sent)
    shadow: tuple[tuple[str, tuple[Exchange, ...]], ...] = ()


# A rule's memory across rounds, plain data that checkpoints hold (simfl.runs.plain): AFL,
# DRFA: λ over all clients (an array); FedAU, MIFA: a dict of arrays (participation.py).
State = Any
LossOracle = Callable[[torch.Tensor, np.ndarray], np.ndarray]  # (params, client_idx) -> F_k
T = TypeVar("T")


@dataclass(frozen=True)
class Reports:
    """The loss reports a sync round's filter chose from (a rule that needs losses):
    what a participation-aware combine reads beyond the updates that arrived."""

    client_idx: np.ndarray  # (M,) the reporting devices
    losses: np.ndarray  # (M,) their F_k(w_t)
    threshold: float | None  # the η̂ they were kept by (None: the rule's select set none)


@dataclass(frozen=True)
class RoundInputs:
    """What the server holds when it combines a round's K arrived updates."""

    deltas: torch.Tensor  # (K, P) w̄_k − w_t: local model minus the incoming global model
    weights: np.ndarray  # (K,) α_k, proportional to the clients' local samples
    client_idx: np.ndarray | None = None  # (K,) training-client indices
    lr: float | None = None  # the round's local learning rate
    # F_k(params) of any training clients on their training data (DRFA's probes).
    loss_of: LossOracle | None = None
    rng: np.random.Generator | None = None  # the round's own stream (DRFA's draws)
    losses: np.ndarray | None = None  # (K,) F_k(w_t): the arrived clients' loss reports
    scales: np.ndarray | None = None  # (K,) async: c_k = η_g s(τ_k); None: every c_k = 1
    reports: Reports | None = None  # the round's loss reports (None: the rule asked for none)


@dataclass(frozen=True)
class Combined:
    params: torch.Tensor  # (P,) w_{t+1}
    state: State = None


SelectFn = Callable[[np.ndarray, np.ndarray], Selection]
CombineFn = Callable[[torch.Tensor, RoundInputs, State], Combined]
InitFn = Callable[[np.ndarray], State]  # (N,) local samples of every training client -> state
SamplingFn = Callable[[State, np.ndarray], np.ndarray | None]  # -> (N,) chances or None


def no_state(num_samples: np.ndarray) -> State:
    return None


def uniform_sampling(state: State, num_samples: np.ndarray) -> np.ndarray | None:
    """None: the server draws the cohort uniformly among the online devices."""
    return None


@dataclass(frozen=True)
class Aggregator:
    name: str
    needs_losses: bool
    select: SelectFn
    combine: CombineFn
    init: InitFn = no_state
    sampling: SamplingFn = uniform_sampling
    prox_mu: float = 0.0  # FedProx's μ in the local objective (0: plain local SGD)
    cohort_fraction: float = 1.0  # share of server.clients_per_round to select
    # combine in rounds that aggregate no update too (FedAU counts every round's
    # participation, MIFA steps from its memory: simfl.aggregate.participation)
    every_round: bool = False


def keep_all(losses: np.ndarray, weights: np.ndarray) -> Selection:
    return Selection(keep=np.ones(len(weights), dtype=bool))


def weighted_mean_update(global_params: torch.Tensor, deltas: torch.Tensor,
                         weights: np.ndarray, scales: np.ndarray | None = None) -> torch.Tensor:
    """w_t + Σ_k (α_k / Σ_j α_j) c_k Δ_k over the given (K, P) deltas, c_k = ``scales``
    (1 if None); w_t if K = 0 or Σ α_k = 0."""
    if len(weights) == 0 or weights.sum() <= 0:
        return global_params.clone()
    coef = weights / weights.sum() if scales is None else weights / weights.sum() * scales
    alpha = torch.as_tensor(coef, dtype=deltas.dtype, device=deltas.device)
    return global_params + alpha @ deltas


def weighted_mean(global_params: torch.Tensor, inputs: RoundInputs, state: State) -> Combined:
    """FedAvg's combine: the α-weighted mean of the updates (a stateless rule)."""
    return Combined(weighted_mean_update(global_params, inputs.deltas, inputs.weights,
                                         inputs.scales), state)


def need(value: T | None, what: str, rule: str) -> T:
    """``value``, or a ValueError saying that ``rule`` needs ``what`` in its RoundInputs."""
    if value is None:
        raise ValueError(f"{rule} needs {what} in its RoundInputs")
    return value


# What the server does with a rule's answers (docs/extending.md): checked where the
# learner receives them, so that a plug-in rule that breaks its contract fails the run
# with one line naming it (simfl.plugins.PluginBroke) instead of a traceback from where
# the answer is used (a mask of the wrong length, a model of the wrong shape).
_SELECT = ("select(losses, weights) returns a simfl.aggregate.base.Selection whose keep is "
           "a bool array with one entry per reporting device and whose threshold is None or "
           "a number")
_COMBINE = ("combine(global_params, inputs, state) returns a simfl.aggregate.base.Combined "
            "whose params are a tensor of global_params' shape and dtype")
_SAMPLING = ("sampling(state, num_samples) returns None or an array of one non-negative "
             "chance per training device")


def _rule(rule: Aggregator, fn: Callable[..., object]) -> str:
    return f"'aggregator.name' (the rule {rule.name!r}, {code_of(fn)})"


def checked_selection(rule: Aggregator, selection: object, num_reports: int) -> Selection:
    """``selection``, the rule's answer for ``num_reports`` reporting devices, with its
    keep mask as a bool array; PluginBroke naming the rule if it is not a Selection, its
    mask is not one bool per device, or its threshold is neither None nor a number."""
    who = _rule(rule, rule.select)
    if not isinstance(selection, Selection):
        raise broke(who, f"its select returned a {type(selection).__name__}", _SELECT)
    try:
        keep = np.asarray(selection.keep)
    except (TypeError, ValueError) as e:  # a ragged list, say
        raise broke(who, f"its select returned a keep mask numpy cannot read ({e})",
                    _SELECT) from None
    if keep.dtype != np.bool_ or keep.shape != (num_reports,):
        raise broke(who, f"its select returned a keep mask of shape {keep.shape} and dtype "
                         f"{keep.dtype} for {num_reports} reporting devices", _SELECT)
    threshold = selection.threshold
    if threshold is not None and (not isinstance(threshold, numbers.Real)
                                  or isinstance(threshold, bool)):
        raise broke(who, f"its select returned the threshold {threshold!r} (a "
                         f"{type(threshold).__name__})", _SELECT)
    return selection if keep is selection.keep else \
        Selection(keep, threshold, selection.exchanges, selection.shadow)


def checked_combined(rule: Aggregator, combined: object, params: torch.Tensor) -> Combined:
    """``combined``, the rule's new model from ``params``; PluginBroke naming the rule if it
    is not a Combined whose params are a tensor of the shape and dtype of ``params``."""
    who = _rule(rule, rule.combine)
    if not isinstance(combined, Combined):
        raise broke(who, f"its combine returned a {type(combined).__name__}", _COMBINE)
    new = combined.params
    if not isinstance(new, torch.Tensor):
        raise broke(who, f"its combine returned params of type {type(new).__name__}", _COMBINE)
    if new.shape != params.shape or new.dtype != params.dtype:
        raise broke(who, f"its combine returned params of shape {tuple(new.shape)} and dtype "
                         f"{new.dtype}, not the global model's {tuple(params.shape)} and "
                         f"{params.dtype}", _COMBINE)
    return combined


def checked_sampling(rule: Aggregator, chances: object, num_devices: int) -> np.ndarray | None:
    """``chances``, the rule's relative chances of the training devices to be selected (None:
    uniform); PluginBroke naming the rule if they are not one number per device."""
    if chances is None:
        return None
    try:
        array = np.asarray(chances)
    except (TypeError, ValueError) as e:
        raise broke(_rule(rule, rule.sampling), f"its sampling returned chances numpy "
                    f"cannot read ({e})", _SAMPLING) from None
    if array.shape != (num_devices,) or not np.issubdtype(array.dtype, np.number) \
            or np.issubdtype(array.dtype, np.complexfloating):
        raise broke(_rule(rule, rule.sampling),
                    f"its sampling returned chances of shape {array.shape} and dtype "
                    f"{array.dtype} for {num_devices} training devices", _SAMPLING)
    return array
