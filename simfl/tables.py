"""How a run's tables join, and the joined tables that figures, scripts and the API share.

The keys (docs/design.md §8, "Joining the tables"):

- ``round`` in rounds, clients, comm and bias is the round's 0-based index (async: the
  server update); in eval it counts the rounds completed when the model was evaluated
  (0: the initial model), so the evaluation after round r has ``round`` r + 1:
  :func:`cumulative_bytes` shifts the rounds table by one to join it;
- ``client_idx`` is the training device in clients, comm, eval (null for test devices)
  and devices;
- rounds' ``quantile_estimate`` is bias's ``estimate`` on the row whose ``driver`` is
  true;
- comm holds every message that would go on the wire; those of shadowing estimators
  are marked in ``shadow`` and are not sent (:func:`sent` drops them), so the rounds
  table's bytes are the sums of :func:`sent` messages.
"""

from __future__ import annotations

import polars as pl

from simfl.metrics import error_summary


def sent(comm: pl.DataFrame) -> pl.DataFrame:
    """The messages of comm.parquet that were sent (not a shadowing estimator's); a table
    written before shadow messages were recorded has only those."""
    return comm.filter(pl.col("shadow").is_null()) if "shadow" in comm.columns else comm


def error_by_round(eval_df: pl.DataFrame) -> pl.DataFrame:
    """Per (round, split): t_s, num_devices and error mean and p90 (simfl.metrics).

    Returns columns round, split, t_s, num_devices, mean, p90, sorted by split and round.
    """
    rows = []
    for (round_idx, split), group in eval_df.group_by(["round", "split"]):
        summary = error_summary(group["error"].drop_nulls().to_numpy())
        rows.append({"round": round_idx, "split": split, "t_s": group["t_s"].max(),
                     "num_devices": group.height, **summary})
    schema = {"round": pl.Int64, "split": pl.String, "t_s": pl.Float64,
              "num_devices": pl.Int64, "mean": pl.Float64, "p90": pl.Float64}
    return pl.DataFrame(rows, schema=schema).sort("split", "round")


def cumulative_bytes(rounds_df: pl.DataFrame) -> pl.DataFrame:
    """Bytes down + up summed over the rounds completed before each evaluation.

    Eval round r follows r completed rounds (0..r-1), so row r sums those and
    round 0 (the initial model) is 0. Returns columns round, bytes_cum.
    """
    done = (
        rounds_df.sort("round")
        .select(
            (pl.col("round") + 1).cast(pl.Int64).alias("round"),
            (pl.col("bytes_down") + pl.col("bytes_up")).cum_sum().cast(pl.Int64).alias("bytes_cum"),
        )
    )
    start = pl.DataFrame({"round": [0], "bytes_cum": [0]}, schema=done.schema)
    return pl.concat([start, done])


def tail_vs_bytes(eval_df: pl.DataFrame, rounds_df: pl.DataFrame,
                  split: str = "test") -> pl.DataFrame:
    """``split``'s summary per eval round joined with cumulative bytes (null when unknown)."""
    return summary_vs_bytes(error_by_round(eval_df), rounds_df, split)


def summary_vs_bytes(summary: pl.DataFrame, rounds_df: pl.DataFrame,
                     split: str = "test") -> pl.DataFrame:
    """:func:`tail_vs_bytes` from the summary :func:`error_by_round` made of the
    evaluations (a kept run may hold only that)."""
    test = summary.filter(pl.col("split") == split)
    return test.join(cumulative_bytes(rounds_df), on="round", how="left").sort("round")
