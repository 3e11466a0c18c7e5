"""Presents the Pulumi stack driver as the `StackOps` the pool reconciler calls.

The driver speaks in `PoolSpec`/`PoolOutputs`; the reconciler needs a yes/no "prepared",
a few outputs by name, and the four operations. Keeping the translation here lets either
side change shape without the other noticing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from provisioner.pulumi_driver.driver import StackDriver
from stacks.spec import PoolSpec


class StackAdapter:
    def __init__(self, driver: StackDriver) -> None:
        self.driver = driver

    def is_prepared(self, pool: str) -> bool:
        return self.driver.outputs(pool) is not None

    def outputs(self, pool: str) -> Mapping[str, Any]:
        current = self.driver.outputs(pool)
        if current is None:
            return {}
        profile = current.spec.instance_profile_name
        return {
            "launchTemplateId": current.launch_template_id,
            "instanceProfileName": profile,
            "instanceProfileArn": current.instance_profile_arn,
            "group": current.group,
            "instanceIds": list(current.instance_ids),
        }

    def prepare(self, spec: PoolSpec) -> Mapping[str, Any]:
        if self.driver.needs_prepare(spec):
            self.driver.prepare(spec)
        return self.outputs(spec.pool)

    def record_instance_set(self, pool: str, group: str, instance_ids: Sequence[str]) -> None:
        self.driver.record_instance_set(pool, group, instance_ids)

    def remove_instance_set(self, pool: str) -> None:
        self.driver.remove_instance_set(pool)

    def destroy(self, pool: str) -> None:
        self.driver.destroy(pool)

    def recover(self) -> None:
        self.driver.recover()

    def step_down(self) -> None:
        self.driver.step_down()
