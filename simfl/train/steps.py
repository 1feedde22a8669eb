"""One SGD step of a cohort's running clients, in place, on stacked parameters.

Every step minimises the local objective of simfl.train.batched: the masked mean
cross-entropy of each client's minibatch (padded entries weigh 0), plus (l2 / 2)‖w‖²
and FedProx's (μ / 2)‖w − w_t‖² (Li et al., MLSys 2020), whose gradients
l2 w + μ (w − w_t) are added in closed form. :func:`batched_step` picks, first that
applies: the closed-form gradient of :class:`LinearSoftmax`, the batched kernels of
:mod:`simfl.train.stacked`, or ``torch.func``'s ``vmap(grad(loss))``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional

from simfl.train.models import LinearSoftmax
from simfl.train.plan import TrainHParams
from simfl.train.stacked import Params, StackedProgram, Tap, relu_mlp, stacked_program

# (running params (m, *shape) by name, x (m, B, *input), y (m, B), mask (m, B), global
# params by name) -> (m,) data losses; the params are updated in place
Step = Callable[[Params, torch.Tensor, torch.Tensor, torch.Tensor, Params], torch.Tensor]


def autocast(hp: TrainHParams, device: torch.device) -> torch.autocast:
    """A bfloat16 autocast of the forward pass where ``hp.precision`` is bf16."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=hp.precision == "bf16")


