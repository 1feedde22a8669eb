"""A run's peak memory, estimated from its scenario before anything is allocated.

A scenario whose data, population or cohort cannot fit would otherwise grow until the
kernel kills the process (and others beside it), or until an allocation fails minutes
in: :func:`check_memory` refuses it first, as bad input (exit 2), naming the key that
drives the largest part of the estimate. The estimate is a sum of terms, each the peak
of one part of the run as measured (the data loaders' own terms, beside the code they
describe; the population's devices and availability intervals; the estimators' check-in
records and the checkpoints that serialise them; the passes of the bias oracle and of
the evaluations over every device; the model and its cohort; the Monte-Carlo draws of
the bias decomposition), on top of the libraries the process has loaded and the
working memory every run takes. :data:`RUNTIME_BYTES` and :data:`WORK_BYTES` are
fixed; the per-device and per-interval coefficients come from runs of 10^4 to 10^6
devices (``scenarios/million_synthetic.toml`` and the population_size sweep, whose kept
manifests record their peak RSS: tests/runs/test_memory_guard_scale.py holds the
estimate within a factor of them). ``python -m simfl trace`` and the other commands that
build a population without running it count that alone (:func:`population_only`).

The estimate is compared with the memory this process may still take: /proc/meminfo's
MemAvailable, the cgroup's limit less its usage and the address-space limit (``ulimit
-v``) less the process's size, the least of them, plus what this process already
holds of :data:`RUNTIME_BYTES`; ``$SIMFL_MEMORY_LIMIT_BYTES`` replaces the first figure
(tests, or a machine whose memory simfl reads wrong).
"""

from __future__ import annotations

import math
import os
import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simfl.data.known import KeySizes
from simfl.errors import InputError
from simfl.plugins import AVAILABILITY, DATASETS, Plugin, filters_by_threshold
from simfl.quantile.panel import DAYS_READERS
from simfl.scenario import Scenario

LIMIT_ENV = "SIMFL_MEMORY_LIMIT_BYTES"
_MODE_KEY = "population.availability.mode"
# (bytes, the key that drives them as "'key' = value" or "" for none, what they are)
Term = tuple[float, str, str]
# Training copies per cohort member of the model's parameters (parameters, gradient,
# the update and the step's temporaries) and of a minibatch's logits.
PARAM_COPIES = 4
LOGIT_COPIES = 3
# Resident memory of `python -m simfl` once torch, numpy, polars and pyarrow are loaded
# (VmRSS after importing simfl.runs.run: 350 MiB, Linux, torch 2.13 CPU).
RUNTIME_BYTES = 360 * 2**20
# What every run takes beyond its data, population and model, whatever their size:
# torch's and the allocators' pools from the first passes, polars' and pyarrow's while
# the tables are written in parts and merged. Measured: 65 MiB for 40 devices and 3
# rounds, 630 MiB for scenarios/million_synthetic.toml at 10^4 devices and 100 rounds;
# the largest, so that the estimate stays above the runs of 10^4 devices.
WORK_BYTES = 640 * 2**20
# The population (simfl.population.build) per device (training or unseen test): its table
# (region, speeds, links, failure rate, habits) and the client covariate (measured: 680
# bytes a device at the build's peak before the intervals are drawn, its temporaries
# included, at 3 x 10^5 devices; less is kept).
DEVICE_BYTES = 400
# Per online interval of the availability, as it is drawn: the CSR intervals (t_on,
# t_off), each region's sorted copies for the online counts, the interval's region while
# they are sorted and the draw's temporaries (measured 55 bytes an interval with the
# device table at 3 x 10^5 devices, 1.3 x 10^7 intervals); the run keeps the first two
# pairs, INTERVAL_KEPT_BYTES.
INTERVAL_BYTES = 48
INTERVAL_KEPT_BYTES = 32
# A device's row of a check-in record (simfl.quantile.estimators.CheckIns): its check-ins
# per UTC hour as int32.
CHECKIN_BYTES = 24 * 4
# A checkpoint serialises the learner's state (torch.save pickles each array into a
# buffer that grows by doubling, whose bytes are then copied out): about this many copies
# of the check-in records at once, beside the records themselves (measured: +186 and
# +295 MiB over the rounds' level at 3 x 10^5 devices, records of 0.12 GiB).
CHECKPOINT_COPIES = 3
# Per device of the passes over every device, from their columns: the bias oracle's and
# an evaluation's arrays (losses, errors, counts, owners: about 60 bytes), a pass's rows
# of eval.parquet as they are built (about 150, the device id a string) and, at the
# end, the rows of devices.parquet (training and unseen test devices alike) with the
# habit columns derived for them (about 250).
PASS_BYTES = 500
# Bytes per sample of an evaluation batch beyond its logits: its features as float32 (a
# batch that spans chunks is a joined copy) and its label and owner (int64 each).
EVAL_SAMPLE_BYTES = 16
DAY_S = 86400.0
# What each command builds: a run, or a population alone (trace and its statistics).
_WORK: ContextVar[str] = ContextVar("simfl_memory_work", default="run")


