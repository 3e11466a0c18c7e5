"""Can an identity use the pools' Pulumi state: the S3 backend and the KMS secrets key.

Called by `atomic-gang doctor` with the clients of whichever identity it runs as. The S3
check does what the Pulumi CLI does to a stack file: list the prefix, write an object, read
it back, delete it (the probe lies in a directory of `.pulumi/` the CLI never reads). The
KMS check round-trips a few bytes through Encrypt and Decrypt, as the CLI does with a
stack's data key. Failures are `CloudError`s whose message
names what to fix.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error

__all__ = ["S3Backend", "check_kms_key", "check_s3_backend", "kms_key_of", "s3_backend_of"]

# Under .pulumi/, the only objects the controller policy lets it write; the CLI reads
# .pulumi/stacks, .pulumi/locks, .pulumi/history and .pulumi/backups, never this directory.
PROBE_DIR: Final = ".pulumi/atomic-gang-doctor"
_PROBE: Final = b"atomic-gang doctor probe"


@dataclass(frozen=True)
class S3Backend:
    bucket: str
    prefix: str  # "" or "a/b/" (always ending in "/")
    region: str | None

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def s3_backend_of(url: str) -> S3Backend:
    """s3://bucket[/prefix][?region=r] as Pulumi reads it."""
    parts = urlsplit(url)
    prefix = parts.path.strip("/")
    region = next(iter(parse_qs(parts.query).get("region") or []), None)
    return S3Backend(parts.netloc, f"{prefix}/" if prefix else "", region)


def kms_key_of(url: str) -> tuple[str, str | None]:
    """(KeyId for the KMS API, region) of an awskms:// secrets provider URL: an alias
    (awskms://alias/x), a key ID (awskms://1234-...) or an ARN (awskms:///arn:aws:kms:...)."""
    parts = urlsplit(url)
    region = next(iter(parse_qs(parts.query).get("region") or []), None)
    key = (parts.netloc + parts.path).lstrip("/")
    if key.startswith("arn:") and region is None:
        region = key.split(":")[3] or None
    return key, region


def _fail(exc: Exception, action: str, identity: str, fix: str) -> CloudError:
    """The error's kind and code kept; its message says who failed and the fix here."""
    err = to_cloud_error(exc, action)
    if err.kind is ErrorKind.RETRYABLE:
        return err
    says = getattr(exc, "response", {}).get("Error", {}).get("Message", "") or str(exc)
    return CloudError(
        err.kind, err.code, err.reason, f"{action} as {identity} failed ({err.code}: {says}); {fix}"
    )


def check_s3_backend(s3: Any, backend: S3Backend, identity: str) -> str:
    """List, write, read and delete a probe under the backend's prefix; CloudError names
    the bucket, the identity and the permission or resource missing."""
    grant = (
        f"grant {identity} s3:ListBucket on arn:aws:s3:::{backend.bucket} and s3:GetObject, "
        f"s3:PutObject, s3:DeleteObject on arn:aws:s3:::{backend.bucket}/{backend.prefix}* "
        "(the controller policy's state statements do), and check the bucket policy"
    )
    missing = (
        f"create bucket {backend.bucket} (the bootstrap's stackBackendUrl output) or fix "
        "pulumi.backendUrl"
    )
    key = f"{backend.prefix}{PROBE_DIR}/{uuid.uuid4().hex}"
    steps: list[tuple[str, Any]] = [
        (
            f"ListObjectsV2 s3://{backend.bucket}/{backend.prefix}",
            lambda: s3.list_objects_v2(Bucket=backend.bucket, Prefix=backend.prefix, MaxKeys=1),
        ),
        (
            f"PutObject s3://{backend.bucket}/{key}",
            lambda: s3.put_object(Bucket=backend.bucket, Key=key, Body=_PROBE),
        ),
        (
            f"GetObject s3://{backend.bucket}/{key}",
            lambda: s3.get_object(Bucket=backend.bucket, Key=key)["Body"].read(),
        ),
        (
            f"DeleteObject s3://{backend.bucket}/{key}",
            lambda: s3.delete_object(Bucket=backend.bucket, Key=key),
        ),
    ]
    for action, call in steps:
        try:
            call()
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code")
            fix = missing if code in ("NoSuchBucket", "404") else grant
            raise _fail(exc, action, identity, fix) from exc
    return f"{identity} listed, wrote, read and deleted a probe under {backend.url}"


def check_kms_key(kms: Any, key_id: str, identity: str) -> str:
    """An Encrypt/Decrypt round trip with the key: the calls the controller's policy grants
    (it grants no DescribeKey, so a check needing it would fail a working controller)."""
    grant = (
        f"grant {identity} kms:Encrypt, kms:Decrypt and kms:GenerateDataKey on key {key_id} "
        "(the controller policy's UseStackStateKey statement, and the key policy)"
    )
    fixes = {
        "NotFoundException": "create the key and alias (the bootstrap's stackSecretsProvider "
        "output) or fix pulumi.secretsProvider",
        "DisabledException": f"enable the key: aws kms enable-key --key-id {key_id}",
        "KMSInvalidStateException": "the key is pending deletion: aws kms cancel-key-deletion, "
        "then enable-key",
    }
    try:
        answer = kms.encrypt(KeyId=key_id, Plaintext=_PROBE)
        plain = kms.decrypt(CiphertextBlob=answer["CiphertextBlob"], KeyId=key_id)["Plaintext"]
    except Exception as exc:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code")
        raise _fail(
            exc, f"Encrypt/Decrypt with {key_id}", identity, fixes.get(code, grant)
        ) from exc
    if plain != _PROBE:
        raise CloudError(
            ErrorKind.UNKNOWN, None, "KmsRoundTrip", f"KMS key {key_id} did not round-trip"
        )
    return f"{identity} encrypted and decrypted with {key_id} ({answer.get('KeyId')})"
