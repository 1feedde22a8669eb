"""Packed federated storage: one tensor of samples plus per-client offsets.

Client k owns rows ``offsets[k]:offsets[k + 1]`` of ``x`` and ``y``, so a cohort
is gathered with one vectorised index, never a Python loop over samples. A training
cohort is read in place instead (:meth:`ClientData.view`): the same ``x`` and ``y``,
client k's rows starting at ``starts[k]``, so a round copies no sample; training gathers
each minibatch's rows from the whole side (simfl.train.batched.plan_batches). Clients
whose samples are made when asked for (:class:`GeneratedClients`) hold only the
offsets and give packed :class:`ClientData` for a cohort, or for the whole side in
chunks of bounded memory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

# Features of one chunk of generated clients (GeneratedClients.chunks): large enough
# that a chunk's batched forward passes cost far more than its start (thousands of
# synthetic devices), small beside a run's model and population.
CHUNK_BYTES = 32 * 2**20


def client_rows(offsets: np.ndarray, client_idx: np.ndarray) -> np.ndarray:
    """Positions ``offsets[k]:offsets[k + 1]`` of the given clients, concatenated in order."""
    client_idx = np.asarray(client_idx, dtype=np.int64)
    starts = offsets[client_idx]
    return block_rows(starts, offsets[client_idx + 1] - starts)


def block_rows(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Positions ``starts[i]:starts[i] + counts[i]``, concatenated in order."""
    # Position within each block, without a loop over blocks.
    within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(starts, counts) + within


def take_rows(t: torch.Tensor, rows: np.ndarray | torch.Tensor) -> torch.Tensor:
    """``t[rows]`` as a new tensor. On the CPU through numpy: a cohort's samples are tens
    of MB a round, and numpy's gather into fresh memory measured 4x faster than torch's
    indexing (17 vs 76 ms for 100 FEMNIST writers; a training step's 1,000 rows 0.24 vs
    1.4 ms; one thread), with the same values.
    The difference is first-touch page faults: numpy asks for transparent huge pages
    (madvise), torch does not unless THP_MEM_ALLOC_ENABLE=1 (filling 96 MB of fresh
    memory: numpy 15 ms, torch 63 ms, torch with that variable 22 ms; measured on a
    kernel whose THP mode is "madvise")."""
    if t.device.type == "cpu":
        index = rows.numpy() if isinstance(rows, torch.Tensor) else rows
        return torch.from_numpy(np.take(t.numpy(), index, axis=0))
    return t[torch.as_tensor(rows, device=t.device)]


