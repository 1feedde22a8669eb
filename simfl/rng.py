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
