"""Nightly charging windows read from each device's long sessions (``trace fit``'s
charging component, simfl.population.fit; docs/design.md §3).

Under the model (simfl.population.overlays) a device with a window on a night is online
throughout ``[c_d, c_d + W)`` of its local clock whatever its habits, so that night it has
one session that holds the window: it opens at c_d unless the habits process is online
then (earlier) and closes at c_d + W unless it is online then (later). The habits' own
sessions are exponential, of mean L_d: one lasts ℓ or more with probability e^{−ℓ/L_d}.

- **Long sessions**: a device's sessions wholly inside the window (``0 < t_on``,
  ``t_off < T``) of length ``>= ℓ_d = max(1 h, L̂_d ln(n_d / 0.1))``, L̂_d its median
  session length / ln 2 (an exponential's mean from its median, which its few windows
  hardly move) and n_d its sessions: its habits sessions that long are expected 0.1
  times in the window.
- **A device's window**: the local time-of-day spans of its long sessions counted on a
  5-minute circular grid (the cells each covers whole); ``K_d`` the largest count; the
  K_d sessions over that cell have ``[max start, min end] = [ĉ_d, ĉ_d + Ŵ_d]`` in
  common, exactly the window as soon as one of them opened and one closed with the
  habits process offline (where that span is short of ℓ_d and K_d >= 3, the one session
  whose leaving out lengthens it most is left out: a long habits session overlapping the
  window). It is **kept** when ``K_d >= 2`` and ``Ŵ_d >= ℓ_d``.
- **W**: the median Ŵ_d of the kept windows (the model's W is every device's; a device
  online at both ends of each of its windows reads long, one whose long habits session
  overlaps the window short: the median stands while those are under half). Then the
  windows are read again with each L̂_d from the sessions shorter than W (inverting the
  median of an exponential cut at W, ``L ln(2 / (1 + e^{−W/L}))``), so that a device with
  few sessions, several of them windows, is not taken for one with long sessions.
- **c̄ and s_c**: the start hours c ~ N(c̄, s²) wrapped onto the day have
  ``E e^{iωc} = e^{iωc̄ − ω²s²/2}`` (ω = 2π / 24 h), so with R the kept devices' mean of
  ``e^{iωĉ_d}``, ``c̄ = arg R / ω`` and ``s = √(−2 ln |R|) / ω`` (the wrapped normal's
  moments; ĉ_d is exact in the model, so no noise is taken off).
- **q**: a device's nights with a window are Binomial(J_d, q) over the J_d nights whose
  window lies inside the observation window (from ĉ_d, else c̄), and only counts of 2
  or more are read, so q maximises ``Σ_kept log Bin(K_d; J_d, q) + Σ_others log P(K <=
  1; J_d, q)`` over the devices that can count theirs (ℓ_d < W; which those are does not
  depend on their windows).
- **Found** when, in the first reading, windows are kept on at least ``MIN_KEPT_SHARE``
  = 5 % of the devices with ℓ_d < Ŵ, and q̂ >= ``MIN_CHARGE_PROB`` = 0.02: under the
  habits model alone (1,500 devices over 14 days, sessions of 1 h and ½ h) the kept
  share stayed at or below 1 %.

What the rest of the fit then sets aside (:class:`Charging`), on each device whose cut
``min(ℓ_d, W)`` is at least 2 of its L̂_d (``readable``): every session at least the cut
long, wholly, but of a session that holds a kept window only the window. Its habits
sessions that long go with them: an exponential's share ``f = (1 + x) e^{−x}`` of its
online time (x = cut / L̂_d), taken back by :func:`restored`; its session lengths are
fitted without them, its mean divided by that of an exponential cut at the cut,
``1 − x e^{−x} / (1 − e^{−x})``. A device whose sessions are longer keeps its windows
(they read as its sessions). A departure: real charging windows vary in length and hour
from night to night; the rules above take the common part of a device's nights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.stats import binom

from simfl.population.diurnal import DAY_S, HOUR_S
from simfl.population.fit_moments import DeviceShares

LONG_EXPECTED = 0.1  # a device's habits sessions expected as long as ℓ_d, in the window
MIN_LONG_S = HOUR_S
MIN_READABLE = 2.0  # a device whose cut is under 2 of its mean lengths keeps its sessions
MIN_KEPT_SHARE = 0.05
MIN_CHARGE_PROB = 0.02
CELL_S = 300.0
_CELLS = round(DAY_S / CELL_S)
OMEGA_PER_H = 2 * math.pi / 24


@dataclass(frozen=True)
class Charging:
    """The charging windows read from the sessions, and what the fit sets aside."""

    found: bool
    charge_prob: float
    start_h: float  # c̄, local hours
    start_sd_h: float
    hours: float  # W
    kept_share: float  # kept windows / devices that can count theirs
    excluded: tuple[np.ndarray, np.ndarray, np.ndarray]  # (device, start_s, end_s) set aside
    long_session: np.ndarray  # (M,) bool over the whole sessions: left out of the lengths
    session_factor: np.ndarray  # (N,) each device's mean of a cut exponential / its mean
    share_loss: np.ndarray  # (N,) the share of its habits online time set aside
    readable: np.ndarray  # (N,) bool: long sessions set aside (else nothing)


def _medians(dev: np.ndarray, length: np.ndarray, n: int) -> np.ndarray:
    """(N,) each device's median session length (NaN for a device with none)."""
    order = np.lexsort((length, dev))
    dev, length = dev[order], length[order]
    count = np.bincount(dev, minlength=n)
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    lo = first + np.maximum(count - 1, 0) // 2
    hi = first + count // 2
    median = np.full(n, np.nan)
    has = count > 0
    median[has] = (length[lo[has]] + length[np.minimum(hi, length.size - 1)[has]]) / 2
    return median


