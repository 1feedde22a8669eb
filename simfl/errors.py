"""The exception types the command line turns into a one-line message.

:class:`InputError`: bad input (scenario, data files, run directory, output paths),
found before any work is done and before anything is written: exit status 2.
:class:`RunFailed`: a run that started could not go on (the model diverged, the run
stopped learning, simulated time outran the availability): the run's manifest says
``failed`` with the reason, its last checkpoint stays, exit status 1.
:class:`RunBusy`, an InputError: another process is working on the run; a sweep skips
the run and goes on.
:class:`RunInterrupted`: SIGTERM or SIGINT stopped a run (simfl.runs.checkpoint), which
``resume`` continues.
"""

import signal


class InputError(Exception):
    """Bad user input; the message names the key or file and the problem."""


class RunBusy(InputError):
    """Another process holds the run directory's lock (is working on that run)."""


class RunFailed(RuntimeError):
    """A run failed during its work; the message says why and which key to look at."""


class RunInterrupted(Exception):
    """SIGTERM or SIGINT: the run wrote a checkpoint at a round boundary and stopped."""

    def __init__(self, signum: int, rounds_done: int, mid_round: bool = False) -> None:
        # SimPy rebuilds a process's exception from its args
        super().__init__(signum, rounds_done, mid_round)
        self.signum, self.rounds_done, self.mid_round = signum, rounds_done, mid_round

    def __str__(self) -> str:
        name = signal.Signals(self.signum).name
        if not self.mid_round:
            return f"{name}: stopped with a checkpoint after round {self.rounds_done}"
        if self.rounds_done == 0:
            return f"{name}: stopped mid-round, before its first checkpoint"
        return f"{name}: stopped mid-round; its last checkpoint is after round {self.rounds_done}"


def first_paragraph(e: BaseException) -> str:
    """A library's error message up to its first blank line: its cause, without the
    paragraphs of advice on the library's own options that some add (polars)."""
    return str(e).split("\n\n", 1)[0].strip()
