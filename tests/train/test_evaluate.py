"""Batched evaluation equals a per-client computation, and streamed over clients made
on demand equals one pass over them held in memory."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from simfl.data import load_data
from simfl.rng import Streams
from simfl.scenario import DataConfig, SyntheticConfig, TrainConfig
from simfl.train.evaluate import evaluate_cohort
from simfl.train.local import LocalWork
from simfl.train.models import build_model, initial_params, relu_max_pool
from tests.conftest import make_cohort


def test_per_client_loss_and_error_match_a_loop() -> None:
    sizes = [3, 0, 10, 25]  # an empty client included
    data = make_cohort(sizes, (1, 28, 28), num_classes=62)
    model = build_model("convnet", (1, 28, 28), 62).double()
    params = initial_params(model, seed=3, dtype=torch.float64)
    result = evaluate_cohort(model, params, data, batch_size=7)  # chunks cross clients
    named = dict(zip([n for n, _ in model.named_parameters()],
                     torch.split(params, [p.numel() for p in model.parameters()]), strict=True))
    for k, n in enumerate(sizes):
        if n == 0:
            assert result.losses[k] == 0 and result.errors[k] == 0
            continue
        rows = slice(data.offsets[k], data.offsets[k + 1])
        logits = torch.func.functional_call(
            model, {name: t.view_as(p) for (name, t), p in
                    zip(named.items(), model.parameters(), strict=True)}, (data.x[rows],))
        loss = torch.nn.functional.cross_entropy(logits, data.y[rows]).item()
        error = (logits.argmax(1) != data.y[rows]).double().mean().item()
        np.testing.assert_allclose(result.losses[k], loss, rtol=1e-12)
        np.testing.assert_allclose(result.errors[k], error, rtol=1e-12)
    np.testing.assert_array_equal(result.num_samples, sizes)


def test_the_evaluation_pooling_gives_max_pool2d_s_values_exactly() -> None:
    """Without autograd on a CPU, relu_max_pool takes a strided maximum instead of
    max_pool2d (faster); its values are the same to the bit, ties, zeros and all-negative
    windows included, and so are the ConvNet's logits."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 32, 24, 24, generator=g).round(decimals=1)  # many ties
    x[0], x[1] = 0.0, -1.0  # all-zero and all-negative maps
    x[2, :, 1::2] = x[2, :, ::2]  # every window's rows tie
    with torch.no_grad():
        assert torch.equal(relu_max_pool(x), torch.max_pool2d(torch.relu(x), 2))
    model = build_model("convnet", (1, 28, 28), 62)
    images = torch.rand(40, 1, 28, 28, generator=g)
    with torch.no_grad():
        fast = model(images)
    assert torch.equal(fast, model(images).detach())  # autograd on: max_pool2d itself


def test_streamed_passes_equal_the_whole_population_pass_to_the_bit() -> None:
    """Devices made on demand, evaluated a chunk at a time (the evaluation) and for their
    losses alone (the bias oracle, LocalWork.losses), give the numbers of one pass over
    the whole population held in memory, whatever the chunk and batch sizes."""
    cfg = DataConfig(test_client_fraction=0.2, synthetic=SyntheticConfig(
        num_clients=60, dim=12, num_classes=4, shared_model=3.0, tail_share=0.3,
        tail_shift=2.0, on_demand=True))
    data = load_data(cfg, Streams(5))
    model = build_model("linear", (12,), 4)
    params = initial_params(model, 1, torch.float32)
    for side in (data.train, data.test):
        whole = side.subset(np.arange(side.num_clients))  # today's pass: all in memory
        for batch_size in (7, 4096):
            expect = evaluate_cohort(model, params, whole, batch_size)
            for chunk_bytes in (48, 20_000):  # one device a chunk, a few
                streamed = dataclasses.replace(side, chunk_bytes=chunk_bytes)
                got = evaluate_cohort(model, params, streamed, batch_size)
                np.testing.assert_array_equal(got.losses, expect.losses)
                np.testing.assert_array_equal(got.errors, expect.errors)
                np.testing.assert_array_equal(got.num_samples, expect.num_samples)
                losses = evaluate_cohort(model, params, streamed, batch_size, errors=False)
                np.testing.assert_array_equal(losses.losses, expect.losses)
                assert np.isnan(losses.errors).all()
    work = LocalWork(model, data, TrainConfig(), 0.0, 64, Streams(5))
    oracle = work.losses(params)  # every training device, as the bias oracle asks
    whole = data.train.subset(np.arange(data.train.num_clients))
    np.testing.assert_array_equal(oracle, evaluate_cohort(model, params, whole, 64).losses)
    cohort = np.array([9, 2, 30])
    np.testing.assert_array_equal(work.losses(params, cohort), oracle[cohort])


def test_class_major_losses_are_cross_entropy_s() -> None:
    """The log-softmax over a (C, B) copy gives cross_entropy's losses (within float32
    rounding; the errors are computed alike), whole or streamed."""
    cfg = DataConfig(test_client_fraction=0.2, synthetic=SyntheticConfig(
        num_clients=60, dim=12, num_classes=4, shared_model=3.0, on_demand=True))
    data = load_data(cfg, Streams(2))
    model = build_model("linear", (12,), 4)
    params = initial_params(model, 3, torch.float32) * 20  # confident: losses from 1e-6 up
    whole = data.train.subset(np.arange(data.train.num_clients))
    expect = evaluate_cohort(model, params, whole, 100)
    got = evaluate_cohort(model, params, whole, 100, class_major=True)
    np.testing.assert_allclose(got.losses, expect.losses, rtol=1e-5)
    np.testing.assert_array_equal(got.errors, expect.errors)
    streamed = dataclasses.replace(data.train, chunk_bytes=500)
    work = LocalWork(model, data, TrainConfig(), 0.0, 100, Streams(2), class_major=True)
    np.testing.assert_array_equal(work.losses(params), got.losses)
    np.testing.assert_array_equal(work.evaluate(params, streamed).losses, got.losses)
