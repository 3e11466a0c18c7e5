"""Controller settings: one frozen pydantic model tree, its defaults and its validation.

Every part of the controller is handed one `Settings`; tests build `Settings(...)`
directly and never see the environment. The file, environment and flags that fill it at
start-up are read in `settings_sources`. Each section accepts the chart's camelCase
spelling (`clusterName`, `defaults.keepWarmTTL`) as well as the Python field names.

One module per group of settings: `defaults` (defaults, limits, retryBackoff),
`launch_budget`, `leader_election`, `stack_settings` (pulumi, stackOperations),
`aws_identity` (aws, iam, ownership), `webhook`, `ami_policy`, `instances`, `tenancy`,
`block_purchase`, and `root` (Settings itself); `section` holds what they share. Every
name is importable from here.
"""

from __future__ import annotations

from provisioner.api.settings.ami_policy import AMI_OWNER_ALIASES, AmiPolicy
from provisioner.api.settings.aws_identity import (
    AwsSettings,
    IamSettings,
    OwnershipSettings,
    SelfManagedOwnershipKey,
)
from provisioner.api.settings.block_purchase import BlockPurchasePolicy
from provisioner.api.settings.defaults import Defaults, Limits, RetryBackoff
from provisioner.api.settings.instances import (
    CONTROLLER_TAGS_PER_INSTANCE,
    EC2_TAG_KEY_MAX,
    EC2_TAG_VALUE_MAX,
    EC2_TAGS_PER_RESOURCE,
    RESERVED_TAG_PREFIXES,
    ROOT_VOLUME_TYPES,
    Instances,
    RootVolume,
)
from provisioner.api.settings.launch_budget import LaunchBudgetSettings
from provisioner.api.settings.leader_election import LeaderElection
from provisioner.api.settings.nodes import StartupTaint
from provisioner.api.settings.root import Settings
from provisioner.api.settings.section import Port, snake_keys
from provisioner.api.settings.stack_settings import (
    CONTROLLER_MEMORY,
    STACK_OPERATION_MEMORY,
    STACK_OPERATIONS_PER_CPU,
    PulumiSettings,
    StackOperations,
    default_stack_workers,
)
from provisioner.api.settings.tenancy import SharedPool, Tenancy
from provisioner.api.settings.webhook import SelfManagedCerts, WebhookSettings

__all__ = [
    "AMI_OWNER_ALIASES",
    "CONTROLLER_MEMORY",
    "CONTROLLER_TAGS_PER_INSTANCE",
    "EC2_TAGS_PER_RESOURCE",
    "EC2_TAG_KEY_MAX",
    "EC2_TAG_VALUE_MAX",
    "RESERVED_TAG_PREFIXES",
    "ROOT_VOLUME_TYPES",
    "STACK_OPERATIONS_PER_CPU",
    "STACK_OPERATION_MEMORY",
    "AmiPolicy",
    "AwsSettings",
    "BlockPurchasePolicy",
    "Defaults",
    "IamSettings",
    "Instances",
    "LaunchBudgetSettings",
    "LeaderElection",
    "Limits",
    "OwnershipSettings",
    "Port",
    "PulumiSettings",
    "RetryBackoff",
    "RootVolume",
    "SelfManagedCerts",
    "SelfManagedOwnershipKey",
    "Settings",
    "SharedPool",
    "StackOperations",
    "StartupTaint",
    "Tenancy",
    "WebhookSettings",
    "default_stack_workers",
    "snake_keys",
]
