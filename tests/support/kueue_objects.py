"""The Kueue object builders, re-exported from their home in `devenv`.

Kept so the integration tests' imports stay as they were.
"""

from devenv.kueue_objects import (
    KUEUE_API,
    admission_check,
    cluster_queue,
    gang_job,
    local_queue,
    resource_flavor,
)

__all__ = [
    "KUEUE_API",
    "admission_check",
    "cluster_queue",
    "gang_job",
    "local_queue",
    "resource_flavor",
]
