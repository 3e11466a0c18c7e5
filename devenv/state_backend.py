"""The pools' stack state in the emulator: the S3 bucket and KMS key the bootstrap makes on AWS.

Called wherever a local controller is configured (the local environment, the integration,
e2e and chaos harnesses, the benches) after the emulator has started or been reset, since a
reset forgets every bucket and key. `seed_state_backend` is idempotent: a second call finds
the bucket and the alias and returns the same URLs. The controller then runs exactly as in
production, on ``s3://`` and ``awskms://``; only ``aws.endpointUrl`` points the Pulumi CLI's
S3 and KMS clients at the emulator (`provisioner.pulumi_driver.environment`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Final

import boto3

__all__ = ["DEFAULT_ALIAS", "DEFAULT_BUCKET", "StateBackend", "seed_state_backend"]

DEFAULT_BUCKET: Final = "atomic-gang-state"
DEFAULT_ALIAS: Final = "alias/atomic-gang-state"
# The emulator takes any keys; fixed ones keep a developer's real profile out of it.
_KEYS: Final = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}


@dataclass(frozen=True)
class StateBackend:
    endpoint_url: str
    region: str
    bucket: str = DEFAULT_BUCKET
    key_alias: str = DEFAULT_ALIAS
    prefix: str = ""

    @property
    def backend_url(self) -> str:
        path = f"/{self.prefix.strip('/')}" if self.prefix.strip("/") else ""
        return f"s3://{self.bucket}{path}?region={self.region}"

    @property
    def secrets_provider(self) -> str:
        return f"awskms://{self.key_alias}?region={self.region}"

    def pulumi_settings(self) -> dict[str, str]:
        """The `pulumi` settings keys (chart spelling) that select this backend."""
        return {"backendUrl": self.backend_url, "secretsProvider": self.secrets_provider}

    def cli_environment(self) -> dict[str, str]:
        """What an operator's `pulumi` command needs to read these stacks."""
        return {
            "PULUMI_BACKEND_URL": self.backend_url,
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
            "AWS_ENDPOINT_URL_KMS": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": _KEYS["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": _KEYS["aws_secret_access_key"],
            "AWS_REGION": self.region,
        }

    def client(self, service: str) -> Any:
        return boto3.client(
            service, region_name=self.region, endpoint_url=self.endpoint_url, **_KEYS
        )

    def stack_keys(self) -> list[str]:
        """Every object key under the backend's ``.pulumi/`` (what the CLI has written)."""
        prefix = f"{self.prefix.strip('/')}/.pulumi/" if self.prefix.strip("/") else ".pulumi/"
        pages = self.client("s3").get_paginator("list_objects_v2")
        return [
            obj["Key"]
            for page in pages.paginate(Bucket=self.bucket, Prefix=prefix)
            for obj in page.get("Contents", [])
        ]


def seed_state_backend(
    endpoint_url: str,
    region: str,
    *,
    bucket: str = DEFAULT_BUCKET,
    key_alias: str = DEFAULT_ALIAS,
    prefix: str = "",
) -> StateBackend:
    """Make (or find) the versioned bucket and the aliased key; return the backend."""
    backend = StateBackend(endpoint_url, region, bucket, key_alias, prefix)
    s3 = backend.client("s3")
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    kms = backend.client("kms")
    pages = kms.get_paginator("list_aliases").paginate()
    aliases = {a["AliasName"] for page in pages for a in page["Aliases"]}
    if key_alias not in aliases:
        key = kms.create_key(Description="atomic-gang stack state (local)")["KeyMetadata"]
        kms.create_alias(AliasName=key_alias, TargetKeyId=key["KeyId"])
    return backend
