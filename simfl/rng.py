"""One root seed, independent named random streams.

Every random draw in simfl comes from a stream keyed by (purpose, *keys), e.g.
``streams.numpy("selection", round_idx)`` or ``streams.seed("shuffle", round_idx,
client_id)``. Streams are derived with :class:`numpy.random.SeedSequence`, so two
keys never share a stream, and adding a new purpose never changes the draws of
an existing one. Library code never touches a global random state.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np


def _purpose_key(purpose: str) -> int:
    # A stable 32-bit key per purpose name (Python's hash() is salted per process).
    return int.from_bytes(hashlib.sha256(purpose.encode()).digest()[:4], "little")


@dataclass(frozen=True)
class Streams:
    """Factory of named random streams derived from one root seed."""

    root_seed: int

    def sequence(self, purpose: str, *keys: int) -> np.random.SeedSequence:
        spawn_key = (_purpose_key(purpose), *(int(k) for k in keys))
        return np.random.SeedSequence(entropy=self.root_seed, spawn_key=spawn_key)

    def numpy(self, purpose: str, *keys: int) -> np.random.Generator:
        """A numpy Generator for ``purpose`` keyed by ``keys`` (round, client, ...)."""
        return np.random.Generator(np.random.PCG64(self.sequence(purpose, *keys)))

    def seed(self, purpose: str, *keys: int) -> int:
        """A 63-bit integer seed (for a ``torch.Generator``) for ``purpose`` and ``keys``."""
        return int(self.sequence(purpose, *keys).generate_state(1, dtype=np.uint64)[0] >> 1)

    def keyed(self, purpose: str) -> KeyedStreams:
        """Streams of ``purpose`` keyed by one integer (a device), cheap to switch between."""
        return KeyedStreams(int(self.sequence(purpose).generate_state(1, np.uint64)[0]))


class KeyedStreams:
    """One Philox stream per integer key: Philox is counter-based, its 128-bit key selects
    an independent stream (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
    SC 2011); here the key is (a word of the purpose's SeedSequence, k). :meth:`at`
    rewinds one generator to the start of stream k by writing its state (about 4 µs)
    where a Generator of its own costs about 18 (a SeedSequence and a bit generator):
    the difference is most of the cost of a small device's samples made on demand."""

    def __init__(self, word: int) -> None:
        self._bits = np.random.Philox(key=np.array([word, 0], dtype=np.uint64))
        self._generator = np.random.Generator(self._bits)
        self._state = self._bits.state

    def at(self, key: int) -> np.random.Generator:
        """The generator at the start of stream ``key``. It is the same object for every
        key: take what is needed from it before asking for another."""
        state = self._state
        state["state"]["key"][1] = key
        state["state"]["counter"][:] = 0
        state["buffer_pos"] = 4  # the buffer of raw draws is empty
        state["has_uint32"] = 0
        self._bits.state = state
        return self._generator
