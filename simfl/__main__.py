import os
import signal
import sys

from simfl.cli import main

code = main()
# The command has ended and its status is decided: a stop signal during the interpreter's
# teardown (about a second with torch loaded) has nothing left to stop.
for stop in (signal.SIGTERM, signal.SIGINT):
    signal.signal(stop, signal.SIG_IGN)
if code >= 128:
    # Stopped by a signal: the checkpoint and manifest are written (atomically, fsynced),
    # so skip the interpreter's teardown, which takes about a second with torch loaded.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
