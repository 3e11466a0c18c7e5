"""Shared set-up for the EC2 engine's unit tests: moto in-process plus the project's emulator.

Holds no tests. Each test module builds its own fixture on ``emulated_aws()`` so pytest
fixtures stay local and explicit.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from devenv.emulator import ClusterSpec, EmulatorState, install
from provisioner.cloud.ec2api import CloudClients, build_clients
from provisioner.cloud.engine import Ec2Engine
from provisioner.cloud.types import (
    ClusterInfo,
    InstanceProfileRef,
    LaunchSpec,
    LaunchTemplateRef,
    SubnetRef,
)
from tests.support.clocks import RecordingClock
from tests.support.ec2_listing import described_instances

pytestmark = pytest.mark.unit

REGION = "us-east-1"
CLUSTER = "gang-cluster"
ROLE_NAME = "eks-gang-node-role"
POOL = "pretrain"
POOL_UID = "7c1f0e4a-1111-4222-8333-944455556666"
GPU_TYPE = "p4d.24xlarge"


@dataclass
class Captured:
    """Request parameters as the engine built them, recorded before botocore serializes."""

    calls: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def __call__(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.setdefault(model.name, []).append(copy.deepcopy(params))

    def of(self, operation: str) -> list[dict[str, Any]]:
        return self.calls.get(operation, [])


@dataclass
class World:
    emu: EmulatorState
    clients: CloudClients
    engine: Ec2Engine
    clock: RecordingClock
    captured: Captured
    subnets: dict[str, str]
    cluster: ClusterInfo
    profile: InstanceProfileRef
    role_arn: str
    ec2: Any

    def subnet_refs(self, *zones: str) -> tuple[SubnetRef, ...]:
        return tuple(SubnetRef(self.subnets[z], z) for z in zones)

    def launch_template(self, user_data: str = "") -> LaunchTemplateRef:
        data: dict[str, Any] = {
            "ImageId": self.ami_id(),
            "InstanceType": GPU_TYPE,
            "IamInstanceProfile": {"Arn": self.profile.arn},
        }
        if user_data:
            import base64

            data["UserData"] = base64.b64encode(user_data.encode()).decode()
        made = self.ec2.create_launch_template(
            LaunchTemplateName=f"atomic-gang-{POOL}", LaunchTemplateData=data
        )
        return LaunchTemplateRef(made["LaunchTemplate"]["LaunchTemplateId"], "$Latest")

    def ami_id(self) -> str:
        return self.engine.resolve_ami(
            k8s_version=self.cluster.version, instance_type=GPU_TYPE, variant="nvidia"
        ).ami_id

    def spec(self, **overrides: Any) -> LaunchSpec:
        fields: dict[str, Any] = {
            "pool_name": POOL,
            "pool_uid": POOL_UID,
            "acquire_generation": 1,
            "cluster_name": CLUSTER,
            "count": 4,
            "instance_type": GPU_TYPE,
            "mode": "runinstances",
            "subnets": self.subnet_refs("us-east-1a", "us-east-1b", "us-east-1c"),
            "ami_id": self.ami_id(),
            "instance_profile": self.profile,
            "user_data": self.engine.render_user_data(self.cluster, POOL, "gen-1"),
        }
        fields.update(overrides)
        return LaunchSpec(**fields)

    def live_instances(self) -> list[dict[str, Any]]:
        return described_instances(
            self.ec2, [{"Name": "instance-state-name", "Values": ["pending", "running"]}]
        )


@functools.cache
def _session() -> boto3.Session:
    # One session for every test: it caches the service models, which take a second to load.
    return boto3.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )


@contextmanager
def emulated_aws() -> Iterator[World]:
    with mock_aws():
        emu = install()
        emu.reset()
        # Virtual time: sleeps advance it; the emulator's ENI detaches follow it too.
        clock = RecordingClock(wall=datetime(2030, 1, 1, tzinfo=UTC) + timedelta(seconds=1000))
        emu.clock = clock.monotonic
        session = _session()
        # One attempt per call: the tests see every fault the emulator injects.
        clients = build_clients(session, REGION, max_attempts=1)
        captured = Captured()
        clients.ec2.meta.events.register("before-parameter-build.ec2.*", captured)  # type: ignore[attr-defined]
        iam: Any = clients.iam
        role = iam.create_role(RoleName=ROLE_NAME, AssumeRolePolicyDocument="{}")["Role"]
        engine = Ec2Engine(clients, clock)
        from provisioner.cloud.naming import instance_profile_name

        profile_name = instance_profile_name(CLUSTER, ROLE_NAME)
        profile = iam.create_instance_profile(InstanceProfileName=profile_name)
        iam.add_role_to_instance_profile(InstanceProfileName=profile_name, RoleName=ROLE_NAME)
        emu.register_eks_cluster(ClusterSpec(name=CLUSTER, version="1.33"))
        yield World(
            emu=emu,
            clients=clients,
            engine=engine,
            clock=clock,
            captured=captured,
            subnets=emu.subnets(REGION),
            cluster=engine.cluster(CLUSTER),
            profile=InstanceProfileRef(name=profile_name, arn=profile["InstanceProfile"]["Arn"]),
            role_arn=role["Arn"],
            ec2=clients.ec2,
        )
