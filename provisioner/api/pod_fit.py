"""Whether one pod of a gang can fit one node of its instance type, and the refusal if not.

A node offers what EC2 says its type has (DescribeInstanceTypes: vCPUs, memory, NVIDIA
GPUs, Neuron devices and cores, EFA interfaces) minus what the EKS AL2023 AMI keeps back
for the kubelet and the system. The AMI's node bootstrap, nodeadm, writes the kubelet's
configuration; its formula (awslabs/amazon-eks-ami, `nodeadm/internal/kubelet/config.go`:
`getCPUMillicoresToReserve`, `GetMemoryMebibytesToReserve`, `withDefaultReservedResources`,
and the default `evictionHard`; max pods from `GetClassicMaxPods`, which for a type its
table lacks is `ENIs * (IPv4 addresses per ENI - 1) + 2`, `maxpods.go`) is written here in
our own words; see docs/USABLE-NODES.md:

- kube-reserved cpu: 6% of the first core, 1% of the second, 0.5% of the third and fourth,
  0.25% of every core above four (in millicores, each band rounded down);
- kube-reserved memory: 11 MiB per pod the node may run (max pods) + 255 MiB;
- the hard eviction threshold `memory.available<100Mi`.
The AMI sets no system-reserved amounts. The kernel also keeps some memory out of a node's
capacity; that is not subtracted (no formula says how much), so this check never refuses a
pod that fits, and one within a few percent of the figure is caught at the join instead
(a node whose allocatable lacks it is not usable: `controllers/pool/usable.py`).

Called by the webhook (at `kubectl apply`) and by the Workload decision, with the same
sentences; no I/O here: `InstanceTypes` is the port that answers from EC2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from provisioner.api import constants as c
from provisioner.api.pod_requests import CPU, MEMORY, ResourceAmounts, format_amount
from provisioner.api.problems import Problem

__all__ = [
    "EFA",
    "NEURON",
    "NEURON_CORE",
    "NVIDIA_GPU",
    "REASON_POD_DOES_NOT_FIT",
    "InstanceTypeFigures",
    "InstanceTypeLookupError",
    "InstanceTypes",
    "UnknownInstanceType",
    "fit_problems",
    "kube_reserved_cpu_millicores",
    "kube_reserved_memory_mebibytes",
    "max_pods",
    "node_allocatable",
    "unknown_instance_type_problem",
]

NVIDIA_GPU: Final = "nvidia.com/gpu"
EFA: Final = "vpc.amazonaws.com/efa"
NEURON: Final = "aws.amazon.com/neuron"
NEURON_CORE: Final = "aws.amazon.com/neuroncore"
REASON_POD_DOES_NOT_FIT: Final = "PodDoesNotFitInstanceType"
REASON_UNKNOWN_INSTANCE_TYPE: Final = "UnknownInstanceType"

# nodeadm's default KubeletConfiguration: evictionHard memory.available.
EVICTION_HARD_MEMORY_MIB: Final = 100
_MIB: Final = 2**20
# (band start, band end, reserved hundredths of a percent) in millicores; the last band is
# open-ended. nodeadm: cpuRanges {0, 1000, 2000, 4000, total} and {600, 100, 50, 25}.
_CPU_BANDS: Final = ((0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50), (4000, None, 25))


@dataclass(frozen=True)
class InstanceTypeFigures:
    """What DescribeInstanceTypes says of one type, as far as a node's allocatable goes."""

    instance_type: str
    vcpus: int
    memory_mib: int
    nvidia_gpus: int = 0
    neuron_devices: int = 0
    neuron_cores: int = 0
    # EFA devices an instance of the type gets when its gang asks for EFA (one per network
    # card, up to MaximumEfaInterfaces: `cloud.instancetypes.efa_cards`); 0 without EFA.
    efa_interfaces: int = 0
    # The ENIs of the default network card and the IPv4 addresses of each (max pods).
    max_network_interfaces: int = 0
    ipv4_per_interface: int = 0


class InstanceTypeLookupError(Exception):
    """EC2 did not answer (throttled, unreachable, access denied)."""


class UnknownInstanceType(Exception):
    """EC2 knows no such instance type in the region."""


class InstanceTypes(Protocol):
    def figures(self, instance_type: str) -> InstanceTypeFigures:
        """EC2's figures for the type; raises `UnknownInstanceType` or
        `InstanceTypeLookupError`."""
        ...


def kube_reserved_cpu_millicores(vcpus: int) -> int:
    """nodeadm's kube-reserved cpu for a node of `vcpus` cores."""
    total = vcpus * 1000
    reserved = 0
    for start, end, hundredths in _CPU_BANDS:
        if total <= start:
            continue
        top = total if end is None else min(total, end)
        reserved += (top - start) * hundredths // 10000
    return reserved


