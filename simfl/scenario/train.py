"""``[model]``, ``[train]`` and ``[eval]``: the model, local training and evaluation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from simfl.scenario.fields import (
    NON_NEGATIVE,
    NON_NEGATIVE_BOUNDED,
    POSITIVE,
    POSITIVE_BOUNDED,
    opt,
    params_table,
)

MAX_THREADS = 1024  # torch crashes (segmentation fault) creating 1e5 threads


@dataclass(frozen=True)
class ModelConfig:
    # linear, convnet, gru (Shakespeare's character model) or a plug-in (simfl.plugins)
    name: str = "linear"
    l2: float = opt(0.0, NON_NEGATIVE_BOUNDED)  # (l2 / 2) * ||w||^2 added to every local loss
    # Linear only, for the authors' model (krishnap25/simplicial-fl: scores x·W from W = 0):
    # bias = false drops the intercept; init = "zeros" starts every parameter at 0 instead
    # of PyTorch's seeded default (docs/reproduction/authors_code.md).
    bias: bool = True
    init: Literal["pytorch", "zeros"] = "pytorch"
    params: dict[str, Any] = params_table()


@dataclass(frozen=True)
class TrainConfig:
    local_epochs: int = opt(1, POSITIVE)
    batch_size: int = opt(32, POSITIVE)
    lr: float = opt(0.1, POSITIVE_BOUNDED)
    lr_decay_every: int = opt(0, NON_NEGATIVE)  # rounds between decays (0 = constant lr)
    lr_decay_factor: float = opt(0.5, (lambda v: 0 < v <= 1, "must be in (0, 1] (a decay)"))
    backend: Literal["auto", "batched", "loop"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "cpu"
    dtype: Literal["float32", "float64"] = "float32"
    # Matrix and convolution precision on a GPU: fp32 (exact float32), tf32 (float32 storage,
    # TensorFloat-32 products) or bf16 (autocast of the forward pass); off (fp32) by default.
    precision: Literal["fp32", "tf32", "bf16"] = "fp32"
    # torch intra-op threads for the run (0 = torch's default, one per core). 1 by default:
    # measured no faster with 2 on the linear model, and far slower beside a busy core
    # (docs/usage.md, "Threads"); the ConvNet on a CPU alone on the machine gains from more.
    threads: int = opt(1, (lambda v: 0 <= v <= MAX_THREADS, f"must be in [0, {MAX_THREADS}]"))




@dataclass(frozen=True)
class EvalConfig:
    every: int = opt(10, POSITIVE)  # rounds between evaluations of every device (and at the end)
    batch_size: int = opt(256, POSITIVE)  # samples per forward pass (256 is cache-friendly on CPU)
    # The losses' log-softmax over a (classes, samples) copy of each batch's logits instead
    # of torch's cross_entropy over (samples, classes): the same function, several times
    # faster on a CPU for a few classes (its kernel is vectorised across samples), the
    # same losses within a few ulps, not to the bit. For runs whose passes over the
    # population dominate (simfl/train/evaluate.py).
    class_major: bool = False

