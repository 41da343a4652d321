"""ADLS Gen2: one StorageV2 account with a hierarchical namespace and one filesystem per role."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
from pulumi_azure_native import storage

# Days a deleted blob or filesystem can be restored: long enough to undo a bad vacuum or `pulumi destroy` of a
# filesystem. Blob versioning and point-in-time restore are not available with a hierarchical namespace.
SOFT_DELETE_DAYS = 7
# Logs are read while debugging, then only cost money.
LOG_EXPIRY_DAYS = 90


@dataclass(frozen=True)
class LakeStorageArgs:
    """Inputs of :class:`LakeStorage`.

    ``firewall`` denies every network but ``allowed_ip_ranges``, trusted Azure services (logging, metrics) and
    the resource instances in ``trusted_resource_ids`` (the Synapse workspace); the workspace's Spark pool
    reaches the account through managed private endpoints, which the firewall does not apply to.
    """

    resource_group: pulumi.Input[str]
    location: str
    account_name: str
    filesystems: Sequence[str]
    tenant_id: pulumi.Input[str]
    trusted_resource_ids: Sequence[pulumi.Input[str]] = ()
    allowed_ip_ranges: Sequence[str] = ()
    firewall: bool = True
    shared_key_access: bool = False
    tags: Mapping[str, str] = field(default_factory=dict)


def network_rules(args: LakeStorageArgs) -> storage.NetworkRuleSetArgsDict:
    """The account firewall: deny by default, or allow all when the firewall is switched off."""
    if not args.firewall:
        return {"default_action": storage.DefaultAction.ALLOW, "bypass": "AzureServices, Logging, Metrics"}
    ip_rules: list[storage.IPRuleArgsDict] = [
        {"i_p_address_or_range": ip, "action": storage.Action.ALLOW} for ip in args.allowed_ip_ranges
    ]
    instance_rules: list[storage.ResourceAccessRuleArgsDict] = [
        {"tenant_id": args.tenant_id, "resource_id": rid} for rid in args.trusted_resource_ids
    ]
    return {
        "default_action": storage.DefaultAction.DENY,
        "bypass": "AzureServices, Logging, Metrics",
        "ip_rules": ip_rules,
        "resource_access_rules": instance_rules,
    }


# A second layer of AES-256 under the service's own; it can only be chosen when the account is created.
ENCRYPTION: storage.EncryptionArgsDict = {
    "key_source": "Microsoft.Storage",
    "require_infrastructure_encryption": True,
    "services": {
        "blob": {"enabled": True, "key_type": "Account"},
        "file": {"enabled": True, "key_type": "Account"},
    },
}


class LakeStorage(pulumi.ComponentResource):
    """A private, TLS 1.2, Entra-ID-only ADLS Gen2 account with soft delete and one filesystem per role.

    Outputs: ``account_name``, ``account_id``, ``filesystem_ids`` (role -> container resource id).
    """

    def __init__(self, name: str, args: LakeStorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:azure:LakeStorage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        account = storage.StorageAccount(
            f"{name}-account",
            account_name=args.account_name,
            resource_group_name=args.resource_group,
            location=args.location,
            kind="StorageV2",
            sku={"name": "Standard_LRS"},
            access_tier=storage.AccessTier.HOT,
            is_hns_enabled=True,
            minimum_tls_version="TLS1_2",
            enable_https_traffic_only=True,
            allow_blob_public_access=False,
            # Entra ID (RBAC) is the only way in unless a stack opts back into keys and SAS.
            allow_shared_key_access=args.shared_key_access,
            default_to_o_auth_authentication=True,
            allow_cross_tenant_replication=False,
            is_local_user_enabled=False,
            is_sftp_enabled=False,
            network_rule_set=network_rules(args),
            encryption=ENCRYPTION,
            tags=dict(args.tags),
            opts=child,
        )
        blob_service = storage.BlobServiceProperties(
            f"{name}-blob-service",
            account_name=account.name,
            resource_group_name=args.resource_group,
            blob_services_name="default",
            delete_retention_policy={"enabled": True, "days": SOFT_DELETE_DAYS},
            container_delete_retention_policy={"enabled": True, "days": SOFT_DELETE_DAYS},
            opts=child,
        )
        filesystem_ids: dict[str, pulumi.Output[str]] = {}
        for role in args.filesystems:
            container = storage.BlobContainer(
                f"{name}-{role}",
                account_name=account.name,
                resource_group_name=args.resource_group,
                container_name=role,
                public_access=storage.PublicAccess.NONE,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[blob_service]),
            )
            filesystem_ids[role] = container.id
        if "logs" in args.filesystems:
            storage.ManagementPolicy(
                f"{name}-lifecycle",
                account_name=account.name,
                resource_group_name=args.resource_group,
                management_policy_name="default",
                policy={
                    "rules": [
                        {
                            "name": "expire-logs",
                            "enabled": True,
                            "type": "Lifecycle",
                            "definition": {
                                "filters": {"blob_types": ["blockBlob"], "prefix_match": ["logs/"]},
                                "actions": {
                                    "base_blob": {
                                        "delete": {"days_after_modification_greater_than": LOG_EXPIRY_DAYS}
                                    }
                                },
                            },
                        }
                    ]
                },
                opts=child,
            )
        self.account_name: pulumi.Output[str] = account.name
        self.account_id: pulumi.Output[str] = account.id
        self.filesystem_ids = filesystem_ids
        self.register_outputs(
            {
                "account_name": self.account_name,
                "account_id": self.account_id,
                "filesystem_ids": filesystem_ids,
            }
        )
