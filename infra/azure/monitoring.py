"""A Log Analytics workspace and the diagnostic settings that send the stack's resource logs to it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
from pulumi_azure_native import monitor, operationalinsights


@dataclass(frozen=True)
class DiagnosticTarget:
    """One resource whose logs (all categories) and metrics go to the workspace."""

    role: str
    resource_id: pulumi.Input[str]
    metrics: Sequence[str] = ()


@dataclass(frozen=True)
class MonitoringArgs:
    """Inputs of :class:`Monitoring`."""

    resource_group: pulumi.Input[str]
    location: str
    workspace_name: str
    retention_days: int
    targets: Sequence[DiagnosticTarget] = ()
    tags: Mapping[str, str] = field(default_factory=dict)


class Monitoring(pulumi.ComponentResource):
    """The Log Analytics workspace (retention set) and one diagnostic setting per target resource: every log
    category (``allLogs``) and the named metrics. Retention is the workspace's (per-setting retention is retired
    in Azure Monitor).

    Outputs: ``workspace_id``, ``customer_id``.
    """

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:azure:Monitoring", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        workspace = operationalinsights.Workspace(
            f"{name}-logs",
            workspace_name=args.workspace_name,
            resource_group_name=args.resource_group,
            location=args.location,
            sku={"name": "PerGB2018"},
            retention_in_days=args.retention_days,
            # Readers need rights on the resources whose logs they query, not only on the workspace.
            features={"enable_log_access_using_only_resource_permissions": True},
            tags=dict(args.tags),
            opts=child,
        )
        for target in args.targets:
            monitor.DiagnosticSetting(
                f"{name}-{target.role}",
                name="lakestack-logs",
                resource_uri=target.resource_id,
                workspace_id=workspace.id,
                # Resource-specific tables (StorageBlobLogs, ...) rather than the shared AzureDiagnostics table.
                log_analytics_destination_type="Dedicated",
                logs=[{"category_group": "allLogs", "enabled": True}],
                metrics=[{"category": m, "enabled": True} for m in target.metrics],
                opts=child,
            )
        self.workspace_id: pulumi.Output[str] = workspace.id
        self.customer_id: pulumi.Output[str] = workspace.customer_id
        self.register_outputs({"workspace_id": self.workspace_id, "customer_id": self.customer_id})
