"""Writer-level federated split shared by every dataset.

The Δ-FL papers (Laguel, Pillutla, Malick, Harchaoui) split FEMNIST by
**writer**, not by sample: each writer is one device, and a fraction of the
writers become unseen test devices that are never trained on. The same
protocol is applied here to LEAF json shards (Caldas et al., "LEAF: A Benchmark
for Federated Settings", 2018) and to the synthetic generator, so a dataset only
has to say which rows belong to which client.

Randomness comes only from the generator passed in (``streams.numpy("data_split")``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from simfl.data.packed import ClientData, FederatedData
from simfl.errors import InputError
from simfl.rng import Streams
from simfl.scenario import DataConfig


@dataclasses.dataclass(frozen=True)
class Groups:
    """Rows of a table grouped by client: client k owns ``order[offsets[k]:offsets[k + 1]]``."""

    order: np.ndarray  # (N,) int64 row positions in the table, grouped by client
    offsets: np.ndarray  # (K + 1,) int64
    client_ids: np.ndarray  # (K,) str, in order of first appearance (or sorted, see group_rows)


def group_rows(keys: np.ndarray) -> Groups:
    """Group the rows of a table by client key (e.g. the writer column).

    When every client's rows are one contiguous run (LEAF files are stored that
    way), the order is the identity and clients keep their file order. Otherwise
    the rows are sorted stably by key, so each client's rows keep their relative
    order and clients come out sorted by id.
    """
    num_rows = len(keys)
    if num_rows == 0:
        return Groups(np.zeros(0, np.int64), np.zeros(1, np.int64), keys[:0])
    starts = np.concatenate([[0], np.flatnonzero(keys[1:] != keys[:-1]) + 1])
    run_ids = keys[starts]
    if len(np.unique(run_ids)) == len(run_ids):
        order = np.arange(num_rows, dtype=np.int64)
        offsets = np.append(starts, num_rows).astype(np.int64)
        return Groups(order, offsets, run_ids)
    order = np.argsort(keys, kind="stable").astype(np.int64)
    client_ids, counts = np.unique(keys, return_counts=True)  # sorted, as argsort
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return Groups(order, offsets, client_ids)


def split_clients(
    num_samples: np.ndarray, cfg: DataConfig, rng: np.random.Generator, source: str,
    keep: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Choose training and unseen test clients; returns two sorted arrays of client indices.

    Keeps the clients with at least ``cfg.min_samples_per_client`` samples,
    subsamples ``cfg.max_clients`` of them if asked (0 = all), then sends
    ``round(cfg.test_client_fraction * kept)`` of them (at least one, and at
    least one left for training) to the test side. With
    ``cfg.validation_fraction`` > 0 (tuning) those test clients are set aside and that
    share of the training clients is returned as the test side instead (held out of
    training). ``source`` names the data in the error raised when fewer than two
    clients remain. ``keep`` (a boolean per client; None = all) drops clients before
    every other filter (``data.sources``).
    """
    large = np.asarray(num_samples) >= cfg.min_samples_per_client
    eligible = np.flatnonzero(large if keep is None else large & keep)
    if cfg.max_clients and len(eligible) > cfg.max_clients:
        eligible = np.sort(rng.choice(eligible, size=cfg.max_clients, replace=False))
    if len(eligible) < 2:
        raise InputError(
            f"{source}: {len(eligible)} client(s) with >= {cfg.min_samples_per_client} samples"
            " (data.min_samples_per_client); need at least 2 (one training, one test device)"
        )
    num_test = min(max(round(cfg.test_client_fraction * len(eligible)), 1), len(eligible) - 1)
    shuffled = rng.permutation(eligible)
    train, test = shuffled[num_test:], shuffled[:num_test]
    if cfg.validation_fraction > 0:  # tuning: test writers set aside, training ones held out
        num_held = min(max(round(cfg.validation_fraction * len(train)), 1), len(train) - 1)
        if len(train) < 2:
            raise InputError(f"{source}: data.validation_fraction needs at least 2 training "
                             f"clients, got {len(train)}")
        train, test = train[num_held:], train[:num_held]
    return np.sort(train), np.sort(test)


def standardise(
    train_x: torch.Tensor, test_x: torch.Tensor, per_feature: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x - mean) / std with the training devices' statistics, applied to both sides.

    ``per_feature``: one mean/std per column of an (N, D) table; otherwise one
    scalar over all values (images). Constant features are only centred.
    """
    values = train_x.to(torch.float64)
    if per_feature:
        mean, std = values.mean(dim=0), values.std(dim=0, correction=0)
    else:
        mean, std = values.mean(), values.std(correction=0)
    std = torch.where(std > 0, std, torch.ones_like(std))
    return (
        ((train_x - mean) / std).to(torch.float32),
        ((test_x - mean) / std).to(torch.float32),
    )


def authors_pixels(
    train_x: torch.Tensor, test_x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The Δ-FL authors' FEMNIST inputs from simfl's ink-polarity images x in [0, 1].

    Their code (krishnap25/simplicial-fl, ``models/main.py``) takes LEAF's images
    v = 1 - x (background 1, ink 0) and feeds (v - mu_j) / mu_j, mu_j the mean of
    pixel j (its divisor is read from the constants file's "mean" entry, not "std"):
    zero-mean per pixel, ink -1, background from 0 at the border to ~0.9 in the
    centre. With m_j = 1 - mu_j, the training images' mean ink, that is
    (m_j - x) / (1 - m_j). Departure: their means are precomputed files, one for the
    training side and one, the test devices' own, for the test side; here both sides
    use the mean over this run's training devices (no statistic of the test devices
    enters). A pixel inked in every training image (mu_j = 0) is only centred.
    """
    mean_ink = train_x.to(torch.float64).mean(dim=0)
    mu = 1.0 - mean_ink
    mu = torch.where(mu > 0, mu, torch.ones_like(mu))
    return (
        ((mean_ink - train_x) / mu).to(torch.float32),
        ((mean_ink - test_x) / mu).to(torch.float32),
    )


def check_vectors(cfg: DataConfig, source: str) -> None:
    """InputError when ``cfg`` asks for an image scaling of samples that are vectors."""
    if cfg.pixel_scaling == "authors":
        raise InputError(f"{source}: 'data.pixel_scaling' = 'authors' is for 28x28 FEMNIST "
                         f"images; these samples are flat feature vectors")


def federate(
    name: str,
    clients: ClientData,
    cfg: DataConfig,
    streams: Streams,
    num_classes: int,
    per_feature: bool,
    source: str,
) -> FederatedData:
    """Writer-level split of in-memory clients, then standardisation with training-side stats."""
    rng = streams.numpy("data_split")
    train_idx, test_idx = split_clients(clients.num_samples, cfg, rng, source)
    train, test = clients.subset(train_idx), clients.subset(test_idx)
    if per_feature:
        check_vectors(cfg, source)
    train_x, test_x = train.x, test.x
    if cfg.standardise:
        train_x, test_x = standardise(train_x, test_x, per_feature)
    elif cfg.pixel_scaling == "authors":
        train_x, test_x = authors_pixels(train_x, test_x)
    return FederatedData(
        name=name,
        train=dataclasses.replace(train, x=train_x),
        test=dataclasses.replace(test, x=test_x),
        num_classes=num_classes,
    )
