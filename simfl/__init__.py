"""simfl: an event-driven simulator of federated learning over a device population.

The Python API (docs/api.md): :func:`load_scenario`, :func:`run`, :func:`resume`,
:func:`open_run` and the :class:`Run` they return. Importing simfl loads no torch.
"""

from simfl.api import Run, load_scenario, open_run, resume, run

__all__ = ["Run", "load_scenario", "open_run", "resume", "run"]
