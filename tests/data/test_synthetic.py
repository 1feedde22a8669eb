"""LEAF's synthetic(alpha, beta): shapes, determinism, per-client streams, heterogeneity;
made on demand: the same samples however asked for, its split, its memory."""

from __future__ import annotations

import dataclasses
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
import torch

from simfl.cli import main
from simfl.data import load_data
from simfl.data.packed import FederatedData
from simfl.data.synthetic import (
    MAX_SAMPLES_PER_CLIENT,
    SyntheticDevices,
    generate,
    label_models,
    mean_samples,
    memory_terms,
    tail_members,
)
from simfl.errors import InputError
from simfl.rng import Streams
from simfl.scenario import DataConfig, SyntheticConfig, TrainConfig
from simfl.train.local import LocalWork
from simfl.train.models import build_model, initial_params
from tests.test_cli import SMALL


def load(seed: int = 0, **synthetic: Any) -> FederatedData:
    cfg = DataConfig(synthetic=SyntheticConfig(**synthetic))
    return load_data(cfg, Streams(seed))


def test_shapes_sizes_and_standardisation() -> None:
    data = load(num_clients=30, dim=20, num_classes=5)
    assert data.name == "synthetic" and data.num_classes == 5 and data.input_shape == (20,)
    assert data.train.num_clients == data.test.num_clients == 15
    for side in (data.train, data.test):
        assert str(side.x.dtype) == "torch.float32" and str(side.y.dtype) == "torch.int64"
        assert side.x.shape[0] == side.y.shape[0] == side.offsets[-1]
        assert side.num_samples.min() >= 50 and side.num_samples.max() <= MAX_SAMPLES_PER_CLIENT
        assert int(side.y.min()) >= 0 and int(side.y.max()) < 5
    np.testing.assert_allclose(data.train.x.mean(0).numpy(), 0, atol=1e-5)
    np.testing.assert_allclose(data.train.x.std(0, correction=0).numpy(), 1, atol=1e-5)


def test_same_seed_same_data_other_seed_other_data() -> None:
    a, b = load(seed=4, num_clients=10), load(seed=4, num_clients=10)
    c = load(seed=5, num_clients=10)
    assert (a.train.x == b.train.x).all() and (a.test.y == b.test.y).all()
    assert a.train.client_ids.tolist() == b.train.client_ids.tolist()
    assert a.train.x.shape != c.train.x.shape or not (a.train.x == c.train.x).all()


def test_adding_clients_does_not_change_earlier_clients() -> None:
    few = generate(SyntheticConfig(num_clients=5), Streams(1))
    many = generate(SyntheticConfig(num_clients=12), Streams(1))
    assert (many.offsets[:6] == few.offsets).all()
    assert (many.x[: few.offsets[-1]] == few.x).all() and (many.y[: few.offsets[-1]] == few.y).all()


def test_clients_have_different_label_distributions() -> None:
    clients = generate(SyntheticConfig(num_clients=20, alpha=1.0, beta=1.0), Streams(0))
    histograms = np.stack(
        [
            np.bincount(
                clients.y[clients.offsets[k] : clients.offsets[k + 1]].numpy(), minlength=10
            )
            for k in range(clients.num_clients)
        ]
    ).astype(float)
    histograms /= histograms.sum(1, keepdims=True)
    majority = histograms.argmax(1)
    assert len(set(majority.tolist())) >= 3  # clients disagree on their most common label
    tv = 0.5 * np.abs(histograms[:, None] - histograms[None]).sum(-1)  # (K, K) total variation
    assert tv[np.triu_indices(len(tv), 1)].mean() > 0.5


def test_iid_limit_is_much_less_heterogeneous() -> None:
    """alpha = beta = 0 still differs per client (W_k, v_k ~ N(0, 1)), but less than (1, 1)."""

    def spread(alpha: float, beta: float) -> float:
        clients = generate(SyntheticConfig(num_clients=20, alpha=alpha, beta=beta), Streams(0))
        means = [
            clients.x[clients.offsets[k] : clients.offsets[k + 1]].mean(0).numpy()
            for k in range(20)
        ]
        return float(np.std(means, axis=0).mean())

    assert spread(0.0, 0.0) < spread(1.0, 3.0)


