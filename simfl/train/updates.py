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


def _use_count(t: torch.Tensor) -> int | None:
    """How many tensors (views included) hold ``t``'s storage, by PyTorch's count (None
    where this PyTorch has no such count)."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    return None if count is None else int(count(t.untyped_storage()._cdata))


class DeltaBuffers:
    """The memory of the (K, P) update matrices a run's training writes, reused from
    round to round. A fresh matrix costs more than writing it: the kernel maps and zeroes
    its pages at their first write and unmaps them when it is freed, which for 1,000
    FEMNIST clients of the linear model is 195 MB of float32 a round (its share of a
    round: bench/engine_cost.py, docs/foundation.md).

    :meth:`empty` hands out a view of a buffer that nothing else holds any more: its
    storage's use count (PyTorch counts every tensor and view on a storage) is what it
    was when the buffer was made, so no update, store entry or rule state still reads
    it. Else it forgets the buffers nobody holds (too small, or of another dtype or
    device: freed) and makes a new one, keeping at most ``keep`` (the ones still held
    stay where they are used, and are freed when they are done). Where PyTorch gives no
    use count, every call makes a new tensor."""

    def __init__(self, keep: int = 2) -> None:
        self.keep = keep
        self._buffers: list[tuple[torch.Tensor, int]] = []  # (flat buffer, its own count)

    def empty(self, rows: int, cols: int, like: torch.Tensor) -> torch.Tensor:
        """An uninitialised (rows, cols) tensor of ``like``'s dtype and device."""
        n = rows * cols
        for flat, own in self._buffers:
            if (flat.numel() >= n and flat.dtype == like.dtype and flat.device == like.device
                    and _use_count(flat) == own):
                return flat[:n].view(rows, cols)
        held = [b for b in self._buffers if _use_count(b[0]) != b[1]]
        self._buffers = held[max(0, len(held) + 1 - self.keep):] if self.keep > 0 else []
        new = like.new_empty(n)
        count = _use_count(new)
        if count is not None and self.keep > 0:
            self._buffers.append((new, count))
        return new.view(rows, cols)


FRESH = DeltaBuffers(keep=0)  # keeps nothing: every call makes a new tensor


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
        """The updates waiting, {(version, client): (P,) delta}, for checkpoints (copies:
        a view would carry its whole matrix into the file)."""
        return {"deltas": {key: matrix[row].clone() for key, (matrix, row) in self._rows.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rows = {key: (delta.unsqueeze(0), 0) for key, delta in state["deltas"].items()}

    def discard_version(self, version: int) -> None:
        """Forget every update trained from ``version`` (a sync round's late ones)."""
        for key in [key for key in self._rows if key[0] == version]:
            del self._rows[key]
