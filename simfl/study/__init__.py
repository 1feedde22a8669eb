"""The analysis of a study's runs, from their kept tables only (polars, scipy): what the
study pages' tables are computed with, for anyone's sweep.

- :mod:`simfl.study.intervals`: paired t-intervals, equivalence verdicts, Holm's
  adjustment, Fieller's ratio interval, the sample-weighted 90th percentile;
- :mod:`simfl.study.dose`: the tail error's response to a known error in the Δ-FL
  threshold (docs/dose_response.md).
"""
