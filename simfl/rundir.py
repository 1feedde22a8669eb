"""A run's directory: the names of what simfl writes there, which of it simfl may
delete, atomic writes, the manifest, and the lock of the process working on the run.

Torch-free, so the commands that only look at runs (``sweep --status``, ``collect``,
``plot``, ``tune``) load none of the numerics. What a run directory holds::

    manifest.json                    status, scenario, versions, summary (docs/design.md §8)
    <table>.parquet                  one per table of TABLES, once the run is complete
    availability_intervals.parquet   with population.availability.log_intervals
    parts/<table>/part-NNNNNN.parquet  the rows so far, while the run is not complete
    checkpoint/state.pt, progress.json, journal/NNNNNN.pt, lock
                                     (simfl.runs.checkpoint; the lock: here)
    plots/<figure>.<format>          RUN_PLOTS (simfl.plots.runs)

A ``.tmp`` beside a file is its unfinished atomic write (:func:`write_atomically`).
A sweep's folder, ``results/<sweep name>/``, holds its runs' directories and what
``collect`` writes (``<table>.parquet``, ``plots/``: SWEEP_FIGURES), each file marked
with COLLECT_MARK; a tuning's also what ``tune`` writes (TUNE_BEGINS: how each file
begins). A checkpoint's progress (rounds done, wall seconds, scenario) is read here
from its ``progress.json``, without torch and without unpickling anything
(:func:`checkpoint_progress`).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

from simfl.errors import InputError, RunBusy

MANIFEST = "manifest.json"
TABLES = ("rounds", "clients", "comm", "bias", "availability", "devices", "eval")  # SCHEMAS'
INTERVALS_FILE = "availability_intervals.parquet"  # the availability trace, when logged
PARTS_DIR = "parts"
PLOTS_DIR = "plots"  # a run's figures (simfl.plots; a test checks that it writes no others)
FIGURE_FORMATS = ("png", "pdf", "svg")  # what `plot --format` writes (matplotlib, no extras)
# error_vs_size: no longer drawn (simfl.plots.runs.RETIRED_FIGURES), still the run's own
RUN_PLOT_STEMS = ("test_error_hist", "p90_vs_time", "p90_vs_bytes", "error_vs_size",
                  "error_vs_rounds", "round_durations", "availability", "staleness",
                  "threshold_estimates", "bias_decomposition")
RUN_PLOTS = tuple(f"{stem}.{fmt}" for stem in RUN_PLOT_STEMS for fmt in FIGURE_FORMATS)
CHECKPOINT_DIR = "checkpoint"
STATE_FILE = "state.pt"
PROGRESS_FILE = "progress.json"  # the checkpoint's plain facts, beside state.pt
LOCK_FILE = "lock"
JOURNAL_DIR = "journal"
# What collect writes in a sweep's folder: its tables and these figures (in plots/: the
# study's by simfl.plots.study.plot_sweep, any sweep's by simfl.plots.sweep.sweep_figures),
# each carrying this mark, in a Parquet table's key-value metadata or a PNG's text:
# collect replaces its own files and nothing else.
STUDY_FIGURES = ("protocol_cost.png", "bias_vs_cohort.png", "conformity_vs_cohort.png",
                 "online_bias_vs_cohort.png", "decomposition_vs_cohort.png",
                 "p90_vs_bytes_by_estimator.png")
GRID_FIGURES = ("p90_vs_round.png", "p90_vs_bytes.png", "final_p90.png")
SWEEP_FIGURES = STUDY_FIGURES + GRID_FIGURES
COLLECT_MARK = {"simfl": "collect"}
# What tune writes in results/<tuning name>/, and how each file it wrote begins: a file
# there that begins otherwise is not tune's, and tune refuses to replace or remove it.
TUNE_REPORT, TUNE_CHOICE = "tuning.md", "chosen.toml"
TUNE_BEGINS = {TUNE_REPORT: "# Tuning: ", TUNE_CHOICE: "# Chosen by python -m simfl tune "}

# What simfl writes in a folder, as data: a name (a regular expression over the whole
# name) maps to FILE or to the layout of a folder; a ".tmp" beside a file is its
# unfinished atomic write.
FILE = None
Layout = dict[str, "Layout | None"]
PARTS_LAYOUT: Layout = {name: {r"part-\d{6}\.parquet": FILE} for name in TABLES}  # parts/
CHECKPOINT_LAYOUT: Layout = {STATE_FILE: FILE, PROGRESS_FILE: FILE, LOCK_FILE: FILE,
                             JOURNAL_DIR: {r"\d{6}\.pt": FILE}}  # checkpoint/
# What a run directory holds, all written by simfl: only these are ever deleted, by
# --overwrite.
RUN_LAYOUT: Layout = {
    **{re.escape(name): FILE for name in (MANIFEST, INTERVALS_FILE,
                                          *(f"{table}.parquet" for table in TABLES))},
    CHECKPOINT_DIR: CHECKPOINT_LAYOUT,
    PARTS_DIR: PARTS_LAYOUT,
    PLOTS_DIR: {re.escape(name): FILE for name in RUN_PLOTS},
}
NAME_MAX = 255  # bytes of one path component on Linux file systems


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)``, fsync, then rename over ``path``: a reader (or a run resumed after
    a crash) sees the old file or the whole new one, never a torn one; a write that
    fails (a full disk) removes its temporary file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk, a kill signal's exception: no half-written file stays
        tmp.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)  # make the rename itself durable
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def written_by_tune(path: Path) -> bool:
    """Whether ``path`` is a tuning.md or chosen.toml that tune wrote (by how it begins)."""
    begins = TUNE_BEGINS.get(path.name)
    try:
        return (begins is not None and path.is_file() and not path.is_symlink()
                and path.read_text(errors="replace").startswith(begins))
    except OSError:
        return False


def check_output_path(path: Path) -> None:
    """InputError, before anything is written, unless simfl can create ``path`` (a file,
    or a folder it writes into) with the folders above it that are missing: the path is
    not empty, it is UTF-8 (Parquet and JSON metadata name files in it), no component is
    longer than :data:`NAME_MAX` bytes, and the deepest existing folder (``path`` itself
    if it is one) takes new entries, as a temporary file created and removed there shows
    (permissions, a read-only file system, /proc). The one place that turns the OS's
    refusal of an output path into one line naming it; a folder that does not exist
    above a file, or a file where a folder should be, is left to the callers' messages."""
    try:
        os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{ascii(str(path))}: an output path must be valid UTF-8") from None
    for part in path.parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise InputError(f"{path}: the name {part[:20]!r}... is {len(os.fsencode(part))} "
                             f"bytes long, more than the {NAME_MAX} a file system takes")
    try:
        folder = next((p for p in (path, *path.parents) if p.is_dir()), None)
        if folder is None:
            return
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".simfl-probe-")
    except OSError as e:
        raise InputError(f"{path}: cannot write there ({e.strerror})") from None
    os.close(fd)
    os.unlink(probe)


