"""Algorithms that are not a per-round aggregation rule (whole federated solvers)."""
