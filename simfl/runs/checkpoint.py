"""Checkpoints, and resuming by replay: a killed run continues and ends with exactly the
files of an uninterrupted run (docs/design.md §9).

The SimPy engine cannot be pickled (its processes are generators) and a round's
stragglers outlive the round, so a run resumes by *replay*: the engine runs again
from t = 0 with the same scenario, and until the checkpoint's round boundary

* the learner gives back the answers journaled before the checkpoint (selection
  chances, loss reports, selections, training losses) instead of computing them,
  and skips the effects (aggregation, check-ins) whose outcome the checkpoint holds;
* evaluations answer with the last one before the checkpoint (their rows are on
  disk; only the run's summary is taken from them);
* the recorder drops every row: they are the rows the checkpoint committed.

At that boundary the learner's state (global model, aggregator and estimator state)
is restored and the run goes on live. Every random draw is keyed by purpose, round
and client (:mod:`simfl.rng`) and the population is rebuilt from the seed, so the
replayed engine takes exactly the decisions it took the first time, stragglers and
shared links included; nothing else (RNG state, clock, availability, pending work)
needs saving, and a replay costs the engine's time only (about 5 ms a round in
bench/population_scale.py's scenarios). The replay must meet the checkpoint's
simulated time exactly, or the run stops with a :class:`ReplayError`.

``run_dir/checkpoint/`` holds ``state.pt`` (rounds done, simulated time, the run's
wall-clock seconds so far, learner state, the Parquet parts committed, the journal's
length, the last evaluation; written last, it is the commit point),
``journal/000000.pt``, ... (the answers since the previous checkpoint, one file per
checkpoint), ``progress.json`` (rounds done, simulated time, wall seconds and the
scenario, for readers without torch: :func:`simfl.rundir.checkpoint_record`) and
``lock`` (held by the process working on the run: :func:`simfl.rundir.run_lock`).
Files are written atomically (:func:`simfl.rundir.write_atomically`). The ``.pt`` files
hold plain data only (:mod:`simfl.runs.plain`) and are read with
``torch.load(weights_only=True)``: a checkpoint from someone else's run folder cannot
run code on resume, and a rename of simfl's classes does not change the format.
"""

from __future__ import annotations

import io
import json
import signal
import threading
from collections.abc import Callable, Container, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import torch

from simfl.errors import InputError, RunInterrupted
from simfl.records import Committed, Recorder
from simfl.rundir import (
    CHECKPOINT_DIR,
    CHECKPOINT_LAYOUT,
    JOURNAL_DIR,
    PROGRESS_FILE,
    STATE_FILE,
    checkpoint_record,
    json_default,
    remove_written,
    write_atomically,
)
from simfl.runs.plain import decode, encode
from simfl.runs.replay import Entry, JournaledLearner, ReplayError
from simfl.sim.tasks import RoundHook
from simfl.train.evaluate import CohortEval

# 3: the learner's state as plain data under named keys (Learner.state_dict), no object graph
# 4: no pickled object at all (simfl.runs.plain), read with weights_only; progress.json
FORMAT = 4
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# After a stop signal, how long the round in progress may take to end at a boundary (and
# write a checkpoint there) before the run stops from its last checkpoint instead.
STOP_GRACE_S = 0.5

@dataclass(frozen=True)
class Checkpoint:
    """A run's state at a round boundary, read back to resume it."""

    rounds_done: int
    t_s: float  # simulated time of the boundary
    wall_s: float  # wall-clock seconds the run had worked up to the boundary, all sessions
    learner: dict[str, Any]  # JournaledLearner.state_dict()
    tables: dict[str, Committed]  # the Parquet parts committed
    journal: list[Entry]  # every answer before the boundary
    num_segments: int  # journal files
    last_eval: dict[str, CohortEval] | None


def _segment_path(directory: Path, index: int) -> Path:
    return directory / JOURNAL_DIR / f"{index:06d}.pt"


def _remove_segments(directory: Path, keep: int) -> None:
    """Remove the journal files written after the checkpoint (a crash before its commit)."""
    for path in sorted((directory / JOURNAL_DIR).glob("[0-9]*.pt"))[keep:]:
        path.unlink()


