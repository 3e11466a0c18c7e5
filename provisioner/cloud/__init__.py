"""The EC2 engine: the only package that talks to AWS (EC2, SSM, EKS, IAM) through boto3.

Callers use :class:`Ec2Engine` with :class:`CloudClients` and the types in ``types``; every
failure is a :class:`CloudError` whose ``kind`` is an :class:`ErrorKind`.

The names load on first use (PEP 562): the stack's dynamic providers import a few of
these modules (errors, naming, preflight, release) in a fresh provider host on every engine
run, and must not pay for the whole engine to do so (issue #14).
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

if _TYPE_CHECKING:
    from provisioner.api.clock import (
        Clock,
        SystemClock,
    )
    from provisioner.cloud.ec2api import (
        CloudClients,
        build_clients,
    )
    from provisioner.cloud.engine import (
        Ec2Engine,
    )
    from provisioner.cloud.errors import (
        CloudError,
        ErrorKind,
        InvalidUserDataError,
        ReservationNotActive,
    )
    from provisioner.cloud.nodeadm import (
        NodeConfigView,
        Taint,
        parse_user_data,
        render_user_data,
    )
    from provisioner.cloud.types import (
        AmiChoice,
        CapacityReservationRef,
        ClusterInfo,
        InstanceProfileRef,
        InstanceTypeInfo,
        InstanceView,
        LaunchResult,
        LaunchSpec,
        LaunchTemplateRef,
        ReleaseReport,
        Reservation,
        SubnetRef,
    )

_HOMES = {
    "AmiChoice": "provisioner.cloud.types",
    "CapacityReservationRef": "provisioner.cloud.types",
    "Clock": "provisioner.api.clock",
    "CloudClients": "provisioner.cloud.ec2api",
    "CloudError": "provisioner.cloud.errors",
    "ClusterInfo": "provisioner.cloud.types",
    "Ec2Engine": "provisioner.cloud.engine",
    "ErrorKind": "provisioner.cloud.errors",
    "InstanceProfileRef": "provisioner.cloud.types",
    "InstanceTypeInfo": "provisioner.cloud.types",
    "InstanceView": "provisioner.cloud.types",
    "InvalidUserDataError": "provisioner.cloud.errors",
    "LaunchResult": "provisioner.cloud.types",
    "LaunchSpec": "provisioner.cloud.types",
    "LaunchTemplateRef": "provisioner.cloud.types",
    "NodeConfigView": "provisioner.cloud.nodeadm",
    "ReleaseReport": "provisioner.cloud.types",
    "Reservation": "provisioner.cloud.types",
    "ReservationNotActive": "provisioner.cloud.errors",
    "SubnetRef": "provisioner.cloud.types",
    "SystemClock": "provisioner.api.clock",
    "Taint": "provisioner.cloud.nodeadm",
    "build_clients": "provisioner.cloud.ec2api",
    "parse_user_data": "provisioner.cloud.nodeadm",
    "render_user_data": "provisioner.cloud.nodeadm",
}

__all__ = [
    "AmiChoice",
    "CapacityReservationRef",
    "Clock",
    "CloudClients",
    "CloudError",
    "ClusterInfo",
    "Ec2Engine",
    "ErrorKind",
    "InstanceProfileRef",
    "InstanceTypeInfo",
    "InstanceView",
    "InvalidUserDataError",
    "LaunchResult",
    "LaunchSpec",
    "LaunchTemplateRef",
    "NodeConfigView",
    "ReleaseReport",
    "Reservation",
    "ReservationNotActive",
    "SubnetRef",
    "SystemClock",
    "Taint",
    "build_clients",
    "parse_user_data",
    "render_user_data",
]


def __getattr__(name: str) -> _Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(home), name)
    globals()[name] = value  # once found, an ordinary module attribute
    return value
