"""Which trace device each data device replays (availability mode ``trace``, docs/design.md §3).

A trace (simfl.population.trace) holds T devices, a run N data devices (its training
clients). ``population.availability.trace_mapping`` pairs them:

- ``identity``: data device k replays trace device k; T must be N (refused otherwise,
  in one line, before the data are loaded where the scenario's keys fix N);
- ``modulo``: data device k replays trace device k mod T, as FedScale gives client c
  the trace entry c mod the trace's length (``ClientManager.register_client`` in
  ``fedscale/cloud/client_manager.py``; its clients count from 1 and its entries are in
  the pickle's order, here from 0 and in the converted trace's);
- ``sample``: the data devices replay distinct trace devices drawn without replacement
  (stream ``population.trace_map``), so a trace of more devices than the data is
  sampled, not cut to its first N; needs T >= N.

**Coupling to the data.** With ``trace_covariate_correlation`` ρ ≠ 0 the trace devices
the mapping gives a region are dealt out again within it, as the habits mode ties its
propensities (simfl.population.habits): a Gaussian copula gives each data device a latent
normal whose Spearman correlation with its ``population.covariate`` within its region is
ρ, and the data device with the k-th largest latent replays the trace device with the
k-th largest online share (ties among shares in random order). The share is a monotone
function of the latent, so its Spearman correlation with the covariate within a region
is the latent's: ρ up to sampling noise, exactly ±1 at ρ = ±1 where the shares differ
(tied shares, such as devices never online, pull it toward 0). ρ = 0 keeps the
mapping's pairing (``sample``'s is random: no correlation).

**What the trace tells of each device**, over its window ``[0, end_s)`` (recorded by
``trace convert``, else up to its latest finite switch time, as ``trace stats`` takes
it): its online share (devices.parquet's propensity), its mean session length (of the
sessions wholly inside the window, as ``trace stats`` counts them; NaN for none), and
its online share by local hour of the day (UTC + the data device's offset), the rates
:class:`TraceRates` gives the ``ipw_known`` estimator. That oracle is the empirical rate
of the very trace the run replays, over the same window, not a model's: no server
knows it; it shows what inverse-probability weights would do with rates known this
well (hours of the day only: a weekly rhythm in the trace is averaged over).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from simfl.errors import InputError
from simfl.population.habits import copula_latent
from simfl.population.trace import read_trace, trace_device_count, trace_metadata
from simfl.scenario import AvailabilityConfig

DAY_S = 86400.0
HOUR_S = 3600.0
_KEY = "population.availability.trace_mapping"


def check_trace_devices(cfg: AvailabilityConfig, num_devices: int,
                        num_trace: int | None = None) -> None:
    """InputError (one line) when the trace cannot be mapped onto ``num_devices`` data
    devices: ``identity`` with another count, ``sample`` with fewer trace devices, or a
    trace with none. ``num_trace``: the trace's device count (default: read from the
    file, its metadata or its client_idx column alone). The trace mode's ``check_devices``
    hook (simfl.plugins.AVAILABILITY)."""
    if not cfg.trace_path:
        return
    t = trace_device_count(cfg.trace_path) if num_trace is None else num_trace
    where = f"{cfg.trace_path} (population.availability.trace_path)"
    if t == 0:
        raise InputError(f"{where}: the trace holds no online interval")
    if cfg.trace_mapping == "identity" and t != num_devices:
        raise InputError(
            f"{where}: the trace has {t} devices and the data {num_devices} training devices; "
            f"{_KEY} = 'identity' needs as many: set it to 'modulo' (device k replays trace "
            f"device k mod {t}) or 'sample' (distinct trace devices drawn at random; needs "
            f"at least {num_devices})")
    if cfg.trace_mapping == "sample" and t < num_devices:
        raise InputError(f"{where}: {_KEY} = 'sample' draws distinct trace devices for the "
                         f"{num_devices} training devices but the trace has {t}: use 'modulo'")


@dataclass(frozen=True)
class TraceDevices:
    """A trace's T devices: their intervals (CSR, sorted, disjoint) and what they tell."""

    path: str
    offsets: np.ndarray  # (T + 1,): device j's intervals are rows offsets[j]:offsets[j + 1]
    t_on_s: np.ndarray
    t_off_s: np.ndarray
    end_s: float  # the window [0, end_s)
    share: np.ndarray  # (T,) online share over the window
    session_mean_s: np.ndarray  # (T,) mean of the sessions wholly inside it (NaN: none)

    @property
    def num_devices(self) -> int:
        return int(self.offsets.shape[0] - 1)


def load_trace_devices(path: str) -> TraceDevices:
    """Read a trace (checked by read_trace, client_idx bounded by its recorded count)
    and its devices' online shares and mean sessions over its window."""
    meta = trace_metadata(path)
    device, on, off = read_trace(path, meta.num_clients)
    num = meta.num_clients if meta.num_clients is not None else int(device.max(initial=-1)) + 1
    end = meta.end_s if meta.end_s is not None else _latest_switch(on, off)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(device, minlength=num))])
    cut_on, cut_off = np.clip(on, 0.0, end), np.clip(off, 0.0, end)
    share = np.bincount(device, weights=cut_off - cut_on, minlength=num) / end
    whole = (on > 0) & (off < end)  # sessions seen from start to end
    sessions = np.bincount(device[whole], minlength=num)
    total = np.bincount(device[whole], weights=(off - on)[whole], minlength=num)
    session_mean = np.divide(total, sessions, out=np.full(num, math.nan), where=sessions > 0)
    return TraceDevices(str(path), offsets.astype(np.int64), on, off, end, share, session_mean)


