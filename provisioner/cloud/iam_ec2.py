"""The controller policy's EC2 statements: launch, tag, release, describe, and the launch
templates, placement groups and VPC CNI interfaces of one cluster.

Every mutating call is conditioned on this cluster's tags (`aws:RequestTag` on what a call
creates, `aws:ResourceTag` on what it changes or deletes); ``iam_policy.controller_policy``
puts these first in its document.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from provisioner.api import constants as c
from provisioner.api.settings.ami_policy import AmiPolicy
from provisioner.cloud.iam_document import Policy, request_tags, resource_tags, statement

__all__ = [
    "DEFAULT_IMAGE_OWNERS",
    "DESCRIBE",
    "LAUNCH_TEMPLATE_CHANGES",
    "RETAGGABLE_KEYS",
    "TAGGING_CREATE_ACTIONS",
    "VPC_CNI_CLUSTER_TAG",
    "ec2_statements",
    "purchase_statements",
]

# amiPolicy.allowedOwners' default: the policy lets launches use what the webhook accepts.
DEFAULT_IMAGE_OWNERS: Final = AmiPolicy().allowed_owners
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
    # The Capacity Blocks EC2 would sell for a gang (`cloud.block_offerings`). Read-only;
    # buying one is granted only with blockPurchase.enabled (`purchase_statements`).
    "ec2:DescribeCapacityBlockOfferings",
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

# What a launch uses besides its image, template and reservation: authorized per resource,
# unconditioned (the instance itself is conditioned on this cluster's template). No key
# pair: the pool's templates name none, so a launch with one is refused.
LAUNCH_NETWORK = ("subnet", "security-group", "placement-group")
# What a launch creates, tagged at creation (RunInstances' volumes and ENIs, and a fleet's
# volumes, take their tags from the template: see the statements).
LAUNCH_CREATES = ("instance", "volume", "network-interface", "fleet")


def _image_owners(owners: Sequence[str], account_id: str) -> list[str]:
    # `ec2:Owner` is the owner alias (amazon, aws-marketplace) or the owner account id
    # ("Actions, resources, and condition keys for Amazon EC2"); DescribeImages' `self`
    # is the caller's account.
    return sorted({account_id if o == "self" else o for o in owners})


def _launch_statements(
    part: str,
    region: str,
    account_id: str,
    cluster_name: str,
    image_owners: Sequence[str],
    image_ids: Sequence[str],
) -> list[Policy]:
    ec2 = f"arn:{part}:ec2:{region}:{account_id}"
    launch = ("ec2:RunInstances", "ec2:CreateFleet")
    from_a_template = {"ArnLike": {"ec2:LaunchTemplate": f"{ec2}:launch-template/*"}}
    images = []
    if image_owners:
        images.append(
            statement(
                "LaunchOnlyImagesOfTheAllowedOwners",
                launch,
                f"arn:{part}:ec2:{region}::image/*",
                Condition={"StringEquals": {"ec2:Owner": _image_owners(image_owners, account_id)}},
            )
        )
    if image_ids:
        images.append(
            statement(
                "LaunchTheAllowedImageIds",
                launch,
                sorted(f"arn:{part}:ec2:{region}::image/{i}" for i in image_ids),
            )
        )
    return [
        # A launch is authorized per resource (the reference's rows for RunInstances and
        # CreateFleet). The instance must carry this cluster's tags and, for RunInstances,
        # come from a launch template (`ec2:LaunchTemplate`): the statement below allows
        # only this cluster's templates, so the AMI, user data and profile are the pool
        # stack's. A fleet always launches from a template.
        statement(
            "LaunchGangInstancesFromATemplate",
            "ec2:RunInstances",
            f"{ec2}:instance/*",
            Condition={**request_tags(cluster_name), **from_a_template},
        ),
        statement(
            "LaunchGangFleets",
            "ec2:CreateFleet",
            [f"{ec2}:fleet/*", f"{ec2}:instance/*"],
            Condition=request_tags(cluster_name),
        ),
        # A launch's volumes and ENIs (an instant fleet's too, launched as RunInstances on
        # the caller's permissions) take their tags from the launch template, which the
        # pages do not say count as request tags: allowed with a template only. They exist
        # only with an instance the statements above scope.
        statement(
            "LaunchGangVolumesAndInterfacesFromATemplate",
            "ec2:RunInstances",
            [f"{ec2}:volume/*", f"{ec2}:network-interface/*"],
            Condition=from_a_template,
        ),
        statement("LaunchGangFleetVolumes", "ec2:CreateFleet", f"{ec2}:volume/*"),
        statement("LaunchIntoTheClustersNetwork", launch, [f"{ec2}:{k}/*" for k in LAUNCH_NETWORK]),
        *images,
        # A launch from a template runs what the template says (AMI, user data, profile):
        # only this cluster's templates, as the pool stack makes them.
        statement(
            "LaunchFromThisClustersTemplates",
            launch,
            f"{ec2}:launch-template/*",
            Condition=resource_tags(cluster_name),
        ),
        # A reservation (an ODCR or a Capacity Block) is paid for by its owner team: usable
        # only when its owner tagged it for this cluster.
        statement(
            "UseOnlyReservationsTaggedForThisCluster",
            launch,
            f"{ec2}:capacity-reservation/*",
            Condition={"StringEquals": {f"aws:ResourceTag/{c.TAG_CLUSTER}": cluster_name}},
        ),
    ]


def ec2_statements(
    part: str,
    region: str,
    account_id: str,
    cluster_name: str,
    image_owners: Sequence[str] = DEFAULT_IMAGE_OWNERS,
    image_ids: Sequence[str] = (),
) -> list[Policy]:
    """The EC2 statements for `cluster_name` in `region` of `account_id` (ARN partition
    `part`); launches may use images of `image_owners` (amiPolicy.allowedOwners) or listed
    in `image_ids` (amiPolicy.allowedImageIds)."""
    ec2 = f"arn:{part}:ec2:{region}:{account_id}"
    mine = resource_tags(cluster_name)
    return [
        *_launch_statements(part, region, account_id, cluster_name, image_owners, image_ids),
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


def purchase_statements(part: str, region: str, account_id: str, cluster: str) -> list[Policy]:
    """ec2:PurchaseCapacityBlock for a block tagged at purchase as this cluster's, and the
    tags of that purchase ("Actions, resources, and condition keys for Amazon EC2":
    PurchaseCapacityBlock takes the capacity-reservation it creates, with aws:RequestTag)."""
    blocks = f"arn:{part}:ec2:{region}:{account_id}:capacity-reservation/*"
    return [
        statement(
            "BuyCapacityBlocksTaggedForThisCluster",
            "ec2:PurchaseCapacityBlock",
            blocks,
            Condition=request_tags(cluster),
        ),
        statement(
            "TagTheCapacityBlocksItBuys",
            "ec2:CreateTags",
            blocks,
            Condition={
                "StringEquals": {
                    "ec2:CreateAction": "PurchaseCapacityBlock",
                    **request_tags(cluster)["StringEquals"],
                }
            },
        ),
    ]
