"""Is the run learning? Per-round outcomes, the run's health totals, and the stall rule.

Both servers report every round (sync) or server update (async) here: how many updates
were aggregated, the Δ-FL threshold, and what became of every selected device. A run
in which ``idle_share`` of the last ``idle_window`` rounds aggregated nothing, or had a
non-finite threshold, cannot be learning: :meth:`Health.round_done` raises
:class:`RunStalled` naming the cause (``failed``, exit 1), instead of the run ending
"complete" with an untrained model. A run shorter than the window is judged over all
its rounds when it ends (:meth:`Health.check_end`), and a run none of whose rounds
aggregated an update fails then whatever the window (``idle_window = 0`` included).

Replay (simfl.runs.checkpoint) re-runs the server from t = 0, so the totals need no saving:
a resumed run reports every round again and ends with the same counts.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable

from simfl.errors import RunFailed

# Why an update selected in an idle round did not count, and which key to look at.
CAUSES = {
    "late": "arrived after the round closed (server.deadline_s)",
    "dropped": "devices went offline or failed before uploading "
               "(population.failure_rate_per_h, population.availability)",
    "nonfinite": "updates had NaN/Inf values (the local training diverged: train.lr, or "
                 "model.l2 / aggregator.mu if set)",
    "stale": "updates were staler than server.max_staleness",
    "filtered": "every device was filtered out by the Δ-FL threshold",
}


class RunStalled(RunFailed):
    """The run stopped learning (no aggregated update, or a non-finite threshold, in too
    many recent rounds), or waited too long for devices: the run fails."""


class Health:
    """Counts of round outcomes over a run, and the stall rule over the last rounds."""

    def __init__(self, idle_window: int, idle_share: float) -> None:
        self.idle_window, self.idle_share = idle_window, idle_share
        self.rounds = 0
        self.idle_rounds = 0  # rounds that aggregated no update
        self.nonfinite_thresholds = 0
        self.statuses: Counter[str] = Counter()  # final status of every selected device
        self.last_aggregated = 0
        # (round, idle, threshold non-finite, device statuses at aggregation)
        self._recent: deque[tuple[int, bool, bool, Counter[str]]] = deque(
            maxlen=max(idle_window, 1))

    def round_done(self, round_idx: int, num_aggregated: int, threshold: float | None,
                   statuses: Iterable[str]) -> None:
        """Round ``round_idx`` aggregated ``num_aggregated`` updates under ``threshold``
        (None: the rule has none), with these device statuses at aggregation time."""
        self.rounds += 1
        self.last_aggregated = num_aggregated
        nonfinite = threshold is not None and not math.isfinite(threshold)
        self.nonfinite_thresholds += nonfinite
        self.idle_rounds += num_aggregated == 0
        self._recent.append((round_idx, num_aggregated == 0 or nonfinite, nonfinite,
                             Counter(statuses)))
        if self.idle_window and len(self._recent) == self.idle_window:
            self._judge()

    def tasks_ended(self, version: int, statuses: list[str], buffer_size: int,
                    none_left: bool) -> None:
        """Async server: ``statuses`` of the tasks ended since server update ``version``
        began. As many as ``idle_window`` buffers without an update is a stall, and so is
        ``none_left``: every device has run its task from this version (one each) and none
        is in flight, so no update can come."""
        if self.idle_window and (len(statuses) >= self.idle_window * buffer_size or none_left):
            counts = Counter(status or "buffered" for status in statuses)
            parts = ", ".join(f"{n} {status}" for status, n in counts.most_common())
            top = counts.most_common(1)[0][0]
            every = ", every device's task from this version" if none_left else ""
            raise RunStalled(f"the run is not learning: {len(statuses)} tasks ended{every} "
                             f"without filling a buffer of {buffer_size} for server update "
                             f"{version} ({parts}): {CAUSES.get(top, top)}")

    def devices_done(self, statuses: Iterable[str]) -> None:
        """The final statuses of a round's devices (stragglers included)."""
        self.statuses.update(statuses)

    def check_end(self) -> None:
        """At the end of a run: judge all of its rounds if it was shorter than the
        window; fail it if it trained nothing."""
        if self.idle_window and 0 < len(self._recent) < self.idle_window:
            self._judge()
        if self.rounds and self.idle_rounds == self.rounds:  # every round: all devices
            cause = _cause(self.nonfinite_thresholds > 0, self.statuses)
            raise RunStalled(f"the run trained nothing: none of its {self.rounds} rounds "
                             f"aggregated an update; {cause}")

    def _judge(self) -> None:
        idle = [r for r, is_idle, _, _ in self._recent if is_idle]
        if not idle or len(idle) < self.idle_share * len(self._recent):
            return
        first, last = self._recent[0][0], self._recent[-1][0]
        counts: Counter[str] = Counter()
        for _, is_idle, _, statuses in self._recent:
            if is_idle:
                counts.update(statuses)
        cause = _cause(any(nonfinite for _, _, nonfinite, _ in self._recent), counts)
        raise RunStalled(f"the run is not learning: {len(idle)} of rounds {first}-{last} "
                         f"aggregated no update or had a non-finite threshold; {cause}")

    def summary(self) -> dict[str, object]:
        """The manifest's ``health``: round and update counts of the whole run."""
        return {"rounds": self.rounds, "rounds_without_update": self.idle_rounds,
                "nonfinite_thresholds": self.nonfinite_thresholds,
                "updates_by_status": dict(sorted(self.statuses.items()))}


def _cause(nonfinite: bool, counts: Counter[str]) -> str:
    """What the idle rounds have in common, in words: a non-finite threshold, or
    the statuses (``counts``) of their devices."""
    if nonfinite:
        return ("the Δ-FL threshold is non-finite: the loss reports are NaN/Inf "
                "(the model diverged: train.lr)")
    if not counts:
        return "no device was selected"
    parts = ", ".join(f"{n} {status}" for status, n in counts.most_common())
    top = counts.most_common(1)[0][0]
    return f"of their {sum(counts.values())} devices {parts}: {CAUSES.get(top, top)}"
