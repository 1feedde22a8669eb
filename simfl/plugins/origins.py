"""Where a run's user plug-ins come from: what ``resume`` checks before importing the
modules a manifest names (not from the run folder or the working directory, the
package's version the one recorded), importing them again, and the hash of a plug-in's
module file that the manifest records."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path

from simfl.errors import InputError
from simfl.plugins.builtin import KEYS
from simfl.plugins.registry import distribution_version, import_path


def check_origins(records: dict[str, dict[str, str]], run_dir: Path) -> list[str]:
    """Before a resume imports the user plug-ins a run's manifest names (``records``):
    InputError if one would be imported from the run folder itself or from the working
    directory by way of Python's implicit first path entry (a run folder someone else
    wrote must not bring code that runs), or if its package's installed version is not
    the one the manifest records; otherwise one line per plug-in saying where its module
    comes from. Only the top-level package is looked up, which runs none of
    its code; a module not found is left to the import's own error."""
    run_dir, cwd = run_dir.resolve(), Path.cwd().resolve()
    # the working directory is on sys.path implicitly ('' or, under -m, its path), unless
    # PYTHONPATH names it; every other entry is the installed environment or PYTHONPATH
    named = {Path(p).resolve() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    explicit = named | {Path(p).resolve() for p in sys.path if p not in ("", ".")} - {cwd}
    lines = []
    for key, record in records.items():
        top = record["path"].partition(":")[0].split(".")[0]
        spec = importlib.util.find_spec(top) if top not in sys.modules else None
        origin = (sys.modules[top].__file__ if top in sys.modules
                  else spec.origin if spec is not None else None)
        if origin is None:
            continue
        where = Path(origin).resolve()
        folder = where.parent.parent if where.name == "__init__.py" else where.parent
        if where.is_relative_to(run_dir):
            raise InputError(f"'{key}' = {record['name']!r}: its module {top!r} would be "
                             f"imported from the run folder ({where}); simfl imports no code "
                             f"from a run folder")
        if folder == cwd and folder not in explicit:
            raise InputError(f"'{key}' = {record['name']!r}: its module {top!r} would be "
                             f"imported from the working directory ({where}); install it, "
                             f"or put its folder on PYTHONPATH")
        version = distribution_version(record["path"])
        if record.get("version", version) != version:
            raise InputError(f"'{key}' = {record['name']!r}: the run started with version "
                             f"{record['version']} of its package, {version} is installed: "
                             f"resume with the version it started with")
        lines.append(f"plug-in '{key}' = {record['name']!r} from {where}")
    return lines


def import_recorded(records: dict[str, dict[str, str]], source: str) -> None:
    """Import the modules of a manifest's plug-ins that were registered by decorator,
    so that a fresh process (resume) knows their names again (a plug-in named
    ``package.module:function`` in the scenario is imported by loading it)."""
    for key, record in records.items():
        registry = KEYS[key.partition("[")[0]]
        if ":" in record["name"] or record["name"] in registry.table:
            continue
        if record["path"].startswith("__main__:"):
            raise InputError(f"{source}: '{key}' = {record['name']!r} was registered by a "
                             f"script run as __main__, which no other process can import: "
                             f"name it in the scenario as 'package.module:function'")
        import_path(record["path"], key, source)


def source_sha256(path: str) -> str | None:
    """The sha256 of the file of the module holding ``path``'s factory
    (``"package.module:function"``), its bytes on disk now: what a run's manifest records
    of each user plug-in, so that ``resume`` can tell its code changed. Only the module's
    own file counts, not the modules it imports; None when the module has no file (one
    made at run time) or it cannot be imported or read."""
    try:
        file = getattr(importlib.import_module(path.partition(":")[0]), "__file__", None)
        if file is None:
            return None
        with open(file, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except Exception:  # any error of the plug-in's own module: nothing to hash
        return None
