"""A cohort's forward pass on stacked parameters, written with batched kernels.

Each parameter of the m running clients is one tensor (m, *shape); a minibatch is
(m, B, *input_shape). The forward pass runs every client's model at
once with kernels that take the client axis as a batch axis:

* ``nn.Linear``: ``torch.baddbmm`` of (m, B, in) and the weights' (m, in, out) view;
* ``nn.Conv2d``: one grouped convolution, the clients folded into the channels:
  input (B, m·C, H, W) with channel k·C + c client k's channel c, weight
  (m·O, C/g, kh, kw) and ``groups = m·g`` (client k's group j is group k·g + j), so
  output channel k·O + o is client k's channel o. Activations stay in this
  "grouped" layout from one convolution to the next; on a CPU in the channels-last
  memory format (as simfl.train.loop: oneDNN takes it without reordering, and the
  max-pools after it are vectorised over the channels);
* parameter-free layers that act on each channel of each sample alone (activations,
  eval-mode dropout, 2-D max / average / adaptive pooling, ``nn.Identity``): on the
  grouped tensor as it is, or on the (m·B, ...) view of the per-client one;
* ``nn.Flatten``: on the per-client layout (m, B, ...), shifted by the client axis;
* ``nn.Embedding``: a gather from the (m·V, D) table with client k's indices + k·V;
* :class:`~simfl.train.models.CharGRU`: its cell with ``bmm`` of (m, B, H) and the
  clients' (m, H, 3H) recurrent weights.

Clients are independent, so the gradient of the sum over clients of their losses
is, slice by slice, each client's own gradient: one ``torch.autograd.grad`` gives
exactly what ``vmap(grad(loss))`` gives (He and Zou, functorch, 2021; PyTorch's
model-ensembling tutorial), without its per-operator batching rules. It is taken
with respect to the stacked leaves and, for each linear layer, its output z: the
layer's weight gradient (∂L/∂z)ᵀx is never formed, its weight moves in one fused
``baddbmm_`` (simfl.train.steps), which saves writing and reading back an
(m, out, in) tensor a step — for an MLP that traffic, not the arithmetic, is what
a cohort-wide step costs beyond the per-client loop's cached weights.

:func:`stacked_program` recognises the modules it has kernels for — ``nn.Sequential``
compositions of the layers above (nested ones too), simfl's ``LinearSoftmax``,
``ConvNet``, ``SmallCNN`` and ``CharGRU`` — by their exact types and settings;
anything else (a subclass, a layer with options the kernels do not reproduce, a
training-mode dropout, a module used twice) gives None, and training falls back to
``vmap``. Tested equal to the per-client loop in float64 (tests/train/test_stacked.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional

from simfl.train.models import CharGRU, ConvNet, LinearSoftmax, ParamLayout, SmallCNN

# Parameter-free layers that act on each sample's channels one by one: what they give
# does not depend on how samples and clients share the leading axes.
PER_CHANNEL = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid,
               nn.Softplus, nn.Identity, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d,
               nn.AdaptiveMaxPool2d)
Params = dict[str, torch.Tensor]  # name -> (m, *shape)


@dataclass(frozen=True)
class Tap:
    """A linear layer's input (m, N, in) and output z (m, N, out) in one step: its weight
    moves by −lr ∂L/∂zᵀ x in one fused ``baddbmm_`` (simfl.train.steps), so autograd never
    forms the (m, out, in) weight gradient."""

    weight: str
    bias: str | None
    x: torch.Tensor
    z: torch.Tensor


class _Act:
    """The running clients' activations: per client (m, B, ...) or, between convolutions,
    grouped (B, m·C, H, W); with the step's tape of linear layers."""

    def __init__(self, t: torch.Tensor, m: int, tape: list[Tap], grouped: bool = False) -> None:
        self.t, self.m, self.tape, self.grouped = t, m, tape, grouped

    def then(self, t: torch.Tensor, grouped: bool = False) -> _Act:
        return _Act(t, self.m, self.tape, grouped)

    def per_client(self) -> torch.Tensor:
        if not self.grouped:
            return self.t
        b, mc = self.t.shape[:2]
        return self.t.view(b, self.m, mc // self.m, *self.t.shape[2:]).transpose(0, 1)

    def as_grouped(self) -> torch.Tensor:
        if self.grouped:
            return self.t
        x = self.per_client()  # (m, B, C, H, W)
        if x.dim() != 5:
            raise ValueError(f"a Conv2d needs (B, C, H, W) inputs per client, got "
                             f"{tuple(x.shape[1:])}")
        return x.transpose(0, 1).reshape(x.shape[1], self.m * x.shape[2], *x.shape[3:])


Op = Callable[[_Act, Params], _Act]


def _linear(weight: str, bias: str | None) -> Op:
    """z = x Wᵀ + b per client: ``baddbmm`` of (m, N, in) and (m, in, out), on the tape."""

    def linear(a: _Act, params: Params) -> _Act:
        x = a.per_client()  # (m, B, ..., in)
        x3, wt = x.reshape(a.m, -1, x.shape[-1]), params[weight].transpose(1, 2)
        z = (torch.bmm(x3, wt) if bias is None
             else torch.baddbmm(params[bias].unsqueeze(1), x3, wt))
        if not z.requires_grad:  # the first layer with parameters: z is a leaf
            z.requires_grad_(True)
        a.tape.append(Tap(weight, bias, x3.detach(), z))
        return a.then(z.view(*x.shape[:-1], wt.shape[2]))

    return linear


def _conv(module: nn.Conv2d, weight: str, bias: str | None) -> Op:
    def conv(a: _Act, params: Params) -> _Act:
        w, m = params[weight], a.m
        x, w = a.as_grouped(), w.reshape(m * w.shape[1], *w.shape[2:])
        if x.device.type == "cpu":
            x, w = (t.contiguous(memory_format=torch.channels_last) for t in (x, w))
        y = functional.conv2d(x, w,
                              None if bias is None else params[bias].reshape(-1),
                              module.stride, module.padding, module.dilation,
                              m * module.groups)
        return a.then(y, grouped=True)

    return conv


def _per_channel(module: nn.Module) -> Op:
    def apply(a: _Act, params: Params) -> _Act:
        if a.grouped:
            return a.then(module(a.t), grouped=True)
        return a.then(module(a.t.flatten(0, 1)).unflatten(0, a.t.shape[:2]))

    return apply


def _flatten(start: int, end: int) -> Op:
    def apply(a: _Act, params: Params) -> _Act:
        return a.then(a.per_client().flatten(start + 1, end + 1 if end >= 0 else end))

    return apply


def _embedding(weight: str) -> Op:
    def embedding(a: _Act, params: Params) -> _Act:
        x, w = a.per_client(), params[weight]  # (m, B, ...) indices, (m, V, D)
        m, vocab = w.shape[:2]
        offsets = torch.arange(m, device=x.device).mul_(vocab).view(m, *([1] * (x.dim() - 1)))
        return a.then(functional.embedding(x + offsets, w.reshape(m * vocab, -1)))

    return embedding


@dataclass(frozen=True)
class _Op:
    """One layer: ``run(act, params)``, reading the parameters ``names``; ``fused``: a
    linear layer (its parameters move through its tap)."""

    run: Op
    names: tuple[str, ...] = ()
    fused: bool = False


def _layer_ops(module: nn.Module, prefix: str) -> list[_Op] | None:
    """The ops of one module of a Sequential, or None if the kernels do not know it."""
    kind = type(module)
    if type(module) is nn.Sequential:
        # _modules, not named_children: a module listed twice runs twice
        ops = [_layer_ops(child, f"{prefix}{name}.") if child is not None else None
               for name, child in module._modules.items()]
        return None if any(o is None for o in ops) else [op for o in ops for op in o or []]
    weight = f"{prefix}weight"
    bias = f"{prefix}bias" if getattr(module, "bias", None) is not None else None
    names = (weight,) if bias is None else (weight, bias)
    if type(module) is nn.Linear:
        return [_Op(_linear(weight, bias), names, fused=True)]
    if type(module) is nn.Conv2d and module.padding_mode == "zeros":
        return [_Op(_conv(module, weight, bias), names)]
    if kind in PER_CHANNEL and not getattr(module, "return_indices", False):
        return [_Op(_per_channel(module))]
    if type(module) is nn.Dropout and (not module.training or module.p == 0):
        return []
    if type(module) is nn.Flatten and module.start_dim >= 1:
        return [_Op(_flatten(module.start_dim, module.end_dim))]
    if (type(module) is nn.Embedding and module.padding_idx is None and module.max_norm is None
            and not module.scale_grad_by_freq and not module.sparse):
        return [_Op(_embedding(weight), (weight,))]
    return None


def _convnet_ops(model: ConvNet | SmallCNN) -> list[_Op]:
    """ConvNet / SmallCNN as layers: each conv then ReLU and a 2×2 max-pool (where the
    model pools), SmallCNN's average-pool to 2×2, flatten, the linear layer."""
    pools = [True, True] if isinstance(model, ConvNet) else model.pools
    ops = []
    for name, pool in zip(("conv1", "conv2"), pools, strict=True):
        names = (f"{name}.weight", f"{name}.bias")
        ops += [_Op(_conv(getattr(model, name), *names), names), _Op(_per_channel(nn.ReLU()))]
        ops += [_Op(_per_channel(nn.MaxPool2d(2)))] if pool else []
    if isinstance(model, SmallCNN):
        ops.append(_Op(_per_channel(nn.AdaptiveAvgPool2d(2))))
    return [*ops, _Op(_flatten(1, -1)),
            _Op(_linear("fc.weight", "fc.bias"), ("fc.weight", "fc.bias"), fused=True)]


def _char_gru(model: CharGRU) -> Callable[[Params, torch.Tensor, list[Tap]], torch.Tensor]:
    """CharGRU's forward (PyTorch's GRU equations, gates r, z, n) for stacked clients."""
    hidden, fc = model.hidden, _linear("fc.weight", "fc.bias")

    def forward(params: Params, x: torch.Tensor, tape: list[Tap]) -> torch.Tensor:
        w_ih, w_hh = params["weight_ih"], params["weight_hh"]  # (m, 3H, V), (m, 3H, H)
        m, b, steps = x.shape
        table = w_ih.transpose(1, 2).reshape(-1, 3 * hidden)  # (m·V, 3H): one-hot · W_ihᵀ
        offsets = torch.arange(m, device=x.device).mul_(w_ih.shape[2]).view(m, 1, 1)
        gates_x = functional.embedding(x.long() + offsets, table) \
            + params["bias_ih"].view(m, 1, 1, -1)  # (m, B, T, 3H)
        h = gates_x.new_zeros(m, b, hidden)
        w_hh_t, b_hh = w_hh.transpose(1, 2), params["bias_hh"].unsqueeze(1)
        for t in range(steps):
            gx = gates_x[:, :, t].chunk(3, dim=2)
            gh = torch.baddbmm(b_hh, h, w_hh_t).chunk(3, dim=2)
            r = torch.sigmoid(gx[0] + gh[0])
            z = torch.sigmoid(gx[1] + gh[1])
            n = torch.tanh(gx[2] + r * gh[2])
            h = (1 - z) * n + z * h
        return fc(_Act(h, m, tape), params).t

    return forward


@dataclass(frozen=True)
class StackedProgram:
    """A module's forward pass for stacked clients: ``forward(params, x, tape)`` maps
    params (m, *shape) by name and x (m, B, *input) to (m, B, C) logits, appending a
    :class:`Tap` per linear layer to ``tape``; ``fused`` names those layers' parameters
    (the others are autograd leaves)."""

    forward: Callable[[Params, torch.Tensor, list[Tap]], torch.Tensor]
    fused: frozenset[str]


def relu_mlp(model: nn.Module) -> list[tuple[str, str | None]] | None:
    """The (weight, bias) names of ``model``'s linear layers if it is exactly a ReLU MLP:
    an ``nn.Sequential`` (nested ones too) of ``nn.Flatten(1, -1)`` first, then
    ``nn.Linear`` layers with an ``nn.ReLU`` between each two, eval-mode dropout and
    ``nn.Identity`` anywhere; else None. Such a model has its backward pass written out
    by hand (simfl.train.steps), with no autograd."""
    if type(model) is not nn.Sequential:
        return None
    modules: list[tuple[str, nn.Module]] = []

    def walk(seq: nn.Sequential, prefix: str) -> None:
        for name, child in seq._modules.items():  # a module listed twice runs twice
            if type(child) is nn.Sequential:
                walk(child, f"{prefix}{name}.")
            elif not (type(child) is nn.Identity or type(child) is nn.Dropout
                      and (not child.training or child.p == 0)):
                modules.append((f"{prefix}{name}.", child))

    walk(model, "")
    kinds = [type(module) for _, module in modules]
    first = modules[0][1] if modules else None
    if (type(first) is not nn.Flatten or (first.start_dim, first.end_dim) != (1, -1)
            or kinds[1::2] != [nn.Linear] * len(kinds[1::2]) or len(kinds) % 2
            or kinds[2::2] != [nn.ReLU] * len(kinds[2::2])):
        return None
    layers: list[tuple[str, str | None]] = [
        (f"{prefix}weight", f"{prefix}bias" if module.bias is not None else None)
        for prefix, module in modules[1::2]]
    names = [n for layer in layers for n in layer if n is not None]
    return layers if sorted(names) == sorted(ParamLayout.of(model).names) else None


def stacked_program(model: nn.Module) -> StackedProgram | None:
    """``model``'s :class:`StackedProgram`, or None where the kernels do not know the
    module (detected by exact type and settings, never guessed) or the ops do not use
    every parameter."""
    ops: list[_Op] | None
    if type(model) is CharGRU:
        return StackedProgram(_char_gru(model), frozenset({"fc.weight", "fc.bias"}))
    if type(model) is LinearSoftmax:  # under bf16, where its closed-form step is not used
        ops = [_Op(_flatten(1, -1)), *(_layer_ops(model.fc, "fc.") or [])]
    elif type(model) is ConvNet or type(model) is SmallCNN:
        ops = _convnet_ops(model)
    elif type(model) is nn.Sequential:
        ops = _layer_ops(model, "")
    else:
        return None
    if ops is None or {n for op in ops for n in op.names} != set(ParamLayout.of(model).names):
        return None

    def forward(params: Params, x: torch.Tensor, tape: list[Tap]) -> torch.Tensor:
        act = _Act(x, x.shape[0], tape)
        for op in ops:
            act = op.run(act, params)
        return act.per_client()

    return StackedProgram(forward, frozenset(n for op in ops if op.fused for n in op.names))
