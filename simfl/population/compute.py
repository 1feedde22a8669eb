"""Per-device training speed: real phone benchmark scores -> seconds per training sample.

Two measurements from the shared data folder ``$SIMFL_DATA_DIR/devices/`` (see its
README) are combined:

- **Spread across phones**: AI-Benchmark scores of 333 Android phones
  (Ignatov et al., "AI Benchmark: All About Deep Learning on Smartphones in 2019",
  ICCVW 2019), as collected by the FLASH heterogeneity-aware FL benchmark (Yang et al.,
  "Characterizing Impacts of Heterogeneity in Federated Learning upon Large-Scale
  Smartphone Data", WWW 2021). By default the CPU floating-point score is used: on-device
  training runs float32 on the CPU, whereas the overall AI score also rewards NPU and
  quantised inference. The phone model of each device is drawn from the deployment mix
  (``real2benchmark.json``: device strings seen in a real FL population; the ones mapped
  to "unknown" are left out) or uniformly from the benchmark list.
- **Absolute scale**: measured LeNet training time per batch on three phones at batch
  sizes 1-32 (``ondevice_training/*_lenet_time_table.csv``, column ``expr_train``, ms).
  The median phone of the mix is taken to train LeNet-5 at the median measured time
  per sample; a device with score ``s`` is ``s / median`` times as fast.

A model's cost scales the LeNet time by ``train FLOPs per sample / LeNet-5's``. FLOPs
are counted as multiply-accumulates (the convention behind LeNet-5's 0.42 M), forward
only, times 3 for training (forward + two backward products, Kaplan et al. 2020 §2.1).
A model's count is its registry row's ``train_flops`` hook (simfl.plugins.MODELS):
simfl's linear model, ConvNet and GRU give the hand counts below for the papers'
shapes; a model without the hook is counted from its forward pass when a run builds it
(simfl.train.models.forward_macs), unless ``population.compute.train_flops_per_sample``
gives it. LeNet-5 is no model of simfl's: only the reference of the measured times.

Without the data files, speeds are lognormal around 1 with log-sd 0.93 (the log-sd of
the CPU float scores of the 333 benchmarked phones) and the LeNet reference is the
built-in fit below, taken from the same measured tables.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from simfl.errors import InputError
from simfl.plugins import MODELS
from simfl.scenario import ComputeConfig

TRAIN_TO_FORWARD = 3.0


def conv2d_macs(in_channels: int, out_channels: int, kernel: int, out_hw: int) -> int:
    """Multiply-accumulates of a square conv layer producing an out_hw x out_hw map."""
    return out_hw * out_hw * out_channels * in_channels * kernel * kernel


def linear_macs(in_features: int, out_features: int) -> int:
    return in_features * out_features


# LeNet-5 (LeCun et al. 1998) on 32x32: conv 1->6 5x5, pool, conv 6->16 5x5, pool,
# 400->120->84->10. 416,520 MACs, the usual "0.42 MFLOP". The reference cost of the
# measured LeNet times (:func:`train_s_per_sample`).
LENET5_FORWARD_FLOPS = (
    conv2d_macs(1, 6, 5, 28) + conv2d_macs(6, 16, 5, 10)
    + linear_macs(400, 120) + linear_macs(120, 84) + linear_macs(84, 10)
)
LENET5_TRAIN_FLOPS = TRAIN_TO_FORWARD * LENET5_FORWARD_FLOPS
# The FEMNIST ConvNet of LEAF (Caldas et al. 2018) as used here: conv 1->32 5x5 on 28x28
# (no padding) -> 24x24, pool -> 12x12, conv 32->64 5x5 -> 8x8, pool -> 4x4, 1024 -> 62.
CONVNET_FORWARD_FLOPS = (
    conv2d_macs(1, 32, 5, 24) + conv2d_macs(32, 64, 5, 8) + linear_macs(1024, 62)
)
LINEAR_FORWARD_FLOPS = linear_macs(784, 62)  # multinomial logistic regression on FEMNIST
# The Shakespeare GRU (simfl/train/models.py CharGRU): 20 steps of the three gates' input
# (one-hot 53, counted as a dense product, as a phone would run it) and hidden (128)
# products, then 128 -> 53.
GRU_FORWARD_FLOPS = 20 * (linear_macs(53, 3 * 128) + linear_macs(128, 3 * 128)) + linear_macs(
    128, 53)


def linear_train_flops() -> float:
    """The linear model's training FLOPs per sample (its ``train_flops`` hook), on
    FEMNIST's 784 pixels and 62 classes whatever the data."""
    return TRAIN_TO_FORWARD * LINEAR_FORWARD_FLOPS


