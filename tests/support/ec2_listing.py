"""Every page of a DescribeInstances answer: a test that reads one page sees at most the
first 1,000 instances (EC2's page size), or fewer where the emulator pages smaller."""

from __future__ import annotations

from typing import Any


def described_instances(ec2: Any, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        found.extend(i for r in page["Reservations"] for i in r["Instances"])
    return found
