"""SigV4 signatures for S3 requests the controller forwards (the stack driver's S3 fence,
``pulumi_driver.s3_fence``): botocore's `S3SigV4Auth`, payload signed, with the controller's
own credentials from the default chain (Pod Identity, IRSA, env, instance role), read again
for each request so that rotated credentials are used."""

from __future__ import annotations

from collections.abc import Mapping

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from provisioner.cloud.ec2api import default_session

__all__ = ["NoCredentials", "S3RequestSigner"]


class NoCredentials(Exception):
    """The default chain found no credentials to sign with."""


class S3RequestSigner:
    def __init__(self, region: str, *, access_key: str = "", secret_key: str = "") -> None:
        """``access_key``/``secret_key``: fixed credentials (tests); default: the chain."""
        self.region = region
        self._fixed = Credentials(access_key, secret_key) if access_key else None
        self._session = None if self._fixed else default_session()

    def sign(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes
    ) -> dict[str, str]:
        """``headers`` plus the signature's (Authorization, X-Amz-Date,
        X-Amz-Content-SHA256, X-Amz-Security-Token)."""
        request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
        S3SigV4Auth(self._credentials(), "s3", self.region).add_auth(request)
        return dict(request.prepare().headers.items())

    def _credentials(self) -> Credentials:
        if self._fixed is not None:
            return self._fixed
        assert self._session is not None
        found = self._session.get_credentials()
        if found is None:
            raise NoCredentials("no AWS credentials to sign the state bucket's requests with")
        frozen = found.get_frozen_credentials()
        return Credentials(frozen.access_key, frozen.secret_key, frozen.token)