def convnet_train_flops() -> float:
    """The ConvNet's training FLOPs per sample (its ``train_flops`` hook)."""
    return TRAIN_TO_FORWARD * CONVNET_FORWARD_FLOPS


def gru_train_flops() -> float:
    """The Shakespeare GRU's training FLOPs per sample (its ``train_flops`` hook), at its
    default hidden size of 128."""
    return TRAIN_TO_FORWARD * GRU_FORWARD_FLOPS


# Built-in fallback for the LeNet reference: least-squares line through the pooled
# measured tables (3 phones, batch sizes 1-32): time per batch = overhead + slope * b.
FALLBACK_LENET_OVERHEAD_MS = 9.94
FALLBACK_LENET_PER_SAMPLE_MS = 0.589

_SCORE_KEYS = {"cpu_float": "CPU_F_AI_Score", "ai_score": "AI_Score"}


def _lenet_tables(folder: Path | None) -> list[Path]:
    """The measured LeNet time tables in the devices folder (none without it)."""
    return sorted(folder.glob("ondevice_training/*_lenet_time_table.csv")) if folder else []


def devices_dir(data_dir: Path | None) -> Path | None:
    """``data_dir/devices`` if it holds the benchmark list, else None (use the fallback)."""
    if data_dir is None:
        return None
    folder = Path(data_dir) / "devices"
    return folder if (folder / "raw_ai_benchmark_list.json").is_file() else None


def _score_value(text: str) -> float:
    # AI_Score is stored as e.g. " 76206 1,6": the score, then footnote marks.
    return float(str(text).split()[0])


