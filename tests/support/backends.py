"""A state backend for unit tests whose settings must name one but never reach it.

The settings refuse an empty `pulumi.backendUrl` (a file backend is only an explicit
choice), so shape, webhook and decision tests name the production kind of backend here;
nothing in them starts a Pulumi CLI or opens the bucket.
"""

from __future__ import annotations

from typing import Final

UNREACHED_BACKEND: Final = {"backendUrl": "s3://atomic-gang-state?region=us-east-1"}
