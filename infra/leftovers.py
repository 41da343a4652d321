"""What outlives `pulumi destroy`, and for how long.

Destroy removes every resource in the stack's state, but some services keep a deleted resource (or one that
cannot be deleted yet) for a while: it no longer works, yet its name stays taken or it is still listed.
`lakestack down` prints this list after the destroy, so nobody mistakes them for a failed teardown.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.config import StackSettings
from infra.settings import load_any_settings

# The stack key's deletion window (infra/aws/kms.py) and the vault's soft-delete retention
# (infra/azure/keyvault.py): both read these, so what `down` says is what was deployed.
KMS_DELETION_WINDOW_DAYS = 30
KEY_VAULT_SOFT_DELETE_DAYS = 7
# Amazon SNS deletes a subscription nobody confirmed after 48 hours; until then it cannot be deleted.
SNS_UNCONFIRMED_HOURS = 48
# A deleted Log Analytics workspace is soft-deleted (recoverable, its name reserved) for 14 days.
LOG_ANALYTICS_SOFT_DELETE_DAYS = 14


@dataclass(frozen=True)
class Leftover:
    """Something a destroy leaves behind: what it is, how long it stays, and what that means."""

    what: str
    stays: str
    note: str


def after_destroy(settings: object) -> list[Leftover]:
    """What stays after a destroy of the stack these settings describe (none for an emulator stack)."""
    if isinstance(settings, StackSettings):
        if settings.is_local:
            return []
        found = [
            Leftover(
                f"KMS key alias/{settings.name_prefix} (the stack key)",
                f"{KMS_DELETION_WINDOW_DAYS} days, pending deletion",
                "unusable meanwhile; `aws kms cancel-key-deletion` brings it back",
            )
        ]
        if settings.alert_email:
            found.append(
                Leftover(
                    f"SNS e-mail subscription of {settings.alert_email}, if never confirmed",
                    f"up to {SNS_UNCONFIRMED_HOURS} hours",
                    "an unconfirmed subscription cannot be deleted; Amazon SNS removes it itself",
                )
            )
        return found
    from infra.azure.settings import AzureStackSettings

    if not isinstance(settings, AzureStackSettings):
        raise TypeError(f"expected stack settings, got {type(settings).__name__}")
    found = [
        Leftover(
            f"Key Vault of resource group {settings.resource_group} (soft-deleted, purge-protected)",
            f"{KEY_VAULT_SOFT_DELETE_DAYS} days",
            "its name stays taken and it cannot be purged sooner; `az keyvault recover` brings it back",
        )
    ]
    if settings.security.diagnostics:
        found.append(
            Leftover(
                f"Log Analytics workspace {settings.log_workspace_name} (soft-deleted)",
                f"{LOG_ANALYTICS_SOFT_DELETE_DAYS} days",
                "its name is reserved; recover it by creating a workspace of the same name in the same group",
            )
        )
    return found


def what_stays_after_destroy(stack: str, *, project_dir: Path | None = None) -> str:
    """The lines `lakestack down` prints after the destroy of ``stack``."""
    leftovers = after_destroy(load_any_settings(stack, project_dir=project_dir))
    if not leftovers:
        return f"Nothing of stack {stack} stays after destroy."
    lines = [f"What stays after destroying stack {stack}, and for how long:"]
    lines += [f"  - {item.what}: {item.stays}; {item.note}" for item in leftovers]
    return "\n".join(lines)
