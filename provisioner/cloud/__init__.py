"""The EC2 engine: the only package that talks to AWS (EC2, SSM, EKS, IAM) through boto3.

Callers use :class:`Ec2Engine` with :class:`CloudClients` and the types in ``types``; every
failure is a :class:`CloudError` whose ``kind`` is an :class:`ErrorKind`.
"""

from provisioner.api.clock import Clock, SystemClock
from provisioner.cloud.ec2api import CloudClients, build_clients
from provisioner.cloud.engine import Ec2Engine
from provisioner.cloud.errors import (
    CloudError,
    ErrorKind,
    InvalidUserDataError,
    ReservationNotActive,
)
from provisioner.cloud.nodeadm import NodeConfigView, Taint, parse_user_data, render_user_data
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
