import sys

from simfl.cli import main

sys.exit(main())