def _top_two(dev: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(N,) each device's largest and second largest of ``values`` (−inf where none)."""
    order = np.lexsort((values, dev))
    dev, values = dev[order], values[order]
    last = np.flatnonzero(np.append(dev[1:] != dev[:-1], True)) if dev.size else dev
    first, second = np.full(n, -np.inf), np.full(n, -np.inf)
    first[dev[last]] = values[last]
    has_two = (last >= 1) & (dev[np.maximum(last - 1, 0)] == dev[last])
    second[dev[last[has_two]]] = values[last[has_two] - 1]
    return first, second


def _nights(start_h: np.ndarray, hours: float, utc_offset_s: np.ndarray,
            horizon_s: float) -> np.ndarray:
    """(N,) the nights whose window [c, c + W) (local) lies inside (0, horizon_s)."""
    first = np.mod(start_h * HOUR_S - utc_offset_s, DAY_S)  # first opening at or after 0
    last_open = horizon_s - hours * HOUR_S
    return np.where(first < last_open, np.floor((last_open - first) / DAY_S) + 1, 0)


def _charge_prob(counts: np.ndarray, kept_nights: np.ndarray, other_nights: np.ndarray
                 ) -> float:
    """q maximising the likelihood of the kept counts (>= 2) and of the others' <= 1."""
    def minus_log_likelihood(q: float) -> float:
        kept = binom.logpmf(counts, kept_nights, q).sum()
        others = np.log(np.maximum(binom.cdf(1, other_nights, q), 1e-300)).sum()
        return float(-(kept + others))

    return float(minimize_scalar(minus_log_likelihood, bounds=(1e-6, 1 - 1e-6),
                                 method="bounded", options={"xatol": 1e-6}).x)


@dataclass(frozen=True)
class _Windows:
    """Each device's most counted span (module docstring) from its long sessions."""

    top: np.ndarray  # (N,) K_d
    opens: np.ndarray  # (N,) start of the common span, seconds from ``mid``
    width: np.ndarray  # (N,) Ŵ_d
    mid: np.ndarray  # (N,) local second of the day of the most counted cell
    over: np.ndarray  # (M,) bool: the long session holds the most counted cell
    rel: np.ndarray  # (M,) its start, seconds from its device's ``mid`` (±12 h)


def _windows(dev: np.ndarray, local: np.ndarray, length: np.ndarray, ell: np.ndarray,
             n: int) -> _Windows:
    """The spans of the module docstring from long sessions (device, local start second
    of the day, length): counted on the circular grid (a day or more: every cell)."""
    first = np.ceil(local / CELL_S).astype(np.int64)
    stop = np.where(length >= DAY_S, first + _CELLS,
                    np.floor((local + length) / CELL_S).astype(np.int64))
    delta = np.zeros((n, _CELLS), dtype=np.int64)
    np.add.at(delta, (dev, first % _CELLS), 1)
    np.add.at(delta, (dev, stop % _CELLS), -1)
    wraps = (stop // _CELLS > first // _CELLS) & (stop > first)
    count = np.cumsum(delta, axis=1) + np.bincount(dev[wraps], minlength=n)[:, None]
    top = count.max(axis=1)
    mid = (count.argmax(axis=1) + 0.5) * CELL_S
    rel = np.mod(local - mid[dev] + DAY_S / 2, DAY_S) - DAY_S / 2
    over = (rel < 0) & (rel + length > 0)
    opens, later_open = _top_two(dev[over], rel[over], n)
    closes, earlier_close = _top_two(dev[over], -(rel + length)[over], n)
    closes, earlier_close = -closes, -earlier_close
    width = closes - opens
    # One session that overlaps the window without holding it may be left out.
    rescue = (width < ell) & (top >= 3)
    for alt_open, alt_close in ((later_open, closes), (opens, earlier_close)):
        better = rescue & (alt_close - alt_open > width)
        opens, closes = np.where(better, alt_open, opens), np.where(better, alt_close, closes)
        top, width = top - better, np.where(better, alt_close - alt_open, width)
        rescue &= ~better
    return _Windows(top, opens, width, mid, over, rel)


def _exponential_means(dev: np.ndarray, length: np.ndarray, n: int, cut: float
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(L̂_d, sessions) from each device's sessions shorter than ``cut``: the exponential
    mean whose cut median, ``L ln(2 / (1 + e^{−cut/L}))``, is theirs (inf where their
    median is cut / 2 or more; NaN for none), and how many they are."""
    short = length < cut
    median = _medians(dev[short], length[short], n)
    mean = median / math.log(2)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for _ in range(50):
            mean = np.where(median < cut / 2, median / np.log(2 / (1 + np.exp(-cut / mean))),
                            np.inf)
    return mean, np.bincount(dev[short], minlength=n)


def _long_cut(mean: np.ndarray, sessions: np.ndarray) -> np.ndarray:
    """ℓ_d = max(1 h, L̂_d ln(n_d / 0.1)) (inf for a device without sessions)."""
    with np.errstate(invalid="ignore"):
        ell = np.maximum(MIN_LONG_S, mean * np.log(np.maximum(sessions, 1) / LONG_EXPECTED))
    return np.where(sessions > 0, ell, np.inf)


@dataclass(frozen=True)
class _Whole:
    """The sessions wholly inside the window (``0 < t_on``, ``t_off < T``) of N devices:
    device, start, length and local start second of the day."""

    dev: np.ndarray
    on: np.ndarray
    length: np.ndarray
    local: np.ndarray
    n: int

    @staticmethod
    def of(device: np.ndarray, t_on_s: np.ndarray, t_off_s: np.ndarray,
           utc_offset_s: np.ndarray, horizon_s: float) -> _Whole:
        whole = (t_on_s > 0) & (t_off_s < horizon_s)
        dev, on = np.asarray(device, dtype=np.int64)[whole], t_on_s[whole]
        return _Whole(dev, on, (t_off_s - t_on_s)[whole], np.mod(on + utc_offset_s[dev], DAY_S),
                      int(utc_offset_s.shape[0]))

    def windows(self, ell: np.ndarray) -> tuple[np.ndarray, _Windows]:
        """(which sessions are long, at least ``ell`` (N,), and the windows they give)."""
        long = self.length >= ell[self.dev]
        return long, _windows(self.dev[long], self.local[long], self.length[long], ell, self.n)


@dataclass(frozen=True)
class _Estimates:
    charge_prob: float
    start_h: float
    start_sd_h: float
    hours: float
    kept_share: float


def fit_charging(device: np.ndarray, t_on_s: np.ndarray, t_off_s: np.ndarray,
                 utc_offset_s: np.ndarray, horizon_s: float) -> Charging:
    """The charging windows of the module docstring from the intervals of ``device``
    (non-overlapping within a device) over [0, horizon_s), at UTC offsets (N,)."""
    whole = _Whole.of(device, t_on_s, t_off_s, utc_offset_s, horizon_s)
    n = whole.n
    ell = _long_cut(*_exponential_means(whole.dev, whole.length, n, math.inf))
    first = whole.windows(ell)[1]
    kept = (first.top >= 2) & (first.width >= ell)
    if kept.sum() < 2:
        return _not_found(whole, _Estimates(0.0, 22.0, 1.5, 6.0, 0.0))
    hours = float(np.median(first.width[kept])) / HOUR_S
    cut = hours * HOUR_S - CELL_S  # a window's session is at least this long
    kept_share = int(np.sum(kept & (ell < cut))) / max(int(np.sum(ell < cut)), 1)
    mean, sessions = _exponential_means(whole.dev, whole.length, n, cut)
    ell = _long_cut(mean, sessions)
    long, found = whole.windows(ell)
    able = ell < cut  # can count its windows
    kept = (found.top >= 2) & (found.width >= ell) & able
    if kept.sum() < 2:
        return _not_found(whole, _Estimates(0.0, 22.0, 1.5, hours, kept_share))
    start_h = np.mod(found.mid + np.where(kept, found.opens, 0.0), DAY_S) / HOUR_S
    resultant = np.mean(np.exp(1j * OMEGA_PER_H * start_h[kept]))
    mean_h = float(np.mod(np.angle(resultant) / OMEGA_PER_H, 24.0))
    sd_h = math.sqrt(max(0.0, -2 * math.log(min(abs(resultant), 1.0)))) / OMEGA_PER_H
    nights = _nights(np.where(kept, start_h, mean_h), hours, utc_offset_s, horizon_s)
    q = _charge_prob(found.top[kept], nights[kept], nights[able & ~kept])
    estimates = _Estimates(q, mean_h, sd_h, hours, kept_share)
    if not (kept_share >= MIN_KEPT_SHARE and q >= MIN_CHARGE_PROB):
        return _not_found(whole, estimates)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _found(whole, long, found, kept, (np.minimum(ell, cut), mean), estimates)


def _found(whole: _Whole, long: np.ndarray, found: _Windows, kept: np.ndarray,
           cut_mean: tuple[np.ndarray, np.ndarray], estimates: _Estimates) -> Charging:
    """What is set aside: every session at least the device's cut min(ℓ_d, W) long of a
    device that can read it (cut >= 2 L̂_d), only the window's part where the session
    holds a kept window."""
    limit, mean = cut_mean
    x = limit / mean
    readable = x >= MIN_READABLE
    dev, on, length = whole.dev, whole.on, whole.length
    aside = (length >= limit[dev]) & readable[dev]
    window = np.zeros(dev.size, dtype=bool)
    window[np.flatnonzero(long)[found.over]] = True
    window &= kept[dev]
    rel = np.zeros(dev.size)
    rel[long] = found.rel
    open_s = on[window] + (found.opens[dev[window]] - rel[window])
    wholly = aside & ~window
    spans = (np.concatenate([dev[window], dev[wholly]]),
             np.concatenate([open_s, on[wholly]]),
             np.concatenate([open_s + found.width[dev[window]], (on + length)[wholly]]))
    with np.errstate(over="ignore", invalid="ignore"):
        factor = np.where(readable, 1 - x * np.exp(-x) / -np.expm1(-x), 1.0)
        loss = np.where(readable, (1 + x) * np.exp(-x), 0.0)
    e = estimates
    return Charging(True, e.charge_prob, e.start_h, e.start_sd_h, e.hours, e.kept_share,
                    spans, aside, factor, loss, readable)


def restored(shares: DeviceShares, loss: np.ndarray) -> DeviceShares:
    """The shares as before a share ``loss`` (N,) of each device's habits online time was
    set aside (taken out of its observed time too): ``s = s' / (1 − f + f s')``, the noise
    by the same map's slope."""
    base = 1 - loss + loss * shares.share
    slope = (1 - loss) / base ** 2
    return DeviceShares(shares.share / base, shares.variance * slope ** 2)


def _not_found(whole: _Whole, estimates: _Estimates) -> Charging:
    """No charging windows: nothing set aside (the estimates kept for the report)."""
    empty, n, e = np.zeros(0), whole.n, estimates
    return Charging(False, e.charge_prob, e.start_h, e.start_sd_h, e.hours, e.kept_share,
                    (empty.astype(np.int64), empty, empty),
                    np.zeros(whole.dev.size, dtype=bool), np.ones(n), np.zeros(n),
                    np.zeros(n, dtype=bool))
