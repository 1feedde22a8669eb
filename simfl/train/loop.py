"""The loop backend: one client after the other, as one would write it by hand.

Each client trains a copy of the module: its parameters loaded from the flat global
vector once, ordinary autograd on the module, the SGD step in place on its
parameters (w ← (1 − lr (l2 + μ)) w − lr ∇CE + lr μ w_t, the objective of
simfl.train.batched), the result read back once. It is the reference the batched
kernels are tested against, and what ``auto`` picks where it is faster.

On a CPU a convolutional model of known layers (simfl's ConvNets, an ``nn.Sequential``
the stacked kernels know) trains in the channels-last memory format, as PyTorch's
performance tuning guide advises for convolutions: oneDNN's convolutions take it
without reordering, and 2×2 max-pooling's channels-last kernel is vectorised over the
channels (a ConvNet round of 100 FEMNIST writers: 4.59 s against the bare contiguous
loop's 5.77, docs/runs/speed/round_speed.md). The same values up to float rounding.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from simfl.data.packed import ClientData
from simfl.train.models import ParamLayout
from simfl.train.plan import BatchPlan, TrainHParams
from simfl.train.stacked import stacked_program
from simfl.train.steps import as_inputs, autocast
from simfl.train.updates import FRESH, DeltaBuffers


class LoopTrainer:
    """The loop backend: each client trains a copy of the module, its parameters loaded
    from the flat global vector once and read back once."""

    def __init__(self, model: nn.Module, global_params: torch.Tensor, clients: ClientData,
                 hp: TrainHParams, plan: BatchPlan) -> None:
        device, self.dtype = global_params.device, global_params.dtype
        self.module = copy.deepcopy(model).to(device=device, dtype=self.dtype)
        self.channels_last = device.type == "cpu" and _convolutions_known(model)
        if self.channels_last:
            self.module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self.layout = ParamLayout.of(model)
        named = dict(self.module.named_parameters())
        self.params = [named[n].requires_grad_(True) for n in self.layout.names]
        self.start = list(self.layout.unflatten(global_params).values())
        self.global_params, self.hp, self.plan = global_params, hp, plan
        self.x, self.y = clients.x, clients.y.to(device)
        self.counts = plan.mask.sum(dim=2).tolist()  # (K, S) real samples per minibatch

    def client(self, k: int, steps: int) -> torch.Tensor:
        """Client ``k``'s first ``steps`` steps from the global model: the sum of their
        minibatch losses; its parameters are left in the module's."""
        hp, decay = self.hp, self.hp.l2 + self.hp.prox_mu
        with torch.no_grad():
            for p, start in zip(self.params, self.start, strict=True):
                p.copy_(start)
        total = torch.zeros((), dtype=self.dtype, device=self.global_params.device)
        for s in range(steps):
            rows = self.plan.rows[k, s, : self.counts[k][s]].to(self.y.device)
            xb = as_inputs(self.x[rows], self.dtype)
            if self.channels_last and xb.dim() == 4:
                xb = xb.contiguous(memory_format=torch.channels_last)
            with autocast(hp, self.y.device):
                logits = self.module(xb)
            loss = functional.cross_entropy(logits.float() if hp.precision == "bf16"
                                            else logits, self.y[rows])
            grads = torch.autograd.grad(loss, self.params)
            with torch.no_grad():
                for p, g, start in zip(self.params, grads, self.start, strict=True):
                    if decay:  # w ← (1 − lr·decay) w − lr g + lr μ w_t
                        p.mul_(1 - hp.lr * decay)
                    p.sub_(g, alpha=hp.lr)
                    if hp.prox_mu:
                        p.add_(start, alpha=hp.lr * hp.prox_mu)
            total += loss.detach()
        return total

    def run(self, buffers: DeltaBuffers | None = None) -> tuple[torch.Tensor, np.ndarray]:
        """Every client's delta (K, P), in ``buffers`` if given, and mean minibatch loss (K,)."""
        num_steps = self.plan.num_steps.tolist()
        deltas = (buffers or FRESH).empty(len(num_steps), self.layout.numel, self.global_params)
        totals = self.global_params.new_zeros(len(num_steps))
        for k, steps in enumerate(num_steps):
            totals[k] = self.client(k, steps)
            with torch.no_grad():
                torch.cat([p.flatten() for p in self.params], out=deltas[k])
        deltas -= self.global_params
        return deltas, totals.cpu().numpy() / np.maximum(self.plan.num_steps, 1)


def _convolutions_known(model: nn.Module) -> bool:
    """Whether ``model`` has a 2-D convolution and only layers the stacked kernels know
    (simfl.train.stacked), which all take channels-last images: a plug-in's own module
    might ``view`` them as if they were contiguous."""
    return (stacked_program(model) is not None
            and any(isinstance(m, nn.Conv2d) for m in model.modules()))
