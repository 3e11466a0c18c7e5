"""Every page of a DescribeInstances answer: a test that reads one page sees at most the
first 1,000 instances (EC2's page size), or fewer where the emulator pages smaller."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def described_instances(ec2: Any, filters: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """Every instance the filters match (no filters: every instance), across all pages."""
    found: list[dict[str, Any]] = []
    kwargs = {"Filters": list(filters)} if filters else {}
    for page in ec2.get_paginator("describe_instances").paginate(**kwargs):
        found.extend(i for r in page["Reservations"] for i in r["Instances"])
    return found
