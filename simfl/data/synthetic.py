"""LEAF's synthetic(alpha, beta) federated dataset.

The generator of Li et al., "Federated Optimization in Heterogeneous Networks"
(FedProx, MLSys 2020), after Shamir et al.'s DANE setup, as shipped with LEAF
(Caldas et al. 2018). For client k:

    u_k ~ N(0, alpha),  B_k ~ N(0, beta)          (alpha, beta as standard deviations,
    W_k ~ N(u_k, 1) (D, C),  b_k ~ N(u_k, 1) (C,)   as numpy's ``normal(loc, scale)``
    v_k ~ N(B_k, 1) (D,)                           in LEAF's code)
    x ~ N(v_k, Σ),  Σ = diag(j^-1.2), j = 1..D
    y = argmax(softmax(W_k x + b_k)) = argmax(W_k x + b_k)

alpha controls how much the clients' models differ, beta how much their
features differ. With ``shared_model`` = s > 0 (an extension, not in LEAF), a
model W_0 ~ N(0, s²) of shape (D, C), b_0 ~ N(0, s²) drawn once from
``streams.numpy("synthetic_shared")`` is added to every client's (W_k, b_k), so
that clients share structure and unseen test devices can be predicted. Samples per
client are ``int(lognormal(4, 2)) + min_samples`` as
in LEAF, capped at :data:`MAX_SAMPLES_PER_CLIENT` to keep runs and tests fast.

With ``tail_share`` = p > 0 (also simfl's extension), the population has a real
tail: each client joins a minority with probability p (a draw from
``streams.numpy("synthetic_tail", k)``), and a minority client's labels come from
the shared model plus a second one, T ~ N(0, tail_shift²) of shape (D, C) and
t ~ N(0, tail_shift²) (C,), drawn once from ``streams.numpy("synthetic_tail_model")``:
y = argmax(x (W_k + W_0 + T) + b_k + b_0 + t). Its features are drawn as everyone's;
what shifts is the map from features to labels, so one linear model cannot serve
both groups and an average over devices (FedAvg) serves the majority: the
minority's errors form the upper tail of the per-device error distribution, the
case a tail-robust rule (Δ-FL) is for. With p = 0 nothing is drawn from those
streams and the data is LEAF's (plus the shared model) as before.

Every draw of client k comes from ``streams.numpy("synthetic", k)`` (and its tail
membership from ``streams.numpy("synthetic_tail", k)``), so adding clients never
changes the earlier ones. The clients are then split by writer
and standardised per feature with the training devices' statistics like any
other dataset (:mod:`simfl.data.split`): ClientData promises standardised
inputs, and an affine map of the features leaves a linear model's best
accuracy unchanged.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from simfl.data.packed import ClientData, FederatedData
from simfl.data.split import federate
from simfl.rng import Streams
from simfl.scenario import DataConfig, SyntheticConfig

MAX_SAMPLES_PER_CLIENT = 1000  # LEAF's lognormal has a heavy tail (tens of thousands)
# Peak bytes of building, per feature of a sample (float64 per client, their concatenation,
# the float32 copy, the split and standardisation) and per sample (labels, offsets):
# measured with getrusage at 2e4 clients of dim 10 and 5e3 of dim 100 (about 7.4x the
# float32 features).
BUILD_BYTES_PER_FEATURE = 30
BUILD_BYTES_PER_SAMPLE = 48


def load_synthetic(cfg: DataConfig, streams: Streams) -> FederatedData:
    """Generate ``cfg.synthetic.num_clients`` clients, split them by writer and standardise
    (simfl.memory checks :func:`memory_terms` against the memory available first)."""
    clients = generate(cfg.synthetic, streams)
    num_classes = cfg.synthetic.num_classes
    return federate("synthetic", clients, cfg, streams, num_classes, True, "synthetic data")


def memory_terms(data: DataConfig) -> list[tuple[float, str, str]]:
    """Peak bytes of :func:`load_synthetic` as (bytes, key, what): the features of every
    client (at the expected samples a client gets), and one client's (D, C) models and
    (n, C) logits in float64 (two of each at once, three of the models with the shared
    one, two more with the tail's)."""
    cfg = data.synthetic
    cap = max(MAX_SAMPLES_PER_CLIENT, cfg.min_samples)
    samples = cfg.num_clients * mean_samples(cfg)
    features = samples * (BUILD_BYTES_PER_FEATURE * cfg.dim + BUILD_BYTES_PER_SAMPLE)
    models = 8 * cfg.dim * cfg.num_classes * (5 if cfg.tail_share > 0 else 3)
    per_class = models + 2 * 8 * cap * cfg.num_classes
    return [(features, f"'data.synthetic.num_clients' = {cfg.num_clients} with "
                       f"'data.synthetic.dim' = {cfg.dim}", "the synthetic features"),
            (per_class, f"'data.synthetic.num_classes' = {cfg.num_classes}",
             "the synthetic clients' models and logits")]


def mean_samples(cfg: SyntheticConfig) -> float:
    """Expected samples of a client, min(int(L) + m, cap) with L ~ lognormal(4, 2)
    (:func:`_client`): m + E[min(L, cap - m)] - 1/2, E[min(L, c)] in closed form."""
    cap = max(MAX_SAMPLES_PER_CLIENT, cfg.min_samples)
    c = cap - cfg.min_samples
    if c <= 0:
        return float(cap)
    mu, sigma = 4.0, 2.0

    def phi(z: float) -> float:
        return 0.5 * (1 + math.erf(z / math.sqrt(2)))

    below = math.exp(mu + sigma**2 / 2) * phi((math.log(c) - mu - sigma**2) / sigma)
    return cfg.min_samples + below + c * (1 - phi((math.log(c) - mu) / sigma)) - 0.5


def generate(cfg: SyntheticConfig, streams: Streams) -> ClientData:
    """All clients of synthetic(alpha, beta), packed; x (N, D) float32 (raw), y (N,) int64."""
    shared = streams.numpy("synthetic_shared")
    shared_weights = shared.normal(0.0, cfg.shared_model, (cfg.dim, cfg.num_classes))
    shared_bias = shared.normal(0.0, cfg.shared_model, cfg.num_classes)
    in_tail = tail_members(cfg, streams)
    tail_weights, tail_bias = shared_weights, shared_bias
    if in_tail.any():
        tail = streams.numpy("synthetic_tail_model")
        tail_weights = shared_weights + tail.normal(0.0, cfg.tail_shift,
                                                    (cfg.dim, cfg.num_classes))
        tail_bias = shared_bias + tail.normal(0.0, cfg.tail_shift, cfg.num_classes)
    models = [(tail_weights, tail_bias) if member else (shared_weights, shared_bias)
              for member in in_tail]
    xs, ys = zip(*(_client(cfg, streams.numpy("synthetic", k), *models[k])
                   for k in range(cfg.num_clients)), strict=True)
    counts = np.array([len(y) for y in ys], np.int64)
    return ClientData(
        x=torch.from_numpy(np.concatenate(xs).astype(np.float32)),
        y=torch.from_numpy(np.concatenate(ys)),
        offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        client_ids=np.array([f"synthetic_{k}" for k in range(cfg.num_clients)], dtype=str),
    )


def tail_members(cfg: SyntheticConfig, streams: Streams) -> np.ndarray:
    """(num_clients,) bool: which clients are in the shifted minority (none when
    ``tail_share`` is 0)."""
    if cfg.tail_share <= 0:
        return np.zeros(cfg.num_clients, bool)
    return np.array([streams.numpy("synthetic_tail", k).random() < cfg.tail_share
                     for k in range(cfg.num_clients)], bool)


def _client(cfg: SyntheticConfig, rng: np.random.Generator, shared_weights: np.ndarray,
            shared_bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One client's (x (n, D) float64, y (n,) int64)."""
    cap = max(MAX_SAMPLES_PER_CLIENT, cfg.min_samples)
    num_samples = min(int(min(rng.lognormal(4.0, 2.0), cap)) + cfg.min_samples, cap)
    model_mean = rng.normal(0.0, cfg.alpha)  # u_k
    feature_mean = rng.normal(0.0, cfg.beta)  # B_k
    weights = rng.normal(model_mean, 1.0, (cfg.dim, cfg.num_classes))  # W_k^T (D, C)
    bias = rng.normal(model_mean, 1.0, cfg.num_classes)  # (C,)
    centre = rng.normal(feature_mean, 1.0, cfg.dim)  # v_k (D,)
    scale = np.arange(1, cfg.dim + 1, dtype=np.float64) ** -0.6  # sqrt(Σ_jj) = j^-0.6
    x = centre + scale * rng.standard_normal((num_samples, cfg.dim))  # (n, D)
    logits = x @ (weights + shared_weights) + bias + shared_bias
    y = np.argmax(logits, axis=1).astype(np.int64)
    return x, y
