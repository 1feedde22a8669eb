"""``[population]``: regions, availability (and the habits mode's spreads), compute and
network. Sources of the defaults are in simfl/population/ (availability.py, compute.py,
network.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from simfl.scenario.fields import (
    LOG_SIGMA,
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_BOUNDED,
    RANK_CORRELATION,
    UNIT_INTERVAL,
    opt,
    params_table,
)


@dataclass(frozen=True)
class Region:
    name: str = "utc"
    utc_offset_h: float = opt(0.0, (lambda v: -12 <= v <= 14, "must be in [-12, 14]"))
    # relative share of devices (normalised over the regions)
    share: float = opt(1.0, POSITIVE_BOUNDED)
    # Access bandwidth (down and up) relative to [population.network]'s medians: mobile
    # speeds differ several-fold between countries.
    link_scale: float = opt(1.0, POSITIVE)


DEFAULT_REGIONS = (
    Region("americas", -5.0, 0.3),
    Region("europe_africa", 1.0, 0.3),
    Region("asia_pacific", 8.0, 0.4),
)
# Online probability at local hour h:00 (linear in between): a night peak (idle, charging,
# unmetered) as in Bonawitz et al. 2019 and Yang et al. 2021; the 0.05-0.35 range is assumed.
DEFAULT_ONLINE_PROB_BY_HOUR = (
    0.306, 0.330, 0.345, 0.350, 0.345, 0.330, 0.306, 0.275, 0.239, 0.200, 0.161, 0.125,
    0.094, 0.070, 0.055, 0.050, 0.055, 0.070, 0.094, 0.125, 0.161, 0.200, 0.239, 0.275,
)


# Spreads of the habits mode (simfl.population.habits). Falaki et al., "Diversity in
# smartphone usage" (MobiSys 2010), found users differing by one or more orders of
# magnitude: 10 to 200 interactions a day over 255 users (abstract), and session lengths
# spread as widely (§4). Read as the 1st to 99th percentile of a lognormal (4.65 standard
# deviations), a 20x range of the odds of being online gives ln 20 / 4.65 = 0.64 on the
# logit scale and a 10x range of mean session lengths ln 10 / 4.65 = 0.49: a mapping from
# interactions to availability that is assumed, not measured. No published spread of
# chronotypes among phones was found: 1 hour is assumed.
HABIT_PROPENSITY_LOGIT_SD = 0.64
HABIT_SESSION_LOG_SD = 0.49
HABIT_PHASE_SD_H = 1.0


@dataclass(frozen=True)
class HabitsConfig:
    """Per-device habits of the ``habits`` availability mode (docs/design.md §3)."""

    propensity_logit_sd: float = opt(HABIT_PROPENSITY_LOGIT_SD,
                                    (lambda v: 0 <= v <= 5, "must be in [0, 5]"))
    phase_sd_h: float = opt(HABIT_PHASE_SD_H, (lambda v: 0 <= v <= 12, "must be in [0, 12]"))
    session_log_sd: float = opt(HABIT_SESSION_LOG_SD, (lambda v: 0 <= v <= 3, "must be in [0, 3]"))
    # Spearman rank correlation, within each region, of the device's propensity (phase) with
    # population.covariate (independent of population.region_assignment)
    covariate_correlation: float = opt(0.0, RANK_CORRELATION)
    phase_correlation: float = opt(0.0, RANK_CORRELATION)
    # Heavy-tailed components (simfl.population.habits; each off at its default):
    # device classes, a mixture of normals for the logit shift: class c has share
    # class_shares[c] and mean class_logit_means[c], each the spread propensity_logit_sd;
    class_shares: tuple[float, ...] = opt((1.0,), (lambda v: len(v) >= 1 and all(
        0 < x <= 1 for x in v) and abs(sum(v) - 1) < 1e-9, "must be shares in (0, 1] "
        "summing to 1"))
    class_logit_means: tuple[float, ...] = opt((0.0,), (lambda v: len(v) >= 1 and all(
        -10 <= x <= 10 for x in v), "must be numbers in [-10, 10]"))
    # a weekly rhythm: the online odds times exp(weekend_logit_shift) on the device's
    # Saturday and Sunday (one value, or one per region in [[population.regions]]' order);
    weekend_logit_shift: tuple[float, ...] = opt((0.0,), (lambda v: len(v) >= 1 and all(
        -5 <= x <= 5 for x in v), "must be numbers in [-5, 5]"))
    # bursts: a hidden engaged/dormant chain per device (0 h: none); online only while
    # engaged, engaged a long-run share engaged_share (raised where a device's own
    # online probability needs it);
    dormant_mean_h: float = opt(0.0, (lambda v: 0 <= v <= 24 * 365, "must be in [0, 8760]"))
    engaged_share: float = opt(1.0, (lambda v: 0 < v <= 1, "must be in (0, 1]"))
    # nightly charging: each night with probability charge_prob the device is online
    # throughout a window of charge_hours from its own local start hour, drawn
    # N(charge_start_h, charge_start_sd_h^2) (rank-correlated with the covariate within
    # each region by charge_correlation). Each component is off at its default; the
    # values that shape one once on (22:00, 1.5 h, 6 h, engaged_share) are assumed, not
    # read from a published table (docs/populations.md says which population uses what).
    charge_prob: float = opt(0.0, UNIT_INTERVAL)
    charge_start_h: float = opt(22.0, (lambda v: 0 <= v < 24, "must be in [0, 24)"))
    charge_start_sd_h: float = opt(1.5, (lambda v: 0 <= v <= 12, "must be in [0, 12]"))
    charge_hours: float = opt(6.0, (lambda v: 0 < v < 24, "must be in (0, 24)"))
    charge_correlation: float = opt(0.0, RANK_CORRELATION)


@dataclass(frozen=True)
class AvailabilityConfig:
    # always, diurnal, habits (diurnal, each device with its own propensity, phase and
    # session length), trace, or a plug-in (simfl.plugins)
    mode: str = "always"
    online_prob_by_hour: tuple[float, ...] = opt(
        DEFAULT_ONLINE_PROB_BY_HOUR,
        (lambda v: len(v) == 24 and all(0 < p < 1 for p in v), "must be 24 numbers in (0, 1)"),
    )
    session_mean_s: float = opt(3600.0, POSITIVE)  # mean length of an online session
    horizon_s: float = opt(7 * 86400.0, POSITIVE)  # diurnal: simulated time precomputed
    log_intervals: bool = False  # also write availability_intervals.parquet
    trace_path: str = ""  # trace: Parquet/CSV with columns client_idx, t_on_s, t_off_s
    # trace: the trace device each training device replays (simfl.population.trace_map):
    # identity (device k replays trace device k; the counts must agree), modulo (k mod the
    # trace's devices, as FedScale) or sample (distinct ones drawn at random; needs as many)
    trace_mapping: Literal["identity", "modulo", "sample"] = "identity"
    # trace: Spearman correlation, within each region, of the replayed trace device's online
    # share with the device's population.covariate (0: the mapping's own pairing)
    trace_covariate_correlation: float = opt(0.0, RANK_CORRELATION)
    habits: HabitsConfig = opt(HabitsConfig)
    params: dict[str, Any] = params_table()


@dataclass(frozen=True)
class ComputeConfig:
    # auto: phone benchmark scores from $SIMFL_DATA_DIR/devices if present, else lognormal
    speed_source: Literal["auto", "benchmark", "lognormal"] = "auto"
    score: Literal["cpu_float", "ai_score"] = "cpu_float"
    phone_mix: Literal["deployment", "benchmark_list"] = "deployment"
    speed_log_sigma: float = opt(0.93, LOG_SIGMA)  # lognormal fallback: spread of speeds
    calibration_batch_size: int = opt(16, POSITIVE)  # batch size of the LeNet time per sample
    train_flops_per_sample: float = opt(0.0, NON_NEGATIVE)  # 0 = from the model's name


@dataclass(frozen=True)
class NetworkConfig:
    down_median_bytes_per_s: float = opt(4.5e6, POSITIVE)
    down_log_sigma: float = opt(0.8, LOG_SIGMA)
    up_median_bytes_per_s: float = opt(1.4e6, POSITIVE)
    up_log_sigma: float = opt(0.8, LOG_SIGMA)
    latency_median_s: float = opt(0.040, NON_NEGATIVE)
    latency_log_sigma: float = opt(0.5, LOG_SIGMA)
    region_capacity_bytes_per_s: float = opt(1.25e9, POSITIVE)  # each direction
    region_latency_s: float = opt(0.010, NON_NEGATIVE)
    server_capacity_bytes_per_s: float = opt(1.25e9, POSITIVE)  # each direction
    server_latency_s: float = opt(0.005, NON_NEGATIVE)


@dataclass(frozen=True)
class PopulationConfig:
    regions: tuple[Region, ...] = opt(
        DEFAULT_REGIONS,
        (lambda v: len(v) > 0 and len({r.name for r in v}) == len(v),
         "must be a non-empty array of regions with distinct names"),
    )
    region_assignment: Literal["random", "covariate"] = "random"
    covariate: Literal["digit_share", "label_share", "writer_group", "num_samples"] = \
        "digit_share"
    covariate_strength: float = opt(1.0, UNIT_INTERVAL)  # 0 = random, 1 = sorted by covariate
    failure_rate_per_h: float = opt(0.0, NON_NEGATIVE)  # hazard per hour of participation
    availability: AvailabilityConfig = opt(AvailabilityConfig)
    compute: ComputeConfig = opt(ComputeConfig)
    network: NetworkConfig = opt(NetworkConfig)
