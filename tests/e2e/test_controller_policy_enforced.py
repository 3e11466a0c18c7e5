"""The embedded default runs the controller under its own IAM policy, and the policy bites.

The controller and its stacks' Pulumi CLI sign with the controller role's credentials
(assumed as its pods do); the emulator evaluates `iam_policy.controller_policy` on each of
their calls. Here a gang is launched, kept warm and released under it, while the same
credentials are refused on an instance of no gang and on another cluster's gang instance,
through the product's own engine calls.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client as k8s

from provisioner.api import constants as c
from provisioner.api.clock import SystemClock
from provisioner.api.constants import Phase
from provisioner.cloud.ec2api import build_clients, new_session
from provisioner.cloud.engine import Ec2Engine
from provisioner.cloud.errors import CloudError
from provisioner.cloud.tags import RUNINSTANCES_RESOURCE_TYPES, tag_specifications
from stacks.spec import pool_tags
from tests.e2e.conftest import conditions, eventually, phase, submit, workload_of


def _stranger(env: Any, tags: dict[str, str] | None) -> str:
    ec2 = env.ec2_client()  # the harness's own keys: the account's root
    image = ec2.describe_images()["Images"][0]["ImageId"]
    extra = (
        {"TagSpecifications": tag_specifications(tags, RUNINSTANCES_RESOURCE_TYPES)} if tags else {}
    )
    made = ec2.run_instances(
        ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1, **extra
    )
    return str(made["Instances"][0]["InstanceId"])


def _state(env: Any, instance_id: str) -> str:
    found = env.ec2_client().describe_instances(InstanceIds=[instance_id])["Reservations"]
    return str(found[0]["Instances"][0]["State"]["Name"])


def test_the_controller_runs_under_its_policy_which_refuses_what_is_not_its_clusters(
    gang_local: Any, namespace: str
) -> None:
    env = gang_local()
    keys = env.controller_keys
    session = new_session(**keys, region_name=env.region)
    who = session.client(
        "sts", region_name=env.region, endpoint_url=env.emulator.endpoint_url
    ).get_caller_identity()["Arn"]
    assert ":assumed-role/atomic-gang-controller/" in who

    # A gang goes through launch, join and the check under the policy.
    pool_name = f"pol-{uuid.uuid4().hex[:6]}"
    submit(env, namespace, "gang", pool_name)
    eventually(lambda: phase(env, pool_name) == Phase.SATISFIED, 120, "pool Satisfied")
    eventually(
        lambda: ((workload_of(env, namespace, "gang") or {}).get("status") or {}).get(
            "admissionChecks"
        ),
        what="the Workload's check",
    )

    # The same credentials, through the product's engine, on what is not this cluster's.
    clients = build_clients(
        session, env.region, endpoint_url=env.emulator.endpoint_url, max_attempts=1
    )
    engine = Ec2Engine(clients, SystemClock())
    untagged = _stranger(env, None)
    theirs = _stranger(
        env, {**pool_tags("other-cluster", "p", timedelta(hours=1)), c.TAG_GROUP: "g"}
    )
    for instance in (untagged, theirs):
        with pytest.raises(CloudError) as refused:
            engine.set_keep_warm_tag([instance], datetime.now(UTC) + timedelta(minutes=5))
        assert refused.value.code == "UnauthorizedOperation"
        with pytest.raises(CloudError) as refused:
            engine.release([instance], eni_wait_seconds=0, poll_seconds=0.1)
        assert refused.value.code == "UnauthorizedOperation"
        assert _state(env, instance) == "running"

    # Its own pool's release, by deleting the pool, passes the policy (the fixture waits
    # for the finalizer); the strangers are the harness's to end. The gang's Job finishes
    # first: an admitted Workload whose pool is deleted under it claims a new one.
    eventually(
        lambda: conditions(workload_of(env, namespace, "gang")).get("Finished") == "True",
        120,
        "the gang's Job finished",
    )
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())
    custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, pool_name)
    eventually(lambda: phase(env, pool_name) is None, 120, "pool released")
    env.ec2_client().terminate_instances(InstanceIds=[untagged, theirs])
