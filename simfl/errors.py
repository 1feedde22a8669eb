"""The exception types the command line turns into a one-line message.

:class:`InputError`: bad input (scenario, data files, run directory, output paths),
found before any work is done and before anything is written: exit status 2.
:class:`RunFailed`: a run that started could not go on (the model diverged, the run
stopped learning, simulated time outran the availability): the run's manifest says
``failed`` with the reason, its last checkpoint stays, exit status 1.
:class:`RunBusy`, an InputError: another process is working on the run; a sweep skips
the run and goes on.
"""


class InputError(Exception):
    """Bad user input; the message names the key or file and the problem."""


class RunBusy(InputError):
    """Another process holds the run directory's lock (is working on that run)."""


class RunFailed(RuntimeError):
    """A run failed during its work; the message says why and which key to look at."""


def first_paragraph(e: BaseException) -> str:
    """A library's error message up to its first blank line: its cause, without the
    paragraphs of advice on the library's own options that some add (polars)."""
    return str(e).split("\n\n", 1)[0].strip()