def test_a_large_shared_model_decides_the_labels() -> None:
    """With shared_model >> 1, y is almost always argmax(x W_0 + b_0) of the shared model."""
    cfg = SyntheticConfig(num_clients=20, alpha=1.0, beta=1.0, shared_model=100.0)
    clients = generate(cfg, Streams(0))
    shared = Streams(0).numpy("synthetic_shared")
    weights = shared.normal(0.0, 100.0, (cfg.dim, cfg.num_classes))
    bias = shared.normal(0.0, 100.0, cfg.num_classes)
    x = clients.x.double().numpy()
    agree = (np.argmax(x @ weights + bias, axis=1) == clients.y.numpy()).mean()
    assert agree > 0.95
    leaf = generate(SyntheticConfig(num_clients=20, shared_model=0.0), Streams(0))
    assert (np.argmax(leaf.x.double().numpy() @ weights + bias, axis=1)
            == leaf.y.numpy()).mean() < 0.5


def test_without_a_tail_the_data_is_unchanged() -> None:
    """tail_share = 0 draws nothing more: tail_shift alone changes no sample."""
    base = generate(SyntheticConfig(num_clients=15, shared_model=3.0), Streams(2))
    same = generate(SyntheticConfig(num_clients=15, shared_model=3.0, tail_shift=5.0), Streams(2))
    assert (base.x == same.x).all() and (base.y == same.y).all()
    assert not tail_members(SyntheticConfig(num_clients=15), Streams(2)).any()


def test_tail_clients_follow_a_shifted_model_and_the_rest_are_unchanged() -> None:
    """Minority labels are argmax(x (W_0 + T) + b_0 + t); everyone's features and the
    majority's labels are those of the population without a tail."""
    plain = SyntheticConfig(num_clients=60, alpha=0.0, beta=0.0, shared_model=100.0)
    cfg = SyntheticConfig(num_clients=60, alpha=0.0, beta=0.0, shared_model=100.0,
                          tail_share=0.25, tail_shift=100.0)
    base, tailed = generate(plain, Streams(0)), generate(cfg, Streams(0))
    members = tail_members(cfg, Streams(0))
    assert 8 <= members.sum() <= 22  # Binomial(60, 0.25): 15 expected
    assert (base.offsets == tailed.offsets).all() and (base.x == tailed.x).all()
    rows = np.repeat(members, np.diff(tailed.offsets))
    assert (base.y[~rows] == tailed.y[~rows]).all()
    shared = Streams(0).numpy("synthetic_shared")
    weights, bias = shared.normal(0.0, 100.0, (cfg.dim, 10)), shared.normal(0.0, 100.0, 10)
    tail = Streams(0).numpy("synthetic_tail_model")
    tail_weights = weights + tail.normal(0.0, 100.0, (cfg.dim, 10))
    tail_bias = bias + tail.normal(0.0, 100.0, 10)
    x, y = tailed.x.double().numpy()[rows], tailed.y.numpy()[rows]
    assert (np.argmax(x @ tail_weights + tail_bias, axis=1) == y).mean() > 0.95
    assert (np.argmax(x @ weights + bias, axis=1) == y).mean() < 0.5


def test_tail_membership_is_per_client() -> None:
    few = tail_members(SyntheticConfig(num_clients=30, tail_share=0.3), Streams(1))
    many = tail_members(SyntheticConfig(num_clients=80, tail_share=0.3), Streams(1))
    assert (many[:30] == few).all() and 0 < many.sum() < 80


# --- made on demand ---

def on_demand(seed: int = 0, chunk_bytes: int | None = None, **synthetic: Any) -> FederatedData:
    """A population made on demand; ``chunk_bytes``: its chunks' size, on both sides."""
    data = load(seed, on_demand=True, **synthetic)
    if chunk_bytes is None:
        return data
    train, test = (dataclasses.replace(side, chunk_bytes=chunk_bytes)
                   for side in (data.train, data.test))
    return FederatedData(data.name, train, test, data.num_classes)


@pytest.mark.parametrize("dim", [60, 7])  # an odd dimension: a sample's last word half used
def test_a_device_alone_in_a_cohort_and_in_a_chunk_has_the_same_samples(dim: int) -> None:
    data = on_demand(num_clients=40, dim=dim, tail_share=0.3, tail_shift=2.0,
                     chunk_bytes=4000)
    for side in (data.train, data.test):
        everyone = np.arange(side.num_clients)
        whole = side.subset(everyone)
        chunked = list(side.chunks())
        assert len(chunked) > 3  # several chunks of a few devices
        assert torch.equal(torch.cat([c.x for c in chunked]), whole.x)
        assert torch.equal(torch.cat([c.y for c in chunked]), whole.y)
        order = np.random.default_rng(0).permutation(everyone)
        cohort = side.subset(order)
        for i, k in enumerate(order):
            alone = side.subset(np.array([k]))
            rows = slice(whole.offsets[k], whole.offsets[k + 1])
            assert torch.equal(alone.x, whole.x[rows]) and torch.equal(alone.y, whole.y[rows])
            assert torch.equal(cohort.x[cohort.offsets[i]:cohort.offsets[i + 1]], alone.x)
            assert torch.equal(cohort.y[cohort.offsets[i]:cohort.offsets[i + 1]], alone.y)
        assert (whole.num_samples == side.num_samples).all()
        assert whole.client_ids.tolist() == side.client_ids.tolist()


