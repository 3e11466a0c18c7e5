"""Kubernetes access for the controllers: the only package that imports the client library.

- `errors`: the exceptions the controllers act on (conflict, not found, gone, ...).
- `resources`: `ResourceRef`, `ObjectKey` and the resources we use.
- `client`: `KubeClient`, typed reads and preconditioned writes returning dicts.
- `informer`: list+watch caches that call handlers as objects change.
- `cache`: `TypedCache`, an informer's objects as models, each parsed once per version:
  what the reconcilers read.
- `workqueue`: the per-key serialized queue and the `Controller` worker pool.
- `status`: `update_status` / `update_object` (and `patch_status_entries`, `create_object`,
  `read_object`) on models, the one way a reconciler writes.
- `pool_reads`: one pool read live by name, for the Job webhook.
- `check_state`: our entry in a Workload's admission checks, as JSON-patch operations.
- `leader`: Lease leader election.
- `events`: the Event recorder.
- time: `Clock` and its real and fake kinds come from `provisioner.api.clock` (re-exported).

The composition root (`provisioner.assembly`) builds one `KubeClient`, the informers and
their typed caches, and hands them to everything else. Reconcilers never see an API body.
"""

from provisioner.api.clock import Clock, FakeClock, SystemClock
from provisioner.kube.cache import TypedCache
from provisioner.kube.client import KubeClient, ObjectList
from provisioner.kube.errors import (
    KubeAlreadyExists,
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeGone,
    KubeInvalid,
    KubeNotFound,
    KubeUnavailable,
)
from provisioner.kube.events import EventRecorder
from provisioner.kube.informer import Informer
from provisioner.kube.leader import LeaderElector, LeaseLock
from provisioner.kube.resources import ObjectKey, ResourceRef, key_of
from provisioner.kube.status import update_object, update_status
from provisioner.kube.workqueue import Controller, Result, WorkQueue

__all__ = [
    "Clock",
    "Controller",
    "EventRecorder",
    "FakeClock",
    "Informer",
    "KubeAlreadyExists",
    "KubeClient",
    "KubeConflict",
    "KubeError",
    "KubeForbidden",
    "KubeGone",
    "KubeInvalid",
    "KubeNotFound",
    "KubeUnavailable",
    "LeaderElector",
    "LeaseLock",
    "ObjectKey",
    "ObjectList",
    "ResourceRef",
    "Result",
    "SystemClock",
    "TypedCache",
    "WorkQueue",
    "key_of",
    "update_object",
    "update_status",
]