def as_inputs(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Samples in the training dtype; integer ones (indices for an embedding) as they are."""
    return x.to(dtype) if x.is_floating_point() else x


def batched_step(model: nn.Module, hp: TrainHParams) -> tuple[Step, str]:
    """The batched SGD step for ``model`` and its kernel's name: ``linear`` (closed form),
    ``mlp`` (a ReLU MLP's backward pass by hand), ``stacked`` (simfl.train.stacked) or
    ``vmap``."""
    if type(model) is LinearSoftmax and hp.precision != "bf16":  # a ReLU MLP of one layer
        bias = "fc.bias" if model.fc.bias is not None else None
        return _mlp_sgd_step([("fc.weight", bias)], hp), "linear"
    layers = relu_mlp(model) if hp.precision != "bf16" else None
    if layers is not None:
        return _mlp_sgd_step(layers, hp), "mlp"
    program = stacked_program(model)
    if program is not None:
        return _stacked_sgd_step(program, hp), "stacked"
    return _vmap_sgd_step(model, hp), "vmap"


def _masked_mean(per_sample: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(m,) each client's mean over its real samples of (m, B) values."""
    weights = mask.to(per_sample.dtype)
    return (per_sample * weights).sum(dim=-1) / weights.sum(dim=-1).clamp(min=1)


def _sgd_update(params: Params, grads: Sequence[torch.Tensor], global_params: Params,
                hp: TrainHParams) -> None:
    """w ← (1 − lr (l2 + μ)) w − lr g + lr μ w_t for every running client, in place."""
    decay = hp.l2 + hp.prox_mu
    with torch.no_grad():
        for (name, p), g in zip(params.items(), grads, strict=True):
            if decay:
                p.mul_(1 - hp.lr * decay)
            p.sub_(g, alpha=hp.lr)
            _prox(p, global_params[name], hp)


def _stacked_sgd_step(program: StackedProgram, hp: TrainHParams) -> Step:
    """One SGD step of every running client, in place: the stacked forward pass, then one
    ``autograd.grad`` of Σ_k (data loss of client k) w.r.t. the stacked leaves and the
    linear layers' outputs z (client k's slice of it is its own gradient). A linear
    layer's weight then moves by −lr (∂L/∂z)ᵀ x in one ``baddbmm_`` (its gradient is never
    stored; bias: −lr Σ_rows ∂L/∂z), the other parameters by −lr g; ℓ2 and FedProx in
    closed form."""
    bf16, decay = hp.precision == "bf16", hp.l2 + hp.prox_mu

    def step(params, x, y, mask, global_params):  # noqa: ANN001, ANN202
        leaves = {n: p if n in program.fused else p.detach().requires_grad_(True)
                  for n, p in params.items()}
        free = {n: params[n] for n in params if n not in program.fused}
        tape: list[Tap] = []
        with autocast(hp, x.device):
            logits = program.forward(leaves, x, tape)  # (m, B, C)
        per_sample = functional.cross_entropy(
            (logits.float() if bf16 else logits).flatten(0, 1), y.flatten(), reduction="none")
        data_loss = _masked_mean(per_sample.view(y.shape), mask)  # (m,)
        grads = torch.autograd.grad(data_loss.sum(),
                                    [leaves[n] for n in free] + [tap.z for tap in tape])
        _sgd_update(free, grads[:len(free)], global_params, hp)
        with torch.no_grad():
            for tap, dz in zip(tape, grads[len(free):], strict=True):
                weight = params[tap.weight]
                weight.baddbmm_(dz.transpose(1, 2).to(weight.dtype), tap.x.to(weight.dtype),
                                beta=1 - hp.lr * decay, alpha=-hp.lr)
                _prox(weight, global_params[tap.weight], hp)
                if tap.bias is not None:
                    bias = params[tap.bias]
                    if decay:
                        bias.mul_(1 - hp.lr * decay)
                    bias.sub_(dz.sum(dim=1).to(bias.dtype), alpha=hp.lr)
                    _prox(bias, global_params[tap.bias], hp)
        return data_loss.detach()

    return step


def _prox(p: torch.Tensor, start: torch.Tensor, hp: TrainHParams) -> None:
    """FedProx's pull + lr μ w_t, the rest of the step's μ (w − w_t) being in its decay."""
    if hp.prox_mu:
        p.add_(start, alpha=hp.lr * hp.prox_mu)


def _vmap_sgd_step(model: nn.Module, hp: TrainHParams) -> Step:
    """One SGD step of every running client, in place: ``vmap(grad(data loss))`` over the
    clients, through ``functional_call`` (any module); ℓ2 and FedProx in closed form."""
    bf16 = hp.precision == "bf16"

    def loss_fn(params, x, y, mask):  # noqa: ANN001, ANN202
        with autocast(hp, x.device):
            logits = functional_call(model, params, (x,))
        per_sample = functional.cross_entropy(logits.float() if bf16 else logits, y,
                                              reduction="none")
        loss = _masked_mean(per_sample, mask)
        return loss, loss.detach()

    step_grad = vmap(grad(loss_fn, has_aux=True))

    def step(params, x, y, mask, global_params):  # noqa: ANN001, ANN202
        grads, data_loss = step_grad(params, x, y, mask)
        _sgd_update(params, [grads[name] for name in params], global_params, hp)
        return data_loss

    return step


def _mlp_sgd_step(layers: list[tuple[str, str | None]], hp: TrainHParams) -> Step:
    """One SGD step of every running client of a ReLU MLP (simfl.train.stacked.relu_mlp),
    in place, with the backward pass written out by hand: no autograd and its
    bookkeeping (a round's times with this kernel and with the stacked kernels'
    autograd are in docs/runs/speed/round_speed.md).

    Forward: a_0 = x flattened, z_i = a_(i−1) W_iᵀ + b_i (``baddbmm``), a_i = relu(z_i);
    the last z is the logits. Backward: G = ω ⊙ (softmax(z) − onehot(y)) (masked weights
    ω_i = mask_i / max(Σ mask, 1)), then from the last layer down: the input gradient
    G W_i with the old W_i, W_i moved by −lr Gᵀ a_(i−1) in one fused ``baddbmm_`` (with
    ℓ2 and FedProx as in the stacked step), b_i by −lr Σ_rows G, and G ← (G W_i) ⊙
    [a_(i−1) > 0]: ATen's ``threshold_backward``, autograd's own ReLU backward (zero
    where the output is not positive). The chain rule of backpropagation (Rumelhart,
    Hinton and Williams, Nature 1986). With one layer this is :class:`LinearSoftmax`'s
    step: the data loss's gradient is (Gᵀx, Σ_i G_i) in closed form. Tested equal to
    the loop in float64 (tests/train/test_stacked.py, tests/train/test_batched.py)."""
    decay = hp.l2 + hp.prox_mu

    def step(params, x, y, mask, global_params):  # noqa: ANN001, ANN202
        inputs = [x.flatten(start_dim=2)]  # (m, B, D): each layer's input a_(i−1)
        for i, (weight, bias) in enumerate(layers):
            wt = params[weight].transpose(1, 2)
            z = (torch.bmm(inputs[-1], wt) if bias is None
                 else torch.baddbmm(params[bias].unsqueeze(1), inputs[-1], wt))
            inputs.append(z.relu_() if i < len(layers) - 1 else z)
        g, data_loss = _softmax_grad(inputs.pop(), y, mask)
        for i in range(len(layers) - 1, -1, -1):
            weight, bias = params[layers[i][0]], layers[i][1]
            below = torch.bmm(g, weight) if i else None  # with W_i before its update
            weight.baddbmm_(g.transpose(1, 2), inputs[i], beta=1 - hp.lr * decay,
                            alpha=-hp.lr)
            _prox(weight, global_params[layers[i][0]], hp)
            if bias is not None:
                params[bias].mul_(1 - hp.lr * decay).sub_(g.sum(dim=1), alpha=hp.lr)
                _prox(params[bias], global_params[bias], hp)
            if below is not None:  # ReLU's backward, as autograd computes it
                g = torch.ops.aten.threshold_backward(below, inputs[i], 0)
        return data_loss

    return step


def _softmax_grad(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """G = ω ⊙ (softmax(z) − onehot(y)) (m, B, C), the gradient of the clients' data
    losses Σ_i ω_i CE(z_i, y_i) with respect to their logits z (m, B, C), and those
    (m,) losses; ω_i = mask_i / max(Σ mask, 1), so padded rows weigh 0."""
    log_p = torch.log_softmax(logits, dim=2)
    w = mask.to(logits.dtype)
    w = w / w.sum(dim=1, keepdim=True).clamp(min=1)  # (m, B)
    nll = -log_p.gather(2, y.unsqueeze(2)).squeeze(2)
    g = log_p.exp().scatter_add_(2, y.unsqueeze(2), -torch.ones_like(nll).unsqueeze(2))
    g.mul_(w.unsqueeze(2))
    return g, (nll * w).sum(dim=1)
