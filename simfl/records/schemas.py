"""The tables' schemas and the typed rows the simulator builds for them.

:data:`SCHEMAS` fixes every column's type, so every run writes the same types
(docs/design.md §8 says what each column means); the dataclasses below build the rows
of one table each (:class:`simfl.records.writer.Recorder` writes them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

SCHEMAS: dict[str, pa.Schema] = {
    "rounds": pa.schema([
        ("round", pa.int64()),
        ("t_start_s", pa.float64()),
        ("t_end_s", pa.float64()),
        ("num_online", pa.int64()),
        ("num_selected", pa.int64()),
        ("num_kept", pa.int64()),
        ("num_aggregated", pa.int64()),
        ("num_dropped", pa.int64()),
        ("quantile_estimate", pa.float64()),
        ("lr", pa.float64()),
        ("bytes_down", pa.int64()),
        ("bytes_up", pa.int64()),
    ]),
    "clients": pa.schema([
        ("round", pa.int64()),
        ("client_id", pa.string()),
        ("client_idx", pa.int64()),
        ("status", pa.string()),  # aggregated / filtered / dropped / late / nonfinite / stale
        # F_k(w_t); null when the device reported none (the rule needs no losses, or it
        # left first); NaN when it reported a NaN/Inf loss (a diverged model)
        ("loss_reported", pa.float64()),
        # mean minibatch loss of local training; null when the device did not train; NaN
        # for a NaN/Inf update (status nonfinite)
        ("train_loss", pa.float64()),
        ("num_samples", pa.int64()),
        ("bytes_down", pa.int64()),
        ("bytes_up", pa.int64()),
        ("t_dispatch_s", pa.float64()),
        ("t_done_s", pa.float64()),
        ("staleness", pa.int64()),  # server updates since model_version (sync: 0)
        ("model_version", pa.int64()),  # the model the device started from (sync: round)
    ]),
    "comm": pa.schema([
        ("round", pa.int64()),
        ("client_idx", pa.int64()),
        ("direction", pa.string()),  # down / up
        ("kind", pa.string()),  # model / update / loss / quantile_protocol / secagg
        ("bytes", pa.int64()),
        ("t_start_s", pa.float64()),  # null: a shadow message (not sent, so not timed)
        ("t_end_s", pa.float64()),
        # null: sent; else the shadowing estimator whose protocol would send it (not sent,
        # not in rounds.bytes_*; bias.parquet's protocol_bytes per device, as messages)
        ("shadow", pa.string()),
        # false: cut short when its device went offline or failed (``bytes`` then counts
        # what had arrived); null for a shadow message
        ("completed", pa.bool_()),
    ]),
    "bias": pa.schema([
        ("round", pa.int64()),
        ("t_s", pa.float64()),  # when the cohort reported its losses
        ("estimator", pa.string()),
        ("driver", pa.bool_()),  # this estimator's threshold filtered the round
        ("theta", pa.float64()),
        ("estimate", pa.float64()),  # η̂
        ("cohort_size", pa.int64()),
        ("secure_sums", pa.int64()),
        ("protocol_bytes", pa.int64()),  # per device, up + down, beyond the model
        ("oracle_quantile", pa.float64()),  # Q_pop(w_t) over all training devices (bias rounds)
        ("bias", pa.float64()),  # estimate - oracle_quantile
        ("realized_conformity", pa.float64()),  # α-weight of the population with F_k >= η̂
        # bias = sampling_bias + availability_bias + selection_bias (bias rounds; else null):
        # E[η̂ | random cohort of all devices] − Q_pop, E[η̂ | random cohort of those online]
        # − the former, and this round's η̂ − the latter (simfl.quantile.panel)
        ("sampling_bias", pa.float64()),
        ("availability_bias", pa.float64()),
        ("selection_bias", pa.float64()),
        ("mc_draws", pa.int64()),  # random cohorts behind each expectation (0: none)
        # the dose added to the estimator's threshold (simfl.quantile.dose; 0 for others)
        ("offset_nats", pa.float64()),
        ("level_shift", pa.float64()),
        # 95 % Woodruff interval of the estimate from its weights (simfl.quantile.woodruff;
        # null where the estimator has none)
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
    ]),
    "availability": pa.schema([
        ("t_s", pa.float64()),  # start of the simulated hour
        ("region", pa.string()),
        ("num_online", pa.int64()),
    ]),
    "devices": pa.schema([  # one row per device, training and unseen test, as the run ends
        ("client_idx", pa.int64()),  # training devices (as in clients / comm / eval); null for test
        ("client_id", pa.string()),
        ("split", pa.string()),  # train / test (eval's split: join eval on client_id, split)
        ("region", pa.string()),
        ("utc_offset_h", pa.float64()),
        # long-run online share (the day's mean of its profile; always 1; null: a trace)
        ("propensity", pa.float64()),
        ("logit_shift", pa.float64()),  # habits: z, its profile σ(g(u − phase) + z); else 0
        ("phase_h", pa.float64()),  # habits: its profile shifted later by this; else 0
        ("session_mean_s", pa.float64()),  # mean online session (null: always, trace)
        ("engaged_share", pa.float64()),  # habits' bursts: share of time engaged (else 1)
        ("charge_start_h", pa.float64()),  # habits: local hour its charging opens (null: none)
        ("speed_rel", pa.float64()),  # training speed relative to the median phone
        ("train_s_per_sample", pa.float64()),
        ("down_bytes_per_s", pa.float64()),
        ("up_bytes_per_s", pa.float64()),
        ("latency_s", pa.float64()),
        ("num_samples", pa.int64()),
        ("covariate", pa.float64()),  # population.covariate of its data (manifest names it)
    ]),
    "eval": pa.schema([
        ("round", pa.int64()),  # rounds completed when evaluated (0 = initial model)
        ("t_s", pa.float64()),
        ("client_id", pa.string()),
        ("client_idx", pa.int64()),  # training devices (as in clients / comm); null for test
        ("split", pa.string()),  # train / test
        ("num_samples", pa.int64()),
        ("loss", pa.float64()),
        ("error", pa.float64()),
    ]),
}


# Typed builders of the simulator's rows: one dataclass per table, its fields the
# table's columns in schema order (a test checks). A field holds a scalar (broadcast to
# the batch) or a (K,) array; a masked array's masked entries are null.
Column = np.ndarray | list[Any]


@dataclass(frozen=True)
class RoundRow:
    """One row of rounds.parquet: a round (async: a server update)."""

    TABLE: ClassVar[str] = "rounds"
    round: int
    t_start_s: float
    t_end_s: float
    num_online: int
    num_selected: int
    num_kept: int
    num_aggregated: int
    num_dropped: int
    quantile_estimate: float | None
    lr: float
    bytes_down: int
    bytes_up: int


@dataclass(frozen=True)
class ClientRows:
    """clients.parquet rows: the selected devices of a round (async: the tasks ended in an
    update interval)."""

    TABLE: ClassVar[str] = "clients"
    round: int
    client_id: Column
    client_idx: Column
    status: Column
    loss_reported: np.ma.MaskedArray
    train_loss: np.ma.MaskedArray
    num_samples: Column
    bytes_down: Column
    bytes_up: Column
    t_dispatch_s: float | Column
    t_done_s: Column
    staleness: int | Column
    model_version: int | Column


@dataclass(frozen=True)
class CommRows:
    """comm.parquet rows: the messages of a round (async: of an update interval)."""

    TABLE: ClassVar[str] = "comm"
    round: int
    client_idx: Column
    direction: Column
    kind: Column
    bytes: Column
    t_start_s: Column | None
    t_end_s: Column | None
    shadow: str | None = None
    completed: Column | None = None  # None: shadow messages (not sent)


@dataclass(frozen=True)
class EvalRows:
    """eval.parquet rows: one evaluation of the global model on one split's devices."""

    TABLE: ClassVar[str] = "eval"
    round: int
    t_s: float
    client_id: Column
    client_idx: np.ma.MaskedArray
    split: str
    num_samples: Column
    loss: Column
    error: Column


@dataclass(frozen=True)
class AvailabilityRows:
    """availability.parquet rows: devices online per (simulated hour, region)."""

    TABLE: ClassVar[str] = "availability"
    t_s: Column
    region: Column
    num_online: Column


@dataclass(frozen=True)
class DeviceRows:
    """devices.parquet rows: every device of one split (training or unseen test), its
    habits, links and data size."""

    TABLE: ClassVar[str] = "devices"
    client_idx: Column
    client_id: Column
    split: str
    region: Column
    utc_offset_h: Column
    propensity: np.ma.MaskedArray
    logit_shift: Column
    phase_h: Column
    session_mean_s: np.ma.MaskedArray
    engaged_share: Column
    charge_start_h: np.ma.MaskedArray
    speed_rel: Column
    train_s_per_sample: Column
    down_bytes_per_s: Column
    up_bytes_per_s: Column
    latency_s: Column
    num_samples: Column
    covariate: Column


Rows = RoundRow | ClientRows | CommRows | EvalRows | AvailabilityRows | DeviceRows
