"""The commands' checks of their output paths, before any work: a file to write, a
folder's plots/, a DRFL study's output folder (InputError, exit status 2)."""

from __future__ import annotations

from pathlib import Path

from simfl.errors import InputError

DRFL_FIGURES = ("drfl_noise.png", "drfl_convergence.png")  # plots.drfl.write_figures'


def check_output_file(path: Path, overwrite: bool, kind: str, suffixes: tuple[str, ...]
                      ) -> None:
    """InputError unless ``path`` can be written as a ``kind`` file: its suffix one of
    ``suffixes``, a new file in an existing directory, or an existing file that
    ``overwrite`` allows to replace (never a directory)."""
    from simfl.rundir import check_output_path

    if path.suffix not in suffixes:
        raise InputError(f"{path}: a {kind} file must end in "
                         f"{', '.join(suffixes[:-1])} or {suffixes[-1]}")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not an output file")
    if path.exists() and not overwrite:
        raise InputError(f"{path}: exists (use --overwrite to replace it)")
    if not path.parent.is_dir():
        raise InputError(f"{path}: directory {path.parent} does not exist")
    check_output_path(path)


def check_plots_dir(folder: Path) -> None:
    """InputError when ``folder``'s plots/, where its figures go, is there but no folder."""
    from simfl.rundir import PLOTS_DIR, check_output_path

    plots = folder / PLOTS_DIR
    if plots.exists() and not plots.is_dir():
        raise InputError(f"{plots}: exists and is not a directory (the figures go there)")
    check_output_path(plots)


def check_study_dir(out_dir: Path, overwrite: bool) -> None:
    """InputError unless the DRFL study may write into ``out_dir``: absent or empty, or
    (``overwrite``) holding only files the study writes, which it replaces."""
    from simfl.algorithms.drfl.experiment import TABLES
    from simfl.rundir import check_output_path

    check_output_path(out_dir)
    if not out_dir.exists():
        above = next((p for p in out_dir.parents if p.exists()), None)
        if above is not None and not above.is_dir():
            raise InputError(f"{out_dir}: {above} is a file, not a directory")
        return
    if not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a directory")
    entries = sorted(out_dir.iterdir())
    if entries and not overwrite:
        raise InputError(f"{out_dir}: exists and is not empty (use --overwrite to replace a "
                         f"DRFL study's files there)")
    ours = {*(f"{table}.parquet" for table in TABLES), *DRFL_FIGURES}
    for entry in entries:
        if entry.name not in ours or entry.is_symlink() or not entry.is_file():
            raise InputError(f"{out_dir}: holds {entry.name!r}, which the DRFL study does not "
                             f"write; --overwrite replaces only the study's files (move it, "
                             f"or choose another --out)")
