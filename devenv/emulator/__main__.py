"""`python -m devenv.emulator --port P`: run the emulator server until SIGTERM."""

import os
import sys

from devenv.emulator.server import main

if __name__ == "__main__":
    exit_code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Nothing in moto's memory needs an orderly teardown, and collecting it takes seconds.
    os._exit(exit_code)
