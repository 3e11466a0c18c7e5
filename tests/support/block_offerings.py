"""Capacity Block offerings as EC2 describes them, for the tests of choosing and buying one."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from provisioner.cloud.block_offerings import CapacityBlockOffering

__all__ = ["offering"]


def offering(
    name: str,
    start: datetime,
    fee: str,
    *,
    instance_type: str = "p5.48xlarge",
    count: int = 2,
    hours: int = 24,
    zone: str = "us-east-1a",
) -> CapacityBlockOffering:
    """Offering `name`: `count` x `instance_type` in `zone` from `start` for `hours`, at an
    upfront fee of `fee` USD for the whole block."""
    return CapacityBlockOffering(
        offering_id=name,
        instance_type=instance_type,
        availability_zone=zone,
        instance_count=count,
        start=start,
        end=start + timedelta(hours=hours),
        duration_hours=hours,
        upfront_fee=Decimal(fee),
        currency="USD",
    )