def _save(value: Any) -> bytes:
    """``value`` as plain data (simfl.runs.plain) in torch's file format."""
    buffer = io.BytesIO()  # torch's own file writer reports a full disk as a RuntimeError
    torch.save(encode(value), buffer)
    return buffer.getvalue()


def _load(path: Path, device: torch.device | None = None) -> Any:
    """What :func:`_save` wrote at ``path``: read with ``weights_only`` (no class is
    imported or called: a file carrying code is an UnpicklingError), then decoded."""
    return decode(torch.load(path, map_location=device, weights_only=True))


def load_checkpoint(run_dir: Path, device: torch.device) -> Checkpoint | None:
    """The run's last checkpoint, or None if it has none; removes journal files that a
    crash left beyond it."""
    directory = run_dir / CHECKPOINT_DIR
    path = directory / STATE_FILE
    if not path.is_file():
        _remove_segments(directory, keep=0)
        return None
    progress = checkpoint_record(run_dir)  # InputError for an older simfl's checkpoint
    if progress is None or progress.get("format") != FORMAT:
        raise InputError(f"{path}: checkpoint format {(progress or {}).get('format')!r}, this "
                         f"simfl reads format {FORMAT}; remove {run_dir} to run it again from "
                         f"the start")
    try:
        state = _load(path, device)
        journal = [tuple(entry) for i in range(state["journal_segments"])
                   for entry in _load(_segment_path(directory, i))]
    except Exception as e:  # a torn, foreign or hostile file fails in many ways: one line
        raise InputError(f"{path}: cannot read the checkpoint "
                         f"({type(e).__name__}: {_first_line(e)})") from None
    _remove_segments(directory, keep=state["journal_segments"])
    return Checkpoint(state["rounds_done"], state["t_s"], state["wall_s"], state["learner"],
                      state["tables"], journal, state["journal_segments"], state["last_eval"])


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else ""


def checkpoint_scenario(run_dir: Path) -> dict[str, Any] | None:
    """The scenario (as in the manifest) the run's last checkpoint was written with; None
    if it has no checkpoint, or one from before checkpoints kept it."""
    state = checkpoint_record(run_dir)
    return None if state is None else state.get("scenario")


def checkpoint_rounds(every: int, num_rounds: int) -> range:
    """The round counts after which a run of ``num_rounds`` checkpoints: every ``every``
    rounds (0: never), not after the last (the run is then complete)."""
    return range(every, num_rounds, every) if every else range(0)


