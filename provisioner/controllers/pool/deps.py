"""What the GangNodePool reconciler and its actions are built from: one dependencies object.

The composition root (`provisioner.assembly`) fills it from the running system; unit tests
fill it from `tests/support` with fakes or the emulator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.nodes import Node
from provisioner.api.settings import Settings
from provisioner.cloud.naming import OwnershipKey
from provisioner.controllers.instance_index import InstanceIndex
from provisioner.controllers.launch_budget import LaunchBudget
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.stack_executor import StackExecutor
from provisioner.controllers.ports import EngineOps, StackOps
from provisioner.kube.cache import TypedCache
from provisioner.kube.events import EventRecorder
from provisioner.kube.status import ObjectStore


@dataclass(frozen=True)
class PoolReconcilerDeps:
    kube: ObjectStore  # the pool's status and finalizer, its Nodes' group label
    pools: TypedCache[GangNodePool]
    nodes: TypedCache[Node]  # Nodes carrying the pool label, indexed by it
    engine: EngineOps
    index: InstanceIndex  # what EC2 holds for each pool
    stacks: StackOps
    executor: StackExecutor  # runs the stack steps
    settings: Settings
    recorder: EventRecorder
    now: Callable[[], datetime]
    metrics: ControllerMetrics
    # Proves a tagged instance ours before a release touches it (`pool.proofs`); None when
    # the installer configured none (then only this pool object's own tokens prove).
    ownership_key: OwnershipKey | None
    # The account's launch budget, one object shared by every pool's passes (and the
    # composition root's only): turns at RunInstances/CreateFleet (`launch_budget`).
    budget: LaunchBudget
    # The same for CreateTags (the keep-warm tag): a bucket of its own at EC2.
    tag_budget: LaunchBudget
