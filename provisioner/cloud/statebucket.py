"""The Pulumi state bucket's objects, for the two things the controller does there itself.

Called by the stack driver: to list, read and delete the lock objects of a stack that was
never created, which `pulumi cancel` cannot remove (``pulumi_driver.orphan_locks``), and to
write, read and delete the intent of a first prepare in flight (``pulumi_driver.intents``).
The Pulumi CLI does every other read and write of the bucket. Errors leave as `CloudError`
(``errors``), so the driver keeps their kind; a key deleted between listing and reading
reads as None.

The calls fall under the controller's state grants (``iam_policy``): s3:ListBucket on the
bucket, s3:GetObject, s3:PutObject and s3:DeleteObject under ``<prefix>/.pulumi/``.
"""

from __future__ import annotations

from provisioner.cloud.ec2api import S3Api
from provisioner.cloud.errors import error_code, to_cloud_error

__all__ = ["StateBucket"]


class StateBucket:
    def __init__(self, client: S3Api, bucket: str) -> None:
        self._client = client
        self.bucket = bucket

    def keys(self, prefix: str) -> list[str]:
        """Every object key under ``prefix``, in the bucket's (lexical) order."""
        keys: list[str] = []
        request = {"Bucket": self.bucket, "Prefix": prefix}
        try:
            while True:
                page = self._client.list_objects_v2(**request)
                keys.extend(str(obj["Key"]) for obj in page.get("Contents") or ())
                token = page.get("NextContinuationToken")
                if not page.get("IsTruncated") or not token:
                    return keys
                request["ContinuationToken"] = token
        except Exception as exc:
            raise to_cloud_error(exc, f"Listing s3://{self.bucket}/{prefix}") from exc

    def read(self, key: str) -> bytes | None:
        """The object's content, or None when it is gone."""
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=key)["Body"]
            return bytes(body.read())
        except Exception as exc:
            if error_code(exc) in ("NoSuchKey", "404"):
                return None
            raise to_cloud_error(exc, f"Reading s3://{self.bucket}/{key}") from exc

    def write(self, key: str, body: bytes) -> None:
        """Store ``body`` as the object (a whole new version: S3 has no partial writes)."""
        try:
            self._client.put_object(Bucket=self.bucket, Key=key, Body=body)
        except Exception as exc:
            raise to_cloud_error(exc, f"Writing s3://{self.bucket}/{key}") from exc

    def delete(self, key: str) -> None:
        """Delete the object; deleting one that is gone succeeds, as S3 answers it."""
        try:
            self._client.delete_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            raise to_cloud_error(exc, f"Deleting s3://{self.bucket}/{key}") from exc