class _Offsets:
    """Clients whose samples are packed by ``offsets`` (client k owns rows
    ``offsets[k]:offsets[k + 1]``): their number and their sample counts."""

    offsets: np.ndarray  # (K + 1,) int64

    @property
    def num_clients(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_samples(self) -> np.ndarray:
        """(K,) samples per client."""
        return np.diff(self.offsets)


@dataclass(frozen=True)
class ClientData(_Offsets):
    """Samples of K clients packed together, or, for a view (``starts`` given), read in
    place from another ClientData's rows: client k owns rows ``starts[k]:starts[k] +
    num_samples[k]`` of ``x`` and ``y``, which are that data's own tensors."""

    x: torch.Tensor  # (N, *input_shape) float32, standardised
    y: torch.Tensor  # (N,) int64 class labels
    offsets: np.ndarray  # (K + 1,) int64, offsets[0] = 0: num_samples, and packed rows
    client_ids: np.ndarray  # (K,) str, e.g. LEAF writer ids
    starts: np.ndarray | None = None  # (K,) int64 first rows of a view; None: packed

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    def rows(self, client_idx: np.ndarray) -> np.ndarray:
        """Row indices of the given clients' samples, concatenated in the given order."""
        if self.starts is None:
            return client_rows(self.offsets, client_idx)
        client_idx = np.asarray(client_idx, dtype=np.int64)
        return block_rows(self.starts[client_idx], self.num_samples[client_idx])

    def subset(self, client_idx: np.ndarray) -> ClientData:
        """The given clients (in that order): packed into new tensors, or, of a view,
        another view of the same rows (no copy)."""
        if self.starts is not None:
            return self.view(client_idx)
        client_idx = np.asarray(client_idx, dtype=np.int64)
        rows = self.rows(client_idx)
        return ClientData(take_rows(self.x, rows), take_rows(self.y, rows),
                          _packed_offsets(self.num_samples[client_idx]),
                          self.client_ids[client_idx])

    def view(self, client_idx: np.ndarray) -> ClientData:
        """The given clients (in that order) read in place: the same ``x`` and ``y``, no
        sample copied; what :meth:`cohort` gives training."""
        client_idx = np.asarray(client_idx, dtype=np.int64)
        starts = self.offsets[:-1] if self.starts is None else self.starts
        return ClientData(self.x, self.y, _packed_offsets(self.num_samples[client_idx]),
                          self.client_ids[client_idx], starts[client_idx])

    def cohort(self, client_idx: np.ndarray) -> ClientData:
        """The given clients' samples as training reads them: in place (:meth:`view`)."""
        return self.view(client_idx)

    def chunks(self) -> Iterator[ClientData]:
        """The clients in memory: one chunk, themselves (a view: packed)."""
        yield self if self.starts is None else self.packed()

    def packed(self) -> ClientData:
        """The same clients packed into new tensors from row 0 (a view's copy)."""
        rows = self.rows(np.arange(self.num_clients))
        return ClientData(take_rows(self.x, rows), take_rows(self.y, rows), self.offsets,
                          self.client_ids)

    def to(self, device: torch.device) -> ClientData:
        """The same clients with their samples on ``device`` (e.g. all of them on a GPU once,
        so that rounds gather cohorts there instead of copying them from the host)."""
        return ClientData(self.x.to(device), self.y.to(device), self.offsets, self.client_ids,
                          self.starts)


def _packed_offsets(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


class Clients(Protocol):
    """K clients' samples, held in memory (:class:`ClientData`) or made when asked for
    (:class:`GeneratedClients`): what training and evaluation read."""

    @property
    def offsets(self) -> np.ndarray: ...  # (K + 1,) int64
    @property
    def client_ids(self) -> np.ndarray: ...  # (K,) str
    @property
    def num_clients(self) -> int: ...
    @property
    def num_samples(self) -> np.ndarray: ...  # (K,)
    @property
    def sample_shape(self) -> tuple[int, ...]: ...

    def subset(self, client_idx: np.ndarray) -> ClientData:
        """The given clients' samples, packed in that order."""
        ...

    def cohort(self, client_idx: np.ndarray) -> ClientData:
        """The given clients' samples for training: read in place where they are held
        (a view: ``starts`` gives each client's first row), else made and packed."""
        ...

    def chunks(self) -> Iterator[ClientData]:
        """Every client's samples, packed, in runs of consecutive clients (in order)."""
        ...

    def to(self, device: torch.device) -> Clients: ...


# Writes the samples of the given devices (m,), concatenated in their order, into x
# (n, *sample_shape) float32 and y (n,) int64, n their samples in all.
MakeSamples = Callable[[np.ndarray, np.ndarray, np.ndarray], None]


@dataclass(frozen=True)
class GeneratedClients(_Offsets):
    """Clients whose samples are made when asked for and never held together: client i is
    device ``device_idx[i]`` of ``make``, whose samples are a pure function of the
    device, the same whichever devices are made with it: a cohort, a chunk or one
    client alone."""

    make: MakeSamples
    device_idx: np.ndarray  # (K,) int64, the device of each client
    offsets: np.ndarray  # (K + 1,) int64, as ClientData's (the sample counts make gives)
    client_ids: np.ndarray  # (K,) str
    sample_shape: tuple[int, ...]
    device: torch.device = torch.device("cpu")  # where the samples made are put
    chunk_bytes: int = CHUNK_BYTES  # features of one chunk at most (a client more if one alone)

    def subset(self, client_idx: np.ndarray) -> ClientData:
        """The given clients' samples, made now and packed in that order."""
        client_idx = np.asarray(client_idx, dtype=np.int64)
        offsets = _packed_offsets(self.num_samples[client_idx])
        x = np.empty((offsets[-1], *self.sample_shape), np.float32)
        y = np.empty(offsets[-1], np.int64)
        self.make(self.device_idx[client_idx], x, y)
        return ClientData(torch.from_numpy(x).to(self.device), torch.from_numpy(y).to(self.device),
                          offsets, self.client_ids[client_idx])

    def cohort(self, client_idx: np.ndarray) -> ClientData:
        """The given clients' samples for training: made now (:meth:`subset`)."""
        return self.subset(client_idx)

    def chunks(self) -> Iterator[ClientData]:
        """Every client's samples in runs of consecutive clients, each at most
        ``chunk_bytes`` of float32 features (or one client), made one run at a time."""
        limit = max(1, self.chunk_bytes // (4 * math.prod(self.sample_shape)))  # samples
        start = 0
        while start < self.num_clients:
            stop = int(np.searchsorted(self.offsets, self.offsets[start] + limit, "right")) - 1
            stop = max(stop, start + 1)
            yield self.subset(np.arange(start, stop))
            start = stop

    def to(self, device: torch.device) -> GeneratedClients:
        return dataclasses.replace(self, device=device)


@dataclass(frozen=True)
class FederatedData:
    """Training devices and unseen test devices of one federated dataset."""

    name: str
    train: Clients  # training devices (their local data)
    test: Clients  # unseen test devices, never trained on
    num_classes: int

    def to(self, device: torch.device) -> FederatedData:
        return FederatedData(self.name, self.train.to(device), self.test.to(device),
                             self.num_classes)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.train.sample_shape

    def fingerprint(self) -> str:
        """sha256 of which device holds which labels: both sides' device ids, sample
        counts and labels; of generated clients, the labels of their first chunk (the
        others are made by the same code from the same seed, both checked apart). Not
        the features: standardised, their floats may differ in the last bit with the
        thread count. A resume checks it (simfl.runs.manifest)."""
        digest = hashlib.sha256(self.name.encode())
        for side in (self.train, self.test):
            digest.update("\0".join(map(str, side.client_ids)).encode())
            digest.update(np.asarray(side.offsets, dtype=np.int64).tobytes())
            for chunk in itertools.islice(side.chunks(), 1):  # data in memory: all of it
                digest.update(chunk.y.cpu().numpy().astype(np.int64).tobytes())
        return digest.hexdigest()

    def describe(self) -> str:
        """One line on the population a run uses: devices per side and the training
        devices' samples (compare with the papers' Table 1)."""
        n = self.train.num_samples
        return (f"{self.name}: {self.train.num_clients} training devices (samples per device "
                f"min {int(n.min())}, median {float(np.median(n)):g}, max {int(n.max())}), "
                f"{self.test.num_clients} unseen test devices, {self.num_classes} classes")