def max_pods(figures: InstanceTypeFigures) -> int:
    """Pods the kubelet admits on the type, as nodeadm computes it from the ENIs: one IP
    per ENI is the ENI's own, and kube-proxy and the VPC CNI run on the host network."""
    if figures.max_network_interfaces <= 0 or figures.ipv4_per_interface <= 0:
        return 110  # the kubelet's default, which nodeadm falls back to
    return figures.max_network_interfaces * (figures.ipv4_per_interface - 1) + 2


def kube_reserved_memory_mebibytes(pods: int) -> int:
    """nodeadm's kube-reserved memory for a node admitting `pods` pods."""
    return 11 * pods + 255


def node_allocatable(figures: InstanceTypeFigures, efa: bool) -> ResourceAmounts:
    """What one node of the type offers pods, in scheduler units (`pod_requests`).

    EFA devices exist only on a gang that asks for them (`efa`), which launches the type's
    EFA interfaces."""
    memory_mib = (
        figures.memory_mib
        - kube_reserved_memory_mebibytes(max_pods(figures))
        - EVICTION_HARD_MEMORY_MIB
    )
    return {
        CPU: max(figures.vcpus * 1000 - kube_reserved_cpu_millicores(figures.vcpus), 0),
        MEMORY: max(memory_mib, 0) * _MIB,
        NVIDIA_GPU: figures.nvidia_gpus,
        NEURON: figures.neuron_devices,
        NEURON_CORE: figures.neuron_cores,
        EFA: figures.efa_interfaces if efa else 0,
    }


def _whence(resource: str, figures: InstanceTypeFigures, efa: bool) -> str:
    """Where the type's figure comes from, for the refusal."""
    if resource == CPU:
        return (
            f"{figures.vcpus} vCPUs less the "
            f"{format_amount(CPU, kube_reserved_cpu_millicores(figures.vcpus))} the EKS "
            "AL2023 AMI reserves for the kubelet"
        )
    if resource == MEMORY:
        reserved = kube_reserved_memory_mebibytes(max_pods(figures)) + EVICTION_HARD_MEMORY_MIB
        return (
            f"{figures.memory_mib} MiB less the {reserved} MiB the EKS AL2023 AMI reserves "
            "for the kubelet and its eviction threshold"
        )
    if resource == NVIDIA_GPU:
        return f"{figures.nvidia_gpus} NVIDIA GPUs"
    if resource in (NEURON, NEURON_CORE):
        return f"{figures.neuron_devices} Neuron devices of {figures.neuron_cores} cores"
    if resource == EFA and not efa and figures.efa_interfaces:
        return (
            f'none without {c.ANN_EFA}: "true", with which it gets '
            f"{figures.efa_interfaces} EFA interfaces"
        )
    return f"{figures.efa_interfaces} EFA interfaces"


def fit_problems(
    requests: ResourceAmounts, figures: InstanceTypeFigures, efa: bool
) -> list[Problem]:
    """The refusals of a gang whose largest pod request (`pod_requests.gang_pod_requests`)
    does not fit one node of its type; empty when it fits. Resources the type's figures do
    not cover (ephemeral storage, hugepages, other device plugins') are left to the node's
    own allocatable at the join."""
    offered = node_allocatable(figures, efa)
    problems: list[Problem] = []
    for resource, wanted in sorted(requests.items()):
        has = offered.get(resource)
        if has is None or wanted <= has:
            continue
        asked, offers = format_amount(resource, wanted), format_amount(resource, has)
        problems.append(
            Problem(
                key=c.ANN_INSTANCE_TYPE,
                value=figures.instance_type,
                reason=REASON_POD_DOES_NOT_FIT,
                detail=(
                    f"one pod of the gang requests {resource}: {asked}, and one "
                    f"{figures.instance_type} node offers {offers} "
                    f"({_whence(resource, figures, efa)}), so the pod could never be scheduled"
                ),
                accepted=(
                    f"an instance type whose node holds one pod's requests, or pods that "
                    f"request at most {offers} {resource}"
                ),
            )
        )
    return problems


def unknown_instance_type_problem(instance_type: str, region: str) -> Problem:
    """The refusal of a type EC2 does not know in the cluster's region."""
    return Problem(
        key=c.ANN_INSTANCE_TYPE,
        value=instance_type,
        reason=REASON_UNKNOWN_INSTANCE_TYPE,
        detail=f"EC2 knows no such instance type in {region} (DescribeInstanceTypes)",
        accepted=f'an instance type EC2 offers in {region}, such as "p5.48xlarge"',
    )
