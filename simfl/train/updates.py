"""Trained updates waiting to be aggregated, keyed by (model version, client).

The synchronous server's round r trains from model version r and aggregates (a
subset of) its updates before round r + 1 trains; the asynchronous server's
tasks train from older versions and wait in the buffer. One store serves both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch


class UpdateStore:
    def __init__(self) -> None:
        self._deltas: dict[tuple[int, int], torch.Tensor] = {}  # (version, client) -> (P,)

    def __len__(self) -> int:
        return len(self._deltas)

    def put(self, version: int, deltas: Mapping[int, torch.Tensor]) -> None:
        """Keep the deltas (P,) of the given clients, trained from ``version``."""
        self._deltas.update({(version, k): delta for k, delta in deltas.items()})

    def take(self, versions: np.ndarray, client_idx: np.ndarray) -> torch.Tensor:
        """(K, P) the updates of the given (version, client) pairs, in that order; they
        leave the store."""
        return torch.stack([self._deltas.pop((int(v), int(k)))
                            for v, k in zip(versions, client_idx, strict=True)])

    def discard(self, versions: np.ndarray, client_idx: np.ndarray) -> None:
        """Forget updates that will not be aggregated (filtered, stale, dropped)."""
        for v, k in zip(versions, client_idx, strict=True):
            self._deltas.pop((int(v), int(k)), None)

    def state_dict(self) -> dict[str, Any]:
        """The updates waiting, {(version, client): (P,) delta}, for checkpoints."""
        return {"deltas": dict(self._deltas)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._deltas = dict(state["deltas"])

    def discard_version(self, version: int) -> None:
        """Forget every update trained from ``version`` (a sync round's late ones)."""
        for key in [key for key in self._deltas if key[0] == version]:
            del self._deltas[key]
