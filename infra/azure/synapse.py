"""The Synapse workspace (managed identity, managed virtual network) and its Spark 3.5 pool, sized from
parallelism by the same rule as the EMR cluster."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi_azure_native import synapse

from infra.azure.libraries import PoolLibraries, fingerprint
from infra.azure.settings import PoolSizing


@dataclass(frozen=True)
class SparkWorkspaceArgs:
    """Inputs of :class:`SparkWorkspace`."""

    resource_group: pulumi.Input[str]
    location: str
    workspace_name: str
    pool_name: str
    storage_account_name: str
    storage_account_id: pulumi.Input[str]
    default_filesystem: str
    sizing: PoolSizing
    spark_version: str
    idle_timeout_minutes: int
    library_requirements: str
    allowed_ip_ranges: Sequence[str] = ()
    tags: Mapping[str, str] = field(default_factory=dict)


def firewall_range(ip_range: str) -> tuple[str, str]:
    """First and last address of an allowed range, as the workspace firewall wants them."""
    network = ipaddress.IPv4Network(ip_range)
    return str(network.network_address), str(network.broadcast_address)


def pool_fingerprint(args: SparkWorkspaceArgs) -> str:
    """A digest of everything that makes Pulumi re-send the pool (which may drop its libraries): its sizing
    inputs, location and tags (the stack's tags included: pass them in ``args.tags``)."""
    return fingerprint({**pool_inputs(args), "location": args.location, "tags": dict(args.tags)})


def pool_inputs(args: SparkWorkspaceArgs) -> dict[str, Any]:
    """The Spark pool's sizing inputs."""
    s = args.sizing
    return {
        "spark_version": args.spark_version,
        "node_size": s.node_size,
        "node_size_family": "MemoryOptimized",
        "node_count": s.nodes,
        # Autoscale keeps the sized nodes and may add workers up to maxWorkers (plus the driver's node).
        "auto_scale": {
            "enabled": s.max_nodes > s.nodes,
            "min_node_count": s.nodes,
            "max_node_count": s.max_nodes,
        },
        "auto_pause": {"enabled": True, "delay_in_minutes": args.idle_timeout_minutes},
        "dynamic_executor_allocation": {
            "enabled": True,
            "min_executors": s.workers,
            "max_executors": s.max_workers,
        },
        # Only the stack's pinned requirements: notebooks cannot install other versions into a session.
        "session_level_packages_enabled": False,
        "is_autotune_enabled": False,
    }


class SparkWorkspace(pulumi.ComponentResource):
    """Workspace with a system-assigned identity, Entra-ID-only auth, a managed virtual network and an IP
    firewall; a Spark 3.5 pool with autoscale and auto-pause; the pool's libraries set after it exists.

    Outputs: ``workspace_name``, ``workspace_id``, ``principal_id``, ``dev_endpoint``, ``pool_id``.
    """

    def __init__(
        self, name: str, args: SparkWorkspaceArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("lakestack:azure:SparkWorkspace", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        default_storage: synapse.DataLakeStorageAccountDetailsArgsDict = {
            "account_url": f"https://{args.storage_account_name}.dfs.core.windows.net",
            "filesystem": args.default_filesystem,
            "resource_id": args.storage_account_id,
            # Synapse makes the managed private endpoint to its default storage (dfs) itself.
            "create_managed_private_endpoint": True,
        }
        workspace = synapse.Workspace(
            f"{name}-workspace",
            workspace_name=args.workspace_name,
            resource_group_name=args.resource_group,
            location=args.location,
            identity={"type": synapse.ResourceIdentityType.SYSTEM_ASSIGNED},
            default_data_lake_storage=default_storage,
            # Spark runs in a network Synapse manages; it reaches the stack's resources by private endpoints.
            managed_virtual_network="default",
            # Exfiltration protection would also cut the pool off PyPI, where it installs its libraries.
            managed_virtual_network_settings={"prevent_data_exfiltration": False},
            azure_ad_only_authentication=True,
            public_network_access="Enabled",
            tags=dict(args.tags),
            opts=child,
        )
        rules = []
        for index, ip_range in enumerate(args.allowed_ip_ranges):
            start, end = firewall_range(ip_range)
            rules.append(
                synapse.IpFirewallRule(
                    f"{name}-allow-{index}",
                    rule_name=f"lakestack-{index}",
                    workspace_name=workspace.name,
                    resource_group_name=args.resource_group,
                    start_ip_address=start,
                    end_ip_address=end,
                    opts=child,
                )
            )
        sizing_inputs = pool_inputs(args)
        pool = synapse.BigDataPool(
            f"{name}-pool",
            big_data_pool_name=args.pool_name,
            workspace_name=workspace.name,
            resource_group_name=args.resource_group,
            location=args.location,
            tags=dict(args.tags),
            opts=child,
            **sizing_inputs,
        )
        self._name, self._args, self._pool = name, args, pool
        self.libraries: PoolLibraries | None = None
        self.firewall_rules = rules
        self.workspace_name: pulumi.Output[str] = workspace.name
        self.workspace_id: pulumi.Output[str] = workspace.id
        self.principal_id: pulumi.Output[str] = workspace.identity.apply(
            lambda identity: identity.principal_id if identity else ""
        )
        self.dev_endpoint: pulumi.Output[str] = workspace.connectivity_endpoints.apply(lambda e: e["dev"])
        self.pool_id: pulumi.Output[str] = pool.id
        self.register_outputs(
            {
                "workspace_name": self.workspace_name,
                "workspace_id": self.workspace_id,
                "principal_id": self.principal_id,
                "dev_endpoint": self.dev_endpoint,
                "pool_id": self.pool_id,
            }
        )

    def install_libraries(self, *, after: Sequence[pulumi.Resource]) -> PoolLibraries:
        """Declare the pool's library install, once what it needs is declared: ``after`` holds the workspace
        identity's grant on its filesystem and the approved private endpoints to storage (pip's packages are
        staged in the workspace filesystem, over those endpoints)."""
        self.libraries = PoolLibraries(
            f"{self._name}-libraries",
            pool_id=self._pool.id,
            requirements=self._args.library_requirements,
            pool_fingerprint=pool_fingerprint(self._args),
            # The read-modify-write of the pool must come after every change Pulumi makes to it.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self._pool, *after]),
        )
        return self.libraries
