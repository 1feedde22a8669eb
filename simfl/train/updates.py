"""Trained updates waiting to be aggregated, keyed by (model version, client).

The synchronous server's round r trains from model version r and aggregates (a
subset of) its updates before round r + 1 trains; the asynchronous server's
tasks train from older versions and wait in the buffer. One store serves both.

An update is kept as a row of the (K, P) matrix its cohort's training wrote, never
copied on the way in; taking the rows of one cohort in the order they were trained
(a sync round where every update arrived) hands that matrix back as it lies, and
only other selections are gathered into a new (K, P) tensor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def finite_rows(deltas: torch.Tensor) -> np.ndarray:
    """(K,) whether each row of ``deltas`` (K, P) holds only finite values, from one
    reduction that reads the matrix once and writes K numbers: in IEEE 754 arithmetic a
    NaN or an infinity in a sum makes the sum NaN or infinite (no addition turns them
    finite), so every row whose sum is finite is finite; the rare others (a NaN/Inf, or
    finite values whose sum overflowed) are checked value by value."""
    finite = torch.isfinite(deltas.sum(dim=1))
    suspect = (~finite).nonzero().flatten()
    if len(suspect) > 0:
        finite[suspect] = torch.isfinite(deltas[suspect]).all(dim=1)
    return finite.cpu().numpy()


class UpdateStore:
    def __init__(self) -> None:
        # (version, client) -> (the (K, P) matrix its cohort trained, its row there)
        self._rows: dict[tuple[int, int], tuple[torch.Tensor, int]] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def put(self, version: int, client_idx: np.ndarray, deltas: torch.Tensor,
            keep: np.ndarray) -> None:
        """Keep row i of ``deltas`` (K, P), trained from ``version``, as the update of
        client ``client_idx[i]`` where ``keep[i]`` (the matrix itself: no copy)."""
        for i in np.flatnonzero(keep):
            self._rows[(version, int(client_idx[i]))] = (deltas, int(i))

    def take(self, versions: np.ndarray, client_idx: np.ndarray) -> torch.Tensor:
        """(K, P) the updates of the given (version, client) pairs, in that order; they
        leave the store. Consecutive rows of one trained matrix, in its order, come back
        as a view of it; other selections are gathered into a new tensor."""
        taken = [self._rows.pop((int(v), int(k)))
                 for v, k in zip(versions, client_idx, strict=True)]
        block, first = taken[0]
        rows = [row for _, row in taken]
        if all(matrix is block for matrix, _ in taken):
            if rows == list(range(first, first + len(rows))):
                return block[first:first + len(rows)]
            return block.index_select(0, torch.tensor(rows, device=block.device))
        out = block.new_empty((len(taken), block.shape[1]))
        for i, (matrix, row) in enumerate(taken):
            out[i] = matrix[row]
        return out

    def discard(self, versions: np.ndarray, client_idx: np.ndarray) -> None:
        """Forget updates that will not be aggregated (filtered, stale, dropped)."""
        for v, k in zip(versions, client_idx, strict=True):
            self._rows.pop((int(v), int(k)), None)

    def state_dict(self) -> dict[str, Any]:
        """The updates waiting, {(version, client): (P,) delta}, for checkpoints."""
        return {"deltas": {key: matrix[row] for key, (matrix, row) in self._rows.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rows = {key: (delta.unsqueeze(0), 0) for key, delta in state["deltas"].items()}

    def discard_version(self, version: int) -> None:
        """Forget every update trained from ``version`` (a sync round's late ones)."""
        for key in [key for key in self._rows if key[0] == version]:
            del self._rows[key]
