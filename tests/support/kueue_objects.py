"""The Kueue object builders for the tests: `devenv.kueue_objects` (the product's builders
and names, the local quotas, gang Jobs), re-exported so the tests' imports stay as they were.
"""

from devenv.kueue_objects import *  # noqa: F403
from devenv.kueue_objects import __all__ as __all__
