"""The run machinery: a Scenario wired into a run (``run``: built by ``build``, its rounds
simulated by ``loop``, its manifest and a resume's checks in ``manifest``), checkpoints
and resuming by replay (``checkpoint``, ``replay``), the memory guard (``memory``),
hyper-parameter tuning (``tune``) and sweeps (``sweep``). The vocabulary they share with
the domain packages, the scenario schema, the Parquet records and a run directory's
layout, stays top-level (``simfl.scenario``, ``simfl.records``, ``simfl.rundir``): the
simulator and the data import those, and they import nothing of this package
(docs/design.md §2).
"""