@contextmanager
def population_only() -> Iterator[None]:
    """Within the block :func:`check_memory` counts building the scenario's population
    (its data's devices, the device table, the availability intervals) and not a run:
    for ``python -m simfl trace``, which writes the availability and trains nothing."""
    token = _WORK.set("population")
    try:
        yield
    finally:
        _WORK.reset(token)


def check_memory(scenario: Scenario) -> None:
    """InputError when the estimated peak memory of a run of ``scenario`` (of building its
    population alone, within :func:`population_only`) exceeds what is available."""
    work = _WORK.get()
    terms = estimate(scenario, work)
    need = sum(t[0] for t in terms)
    have, where = available_bytes()
    held = min(resident_bytes(), RUNTIME_BYTES)  # the libraries, loaded already
    if need <= have + held:
        return
    top = max((t for t in terms if t[1]), default=max(terms))
    what = "the run" if work == "run" else "building the population"
    raise InputError(f"{top[1]}: {what} would take about {need / 2**30:.3g} GiB of memory, "
                     f"{top[0] / 2**30:.3g} GiB of it for {top[2]}, but {have / 2**30:.3g} GiB "
                     f"is available ({where}) beside the {held / 2**30:.2g} GiB the process "
                     f"holds")


def estimate(scenario: Scenario, work: str = "run") -> list[Term]:
    """The peak memory of a run of ``scenario`` by part (``work = "population"``: of building
    its population alone): the libraries and what every run takes, its data as loaded,
    its population, its estimators' state and checkpoints, its passes over every device,
    its model trained over a cohort, its Monte-Carlo draws. A data set without an estimate
    of its own (npz_folder, a plug-in: simfl.plugins) adds no data term, nor device
    terms (its device count is known only once it is loaded), nor a model term (nor
    its input shape): the data set's hooks (simfl.plugins.HOOKS) say what is known."""
    data_terms = _dataset_hook(scenario, "memory_terms")  # the loader's own estimate
    terms: list[Term] = [(float(RUNTIME_BYTES), "", "the libraries (torch, numpy, polars)"),
                         *(data_terms(scenario.data) if data_terms else [])]
    drawn = _population_term(scenario, INTERVAL_BYTES)
    if work != "run":
        return [*terms, drawn]
    kept = _population_term(scenario, INTERVAL_KEPT_BYTES)
    rounds = [(float(WORK_BYTES), "", "what every run takes"), *_state_terms(scenario),
              _passes_term(scenario), *_model_terms(scenario), _draws_term(scenario)]
    # the draw's temporaries are freed before the rounds take their memory: they count
    # only as far as the rounds' terms do not cover them
    temporaries = max(drawn[0] - kept[0] - sum(t[0] for t in rounds), 0.0)
    return [*terms, kept, (temporaries, drawn[1], "the availability draw's temporaries "
                           "(beyond what the rounds take later)"), *rounds]


