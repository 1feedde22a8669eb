"""simfl: an event-driven simulator of federated learning over a device population.

The Python API (docs/api.md): :func:`load_scenario`, :func:`simulate`, :func:`resume`,
:func:`open_run` and the :class:`Run` they return; plug-ins (docs/extending.md):
``register_aggregator``, ``register_model``, ``register_dataset``,
``register_estimator``, ``register_availability``. Importing simfl loads no torch.
"""

from simfl.api import Run, load_scenario, open_run, resume, simulate
from simfl.plugins import (
    register_aggregator,
    register_availability,
    register_dataset,
    register_estimator,
    register_model,
)

__all__ = ["Run", "load_scenario", "open_run", "register_aggregator", "register_availability",
           "register_dataset", "register_estimator", "register_model", "resume", "simulate"]
