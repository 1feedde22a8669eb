"""Quantile and superquantile kernels (and, later, the server's estimators)."""

from simfl.quantile.kernels import superquantile, weighted_quantile

__all__ = ["superquantile", "weighted_quantile"]