def _dataset_hook(scenario: Scenario, name: str) -> Callable[..., Any] | None:
    return DATASETS.lookup(scenario.data.dataset, "data.dataset").hook(name, "data.dataset")


def key_sizes(scenario: Scenario) -> KeySizes | None:
    """The devices and samples the scenario's data keys fix (its data set's ``sizes``
    hook: synthetic data's); None where only loading it tells."""
    sizes = _dataset_hook(scenario, "sizes")
    return None if sizes is None else sizes(scenario.data)


def devices_from_keys(scenario: Scenario) -> tuple[int, int]:
    """(training devices, all devices) of the scenario's data where its keys say
    (:func:`key_sizes`); (0, 0) where only loading it tells."""
    sizes = key_sizes(scenario)
    return (0, 0) if sizes is None else (sizes.train, sizes.devices)


def _devices_key(scenario: Scenario) -> str:
    sizes = key_sizes(scenario)
    return "'data.dataset'" if sizes is None else sizes.key


def _mode(scenario: Scenario) -> Plugin:
    return AVAILABILITY.lookup(scenario.population.availability.mode, _MODE_KEY)


def intervals_per_device(scenario: Scenario) -> float:
    """A device's expected online intervals over the availability's horizon, its mode's
    ``intervals`` hook (simfl.population.modes: one when always online; in the diurnal
    model its online share over the mean session, plus the session under way at the
    horizon; a trace's rows per device); 0 for a mode without one (unknown)."""
    count = _mode(scenario).hook("intervals", _MODE_KEY)
    if count is None:
        return 0.0
    per_device: float = count(scenario.population.availability, devices_from_keys(scenario)[0])
    return per_device


def _population_term(scenario: Scenario, interval_bytes: float) -> Term:
    """The device tables (the training devices' and the unseen test devices', which have
    no intervals) and the availability intervals at ``interval_bytes`` each: their peak
    as they are drawn (simfl.population.build), or what the run keeps."""
    train, devices = devices_from_keys(scenario)
    per_device = intervals_per_device(scenario)
    intervals = train * per_device
    cfg = scenario.population.availability
    key = _devices_key(scenario) if train else "'data.dataset'"
    if "session_mean_s" in _mode(scenario).reads:  # the modes of sessions
        key += (f" with 'population.availability.session_mean_s' = {cfg.session_mean_s!r} "
                f"over 'population.availability.horizon_s' = {cfg.horizon_s!r}")
    return (DEVICE_BYTES * devices + interval_bytes * intervals, key,
            f"the population of {train} devices (and {devices - train} unseen test devices) "
            f"and its {intervals:.3g} availability intervals")


def _state_terms(scenario: Scenario) -> list[Term]:
    """Δ-FL's estimator panel (simfl.quantile.panel): the check-in record of every
    training device (a second one of earlier days only, for the estimators of
    simfl.quantile.panel.DAYS_READERS, with the online devices of each round of the day
    so far; with ``estimator.checkin_memory_days`` D, each also keeps up to D + 1 days'
    counts apart), and the checkpoints that serialise it."""
    train, _ = devices_from_keys(scenario)
    if not filters_by_threshold(scenario.aggregator.name) or not train:
        return []
    est, server = scenario.estimator, scenario.server
    names = {est.name, *est.shadow}
    days = bool(DAYS_READERS & names)
    copies = 1 + (est.checkin_memory_days + 1 if est.checkin_memory_days else 0)
    cfg = scenario.population.availability
    profile = _mode(scenario).hook("profile", _MODE_KEY)  # its online share where stated
    online = profile(cfg)[0] if profile else float(np.mean(cfg.online_prob_by_hour))
    # rounds of a UTC day: they open at most every round_interval_s (a deadline or a
    # minute of training at the least otherwise)
    round_s = max(server.round_interval_s, server.deadline_s, 60.0)
    rounds_a_day = min(server.num_rounds, DAY_S / round_s)
    held = days * rounds_a_day * online * train * 8
    state = (1 + days) * copies * CHECKIN_BYTES * train + 8 * train + held
    key = f"{_devices_key(scenario)} with 'estimator.shadow' = {list(est.shadow)}"
    if est.checkin_memory_days:
        key += f" and 'estimator.checkin_memory_days' = {est.checkin_memory_days}"
    terms = [(state, key, "the estimators' check-in records of every device")]
    if scenario.run.checkpoint_every:
        terms.append((CHECKPOINT_COPIES * state, key + " and 'run.checkpoint_every' = "
                      f"{scenario.run.checkpoint_every}", "the checkpoints' copies of those "
                      "records"))
    return terms


