"""The one exception type for bad input (scenario, data files, run directory).

The command line turns it into a one-line message and exit status 2, before any
work is done and before anything is written.
"""


class InputError(Exception):
    """Bad user input; the message names the key or file and the problem."""
