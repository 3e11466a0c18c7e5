"""The Workload decision's pod-fit rule: a gang whose pods cannot fit one node of its
instance type is refused before anything is launched, with the webhook's sentences; and
the words for nodes that are Ready but cannot run a gang pod yet.

`decide` (controllers/workload/decision.py) calls `pod_fit_verdict` with EC2's answer for
the type (`InstanceTypeAnswer`, which the Workload reconciler reads before deciding through
the `api.pod_fit.InstanceTypes` port) and the gang's largest pod request. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from provisioner.api.gangnodepool import GangNodePoolStatus
from provisioner.api.pod_fit import (
    InstanceTypeFigures,
    fit_problems,
    unknown_instance_type_problem,
)
from provisioner.api.pod_requests import QuantityError, ResourceAmounts
from provisioner.api.problems import Problem
from provisioner.api.shape import GangShape
from provisioner.api.workload import Workload

__all__ = [
    "EC2_RETRY_SECONDS",
    "InstanceTypeAnswer",
    "gang_requests",
    "pod_fit_verdict",
    "unusable_text",
]

# How soon a Workload waiting on EC2's description of its instance type looks again.
EC2_RETRY_SECONDS: Final = 10.0


@dataclass(frozen=True)
class InstanceTypeAnswer:
    """EC2's answer for the instance type the owner names, read before `decide`: its
    figures, or that EC2 does not know it, or why it did not answer."""

    instance_type: str
    figures: InstanceTypeFigures | None = None
    unknown: bool = False
    error: str | None = None


def gang_requests(workload: Workload) -> ResourceAmounts:
    """The most one pod of the Workload requests, resource by resource."""
    try:
        return workload.pod_requests()
    except QuantityError:
        # The apiserver refuses such a template; nothing to check a node against.
        return {}


def pod_fit_verdict(
    answer: InstanceTypeAnswer | None, shape: GangShape, requests: ResourceAmounts
) -> tuple[list[Problem], str | None]:
    """The refusals (empty: the gang fits, or was not checked) and, when EC2 did not
    answer, the sentence to wait with."""
    if answer is None or answer.instance_type != shape.instance_type:
        return [], None
    if answer.unknown:
        return [unknown_instance_type_problem(shape.instance_type, shape.region)], None
    if answer.figures is not None:
        return fit_problems(requests, answer.figures, shape.efa), None
    return [], (
        f"Waiting for EC2 to describe instance type {shape.instance_type} ({answer.error}): "
        "the gang's pod requests are checked against it before anything is launched."
    )


def unusable_text(status: GangNodePoolStatus) -> str:
    """For the Workload's progress message: the Ready nodes that are not usable yet and
    what each lacks (`GangNodePoolStatus.unusable_nodes`); empty when there is none."""
    if not status.unusable_nodes:
        return ""
    nodes = "; ".join(f"{u.node} lacks {', '.join(u.missing)}" for u in status.unusable_nodes)
    return f" Ready but not usable yet: {nodes}."
