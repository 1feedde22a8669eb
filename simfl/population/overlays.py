"""Processes laid over a device's habits process (simfl.population.habits), and the set
operations that lay them: per-device online intervals in CSR layout ``(offsets, t_on_s,
t_off_s)`` as simfl.population.diurnal makes them.

- **Bursts** (``habits.dormant_mean_h``): a hidden engaged/dormant chain per device,
  time-homogeneous with exponential sojourns, dormant spells of mean D and engaged ones
  of mean ``D a / (1 − a)``, so that the device is engaged a long-run share ``a`` of the
  time; it starts at t = 0 from that stationary law, so at *every* t it is engaged with
  probability ``a``. The device is online when it is engaged and its habits process,
  drawn with online probability ``p(u) / a``, is online: the two are independent, so it
  is online with probability exactly ``p(u)`` while its offline gaps are a mixture of
  the habits' short gaps and dormant spells (overdispersed: a hyperexponential tail, as
  the phone usage gaps of Falaki et al., MobiSys 2010, are far from exponential), and
  its sessions come in bursts.
- **Charging windows** (``habits.charge_prob``): each night, independently with
  probability q, the device is plugged in and online throughout a window of W hours
  from its own local start hour c_d. Online = (engaged and habits online) or charging:
  ``P = 1 − (1 − p(u))(1 − q 1[u in its window])``, exact by independence.

A departure from the literature: published traces (FLASH, Yang et al. WWW 2021;
FedScale, Lai et al. ICML 2022) show bursts and nightly charging; these processes are
this project's stylised versions that keep each device's online probability known.
"""

from __future__ import annotations

import numpy as np

from simfl.population.diurnal import DAY_S, HOUR_S, scatter_csr

Intervals = tuple[np.ndarray, np.ndarray, np.ndarray]  # (offsets, t_on_s, t_off_s)
_BLOCK_CELLS = 20_000_000  # devices x nights drawn at a time for the charging windows


def burst_intervals(engaged: np.ndarray, dormant_mean_s: float, horizon_s: float,
                    rng: np.random.Generator) -> Intervals:
    """Each device's engaged spells over [0, horizon_s) (the last may end after it); a
    device with ``engaged`` share 1 is engaged on [0, inf)."""
    n = engaged.shape[0]
    counts = np.zeros(n, dtype=np.int64)
    steady = np.flatnonzero(engaged >= 1)
    counts[steady] = 1
    dev = np.flatnonzero(engaged < 1)
    a = engaged[dev]
    engaged_mean = dormant_mean_s * a / (1 - a)
    t = np.where(rng.random(dev.size) < a, 0.0, rng.exponential(dormant_mean_s, dev.size))
    keep = t < horizon_s
    dev, t, engaged_mean = dev[keep], t[keep], engaged_mean[keep]
    first = (np.concatenate([steady, dev]).astype(np.int64),
             np.concatenate([np.zeros(steady.size), t]),
             np.concatenate([np.full(steady.size, np.inf),
                             t + rng.exponential(engaged_mean)]))
    counts[dev] += 1
    chunks = [first]
    t_off = first[2][steady.size:]
    while dev.size:
        t = t_off + rng.exponential(dormant_mean_s, dev.size)
        keep = (t_off < horizon_s) & (t < horizon_s)
        dev, t, engaged_mean = dev[keep], t[keep], engaged_mean[keep]
        t_off = t + rng.exponential(engaged_mean)
        if dev.size:
            chunks.append((dev, t, t_off))
            counts[dev] += 1
    return scatter_csr(counts, chunks)


def charging_intervals(utc_offset_s: np.ndarray, start_h: np.ndarray, hours: float,
                       prob: float, horizon_s: float, rng: np.random.Generator
                       ) -> Intervals:
    """Each device's charging windows over [0, horizon_s): the window of each local night
    (opening at ``start_h`` local time, ``hours`` long) kept with probability ``prob``,
    one uniform draw per device and night in device order; a window open at t = 0 starts
    there."""
    n = utc_offset_s.shape[0]
    nights = np.arange(-1, int(np.ceil(horizon_s / DAY_S)) + 1)
    base = np.mod(start_h * HOUR_S - utc_offset_s, DAY_S)  # first opening at or after 0
    on_parts, off_parts, counts = [], [], np.zeros(n, dtype=np.int64)
    block = max(1, _BLOCK_CELLS // nights.size)
    for lo in range(0, n, block):
        opens = base[lo:lo + block, None] + nights[None, :] * DAY_S
        closes = opens + hours * HOUR_S
        kept = (rng.random(opens.shape) < prob) & (closes > 0) & (opens < horizon_s)
        counts[lo:lo + block] = kept.sum(axis=1)
        on_parts.append(np.maximum(opens[kept], 0.0))
        off_parts.append(closes[kept])
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return offsets, np.concatenate(on_parts), np.concatenate(off_parts)


def combine(a: Intervals, b: Intervals, need: int) -> Intervals:
    """Per device, the times covered by at least ``need`` of the two interval sets
    (2: intersection, 1: union), touching intervals joined. Each set's intervals of a
    device must not overlap one another."""
    n = a[0].shape[0] - 1
    dev_a = np.repeat(np.arange(n, dtype=np.int64), np.diff(a[0]))
    dev_b = np.repeat(np.arange(n, dtype=np.int64), np.diff(b[0]))
    dev = np.concatenate([dev_a, dev_a, dev_b, dev_b])
    t = np.concatenate([a[1], a[2], b[1], b[2]])
    delta = np.concatenate([np.ones(a[1].size), -np.ones(a[1].size),
                            np.ones(b[1].size), -np.ones(b[1].size)]).astype(np.int64)
    order = np.lexsort((delta, t, dev))  # a switch off before a switch on at one time
    dev, t, delta = dev[order], t[order], delta[order]
    level = np.cumsum(delta)  # each device's switches sum to 0, so it starts from 0
    before = level - delta
    on = t[(before < need) & (level >= need)]
    off = t[(before >= need) & (level < need)]
    d = dev[(before < need) & (level >= need)]
    join = (d[1:] == d[:-1]) & (on[1:] == off[:-1])
    opens = np.concatenate([[True], ~join]) if d.size else np.zeros(0, dtype=bool)
    closes = np.concatenate([~join, [True]]) if d.size else np.zeros(0, dtype=bool)
    d, on, off = d[opens], on[opens], off[closes]
    offsets = np.concatenate([[0], np.cumsum(np.bincount(d, minlength=n))]).astype(np.int64)
    return offsets, on, off
