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

**On demand** (``on_demand = true``, :class:`SyntheticDevices`): the same
distribution, but device k's samples are made, in float32, from its own Philox
stream ``streams.keyed("synthetic_device").at(k)`` each time they are needed (its
cohort's round, each pass of the bias oracle or of an evaluation), and never held
for the whole population: only the sample counts are (their draw is the stream's
first). The stream gives, in order: the count, the tail draw, u_k, B_k, W_k, b_k,
v_k (one float64 normal vector, scaled) and the (n, D) float32 noise of x. The
counts are split by writer as any data set's; the features are standardised with
the generator's own moments instead of the training devices' (which would need
every device's samples first): x_j has mean 0 and variance 1 + beta² + j^-1.2
(v_kj ~ N(B_k, 1), B_k ~ N(0, beta²), noise variance j^-1.2), the limit of the
training devices' statistics as the population grows, so x_j is divided by its
standard deviation. The draws differ from the in-memory generator's (other
streams, float32 noise): the two modes give two populations of one distribution.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from simfl.data.packed import CHUNK_BYTES, ClientData, FederatedData, GeneratedClients
from simfl.data.split import check_vectors, federate, split_clients
from simfl.rng import Streams
from simfl.scenario import DataConfig, SyntheticConfig

MAX_SAMPLES_PER_CLIENT = 1000  # LEAF's lognormal has a heavy tail (tens of thousands)
# Peak bytes of building, per feature of a sample (float64 per client, their concatenation,
# the float32 copy, the split and standardisation) and per sample (labels, offsets):
# measured with getrusage at 2e4 clients of dim 10 and 5e3 of dim 100 (about 7.4x the
# float32 features).
BUILD_BYTES_PER_FEATURE = 30
BUILD_BYTES_PER_SAMPLE = 48
# On demand: bytes kept per device (count, offsets, a '<U17' id, its index, the split's
# permutation) and per sample of a chunk beyond its features (labels, the evaluation's
# owner index): measured, see tests/data/test_synthetic.py.
ON_DEMAND_BYTES_PER_DEVICE = 200
ON_DEMAND_BYTES_PER_SAMPLE = 24


def load_synthetic(cfg: DataConfig, streams: Streams) -> FederatedData:
    """Generate ``cfg.synthetic.num_clients`` clients, split them by writer and standardise
    (simfl.memory checks :func:`memory_terms` against the memory available first); on
    demand, only their sample counts (:func:`load_on_demand`)."""
    if cfg.synthetic.on_demand:
        return load_on_demand(cfg, streams)
    clients = generate(cfg.synthetic, streams)
    num_classes = cfg.synthetic.num_classes
    return federate("synthetic", clients, cfg, streams, num_classes, True, "synthetic data")


def load_on_demand(cfg: DataConfig, streams: Streams) -> FederatedData:
    """The population's sample counts, split by writer as :func:`federate` splits;
    each side's samples are made by :class:`SyntheticDevices` when asked for."""
    check_vectors(cfg, "synthetic data")
    devices = SyntheticDevices(cfg.synthetic, streams, cfg.standardise)
    counts = np.array([devices.num_samples(k) for k in range(cfg.synthetic.num_clients)],
                      dtype=np.int64)
    train_idx, test_idx = split_clients(counts, cfg, streams.numpy("data_split"),
                                        "synthetic data")

    def side(device_idx: np.ndarray) -> GeneratedClients:
        offsets = np.concatenate([[0], np.cumsum(counts[device_idx])]).astype(np.int64)
        ids = np.array([f"synthetic_{k}" for k in device_idx], dtype=str)
        return GeneratedClients(devices.samples, device_idx, offsets, ids, (cfg.synthetic.dim,))

    return FederatedData("synthetic", side(train_idx), side(test_idx),
                         cfg.synthetic.num_classes)


def memory_terms(data: DataConfig) -> list[tuple[float, str, str]]:
    """Peak bytes of :func:`load_synthetic` as (bytes, key, what): the features of every
    client (at the expected samples a client gets), and one client's (D, C) models and
    (n, C) logits in float64 (two of each at once, three of the models with the shared
    one, two more with the tail's). On demand: the per-device counts, ids and split,
    and one chunk of samples (:func:`on_demand_terms`)."""
    cfg = data.synthetic
    if cfg.on_demand:
        return on_demand_terms(cfg)
    cap = max(MAX_SAMPLES_PER_CLIENT, cfg.min_samples)
    samples = cfg.num_clients * mean_samples(cfg)
    features = samples * (BUILD_BYTES_PER_FEATURE * cfg.dim + BUILD_BYTES_PER_SAMPLE)
    models = 8 * cfg.dim * cfg.num_classes * (5 if cfg.tail_share > 0 else 3)
    per_class = models + 2 * 8 * cap * cfg.num_classes
    return [(features, f"'data.synthetic.num_clients' = {cfg.num_clients} with "
                       f"'data.synthetic.dim' = {cfg.dim}", "the synthetic features"),
            (per_class, f"'data.synthetic.num_classes' = {cfg.num_classes}",
             "the synthetic clients' models and logits")]


def on_demand_terms(cfg: SyntheticConfig) -> list[tuple[float, str, str]]:
    """Peak bytes of on-demand data: what each device keeps (count, offsets, id, index)
    and the split's temporaries, and two chunks of samples (one being made while a pass
    still holds the one before: features, labels, the evaluation's per-sample owners)."""
    samples = CHUNK_BYTES // (4 * cfg.dim)
    chunk = 2 * (CHUNK_BYTES + samples * ON_DEMAND_BYTES_PER_SAMPLE)
    return [(cfg.num_clients * ON_DEMAND_BYTES_PER_DEVICE,
             f"'data.synthetic.num_clients' = {cfg.num_clients}",
             "the on-demand devices' counts and ids"),
            (chunk, f"'data.synthetic.dim' = {cfg.dim}", "a chunk of on-demand samples")]


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
    shared, tail = label_models(cfg, streams)
    models = [tail if member else shared for member in tail_members(cfg, streams)]
    xs, ys = zip(*(_client(cfg, streams.numpy("synthetic", k), *models[k])
                   for k in range(cfg.num_clients)), strict=True)
    counts = np.array([len(y) for y in ys], np.int64)
    return ClientData(
        x=torch.from_numpy(np.concatenate(xs).astype(np.float32)),
        y=torch.from_numpy(np.concatenate(ys)),
        offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        client_ids=np.array([f"synthetic_{k}" for k in range(cfg.num_clients)], dtype=str),
    )


Model = tuple[np.ndarray, np.ndarray]  # (D, C) weights and (C,) bias, float64


def label_models(cfg: SyntheticConfig, streams: Streams) -> tuple[Model, Model]:
    """The models added to every client's own: the shared one (W_0, b_0), and the
    tail's (W_0 + T, b_0 + t; the shared one again when ``tail_share`` is 0)."""
    shared = streams.numpy("synthetic_shared")
    shared_weights = shared.normal(0.0, cfg.shared_model, (cfg.dim, cfg.num_classes))
    shared_bias = shared.normal(0.0, cfg.shared_model, cfg.num_classes)
    if cfg.tail_share <= 0:
        return (shared_weights, shared_bias), (shared_weights, shared_bias)
    tail = streams.numpy("synthetic_tail_model")
    tail_weights = shared_weights + tail.normal(0.0, cfg.tail_shift, (cfg.dim, cfg.num_classes))
    tail_bias = shared_bias + tail.normal(0.0, cfg.tail_shift, cfg.num_classes)
    return (shared_weights, shared_bias), (tail_weights, tail_bias)


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
    num_samples = _num_samples(cfg, rng)
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


def _num_samples(cfg: SyntheticConfig, rng: np.random.Generator) -> int:
    """A client's samples, LEAF's int(lognormal(4, 2)) + min_samples, capped."""
    cap = max(MAX_SAMPLES_PER_CLIENT, cfg.min_samples)
    return min(int(min(rng.lognormal(4.0, 2.0), cap)) + cfg.min_samples, cap)


class SyntheticDevices:
    """Device k's samples of synthetic(alpha, beta), made on demand in float32 from its
    own stream (the module's docstring says which draws, in which order): a pure
    function of (seed, k), whichever devices are made before or with it."""

    def __init__(self, cfg: SyntheticConfig, streams: Streams, standardise: bool) -> None:
        self.cfg, self.stream = cfg, streams.keyed("synthetic_device")
        self.models = [(w.astype(np.float32), b.astype(np.float32))
                       for w, b in label_models(cfg, streams)]  # shared, tail
        j = np.arange(1, cfg.dim + 1, dtype=np.float64)
        # x_j ~ mean 0, variance 1 + beta² + j^-1.2 over the population (the docstring):
        # x / std is made as v_k / std + (sqrt(Σ_jj) / std) z, and the labels from
        # (x / std) (std W), the same map as x W
        std = np.sqrt(1 + cfg.beta**2 + j**-1.2) if standardise else np.ones(cfg.dim)
        self.inv_std = (1 / std).astype(np.float32)
        self.scale = (j**-0.6 / std).astype(np.float32)  # sqrt(Σ_jj) / std
        self.std = std.astype(np.float32)[:, None]  # (D, 1)

    def num_samples(self, k: int) -> int:
        return _num_samples(self.cfg, self.stream.at(k))

    def samples(self, k: int, x: np.ndarray, y: np.ndarray) -> None:
        """Device k's samples into x (n, D) float32 (standardised when asked) and y (n,)
        int64, n its count."""
        cfg, rng = self.cfg, self.stream.at(k)
        d, c = cfg.dim, cfg.num_classes
        n = _num_samples(cfg, rng)
        if x.shape != (n, d):
            raise ValueError(f"device {k} has {n} samples of {d} features, not {x.shape}")
        weights, bias = self.models[int(rng.random() < cfg.tail_share)]
        z = rng.standard_normal(2 + d * c + c + d)  # u_k, B_k, W_k, b_k, v_k before scaling
        model_mean, feature_mean = cfg.alpha * z[0], cfg.beta * z[1]
        own = (model_mean + z[2: 2 + d * c + c]).astype(np.float32)
        w = (own[: d * c].reshape(d, c) + weights) * self.std  # std W_k (D, C)
        b = own[d * c: d * c + c] + bias  # (C,)
        centre = (feature_mean + z[2 + d * c + c:]).astype(np.float32) * self.inv_std  # (D,)
        rng.standard_normal(out=x, dtype=np.float32)  # (n, D) noise
        x *= self.scale
        x += centre
        np.argmax(x @ w + b, axis=1, out=y)
