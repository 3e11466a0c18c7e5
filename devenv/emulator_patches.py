"""The emulator's old single-module name, kept so branches written before the split still import.

New code imports `devenv.emulator`; delete this file once nothing imports it.
"""

from devenv.emulator import *  # noqa: F403
from devenv.emulator import __all__ as __all__
