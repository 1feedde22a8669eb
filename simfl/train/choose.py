"""``train.backend = "auto"``: the faster backend for a cohort, measured, not ruled.

The first cohort of each size class (its number of clients K in [2^j, 2^(j+1)), K ≥ 2:
a single client trains with the loop, there being nothing to batch) has both backends'
round times predicted from a few timed steps on the cohort itself
(simfl.train.batched's ``_predict``); ``auto`` trains that class's cohorts with the
faster one from then on. The loop is taken only when predicted at least
``LOOP_MARGIN`` times faster: near a tie the batched backend stays, so timing noise
rarely makes two runs on one machine choose differently.

Both backends compute the same updates up to float rounding (tests/train), but not
bit for bit: two machines that choose differently give runs that differ in the last
bits. A run records its choices in its manifest (``train_backend``: the backend,
the batched kernel and the predicted seconds of each class) as soon as it makes
them, and a resumed run reuses them (:meth:`BackendChoice.restore`), so a resume
trains as the run it continues did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simfl.errors import InputError

LOOP_MARGIN = 1.1
Prediction = tuple[dict[str, float], str]  # seconds by candidate, the batched kernel


def size_class(num_clients: int) -> str:
    """The class of a cohort of ``num_clients`` (>= 1): "2^j-(2^(j+1) - 1)", e.g. "64-127"."""
    low = 1 << (num_clients.bit_length() - 1)
    return f"{low}-{2 * low - 1}"


class BackendChoice:
    """``auto``'s choices over one run, by cohort size class. ``on_choice`` (if set) is
    called after each new choice (a run writes its manifest then)."""

    def __init__(self) -> None:
        self.choices: dict[str, dict[str, Any]] = {}
        self.on_choice: Callable[[], None] | None = None

    def pick(self, num_clients: int, predict: Callable[[], Prediction]) -> tuple[str, int]:
        """The backend and chunk (clients per batched call; 0: the whole cohort) for a
        cohort of ``num_clients``: the class's earlier choice, else the fastest by
        ``predict()`` (seconds of the candidates "loop", "batched@CHUNK" and
        "batched@all", and the batched kernel's name)."""
        key = size_class(num_clients)
        if key not in self.choices:
            seconds, kernel = predict()
            batched = min((s, name) for name, s in seconds.items() if name != "loop")
            loop_wins = seconds["loop"] * LOOP_MARGIN < batched[0]
            self.choices[key] = {
                "backend": "loop" if loop_wins else "batched",
                "chunk": 0 if loop_wins or batched[1] == "batched@all"
                else int(batched[1].partition("@")[2]),
                "kernel": kernel, "clients": num_clients,
                "predicted_s": {name: float(f"{s:.4g}") for name, s in seconds.items()}}
            if self.on_choice is not None:
                self.on_choice()
        chosen = self.choices[key]
        return str(chosen["backend"]), int(chosen["chunk"])

    def record(self) -> dict[str, dict[str, Any]]:
        """The choices as plain data (the manifest's ``train_backend``)."""
        return {key: dict(value) for key, value in self.choices.items()}

    def restore(self, record: Any, where: str) -> None:
        """Take back the choices of :meth:`record` (None: none made yet); InputError
        naming ``where`` if it is not such a record."""
        if record is None:
            return
        ok = isinstance(record, dict) and all(
            isinstance(v, dict) and v.get("backend") in ("batched", "loop")
            and isinstance(v.get("chunk"), int) and v["chunk"] >= 0 for v in record.values())
        if not ok:
            raise InputError(f"{where}: 'train_backend' must map cohort size classes to "
                             f"{{\"backend\": \"batched\" | \"loop\", \"chunk\": n >= 0, ...}}, "
                             f"got {record!r}")
        self.choices = {str(key): dict(value) for key, value in record.items()}
