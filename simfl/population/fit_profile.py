"""The region profile of the habits model from a population's hourly online share
(simfl.population.fit; docs/design.md §3).

Under the habits model the population's online share in the local hour centred on h:00,
y(h), is the region profile's knots p (linear between hours) averaged over the hour and
smoothed by the devices' phases, N(0, σ_φ²) hours: on the 24-point Fourier series,
harmonic k (ω_k = 2πk / 24 h) of y is harmonic k of p times

    T_k = (¾ + ¼ cos ω_k) · exp(−ω_k² σ_φ² / 2),

the hour's mean of the piecewise-linear profile at its knots times the phase's
smoothing. The fitted knots are those whose forward image T p is y **less its noise**,
so that the fitted model, simulated, smooths them once and gives back y:

- y's noise: its power V in each harmonic, from an even/odd-day split of the
  population's shares (each half has about twice the noise variance of the whole, so
  their difference four times it), pooled over the harmonics k = 1..12 (taken as
  white). Harmonics of y with power below 9 V are dropped as noise (a harmonic of
  noise alone, |·|² exponential, passes with probability e⁻⁹ ≈ 10⁻⁴); the others are
  kept whole.
- p = argmin ‖T p − ŷ‖² + λ ‖p − ȳ‖² over p in [0.001, 0.999] (bounded least squares,
  scipy's BVLS), ŷ the kept harmonics of y and ȳ its mean: per harmonic, without the
  bounds, ``p_k = ŷ_k T_k / (T_k² + λ)``, y's harmonic divided by T_k where T_k² ≫ λ
  and at most 1 / (2 √λ) ≈ 16 times it (λ = 0.001), so that a harmonic the fitted
  phase spread all but erases (a population profile no Gaussian spread of phases
  makes, e.g. several regions' read in UTC) does not drive the knots to the bounds.
  Where no p reproduces ŷ, the fitted model's profile comes out flatter than y
  (``trace fit``'s check, simfl.population.fit_check, compares the two ranges).

(Before, harmonics damped below ½ were left as observed instead of divided by T_k, and
the model smoothed them once more: the fitted model's daily range came out 0.27 to
0.36 of the observed for six regions' traces read in UTC (σ̂_φ 5.4 h), 0.76 to 0.94
now; docs/design.md §3 has the measurements.)
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import lsq_linear

OMEGA = 2 * np.pi / 24  # the first harmonic, radians per hour
NOISE_MULTIPLE = 9.0
RIDGE = 0.001  # λ: a harmonic's gain at most 1 / (2 √λ) ≈ 16
BOUNDS = (0.001, 0.999)


def noise_power(online_s: np.ndarray, observed_s: np.ndarray) -> float:
    """V, the noise's power in each harmonic of the population's hourly share (its
    ``rfft``), from (days, 24) online and observed device-seconds by day and hour:
    ``V = mean_k |Δ_k|² / 4``, Δ the even days' share less the odd days'."""
    even = online_s[0::2].sum(axis=0) / observed_s[0::2].sum(axis=0)
    odd = online_s[1::2].sum(axis=0) / observed_s[1::2].sum(axis=0)
    return float(np.mean(np.abs(np.fft.rfft(even - odd)[1:]) ** 2) / 4)


def transfer(phase_sd_h: float) -> np.ndarray:
    """(13,) T_k of harmonics k = 0..12 (module docstring)."""
    omega = OMEGA * np.arange(13)
    return (0.75 + 0.25 * np.cos(omega)) * np.exp(-(omega * phase_sd_h) ** 2 / 2)


def deconvolved_profile(population: np.ndarray, phase_sd_h: float, noise: float
                        ) -> np.ndarray:
    """(24,) the knots p(h) (module docstring) from the population's hourly share
    ``population`` (24,), the phase spread and the noise power ``noise``."""
    spectrum = np.fft.rfft(population)
    signal = np.abs(spectrum) ** 2 > NOISE_MULTIPLE * noise
    signal[0] = True
    target = np.fft.irfft(np.where(signal, spectrum, 0), 24)
    ridge = math.sqrt(RIDGE)
    system = np.vstack([circulant(transfer(phase_sd_h)), ridge * np.eye(24)])
    rhs = np.concatenate([target, np.full(24, ridge * float(np.mean(population)))])
    solved = lsq_linear(system, rhs, bounds=BOUNDS, method="bvls")
    return np.asarray(solved.x)


def circulant(gain: np.ndarray) -> np.ndarray:
    """(24, 24) the real circulant matrix that multiplies harmonic k of a 24-vector by
    ``gain[k]`` (k = 0..12)."""
    return np.fft.irfft(gain[:, None] * np.fft.rfft(np.eye(24), axis=0), 24, axis=0)