def made(devices: SyntheticDevices, keys: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The given devices' samples, made together."""
    n = int(devices.num_samples(np.array(keys)).sum())
    x, y = np.empty((n, devices.cfg.dim), np.float32), np.empty(n, np.int64)
    devices.make(np.array(keys), x, y)
    return x, y


def test_a_device_made_on_demand_is_a_function_of_the_seed_and_its_index() -> None:
    """Its samples do not depend on the population's size, nor on the devices made
    with it; another seed makes others."""

    def devices(seed: int, num_clients: int) -> SyntheticDevices:
        return SyntheticDevices(SyntheticConfig(num_clients=num_clients, tail_share=0.2,
                                                on_demand=True), Streams(seed), True)

    x, y = made(devices(3, 10), [7])
    with_others = devices(3, 500)
    n_before = int(with_others.num_samples(np.array([400, 2, 9])).sum())
    x2, y2 = made(with_others, [400, 2, 9, 7, 7, 1])
    rows = slice(n_before, n_before + len(x))
    assert x.dtype == np.float32 and (x == x2[rows]).all() and (y == y2[rows]).all()
    assert (x2[rows.stop:rows.stop + len(x)] == x).all()  # twice in one call: twice the same
    other = made(devices(4, 10), [7])[0]
    assert other.shape != x.shape or not (other == x).all()


def test_a_device_s_samples_are_the_documented_draws_of_its_stream() -> None:
    """Device k's count, tail draw, u_k, B_k, W_k, b_k, v_k and noise, taken from its
    stream's words as the module's docstring lays them out and computed again here in
    float64, give its samples."""
    cfg = SyntheticConfig(num_clients=50, dim=5, num_classes=3, alpha=0.5, beta=0.8,
                          shared_model=2.0, tail_share=0.5, tail_shift=3.0, on_demand=True)
    devices = SyntheticDevices(cfg, Streams(11), True)
    stream, (d, c) = devices.stream, (5, 3)
    shared, tail = label_models(cfg, Streams(11))
    std = np.sqrt(1 + 0.8**2 + np.arange(1, d + 1) ** -1.2)
    for k in (0, 13, 49):
        x, y = made(devices, [k])
        params = np.empty(2 * 13, np.float32)  # 3 + D C + C + D = 26 normals: words 1..13
        stream.normals(np.array([k]), 1, np.array([13]), params)
        z = params.astype(np.float64)
        n = min(int(min(np.exp(4 + 2 * z[0]), 1000)) + cfg.min_samples, 1000)
        weights, bias = tail if stream.uniforms(np.array([k]), 0)[0] < 0.5 else shared
        u, b_k = 0.5 * z[1], 0.8 * z[2]
        w_k, bias_k = u + z[3:3 + d * c].reshape(d, c), u + z[3 + d * c:3 + d * c + c]
        v_k = b_k + z[3 + d * c + c:]
        noise = np.empty(n * 6, np.float32)  # 3 words a sample (5 normals and one unused)
        stream.normals(np.array([k]), 14, np.array([3 * n]), noise)
        want_x = v_k + np.arange(1, d + 1) ** -0.6 * noise.reshape(n, 6)[:, :d]  # raw x
        np.testing.assert_allclose(x, want_x / std, rtol=0, atol=1e-5)
        logits = want_x @ (w_k + weights) + bias_k + bias
        clear = np.sort(logits, axis=1)[:, -1] - np.sort(logits, axis=1)[:, -2] > 1e-3
        assert len(y) == n and clear.mean() > 0.9
        assert (y[clear] == logits.argmax(axis=1)[clear]).all()


def test_on_demand_samples_follow_the_generator() -> None:
    """Counts as LEAF's; features standardised by the generator's own moments (pooled
    mean 0, standard deviation 1); with a large shared model the labels follow it."""
    cfg = SyntheticConfig(num_clients=2000, dim=8, num_classes=5, beta=0.5, shared_model=100.0,
                          on_demand=True)
    data = load_data(DataConfig(synthetic=cfg), Streams(0))
    assert data.input_shape == (8,) and data.num_classes == 5
    assert data.train.num_clients == data.test.num_clients == 1000
    whole = data.train.subset(np.arange(data.train.num_clients))
    assert str(whole.x.dtype) == "torch.float32" and str(whole.y.dtype) == "torch.int64"
    n = whole.num_samples
    assert n.min() >= 50 and n.max() <= MAX_SAMPLES_PER_CLIENT
    assert abs(np.mean(n) - mean_samples(cfg)) < 0.15 * mean_samples(cfg)
    x = whole.x.double().numpy()
    # about 3 standard errors: a device's samples share its centre, the counts are skewed
    np.testing.assert_allclose(x.mean(0), 0, atol=0.2)
    np.testing.assert_allclose(x.std(0), 1, atol=0.1)
    shared = Streams(0).numpy("synthetic_shared")
    weights, bias = shared.normal(0.0, 100.0, (8, 5)), shared.normal(0.0, 100.0, 5)
    std = np.sqrt(1 + 0.5**2 + np.arange(1, 9) ** -1.2)
    agree = (np.argmax((x * std) @ weights + bias, axis=1) == whole.y.numpy()).mean()
    assert agree > 0.95


def test_on_demand_is_split_and_filtered_by_writer_as_held_data_is() -> None:
    base = DataConfig(min_samples_per_client=60, test_client_fraction=0.25,
                      synthetic=SyntheticConfig(num_clients=200, on_demand=True))
    data = load_data(base, Streams(1))
    counts = SyntheticDevices(base.synthetic, Streams(1), True).num_samples(np.arange(200))
    train, test = (set(side.device_idx.tolist()) for side in (data.train, data.test))
    assert not train & test and train | test == set(np.flatnonzero(counts >= 60).tolist())
    assert len(test) == round(0.25 * (counts >= 60).sum())
    assert (data.train.num_samples == counts[data.train.device_idx]).all()
    assert data.train.client_ids[0] == f"synthetic_{data.train.device_idx[0]}"
    with pytest.raises(InputError, match="pixel_scaling"):
        load_data(dataclasses.replace(base, pixel_scaling="authors"), Streams(1))


def test_on_demand_memory_is_a_chunk_and_a_few_bytes_a_device() -> None:
    """simfl.runs.memory's terms for on-demand data bound what loading it and a pass over
    every device take (tracemalloc: numpy's and torch's CPU arrays), and do not grow
    with the samples the population holds."""
    cfg = DataConfig(synthetic=SyntheticConfig(num_clients=10_000, dim=10, on_demand=True))
    (per_device, *_), (per_chunk, *_) = memory_terms(cfg)
    tracemalloc.start()
    try:
        data = load_data(cfg, Streams(0))
        _, load_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        model = build_model("linear", (10,), 10)
        LocalWork(model, data, TrainConfig(), 0.0, 4096, Streams(0)).losses(
            initial_params(model, 0, torch.float32))
        _, pass_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert load_peak <= per_device
    assert pass_peak - before <= per_chunk
    million = SyntheticConfig(num_clients=10**6, dim=10, on_demand=True)
    made = sum(t[0] for t in memory_terms(DataConfig(synthetic=million)))
    held = sum(t[0] for t in memory_terms(DataConfig(
        synthetic=dataclasses.replace(million, on_demand=False))))
    assert made < 2**30 < 50 * 2**30 < held  # held: every sample's features, built in float64


def test_a_run_on_data_made_on_demand_is_reproducible_with_its_oracle(tmp_path: Path) -> None:
    """End to end: Δ-FL with the bias oracle on devices made on demand; two runs of one
    seed write the same tables, and the oracle rows hold the population's quantile."""
    scenario = tmp_path / "s.toml"
    scenario.write_text(SMALL.format(seed=2, aggregator="deltafl", theta=0.5)
                        + "[estimator]\nshadow = [\"ipw\"]\nbias_every = 2\n")
    outs = []
    for name in ("a", "b"):
        outs.append(tmp_path / name)
        assert main([str(scenario), "--out", str(outs[-1]), "--quiet",
                     "--set", "data.synthetic.on_demand=true"]) == 0
    for table in ("rounds", "clients", "eval", "bias"):
        a, b = (pl.read_parquet(out / f"{table}.parquet") for out in outs)
        assert a.equals(b), table
    bias = pl.read_parquet(outs[0] / "bias.parquet").filter(pl.col("round") % 2 == 0)
    assert bias.height == 6 and bias["oracle_quantile"].is_not_null().all()
