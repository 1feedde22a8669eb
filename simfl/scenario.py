"""Scenario files: TOML -> frozen, validated dataclasses.

A scenario is data, not code. :func:`load_scenario` rejects unknown keys (naming
the nearest valid one), wrong types and out-of-range values with an
:class:`~simfl.errors.InputError` before any work is done. Only ``runs/run.py`` sees
the whole :class:`Scenario`; every other module gets the section it needs.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import tomllib
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from simfl import plugins
from simfl.errors import InputError

Check = tuple[Callable[[Any], bool], str]


def _f(default: Any, check: Check | None = None) -> Any:
    """A dataclass field with a default and an optional (predicate, message) range check."""
    if isinstance(default, list | dict) or dataclasses.is_dataclass(default):
        factory = default if callable(default) else (lambda: default)
        return field(default_factory=factory, metadata={"check": check})
    return field(default=default, metadata={"check": check})


POSITIVE: Check = (lambda v: v > 0, "must be > 0")
NON_NEGATIVE: Check = (lambda v: v >= 0, "must be >= 0")
FRACTION_OPEN: Check = (lambda v: 0 < v < 1, "must be in (0, 1)")
THETA: Check = (lambda v: 0 < v <= 1, "must be in (0, 1]")
# Bounds of values that scale a float32 computation or compound over rounds, so that a
# run with an extreme one fails at load (exit 2) instead of overflowing mid-run (a
# float32 conversion, an exponential, a sum of shares). They are far beyond any useful value.
LARGE = 1e30
POSITIVE_BOUNDED: Check = (lambda v: 0 < v <= LARGE, "must be in (0, 1e30]")
NON_NEGATIVE_BOUNDED: Check = (lambda v: 0 <= v <= LARGE, "must be in [0, 1e30]")
BOUNDED: Check = (lambda v: -LARGE <= v <= LARGE, "must be in [-1e30, 1e30]")
LOG_SIGMA: Check = (lambda v: 0 <= v <= 10, "must be in [0, 10] (a lognormal's sigma: "
                    "10 spreads values over a factor e^20 between -1 and +1 sd)")
MAX_THREADS = 1024  # torch crashes (segmentation fault) creating 1e5 threads
MAX_OVER_SELECTION = 1000
MAX_DECOMPOSITION_DRAWS = 100_000  # a bias round runs 2 x draws estimates per estimator
MAX_BISECTION_SUMS = 128  # secure sums of one bisection: ceil(log2((high - low) / tol))


def _params() -> Any:
    """A section's ``params`` table: the hyper-parameters of a plug-in (simfl.plugins)
    that are no key of the section, passed to its factory by name."""
    return field(default_factory=dict, hash=False, metadata={"check": None})


def is_plain_name(text: str) -> bool:
    """A scenario name: empty (the file's stem) or one safe path component."""
    return text == "" or (re.fullmatch(r"[\w.=,+-]+", text) is not None
                          and text not in (".", ".."))


@dataclass(frozen=True)
class SyntheticConfig:
    """LEAF's synthetic(alpha, beta) generator (Li et al., FedProx, 2020)."""

    num_clients: int = _f(100, POSITIVE)
    alpha: float = _f(1.0, NON_NEGATIVE)  # model heterogeneity across clients (a std)
    beta: float = _f(1.0, NON_NEGATIVE)  # feature heterogeneity across clients (a std)
    # Std of a model W_0 shared by every client and added to each W_k (0 = LEAF's
    # generator, where clients share no model and unseen clients are unpredictable).
    shared_model: float = _f(0.0, NON_NEGATIVE)
    dim: int = _f(60, POSITIVE)
    num_classes: int = _f(10, (lambda v: v >= 2, "must be >= 2"))
    min_samples: int = _f(50, POSITIVE)  # per client; LEAF adds 50 to a lognormal draw
    # A minority of clients with shifted data (simfl's extension, see simfl/data/synthetic.py):
    # each client joins it with probability tail_share; its labels follow the shared model
    # plus a second one of std tail_shift, so one global model cannot serve both groups.
    tail_share: float = _f(0.0, (lambda v: 0 <= v < 1, "must be in [0, 1)"))
    tail_shift: float = _f(0.0, NON_NEGATIVE)
    # Make each device's samples (float32) from its own stream whenever they are needed,
    # never holding the population's: for populations whose features do not fit in
    # memory. Standardised with the generator's own moments (simfl/data/synthetic.py);
    # other draws than the in-memory generator's, of the same distribution.
    on_demand: bool = False


@dataclass(frozen=True)
class DataConfig:
    # synthetic, femnist, leaf, shakespeare, npz_folder (one <client>.npz per device under
    # path), or a plug-in (simfl.plugins: a registered name or "package.module:function")
    dataset: str = "synthetic"
    # femnist: the .npz file; npz_folder: the folder; leaf: a directory of LEAF json
    # shards; shakespeare: the by-role .jsonl(.gz) corpus or a LEAF-format directory.
    # Empty = the default location
    # under $SIMFL_DATA_DIR (femnist/femnist_writers.npz, shakespeare/shakespeare_by_role.jsonl.gz).
    path: str = ""
    min_samples_per_client: int = _f(0, NON_NEGATIVE)  # the papers keep writers with >= 100
    test_client_fraction: float = _f(0.5, FRACTION_OPEN)  # writer-level split: unseen test devices
    max_clients: int = _f(0, NON_NEGATIVE)  # subsample this many writers (0 = all)
    # femnist only: keep the writers whose samples come from these copies (the .npz's
    # `source_names`, e.g. "zshuai8/FedGMM_ICML2023@5a626c8"), before every other
    # filter; empty = every writer. A name the file lacks is an error naming this key.
    sources: tuple[str, ...] = ()
    # Tuning (python -m simfl tune): > 0 sets the unseen test writers aside and evaluates
    # this share of the *training* writers as the "test" side instead (held out, never
    # trained on), so a criterion on it never looks at the test devices.
    validation_fraction: float = _f(0.0, (lambda v: 0 <= v < 1, "must be in [0, 1)"))
    # Standardise inputs with the training devices' mean and std. Off: images stay in
    # [0, 1] (MNIST polarity), the scale the papers' learning rates were tuned for.
    # Shakespeare's character indices are never standardised.
    standardise: bool = True
    # FEMNIST images (femnist, leaf): "authors" feeds them as the Δ-FL authors' code does
    # (krishnap25/simplicial-fl, models/main.py): LEAF polarity (background 1) over each
    # pixel's mean, (v - mu_j) / mu_j, zero-mean per pixel, ink -1 (split.authors_pixels).
    # "ink": 1 - v, ink 1 and background 0. "authors" needs standardise = false.
    pixel_scaling: Literal["ink", "authors"] = "ink"
    synthetic: SyntheticConfig = _f(SyntheticConfig)
    params: dict[str, Any] = _params()


@dataclass(frozen=True)
class ModelConfig:
    # linear, convnet, gru (Shakespeare's character model) or a plug-in (simfl.plugins)
    name: str = "linear"
    l2: float = _f(0.0, NON_NEGATIVE_BOUNDED)  # (l2 / 2) * ||w||^2 added to every local loss
    # Linear only, for the authors' model (krishnap25/simplicial-fl: scores x·W from W = 0):
    # bias = false drops the intercept; init = "zeros" starts every parameter at 0 instead
    # of PyTorch's seeded default (docs/reproduction.md, "Checked against the authors' code").
    bias: bool = True
    init: Literal["pytorch", "zeros"] = "pytorch"
    params: dict[str, Any] = _params()


@dataclass(frozen=True)
class TrainConfig:
    local_epochs: int = _f(1, POSITIVE)
    batch_size: int = _f(32, POSITIVE)
    lr: float = _f(0.1, POSITIVE_BOUNDED)
    lr_decay_every: int = _f(0, NON_NEGATIVE)  # rounds between decays (0 = constant lr)
    lr_decay_factor: float = _f(0.5, (lambda v: 0 < v <= 1, "must be in (0, 1] (a decay)"))
    backend: Literal["auto", "batched", "loop"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "cpu"
    dtype: Literal["float32", "float64"] = "float32"
    # Matrix and convolution precision on a GPU: fp32 (exact float32), tf32 (float32 storage,
    # TensorFloat-32 products) or bf16 (autocast of the forward pass); off (fp32) by default.
    precision: Literal["fp32", "tf32", "bf16"] = "fp32"
    # torch intra-op threads for the run (0 = torch's default, one per core). 1 by default:
    # measured no faster with 2 on the linear model, and far slower beside a busy core
    # (README, "Threads"); the ConvNet on a CPU alone on the machine gains from more.
    threads: int = _f(1, (lambda v: 0 <= v <= MAX_THREADS, f"must be in [0, {MAX_THREADS}]"))


@dataclass(frozen=True)
class AggregatorConfig:
    """The aggregation rule (simfl/aggregate/, one module each) and its hyperparameters."""

    # fedavg, fedprox, deltafl, fedavg_sub, qffl, term, afl, drfa or a plug-in
    # (simfl.plugins; the keys each reads: plugins.AGGREGATORS)
    name: str = "fedavg"
    # Delta-FL: keep the clients in the top-theta loss tail; fedavg_sub: select
    # round(theta * server.clients_per_round) devices (Delta-FL's count varies: fedavg_sub.py)
    theta: float = _f(0.5, THETA)
    # FedProx: (mu / 2) * ||w - w_t||^2 in every local loss
    mu: float = _f(0.01, NON_NEGATIVE_BOUNDED)
    q: float = _f(1.0, NON_NEGATIVE)  # q-FFL: updates weighted by F_k(w_t)^q (0 = uniform FedAvg)
    # TERM: weights ∝ alpha_k * exp(tilt * F_k(w_t)); > 0 for fairness, < 0 against outliers
    tilt: float = 1.0
    # AFL (gamma_lambda) and DRFA (tau * gamma): projected-ascent step of the mixture
    # weights lambda per round. A round moves lambda_k by about step * (N / K) * F_k,
    # against lambda_k ~ 1 / N: keep step << K / (N^2 * loss).
    lambda_step: float = _f(1e-5, NON_NEGATIVE_BOUNDED)
    # fedavg, deltafl: correct the mean for unequal participation (sync only;
    # simfl/aggregate/participation.py): "fedau" weights each update by its device's mean
    # interval between participations (Wang & Ji 2024), "mifa" averages every device's
    # latest update, stale ones too (Gu et al. 2021; N x P numbers of memory)
    participation: Literal["none", "fedau", "mifa"] = "none"
    # FedAU's cutoff K: an interval closes after K rounds without participation, so no
    # weight exceeds K (participation.FEDAU_CUTOFF)
    fedau_cutoff: int = _f(50, POSITIVE)
    params: dict[str, Any] = _params()


# secure_mm's ranges: each iteration is one secure sum of the cohort (a round trip of the
# protocol; MM converges in tens), and ``tol`` is also the width its final bisection narrows
# the bracket to, ceil(log2(bracket / tol)) sums: below MIN_MM_TOL a double cannot tell a
# loss near 1e4 from its neighbour, and a tiny tol overflows that count.
MAX_MM_ITERATIONS = 10_000
MIN_MM_TOL = 1e-12


@dataclass(frozen=True)
class SecureMMConfig:
    # secure sums after the first (the weighted mean)
    iterations: int = _f(30, (lambda v: 1 <= v <= MAX_MM_ITERATIONS,
                              f"must be in [1, {MAX_MM_ITERATIONS}] (each iteration is one "
                              f"secure sum of the cohort)"))
    # stop once an iteration moves the estimate by at most this
    tol: float = _f(1e-4, (lambda v: MIN_MM_TOL <= v <= LARGE,
                           f"must be in [{MIN_MM_TOL:g}, 1e30] (finer than a double "
                           f"resolves a loss near 1e4)"))


@dataclass(frozen=True)
class BisectionConfig:
    # the search range of the threshold (losses outside it are clamped)
    low: float = _f(0.0, BOUNDED)
    high: float = _f(16.0, BOUNDED)
    tol: float = _f(1e-3, POSITIVE)  # final bracket width: ceil(log2((high - low) / tol)) sums


@dataclass(frozen=True)
class TrackingConfig:
    initial: float = _f(1.0, POSITIVE_BOUNDED)  # the threshold of the first round
    # geometric step: eta *= exp(-step * (share below - level))
    step: float = _f(0.2, (lambda v: 0 < v <= 10, "must be in (0, 10]"))


@dataclass(frozen=True)
class IPWConfig:
    prior: float = _f(1.0, POSITIVE)  # Beta(prior, prior) pseudo-counts of the online rates


@dataclass(frozen=True)
class HistoryConfig:
    bins: int = _f(4, (lambda v: 1 <= v <= 100, "must be in [1, 100]"))  # per region


@dataclass(frozen=True)
class ShiftedConfig:
    """The dose of the ``shifted`` estimator (simfl/quantile/dose.py): its base's η̂ at
    level (1 − θ) + level_shift, plus offset_nats."""

    base: str = "cohort_exact"  # an estimator without memory across rounds
    offset_nats: float = _f(0.0, (lambda v: -100 <= v <= 100, "must be in [-100, 100]"))
    level_shift: float = _f(0.0, (lambda v: -1 <= v <= 1, "must be in [-1, 1]"))
    from_round: int = _f(0, NON_NEGATIVE)  # the rounds before it use the base's η̂ alone


@dataclass(frozen=True)
class ModelAssistedConfig:
    """``model_assisted`` (simfl/quantile/assisted.py): the largest age, in rounds, of a
    device's last loss report that predicts its current loss (older: as never reported)."""

    max_age: int = _f(100, (lambda v: 1 <= v <= 10**9, "must be in [1, 1e9]"))


@dataclass(frozen=True)
class RakeConfig:
    """``rake`` (simfl/quantile/survey.py): the cohort calibrated to population margins by
    raking; the margins are among region (known at registration), hour (the block of
    the UTC day in which a device checked in most on earlier days, of ``hour_classes``
    equal blocks, or never seen) and rate (``rate_classes`` equal-count bins of its
    earlier days' check-in rate)."""

    margins: tuple[Literal["region", "hour", "rate"], ...] = _f(
        ("region", "hour", "rate"),
        (lambda v: len(v) >= 1 and len(set(v)) == len(v), "must name a margin, none twice"))
    hour_classes: int = _f(3, (lambda v: 1 <= v <= 24, "must be in [1, 24]"))
    rate_classes: int = _f(3, (lambda v: 1 <= v <= 100, "must be in [1, 100]"))
    # stop once every margin is matched within this relative error, or after max_iterations
    tol: float = _f(1e-6, (lambda v: 0 < v < 1, "must be in (0, 1)"))
    max_iterations: int = _f(100, (lambda v: 1 <= v <= 10_000, "must be in [1, 10000]"))


@dataclass(frozen=True)
class ShrunkIPWConfig:
    """``ipw_shrunk`` (simfl/quantile/survey.py): each inverse rate 1/π̂_k capped at
    ``trim`` times the cohort's median (0: no cap)."""

    trim: float = _f(10.0, (lambda v: v == 0 or 1 <= v <= LARGE,
                            "must be 0 (no cap) or in [1, 1e30]"))


@dataclass(frozen=True)
class ShrunkStrataConfig:
    """``poststrat_shrunk`` (simfl/quantile/survey.py): strata of each region by its
    devices' shrunk online rates, ``bins`` equal-count bins (0: by the rule, at most five
    with at least ``min_expected`` cohort members expected in each)."""

    bins: int = _f(0, (lambda v: 0 <= v <= 100, "must be in [0, 100] (0: by the rule)"))
    min_expected: float = _f(5.0, (lambda v: 0 < v <= 1e6, "must be in (0, 1e6]"))


@dataclass(frozen=True)
class EstimatorConfig:
    """How the server estimates the Δ-FL threshold (simfl/quantile/estimators.py)."""

    # drives the filter: one of simfl's (plugins.ESTIMATORS, which says what each reads)
    # or a plug-in
    name: str = "cohort_exact"
    # Also run on the same cohort losses every round (logged, never used to filter);
    # listing the driving estimator here too is allowed (a sweep can vary the driver).
    shadow: tuple[str, ...] = _f(
        (), (lambda v: len(set(v)) == len(v), "must not repeat an estimator"))
    # Rounds between evaluations of F_k(w_t) on every training device for the
    # population quantile and the realized conformity (0 = never).
    bias_every: int = _f(0, NON_NEGATIVE)
    # On bias rounds, Monte-Carlo draws of random cohorts (of the cohort's size) from all
    # training devices and from those online now, for the bias decomposition (0 = off).
    decomposition_draws: int = _f(50, (lambda v: 0 <= v <= MAX_DECOMPOSITION_DRAWS,
                                       f"must be in [0, {MAX_DECOMPOSITION_DRAWS}]"))
    noise_std: float = _f(0.0, NON_NEGATIVE)  # Gaussian noise on every secure sum (DP knob)
    secure_mm: SecureMMConfig = _f(SecureMMConfig)
    secure_bisection: BisectionConfig = _f(BisectionConfig)
    tracking: TrackingConfig = _f(TrackingConfig)
    ipw: IPWConfig = _f(IPWConfig)
    poststrat_history: HistoryConfig = _f(HistoryConfig)  # strata of check-in rate
    shifted: ShiftedConfig = _f(ShiftedConfig)  # the dose of a dose-response
    model_assisted: ModelAssistedConfig = _f(ModelAssistedConfig)  # last reports' max age
    rake: RakeConfig = _f(RakeConfig)  # its margins and iterations
    ipw_shrunk: ShrunkIPWConfig = _f(ShrunkIPWConfig)  # its weights' cap
    poststrat_shrunk: ShrunkStrataConfig = _f(ShrunkStrataConfig)  # its strata count
    # The check-ins the estimators that read them see (simfl.quantile.estimators.CheckIns):
    # each online device's with this probability when a round opens, and kept for the
    # round's UTC day and this many days before it (0: forever).
    checkin_share: float = _f(1.0, (lambda v: 0 < v <= 1, "must be in (0, 1]"))
    checkin_memory_days: int = _f(0, (lambda v: 0 <= v <= 3650, "must be in [0, 3650]"))
    params: dict[str, Any] = _params()  # of the plug-in estimators, each takes those it names


@dataclass(frozen=True)
class ServerConfig:
    num_rounds: int = _f(100, POSITIVE)
    clients_per_round: int = _f(10, POSITIVE)
    # Select clients_per_round * (1 + over_selection) devices; the round closes once
    # 1 / (1 + over_selection) of the devices that train have uploaded (Bonawitz et al. 2019).
    over_selection: float = _f(0.0, (lambda v: 0 <= v <= MAX_OVER_SELECTION,
                                     f"must be in [0, {MAX_OVER_SELECTION}]"))
    min_online: int = _f(1, POSITIVE)  # wait until at least this many devices are online
    # Kept so that older scenarios and manifests load; it changes nothing: a server waiting
    # for devices wakes the instant enough are online (simfl.sim.tasks.wait_for_devices).
    wait_poll_s: float = _f(60.0, POSITIVE)
    # Fail the run (RunStalled) after waiting this long for enough idle online devices.
    max_wait_s: float = _f(86400.0, POSITIVE)
    deadline_s: float = _f(0.0, NON_NEGATIVE)  # round deadline from its start (0 = none)
    round_interval_s: float = _f(0.0, NON_NEGATIVE)  # rounds start at most this often
    # "async": buffered asynchronous aggregation (FedBuff, Nguyen et al., AISTATS 2022;
    # docs/async.md). num_rounds then counts server updates; the keys below are async-only.
    mode: Literal["sync", "async"] = "sync"
    concurrency: int = _f(0, NON_NEGATIVE)  # devices kept training (0 = clients_per_round)
    buffer_size: int = _f(0, NON_NEGATIVE)  # arrivals per server update (0 = clients_per_round)
    # Weight s(tau) of an update tau versions stale: 1; (1 + tau)^-a; hinge: 1 if tau <= b,
    # else 1 / (a (tau - b) + 1) (FedAsync, Xie et al. 2019).
    staleness: Literal["constant", "polynomial", "hinge"] = "constant"
    staleness_a: float = _f(0.5, NON_NEGATIVE)
    staleness_b: float = _f(4.0, NON_NEGATIVE)
    max_staleness: int = _f(-1, (lambda v: v >= -1, "must be >= -1"))  # drop beyond (-1 = none)
    server_lr: float = _f(1.0, POSITIVE)  # w <- w + server_lr * (weighted mean of the buffer)


@dataclass(frozen=True)
class EvalConfig:
    every: int = _f(10, POSITIVE)  # rounds between evaluations of every device (and at the end)
    batch_size: int = _f(256, POSITIVE)  # samples per forward pass (256 is cache-friendly on CPU)
    # The losses' log-softmax over a (classes, samples) copy of each batch's logits instead
    # of torch's cross_entropy over (samples, classes): the same function, several times
    # faster on a CPU for a few classes (its kernel is vectorised across samples), the
    # same losses within a few ulps, not to the bit. For runs whose passes over the
    # population dominate (simfl/train/evaluate.py).
    class_major: bool = False


# --- population (devices, availability, network) ---
# Sources of the defaults are in simfl/population/ (availability.py, compute.py, network.py).

UNIT_INTERVAL: Check = (lambda v: 0 <= v <= 1, "must be in [0, 1]")


@dataclass(frozen=True)
class Region:
    name: str = "utc"
    utc_offset_h: float = _f(0.0, (lambda v: -12 <= v <= 14, "must be in [-12, 14]"))
    # relative share of devices (normalised over the regions)
    share: float = _f(1.0, POSITIVE_BOUNDED)
    # Access bandwidth (down and up) relative to [population.network]'s medians: mobile
    # speeds differ several-fold between countries.
    link_scale: float = _f(1.0, POSITIVE)


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
RANK_CORRELATION: Check = (lambda v: -1 <= v <= 1, "must be in [-1, 1]")


@dataclass(frozen=True)
class HabitsConfig:
    """Per-device habits of the ``habits`` availability mode (docs/design.md §3)."""

    propensity_logit_sd: float = _f(HABIT_PROPENSITY_LOGIT_SD,
                                    (lambda v: 0 <= v <= 5, "must be in [0, 5]"))
    phase_sd_h: float = _f(HABIT_PHASE_SD_H, (lambda v: 0 <= v <= 12, "must be in [0, 12]"))
    session_log_sd: float = _f(HABIT_SESSION_LOG_SD, (lambda v: 0 <= v <= 3, "must be in [0, 3]"))
    # Spearman rank correlation, within each region, of the device's propensity (phase) with
    # population.covariate (independent of population.region_assignment)
    covariate_correlation: float = _f(0.0, RANK_CORRELATION)
    phase_correlation: float = _f(0.0, RANK_CORRELATION)
    # Heavy-tailed components (simfl.population.habits; each off at its default):
    # device classes, a mixture of normals for the logit shift: class c has share
    # class_shares[c] and mean class_logit_means[c], each the spread propensity_logit_sd;
    class_shares: tuple[float, ...] = _f((1.0,), (lambda v: len(v) >= 1 and all(
        0 < x <= 1 for x in v) and abs(sum(v) - 1) < 1e-9, "must be shares in (0, 1] "
        "summing to 1"))
    class_logit_means: tuple[float, ...] = _f((0.0,), (lambda v: len(v) >= 1 and all(
        -10 <= x <= 10 for x in v), "must be numbers in [-10, 10]"))
    # a weekly rhythm: the online odds times exp(weekend_logit_shift) on the device's
    # Saturday and Sunday (one value, or one per region in [[population.regions]]' order);
    weekend_logit_shift: tuple[float, ...] = _f((0.0,), (lambda v: len(v) >= 1 and all(
        -5 <= x <= 5 for x in v), "must be numbers in [-5, 5]"))
    # bursts: a hidden engaged/dormant chain per device (0 h: none); online only while
    # engaged, engaged a long-run share engaged_share (raised where a device's own
    # online probability needs it);
    dormant_mean_h: float = _f(0.0, (lambda v: 0 <= v <= 24 * 365, "must be in [0, 8760]"))
    engaged_share: float = _f(1.0, (lambda v: 0 < v <= 1, "must be in (0, 1]"))
    # nightly charging: each night with probability charge_prob the device is online
    # throughout a window of charge_hours from its own local start hour, drawn
    # N(charge_start_h, charge_start_sd_h^2) (rank-correlated with the covariate within
    # each region by charge_correlation). Each component is off at its default; the
    # values that shape one once on (22:00, 1.5 h, 6 h, engaged_share) are assumed, not
    # read from a published table (docs/populations.md says which population uses what).
    charge_prob: float = _f(0.0, UNIT_INTERVAL)
    charge_start_h: float = _f(22.0, (lambda v: 0 <= v < 24, "must be in [0, 24)"))
    charge_start_sd_h: float = _f(1.5, (lambda v: 0 <= v <= 12, "must be in [0, 12]"))
    charge_hours: float = _f(6.0, (lambda v: 0 < v < 24, "must be in (0, 24)"))
    charge_correlation: float = _f(0.0, RANK_CORRELATION)


@dataclass(frozen=True)
class AvailabilityConfig:
    # always, diurnal, habits (diurnal, each device with its own propensity, phase and
    # session length), trace, or a plug-in (simfl.plugins)
    mode: str = "always"
    online_prob_by_hour: tuple[float, ...] = _f(
        DEFAULT_ONLINE_PROB_BY_HOUR,
        (lambda v: len(v) == 24 and all(0 < p < 1 for p in v), "must be 24 numbers in (0, 1)"),
    )
    session_mean_s: float = _f(3600.0, POSITIVE)  # mean length of an online session
    horizon_s: float = _f(7 * 86400.0, POSITIVE)  # diurnal: simulated time precomputed
    log_intervals: bool = False  # also write availability_intervals.parquet
    trace_path: str = ""  # trace: Parquet/CSV with columns client_idx, t_on_s, t_off_s
    # trace: the trace device each training device replays (simfl.population.trace_map):
    # identity (device k replays trace device k; the counts must agree), modulo (k mod the
    # trace's devices, as FedScale) or sample (distinct ones drawn at random; needs as many)
    trace_mapping: Literal["identity", "modulo", "sample"] = "identity"
    # trace: Spearman correlation, within each region, of the replayed trace device's online
    # share with the device's population.covariate (0: the mapping's own pairing)
    trace_covariate_correlation: float = _f(0.0, RANK_CORRELATION)
    habits: HabitsConfig = _f(HabitsConfig)
    params: dict[str, Any] = _params()


@dataclass(frozen=True)
class ComputeConfig:
    # auto: phone benchmark scores from $SIMFL_DATA_DIR/devices if present, else lognormal
    speed_source: Literal["auto", "benchmark", "lognormal"] = "auto"
    score: Literal["cpu_float", "ai_score"] = "cpu_float"
    phone_mix: Literal["deployment", "benchmark_list"] = "deployment"
    speed_log_sigma: float = _f(0.93, LOG_SIGMA)  # lognormal fallback: spread of speeds
    calibration_batch_size: int = _f(16, POSITIVE)  # batch size of the LeNet time per sample
    train_flops_per_sample: float = _f(0.0, NON_NEGATIVE)  # 0 = from the model's name


@dataclass(frozen=True)
class NetworkConfig:
    down_median_bytes_per_s: float = _f(4.5e6, POSITIVE)
    down_log_sigma: float = _f(0.8, LOG_SIGMA)
    up_median_bytes_per_s: float = _f(1.4e6, POSITIVE)
    up_log_sigma: float = _f(0.8, LOG_SIGMA)
    latency_median_s: float = _f(0.040, NON_NEGATIVE)
    latency_log_sigma: float = _f(0.5, LOG_SIGMA)
    region_capacity_bytes_per_s: float = _f(1.25e9, POSITIVE)  # each direction
    region_latency_s: float = _f(0.010, NON_NEGATIVE)
    server_capacity_bytes_per_s: float = _f(1.25e9, POSITIVE)  # each direction
    server_latency_s: float = _f(0.005, NON_NEGATIVE)


@dataclass(frozen=True)
class PopulationConfig:
    regions: tuple[Region, ...] = _f(
        DEFAULT_REGIONS,
        (lambda v: len(v) > 0 and len({r.name for r in v}) == len(v),
         "must be a non-empty array of regions with distinct names"),
    )
    region_assignment: Literal["random", "covariate"] = "random"
    covariate: Literal["digit_share", "label_share", "writer_group", "num_samples"] = \
        "digit_share"
    covariate_strength: float = _f(1.0, UNIT_INTERVAL)  # 0 = random, 1 = sorted by covariate
    failure_rate_per_h: float = _f(0.0, NON_NEGATIVE)  # hazard per hour of participation
    availability: AvailabilityConfig = _f(AvailabilityConfig)
    compute: ComputeConfig = _f(ComputeConfig)
    network: NetworkConfig = _f(NetworkConfig)


@dataclass(frozen=True)
class RunConfig:
    # Rounds between checkpoints (0 = only when stopped by SIGTERM/SIGINT); a killed run
    # resumes from its last one (python -m simfl resume RUN_DIR) and loses at most these.
    checkpoint_every: int = _f(20, NON_NEGATIVE)
    # The run fails (status "failed", exit 1) once idle_share of the last idle_window rounds
    # aggregated no update or had a non-finite threshold (0 = never; simfl/sim/health.py).
    idle_window: int = _f(10, NON_NEGATIVE)
    idle_share: float = _f(1.0, (lambda v: 0 < v <= 1, "must be in (0, 1]"))


@dataclass(frozen=True)
class Scenario:
    # Defaults to the file's stem; names the results folder (results/<name>), so a name
    # is one path component: no separators, not '.' or '..'.
    name: str = _f("", (lambda v: is_plain_name(v), "must be a plain name (letters, digits, "
                        "'.', '_', '-', '=', ',', '+'; no path separators, not '.' or '..')"))
    seed: int = _f(0, NON_NEGATIVE)
    data: DataConfig = _f(DataConfig)
    model: ModelConfig = _f(ModelConfig)
    train: TrainConfig = _f(TrainConfig)
    aggregator: AggregatorConfig = _f(AggregatorConfig)
    estimator: EstimatorConfig = _f(EstimatorConfig)
    server: ServerConfig = _f(ServerConfig)
    eval: EvalConfig = _f(EvalConfig)
    population: PopulationConfig = _f(PopulationConfig)
    run: RunConfig = _f(RunConfig)


def load_scenario(path: str | Path,
                  overrides: Sequence[str] | Mapping[str, Any] = ()) -> Scenario:
    """Read and validate a scenario file; raise InputError naming the file and key.

    ``overrides`` are applied on top of the file: ``"dotted.key=TOML value"`` strings,
    e.g. ``"server.num_rounds=200"`` or ``'aggregator.name="fedavg"'`` (the command
    line's ``--set``), or a mapping of dotted keys to values (the Python API's).
    """
    path = Path(path)
    try:
        table = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: scenario file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read scenario file ({e})") from None
    except ValueError as e:  # TOMLDecodeError, or an integer of over 4300 digits
        raise InputError(f"{path}: invalid TOML: {e}") from None
    except RecursionError:
        raise InputError(f"{path}: invalid TOML: nested too deeply") from None
    if isinstance(overrides, Mapping):
        for key, value in overrides.items():
            set_key(table, key, value, str(path))
    else:
        for override in overrides:
            _apply_override(table, override, str(path))
    scenario = from_dict(table, source=str(path))
    if not scenario.name:
        if not is_plain_name(path.stem):
            raise InputError(f"{path}: the file name is no plain run name; set 'name'")
        scenario = dataclasses.replace(scenario, name=path.stem)
    return scenario


def _apply_override(table: dict[str, Any], override: str, source: str) -> None:
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise InputError(f"{source}: override '{override}' must look like key=value")
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except ValueError:  # TOMLDecodeError, or an integer of over 4300 digits
        value = text.strip()  # a bare word is taken as a string: aggregator.name=fedavg
    except RecursionError:
        raise InputError(f"{source}: override of '{key}': nested too deeply") from None
    set_key(table, key, value, source)


def set_key(table: dict[str, Any], key: str, value: Any, source: str) -> None:
    """Set dotted ``key`` (e.g. ``server.num_rounds``) of a scenario table to ``value``."""
    *parents, leaf = key.strip().split(".")
    for part in parents:
        table = table.setdefault(part, {})
        if not isinstance(table, dict):
            raise InputError(f"{source}: override of '{key}': '{part}' is not a table")
    table[leaf] = value


def from_dict(table: dict[str, Any], source: str = "<scenario>") -> Scenario:
    """Build a validated Scenario from a parsed TOML table."""
    scenario: Scenario = build_config(Scenario, table, "", source)
    _check_relations(scenario, source)
    return scenario


def from_manifest(manifest: Mapping[str, Any], source: str) -> Scenario:
    """The scenario a run's manifest.json records; the modules of its plug-ins that were
    registered by decorator are imported first, so that their names are known again."""
    plugins.import_recorded(manifest.get("plugins") or {}, source)
    return from_dict(manifest["scenario"], source=source)


SYNC_ONLY = ("over_selection", "deadline_s", "round_interval_s", "min_online")
ASYNC_ONLY = ("concurrency", "buffer_size", "staleness", "staleness_a", "staleness_b",
              "max_staleness", "server_lr")
def unused_server_keys(scenario: Scenario) -> tuple[str, ...]:
    """The other server mode's keys set away from their defaults: a sync scenario
    switched to async (``--set server.mode=async``) keeps its deadline, pacing and
    over-selection, which the async server does not read (and the reverse). They are
    not errors, so that ``server.mode`` alone switches a scenario; a run says, in one
    note, which it does not use."""
    server, default = scenario.server, ServerConfig()
    other = ASYNC_ONLY if server.mode == "sync" else SYNC_ONLY
    return tuple(f"server.{key}" for key in other
                 if getattr(server, key) != getattr(default, key))


def _check_server(scenario: Scenario, source: str) -> None:
    """What async mode supports (the other mode's keys: :func:`unused_server_keys`)."""
    server, default = scenario.server, ServerConfig()
    mode = server.mode
    if mode == "sync":
        return
    if server.staleness == "constant" and server.staleness_a != default.staleness_a:
        raise InputError(f"{source}: 'server.staleness_a' has no meaning with "
                         f"'server.staleness' = 'constant'")
    if server.staleness != "hinge" and server.staleness_b != default.staleness_b:
        raise InputError(f"{source}: 'server.staleness_b' has no meaning with "
                         f"'server.staleness' = {server.staleness!r} (hinge only)")
    rule = plugins.AGGREGATORS.lookup(scenario.aggregator.name, "aggregator.name", source)
    if rule.async_refused:
        raise InputError(f"{source}: 'aggregator.name' = {rule.name!r} does not work with "
                         f"'server.mode' = 'async': {rule.async_refused}")
    if scenario.aggregator.participation != "none":
        raise InputError(f"{source}: 'aggregator.participation' = "
                         f"{scenario.aggregator.participation!r} does not work with "
                         f"'server.mode' = 'async': {plugins.PARTICIPATION_ASYNC_REFUSED}")
    driver = plugins.ESTIMATORS.lookup(scenario.estimator.name, "estimator.name", source)
    if plugins.filters_by_threshold(scenario.aggregator.name, source) and driver.async_refused:
        able = [p.name for p in plugins.ESTIMATORS.builtins() if not p.async_refused]
        raise InputError(f"{source}: 'estimator.name' = {driver.name!r} "
                         f"{driver.async_refused}; with 'server.mode' = 'async' use one of "
                         f"{able} (others may shadow)")


# The keys of [aggregator] and [estimator] some rule or estimator reads (plugins.py says
# which): one set away from its default when none that reads it runs is an error, as
# for the server modes' keys.
RULE_KEYS = ("theta", "mu", "q", "tilt", "lambda_step", "participation", "fedau_cutoff")
ESTIMATOR_KEYS = ("secure_mm", "secure_bisection", "tracking", "ipw", "poststrat_history",
                  "shifted", "model_assisted", "noise_std", "rake", "ipw_shrunk",
                  "poststrat_shrunk", "checkin_share", "checkin_memory_days")


def _check_meaning(scenario: Scenario, source: str) -> None:
    """Hyperparameters of a rule or estimator that the run does not use (set away from
    their defaults) are errors naming the key and what is chosen instead.

    The comparison is with the default, not with what the file spells out, so that
    ``--set aggregator.name=fedavg`` on a Δ-FL scenario at the default θ still loads.
    """
    agg, default = scenario.aggregator, AggregatorConfig()
    rule = plugins.AGGREGATORS.lookup(agg.name, "aggregator.name", source)
    for key in RULE_KEYS:
        if key not in rule.keys and getattr(agg, key) != getattr(default, key):
            raise InputError(f"{source}: 'aggregator.{key}' = {getattr(agg, key)!r} has no "
                             f"meaning with 'aggregator.name' = {agg.name!r}")
    if agg.participation != "fedau" and agg.fedau_cutoff != default.fedau_cutoff:
        raise InputError(f"{source}: 'aggregator.fedau_cutoff' = {agg.fedau_cutoff!r} has no "
                         f"meaning with 'aggregator.participation' = {agg.participation!r}")
    est, est_default = scenario.estimator, EstimatorConfig()
    names = (est.name, *est.shadow)
    used = [plugins.ESTIMATORS.lookup(name, "estimator.name", source)  # shifted's base too
            for name in (*names, *([est.shifted.base] if "shifted" in names else []))]
    for key in ESTIMATOR_KEYS:
        if (all(key not in (*p.keys, *p.reads) for p in used)
                and getattr(est, key) != getattr(est_default, key)):
            raise InputError(f"{source}: 'estimator.{key}' is set but no estimator that "
                             f"reads it ({', '.join(plugins.ESTIMATORS.readers(key))}) is "
                             f"'estimator.name' or in 'estimator.shadow'")
    availability = scenario.population.availability
    mode = plugins.AVAILABILITY.lookup(availability.mode, "population.availability.mode", source)
    if "habits" not in mode.reads and availability.habits != HabitsConfig():
        changed = next(f.name for f in dataclasses.fields(HabitsConfig)
                       if getattr(availability.habits, f.name) != getattr(HabitsConfig(), f.name))
        raise InputError(f"{source}: 'population.availability.habits.{changed}' has no meaning "
                         f"with 'population.availability.mode' = {availability.mode!r} "
                         f"(only 'habits' reads it)")
    default_availability = AvailabilityConfig()
    for key in ("trace_mapping", "trace_covariate_correlation"):
        if (availability.mode != "trace"
                and getattr(availability, key) != getattr(default_availability, key)):
            raise InputError(f"{source}: 'population.availability.{key}' has no meaning with "
                             f"'population.availability.mode' = {availability.mode!r} (only "
                             f"'trace' reads it)")
    habits, regions = availability.habits, scenario.population.regions
    if len(habits.class_logit_means) != len(habits.class_shares):
        raise InputError(f"{source}: 'population.availability.habits.class_logit_means' has "
                         f"{len(habits.class_logit_means)} values, 'class_shares' "
                         f"{len(habits.class_shares)}: one per device class")
    if len(habits.weekend_logit_shift) not in (1, len(regions)):
        raise InputError(f"{source}: 'population.availability.habits.weekend_logit_shift' has "
                         f"{len(habits.weekend_logit_shift)} values: one, or one per region "
                         f"({len(regions)})")
    if est.bias_every == 0 and est.decomposition_draws != est_default.decomposition_draws:
        raise InputError(f"{source}: 'estimator.decomposition_draws' has no meaning with "
                         f"'estimator.bias_every' = 0 (no bias rounds)")


def plugins_of(scenario: Scenario, source: str = "<scenario>") -> dict[str, plugins.Plugin]:
    """The plug-in each name of the scenario stands for, by its key (``estimator.shadow[i]``
    for a shadow estimator); InputError for a name that none is."""
    est = scenario.estimator
    named = {"data.dataset": scenario.data.dataset, "model.name": scenario.model.name,
             "aggregator.name": scenario.aggregator.name, "estimator.name": est.name,
             **{f"estimator.shadow[{i}]": name for i, name in enumerate(est.shadow)},
             "population.availability.mode": scenario.population.availability.mode}
    return {key: plugins.KEYS[key.partition("[")[0]].lookup(name, key, source)
            for key, name in named.items()}


def _check_plugins(scenario: Scenario, source: str) -> None:
    """Every name is a plug-in's; each key of a section's params table is a
    hyper-parameter of one it uses, and each hyper-parameter without a default is set."""
    found = plugins_of(scenario, source)
    for where, section in (("data", scenario.data), ("model", scenario.model),
                           ("aggregator", scenario.aggregator),
                           ("estimator", scenario.estimator),
                           ("population.availability", scenario.population.availability)):
        used = [p for key, p in found.items() if key.startswith(where + ".")]
        fields = {f.name for f in dataclasses.fields(section)} - {"params"}
        takes = sorted({k for p in used for k in p.keys} - fields)
        for key in section.params:
            if key not in takes:
                near = difflib.get_close_matches(key, takes, n=1)
                hint = f" (did you mean '{where}.params.{near[0]}'?)" if near else ""
                raise InputError(f"{source}: '{where}.params.{key}' is no hyper-parameter of "
                                 f"{[p.name for p in used]} (they take {takes}){hint}")
        for p in used:
            for key in set(p.required) - fields - set(section.params):
                raise InputError(f"{source}: {p.name!r} needs '{where}.params.{key}'")


# The availability modes whose true online rates are known (the oracle ipw_known's; a
# trace's: its own empirical rates, simfl.population.trace_map.TraceRates).
MODELLED_RATES = ("always", "diurnal", "habits", "trace")


def _check_relations(scenario: Scenario, source: str) -> None:
    """Checks that involve more than one key."""
    _check_plugins(scenario, source)
    _check_server(scenario, source)
    bisection = scenario.estimator.secure_bisection
    if bisection.high <= bisection.low:
        raise InputError(f"{source}: 'estimator.secure_bisection.high' = {bisection.high!r} "
                         f"must be > 'estimator.secure_bisection.low' = {bisection.low!r}")
    sums = math.log2((bisection.high - bisection.low) / bisection.tol)
    if sums > MAX_BISECTION_SUMS:
        raise InputError(f"{source}: 'estimator.secure_bisection.tol' = {bisection.tol!r} would "
                         f"take {sums:.3g} secure sums to narrow [low, high] to it (limit "
                         f"{MAX_BISECTION_SUMS}): raise tol")
    mode = scenario.population.availability.mode
    if ("ipw_known" in (scenario.estimator.name, *scenario.estimator.shadow)
            and mode not in MODELLED_RATES):
        raise InputError(f"{source}: estimator 'ipw_known' needs the online rates of the "
                         f"availability model; 'population.availability.mode' = {mode!r} "
                         f"has none")
    data = scenario.data
    if data.pixel_scaling == "authors" and (data.standardise
                                            or data.dataset not in ("femnist", "leaf")):
        raise InputError(f"{source}: 'data.pixel_scaling' = 'authors' rescales FEMNIST images "
                         f"itself: it needs 'data.dataset' femnist or leaf (got "
                         f"{data.dataset!r}) and 'data.standardise' = false")
    if data.sources and data.dataset != "femnist":
        raise InputError(f"{source}: 'data.sources' names copies in the FEMNIST .npz's "
                         f"'source_names': it needs 'data.dataset' = 'femnist' (got "
                         f"{data.dataset!r})")
    model = scenario.model
    if model.name != "linear" and (not model.bias or model.init != "pytorch"):
        raise InputError(f"{source}: 'model.bias' = false and 'model.init' = 'zeros' are for "
                         f"the linear model only (got 'model.name' = {model.name!r})")
    _check_meaning(scenario, source)


def to_dict(scenario: Scenario) -> dict[str, Any]:
    """The resolved scenario as plain data (for manifest.json)."""
    return dataclasses.asdict(scenario)


def flatten(table: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) for every leaf of a nested table (a scenario as plain data)."""
    for key, value in table.items():
        if isinstance(value, dict):
            yield from flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def build_config(cls: type, table: Any, where: str, source: str) -> Any:
    """An instance of the config dataclass ``cls`` from a TOML table: unknown keys, wrong
    types and values outside their checks are InputErrors naming ``where`` + the key. A
    field whose metadata has ``expects`` (what it takes, in words) reports either as
    ``'key' = <the value as written> must be <expects>``."""
    if not isinstance(table, dict):
        raise InputError(f"{source}: [{where.rstrip('.')}] must be a table")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in table:
        if key not in names:
            near = difflib.get_close_matches(key, names, n=1)
            hint = f" (did you mean '{where}{near[0]}'?)" if near else ""
            raise InputError(f"{source}: unknown key '{where}{key}'{hint}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in table:
            continue
        key, expects = f"{where}{f.name}", f.metadata.get("expects")
        try:
            value = _convert(hints[f.name], table[f.name], key, source)
            check = f.metadata.get("check")
            if check is not None and not check[0](value):
                raise InputError(f"{source}: '{key}' = {value!r} {check[1]}")
        except InputError:
            if expects is None:
                raise
            raise InputError(f"{source}: '{key}' = {table[f.name]!r} must be {expects}") from None
        kwargs[f.name] = value
    return cls(**kwargs)


def _convert(hint: Any, value: Any, key: str, source: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return build_config(typing.cast(type, hint), value, f"{key}.", source)
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise InputError(f"{source}: '{key}' = {value!r} must be one of {list(choices)}")
        return value
    if origin is dict:  # a params table: its plug-in's factory checks the values
        if not isinstance(value, dict):
            raise InputError(f"{source}: [{key}] must be a table")
        return dict(value)
    if origin is tuple:
        (item,) = typing.get_args(hint)[:1]
        if not isinstance(value, list):
            raise InputError(f"{source}: '{key}' must be an array")
        return tuple(_convert(item, v, f"{key}[{i}]", source) for i, v in enumerate(value))
    if origin in (types.UnionType, typing.Union):
        raise TypeError(f"scenario field {key}: union types are not supported")
    return _scalar(hint, value, key, source)


def _scalar(hint: Any, value: Any, key: str, source: str) -> Any:
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        str: isinstance(value, str),
    }.get(hint)
    if ok is None:
        raise TypeError(f"scenario field {key}: unsupported type {hint}")
    if not ok:
        raise InputError(
            f"{source}: '{key}' must be {hint.__name__}, got {type(value).__name__} {value!r}"
        )
    if hint is int and not -(2**63) <= value < 2**63:
        raise InputError(f"{source}: '{key}' must be a 64-bit integer")
    if hint is float:
        try:
            value = float(value)
        except OverflowError:  # a TOML integer beyond the float range
            value = math.inf
        if not math.isfinite(value):
            raise InputError(f"{source}: '{key}' must be a finite number")
    return value
