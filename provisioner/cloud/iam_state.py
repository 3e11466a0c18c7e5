"""The controller policy's S3 and KMS statements: what the Pulumi CLI does on the pools'
`s3://` backend and `awskms://` secrets, and nothing more (list the one bucket,
read/write/delete objects under ``<prefix>.pulumi/`` only, and encrypt, decrypt and make
data keys with the one key).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from provisioner.cloud.iam_document import Policy, statement

__all__ = ["StackState", "state_statements"]

# What the Pulumi CLI (gocloud's s3blob and awskms) calls on a `diy` backend and its key.
# The controller itself lists, reads and deletes the lock of a stack a failed `stack init`
# left, and writes, reads and deletes a first prepare's intent (cloud.statebucket), both
# under `.pulumi/`: ListBucket, GetObject, PutObject, DeleteObject, all here.
_STATE_OBJECTS: Final = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject")
_STATE_KEY: Final = ("kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey")
_BUCKET: Final = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_KEY_ARN: Final = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+$")


@dataclass(frozen=True)
class StackState:
    """Where the pools' stacks live: ``s3://<bucket>/<prefix>`` with secrets (and the
    bucket's default encryption) under the KMS key ``key_arn``."""

    bucket: str
    key_arn: str
    prefix: str = ""

    def __post_init__(self) -> None:
        if not _BUCKET.match(self.bucket):
            raise ValueError(f"state bucket {self.bucket!r} is not an S3 bucket name")
        if not _KEY_ARN.match(self.key_arn):
            raise ValueError(f"state key {self.key_arn!r} is not a KMS key ARN")

    @property
    def objects(self) -> str:
        """The object keys the CLI writes: everything under ``<prefix>/.pulumi/``."""
        prefix = self.prefix.strip("/")
        return f"{prefix}/.pulumi/*" if prefix else ".pulumi/*"


def state_statements(part: str, state: StackState) -> list[Policy]:
    bucket = f"arn:{part}:s3:::{state.bucket}"
    return [
        # Unconditioned on s3:prefix, on purpose: S3 answers a HeadObject of a missing key
        # with 404 only to a caller allowed ListBucket, and that check carries no prefix.
        # A 403 there would read to the CLI as a broken backend. The bucket is the state's
        # own, so listing it shows nothing else.
        statement("ListStackStateBucket", "s3:ListBucket", bucket),
        statement("ReadWriteStackState", _STATE_OBJECTS, f"{bucket}/{state.objects}"),
        statement("UseStackStateKey", _STATE_KEY, state.key_arn),
    ]
