"""Where the pools' Pulumi stacks live: one S3 bucket and one KMS key per cluster.

Called by `program.build`, before the controller's IAM (its policy is scoped to exactly this
bucket and key) and the Helm release (which gets the backend URL and secrets provider).
The bucket keeps every version of every checkpoint (a bad write can be rolled back), is
encrypted by default with the key, blocks every form of public access, and refuses any
request not made over TLS. The same key encrypts the stacks' secrets (``awskms://``), so
the controller needs no passphrase anywhere.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Final

import pulumi
import pulumi_aws as aws

from infra.config import BootstrapConfig

__all__ = ["StackStateStore", "bucket_name", "state_store", "tls_only_policy"]

_TAGS: Final = {"atomic-gang.k8s.aws/bootstrap": "true"}
_BUCKET_NAME_MAX: Final = 63


@dataclass(frozen=True)
class StackStateStore:
    bucket: aws.s3.Bucket
    key: aws.kms.Key
    alias: aws.kms.Alias
    backend_url: pulumi.Output[str]
    secrets_provider: str


def bucket_name(cfg: BootstrapConfig, account_id: str) -> str:
    """``stateBucketName``, else ``atomic-gang-state-<cluster>-<account>-<region>``: S3 names
    are global, so the account and region keep two installations apart. Lower-cased, and
    hash-truncated to S3's 63 characters."""
    if cfg.state_bucket_name:
        return cfg.state_bucket_name
    cluster = re.sub(r"[^a-z0-9-]", "-", cfg.cluster_name.lower()).strip("-")
    full = f"atomic-gang-state-{cluster}-{account_id}-{cfg.region}"
    if len(full) <= _BUCKET_NAME_MAX:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:10]
    return f"{full[: _BUCKET_NAME_MAX - 11].rstrip('-')}-{digest}"


def tls_only_policy(bucket_arn: str) -> dict[str, Any]:
    """Deny every S3 action on the bucket and its objects over plain HTTP."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [bucket_arn, f"{bucket_arn}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ],
    }


def state_store(
    cfg: BootstrapConfig, account_id: pulumi.Input[str], opts: pulumi.ResourceOptions
) -> StackStateStore:
    # The stacks are the record of what each pool owns: never removed by a `pulumi destroy`
    # of the bootstrap while they may still describe live instances. The key goes with the
    # bucket: its checkpoints are encrypted under it and their secrets name its alias, so a
    # key scheduled for deletion would leave the kept stacks unreadable. All three are
    # left in the account by a destroy and removed by hand together (docs/UPGRADING.md).
    keep = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(retain_on_delete=True))
    key = aws.kms.Key(
        "stack-state-key",
        description=f"Pulumi stack state and secrets of atomic-gang pools on {cfg.cluster_name}",
        enable_key_rotation=True,
        deletion_window_in_days=30,
        tags=_TAGS,
        opts=keep,
    )
    alias = aws.kms.Alias(
        "stack-state-key-alias", name=cfg.state_key_alias, target_key_id=key.key_id, opts=keep
    )
    name = pulumi.Output.from_input(account_id).apply(lambda account: bucket_name(cfg, account))
    bucket = aws.s3.Bucket("stack-state", bucket=name, tags=_TAGS, opts=keep)
    on_bucket = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(parent=bucket))
    aws.s3.BucketVersioning(
        "stack-state-versioning",
        bucket=bucket.id,
        versioning_configuration={"status": "Enabled"},
        opts=on_bucket,
    )
    aws.s3.BucketServerSideEncryptionConfiguration(
        "stack-state-encryption",
        bucket=bucket.id,
        rules=[
            {
                "apply_server_side_encryption_by_default": {
                    "sse_algorithm": "aws:kms",
                    "kms_master_key_id": key.arn,
                },
                # One data key per bucket, not per object: fewer KMS calls per checkpoint.
                "bucket_key_enabled": True,
            }
        ],
        opts=on_bucket,
    )
    block = aws.s3.BucketPublicAccessBlock(
        "stack-state-public-access-block",
        bucket=bucket.id,
        block_public_acls=True,
        block_public_policy=True,
        ignore_public_acls=True,
        restrict_public_buckets=True,
        opts=on_bucket,
    )
    aws.s3.BucketPolicy(
        "stack-state-tls-only",
        bucket=bucket.id,
        policy=bucket.arn.apply(lambda arn: json.dumps(tls_only_policy(arn))),
        # S3 refuses a policy write while the public access block is being changed.
        opts=pulumi.ResourceOptions.merge(on_bucket, pulumi.ResourceOptions(depends_on=[block])),
    )
    backend = bucket.bucket.apply(lambda b: f"s3://{b}?region={cfg.region}")
    secrets = f"awskms://{cfg.state_key_alias}?region={cfg.region}"
    return StackStateStore(bucket, key, alias, backend, secrets)
