"""What the servers ask the numerics, member by member, and how a resumed run treats each.

The servers (``server.LearnerLike``, ``async_server.AsyncLearnerLike``) never import
torch; a learner (``simfl.train.learner``) answers them. A resumed run replays the engine
from t = 0 (``simfl.runs.replay``), and during the replay every member is one of:

- ``ANSWER``: journaled while live and given back while replaying (it computes);
- ``EFFECT``: skipped while replaying, the checkpoint holds its outcome (it changes state);
- ``STATIC``: fixed by the scenario, asked again.

The Protocols and the replaying learner are tested against these two tables: adding a
member to a Protocol without classing it here fails a test.
"""

from __future__ import annotations

ANSWER, EFFECT, STATIC = "answer", "effect", "static"

# LearnerLike (the sync server's questions; the async server asks them too)
SYNC: dict[str, str] = {
    "selection_weights": ANSWER, "report_losses": ANSWER, "select": ANSWER, "train": ANSWER,
    "observe_online": EFFECT, "aggregate": EFFECT,
    "needs_losses": STATIC, "model_bytes": STATIC, "loss_report_bytes": STATIC,
    "wants_checkins": STATIC, "cohort_fraction": STATIC, "num_samples": STATIC,
    "client_ids": STATIC, "lr": STATIC,
}
# AsyncLearnerLike, beyond LearnerLike
ASYNC: dict[str, str] = {
    "train_from": ANSWER,
    "aggregate_buffer": EFFECT, "discard": EFFECT, "forget": EFFECT,
}


def members(kind: str) -> tuple[str, ...]:
    """Every member of either table replayed as ``kind``."""
    return tuple(name for table in (SYNC, ASYNC) for name, k in table.items() if k == kind)
