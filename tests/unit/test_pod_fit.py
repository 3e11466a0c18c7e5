"""What one node of an instance type offers pods (nodeadm's reservations, from EC2's
figures), and what one pod requests (the scheduler's sum), as tables.

The figures come from DescribeInstanceTypes as moto (and so the emulator) answers it,
read through `cloud.instancetypes`: p4d.24xlarge has 96 vCPUs, 1152 GiB, 8 GPUs, 4 EFA
cards and 15 ENIs of 50 addresses on its default card; m5.large 2 vCPUs, 8 GiB, 3 ENIs of
10 addresses.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from moto import mock_aws

from provisioner.api.pod_fit import (
    InstanceTypeFigures,
    kube_reserved_cpu_millicores,
    kube_reserved_memory_mebibytes,
    max_pods,
    node_allocatable,
)
from provisioner.api.pod_requests import (
    QuantityError,
    format_amount,
    gang_pod_requests,
    parse_quantity,
    pod_request,
)
from provisioner.cloud.type_figures import Ec2InstanceTypes
from tests.support.fake_instance_types import KNOWN

pytestmark = pytest.mark.unit

GIB = 2**30
MIB = 2**20


@pytest.fixture(scope="module")
def ec2_figures() -> dict[str, InstanceTypeFigures]:
    with mock_aws():
        types = Ec2InstanceTypes(boto3.client("ec2", region_name="us-east-1"))
        return {name: types.figures(name) for name in KNOWN}


def test_the_fakes_figures_are_ec2s(ec2_figures: dict[str, InstanceTypeFigures]) -> None:
    assert ec2_figures == KNOWN
    p4d, m5 = ec2_figures["p4d.24xlarge"], ec2_figures["m5.large"]
    assert (p4d.vcpus, p4d.memory_mib, p4d.nvidia_gpus) == (96, 1152 * 1024, 8)
    assert (m5.vcpus, m5.memory_mib, m5.nvidia_gpus) == (2, 8 * 1024, 0)


@pytest.mark.parametrize(
    ("vcpus", "reserved"),
    [
        (1, 60),  # 6% of the first core
        (2, 70),  # + 1% of the second
        (4, 80),  # + 0.5% of the third and fourth
        (8, 90),  # + 0.25% of each core above four
        (96, 310),
        (192, 550),
    ],
)
def test_kube_reserved_cpu_is_nodeadms(vcpus: int, reserved: int) -> None:
    assert kube_reserved_cpu_millicores(vcpus) == reserved


@pytest.mark.parametrize(
    ("instance_type", "pods", "cpu", "memory"),
    [
        # 15 ENIs x 49 pod IPs + 2 = 737 pods (nodeadm's table says 737 too).
        ("p4d.24xlarge", 737, 96000 - 310, (1179648 - (11 * 737 + 255) - 100) * MIB),
        ("m5.large", 29, 2000 - 70, (8192 - (11 * 29 + 255) - 100) * MIB),
        ("p5.48xlarge", 100, 192000 - 550, (2097152 - (11 * 100 + 255) - 100) * MIB),
    ],
)
def test_node_allocatable_is_ec2s_figures_less_nodeadms_reservations(
    instance_type: str, pods: int, cpu: int, memory: int
) -> None:
    figures = KNOWN[instance_type]
    assert max_pods(figures) == pods
    assert kube_reserved_memory_mebibytes(pods) == 11 * pods + 255
    offered = node_allocatable(figures, efa=True)
    assert (offered["cpu"], offered["memory"]) == (cpu, memory)


def test_gpus_and_efa_are_the_types() -> None:
    p4d = KNOWN["p4d.24xlarge"]
    assert node_allocatable(p4d, efa=True)["nvidia.com/gpu"] == 8
    assert node_allocatable(p4d, efa=True)["vpc.amazonaws.com/efa"] == 4
    # A gang that does not ask for EFA launches no EFA interfaces: none to request.
    assert node_allocatable(p4d, efa=False)["vpc.amazonaws.com/efa"] == 0
    trn = node_allocatable(KNOWN["trn1.32xlarge"], efa=False)
    assert (trn["aws.amazon.com/neuron"], trn["aws.amazon.com/neuroncore"]) == (16, 32)


def test_a_type_without_enis_in_the_answer_gets_the_kubelets_default() -> None:
    assert max_pods(InstanceTypeFigures("x1.small", 1, 1024)) == 110


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("500m", 0.5),
        ("2", 2),
        (2, 2),
        ("1.5", 1.5),
        ("8Gi", 8 * GIB),
        ("100M", 100 * 10**6),
        ("1e3", 1000),
        ("128974848", 128974848),
    ],
)
def test_quantities(raw: Any, value: float) -> None:
    assert parse_quantity(raw) == value


@pytest.mark.parametrize("raw", ["", "eight", "8GB", "1.2.3", True])
def test_not_quantities(raw: Any) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(raw)


def container(requests: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if "limits" in more:
        resources["limits"] = more.pop("limits")
    return {"name": "c", "resources": resources, **more}


@pytest.mark.parametrize(
    ("spec", "request_"),
    [
        pytest.param({"containers": [container({"cpu": "1"}), container({"cpu": "500m"})]},
                     {"cpu": 1500}, id="containers-add-up"),
        pytest.param({"containers": [container(limits={"nvidia.com/gpu": 8})]},
                     {"nvidia.com/gpu": 8}, id="a-limit-without-a-request-is-requested"),
        pytest.param({"containers": [container({"cpu": "1"}, limits={"cpu": "4"})]},
                     {"cpu": 1000}, id="a-request-wins-over-its-limit"),
        pytest.param({"containers": [container({"cpu": "1"})],
                      "initContainers": [container({"cpu": "3"})]},
                     {"cpu": 3000}, id="the-largest-init-container-if-larger"),
        pytest.param({"containers": [container({"cpu": "2", "memory": "4Gi"})],
                      "initContainers": [container({"cpu": "1", "memory": "8Gi"})]},
                     {"cpu": 2000, "memory": 8 * GIB}, id="resource-by-resource"),
        pytest.param({"containers": [container({"cpu": "1"})],
                      "initContainers": [container({"cpu": "1"}, restartPolicy="Always"),
                                         container({"cpu": "1500m"})]},
                     {"cpu": 2500}, id="a-sidecar-runs-beside-what-starts-after-it"),
        pytest.param({"containers": [container({"memory": "1Gi"})],
                      "overhead": {"memory": "256Mi"}},
                     {"memory": GIB + 256 * MIB}, id="overhead-is-added"),
        pytest.param({"containers": [container()]}, {}, id="nothing-requested"),
    ],
)  # fmt: skip
def test_pod_request_is_the_schedulers(spec: dict[str, Any], request_: dict[str, int]) -> None:
    assert pod_request(spec) == request_


def test_the_gang_request_is_the_largest_pod_resource_by_resource() -> None:
    launcher = {"containers": [container({"cpu": "2", "memory": "1Gi"})]}
    worker = {"containers": [container({"cpu": "1"}, limits={"nvidia.com/gpu": "8"})]}
    assert gang_pod_requests([launcher, worker]) == {
        "cpu": 2000,
        "memory": GIB,
        "nvidia.com/gpu": 8,
    }


@pytest.mark.parametrize(
    ("resource", "amount", "shown"),
    [("cpu", 3500, "3500m"), ("cpu", 4000, "4"), ("memory", 8 * GIB, "8Gi"),
     ("memory", 7518 * MIB, "7518Mi"), ("memory", 1000, "1000"), ("nvidia.com/gpu", 8, "8")],
)  # fmt: skip
def test_amounts_read_as_quantities(resource: str, amount: int, shown: str) -> None:
    assert format_amount(resource, amount) == shown
