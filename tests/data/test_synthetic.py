"""LEAF's synthetic(alpha, beta): shapes, determinism, per-client streams, heterogeneity."""

from __future__ import annotations

from typing import Any

import numpy as np

from simfl.data import load_data
from simfl.data.packed import FederatedData
from simfl.data.synthetic import MAX_SAMPLES_PER_CLIENT, generate, tail_members
from simfl.rng import Streams
from simfl.scenario import DataConfig, SyntheticConfig


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
    leaf = generate(SyntheticConfig(num_clients=20), Streams(0))
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
