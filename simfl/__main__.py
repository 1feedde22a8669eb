import os
import sys

from simfl.cli import main

code = main()
if code >= 128:
    # Stopped by a signal: the checkpoint and manifest are written (atomically, fsynced),
    # so skip the interpreter's teardown, which takes about a second with torch loaded.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
