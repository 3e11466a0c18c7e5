"""batch/v1 Job bodies for tests: the Jobs users submit, gang or not.

For a gang Job to run on the local cluster (suspended, in a LocalQueue, with its gang
annotations) the tests use `tests.support.kueue_objects.gang_job`; this builder is for the
Jobs the webhook, the decision and explain read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def job(
    name: str = "train",
    *,
    namespace: str = "ml",
    uid: str | None = "job-uid",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    parallelism: int | None = 4,
    completions: int | None = 4,
    suspend: bool | None = None,
) -> dict[str, Any]:
    """A Job of one container; a None argument leaves its field out."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid is not None:
        meta["uid"] = uid
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    spec: dict[str, Any] = {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}
