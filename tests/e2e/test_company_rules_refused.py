"""Company rules on the embedded default, the refusal: in an account whose organization
denies launches without a `CostCenter` tag (an SCP, switched on in the emulator), a Job
with no installer tags is refused as EC2 refuses an SCP deny (UnauthorizedOperation), and
the product says so on the pool and the Workload's check, naming `instances.extraTags`,
with nothing launched. (Its own file: each e2e file here starts one environment.)
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from provisioner.api import constants as c
from provisioner.cloud.tags import REASON_ORGANIZATION_POLICY
from tests.e2e.conftest import submit
from tests.e2e.test_company_rules import _reads
from tests.support.ec2_listing import described_instances
from tests.support.waiting import eventually


def test_without_the_tag_the_launch_is_refused_as_ec2_refuses_it_and_said_clearly(
    gang_local: Any, namespace: str
) -> None:
    env = gang_local()
    emulator = env.emulator_client
    emulator.require_launch_tags(["CostCenter"])
    pool_name = f"nocc-{uuid.uuid4().hex[:6]}"
    submit(env, namespace, "gang", pool_name)

    with _reads(env) as reads:

        def refused() -> dict[str, Any] | None:
            status = reads.pool_status(pool_name)
            error = status.get("lastError") or {}
            return status if error.get("reason") == REASON_ORGANIZATION_POLICY else None

        status = eventually(refused, 180, "the pool reporting the organization's refusal")
        message = status["lastError"]["message"]
        assert "service control policy" in message and "instances.extraTags" in message
        checks = eventually(
            lambda: (
                (found := reads.checks_of(namespace, "gang"))
                and "instances.extraTags" in json.dumps(found)
                and found
            ),
            180,
            "the Workload's check naming instances.extraTags",
        )
        assert all(check.get("state") != c.CheckState.READY for check in checks)
    # EC2 refused every launch whole: nothing was ever made, in any state.
    assert described_instances(env.ec2_client()) == []
    requests = emulator.launch_requests(action="RunInstances")
    assert requests and all(r.get("error") == "UnauthorizedOperation" for r in requests), requests
