"""The models of the Δ-FL experiments, and flat-vector views of their parameters.

All follow Laguel, Pillutla, Malick, Harchaoui, "A Superquantile Approach to
Federated Learning with Heterogeneous Devices" (CISS 2021; long version
arXiv:2112.09429): a linear softmax model with ℓ2 regularisation and a small
ConvNet for EMNIST, a GRU for Shakespeare. Models are plain ``nn.Module``
definitions; training evaluates them functionally (``torch.func.functional_call``)
from a flat parameter vector, so a client update is a vector of P numbers and a
cohort's updates one (K, P) tensor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from simfl.errors import InputError
from simfl.plugins import MODELS, build
from simfl.scenario import ModelConfig


class LinearSoftmax(nn.Module):
    """Multinomial logistic regression: flatten, then one affine map to the logits
    (``bias=False``: a linear one, x·Wᵀ, the authors' model in krishnap25/simplicial-fl)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, bias: bool = True) -> None:
        super().__init__()
        self.fc = nn.Linear(math.prod(input_shape), num_classes, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(start_dim=1))


class ConvNet(nn.Module):
    """The Δ-FL reference ConvNet for 28×28 images (115,646 parameters with 62 classes).

    conv 1→32 5×5, ReLU, max-pool 2; conv 32→64 5×5, ReLU, max-pool 2;
    linear 1024→62 (no padding: 28 → 24 → 12 → 8 → 4, and 64·4·4 = 1024).
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        if tuple(input_shape) != (1, 28, 28):
            raise ValueError(f"the papers' ConvNet needs (1, 28, 28) images, got inputs of "
                             f"shape {tuple(input_shape)} (the cnn model fits any C×H×W)")
        self.conv1 = nn.Conv2d(1, 32, 5)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.fc = nn.Linear(1024, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = relu_max_pool(self.conv1(x))
        x = relu_max_pool(self.conv2(x))
        return self.fc(x.flatten(start_dim=1))


class SmallCNN(nn.Module):
    """A small ConvNet for images of any C×H×W (``model.name = "cnn"``; not the papers').

    conv C→32 3×3 (padding 1), ReLU, max-pool 2; conv 32→64 3×3 (padding 1), ReLU,
    max-pool 2; average-pool to 2×2; linear 256→classes. A pooling step is skipped
    where the side it halves is below 2 (a 1×1 input still fits), so CIFAR's 3×32×32
    (21,962 parameters with 10 classes) and FEMNIST's 1×28×28 (34,750 with 62) both do.
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        if len(input_shape) != 3:
            raise ValueError(f"the cnn needs images (channels, height, width), got "
                             f"inputs of shape {tuple(input_shape)}")
        channels, height, width = input_shape
        self.pools: list[bool] = []
        for _ in range(2):
            self.pools.append(min(height, width) >= 2)
            height, width = (height // 2, width // 2) if self.pools[-1] else (height, width)
        self.conv1 = nn.Conv2d(channels, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc = nn.Linear(64 * 2 * 2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv, pool in zip((self.conv1, self.conv2), self.pools, strict=True):
            x = torch.relu(conv(x))
            x = torch.max_pool2d(x, 2) if pool else x
        x = nn.functional.adaptive_avg_pool2d(x, 2)
        return self.fc(x.flatten(start_dim=1))


def relu_max_pool(x: torch.Tensor) -> torch.Tensor:
    """ReLU, then 2×2 max-pool with stride 2, of (..., H, W) with H and W even.

    Training (autograd on) uses ``torch.max_pool2d``, whose backward routes each
    gradient to one input. Evaluation without autograd on a CPU, where that kernel's
    NCHW path is slow, takes the ReLU of the maximum of the four strided quarter-views
    instead: the same values (ReLU is monotone and a maximum is exact) in 2.6× less time
    for a whole evaluation (bench/convnet_eval.py, which checks the equality on FEMNIST
    devices).
    """
    if torch.is_grad_enabled() or x.device.type != "cpu":
        return torch.max_pool2d(torch.relu(x), 2)
    top, bottom = x[..., ::2, :], x[..., 1::2, :]
    rows = torch.maximum(top, bottom)
    return torch.relu(torch.maximum(rows[..., ::2], rows[..., 1::2]))


class CharGRU(nn.Module):
    """The Δ-FL papers' Shakespeare model (arXiv:2112.09429, App. C.1.3): a GRU (Cho et al.
    2014) with 128 hidden units over the one-hot encoded window, then a linear layer from
    its last hidden state to the classes.

    Inputs are character indices (N, H) in any dtype. The cell is written with matrix
    products (PyTorch's GRU equations, gate order r, z, n) rather than ``nn.GRU``, so that
    ``torch.func.vmap`` batches a cohort's clients; one-hot times W_ih is a row lookup
    (``embedding``). The alphabet of the inputs is the classes' (53 for Shakespeare).
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, hidden: int = 128) -> None:
        super().__init__()
        if len(input_shape) != 1:
            raise ValueError(f"CharGRU needs windows of character indices, got {input_shape}")
        self.hidden = hidden
        self.weight_ih = nn.Parameter(torch.empty(3 * hidden, num_classes))
        self.weight_hh = nn.Parameter(torch.empty(3 * hidden, hidden))
        self.bias_ih = nn.Parameter(torch.empty(3 * hidden))
        self.bias_hh = nn.Parameter(torch.empty(3 * hidden))
        self.fc = nn.Linear(hidden, num_classes)
        for p in (self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh):
            nn.init.uniform_(p, -self.init_bound(""), self.init_bound(""))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gates_x = nn.functional.embedding(x.long(), self.weight_ih.t()) + self.bias_ih
        h = gates_x.new_zeros(x.shape[0], self.hidden)
        for t in range(x.shape[1]):
            gx, gh = gates_x[:, t].chunk(3, dim=1), (h @ self.weight_hh.t() + self.bias_hh).chunk(
                3, dim=1)
            r = torch.sigmoid(gx[0] + gh[0])
            z = torch.sigmoid(gx[1] + gh[1])
            n = torch.tanh(gx[2] + r * gh[2])
            h = (1 - z) * n + z * h
        return self.fc(h)

    def init_bound(self, name: str) -> float:
        """PyTorch's GRU and Linear initialisation: every parameter U(±1/sqrt(hidden))."""
        return 1.0 / math.sqrt(self.hidden)


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int,
                bias: bool = True, params: Mapping[str, Any] | None = None) -> nn.Module:
    """The model ``name`` (simfl.plugins.MODELS: linear, convnet, gru or a plug-in) with
    its hyper-parameters ``params``; ``bias=False`` (linear only) drops the linear
    model's intercept. A plug-in's module without parameters, or with parameters that are
    not floating-point tensors, is an InputError naming it: training moves a model's
    parameters, and a run starts from them (:func:`initial_params`)."""
    plugin = MODELS.lookup(name, "model.name")
    if not bias and "bias" not in plugin.keys:
        raise ValueError(f"bias=False is for the linear model, not {name!r}")
    cfg = ModelConfig(name=name, bias=bias, params=dict(params or {}))
    try:
        model: nn.Module = build(plugin, "model.name", cfg, tuple(input_shape), num_classes,
                                 expect=nn.Module)
    except ValueError as e:
        if not plugin.builtin:
            raise
        raise InputError(f"'model.name' = {name!r}: {e}") from None
    if not plugin.builtin:
        named = list(model.named_parameters())
        odd = [n for n, p in named if not p.is_floating_point()]
        if not named or odd:
            what = (f"whose parameters {odd} are not floating-point" if odd else
                    "without parameters")
            raise InputError(f"'model.name' = {name!r} ({plugin.path}) returned a "
                             f"{type(model).__name__} {what}: a model plug-in returns a "
                             f"torch.nn.Module whose floating-point parameters training moves "
                             f"(docs/extending.md)")
    return model


def forward_macs(cfg: ModelConfig, input_shape: tuple[int, ...], num_classes: int,
                 dtype: torch.dtype) -> float:
    """Multiply-accumulates of the model's forward pass on one sample, counted by torch's
    FlopCounterMode (2 FLOPs a MAC; operations it has no formula for, such as
    activations and pooling, count 0, as in the hand counts of
    simfl.population.compute) on the meta device: nothing is allocated."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = build_model(cfg.name, input_shape, num_classes, cfg.bias, cfg.params)
        sample = torch.zeros(1, *input_shape, dtype=dtype)
        with FlopCounterMode(display=False) as counter:
            model(sample)
    return counter.get_total_flops() / 2


def check_fits(model: nn.Module, sample: torch.Tensor, num_classes: int, name: str) -> None:
    """InputError (one line, naming 'model.name') unless ``model`` maps one input
    ``sample`` (the data's own, batch of 1) to (1, num_classes) logits: a model and data
    that do not fit are refused before any training, whichever model it is."""
    try:
        with torch.no_grad():
            out = model(sample)
    except (RuntimeError, ValueError, TypeError, IndexError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"'model.name' = {name!r} does not fit the data's inputs (shape "
                         f"{tuple(sample.shape[1:])}, {str(sample.dtype).removeprefix('torch.')})"
                         f": {first}") from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (1, num_classes):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise InputError(f"'model.name' = {name!r} maps one input of the data to {got}, not "
                         f"(1, {num_classes}) logits for its {num_classes} classes")


@dataclass(frozen=True)
class ParamLayout:
    """Names and shapes of a module's parameters, in a fixed order, for flat vectors."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @staticmethod
    def of(module: nn.Module) -> ParamLayout:
        named = list(module.named_parameters())
        return ParamLayout(tuple(n for n, _ in named), tuple(tuple(p.shape) for _, p in named))

    @property
    def numel(self) -> int:
        return sum(math.prod(s) for s in self.shapes)

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views of ``flat`` (..., P) as a dict of (..., *shape) tensors."""
        lead = flat.shape[:-1]
        sizes = [math.prod(s) for s in self.shapes]
        parts = torch.split(flat, sizes, dim=-1)
        return {
            n: p.reshape(*lead, *s) for n, p, s in zip(self.names, parts, self.shapes, strict=True)
        }

    def flatten(self, params: dict[str, torch.Tensor], lead_dims: int = 0) -> torch.Tensor:
        """The inverse of :meth:`unflatten`: (..., P) from a dict of (..., *shape)."""
        return torch.cat([params[n].flatten(start_dim=lead_dims) for n in self.names], dim=-1)


def initial_params(module: nn.Module, seed: int, dtype: torch.dtype,
                   init: str = "pytorch") -> torch.Tensor:
    """A flat (P,) parameter vector from PyTorch's default initialisation, seeded explicitly;
    ``init="zeros"``: all zeros (the authors' linear model starts at W = 0)."""
    layout = ParamLayout.of(module)
    if init == "zeros":
        return torch.zeros(layout.numel, dtype=dtype)
    generator = torch.Generator().manual_seed(seed)
    shapes = dict(zip(layout.names, layout.shapes, strict=True))
    flat = []
    for name, shape in shapes.items():
        if isinstance(module, CharGRU):
            bound = module.init_bound(name)
        else:
            # PyTorch's default Conv/Linear init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for
            # weights (kaiming_uniform with a = sqrt(5)) and biases alike; a plug-in's
            # parameter without a sibling weight takes the fan-in of its own shape.
            weight = shapes.get(name.rsplit(".", 1)[0] + ".weight", shape)
            fan_in = math.prod(weight[1:])
            bound = 1.0 / math.sqrt(fan_in)
        flat.append((torch.rand(shape, generator=generator, dtype=torch.float64) * 2 - 1) * bound)
    return torch.cat([p.flatten() for p in flat]).to(dtype)
