"""The reaper on real parts fails closed: a controller whose service account may not list
GangNodePools (RBAC, on the real apiserver) never syncs its pool cache, and its reaper
terminates nothing, although every gang instance then looks like an orphan."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from provisioner.api import constants as c
from provisioner.assembly import build_system
from provisioner.kube.client import KubeClient
from provisioner.kube.permissions import CLUSTER_PERMISSIONS
from tests.integration.controller_harness import GangEnv, eventually

USER = "reaper-it-no-pool-list"
SKIPPED = "atomic_gang_reaper_sweeps_skipped_total"


@pytest.fixture
def pools_unlistable(control_plane: Any, kube_api: Any, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig for a user granted every call the controller makes except `list` and
    `watch` on GangNodePools."""
    rules = [
        k8s.V1PolicyRule(
            api_groups=[p.api_group],
            resources=[p.resource],
            verbs=[
                v for v in p.verbs if not (p.resource == c.GNP_PLURAL and v in ("list", "watch"))
            ],
        )
        for p in CLUSTER_PERMISSIONS
    ]
    rbac = k8s.RbacAuthorizationV1Api(kube_api)
    rbac.create_cluster_role(k8s.V1ClusterRole(metadata=k8s.V1ObjectMeta(name=USER), rules=rules))
    rbac.create_cluster_role_binding(
        k8s.V1ClusterRoleBinding(
            metadata=k8s.V1ObjectMeta(name=USER),
            role_ref=k8s.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=USER
            ),
            subjects=[
                k8s.RbacV1Subject(kind="User", name=USER, api_group="rbac.authorization.k8s.io")
            ],
        )
    )
    admin = yaml.safe_load(control_plane.info.kubeconfig.read_text())
    cert, key = control_plane.ca.client(USER).write(tmp_path, "user.crt", "user.key")
    admin["users"] = [
        {
            "name": USER,
            "user": {"client-certificate": str(cert), "client-key": str(key)},
        }
    ]
    admin["contexts"][0]["context"]["user"] = USER
    path = tmp_path / "unlistable.kubeconfig"
    path.write_text(yaml.safe_dump(admin))
    yield path
    rbac.delete_cluster_role_binding(USER)
    rbac.delete_cluster_role(USER)


def _skipped(manager: Any) -> float:
    value = manager.metrics.registry.get_sample_value(SKIPPED, {"reason": "pool-cache-not-trusted"})
    return 0.0 if value is None else float(value)


def test_with_the_pool_informer_never_synced_the_reaper_terminates_nothing(
    gang_env_factory: Any, pools_unlistable: Path, pulumi_tool: Any
) -> None:
    env: GangEnv = gang_env_factory()
    workload = env.submit("held", "pool-held", count=2)
    env.wait_check(workload, c.CheckState.READY, timeout=120)
    gang = {i["InstanceId"] for i in env.live_instances("pool-held")}
    assert len(gang) == 2
    env.manager.stop()  # the first controller goes; its gang runs on

    # The next controller cannot list GangNodePools: to a blind reaper, every gang
    # instance is an orphan.
    system = build_system(
        env.settings,
        KubeClient.from_kubeconfig(pools_unlistable),
        pulumi_tool.binary.parent.parent,
        identity=f"it-blind-{uuid.uuid4().hex[:6]}",
        aws_max_attempts=1,
    )
    blind = system.manager
    blind.sync_wait = 2.0
    # Started beside the test: leading may wait on the caches first.
    threading.Thread(target=blind.start, kwargs={"serve_http": False}, daemon=True).start()
    try:

        def swept_or_terminated() -> bool:
            live = {i["InstanceId"] for i in env.live_instances("pool-held")}
            return _skipped(blind) >= 3 or live != gang

        # reapIntervalSeconds is 2: three sweeps in well under the 60 s a Manager used to
        # wait before starting the reaper on whatever the cache held.
        eventually(swept_or_terminated, 100, "three reaper sweeps, or a termination")
        assert {i["InstanceId"] for i in env.live_instances("pool-held")} == gang
        assert _skipped(blind) >= 3
        assert not blind.ready()
    finally:
        blind.stop()
        system.driver.close()