def foreign_entry(folder: Path, layout: Layout) -> Path | None:
    """The first entry under ``folder`` that ``layout`` does not name (a symbolic link
    never counts as simfl's), or None when simfl could have written all of it. A folder
    that goes while it looks (a run completing removes its parts) holds nothing foreign."""
    try:
        entries = sorted(folder.iterdir())
    except FileNotFoundError:
        return None
    for entry in entries:
        inner = _layout_of(entry, layout)
        if inner is False:
            return entry
        if isinstance(inner, dict) and (found := foreign_entry(entry, inner)) is not None:
            return found
    return None


def remove_written(folder: Path, layout: Layout) -> None:
    """Delete what ``layout`` names under ``folder``, then each folder that this left
    empty: whatever else is there stays, with the folders that hold it."""
    if not folder.is_dir() or folder.is_symlink():
        return
    for entry in folder.iterdir():
        inner = _layout_of(entry, layout)
        if inner is FILE:
            entry.unlink()
        elif isinstance(inner, dict):
            remove_written(entry, inner)
    if not any(folder.iterdir()):
        folder.rmdir()


def _layout_of(entry: Path, layout: Layout) -> Layout | None | bool:
    """FILE or a folder's layout when ``layout`` names ``entry`` as what it is, else False."""
    if entry.is_symlink():
        return False
    name = entry.name.removesuffix(".tmp")
    for pattern, inner in layout.items():
        if re.fullmatch(pattern, name) and (entry.is_dir() if isinstance(inner, dict)
                                            else entry.is_file()):
            return inner
    return False


