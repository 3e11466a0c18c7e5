"""`atomic-gang doctor`'s AWS links: the node role, its instance profile and access entry,
the AMI, the cluster's subnets.

Called by `doctor.Doctor`, after the Kubernetes links (`doctor_kube`) and the
installation's identity checks (`doctor_install`). Each check reads one thing with the
identity `target.connect` chose and says pass, or fails with the fix. It only reads,
through `provisioner.cloud`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.cloud.ami import resolve_ami
from provisioner.cloud.block_purchase import PLATFORM
from provisioner.cloud.cluster import describe_cluster
from provisioner.cloud.ec2api import CloudClients
from provisioner.cloud.errors import CloudError, to_cloud_error
from provisioner.cloud.naming import instance_profile_name
from provisioner.cloud.preflight import verify_access_entry, verify_instance_profile
from provisioner.commands.checks import Check, Failed

__all__ = ["DEFAULT_INSTANCE_TYPE", "NO_CLIENTS", "AwsLinks"]

DEFAULT_INSTANCE_TYPE = "m5.large"
NO_CLIENTS = "see the 'AWS identity' line: the identity to run the AWS checks as was not had"


@dataclass
class AwsLinks:
    """The node's AWS links, read with ``clouds`` and ``iam`` (None: no identity was had)."""

    clouds: CloudClients | None
    iam: Any
    settings: Settings
    instance_type: str = DEFAULT_INSTANCE_TYPE

    def checks(self) -> list[Check]:
        return [
            ("node role", self.node_role),
            ("instance profile", self.instance_profile),
            ("access entry", self.access_entry),
            ("AMI", self.ami),
            ("subnets", self.subnets),
            ("capacity block purchase", self.block_purchase),
        ]

    def _role(self) -> tuple[str, str]:
        arn = self.settings.defaults.node_role_arn
        if not arn:
            raise Failed(
                "no default node role (defaults.nodeRoleArn is empty)",
                f"set defaults.nodeRoleArn, or annotate each Job with {c.ANN_NODE_ROLE_ARN}",
            )
        return arn, arn.rsplit("/", 1)[-1]

    def _clouds(self) -> CloudClients:
        if self.clouds is None:
            raise Failed("no AWS clients", NO_CLIENTS)
        return self.clouds

    def node_role(self) -> str:
        arn, name = self._role()
        if self.iam is None:
            raise Failed("no AWS clients", NO_CLIENTS)
        try:
            self.iam.get_role(RoleName=name)
        except Exception as exc:
            err = to_cloud_error(exc, f"GetRole {name}")
            if err.code == "NoSuchEntity":
                raise Failed(
                    f"node role {arn} does not exist",
                    "create it with the EKS worker managed policies (the bootstrap's "
                    "`pulumi up` does), or fix defaults.nodeRoleArn",
                ) from exc
            raise err from exc
        return arn

    def instance_profile(self) -> str:
        arn, name = self._role()
        profile = instance_profile_name(self.settings.cluster_name, name)
        if self.settings.iam.self_manage_instance_profile:
            return f"{profile} is created by the controller (iam.selfManageInstanceProfile)"
        try:
            verify_instance_profile(self._clouds().iam, profile, arn)
        except CloudError as err:
            if err.code == "NoSuchEntity":
                raise Failed(
                    f"instance profile {profile} does not exist",
                    f"create it holding role {name} (the bootstrap does), or set "
                    "iam.selfManageInstanceProfile",
                ) from err
            raise Failed(err.message, "see above") from err
        return f"{profile} holds {name}"

    def access_entry(self) -> str:
        arn, _ = self._role()
        if self.settings.iam.manage_access_entry:
            return "created by the controller (iam.manageAccessEntry)"
        try:
            verify_access_entry(self._clouds().eks, self.settings.cluster_name, arn)
        except CloudError as err:
            raise Failed(
                err.message,
                f"aws eks create-access-entry --cluster-name {self.settings.cluster_name} "
                f"--principal-arn {arn} --type EC2_LINUX (or set iam.manageAccessEntry)",
            ) from err
        return f"{arn} has an EC2_LINUX entry on {self.settings.cluster_name}"

    def ami(self) -> str:
        clouds = self._clouds()
        cluster = describe_cluster(clouds.eks, self.settings.cluster_name)
        try:
            choice = resolve_ami(
                clouds.ssm,
                clouds.ec2,
                k8s_version=cluster.version,
                instance_type=self.instance_type,
                variant="standard",
            )
        except CloudError as err:
            raise Failed(err.message, f"set {c.ANN_AMI_ID} on the Job, or publish the AMI") from err
        return f"{choice.ami_id} for {self.instance_type} (Kubernetes {cluster.version})"

    def subnets(self) -> str:
        clouds = self._clouds()
        cluster = describe_cluster(clouds.eks, self.settings.cluster_name)
        if not cluster.subnet_ids:
            raise Failed(
                f"cluster {cluster.name} lists no subnets",
                f"annotate Jobs with {c.ANN_SUBNETS}",
            )
        found, missing = [], []
        # One call per subnet: a batch call fails whole and would not say which is gone.
        for subnet in cluster.subnet_ids:
            try:
                found += clouds.ec2.describe_subnets(SubnetIds=[subnet])["Subnets"]
            except Exception as exc:
                err = to_cloud_error(exc, f"DescribeSubnets {subnet}")
                if err.code != "InvalidSubnetID.NotFound":
                    raise err from exc
                missing.append(subnet)
        if missing:
            raise Failed(
                f"subnets {missing} of cluster {cluster.name} do not exist",
                f"update the cluster's subnets or annotate Jobs with {c.ANN_SUBNETS}",
            )
        return ", ".join(f"{s['SubnetId']} ({s['AvailabilityZone']})" for s in found)

    def block_purchase(self) -> str:
        """With blockPurchase.enabled, whether the controller may buy a block tagged for this
        cluster: PurchaseCapacityBlock with DryRun, which EC2 authorizes and answers
        DryRunOperation without buying (the offering id need not exist)."""
        policy = self.settings.purchase_policy("")
        if not policy.enabled:
            return "off (blockPurchase.enabled is false): nothing is bought"
        clouds = self._clouds()
        cluster = self.settings.cluster_name
        tags = {c.TAG_MANAGED: "true", c.TAG_CLUSTER: cluster}
        try:
            clouds.ec2.purchase_capacity_block(
                CapacityBlockOfferingId="cb-0000000000000000",
                InstancePlatform=PLATFORM,
                TagSpecifications=[
                    {
                        "ResourceType": "capacity-reservation",
                        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                    }
                ],
                DryRun=True,
            )
        except Exception as exc:
            err = to_cloud_error(exc, "PurchaseCapacityBlock (DryRun)")
            if err.code == "DryRunOperation":
                return (
                    f"may buy Capacity Blocks tagged for cluster {cluster}, up to "
                    f"{policy.max_upfront_fee_per_gang} USD a gang (DryRun)"
                )
            raise Failed(
                f"blockPurchase.enabled is on but the controller may not buy: {err.message}",
                "grant ec2:PurchaseCapacityBlock (python -m provisioner.cloud.iam_policy "
                "--buy-capacity-blocks), or set blockPurchase.enabled=false",
            ) from exc
        raise Failed("EC2 answered a DryRun purchase without DryRunOperation", "report it")
