"""`pulumi-resource-pulumi-python`: starts the Python dynamic-provider host for the Pulumi CLI.

The Pulumi CLI runs Python dynamic providers through a plugin executable of this name, which
its release archives ship and a CLI built from Go modules lacks. pip installs this entry
point into the same environment as the controller, so the provider host imports exactly the
libraries (and the `stacks` package) the controller does. The stack driver puts that
environment's bin directory first on the CLI's PATH.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    # Unbuffered: the host announces its port on stdout and the CLI blocks until it sees it.
    os.execv(sys.executable, [sys.executable, "-u", "-m", "pulumi.dynamic", *sys.argv[1:]])


if __name__ == "__main__":
    main()