def prepare_run_dir(run_dir: Path, overwrite: bool, advise: bool = True) -> None:
    """Check that ``run_dir`` may receive a new run, before any work: it is absent or
    empty, or (``overwrite``) it is a simfl run holding nothing simfl did not write (no
    other name, no symbolic link, at any depth). InputError otherwise, with the run
    command's advice (--overwrite, --out) unless ``advise`` is False; a run that a live
    process works on is refused by its lock."""
    check_output_path(run_dir)
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: exists and is not a directory")
    if all(_only_lock(e) for e in run_dir.iterdir()):
        return
    if not overwrite:
        raise InputError(f"{run_dir}: results directory exists (use --overwrite to replace it)")
    manifest = read_manifest(run_dir) if (run_dir / MANIFEST).is_file() else {}
    advice = ("; --overwrite only replaces a run and deletes nothing else",
              "; --overwrite would delete it (move it, or choose another --out)")
    check_simfl_run(run_dir, manifest, advice if advise else ("", ""))


def check_simfl_run(run_dir: Path, manifest: dict[str, Any], advice: tuple[str, str]) -> None:
    """InputError unless ``manifest`` (``run_dir``'s) is one a simfl run wrote and
    ``run_dir`` holds nothing :data:`RUN_LAYOUT` does not name; ``advice``: what each of
    the two messages ends with."""
    if not is_run_manifest(manifest):
        raise InputError(f"{run_dir}: not a simfl run (no simfl manifest.json){advice[0]}")
    foreign = foreign_entry(run_dir, RUN_LAYOUT)
    if foreign is not None:
        raise InputError(f"{run_dir}: holds {str(foreign.relative_to(run_dir))!r}, which simfl "
                         f"did not write{advice[1]}")


def is_run_manifest(manifest: dict[str, Any]) -> bool:
    """Whether a manifest.json is one a simfl run wrote (``simfl.runs.run``'s manifest)."""
    versions = manifest.get("versions")
    return (isinstance(manifest.get("scenario"), dict) and isinstance(manifest.get("status"), str)
            and isinstance(versions, dict) and "simfl" in versions)


def _only_lock(entry: Path) -> bool:
    """Whether ``entry`` is a checkpoint folder holding a run lock and nothing else."""
    return (entry.name == CHECKPOINT_DIR and entry.is_dir() and not entry.is_symlink()
            and [p.name for p in entry.iterdir()] == [LOCK_FILE])


def clear_run_dir(run_dir: Path) -> None:
    """Delete the run in ``run_dir`` (checked by prepare_run_dir), but the lock we hold."""
    but_lock = {name: inner for name, inner in CHECKPOINT_LAYOUT.items() if name != LOCK_FILE}
    remove_written(run_dir, {**RUN_LAYOUT, CHECKPOINT_DIR: but_lock})


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """``run_dir/manifest.json``; InputError if it is missing or not a json object."""
    path = run_dir / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: not found (is {run_dir} a run directory?)") from None
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read the manifest ({e})") from None
    if not isinstance(manifest, dict):
        raise InputError(f"{path}: the manifest must be a json object")
    return manifest


def manifest_or_empty(run_dir: Path) -> dict[str, Any]:
    """The run's manifest, or {} when there is none readable (a run not started yet)."""
    try:
        return read_manifest(run_dir)
    except InputError:
        return {}


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest`` as ``run_dir/manifest.json``, atomically."""
    text = _manifest_text(manifest)
    write_atomically(run_dir / MANIFEST, lambda tmp: tmp.write_text(text))


def overwrite_manifest_in_place(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest`` over ``run_dir/manifest.json`` in the blocks the file holds
    already, when it fits in them (a full disk has no room for a new copy; a write into
    allocated blocks needs none, so it cannot stop half-way for lack of space); else
    leave the file as it is."""
    path, data = run_dir / MANIFEST, _manifest_text(manifest).encode()
    if len(data) > path.stat().st_blocks * 512:
        return
    with path.open("r+b") as f:
        f.write(data)
        f.truncate()
        f.flush()
        os.fsync(f.fileno())


