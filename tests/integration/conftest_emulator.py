"""Fixtures for tests that talk to the EC2 emulator server process.

Meant to be loaded by `tests/integration/conftest.py` (as a plugin or by import):
- `ec2_emulator_process` (session): the session's one `EmulatorProcess` (`emulator_process`
  in `tests/conftest.py`), stopped (nothing left running) when the session ends.
- `ec2_emulator` (function): the process's `EmulatorClient`, after a reset, so every test
  starts from a freshly seeded emulator with no switches set.
- `emulator_aws_client` (function): `make(service, retries=False, region=...)` returns a
  boto3 client pointed at the emulator with dummy credentials; retries are off unless asked
  for, so one injected fault is one failed call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.config import Config

from devenv.emulator import DEFAULT_REGION, EmulatorClient, EmulatorProcess

AwsClientFactory = Callable[..., Any]


@pytest.fixture(scope="session")
def ec2_emulator_process(emulator_process: EmulatorProcess) -> EmulatorProcess:
    # One emulator per session: the root conftest's, shared with every other suite.
    return emulator_process


@pytest.fixture
def ec2_emulator(ec2_emulator_process: EmulatorProcess) -> EmulatorClient:
    client = ec2_emulator_process.client
    client.reset()
    return client


@pytest.fixture
def emulator_aws_client(ec2_emulator_process: EmulatorProcess) -> AwsClientFactory:
    session = boto3.session.Session(
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name=DEFAULT_REGION,
    )

    def make(service: str, *, retries: bool = False, region: str = DEFAULT_REGION) -> Any:
        attempts = 3 if retries else 1
        return session.client(
            service,
            endpoint_url=ec2_emulator_process.endpoint_url,
            region_name=region,
            config=Config(retries={"total_max_attempts": attempts, "mode": "standard"}),
        )

    return make