def _passes_term(scenario: Scenario) -> Term:
    """The passes over every device: the bias oracle's, the evaluations', their rows."""
    _, devices = devices_from_keys(scenario)
    key = _devices_key(scenario) if devices else "'data.dataset'"
    return (PASS_BYTES * devices, key, f"the passes over all {devices} devices (the bias "
            "oracle, the evaluations) and their rows")


def _model_terms(scenario: Scenario) -> list[Term]:
    """The cohort's copies of the model, the logits of its minibatches and those of an
    evaluation batch (the model built on the meta device: no parameter is allocated). A
    minibatch holds at most a client's samples and an evaluation batch at most a pass's
    (where the data's keys bound them), so a batch size beyond those costs nothing more;
    each term names the keys that drive it."""
    from simfl.train import build_model

    input_shape = _dataset_hook(scenario, "input_shape")
    if input_shape is None:
        return [(0.0, "'data.dataset'", "the model")]
    shape, classes = input_shape(scenario.data)
    try:
        with torch.device("meta"):
            model = build_model(scenario.model.name, shape, classes, scenario.model.bias,
                                scenario.model.params)
    except (ValueError, InputError):  # a model for other data (build.check_feasible says which)
        return [(0.0, "'model.name'", "the model")]
    params = sum(p.numel() for p in model.parameters())
    size = 8 if scenario.train.dtype == "float64" else 4
    cohort = _cohort(scenario)
    server = scenario.server
    key = "concurrency" if server.concurrency > server.clients_per_round else "clients_per_round"
    members = f"'server.{key}' = {getattr(server, key)}"
    sizes = key_sizes(scenario)
    shaped = "" if sizes is None else sizes.shape_keys  # the model's size is the keys' too
    most, total = _samples_bounds(scenario)
    train_batch = min(scenario.train.batch_size, most)
    eval_batch = min(scenario.eval.batch_size, total)
    per_sample = size * (LOGIT_COPIES * classes + 2 * math.prod(shape)) + EVAL_SAMPLE_BYTES
    return [*_mifa_terms(scenario, size * params, shaped),
            (size * cohort * PARAM_COPIES * params, members + shaped,
             f"a cohort of {cohort} copies of a model of {params} parameters"),
            (size * cohort * LOGIT_COPIES * train_batch * classes,
             f"'train.batch_size' = {scenario.train.batch_size} with {members}" + shaped,
             f"the logits of the cohort's minibatches of {train_batch:.3g} samples"),
            (eval_batch * per_sample,
             f"'eval.batch_size' = {scenario.eval.batch_size}" + shaped,
             f"an evaluation batch of {eval_batch:.3g} samples and its logits")]


