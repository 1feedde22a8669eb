"""LEAF's synthetic(alpha, beta) federated dataset.

The generator of Li et al., "Federated Optimization in Heterogeneous Networks"
(FedProx, MLSys 2020), after Shamir et al.'s DANE setup, as shipped with LEAF
(Caldas et al. 2018). For client k:

    u_k ~ N(0, alpha),  B_k ~ N(0, beta)          (alpha, beta as standard deviations,
    W_k ~ N(u_k, 1) (D, C),  b_k ~ N(u_k, 1) (C,)   as numpy's ``normal(loc, scale)``
    v_k ~ N(B_k, 1) (D,)                           in LEAF's code)
    x ~ N(v_k, Σ),  Σ = diag(j^-1.2), j = 1..D
    y = argmax(softmax(W_k x + b_k)) = argmax(W_k x + b_k)

beta controls how much the clients' features differ; alpha, meant to control how much
their models differ, moves no label: u_k shifts every class's logit of client k alike
(x W_k + b_k = u_k (Σ_j x_j + 1) + x Z + z with Z, z standard normal), so the clients'
models differ by the N(0, 1) spread around u_k whatever alpha is (a test checks that
alpha = 0 and 5 give the same labels). In LEAF's generator no two clients share a
model, so a model trained on some clients predicts an unseen one at chance.

``shared_model`` = s (simfl's extension, not in LEAF) adds a model W_0 ~ N(0, s²) of
shape (D, C), b_0 ~ N(0, s²), drawn once from ``streams.numpy("synthetic_shared")``,
to every client's (W_k, b_k), so that clients share structure and unseen test devices
can be predicted. **simfl's default is s = 3, a departure from LEAF** (s = 0 gives
LEAF's generator): a device's own model is then a tenth of the variance of its label
map, so the devices share most of it and still differ. The shared model alone errs on
0.24 of an unseen device's samples on average, 0.67 at the devices' 90th percentile
(300 clients, seed 0): a tail a federated model can narrow but not close. A linear
model fitted on the 100 training devices of 200 clients errs on 0.35 of an unseen
device's samples (seeds 0, 1), at s = 0 on 0.90–0.92, chance being 0.9
(tests/data/test_synthetic_default.py checks these figures). FedAvg on
scenarios/quick_synthetic.toml (100 training and 100 unseen devices, 100 rounds)
takes the unseen devices' mean error from 0.86–0.94 to 0.54–0.58 at seeds 0–2, and
at s = 0 leaves it at 0.92–0.97 (``--set aggregator.name=fedavg --set
data.synthetic.shared_model=S``). Their p90 stays near 1 in runs this short: at the
defaults a client's labels are mostly one class (median share of its commonest label
0.94 over 200 clients, seed 0), so a device's error is near 0 or near 1. Samples per client are
``int(lognormal(4, 2)) + min_samples`` as in LEAF, capped at
:data:`MAX_SAMPLES_PER_CLIENT` to keep runs and tests fast.

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
distribution, but device k's samples are made, in float32, from its own keyed
stream ``streams.keyed("synthetic_device")`` (:class:`simfl.rng.KeyedStreams`:
counter-based, word i of device k a pure function of (seed, k, i)) each time they
are needed (its cohort's round, each pass of the bias oracle or of an evaluation),
and never held for the whole population: only the sample counts are. Device k's
words: word 0 is its tail draw (a uniform); words 1 .. ⌈P/2⌉ give P = 3 + DC + C + D
normals, in order the count's (LEAF's lognormal(4, 2) is exp(4 + 2z)), u_k / alpha,
B_k / beta, then W_k (D, C, row-major), b_k and v_k less their means; the words
after them give the noise of x, ceil(D/2) words (D normals, one left over when D is
odd) a sample. A group of devices is made with array arithmetic over all their
words at once and one small matrix product per device for the labels, so a device's
samples are the same alone, in a cohort or in a chunk. The counts are split by
writer as any data set's; the features are standardised with the generator's own
moments instead of the training devices' (which would need every device's samples
first): x_j has mean 0 and variance 1 + beta² + j^-1.2 (v_kj ~ N(B_k, 1), B_k ~
N(0, beta²), noise variance j^-1.2), the limit of the training devices' statistics
as the population grows, so x_j is divided by its standard deviation. The draws
differ from the in-memory generator's (other streams, float32 Box-Muller normals
bounded by 5.65): the two modes give two populations of one distribution.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from simfl.data.known import KeySizes
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
# Samples of the devices made together (SyntheticDevices.make): their temporaries (the
# words, the logits, the centres) stay in a core's cache.
GROUP_SAMPLES = 16384


def load_synthetic(cfg: DataConfig, streams: Streams) -> FederatedData:
    """Generate ``cfg.synthetic.num_clients`` clients, split them by writer and standardise
    (simfl.runs.memory checks :func:`memory_terms` against the memory available first); on
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
    counts = devices.num_samples(np.arange(cfg.synthetic.num_clients))
    train_idx, test_idx = split_clients(counts, cfg, streams.numpy("data_split"),
                                        "synthetic data")

    def side(device_idx: np.ndarray) -> GeneratedClients:
        offsets = np.concatenate([[0], np.cumsum(counts[device_idx])]).astype(np.int64)
        ids = np.array([f"synthetic_{k}" for k in device_idx], dtype=str)
        return GeneratedClients(devices.make, device_idx, offsets, ids, (cfg.synthetic.dim,))

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
    """Devices' samples of synthetic(alpha, beta), made on demand in float32 from their
    own keyed streams, a chunk of devices at once (the module's docstring says which
    words make which draws): device k's samples are a pure function of (seed, k), the
    same made alone, in a cohort or in a chunk."""

    def __init__(self, cfg: SyntheticConfig, streams: Streams, standardise: bool) -> None:
        self.cfg, self.stream = cfg, streams.keyed("synthetic_device")
        shared, tail = label_models(cfg, streams)
        self.weights = np.stack([shared[0], tail[0]]).astype(np.float32)  # (2, D, C)
        self.biases = np.stack([shared[1], tail[1]]).astype(np.float32)  # (2, C)
        j = np.arange(1, cfg.dim + 1, dtype=np.float64)
        # x_j ~ mean 0, variance 1 + beta² + j^-1.2 over the population (the docstring):
        # x / std is made as v_k / std + (sqrt(Σ_jj) / std) z, and the labels from
        # (x / std) (std W), the same map as x W
        std = np.sqrt(1 + cfg.beta**2 + j**-1.2) if standardise else np.ones(cfg.dim)
        self.inv_std = (1 / std).astype(np.float32)
        self.scale = (j**-0.6 / std).astype(np.float32)  # sqrt(Σ_jj) / std
        self.std = std.astype(np.float32)[:, None]  # (D, 1)
        d, c = cfg.dim, cfg.num_classes
        self.num_params = 3 + d * c + c + d  # normals: the count's, u_k, B_k, W_k, b_k, v_k
        self.noise_start = 1 + -(-self.num_params // 2)  # word 0: the tail draw
        self.sample_words = -(-d // 2)  # words of one sample's noise

    def num_samples(self, devices: np.ndarray) -> np.ndarray:
        """(m,) int64 samples of each device: LEAF's int(lognormal(4, 2)) + min_samples,
        capped, from the first normal of word 1."""
        devices = np.asarray(devices, dtype=np.int64)
        z = np.empty(2 * len(devices), np.float32)
        self.stream.normals(devices, 1, np.ones(len(devices), np.int64), z)
        cap = max(MAX_SAMPLES_PER_CLIENT, self.cfg.min_samples)
        drawn = np.floor(np.minimum(np.exp(4.0 + 2.0 * z[0::2].astype(np.float64)), cap))
        return np.minimum(drawn.astype(np.int64) + self.cfg.min_samples, cap)

    def make(self, devices: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
        """The devices' samples, concatenated in their order, into x (n, D) float32
        (standardised when asked) and y (n,) int64, n their samples in all; their models
        made at once, their samples a group of about :data:`GROUP_SAMPLES` at a time."""
        devices = np.asarray(devices, dtype=np.int64)
        counts = self.num_samples(devices)
        bounds = np.concatenate([[0], np.cumsum(counts)])
        if x.shape != (bounds[-1], self.cfg.dim) or y.shape != (len(x),):
            raise ValueError(f"the devices have {bounds[-1]} samples of {self.cfg.dim} "
                             f"features, not {x.shape}")
        models = self._models(devices)
        start = 0
        while start < len(devices):
            stop = int(np.searchsorted(bounds, bounds[start] + GROUP_SAMPLES, "right")) - 1
            stop = max(stop, start + 1)
            rows = slice(bounds[start], bounds[stop])
            group = slice(start, stop)
            self._make_group(devices[group], counts[group], tuple(m[group] for m in models),
                             x[rows], y[rows])
            start = stop

    def _make_group(self, devices: np.ndarray, counts: np.ndarray,
                    models: tuple[np.ndarray, ...], x: np.ndarray, y: np.ndarray) -> None:
        d = self.cfg.dim
        weights, bias, centre = models
        noise = x if d % 2 == 0 else np.empty((len(x), d + 1), np.float32)
        self.stream.normals(devices, self.noise_start, counts * self.sample_words, noise)
        if noise is not x:
            x[:] = noise[:, :d]
        x *= self.scale
        x += np.repeat(centre, counts, axis=0)
        logits = np.empty((len(x), self.cfg.num_classes), np.float32)
        bounds = np.concatenate([[0], np.cumsum(counts)]).tolist()
        for i, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            np.matmul(x[start:stop], weights[i], out=logits[start:stop])
        logits += np.repeat(bias, counts, axis=0)
        np.argmax(logits, axis=1, out=y)

    def _models(self, devices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each device's std (W_k + W) (m, D, C), b_k + b (m, C) and centre v_k / std (m, D),
        float32, W and b the shared model's or the tail's."""
        cfg, m = self.cfg, len(devices)
        d, c = cfg.dim, cfg.num_classes
        z = np.empty((m, 2 * (self.noise_start - 1)), np.float32)
        self.stream.normals(devices, 1, np.full(m, self.noise_start - 1), z)
        group = (self.stream.uniforms(devices, 0) < cfg.tail_share).astype(np.int64)
        model_mean = np.float32(cfg.alpha) * z[:, 1:2]  # u_k
        feature_mean = np.float32(cfg.beta) * z[:, 2:3]  # B_k
        own = model_mean + z[:, 3:3 + d * c + c]  # W_k, b_k ~ N(u_k, 1)
        weights = (own[:, :d * c].reshape(m, d, c) + self.weights[group]) * self.std
        bias = own[:, d * c:] + self.biases[group]
        centre = (feature_mean + z[:, 3 + d * c + c:self.num_params]) * self.inv_std
        return weights, bias, centre


def input_shape(data: DataConfig) -> tuple[tuple[int, ...], int]:
    """A sample's shape and the classes, from the keys (simfl.plugins.HOOKS)."""
    return (data.synthetic.dim,), data.synthetic.num_classes


def sizes(data: DataConfig) -> KeySizes:
    """The devices and samples the keys fix (simfl.plugins.HOOKS): ``num_clients``
    clients (``max_clients`` of them if set), ``test_client_fraction`` of them unseen
    test devices, at most LEAF's cap of samples a client and :func:`mean_samples`
    expected; exact when no client can fall below ``min_samples_per_client`` and no
    validation split is made."""
    cfg = data.synthetic
    n = min(cfg.num_clients, data.max_clients) if data.max_clients else cfg.num_clients
    test = min(max(round(data.test_client_fraction * n), 1), max(n - 1, 0))
    return KeySizes(
        train=n - test, devices=n, clients=cfg.num_clients,
        key=f"'data.synthetic.num_clients' = {cfg.num_clients}",
        most_samples=float(max(MAX_SAMPLES_PER_CLIENT, cfg.min_samples)),
        total_samples=cfg.num_clients * mean_samples(cfg),
        shape_keys=(f" with 'data.synthetic.num_classes' = {cfg.num_classes} with "
                    f"'data.synthetic.dim' = {cfg.dim}"),
        exact=data.validation_fraction == 0 and data.min_samples_per_client <= cfg.min_samples)
