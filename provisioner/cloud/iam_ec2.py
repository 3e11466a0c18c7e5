"""The controller policy's EC2 statements: launch, tag, release, describe, and the launch
templates, placement groups and VPC CNI interfaces of one cluster.

Every mutating call is conditioned on this cluster's tags (`aws:RequestTag` on what a call
creates, `aws:ResourceTag` on what it changes or deletes); ``iam_policy.controller_policy``
puts these first in its document.
"""

from __future__ import annotations

from typing import Final

from provisioner.api import constants as c
from provisioner.cloud.iam_document import Policy, request_tags, resource_tags, statement

__all__ = [
    "DESCRIBE",
    "LAUNCH_TEMPLATE_CHANGES",
    "RETAGGABLE_KEYS",
    "TAGGING_CREATE_ACTIONS",
    "VPC_CNI_CLUSTER_TAG",
    "ec2_statements",
]

# The tag the VPC CNI puts on the ENIs it creates for pods, naming the cluster (its
# CLUSTER_NAME setting, which the EKS add-on sets): the controller deletes only those.
VPC_CNI_CLUSTER_TAG: Final = "cluster.k8s.amazonaws.com/name"
# The calls that tag what they create (their TagSpecifications), for ec2:CreateAction.
TAGGING_CREATE_ACTIONS: Final = (
    "RunInstances",
    "CreateFleet",
    "CreateLaunchTemplate",
    "CreatePlacementGroup",
)
# What the controller ever writes with CreateTags on an existing instance: the keep-warm
# deadline. Ownership tags (managed, cluster, pool, group) are written at creation only.
RETAGGABLE_KEYS: Final = (c.TAG_KEEP_WARM_UNTIL,)

DESCRIBE: Final = (
    "ec2:DescribeInstances",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeFleets",
    "ec2:DescribeFleetInstances",
    "ec2:DescribeSubnets",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:DescribePlacementGroups",
    "ec2:DescribeCapacityReservations",
    # Who owns a Job's own AMI (amiPolicy, `cloud.images`). Read-only.
    "ec2:DescribeImages",
)
# Calls on an existing launch template: only on one tagged for this cluster.
LAUNCH_TEMPLATE_CHANGES: Final = (
    "ec2:CreateLaunchTemplateVersion",
    "ec2:ModifyLaunchTemplate",
    "ec2:DeleteLaunchTemplate",
    "ec2:DeleteLaunchTemplateVersions",
)

# Resource types a RunInstances/CreateFleet call creates (tagged at launch) and those it only
# uses. AMIs are owned by AWS or another account, hence no account in their ARN.
LAUNCH_CREATES = ("instance", "volume", "network-interface", "fleet")
LAUNCH_REFERENCES = (
    "image",
    "subnet",
    "security-group",
    "placement-group",
    "capacity-reservation",
    "key-pair",
)


def ec2_statements(part: str, region: str, account_id: str, cluster_name: str) -> list[Policy]:
    """The EC2 statements for `cluster_name` in `region` of `account_id` (ARN partition `part`)."""
    ec2 = f"arn:{part}:ec2:{region}:{account_id}"
    mine = resource_tags(cluster_name)
    return [
        # A launch is authorized per resource: what it creates must carry this cluster's
        # tags, while what it only references (image, subnet, security groups, template, ...)
        # has no request tags, so one tag-conditioned statement over "*" would deny every
        # launch.
        statement(
            "LaunchGang",
            ("ec2:RunInstances", "ec2:CreateFleet"),
            [f"{ec2}:{kind}/*" for kind in LAUNCH_CREATES],
            Condition=request_tags(cluster_name),
        ),
        # An instant fleet's request can tag only the fleet and its instances (CreateFleet,
        # TagSpecifications); its volumes and ENIs take their tags from the launch template,
        # which the pages do not say count as request tags. They exist only with an instance
        # the statement above scopes, launched from a template the one below scopes.
        statement(
            "LaunchGangFleetVolumesAndInterfaces",
            "ec2:CreateFleet",
            [f"{ec2}:{kind}/*" for kind in ("volume", "network-interface")],
        ),
        statement(
            "LaunchGangReferencedResources",
            ("ec2:RunInstances", "ec2:CreateFleet"),
            [
                f"arn:{part}:ec2:{region}:{'' if kind == 'image' else account_id}:{kind}/*"
                for kind in LAUNCH_REFERENCES
            ],
        ),
        # A launch from a template runs what the template says (AMI, user data, profile):
        # only this cluster's templates, as the pool stack makes them.
        statement(
            "LaunchFromThisClustersTemplates",
            ("ec2:RunInstances", "ec2:CreateFleet"),
            f"{ec2}:launch-template/*",
            Condition=mine,
        ),
        # The tags a create call applies are authorized as ec2:CreateTags with
        # ec2:CreateAction set; without that key (a CreateTags call of its own) this
        # statement does not apply.
        statement(
            "TagOnlyWhatThisClusterCreates",
            "ec2:CreateTags",
            [f"{ec2}:{kind}/*" for kind in (*LAUNCH_CREATES, "launch-template", "placement-group")],
            Condition={
                "StringEquals": {
                    "ec2:CreateAction": list(TAGGING_CREATE_ACTIONS),
                    **request_tags(cluster_name)["StringEquals"],
                }
            },
        ),
        # The keep-warm tag move: on this cluster's gang instances only, and only the
        # keep-warm key (ForAllValues over the request's keys; Null refuses a request that
        # names no key, for which ForAllValues alone would be true).
        statement(
            "MoveKeepWarmTagOnThisClustersGangs",
            "ec2:CreateTags",
            f"{ec2}:instance/*",
            Condition={
                **mine,
                "ForAllValues:StringEquals": {"aws:TagKeys": list(RETAGGABLE_KEYS)},
                "Null": {"aws:TagKeys": "false"},
            },
        ),
        statement(
            "ReleaseThisClustersGangs",
            ("ec2:TerminateInstances", "ec2:DeleteFleets"),
            [f"{ec2}:instance/*", f"{ec2}:fleet/*"],
            Condition=mine,
        ),
        statement("DescribeForReconcile", DESCRIBE, "*"),
        statement(
            "DeleteThisClustersVPCCNIInterfaces",
            "ec2:DeleteNetworkInterface",
            f"{ec2}:network-interface/*",
            Condition={"StringEquals": {f"aws:ResourceTag/{VPC_CNI_CLUSTER_TAG}": cluster_name}},
        ),
        statement(
            "CreateThisClustersLaunchTemplates",
            "ec2:CreateLaunchTemplate",
            f"{ec2}:launch-template/*",
            Condition=request_tags(cluster_name),
        ),
        statement(
            "ChangeThisClustersLaunchTemplates",
            LAUNCH_TEMPLATE_CHANGES,
            f"{ec2}:launch-template/*",
            Condition=mine,
        ),
        statement(
            "CreateThisClustersPlacementGroups",
            "ec2:CreatePlacementGroup",
            f"{ec2}:placement-group/*",
            Condition=request_tags(cluster_name),
        ),
        statement(
            "DeleteThisClustersPlacementGroups",
            "ec2:DeletePlacementGroup",
            f"{ec2}:placement-group/*",
            Condition=mine,
        ),
    ]
