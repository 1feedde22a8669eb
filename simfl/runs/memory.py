"""A run's peak memory, estimated from its scenario before anything is allocated.

A scenario whose data or cohort cannot fit would otherwise grow until the kernel kills
the process (and others beside it): :func:`check_memory` refuses it first, as bad
input (exit 2), naming the key that drives the estimate. The estimate is a sum of
terms, each the peak of one part of the run as measured on small sizes (the data
loaders' own terms, beside the code they describe; the model and its cohort; the
Monte-Carlo draws of the bias decomposition). It is compared with the memory this
process may still take: /proc/meminfo's MemAvailable, the cgroup's limit less its
usage and the address-space limit (``ulimit -v``) less the process's size, the
least of them; ``$SIMFL_MEMORY_LIMIT_BYTES`` replaces that figure (tests, or a
machine whose memory simfl reads wrong).
"""

from __future__ import annotations

import math
import os
import resource
from contextlib import suppress
from pathlib import Path

import torch

from simfl.errors import InputError
from simfl.scenario import Scenario

LIMIT_ENV = "SIMFL_MEMORY_LIMIT_BYTES"
# (bytes, the key that drives them as "'key' = value", what they are)
Term = tuple[float, str, str]
# Training copies per cohort member of the model's parameters (parameters, gradient,
# the update and the step's temporaries) and of a minibatch's logits.
PARAM_COPIES = 4
LOGIT_COPIES = 3


def check_memory(scenario: Scenario) -> None:
    """InputError when the run's estimated peak memory exceeds what is available."""
    terms = estimate(scenario)
    need = sum(t[0] for t in terms)
    have, where = available_bytes()
    if need <= have:
        return
    top = max(terms)
    raise InputError(f"{top[1]}: the run would take about {need / 2**30:.3g} GiB of memory, "
                     f"{top[0] / 2**30:.3g} GiB of it for {top[2]}, but {have / 2**30:.3g} GiB "
                     f"is available ({where})")


def estimate(scenario: Scenario) -> list[Term]:
    """The run's peak memory by part: its data as loaded, its model trained over a
    cohort, its Monte-Carlo draws. A data set without an estimate of its own (npz_folder,
    a plug-in: simfl.plugins) adds no data term, nor a model term (its input shape is
    known only once it is loaded)."""
    from simfl.data import MEMORY_TERMS  # the loaders' own estimates

    data_terms = MEMORY_TERMS.get(scenario.data.dataset, lambda cfg: [])
    return [*data_terms(scenario.data), _model_term(scenario), _draws_term(scenario)]


def _model_term(scenario: Scenario) -> Term:
    """The cohort's copies of the model and of a minibatch's logits (built on the meta
    device: no parameter is allocated)."""
    from simfl.data import INPUT_SHAPES
    from simfl.train import build_model

    if scenario.data.dataset not in INPUT_SHAPES:
        return (0.0, "'data.dataset'", "the model")
    shape, classes = INPUT_SHAPES[scenario.data.dataset](scenario.data)
    try:
        with torch.device("meta"):
            model = build_model(scenario.model.name, shape, classes, scenario.model.bias,
                                scenario.model.params)
    except (ValueError, InputError):  # a model for other data (run.check_feasible says which)
        return (0.0, "'model.name'", "the model")
    params = sum(p.numel() for p in model.parameters())
    size = 8 if scenario.train.dtype == "float64" else 4
    cohort = _cohort(scenario)
    per_member = PARAM_COPIES * params + LOGIT_COPIES * scenario.train.batch_size * classes
    evaluation = LOGIT_COPIES * scenario.eval.batch_size * classes
    server = scenario.server
    key = "concurrency" if server.concurrency > server.clients_per_round else "clients_per_round"
    drivers = [f"'server.{key}' = {getattr(server, key)}"]
    if scenario.data.dataset == "synthetic":  # the model's size is the scenario's too
        syn = scenario.data.synthetic
        drivers += [f"'data.synthetic.num_classes' = {syn.num_classes}",
                    f"'data.synthetic.dim' = {syn.dim}"]
    return (size * (cohort * per_member + evaluation), " with ".join(drivers),
            f"a cohort of {cohort} copies of a model of {params} parameters")


def _cohort(scenario: Scenario) -> int:
    """Devices trained at once, at most (no more than the data can have)."""
    server = scenario.server
    asked = max(math.ceil(server.clients_per_round * (1 + server.over_selection)),
                server.concurrency)
    if scenario.data.dataset == "synthetic":
        return min(asked, scenario.data.synthetic.num_clients)
    return asked


def _draws_term(scenario: Scenario) -> Term:
    """The bias decomposition's random cohorts of one pool, held at once
    (simfl.quantile.panel), each a numpy array of the cohort's indices."""
    est = scenario.estimator
    draws = est.decomposition_draws if est.bias_every and scenario.aggregator.name == "deltafl" \
        else 0
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
