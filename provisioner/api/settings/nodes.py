"""`startupTaints`: what makes a Ready gang node not yet usable, besides its allocatable
(the rule that reads it is `provisioner.controllers.pool.usable`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from provisioner.api.settings.section import Section

__all__ = ["StartupTaint"]


class StartupTaint(Section):
    """A taint some agent puts on a node at registration and removes once it has set the
    node up (Karpenter's `startupTaints`): a gang node still carrying one is not usable.
    It matches a Node's taint of the same key and effect, and of the same value when one
    is given here."""

    key: str = Field(min_length=1, max_length=316, description="The taint's key.")
    value: str | None = Field(default=None, description="The taint's value; unset matches any.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        default="NoSchedule", description="The taint's effect."
    )