def load_phone_scores(folder: Path, score: str = "cpu_float",
                      phone_mix: str = "deployment") -> np.ndarray:
    """One benchmark score per phone of the mix (float64, unsorted)."""
    path = folder / "raw_ai_benchmark_list.json"
    try:
        rows = json.loads(path.read_text())
        by_model = {row["Model"]: _score_value(row[_SCORE_KEYS[score]]) for row in rows}
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        raise InputError(f"{path}: cannot read phone benchmark scores ({e})") from None
    if phone_mix == "benchmark_list":
        return np.array(list(by_model.values()), dtype=np.float64)
    mix_path = folder / "real2benchmark.json"
    try:
        mix = json.loads(mix_path.read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{mix_path}: cannot read the deployment phone mix ({e})") from None
    scores = [by_model[m] for m in mix.values() if m in by_model]
    if not scores:
        raise InputError(f"{mix_path}: no phone of the mix has a benchmark score")
    return np.array(scores, dtype=np.float64)


def _batch_time_ms(batch_sizes: np.ndarray, times_ms: np.ndarray, batch_size: int) -> float:
    """Measured time of one batch, interpolated; beyond the largest size, the last slope."""
    if batch_size <= batch_sizes[-1]:
        return float(np.interp(batch_size, batch_sizes, times_ms))
    slope = (times_ms[-1] - times_ms[-2]) / (batch_sizes[-1] - batch_sizes[-2])
    return float(times_ms[-1] + slope * (batch_size - batch_sizes[-1]))


def _read_lenet_table(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        lines = path.read_text().strip().splitlines()
        header = lines[0].split(",")
        b_col, t_col = header.index("batchsize"), header.index("expr_train")
        rows = [line.split(",") for line in lines[1:]]
        batch = np.array([float(r[b_col]) for r in rows])
        time_ms = np.array([float(r[t_col]) for r in rows])
    except (OSError, ValueError, IndexError) as e:
        raise InputError(f"{path}: cannot read LeNet time table ({e})") from None
    order = np.argsort(batch)
    return batch[order], time_ms[order]


def lenet_s_per_sample(folder: Path | None, batch_size: int) -> float:
    """Median over the measured phones of LeNet training seconds per sample at ``batch_size``."""
    tables = _lenet_tables(folder)
    if not tables:
        ms = FALLBACK_LENET_OVERHEAD_MS + FALLBACK_LENET_PER_SAMPLE_MS * batch_size
        return ms / batch_size / 1000.0
    per_sample_ms = [_batch_time_ms(*_read_lenet_table(p), batch_size) / batch_size
                     for p in tables]
    return float(np.median(per_sample_ms)) / 1000.0


def speed_origin(cfg: ComputeConfig, folder: Path | None) -> dict[str, str]:
    """What the speeds are drawn from, given the devices folder found (or None): "auto"
    depends on the machine, so a run records this (manifest ``device_speeds``)."""
    use_data = cfg.speed_source == "benchmark" or (
        cfg.speed_source == "auto" and folder is not None)
    return {"speeds": "benchmark" if use_data else "lognormal",
            "lenet_reference": "measured" if _lenet_tables(folder) else "built-in"}


def describe_origin(origin: dict[str, str]) -> str:
    """One line for the start of a run: where the phones' speeds come from."""
    speeds = {"benchmark": "AI-Benchmark phone scores",
              "lognormal": "lognormal draws (speed_log_sigma)"}[origin["speeds"]]
    lenet = {"measured": "measured LeNet times ($SIMFL_DATA_DIR/devices)",
             "built-in": "the built-in LeNet fit ($SIMFL_DATA_DIR/devices not found)"}
    return f"device speeds: {speeds}, scaled by {lenet[origin['lenet_reference']]}"


def draw_speed_rel(cfg: ComputeConfig, num_devices: int, rng: np.random.Generator,
                   folder: Path | None) -> np.ndarray:
    """Relative training speed per device (the median phone of the mix = 1)."""
    if speed_origin(cfg, folder)["speeds"] == "benchmark":
        if folder is None:
            raise InputError("population.compute.speed_source = 'benchmark' needs the phone "
                             "benchmark files under $SIMFL_DATA_DIR/devices/")
        scores = load_phone_scores(folder, cfg.score, cfg.phone_mix)
        return rng.choice(scores, size=num_devices) / float(np.median(scores))
    return np.exp(cfg.speed_log_sigma * rng.standard_normal(num_devices))


def train_flops_per_sample(cfg: ComputeConfig, model_name: str) -> float:
    """The configured training cost per sample, else the model's ``train_flops`` hook's
    (simfl.plugins.MODELS). InputError for a model without the hook (a run counts it from
    the forward pass first: simfl.runs.build) and for a hook that gives no positive finite
    number."""
    if cfg.train_flops_per_sample > 0:
        return cfg.train_flops_per_sample
    count = MODELS.lookup(model_name, "model.name").hook("train_flops", "model.name")
    if count is None:
        raise InputError(f"no FLOP count for model '{model_name}': set "
                         "population.compute.train_flops_per_sample")
    given = count()
    number = isinstance(given, (int, float, np.integer, np.floating)) and given is not True
    flops = float(given) if number else math.nan
    if not 0 < flops < math.inf:
        raise InputError(f"'model.name' = {model_name!r}: its train_flops hook returned "
                         f"{given!r}, not a positive number of FLOPs per sample")
    return flops


def train_s_per_sample(speed_rel: np.ndarray, lenet_ref_s: float, flops: float) -> np.ndarray:
    """Seconds per training sample: the LeNet reference scaled by cost and speed."""
    return lenet_ref_s * (flops / LENET5_TRAIN_FLOPS) / speed_rel
