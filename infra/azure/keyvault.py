"""Key Vault for the stack's secrets: the Event Hubs connection strings, never in code, config or outputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
from pulumi_azure_native import keyvault

from infra.leftovers import KEY_VAULT_SOFT_DELETE_DAYS

# Shortest soft-delete window Key Vault allows: a destroyed stack's secrets stay recoverable a week.
SOFT_DELETE_DAYS = KEY_VAULT_SOFT_DELETE_DAYS


@dataclass(frozen=True)
class SecretStoreArgs:
    """Inputs of :class:`SecretStore`. ``secrets`` maps secret name to its value (Pulumi secrets)."""

    resource_group: pulumi.Input[str]
    location: str
    tenant_id: pulumi.Input[str]
    secrets: Mapping[str, pulumi.Input[str]]
    allowed_ip_ranges: Sequence[str] = ()
    tags: Mapping[str, str] = field(default_factory=dict)


class SecretStore(pulumi.ComponentResource):
    """An RBAC-only, purge-protected vault that denies every network but the allowed ranges, and its secrets.

    The vault name is generated (a random suffix): with purge protection a deleted vault's name stays taken
    for the soft-delete window, so a stack torn down and stood up again needs a new one.

    Outputs: ``vault_name``, ``vault_id``, ``secret_ids`` (secret name -> resource id).
    """

    def __init__(self, name: str, args: SecretStoreArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:azure:SecretStore", name, None, opts)
        properties: keyvault.VaultPropertiesArgsDict = {
            "tenant_id": args.tenant_id,
            "sku": {"family": "A", "name": keyvault.SkuName.STANDARD},
            # Access by Azure RBAC role assignments only (scoped per secret below), no access policies.
            "enable_rbac_authorization": True,
            "enable_soft_delete": True,
            "soft_delete_retention_in_days": SOFT_DELETE_DAYS,
            "enable_purge_protection": True,
            "enabled_for_deployment": False,
            "enabled_for_disk_encryption": False,
            "enabled_for_template_deployment": False,
            "public_network_access": "Enabled",
            "network_acls": {
                "default_action": "Deny",
                "bypass": "AzureServices",
                "ip_rules": [{"value": ip} for ip in args.allowed_ip_ranges],
            },
        }
        vault = keyvault.Vault(
            f"{name}-vault",
            resource_group_name=args.resource_group,
            location=args.location,
            properties=properties,
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        secret_ids: dict[str, pulumi.Output[str]] = {}
        for secret_name, value in args.secrets.items():
            secret = keyvault.Secret(
                f"{name}-{secret_name}",
                secret_name=secret_name,
                vault_name=vault.name,
                resource_group_name=args.resource_group,
                properties={"value": pulumi.Output.secret(value), "content_type": "text/plain"},
                opts=pulumi.ResourceOptions(parent=self, additional_secret_outputs=["properties"]),
            )
            secret_ids[secret_name] = secret.id
        self.vault_name: pulumi.Output[str] = vault.name
        self.vault_id: pulumi.Output[str] = vault.id
        self.secret_ids = secret_ids
        self.register_outputs(
            {"vault_name": self.vault_name, "vault_id": self.vault_id, "secret_ids": secret_ids}
        )
