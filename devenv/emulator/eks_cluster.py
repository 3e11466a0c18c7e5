"""EKS clusters as the control API registers them: ACTIVE, with endpoint, CA and VPC config."""

from __future__ import annotations

import base64
import datetime as dt
import functools
import re
from typing import Any

from moto.ec2.models import ec2_backends
from moto.eks.models import Cluster, eks_backends

from devenv.emulator.model import ClusterSpec, EmulatorInputError, RegionSeed


def register_cluster(spec: ClusterSpec, seed: RegionSeed) -> dict[str, Any]:
    _check_cluster_spec(spec)
    backend = eks_backends[spec.account_id][spec.region]
    backend.clusters.pop(spec.name, None)
    ec2 = ec2_backends[spec.account_id][spec.region]
    cluster_sg = _cluster_security_group(ec2, spec.name, seed.vpc_id)
    cluster = backend.create_cluster(
        name=spec.name,
        role_arn=spec.role_arn or f"arn:aws:iam::{spec.account_id}:role/eks-cluster-role",
        resources_vpc_config={
            "subnetIds": list(spec.subnet_ids or seed.subnets.values()),
            "securityGroupIds": list(spec.security_group_ids),
            "clusterSecurityGroupId": cluster_sg,
            "vpcId": seed.vpc_id,
            "endpointPublicAccess": True,
            "endpointPrivateAccess": True,
            "publicAccessCidrs": ["0.0.0.0/0"],
        },
        version=spec.version,
        kubernetes_network_config={"serviceIpv4Cidr": spec.service_ipv4_cidr, "ipFamily": "ipv4"},
    )
    if spec.endpoint:
        cluster.endpoint = spec.endpoint
    cluster.certificate_authority = {"data": spec.certificate_authority_data or _default_ca_data()}
    # Not modelled by moto; the controller reads it to know access entries are honoured.
    vars(cluster)["access_config"] = {"authenticationMode": "API_AND_CONFIG_MAP"}
    return _cluster_view(cluster)


def _check_cluster_spec(spec: ClusterSpec) -> None:
    if not re.match(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$", spec.name or ""):
        raise EmulatorInputError("name", f"name {spec.name!r} is not a valid EKS cluster name")
    if spec.endpoint is not None and not re.match(r"^https?://", spec.endpoint):
        raise EmulatorInputError("endpoint", f"endpoint {spec.endpoint!r} is not an http(s) URL")
    if spec.certificate_authority_data is not None:
        try:
            pem = base64.b64decode(spec.certificate_authority_data, validate=True)
        except ValueError:
            pem = b""
        if b"-----BEGIN CERTIFICATE-----" not in pem:
            raise EmulatorInputError(
                "certificate_authority_data",
                "certificate_authority_data must be a base64 PEM certificate",
            )
    if not re.match(r"^\d+\.\d+\.\d+\.\d+/\d+$", spec.service_ipv4_cidr):
        raise EmulatorInputError(
            "service_ipv4_cidr", f"{spec.service_ipv4_cidr!r} is not an IPv4 CIDR"
        )
    if not re.match(r"^1\.\d+$", spec.version):
        raise EmulatorInputError(
            "version", f"version {spec.version!r} is not a Kubernetes minor such as 1.36"
        )


def _cluster_security_group(ec2: Any, cluster_name: str, vpc_id: str) -> str:
    name = f"eks-cluster-sg-{cluster_name}"
    for group in ec2.groups.get(vpc_id, {}).values():
        if group.name == name:
            return str(group.id)
    group = ec2.create_security_group(
        name,
        f"EKS created security group applied to ENI of the cluster {cluster_name}",
        vpc_id=vpc_id,
    )
    group.add_tags(
        {f"kubernetes.io/cluster/{cluster_name}": "owned", "aws:eks:cluster-name": cluster_name}
    )
    return str(group.id)


def _cluster_view(cluster: Cluster) -> dict[str, Any]:
    return {
        "name": cluster.name,
        "arn": cluster.arn,
        "endpoint": cluster.endpoint,
        "certificateAuthority": dict(cluster.certificate_authority),
        "version": cluster.version,
        "status": cluster.status,
        "kubernetesNetworkConfig": dict(cluster.kubernetes_network_config),
        "resourcesVpcConfig": dict(cluster.resources_vpc_config),
        "roleArn": cluster.role_arn,
    }


@functools.lru_cache(maxsize=1)
def _default_ca_data() -> str:
    """A throwaway self-signed CA, base64 PEM, for clusters registered without one."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return base64.b64encode(certificate.public_bytes(serialization.Encoding.PEM)).decode()
