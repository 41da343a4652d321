"""Errors raised while deploying the Azure stack's data-plane objects (jobs, libraries, private endpoints)."""

from __future__ import annotations

from infra.errors import InfraError


class DeploymentError(InfraError):
    """A data-plane step of `pulumi up` failed or did not finish in time; the message says which and what to do."""


class NotAuthorized(Exception):
    """Storage refused a call with 403 (the real store raises it; the upload retries it for a while)."""
