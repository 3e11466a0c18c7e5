"""`webhook`: the validating Job webhook, and the certificate it serves."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Self

from pydantic import Field, model_validator

from provisioner.api.fields import PositiveDuration
from provisioner.api.settings.section import Section

__all__ = ["SelfManagedCerts", "WebhookSettings"]


# -- webhook certificates the controller makes and rotates itself (issue #30, certs) -------
class SelfManagedCerts(Section):
    """The controller keeps the webhook's CA and serving certificate in one Secret, renews
    them at `renewFraction` of their life and sets the configuration's caBundle."""

    secret_name: str = Field(min_length=1, description="Secret holding the CA and the pair.")
    namespace: str = Field(min_length=1, description="The Secret's (the release's) namespace.")
    webhook_configuration: str = Field(
        min_length=1, description="ValidatingWebhookConfiguration whose caBundle is set."
    )
    hosts: tuple[str, ...] = Field(
        min_length=1, description="Names the serving certificate carries (the Service's)."
    )
    ca_validity: PositiveDuration = Field(default=timedelta(days=365))
    cert_validity: PositiveDuration = Field(default=timedelta(days=90))
    renew_fraction: float = Field(
        default=2 / 3, gt=0, lt=1, description="Renew when this share of a life has passed."
    )
    check_interval: PositiveDuration = Field(
        default=timedelta(seconds=10),
        description="How often the Secret and caBundle are checked: the bound on restoring "
        "a caBundle that a GitOps sync or apply reset.",
    )

    @model_validator(mode="after")
    def _renews_in_time(self) -> Self:
        if self.cert_validity >= self.ca_validity:
            raise ValueError(
                "webhook.selfManaged.certValidity must be shorter than caValidity: a serving "
                "certificate cannot outlive the CA that signs it"
            )
        if self.check_interval * 10 > self.cert_validity * (1 - self.renew_fraction):
            raise ValueError(
                "webhook.selfManaged.checkInterval is too long for certValidity and "
                "renewFraction: the certificate could expire between two checks; shorten "
                "checkInterval or lower renewFraction"
            )
        return self


class WebhookSettings(Section):
    enabled: bool = Field(
        default=True, description="Serve the validating Job webhook (on every replica)."
    )
    cert_dir: Path = Field(
        default=Path("/run/secrets/atomic-gang/webhook"),
        description="Directory holding tls.crt and tls.key (the chart mounts them here).",
    )
    self_managed: SelfManagedCerts | None = Field(
        default=None,
        description="Make and rotate the certificate instead of reading certDir (the chart's "
        "certMode selfSigned); certDir is then where this replica writes what it serves.",
    )
