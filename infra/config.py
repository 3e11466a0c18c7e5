"""The bootstrap's stack configuration, read once into a frozen `BootstrapConfig`.

`program.main` calls `load_config()` under `pulumi up`; tests build `BootstrapConfig`
directly. Keys are declared, with their defaults, in the root `Pulumi.yaml`; the names of
everything the bootstrap creates are derived here so each module agrees on them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import pulumi

from provisioner.api import constants as c
from provisioner.api import kueue_objects as ko

__all__ = ["BootstrapConfig", "ConfigError", "load_config"]

_IAM_ROLE_NAME_MAX: Final = 64
_ZERO_QUANTITY: Final = re.compile(r"^[+]?0*(\.0*)?([a-zA-Z]+)?$")
_CLUSTER: Final = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")
_CERT_MODES: Final = ("certManager", "selfSigned", "provided")


class ConfigError(ValueError):
    """A stack configuration value is missing or wrong; the message names the key."""


def _role_name(prefix: str, cluster: str) -> str:
    # IAM role names stop at 64 characters; a long cluster name keeps a hashed tail so two
    # clusters that share a prefix still get different roles.
    full = f"{prefix}-{cluster}"
    if len(full) <= _IAM_ROLE_NAME_MAX:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:10]
    return f"{full[: _IAM_ROLE_NAME_MAX - 11]}-{digest}"


@dataclass(frozen=True)
class BootstrapConfig:
    """What one cluster's bootstrap needs. Required: cluster, region, cpu and memory quota."""

    cluster_name: str
    region: str
    cpu_quota: str
    memory_quota: str
    # GPU gangs are what this controller is for, so Kueue covers GPUs and EFA devices by
    # default: enough for one gang of 64 (limits.maxGangSize) p5.48xlarge nodes, which
    # have 8 GPUs and 32 EFA interfaces each. "0" covers a resource with no quota.
    gpu_quota: str = c.DEFAULT_ACCELERATOR_QUOTA[c.RESOURCE_GPU]
    efa_quota: str = c.DEFAULT_ACCELERATOR_QUOTA[c.RESOURCE_EFA]
    account_id: str = ""  # empty: the account of the credentials running `pulumi up`
    controller_namespace: str = "atomic-gang-system"
    service_account: str = "atomic-gang-controller"
    node_role_name: str = ""  # empty: atomic-gang-node-<cluster>
    extra_node_role_arns: tuple[str, ...] = ()
    node_role_ssm: bool = True
    local_queue_namespaces: tuple[str, ...] = ("default",)
    queue_name: str = ko.QUEUE_NAME
    admission_check_name: str = ko.CHECK_NAME
    cluster_queue_name: str = ko.CLUSTER_QUEUE_NAME
    resource_flavor_name: str = ko.FLAVOR_NAME
    release_name: str = "atomic-gang"
    # Required from the stack's configuration: no image of this name exists anywhere, so a
    # default would only install a release that sits in ImagePullBackOff.
    image_repository: str = ""
    image_tag: str = ""
    webhook_cert_mode: str = "selfSigned"
    self_manage_instance_profile: bool = False
    manage_access_entry: bool = False
    state_bucket_name: str = ""  # empty: atomic-gang-state-<cluster>-<account>-<region>
    # False: the bootstrap makes only its Kubernetes half (the Kueue objects and the Helm
    # release) and no AWS resource at all (no IAM, access entry, Pod Identity, state bucket
    # or key; pulumi_aws is not even imported). The release is then wired to what the three
    # keys below name, made some other way.
    create_aws_resources: bool = True
    node_role_arn: str = ""
    stack_backend_url: str = ""
    stack_secrets_provider: str = ""
    # False: `pulumi up` does not wait for the controller's Deployment to become Ready (a
    # cluster that cannot run it yet, such as one with no nodes).
    wait_for_controller: bool = True
    # Further chart values, merged into the ones the bootstrap sets (which they may not
    # change: see `release.chart_values`).
    chart_values: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _CLUSTER.match(self.cluster_name):
            raise ConfigError(f"clusterName {self.cluster_name!r} is not an EKS cluster name")
        if not self.region:
            raise ConfigError("region is required: the EKS cluster's region")
        for key, value in (("cpuQuota", self.cpu_quota), ("memoryQuota", self.memory_quota)):
            if not value or _ZERO_QUANTITY.match(value):
                raise ConfigError(
                    f"{key} is {value or 'unset'}: the ClusterQueue needs a non-zero quota, "
                    "or Kueue admits nothing"
                )
        if not self.local_queue_namespaces:
            raise ConfigError("localQueueNamespaces is empty: list the gang Jobs' namespaces")
        if self.webhook_cert_mode not in _CERT_MODES:
            raise ConfigError(
                f"webhookCertMode {self.webhook_cert_mode!r} is not one of {', '.join(_CERT_MODES)}"
            )
        given = {
            "nodeRoleArn": self.node_role_arn,
            "stackBackendUrl": self.stack_backend_url,
            "stackSecretsProvider": self.stack_secrets_provider,
        }
        if self.create_aws_resources:
            if any(given.values()):
                raise ConfigError(
                    f"{', '.join(k for k, v in given.items() if v)}: read only with "
                    "createAwsResources=false; the bootstrap makes the node role, the state "
                    "bucket and its key itself"
                )
        else:
            missing = [key for key, value in given.items() if not value]
            if missing:
                raise ConfigError(
                    f"createAwsResources=false needs {', '.join(missing)}: the chart is wired "
                    "to a node role and a stack backend the bootstrap no longer makes"
                )

    @property
    def node_role(self) -> str:
        return self.node_role_name or _role_name("atomic-gang-node", self.cluster_name)

    def allowed_node_roles(self, node_role_arn: str) -> list[str]:
        """The node roles Jobs may name: the bootstrap's own (or the one it is given), then
        the configured extras."""
        return list(dict.fromkeys([node_role_arn, *self.extra_node_role_arns]))

    @property
    def controller_role(self) -> str:
        return _role_name("atomic-gang-controller", self.cluster_name)

    @property
    def state_key_alias(self) -> str:
        """The KMS alias of the stacks' key, as the controller's `awskms://` URL names it."""
        return f"alias/atomic-gang-state-{self.cluster_name}"

    @property
    def quotas(self) -> dict[str, str]:
        """ClusterQueue nominal quotas by resource name: cpu, memory, GPUs and EFA devices."""
        out = {"cpu": self.cpu_quota, "memory": self.memory_quota}
        if self.gpu_quota:
            out[c.RESOURCE_GPU] = self.gpu_quota
        if self.efa_quota:
            out[c.RESOURCE_EFA] = self.efa_quota
        return out