class Checkpointer:
    """Checkpoints a run at round boundaries, stops it on SIGTERM/SIGINT, and switches a
    resumed run from replay to live at its checkpoint's boundary."""

    def __init__(self, run_dir: Path, at_rounds: Container[int], learner: JournaledLearner,
                 recorder: Recorder, wall_s: Callable[[], float],
                 resume: Checkpoint | None = None,
                 scenario: dict[str, Any] | None = None) -> None:
        """``at_rounds``: after which rounds to checkpoint (every ``run.checkpoint_every``
        but the last: :func:`checkpoint_rounds`); ``scenario``: the run's, as in its
        manifest, kept in every checkpoint (a resume names what an edited manifest changed)."""
        self.dir = run_dir / CHECKPOINT_DIR
        self.scenario = scenario
        self.at_rounds = at_rounds
        self.learner, self.recorder, self.resume = learner, recorder, resume
        self.wall_s = wall_s  # the run's wall-clock seconds so far
        self.num_segments = 0 if resume is None else resume.num_segments
        self.last_round = 0 if resume is None else resume.rounds_done  # of the last checkpoint
        self.stop_signal: int | None = None
        if resume is not None:
            journal = learner.journal
            journal.replay, journal.last_eval = resume.journal, resume.last_eval
            journal.live = False
            recorder.mute(True)

    def wrap(self, hook: RoundHook) -> RoundHook:
        """``hook``, then this checkpointer's work, after every round."""

        def after_round(rounds_done: int, t_s: float) -> None:
            hook(rounds_done, t_s)
            self.after_round(rounds_done, t_s)

        return after_round

    def after_round(self, rounds_done: int, t_s: float) -> None:
        if self.resume is not None and not self.learner.journal.live:
            if rounds_done == self.resume.rounds_done:
                self._go_live(t_s)
            elif self.stop_signal is not None:  # the checkpoint on disk stays the last one
                raise RunInterrupted(self.stop_signal, self.resume.rounds_done)
            return
        if self.stop_signal is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)  # a boundary in time: no hard stop
            self.write(rounds_done, t_s)
            raise RunInterrupted(self.stop_signal, rounds_done)
        if rounds_done in self.at_rounds:
            self.write(rounds_done, t_s)

    def write(self, rounds_done: int, t_s: float) -> None:
        """Commit the tables' rows as parts, then the journal since the last checkpoint,
        then the state (the commit point): a crash at any step leaves the previous
        checkpoint whole."""
        tables = self.recorder.flush()
        journal = self.learner.journal
        segment = _segment_path(self.dir, self.num_segments)
        segment.parent.mkdir(parents=True, exist_ok=True)
        entries = _save(journal.recorded)
        write_atomically(segment, lambda tmp: tmp.write_bytes(entries))
        progress = {"format": FORMAT, "rounds_done": rounds_done, "t_s": t_s,
                    "wall_s": self.wall_s(), "scenario": self.scenario}
        state = _save({**progress, "learner": self.learner.state_dict(), "tables": tables,
                       "journal_segments": self.num_segments + 1,
                       "last_eval": journal.last_eval})
        text = json.dumps(progress, default=json_default)
        write_atomically(self.dir / PROGRESS_FILE, lambda tmp: tmp.write_text(text))
        write_atomically(self.dir / STATE_FILE, lambda tmp: tmp.write_bytes(state))
        self.num_segments += 1
        self.last_round = rounds_done
        journal.recorded = []

    def discard(self) -> None:
        """The run is complete: its checkpoint is not needed any more."""
        remove_written(self.dir, CHECKPOINT_LAYOUT)

    @contextmanager
    def on_signals(self) -> Iterator[None]:
        """Inside, the first SIGTERM/SIGINT stops the run (:class:`RunInterrupted`) within
        a second: at the end of the round in progress, with a checkpoint there, if it ends
        within ``STOP_GRACE_S``; else where it is, from the last checkpoint (a long round,
        or a server waiting for devices). A second signal stops it at once
        (KeyboardInterrupt). Only the main thread takes signals: elsewhere, no change."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handle(signum: int, frame: FrameType | None) -> None:
            if self.stop_signal is not None:
                raise KeyboardInterrupt(f"second {signal.Signals(signum).name}")
            self.stop_signal = signum
            signal.setitimer(signal.ITIMER_REAL, STOP_GRACE_S)

        def hard_stop(signum: int, frame: FrameType | None) -> None:
            assert self.stop_signal is not None
            raise RunInterrupted(self.stop_signal, self.last_round, mid_round=True)

        previous = {s: signal.signal(s, handle) for s in STOP_SIGNALS}
        previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, hard_stop)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _go_live(self, t_s: float) -> None:
        assert self.resume is not None
        journal = self.learner.journal
        if t_s != self.resume.t_s or not journal.exhausted:
            raise ReplayError(
                f"the replay reached round {self.resume.rounds_done} at t = {t_s!r} s with "
                f"{len(journal.replay) - journal.position} journaled answers left, but the "
                f"checkpoint was written there at t = {self.resume.t_s!r} s with none left: "
                f"the code or its environment changed since the run started")
        self.learner.load_state_dict(self.resume.learner)
        journal.replay, journal.position, journal.live = [], 0, True
        self.recorder.mute(False)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Inside (a finished run writing its last files), a first SIGTERM/SIGINT waits for
    the block to end, when the run is complete and the signal has nothing left to stop;
    a second stops it at once (KeyboardInterrupt; the last checkpoint and its parts are
    still whole). Only the main thread takes signals: elsewhere, no change."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        if received:
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}")
        received.append(signum)

    previous = {s: signal.signal(s, handle) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
