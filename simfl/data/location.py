"""Where a data set's file is: ``data.path`` if given, else its place under ``$SIMFL_DATA_DIR``."""

from __future__ import annotations

import os
from pathlib import Path

from simfl.errors import InputError


def resolve_data_path(path: str, default_relative: Path, what: str, expected: str,
                      hint: str = "", file_only: bool = True) -> Path:
    """``path`` (expanded) if given, else ``$SIMFL_DATA_DIR/default_relative``; it must exist
    (and be a file when ``file_only``), else an InputError saying how to point at it.
    ``what`` names the data ("FEMNIST file"), ``expected`` what data.path may name."""
    if path:
        resolved = Path(path).expanduser()
    elif os.environ.get("SIMFL_DATA_DIR"):
        resolved = Path(os.environ["SIMFL_DATA_DIR"]).expanduser() / default_relative
    else:
        raise InputError(f"{what} not found: SIMFL_DATA_DIR is not set; set it to the folder "
                         f"holding {default_relative} or set data.path to {expected}. {hint}"
                         .rstrip())
    if file_only and resolved.exists() and not resolved.is_file():
        raise InputError(f"{resolved}: the {what} is not a regular file ({expected})")
    if not (resolved.is_file() if file_only else resolved.exists()):
        raise InputError(f"{resolved}: {what} not found; set SIMFL_DATA_DIR (to the folder "
                         f"holding {default_relative}) or data.path (to {expected}). {hint}"
                         .rstrip())
    return resolved
