"""The EKS cluster as nodes see it: join parameters, Kubernetes version, subnets.

Called by the GangNodePool reconciler (through ``Ec2Engine.cluster``) before it renders user
data, resolves the AMI and plans subnets. One DescribeCluster answers all three.
"""

from __future__ import annotations

from typing import Any

from provisioner.cloud.ec2api import EksApi
from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error
from provisioner.cloud.types import ClusterInfo


def describe_cluster(eks: EksApi, name: str) -> ClusterInfo:
    try:
        raw: dict[str, Any] = eks.describe_cluster(name=name)["cluster"]
    except Exception as exc:
        err = to_cloud_error(exc, f"DescribeCluster {name}")
        if err.code == "ResourceNotFoundException":
            raise CloudError(
                ErrorKind.CONFIG,
                err.code,
                "ClusterNotFound",
                f"EKS cluster {name!r} does not exist in this region; set clusterName and "
                "defaults.region to the cluster the gang nodes join.",
            ) from exc
        raise err from exc
    return cluster_info_from(raw)


def cluster_info_from(raw: dict[str, Any]) -> ClusterInfo:
    name = str(raw.get("name", ""))
    vpc = raw.get("resourcesVpcConfig") or {}
    net = raw.get("kubernetesNetworkConfig") or {}
    endpoint = raw.get("endpoint") or ""
    ca = (raw.get("certificateAuthority") or {}).get("data") or ""
    cidr = net.get("serviceIpv4Cidr") or net.get("serviceIpv6Cidr") or ""
    missing = [
        label
        for label, value in (
            ("endpoint", endpoint),
            ("certificate authority", ca),
            ("service CIDR", cidr),
        )
        if not value
    ]
    if missing:
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "ClusterNotReady",
            f"EKS cluster {name!r} does not report its {', '.join(missing)} yet (status "
            f"{raw.get('status', 'unknown')}); nodes cannot join until it is ACTIVE.",
        )
    groups = list(vpc.get("securityGroupIds") or [])
    if vpc.get("clusterSecurityGroupId"):
        groups.insert(0, vpc["clusterSecurityGroupId"])
    return ClusterInfo(
        name=name,
        arn=raw.get("arn"),
        status=str(raw.get("status", "")),
        version=str(raw.get("version", "")),
        endpoint=str(endpoint),
        certificate_authority=str(ca),
        service_cidr=str(cidr),
        vpc_id=vpc.get("vpcId"),
        subnet_ids=tuple(vpc.get("subnetIds") or ()),
        security_group_ids=tuple(dict.fromkeys(groups)),
    )
