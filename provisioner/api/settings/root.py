"""`Settings`: the root of the tree, its top-level fields and the rules that span sections."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from fnmatch import fnmatchcase
from typing import Annotated, Any, Self

from pydantic import ConfigDict, Field, field_validator, model_validator

from provisioner.api import constants as c
from provisioner.api.fields import RoleArn, Seconds, WholeSeconds
from provisioner.api.settings.ami_policy import AmiPolicy
from provisioner.api.settings.aws_identity import AwsSettings, IamSettings, OwnershipSettings
from provisioner.api.settings.block_purchase import BlockPurchasePolicy
from provisioner.api.settings.defaults import Defaults, Limits, RetryBackoff
from provisioner.api.settings.instances import Instances
from provisioner.api.settings.launch_budget import LaunchBudgetSettings
from provisioner.api.settings.leader_election import LeaderElection
from provisioner.api.settings.nodes import StartupTaint
from provisioner.api.settings.section import Port, Section, snake_keys
from provisioner.api.settings.stack_settings import PulumiSettings, StackOperations, backend_url
from provisioner.api.settings.tenancy import Tenancy
from provisioner.api.settings.webhook import WebhookSettings

__all__ = ["Settings"]

_INSTANCE_TYPE_GLOB = re.compile(r"^[a-z0-9.-]+\*?$|^\*$")
_CLUSTER_NAME = r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$"


class Settings(Section):
    """Everything the controller is told at start-up. Build it directly in tests."""

    # A field whose key differs from its name (`join_deadline_seconds` for `join_deadline`)
    # is written under its key, so what is dumped reads again as it was given.
    model_config = ConfigDict(serialize_by_alias=True)

    cluster_name: str = Field(pattern=_CLUSTER_NAME, description="EKS cluster nodes join.")
    defaults: Defaults
    limits: Limits = Limits()
    allowed_instance_types: tuple[str, ...] = Field(
        default=(),
        description="Instance-type allowlist, exact or trailing-* glob; empty allows any.",
    )
    allowed_node_role_arns: tuple[RoleArn, ...] = Field(
        default=(), description="Node-role allowlist; empty allows only defaults.nodeRoleArn."
    )
    acquire_attempts_before_retry: int = Field(default=20, ge=1)
    # Launches in a row answered with an AWS code the catalogue lacks before the Workload's
    # check goes to Retry (naming it): few, since no wait is known to fix an unknown answer.
    unknown_error_attempts_before_retry: int = Field(default=3, ge=1)
    # Durations the chart spells in whole seconds (`joinDeadlineSeconds: 600`): held as a
    # timedelta like every other duration, read and written under their `*_seconds` keys.
    join_deadline: Seconds = Field(
        default=timedelta(seconds=600),
        alias="join_deadline_seconds",
        description="How long a launched set has for every node to join, turn Ready and "
        "become usable (startup taints gone, allocatable holding one pod's requests); then "
        "the set is released.",
    )
    startup_taints: tuple[StartupTaint, ...] = Field(
        default=(),
        description="Taints that agents remove from a node once it is set up (as Karpenter's "
        "startupTaints); a gang node is not counted while one remains. Empty: none.",
    )
    capacity_block_release: Annotated[timedelta, WholeSeconds(minimum=1800)] = Field(
        default=timedelta(seconds=2100),
        alias="capacity_block_release_seconds",
        # EC2 starts terminating a block's instances 30 minutes before its end ("Work with
        # Capacity Blocks"): a planned release any later would race EC2's own reclaim.
        description="Release a gang this long before its Capacity Block ends; at least 1800 "
        "(EC2 starts terminating a block's instances 30 minutes before the end).",
    )
    reap_interval: Seconds = Field(default=timedelta(seconds=120), alias="reap_interval_seconds")
    instance_index_refresh: Seconds = Field(
        default=timedelta(seconds=10),
        alias="instance_index_refresh_seconds",
        description="How old the shared DescribeInstances listing that joining pools and "
        "pools in a steady phase (Idle, Satisfied, KeepWarm) read may grow: the bound on "
        "noticing that EC2 lost an instance of a joining, running or warm set. Between full "
        "listings, one every 6 intervals, only the instances not running are listed. Pools "
        "about to act on their instances always read EC2 directly.",
    )
    max_concurrent_pool_reconciles: int = Field(default=5, ge=1)
    retry_backoff: RetryBackoff = RetryBackoff()
    launch_budget: LaunchBudgetSettings = LaunchBudgetSettings()
    integration_mode: str = Field(default=c.INTEGRATION_ADMISSIONCHECK)
    controller_name: str = Field(default=c.CONTROLLER_NAME, min_length=1, max_length=253)
    leader_election: LeaderElection = LeaderElection()
    metrics_port: Port = 8080
    health_port: Port = 8081
    webhook_port: Port = 9443
    pulumi: PulumiSettings = PulumiSettings()
    stack_operations: StackOperations = StackOperations()
    aws: AwsSettings = AwsSettings()
    iam: IamSettings = IamSettings()
    webhook: WebhookSettings = WebhookSettings()
    ownership: OwnershipSettings = OwnershipSettings()
    tenancy: Tenancy = Tenancy()
    ami_policy: AmiPolicy = AmiPolicy()
    instances: Instances = Instances()
    block_purchase: BlockPurchasePolicy = BlockPurchasePolicy()

    @model_validator(mode="before")
    @classmethod
    def _derive_pulumi_defaults(cls, data: Any) -> Any:
        data = snake_keys(data)
        if not isinstance(data, dict):
            return data
        pulumi = data.get("pulumi") or {}
        if isinstance(pulumi, PulumiSettings):
            pulumi = pulumi.model_dump(exclude_unset=True)
        if isinstance(pulumi, Mapping):
            pulumi = dict(pulumi)
            pulumi["backend_url"] = backend_url(pulumi)
            if not pulumi.get("project_name") and isinstance(data.get("cluster_name"), str):
                pulumi["project_name"] = f"atomic-gang-{data['cluster_name']}"
            data = {**data, "pulumi": pulumi}
        return data

    @field_validator("integration_mode")
    @classmethod
    def _only_admissioncheck(cls, v: str) -> str:
        if v != c.INTEGRATION_ADMISSIONCHECK:
            raise ValueError(
                f"integrationMode {v!r} is not supported; use {c.INTEGRATION_ADMISSIONCHECK!r}. "
                "Watching Jobs directly cannot stop their pods from being created before the "
                "nodes exist, so the controller gates admission through a Kueue AdmissionCheck."
            )
        return v

    @field_validator("allowed_instance_types")
    @classmethod
    def _globs(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [p for p in v if not _INSTANCE_TYPE_GLOB.match(p)]
        if bad:
            raise ValueError(
                f"allowedInstanceTypes entries {bad} are not instance types or trailing-* "
                'globs such as "p4d.24xlarge" or "p5.*"'
            )
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        d = self.defaults
        if not d.node_role_arn and not self.allowed_node_role_arns:
            raise ValueError(
                "set defaults.nodeRoleArn or allowedNodeRoleArns: with neither, no Job may "
                "name a node role and every gang would be refused"
            )
        if (
            d.node_role_arn
            and self.allowed_node_role_arns
            and d.node_role_arn not in self.allowed_node_role_arns
        ):
            raise ValueError(
                f"defaults.nodeRoleArn {d.node_role_arn} is not in allowedNodeRoleArns; "
                "Jobs relying on the default would be refused"
            )
        if d.keep_warm_ttl > self.limits.max_keep_warm_ttl:
            raise ValueError("defaults.keepWarmTTL is longer than limits.maxKeepWarmTTL")
        if d.max_lifetime > self.limits.max_lifetime:
            raise ValueError(
                "defaults.maxLifetime is longer than limits.maxLifetime; Jobs relying on the "
                "default would be refused"
            )
        ports = [self.metrics_port, self.health_port, self.webhook_port]
        if len(set(ports)) != len(ports):
            raise ValueError(f"metricsPort, healthPort and webhookPort must differ, got {ports}")
        return self

    def purchase_policy(self, instance_type: str) -> BlockPurchasePolicy:
        """The installation's policy for a gang of `instance_type`: what a gang without a
        class policy is bought under. A GangClass's `blockPurchase` replaces it for that
        class's gangs (`api.class_purchase.effective_policy`); `enabled` here is also the
        installation's IAM grant, which a class's policy still needs."""
        del instance_type  # one policy for every type; its instanceTypes narrow it
        return self.block_purchase

    @property
    def allowed_node_roles(self) -> tuple[str, ...]:
        """The node roles a Job may name (the controller's iam:PassRole scope)."""
        return self.allowed_node_role_arns or (self.defaults.node_role_arn,)

    def instance_type_allowed(self, instance_type: str) -> bool:
        """True when the allowlist is empty or an entry matches exactly or as a prefix glob."""
        return not self.allowed_instance_types or any(
            fnmatchcase(instance_type, p) if p.endswith("*") else instance_type == p
            for p in self.allowed_instance_types
        )
