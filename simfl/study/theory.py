"""The availability term to first order, predicted from a run's own tables and set
against the measured one (docs/theory.md).

    python -m simfl.study.theory RUN_OR_SWEEP_DIR ... [--window 900:1000] [--figure FILE]
    python -m simfl.study.theory RUN_OR_SWEEP_DIR ... --by-lag [--window 50:1000]
    python -m simfl.study.theory SWEEP_DIR --keep docs/runs/NAME

**The prediction.** The availability term is E_online − E_all (simfl.quantile.panel):
the estimator's mean on random cohorts of the devices online when a round opens,
less its mean on random cohorts of all training devices. For ``cohort_exact`` and a
cohort large enough that both means sit near the quantiles they estimate, it is the
difference between the (1 − θ) α-weighted quantile of the online devices' losses and
that of all devices, Q_on − Q. Device k is online with probability π_k(t) (the model's
oracle rate, HabitRates or ProfileRates), so the online devices' expected α-weighted loss
distribution is F_on(x) = Σ_k α_k π_k 1[F_k ≤ x] / Σ_k α_k π_k, against the
population's F(x) = Σ_k α_k 1[F_k ≤ x] / Σ_k α_k. A Bahadur-type expansion of the
quantile of F_on around Q (Bahadur 1966; Serfling 1980, §2.5), F_on(Q_on) = F(Q):

    Q_on − Q ≈ −(F_on(Q) − F(Q)) / f(Q),

f the density of F at Q. Its numerator is a covariance: F_on(Q) − F(Q) =
Cov_α(π, 1[F ≤ Q]) / E_α[π] (α-weighted moments over the devices): devices more often
online than average that sit below Q pull the online quantile down, whether they are
online more because of their data (a coupling) or are below Q because being online
more got them selected and fitted more (exposure). f(Q) is an α-weighted Gaussian
kernel density at Q, bandwidth by Silverman's rule, 0.9 min(sd, IQR / 1.34) n^(−1/5),
n the weights' effective count (Σα)² / Σα².

**The check.** A run's eval.parquet holds every training device's loss F_k at its
evaluation rounds, devices.parquet each device's α (its samples), UTC offset and
habits, and bias.parquet the measured availability term of each estimator at its
bias rounds. For each bias round in the window, π_k is the oracle rate at that round's
time and F_k the losses of the evaluation round nearest after it (the same round where
they coincide; kept archives hold the final evaluation only, whose losses then stand
in for the window's rounds: an approximation the output states). Per run: the mean
predicted and the mean measured ``cohort_exact`` term over the window's bias rounds.
Across runs: the least-squares line of measured on predicted, and R².
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from simfl.errors import InputError
from simfl.quantile import weighted_quantile
from simfl.rundir import MANIFEST
from simfl.study import run_command, run_folders

if TYPE_CHECKING:
    from simfl.population.habits import Habits
    from simfl.population.table import DeviceTable
    from simfl.scenario import AvailabilityConfig


def weighted_density(values: np.ndarray, weights: np.ndarray, at: float) -> float:
    """The α-weighted Gaussian kernel density of ``values`` at ``at``, Silverman's
    bandwidth 0.9 min(sd, IQR / 1.34) n^(−1/5) with n = (Σw)² / Σw²."""
    w = weights / weights.sum()
    mean = float(w @ values)
    sd = math.sqrt(float(w @ (values - mean) ** 2))
    iqr = weighted_quantile(values, w, 0.75) - weighted_quantile(values, w, 0.25)
    spread = min(sd, iqr / 1.34) if iqr > 0 else sd
    n = 1.0 / float(w @ w)
    h = 0.9 * spread * n ** -0.2
    if h <= 0:
        return math.inf
    z = (at - values) / h
    return float(w @ np.exp(-0.5 * z * z)) / (h * math.sqrt(2 * math.pi))


def predicted_term(losses: np.ndarray, alpha: np.ndarray, online_prob: np.ndarray,
                   level: float) -> float:
    """−(F_on(Q) − F(Q)) / f(Q): the first-order availability term (module docstring)."""
    q = weighted_quantile(losses, alpha, level)
    below = losses <= q
    f_all = float(alpha[below].sum() / alpha.sum())
    on = alpha * online_prob
    f_on = float(on[below].sum() / on.sum())
    return -(f_on - f_all) / weighted_density(losses, alpha, q)


def oracle_rates(manifest: dict, devices: pl.DataFrame):  # noqa: ANN201
    """The availability model's true online probabilities of the run's training devices
    (the ``ipw_known`` oracle, simfl.population.known_rates: its mode's ``rates`` hook),
    rebuilt from its manifest's scenario and its devices.parquet (each device's region
    and UTC offset and, for a mode that draws each device's own habits, its drawn
    habits): no data set needed. InputError for a mode with no rates to rebuild from
    these (a trace's need the mapped trace)."""
    from simfl.plugins import AVAILABILITY
    from simfl.population import known_rates
    from simfl.scenario import from_manifest

    scenario = from_manifest(manifest, str(MANIFEST))
    cfg = scenario.population.availability
    train = devices.filter(pl.col("split") == "train") if "split" in devices.columns else devices
    train = train.sort("client_idx")
    names = [r.name for r in scenario.population.regions]
    region = np.array([names.index(r) for r in train["region"].to_list()], dtype=np.int32)
    mode = AVAILABILITY.lookup(cfg.mode, "population.availability.mode", str(MANIFEST))
    habits = _kept_habits(cfg, train, region) if mode.has_hook("habits") else None
    rates = known_rates(cfg, _kept_devices(train, region, tuple(names)), habits)
    if rates is None:
        raise InputError(f"availability mode {cfg.mode!r}: no oracle rates to rebuild")
    return rates


def _kept_devices(train: pl.DataFrame, region: np.ndarray,
                  names: tuple[str, ...]) -> DeviceTable:
    """The training devices as devices.parquet keeps what the rates read: their regions
    and UTC offsets (speeds, links and failure rates, which no rate reads and kept
    archives drop, NaN)."""
    from simfl.population.table import DeviceTable

    n = train.height
    unknown = np.full(n, math.nan)
    return DeviceTable(client_idx=train["client_idx"].to_numpy(), region_idx=region,
                       utc_offset_s=train["utc_offset_h"].to_numpy() * 3600.0,
                       speed_rel=unknown, train_s_per_sample=unknown,
                       down_bytes_per_s=unknown, up_bytes_per_s=unknown, latency_s=unknown,
                       failure_rate_per_h=unknown, region_names=names)


def _kept_habits(cfg: AvailabilityConfig, train: pl.DataFrame, region: np.ndarray) -> Habits:
    """Each training device's habits as devices.parquet keeps them: logit shift, phase
    and charging start, with the scenario's propensity profile and weekend shifts."""
    from simfl.population.habits import Habits, calibrated_logits

    h, n = cfg.habits, train.height
    weekend = np.asarray(h.weekend_logit_shift, dtype=float)
    weekend_shift = weekend[region] if weekend.size > 1 else np.full(n, weekend[0])
    charge = (train["charge_start_h"].fill_null(math.nan).to_numpy()
              if "charge_start_h" in train.columns else np.full(n, math.nan))
    zeros = np.zeros(n, dtype=np.int64)
    return Habits(
        logit_shift=train["logit_shift"].to_numpy(), phase_s=train["phase_h"].to_numpy() * 3600,
        session_mean_s=np.full(n, cfg.session_mean_s), habit_class=zeros,
        class_shift=np.zeros(1), class_session_s=np.full(1, cfg.session_mean_s),
        hour_logits=calibrated_logits(cfg.online_prob_by_hour, h.propensity_logit_sd,
                                      h.class_shares, h.class_logit_means),
        weekend_shift=weekend_shift, charge_start_h=charge,
        class_weekend=np.unique(weekend_shift), class_engaged=np.ones(1),
        charge_prob=h.charge_prob, charge_hours=h.charge_hours)


KEPT = "theory.parquet"  # what --keep writes beside the manifest
# devices.parquet's columns the oracle rates and weights read (all that bench/archive_runs.py
# keeps of it, with ``split``)
DEVICE_COLUMNS = ("client_idx", "region", "utc_offset_h", "num_samples", "logit_shift",
                  "phase_h", "charge_start_h")


def _tables(run_dir: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(training devices, training losses by evaluation round: round, client_idx, loss)
    of a run folder, or of a kept one (:func:`keep`)."""
    if (run_dir / KEPT).is_file():
        kept = pl.read_parquet(run_dir / KEPT)
        losses = kept.select("client_idx", pl.col("^loss_.*$")).unpivot(
            index="client_idx", variable_name="round", value_name="loss").with_columns(
            pl.col("round").str.strip_prefix("loss_").cast(pl.Int64),
            pl.col("loss").cast(pl.Float64))
        return kept.select(c for c in kept.columns if not c.startswith("loss_")), losses
    for name in ("devices", "eval"):
        if not (run_dir / f"{name}.parquet").is_file():
            raise InputError(f"{run_dir}: no {name}.parquet (a lean archive keeps none; "
                             f"--keep keeps what the check reads)")
    devices = pl.read_parquet(run_dir / "devices.parquet")
    train = devices.filter(pl.col("split") == "train") if "split" in devices.columns else devices
    losses = pl.read_parquet(run_dir / "eval.parquet").filter(pl.col("split") == "train")
    return train, losses.select("round", "client_idx", "loss")


def keep(run_dir: Path, to: Path) -> Path:
    """Write ``run_dir``'s manifest, bias.parquet and, in ``theory.parquet``, what the
    check reads of its devices and their training losses at the evaluation rounds that
    are also bias rounds (float32) into ``to/<run name>/``; returns that folder."""
    train, losses = _tables(run_dir)
    bias_rounds = set(pl.read_parquet(run_dir / "bias.parquet").filter(
        pl.col("oracle_quantile").is_not_null())["round"].to_list())
    table = train.select(c for c in DEVICE_COLUMNS if c in train.columns).sort("client_idx")
    for r in sorted(set(losses["round"].to_list()) & bias_rounds):
        at = losses.filter(pl.col("round") == r).sort("client_idx")
        table = table.with_columns(pl.Series(f"loss_{r}", at["loss"].to_numpy(),
                                             dtype=pl.Float32))
    out = to / run_dir.name
    out.mkdir(parents=True, exist_ok=True)
    for name in (MANIFEST, "bias.parquet"):
        shutil.copyfile(run_dir / name, out / name)
    table.write_parquet(out / KEPT, compression_level=22, compression="zstd")
    return out


def run_points(run_dir: Path, window: tuple[int, int] | None = None,
               estimator: str = "cohort_exact") -> pl.DataFrame:
    """Per bias round of the window (default: every bias round from the first evaluation
    round after 0 that has a training loss on), the predicted and measured availability
    term of ``estimator`` and the evaluation round whose losses were used."""
    manifest = json.loads((run_dir / MANIFEST).read_text())
    if manifest.get("status") != "complete":
        return pl.DataFrame()
    level = 1.0 - float(manifest["scenario"]["aggregator"].get("theta", 1.0))
    train, losses = _tables(run_dir)
    devices = train.sort("client_idx")
    alpha = devices["num_samples"].to_numpy().astype(float)
    losses_by_round = {r: frame.sort("client_idx")["loss"].to_numpy().astype(float)
                       for (r,), frame in losses.group_by("round")}
    eval_rounds = np.array(sorted(losses_by_round))
    bias = pl.read_parquet(run_dir / "bias.parquet").filter(
        (pl.col("estimator") == estimator) & pl.col("availability_bias").is_not_null()
        & pl.col("availability_bias").is_not_nan())
    if window is None:
        window = (int(eval_rounds[eval_rounds > 0].min(initial=10**9)), 10**9)
    bias = bias.filter((pl.col("round") >= window[0]) & (pl.col("round") < window[1]))
    rates = oracle_rates(manifest, devices)
    idx = np.arange(alpha.size)
    rows = []
    for r, t_s, measured in bias.select("round", "t_s", "availability_bias").iter_rows():
        after = eval_rounds[eval_rounds >= r]
        if not after.size:
            continue
        at = losses_by_round[int(after[0])]
        rows.append({"round": r, "loss_round": int(after[0]), "measured": measured,
                     "predicted": predicted_term(at, alpha, rates.online_prob(idx, t_s),
                                                 level)})
    return pl.DataFrame(rows)


def lag_points(folders: list[Path], window: tuple[int, int] | None) -> pl.DataFrame:
    """Every bias round's point of every run, with the age of the losses it used
    (``lag``: evaluation round − bias round) and its error (measured − predicted)."""
    points = [run_points(run, window).with_columns(run=pl.lit(run.name))
              for run in run_folders(folders)]
    return pl.concat([p for p in points if len(p)]).with_columns(
        lag=pl.col("loss_round") - pl.col("round"),
        error=pl.col("measured") - pl.col("predicted"))


def by_lag(points: pl.DataFrame) -> pl.DataFrame:
    """:func:`lag_points` grouped by the age of the losses: how the prediction's error
    grows with that age."""
    return (points.group_by("lag").agg(pl.len().alias("points"), pl.col("measured").mean(),
                                 pl.col("predicted").mean(), pl.col("error").mean(),
                                 pl.col("error").abs().mean().alias("mean_abs_error"),
                                 pl.corr("measured", "predicted").alias("correlation"))
            .sort("lag"))


def fit_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(slope, intercept, R²) of the least-squares line of y on x."""
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (slope * x + intercept)
    r2 = 1 - float(residual @ residual) / float(((y - y.mean()) ** 2).sum())
    return float(slope), float(intercept), r2


def runs_table(folders: list[Path], window: tuple[int, int] | None) -> pl.DataFrame:
    rows = []
    for run in run_folders(folders):
        points = run_points(run, window)
        if len(points):
            lag = (points["loss_round"] - points["round"]).to_numpy()
            rows.append({"run": f"{run.parent.name}/{run.name}", "rounds": len(points),
                         "lag": int(lag.max()),
                         "predicted": float(points["predicted"].to_numpy().mean()),
                         "measured": float(points["measured"].to_numpy().mean())})
    if not rows:
        raise InputError(f"{[str(f) for f in folders]}: no complete run with eval.parquet, "
                         f"devices.parquet and cohort_exact's availability term")
    return pl.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simfl.study.theory",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", type=Path, nargs="+", help="run or sweep folders")
    parser.add_argument("--window", help="bias rounds FIRST:LAST (LAST excluded)")
    parser.add_argument("--figure", type=Path, help="draw measured against predicted")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="instead, keep what the check reads of each run, small, in DIR")
    parser.add_argument("--by-lag", action="store_true",
                        help="instead, every bias round's point grouped by the age of the "
                             "losses it used")
    args = parser.parse_args(argv)

    def work() -> None:
        window = None
        if args.window:
            first, _, last = args.window.partition(":")
            window = (int(first), int(last))
        if args.keep:
            for run in run_folders(args.folders):
                if json.loads((run / MANIFEST).read_text()).get("status") == "complete":
                    print(f"kept {keep(run, args.keep)}")
            return
        if args.by_lag:
            points = lag_points(args.folders, window)
            with pl.Config(tbl_rows=-1, float_precision=4, tbl_hide_dataframe_shape=True):
                print(by_lag(points))
            own = points.filter(pl.col("lag") == 0)
            if len(own) > 2:
                slope, intercept, r2 = fit_line(own["predicted"].to_numpy(),
                                                own["measured"].to_numpy())
                print(f"losses of the bias round itself (lag 0), {len(own)} points: measured = "
                      f"{slope:.3f} x predicted {intercept:+.4f} (R² {r2:.3f})")
            return
        table = runs_table(args.folders, window)
        slope, intercept, r2 = fit_line(table["predicted"].to_numpy(),
                                        table["measured"].to_numpy())
        with pl.Config(tbl_rows=-1, float_precision=4, tbl_hide_dataframe_shape=True,
                       fmt_str_lengths=80):
            print(table)
        print(f"{len(table)} runs; measured = {slope:.3f} x predicted {intercept:+.4f} "
              f"(R² {r2:.3f}); losses up to {int(table['lag'].to_numpy().max())} rounds after the "
              f"bias round")
        if args.figure:
            from simfl.plots import new_axes, save_figure

            fig, ax = new_axes()
            x, y = table["predicted"].to_numpy(), table["measured"].to_numpy()
            ax.scatter(x, y, s=12)
            line = np.linspace(min(x.min(), y.min()), max(x.max(), y.max()), 2)
            ax.plot(line, line, color="grey", linestyle=":", label="measured = predicted")
            ax.plot(line, slope * line + intercept, label=f"fit: {slope:.2f} x {intercept:+.3f}")
            ax.set_xlabel("predicted availability term (nats)")
            ax.set_ylabel("measured availability term (nats)")
            ax.legend()
            print(f"wrote {save_figure(fig, args.figure)}")

    return run_command(work)


if __name__ == "__main__":
    sys.exit(main())
