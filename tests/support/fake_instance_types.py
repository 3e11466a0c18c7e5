"""A stateful stand-in for `api.pod_fit.InstanceTypes`: a few types with EC2's figures.

The figures are DescribeInstanceTypes' answers (as moto and the emulator give them) for the
types the tests use; `failing` makes every question raise `InstanceTypeLookupError` (EC2
unreachable); a type not in `types` is one EC2 does not know.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from provisioner.api.pod_fit import (
    InstanceTypeFigures,
    InstanceTypeLookupError,
    UnknownInstanceType,
)

KNOWN: Final = {
    f.instance_type: f
    for f in (
        InstanceTypeFigures(
            "p4d.24xlarge", 96, 1179648, nvidia_gpus=8, efa_interfaces=4,
            max_network_interfaces=15, ipv4_per_interface=50,
        ),
        InstanceTypeFigures(
            "p5.48xlarge", 192, 2097152, nvidia_gpus=8, efa_interfaces=32,
            max_network_interfaces=2, ipv4_per_interface=50,
        ),
        InstanceTypeFigures(
            "trn1.32xlarge", 128, 524288, neuron_devices=16, neuron_cores=32,
            efa_interfaces=8, max_network_interfaces=5, ipv4_per_interface=50,
        ),
        InstanceTypeFigures(
            "m5.large", 2, 8192, max_network_interfaces=3, ipv4_per_interface=10
        ),
    )
}  # fmt: skip


@dataclass
class FakeInstanceTypes:
    types: dict[str, InstanceTypeFigures] = field(default_factory=lambda: dict(KNOWN))
    failing: str | None = None
    asked: list[str] = field(default_factory=list)

    def reset(self) -> None:
        self.types = dict(KNOWN)
        self.failing = None
        self.asked.clear()

    def figures(self, instance_type: str) -> InstanceTypeFigures:
        self.asked.append(instance_type)
        if self.failing is not None:
            raise InstanceTypeLookupError(self.failing)
        if instance_type not in self.types:
            raise UnknownInstanceType(instance_type)
        return self.types[instance_type]
