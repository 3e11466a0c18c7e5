"""State backends for unit tests.

`UNREACHED_BACKEND`: for tests whose settings must name a backend but never reach it. The
settings refuse an empty `pulumi.backendUrl` (a file backend is only an explicit choice), so
shape, webhook and decision tests name the production kind of backend here; nothing in them
starts a Pulumi CLI or opens the bucket.

`backend_settings` and `state_bucket`: for tests of what the controller itself keeps in the
backend beside the CLI (a failed `stack init`'s lock, a first prepare's intent): settings
naming one backend, and an S3 bucket in moto.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from provisioner.api.settings import Settings

UNREACHED_BACKEND: Final = {"backendUrl": "s3://atomic-gang-state?region=us-east-1"}


def backend_settings(tmp_path: Path, backend_url: str, endpoint: str | None = None) -> Settings:
    """Settings of cluster c1 (controller region eu-west-1) with its stacks at ``backend_url``
    and, when given, AWS reached at ``endpoint``."""
    return Settings.model_validate(
        {
            "clusterName": "c1",
            "defaults": {"region": "eu-west-1", "nodeRoleArn": "arn:aws:iam::123456789012:role/n"},
            "pulumi": {"stateDir": str(tmp_path), "backendUrl": backend_url},
            "aws": {"endpointUrl": endpoint},
        }
    )


@contextmanager
def state_bucket(name: str) -> Iterator[Any]:
    """An S3 client (us-east-1) with bucket ``name`` made, inside moto (imported here: the
    tests that only name `UNREACHED_BACKEND` need neither)."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=name)
        yield client
