"""Azure RBAC role assignments: each identity gets the built-in data roles it needs, on the narrowest scope."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import pulumi
from pulumi_azure_native import authorization

# Built-in role definition ids (the same in every tenant).
ROLES: dict[str, str] = {
    "Storage Blob Data Contributor": "ba92f5b4-2d11-453d-a403-e96b0029c9fe",
    "Storage Blob Data Reader": "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1",
    "Key Vault Secrets User": "4633458b-17de-408a-b874-0445c86b69e6",
}
PrincipalType = Literal["ServicePrincipal", "User", "Group"]


@dataclass(frozen=True)
class Grant:
    """One role for one principal on one scope. ``key`` names the assignment's resource."""

    key: str
    role: str
    principal_id: pulumi.Input[str]
    scope: pulumi.Input[str]
    principal_type: PrincipalType


def role_definition_id(subscription_id: pulumi.Input[str], role: str) -> pulumi.Output[str]:
    """The subscription-scoped id of a built-in role."""
    return pulumi.Output.concat(
        "/subscriptions/", subscription_id, "/providers/Microsoft.Authorization/roleDefinitions/", ROLES[role]
    )


@dataclass(frozen=True)
class AccessArgs:
    """Inputs of :class:`Access`."""

    subscription_id: pulumi.Input[str]
    grants: Sequence[Grant]


class Access(pulumi.ComponentResource):
    """The stack's role assignments. Outputs: ``assignment_ids`` (grant key -> id)."""

    def __init__(self, name: str, args: AccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:azure:Access", name, None, opts)
        ids: dict[str, pulumi.Output[str]] = {}
        self.assignments: dict[str, authorization.RoleAssignment] = {}
        for grant in args.grants:
            assignment = authorization.RoleAssignment(
                f"{name}-{grant.key}",
                principal_id=grant.principal_id,
                # Set explicitly (the provider assumes User): it also spares a new managed identity the
                # replication delay when Azure checks that the principal exists.
                principal_type=grant.principal_type,
                role_definition_id=role_definition_id(args.subscription_id, grant.role),
                scope=grant.scope,
                description=f"lakestack: {grant.role} ({grant.key})",
                opts=pulumi.ResourceOptions(parent=self),
            )
            ids[grant.key] = assignment.id
            self.assignments[grant.key] = assignment
        self.assignment_ids = ids
        self.register_outputs({"assignment_ids": ids})
