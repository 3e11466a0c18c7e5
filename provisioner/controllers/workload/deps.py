"""What the Workload reconciler is built from: one dependencies object.

The composition root (`provisioner.assembly`) fills it from the running system; unit tests
fill it with fakes, as they do the pool reconciler's (`controllers.pool.deps`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from provisioner.api.gang_class import GangClass
from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.owners import GangOwner, OwnerKind
from provisioner.api.pod_fit import InstanceTypes
from provisioner.api.settings import Settings
from provisioner.api.workload import AdmissionCheck, Workload
from provisioner.kube.cache import TypedCache
from provisioner.kube.events import EventRecorder
from provisioner.kube.status import ObjectStore

__all__ = ["WorkloadReconcilerDeps"]


@dataclass(frozen=True)
class WorkloadReconcilerDeps:
    kube: ObjectStore  # pool specs (the claim), our check on each Workload, live owner GETs
    workloads: TypedCache[Workload]
    pools: TypedCache[GangNodePool]
    checks: TypedCache[AdmissionCheck]
    # The GangClass of a name (None: none), as our checks name them in spec.parameters.
    classes: Callable[[str], GangClass | None]
    # The owners of each kind that carry the queue label; a kind missing here is read by a
    # live GET.
    owners: Mapping[OwnerKind, TypedCache[GangOwner]]
    settings: Settings
    recorder: EventRecorder
    now: Callable[[], datetime]
    # What one node of a type offers pods, as EC2 says: a gang that cannot fit is Rejected.
    instance_types: InstanceTypes
    # The AdmissionChecks behind a LocalQueue (namespace, name), for a Workload that waits
    # for quota (`prepare_ahead.QueueChecks`); None prepares nothing ahead of quota.
    queue_checks: Callable[[str, str], tuple[str, ...]] | None = None
