"""The composition root: the running controller, built from `Settings` in one place.

`build_system` makes the EC2 engine (boto3 clients for the settings' region and endpoint),
the stack driver and its port, and the `Manager` that runs the reconcilers on them and
owns the metrics registry the port reports to. Called
by `atomic-gang controller` (``commands.controller``), the local environment
(``devenv.environment``) and the in-process test harnesses; what differs between them
(credentials, retries, identity) is an argument, not a second copy of the wiring.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.api.clock import SystemClock
from provisioner.api.settings import Settings
from provisioner.cloud.ec2api import build_clients, default_session
from provisioner.cloud.engine import Ec2Engine
from provisioner.controllers.manager import Manager
from provisioner.controllers.metrics import ControllerMetrics, StackMetrics
from provisioner.kube.client import KubeClient
from provisioner.kube.leader import default_identity
from provisioner.pulumi_driver.driver import StackDriver
from provisioner.pulumi_driver.port import PoolStacks

__all__ = ["System", "build_system"]

# botocore's standard retry mode absorbs short bursts; what survives is the reconciler's.
DEFAULT_AWS_ATTEMPTS = 5


@dataclass(frozen=True)
class System:
    """The parts of one controller. ``manager`` is built, not started."""

    manager: Manager
    engine: Ec2Engine
    stacks: PoolStacks
    driver: StackDriver


def build_system(
    settings: Settings,
    kube: KubeClient,
    pulumi_root: Path,
    *,
    identity: str | None = None,
    session: Any | None = None,
    aws_max_attempts: int = DEFAULT_AWS_ATTEMPTS,
    on_lost_leadership: Callable[[], None] | None = None,
) -> System:
    """The controller for ``settings`` on ``kube``, with the Pulumi CLI under
    ``pulumi_root``. ``session`` is a boto3 session (default: the default credential
    chain: Pod Identity, IRSA, env, instance role)."""
    region = settings.defaults.region
    clients = build_clients(
        session or default_session(),
        region,
        settings.aws.endpoint_url,
        max_attempts=aws_max_attempts,
    )
    engine = Ec2Engine(clients, SystemClock())
    driver = StackDriver(settings, pulumi_root, logging.getLogger("pulumi"))
    metrics = ControllerMetrics()
    stacks = PoolStacks(driver, StackMetrics(metrics))
    manager = Manager(
        settings,
        kube,
        engine,
        stacks,
        identity=identity or default_identity(),
        on_lost_leadership=on_lost_leadership,
        metrics=metrics,
    )
    return System(manager=manager, engine=engine, stacks=stacks, driver=driver)
