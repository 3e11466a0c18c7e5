"""Faults in the S3 state backend, met by the real Pulumi CLI writing a pool's checkpoint:
the controller of `tests/integration/controller_harness.py` on the emulator's S3 and KMS.

A checkpoint write that fails leaves a stack operation half-recorded: EC2 may hold what the
state does not. The product must still give the gang exactly N, and leave one launch
template per pool, the stack equal to EC2, nothing stray.
"""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.api import constants as c
from tests.chaos.harness import assert_clean, detached_enis, status
from tests.integration.controller_harness import GangEnv

pytestmark = pytest.mark.integration

N = 2


def pool_launch_templates(env: GangEnv, pool: str) -> list[str]:
    found = env.ec2.describe_launch_templates()["LaunchTemplates"]
    return [t["LaunchTemplateName"] for t in found if pool in t["LaunchTemplateName"]]


@pytest.mark.parametrize("after", [False, True], ids=["refused", "stored-answer-lost"])
def test_failing_checkpoint_writes_leave_one_template_and_n_instances(
    gang_env_factory: Any, after: bool
) -> None:
    env: GangEnv = gang_env_factory()
    emu = env.emulator.client
    enis = detached_enis(env)
    pool = f"pool-s3-{'lost' if after else 'refused'}"
    # Enough for the CLI's own retries to give up at least once, during prepare.
    emu.inject_fault("PutObject", "InternalError", count=12, after=after)
    workload = env.submit("s3", pool, count=N)

    env.wait_check(workload, c.CHECK_READY, timeout=240)
    consumed = [x for x in emu.consumed() if x.get("action") == "PutObject"]
    assert len(consumed) == 12, f"the checkpoint faults were not all met: {consumed}"
    st = status(env, pool)
    assert st["phase"] == c.PHASE_SATISFIED and len(st["instanceIds"]) == N, st
    assert len(pool_launch_templates(env, pool)) == 1, pool_launch_templates(env, pool)
    assert_clean(env, {pool: N}, enis)