def load_config(config: pulumi.Config | None = None) -> BootstrapConfig:
    """Read the project's keys (see Pulumi.yaml) from the current stack."""
    cfg = config or pulumi.Config()

    def text(key: str, default: str) -> str:
        return cfg.get(key) or default

    def flag(key: str, default: bool) -> bool:
        value = cfg.get_bool(key)
        return default if value is None else value

    def mapping(key: str) -> Mapping[str, Any]:
        value = cfg.get_object(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ConfigError(f"{key} must be an object (chart values)")
        return value

    def strings(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = cfg.get_object(key)
        if value is None:
            return default
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key} must be a list of strings")
        return tuple(value)

    d = BootstrapConfig  # dataclass defaults are class attributes
    return BootstrapConfig(
        cluster_name=cfg.require("clusterName"),
        region=cfg.require("region"),
        cpu_quota=cfg.require("cpuQuota"),
        memory_quota=cfg.require("memoryQuota"),
        gpu_quota=text("gpuQuota", d.gpu_quota),
        efa_quota=text("efaQuota", d.efa_quota),
        account_id=text("accountId", ""),
        controller_namespace=text("controllerNamespace", d.controller_namespace),
        service_account=text("serviceAccountName", d.service_account),
        node_role_name=text("nodeRoleName", ""),
        extra_node_role_arns=strings("extraNodeRoleArns", ()),
        node_role_ssm=flag("nodeRoleSsm", True),
        local_queue_namespaces=strings("localQueueNamespaces", ("default",)),
        queue_name=text("queueName", d.queue_name),
        admission_check_name=text("admissionCheckName", d.admission_check_name),
        cluster_queue_name=text("clusterQueueName", d.cluster_queue_name),
        resource_flavor_name=text("resourceFlavorName", d.resource_flavor_name),
        release_name=text("releaseName", d.release_name),
        image_repository=cfg.require("imageRepository"),
        image_tag=text("imageTag", ""),
        webhook_cert_mode=text("webhookCertMode", d.webhook_cert_mode),
        self_manage_instance_profile=flag("selfManageInstanceProfile", False),
        manage_access_entry=flag("manageAccessEntry", False),
        state_bucket_name=text("stateBucketName", ""),
        create_aws_resources=flag("createAwsResources", True),
        node_role_arn=text("nodeRoleArn", ""),
        stack_backend_url=text("stackBackendUrl", ""),
        stack_secrets_provider=text("stackSecretsProvider", ""),
        wait_for_controller=flag("waitForController", True),
        chart_values=mapping("chartValues"),
    )
