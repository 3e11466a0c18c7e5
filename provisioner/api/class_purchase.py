"""A GangClass's `blockPurchase`: the Capacity Block purchase policy of one class's gangs.

The settings' `blockPurchase` (`api.settings.block_purchase`) is the installation's policy,
and also its IAM grant: the chart's `blockPurchase.enabled` is what gives the controller
`ec2:PurchaseCapacityBlock` (`iam_policy --buy-capacity-blocks`). A class's `blockPurchase`,
when set, replaces the settings' policy for the gangs of that class, so a platform team
enables buying (and caps it) per queue; one that enables buying without the installation's
grant is a problem of the class (`purchase_problem`), named on its AdmissionCheck's Active
condition with the fix, rather than a purchase refused by EC2 later.

`ClassBlockPurchase` is the wire form (spelled as the settings are, values as strings, as
the class's other fields are); `policy()` is the same policy as `BlockPurchasePolicy`, whose
rules judge it when the class is read. The Workload reconciler copies it into the pool's
spec (`GangNodePoolSpec.purchasePolicy`), which the pool reads (`effective_policy`): the
pool never reads a class.
"""

from __future__ import annotations

from typing import Self

from pydantic import Field, ValidationError, model_validator

from provisioner.api.meta import KubeModel
from provisioner.api.settings import BlockPurchasePolicy, Settings

__all__ = ["ClassBlockPurchase", "effective_policy", "purchase_problem", "with_policy"]


class ClassBlockPurchase(KubeModel):
    """The settings' `blockPurchase` fields, for one class; unset ones take the settings'
    defaults (not the installation's values: the class's policy replaces it whole)."""

    enabled: bool = False
    max_upfront_fee_per_gang: str | None = Field(default=None, pattern=r"^[0-9]+(\.[0-9]{1,2})?$")
    max_duration: str | None = None
    latest_start: str | None = None
    instance_types: tuple[str, ...] = ()
    availability_zones: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _judged(self) -> Self:
        try:
            self.policy()
        except ValidationError as err:
            raise ValueError("; ".join(str(e["msg"]) for e in err.errors())) from None
        return self

    def policy(self) -> BlockPurchasePolicy:
        """This policy as the settings' model (the rules both are judged by)."""
        fields = {
            name: getattr(self, name)
            for name in type(self).model_fields
            if getattr(self, name) not in (None, ())
        }
        return BlockPurchasePolicy.model_validate(fields)


def effective_policy(
    own: ClassBlockPurchase | None, settings: Settings, instance_type: str
) -> BlockPurchasePolicy:
    """What may be bought for a gang: its class's policy when the class sets one, else the
    settings' (`Settings.purchase_policy`)."""
    return own.policy() if own is not None else settings.purchase_policy(instance_type)


def with_policy(settings: Settings, own: ClassBlockPurchase | None) -> Settings:
    """`settings` with the class's policy in place of theirs, for reading a gang's shape
    (the duration a Job may ask for is the class's `maxDuration`)."""
    if own is None:
        return settings
    return settings.model_copy(update={"block_purchase": own.policy()})


def purchase_problem(class_name: str, own: ClassBlockPurchase | None, settings: Settings) -> str:
    """Why the class's buying cannot work in this installation ("" when it can)."""
    if own is None or not own.enabled or settings.block_purchase.enabled:
        return ""
    return (
        f"spec.blockPurchase.enabled is true, but this installation does not grant the "
        "controller ec2:PurchaseCapacityBlock (its settings' blockPurchase.enabled is false), "
        f"so no block could be bought for GangClass {class_name}'s gangs. Set the chart's "
        "blockPurchase.enabled=true with a maxUpfrontFeePerGang (it grants the purchase: "
        "iam_policy --buy-capacity-blocks), or set spec.blockPurchase.enabled=false."
    )
