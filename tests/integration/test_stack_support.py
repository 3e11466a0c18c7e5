"""Shared set-up for the stack integration tests (no tests here).

`AwsWorld` seeds the EC2 emulator with what a pool's stack verifies (an EKS cluster, the
node role, its convention-named instance profile, its EC2_LINUX access entry) and launches
gangs through the real EC2 engine, as the GangNodePool reconciler will. `make_settings`
builds the controller settings for a state directory; `stack_ls` runs the operator's
inventory command exactly as `StackDriver.operator_command()` prints it.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]

from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.cloud import Ec2Engine, LaunchSpec, LaunchTemplateRef, SubnetRef, SystemClock
from provisioner.cloud.ec2api import build_clients
from provisioner.cloud.naming import instance_profile_name
from provisioner.cloud.nodeadm import render_user_data
from stacks.spec import PoolSpec, pool_tags
from tests.support.ec2_listing import described_instances

CLUSTER = "demo"
REGION = "us-east-1"
ROLE_NAME = "gang-node"
PASSPHRASE = "stack-tests"


class AwsWorld:
    """The emulator, seeded for one test."""

    def __init__(self, emulator: Any) -> None:
        self.endpoint = str(emulator.endpoint_url)
        info = emulator.client.register_eks_cluster(CLUSTER)
        self.cluster_endpoint = str(info.get("endpoint") or "https://demo.eks.local")
        self.ec2 = self.client("ec2")
        self.iam = self.client("iam")
        self.eks = self.client("eks")
        self.role_arn = self.iam.create_role(RoleName=ROLE_NAME, AssumeRolePolicyDocument="{}")[
            "Role"
        ]["Arn"]
        self.profile_name = instance_profile_name(CLUSTER, ROLE_NAME)
        images = self.ec2.describe_images(Owners=["602401143452"])["Images"]
        self.ami = next(i["ImageId"] for i in images if i.get("Architecture") == "x86_64")
        self.subnets = tuple(
            SubnetRef(s["SubnetId"], s["AvailabilityZone"])
            for s in sorted(
                self.ec2.describe_subnets()["Subnets"], key=lambda s: s["AvailabilityZone"]
            )
        )

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name=REGION, endpoint_url=self.endpoint)

    def create_profile(self, role_name: str = ROLE_NAME) -> None:
        self.iam.create_instance_profile(InstanceProfileName=self.profile_name)
        self.iam.add_role_to_instance_profile(
            InstanceProfileName=self.profile_name, RoleName=role_name
        )

    def create_access_entry(self) -> None:
        self.eks.create_access_entry(
            clusterName=CLUSTER, principalArn=self.role_arn, type="EC2_LINUX"
        )

    def ready(self) -> AwsWorld:
        """The verify path's prerequisites, as the bootstrap program makes them."""
        self.create_profile()
        self.create_access_entry()
        return self

    def user_data(self, pool: str, group: str = "gen-0") -> str:
        return render_user_data(
            cluster_name=CLUSTER,
            api_server_endpoint="https://demo.eks.local",
            certificate_authority="Y2VydA==",
            service_cidr="172.20.0.0/16",
            pool=pool,
            group=group,
        )

    def spec(self, pool: str, **overrides: Any) -> PoolSpec:
        values: dict[str, Any] = {
            "cluster": CLUSTER,
            "pool": pool,
            "region": REGION,
            "endpoint_url": self.endpoint,
            "node_role_arn": self.role_arn,
            "instance_profile_name": self.profile_name,
            "image_id": self.ami,
            "instance_type": "m5.large",
            "user_data": self.user_data(pool),
            "tags": pool_tags(CLUSTER, pool, timedelta(hours=4)),
            "release_wait_seconds": 60.0,
            "poll_seconds": 0.5,
        }
        values.update(overrides)
        return PoolSpec(**values)

    def launch(
        self, pool: str, launch_template_id: str, count: int, generation: int = 0
    ) -> list[str]:
        """An N-or-0 launch from the pool's template, through the real engine."""
        session = boto3.session.Session(region_name=REGION)
        engine = Ec2Engine(build_clients(session, REGION, self.endpoint), SystemClock())
        result = engine.acquire(
            LaunchSpec(
                pool_name=pool,
                pool_uid=f"uid-{pool}",
                acquire_generation=generation,
                cluster_name=CLUSTER,
                count=count,
                instance_type="m5.large",
                mode="runinstances",
                subnets=self.subnets,
                launch_template=LaunchTemplateRef(launch_template_id),
            )
        )
        return sorted(result.instance_ids)

    def live_instances(self, pool: str) -> list[str]:
        found = described_instances(
            self.ec2,
            [
                {"Name": f"tag:{c.TAG_POOL}", "Values": [pool]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ],
        )
        return sorted(i["InstanceId"] for i in found)

    def launch_templates(self) -> list[dict[str, Any]]:
        return list(self.ec2.describe_launch_templates()["LaunchTemplates"])


def make_settings(world: AwsWorld, state_dir: Path, **iam: bool) -> Settings:
    return Settings.model_validate(
        {
            "cluster_name": CLUSTER,
            "defaults": {"region": REGION, "node_role_arn": world.role_arn},
            # The file backend, named: tests of the S3 backend replace this section.
            "pulumi": {"state_dir": str(state_dir), "backend_url": f"file://{state_dir}"},
            "aws": {"endpoint_url": world.endpoint},
            "iam": iam,
        }
    )


def stack_ls(command: str, pulumi_binary: Path, home: Path) -> list[str]:
    """Run the operator's inventory command (as printed) and return the stack names."""
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(pulumi_binary.parent), os.environ.get("PATH", "")]),
        # An operator's own PULUMI_HOME; keep the test's out of the real home directory.
        "PULUMI_HOME": str(home),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
    }
    out = subprocess.run(
        ["sh", "-c", f"{command} --json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=home.parent,
    )
    return sorted(entry["name"].rsplit("/", 1)[-1] for entry in json.loads(out.stdout))


def pulumi_root(pulumi_tool: Any) -> Path:
    return Path(pulumi_tool.binary).parent.parent