def _latest_switch(on: np.ndarray, off: np.ndarray) -> float:
    """The latest finite switch time (one day where there is none > 0)."""
    times = np.concatenate([on, off])
    latest = times[np.isfinite(times)].max(initial=0.0)
    return float(latest) if latest > 0 else DAY_S


def assign(trace: TraceDevices, cfg: AvailabilityConfig, region_idx: np.ndarray,
           covariate: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """(N,) the trace device each data device replays (module docstring), checked first
    by :func:`check_trace_devices`; ``rng``: the stream ``population.trace_map``."""
    n, t = int(region_idx.shape[0]), trace.num_devices
    check_trace_devices(cfg, n, t)
    if cfg.trace_mapping == "sample":
        given = rng.choice(t, size=n, replace=False)
    else:  # identity (t == n) or modulo
        given = np.arange(n, dtype=np.int64) % t
    rho = cfg.trace_covariate_correlation
    if rho == 0:
        return given
    if covariate is None:
        raise InputError(f"population.availability.trace_covariate_correlation = {rho!r} "
                         "needs each device's population.covariate, which this population "
                         "has none of")
    latent = copula_latent(region_idx, covariate, rho, rng)
    coupled = np.empty_like(given)
    tie_break = rng.random(n)
    for region in np.unique(region_idx):
        members = np.flatnonzero(region_idx == region)
        ours = given[members]
        by_share = ours[np.lexsort((tie_break[members], -trace.share[ours]))]
        coupled[members[np.argsort(-latent[members], kind="stable")]] = by_share
    return coupled


@dataclass(frozen=True)
class MappedTrace:
    """A trace mapped onto the data devices: the data devices' intervals (CSR, an
    Availability's) and, for devices.parquet and ipw_known, where they come from (the
    trace's own intervals are not kept)."""

    path: str
    mapping: str
    end_s: float  # the trace's window [0, end_s)
    trace_device: np.ndarray  # (N,) the trace device each data device replays
    propensity: np.ndarray  # (N,) its online share over the window
    session_mean_s: np.ndarray  # (N,) its mean session in the trace (NaN: none whole)
    offsets: np.ndarray  # (N + 1,) CSR of the data devices' intervals
    t_on_s: np.ndarray
    t_off_s: np.ndarray

    @property
    def num_never_online(self) -> int:
        """Data devices whose trace device has no online interval."""
        return int(np.count_nonzero(np.diff(self.offsets) == 0))

    def warning(self) -> str | None:
        """One line naming how many data devices are never online, if any are."""
        never = self.num_never_online
        if not never:
            return None
        return (f"warning: {self.path}: {never} of the {self.trace_device.shape[0]} training "
                f"devices are never online (their trace devices have no online interval; "
                f"{_KEY} = {self.mapping!r})")


def map_trace(trace: TraceDevices, trace_device: np.ndarray, mapping: str) -> MappedTrace:
    """The data devices' intervals, each its trace device's (copies where several data
    devices replay one; the trace's own arrays where each replays its own index)."""
    first = trace.offsets[trace_device]
    counts = trace.offsets[trace_device + 1] - first
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    on, off = trace.t_on_s, trace.t_off_s
    if not np.array_equal(trace_device, np.arange(trace.num_devices)):
        # row of the data devices' j-th interval: its trace device's first row + j
        rows = np.repeat(first - offsets[:-1], counts) + np.arange(offsets[-1])
        on, off = on[rows], off[rows]
    return MappedTrace(trace.path, mapping, trace.end_s, trace_device,
                       trace.share[trace_device], trace.session_mean_s[trace_device],
                       offsets, on, off)


def _seconds_in_hour(local_s: np.ndarray, hour: int) -> np.ndarray:
    """Seconds of local hour ``hour`` (every day) in [0, local_s): a cumulative count
    (negative below 0), so F(b) − F(a) is the count in [a, b) for any a <= b."""
    days = np.floor(local_s / DAY_S)
    return days * HOUR_S + np.clip(local_s - days * DAY_S - hour * HOUR_S, 0.0, HOUR_S)


@dataclass(frozen=True)
class TraceRates:
    """Each data device's online share in each local hour of the day over the trace's
    window, ``π_d(h) = online_d(h) / exposure_d(h)``: its seconds online in local hour h
    within [0, end_s) over the window's seconds of that hour on its clock (UTC + its
    offset); 0 for an hour the window does not hold. The ``ipw_known`` oracle for a
    trace (see ProfileRates): the trace's own empirical rates, computed at first use
    (N × 24 floats)."""

    mapped: MappedTrace
    utc_offset_s: np.ndarray  # (N,)

    @cached_property
    def by_hour(self) -> np.ndarray:
        """(N, 24) π_d(h)."""
        m, n, end = self.mapped, self.utc_offset_s.shape[0], self.mapped.end_s
        device = np.repeat(np.arange(n), np.diff(m.offsets))
        shift = self.utc_offset_s[device]
        on, off = np.clip(m.t_on_s, 0.0, end) + shift, np.clip(m.t_off_s, 0.0, end) + shift
        rates = np.zeros((n, 24))
        for hour in range(24):
            online = np.bincount(device, _seconds_in_hour(off, hour)
                                 - _seconds_in_hour(on, hour), minlength=n)
            exposure = (_seconds_in_hour(end + self.utc_offset_s, hour)
                        - _seconds_in_hour(self.utc_offset_s.astype(float), hour))
            np.divide(online, exposure, out=rates[:, hour], where=exposure > 0)
        return rates

    def online_prob(self, device_idx: np.ndarray, t_s: float) -> np.ndarray:
        hour = (np.mod(t_s + self.utc_offset_s[device_idx], DAY_S) // HOUR_S).astype(np.int64)
        return self.by_hour[device_idx, hour]

