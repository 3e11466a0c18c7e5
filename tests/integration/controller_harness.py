"""A running controller against the real parts, for the controller's integration tests.

Builds what an EKS cluster would hold (the cluster record pointing at the local apiserver,
the node role, its instance profile by naming convention, its EC2_LINUX access entry) in
the EC2 emulator, starts the node simulator, and runs the Manager in-process with the real
engine, the real Pulumi driver on a file backend and the real Kubernetes client. Loaded by
test modules through `pytest_plugins`.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import secrets
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import boto3
import pytest
from kubernetes import client as k8s

from devenv.bootstrap import register_cluster_and_identity
from devenv.environment import NODE_SIMULATOR_KEY
from devenv.nodesim import SIMULATED_LABEL, NodeSimulator
from devenv.processes import free_port
from devenv.state_backend import seed_state_backend
from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.assembly import build_system
from provisioner.controllers.manager import Manager
from provisioner.kube.client import KubeClient
from provisioner.pulumi_driver.driver import StackDriver
from tests.support import kueue_objects as ko
from tests.support.ec2_listing import described_instances
from tests.support.kueue_standin import KueueStandIn
from tests.support.waiting import eventually

T = TypeVar("T")
CLUSTER = "gang-it"
REGION = "us-east-1"
ROLE_NAME = "eks-gang-node-role"
CHECK = "atomic-gang-check"
# The test's own EC2 reads sign with a key of their own, and so does the node simulator's
# polling: the in-process controller signs with the process's default credentials
# (`os.environ["AWS_ACCESS_KEY_ID"]`), so a fault or delay scoped to that key reaches the
# controller alone, and the emulator's consumed-call log says who took each one.
TEST_CLIENT_KEY = "gang-env-test"


@dataclass
class GangEnv:
    settings: Settings
    manager: Manager
    kueue: KueueStandIn
    nodes: NodeSimulator
    ec2: Any
    emulator: Any
    custom: k8s.CustomObjectsApi
    namespace: str
    driver: StackDriver

    def submit(self, name: str, pool: str, count: int = 2, **annotations: str) -> str:
        job = ko.gang_job(self.namespace, name, "lq", pool, count, annotations)
        return self.kueue.submit(self.namespace, job)

    def pool(self, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, name)
        except k8s.ApiException as err:
            if err.status == 404:
                return None
            raise

    def phase(self, name: str) -> str | None:
        pool = self.pool(name)
        return (pool or {}).get("status", {}).get("phase")

    def wait_phase(self, name: str, phase: str, timeout: float = 90.0) -> dict[str, Any]:
        return eventually(
            lambda: (p := self.pool(name)) and p.get("status", {}).get("phase") == phase and p,
            timeout,
            lambda: f"pool {name} in {phase} (now {self.phase(name)})",
        )

    def check(self, workload: str) -> dict[str, Any] | None:
        return self.kueue.check_state(self.namespace, workload)

    def wait_check(self, workload: str, state: str, timeout: float = 90) -> dict[str, Any]:
        return eventually(
            lambda: (s := self.check(workload)) and s["state"] == state and s,
            timeout,
            lambda: f"check on {workload} {state} (now {self.check(workload)})",
        )

    def live_instances(self, pool: str | None = None) -> list[dict[str, Any]]:
        filters = [
            {"Name": f"tag:{c.TAG_CLUSTER}", "Values": [CLUSTER]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
        if pool:
            filters.append({"Name": f"tag:{c.TAG_POOL}", "Values": [pool]})
        return described_instances(self.ec2, filters)

    def launches(self) -> int:
        """RunInstances/CreateFleet instances ever created for this cluster (any state)."""
        filters = [{"Name": f"tag:{c.TAG_CLUSTER}", "Values": [CLUSTER]}]
        return len(described_instances(self.ec2, filters))


def _aws_identity(emulator: Any, control_plane: Any) -> str:
    """The cluster record, node role, convention-named profile and access entry."""
    identity = register_cluster_and_identity(
        emulator.endpoint_url, control_plane.info, CLUSTER, REGION, ROLE_NAME
    )
    return identity.role_arn


@contextlib.contextmanager
def _gone_already_is_fine() -> Iterator[None]:
    """Teardown races the controllers it tears down: an object they removed meanwhile is
    what teardown wanted anyway."""
    try:
        yield
    except k8s.ApiException as err:
        if err.status != 404:
            raise


@pytest.fixture
def gang_env_factory(
    kube_api: Any,
    control_plane: Any,
    kueue_crds: list[str],
    emulator: Any,
    pulumi_tool: Any,
    tmp_path: Path,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[..., GangEnv]]:
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "integration")
    role = _aws_identity(emulator, control_plane)
    started: list[tuple[Manager, NodeSimulator]] = []
    drivers: list[StackDriver] = []
    idle_sims: list[NodeSimulator] = []
    core = k8s.CoreV1Api(kube_api)
    custom = k8s.CustomObjectsApi(kube_api)
    kueue = KueueStandIn(kube_api, CHECK)
    kueue.admission_check()

    def make(
        join_delay: float = 0.5,
        leader_election: bool = False,
        start_controller: bool = True,
        file_backend: bool = False,
        **overrides: Any,
    ) -> GangEnv:
        # The stacks live in the emulator's S3 bucket with KMS secrets, as in production;
        # `file_backend=True` keeps them in stateDir, for tests of that option.
        state_dir = tmp_path / "pulumi"
        pulumi: dict[str, str] = {"stateDir": str(state_dir)}
        if file_backend:
            pulumi["backendUrl"] = f"file://{state_dir}"
        else:
            pulumi.update(seed_state_backend(emulator.endpoint_url, REGION).pulumi_settings())
        # The cluster's ownership key, as the chart mounts it from a Secret: the
        # controller signs launch tokens with it and the reaper proves orphans by it.
        key_file = tmp_path / "ownership-key"
        if not key_file.exists():
            key_file.write_bytes(secrets.token_bytes(32))
        settings = Settings.model_validate(
            {
                "clusterName": CLUSTER,
                "ownership": {"keyFile": str(key_file)},
                "defaults": {"region": REGION, "nodeRoleArn": role, "keepWarmTTL": "10m"},
                "acquireAttemptsBeforeRetry": 3,
                "joinDeadlineSeconds": 20,
                "reapIntervalSeconds": 2,
                # Short waits: a test must see a retry within seconds, not minutes.
                "retryBackoff": {"initial": "500ms", "max": "4s"},
                "leaderElection": {
                    "enabled": leader_election,
                    "leaseNamespace": namespace,
                    "leaseName": "atomic-gang-it",
                    "leaseDuration": "4s",
                    "renewDeadline": "3s",
                    "retryPeriod": "1s",
                },
                "healthPort": free_port(),
                "pulumi": pulumi,
                "aws": {"endpointUrl": emulator.endpoint_url},
                **overrides,
            }
        )
        ec2 = _ec2_client(emulator.endpoint_url, TEST_CLIENT_KEY)
        sim = NodeSimulator(
            core=core,
            ec2=_ec2_client(emulator.endpoint_url, NODE_SIMULATOR_KEY),
            cluster_name=CLUSTER,
            join_delay=join_delay,
        )
        sim.start()
        system = build_system(
            settings,
            KubeClient.from_kubeconfig(control_plane.info.kubeconfig),
            pulumi_tool.binary.parent.parent,
            identity=f"it-{uuid.uuid4().hex[:6]}",
            aws_max_attempts=1,
        )
        manager, driver = system.manager, system.driver
        drivers.append(driver)
        if start_controller:
            manager.start(serve_http=False)
            started.append((manager, sim))
        else:
            idle_sims.append(sim)
        return GangEnv(settings, manager, kueue, sim, ec2, emulator, custom, namespace, driver)

    yield make

    # No Workload may claim again while the pools are released.
    custom.delete_collection_namespaced_custom_object(
        c.KUEUE_GROUP, c.KUEUE_VERSION, namespace, "workloads"
    )
    for manager, _ in started:
        # Pools go through their finalizer while a controller still runs.
        for pool in custom.list_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL)["items"]:
            with _gone_already_is_fine():
                custom.delete_cluster_custom_object(
                    c.GROUP, c.VERSION, c.GNP_PLURAL, pool["metadata"]["name"]
                )
        if manager.is_leading():
            eventually(
                lambda: (
                    not custom.list_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL)["items"]
                ),
                120,
                "pools released through their finalizer",
            )
        break
    for manager, sim in started:
        manager.stop()
        sim.stop()
    for stack_driver in drivers:
        stack_driver.close()
    for sim in idle_sims:
        sim.stop()
    for pool in custom.list_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL)["items"]:
        name = pool["metadata"]["name"]
        # A controller that is still stopping (a test's own) may finish the pool meanwhile.
        with _gone_already_is_fine():
            custom.patch_cluster_custom_object(
                c.GROUP, c.VERSION, c.GNP_PLURAL, name, {"metadata": {"finalizers": None}}
            )
    for node in core.list_node(label_selector=f"{SIMULATED_LABEL}=true").items:
        core.delete_node(node.metadata.name)


@pytest.fixture
def failed_updates() -> Iterator[None]:
    """For tests whose updates fail on purpose. When an update fails, the CLI exits while
    the SDK's in-process language server is still running the inline program; the SDK logs
    that (logger `grpc._server`, with the traceback) and abandons the program's event loop,
    which the garbage collector later reports as unraisable (unclosed loop and sockets).
    Captured log records would keep the traceback, and through it the loop, alive into the
    next test; so those records are not captured, and the leftovers are collected here."""
    grpc_log = logging.getLogger("grpc._server")
    level = grpc_log.level
    grpc_log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        grpc_log.setLevel(level)
        gc.collect()


def _ec2_client(endpoint_url: str, access_key: str) -> Any:
    return boto3.client(
        "ec2",
        region_name=REGION,
        endpoint_url=endpoint_url,
        aws_access_key_id=access_key,
        aws_secret_access_key="testing",
    )