def _manifest_text(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=2, default=json_default) + "\n"


def json_default(value: Any) -> Any:
    """How a manifest's JSON writes what json does not know: numpy scalars as numbers."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir``'s lock while working on the run: a second process (a resume of a
    run still going) gets a RunBusy error. The kernel drops the lock when the process
    dies, SIGKILL included. The lock is the file in the folder now: a run that completes
    removes its checkpoint folder, lock included, while it holds it, so a lock got on a
    file no longer there (opened before, locked after) is taken again on the new one.
    Whoever holds it reads the run again: what it read before may have changed."""
    path = run_dir / CHECKPOINT_DIR / LOCK_FILE
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            f = path.open("w")
        except FileNotFoundError:  # the folder went between the two calls: again
            continue
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise RunBusy(f"{run_dir}: another process is working on this run") from None
        if _is_file_at(f.fileno(), path):
            break
        f.close()
    with f:
        yield


def _is_file_at(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is the one at ``path`` now (not one removed)."""
    try:
        at = path.stat()
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (at.st_dev, at.st_ino)


def drop_complete_lock(run_dir: Path) -> None:
    """Remove ``run_dir``'s lock, which this process holds, and its checkpoint folder when
    it holds nothing else: a complete run has no checkpoint folder, and a process that took
    the lock only to find the run complete leaves the run's files as they were. One that
    opened the lock before it went takes it again on a new file (:func:`run_lock`)."""
    folder = run_dir / CHECKPOINT_DIR
    if _only_lock(folder):
        (folder / LOCK_FILE).unlink(missing_ok=True)
        with suppress(OSError):  # another process made a lock there meanwhile
            folder.rmdir()


def run_locked(run_dir: Path) -> bool:
    """Whether a process holds ``run_dir``'s lock (is working on the run now)."""
    path = run_dir / CHECKPOINT_DIR / LOCK_FILE
    if not path.is_file():
        return False
    with path.open() as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def checkpoint_progress(run_dir: Path) -> tuple[int, float] | None:
    """(rounds done, wall seconds worked) at the run's last checkpoint; None if it has
    none; InputError if it cannot be read."""
    state = checkpoint_record(run_dir)
    if state is None:
        return None
    try:
        return int(state["rounds_done"]), float(state["wall_s"])
    except (KeyError, TypeError, ValueError) as e:
        path = run_dir / CHECKPOINT_DIR / PROGRESS_FILE
        raise InputError(f"{path}: cannot read the checkpoint ({type(e).__name__}: {e})") from None


def checkpoint_record(run_dir: Path) -> dict[str, Any] | None:
    """The plain facts of the run's last checkpoint (``simfl.runs.checkpoint``'s
    ``progress.json``: format, rounds done, simulated time, wall seconds, scenario),
    read as JSON: nothing in it is imported or run. None if the run has no checkpoint;
    InputError if it is unreadable."""
    path = run_dir / CHECKPOINT_DIR / PROGRESS_FILE
    if not (run_dir / CHECKPOINT_DIR / STATE_FILE).is_file():  # the commit point
        return None
    if not path.is_file():
        raise InputError(f"{run_dir / CHECKPOINT_DIR}: a checkpoint of an older simfl (its "
                         f"state pickled, format 3 or before), which this simfl does not read: "
                         f"remove {run_dir} to run it again from the start")
    try:
        state = json.loads(path.read_text())
        if not isinstance(state, dict):
            raise TypeError(f"the progress is a {type(state).__name__}, not an object")
        return state
    except (OSError, TypeError, ValueError) as e:
        raise InputError(f"{path}: cannot read the checkpoint ({type(e).__name__}: {e})") from None