def _mifa_terms(scenario: Scenario, model_bytes: float, shaped: str) -> list[Term]:
    """MIFA's memory, the latest update of every training device (``model_bytes`` each:
    simfl.aggregate.participation), and the checkpoints' copies of it; none where only
    loading the data tells the devices."""
    train, _ = devices_from_keys(scenario)
    if scenario.aggregator.participation != "mifa" or not train:
        return []
    key = f"'aggregator.participation' = 'mifa' with {_devices_key(scenario)}{shaped}"
    state = model_bytes * train
    terms = [(state, key, f"MIFA's latest update of each of {train} devices")]
    if scenario.run.checkpoint_every:
        terms.append((CHECKPOINT_COPIES * state, key + " and 'run.checkpoint_every' = "
                      f"{scenario.run.checkpoint_every}", "the checkpoints' copies of MIFA's "
                      "updates"))
    return terms


def _samples_bounds(scenario: Scenario) -> tuple[float, float]:
    """(the most samples a client can have, the samples of every device) where the data's
    keys say (:func:`key_sizes`; synthetic data: LEAF's cap, the expected count); inf
    where they do not."""
    sizes = key_sizes(scenario)
    return (math.inf, math.inf) if sizes is None else (sizes.most_samples, sizes.total_samples)


def _cohort(scenario: Scenario) -> int:
    """Devices trained at once, at most (no more than the data can have)."""
    server = scenario.server
    asked = max(math.ceil(server.clients_per_round * (1 + server.over_selection)),
                server.concurrency)
    sizes = key_sizes(scenario)
    return asked if sizes is None else min(asked, sizes.clients)


def _draws_term(scenario: Scenario) -> Term:
    """The bias decomposition's random cohorts of one pool, held at once
    (simfl.quantile.panel), each a numpy array of the cohort's indices."""
    est = scenario.estimator
    draws = (est.decomposition_draws
             if est.bias_every and filters_by_threshold(scenario.aggregator.name) else 0)
    return (draws * (8 * _cohort(scenario) + 112),
            f"'estimator.decomposition_draws' = {est.decomposition_draws}",
            "the bias decomposition's random cohorts")



def available_bytes() -> tuple[float, str]:
    """(bytes this process may still allocate, where that figure comes from)."""
    if os.environ.get(LIMIT_ENV):
        try:
            return float(os.environ[LIMIT_ENV]), f"${LIMIT_ENV}"
        except ValueError:
            raise InputError(f"${LIMIT_ENV} = {os.environ[LIMIT_ENV]!r} must be a number of "
                             "bytes") from None
    found = [(b, w) for b, w in (_meminfo(), _cgroup(), _address_space()) if b is not None]
    if not found:
        return math.inf, "unknown"
    return min(found)


def _meminfo() -> tuple[float | None, str]:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024, "MemAvailable"
    except OSError:
        pass
    return None, ""


def _cgroup() -> tuple[float | None, str]:
    """The cgroup's memory limit less its usage (cgroup v2, then v1); None: no limit."""
    for limit, usage in (("memory.max", "memory.current"),
                         ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        try:
            text = Path("/sys/fs/cgroup", limit).read_text().strip()
            if text != "max" and int(text) < 2**60:
                used = int(Path("/sys/fs/cgroup", usage).read_text())
                return float(int(text) - used), "the cgroup's memory limit"
        except (OSError, ValueError):
            continue
    return None, ""


def _address_space() -> tuple[float | None, str]:
    """The address-space limit (``ulimit -v``) less what the process maps already."""
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        return None, ""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return float(limit - int(line.split()[1]) * 1024), "ulimit -v"
    except OSError:
        pass
    return float(limit), "ulimit -v"


def resident_bytes() -> float:
    """This process's resident memory now (VmRSS; 0 where /proc is not there)."""
    with suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return float(line.split()[1]) * 1024
    return 0.0


def reset_peak() -> None:
    """Start this process's peak resident memory afresh (Linux's clear_refs "5"), so that
    :func:`peak_bytes` is this run's, not an earlier run's of the same process (a
    sequential sweep). Where the kernel offers no reset, the peak stays the process's."""
    with suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def peak_bytes() -> int:
    """This process's peak resident memory since :func:`reset_peak` (VmHWM), or since it
    started where /proc is not there (getrusage's ru_maxrss)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
