"""What ``lakestack plan`` shows for an Azure stack: its shape, hourly cost and security posture.

The keys are the AWS plan's (``workers``, ``instance_type``, ``stream_mode``, ``shards``, ``hourly_cost_usd``,
...), filled with Azure's values: the instance type is the Synapse node size, the stream mode Event Hubs'
tier, the shards the hub's partitions.
"""

from __future__ import annotations

from typing import Any

from infra.azure.pool_packages import SYNAPSE_LOCK_FILE, pool_requirements
from infra.azure.pricing import estimate_hourly_cost
from infra.azure.settings import FILESYSTEMS, AzureStackSettings
from infra.capacity import event_hubs_capacity
from infra.config import EXPIRES_AT_TAG, PROJECT_DIR
from infra.posture import SecurityPosture
from infra.runtime import SYNAPSE_RUNTIME


def _allowed(settings: AzureStackSettings, *extra: str) -> str:
    """``allowed: ...`` for a firewall: the configured ranges, then what else gets in."""
    parts = [*settings.allowed_ip_ranges, *(e for e in extra if e)]
    return "allowed: " + (", ".join(parts) if parts else "nothing")


def security_posture(settings: AzureStackSettings) -> SecurityPosture:
    """One short line per control, grouped as contract C6 has it; ``deviations`` names each switched-off key."""
    sec = settings.security
    pool = settings.cluster.enabled
    by_endpoint = "the Spark pool by private endpoint" if pool else ""
    storage_net = (
        "storage: firewall denies by default; "
        + _allowed(settings, "the Synapse workspace and its managed private endpoints" if pool else "")
        if sec.storage_firewall
        else "storage: reachable from any network (firewall off)"
    )
    encryption = [
        "storage: AES-256 at rest with infrastructure (double) encryption; HTTPS only, TLS 1.2 minimum",
        "Event Hubs: encrypted at rest by the service; TLS 1.2 minimum (Kafka over SASL_SSL, port 9093)",
        "Key Vault: holds the Event Hubs connection strings; soft delete 7 days, purge protection on",
    ]
    network = (
        []
        if settings.allowed_ip_ranges
        else ["no address range allowed in (lakestack:network.allowedIpRanges)"]
    )
    network += [
        storage_net + "; no public blob access",
        "Event Hubs: denies by default; " + _allowed(settings, by_endpoint),
        "Key Vault: denies by default; " + _allowed(settings, by_endpoint),
    ]
    if pool:
        network.append(
            "Synapse: Spark in a managed virtual network, outbound open (libraries come from PyPI); workspace "
            "endpoints " + _allowed(settings)
        )
    logging = (
        [
            "diagnostic settings (all log categories) to Log Analytics "
            f"{settings.log_workspace_name}, kept {sec.log_retention_days} days: storage (blob), Event Hubs, "
            "Key Vault" + (", Synapse workspace, Spark pool" if pool else "")
        ]
        if sec.diagnostics
        else ["no diagnostic settings"]
    )
    identities = [
        "storage: Entra ID only (shared keys and SAS off)"
        if not sec.storage_shared_key
        else "storage: Entra ID, account keys and SAS",
        "Event Hubs: hub-scoped SAS rules, send (load) and listen (jobs); their connection strings only in "
        "Key Vault, never in outputs",
    ]
    if pool:
        identities += [
            "Synapse: Entra ID only, no SQL password",
            "workspace identity: write its workspace filesystem; read artifacts only",
        ]
    identities.append(
        "you (the deploying identity): read the send secret"
        + (
            "; write artifacts; and, as the identity the jobs run as (Synapse runs a submitted job as its "
            "submitter): write lake, checkpoints, logs; read the listen secret (the jobs read the hub with it, so no "
            "Event Hubs data role is granted)"
            if pool
            else ""
        )
    )
    return SecurityPosture(
        encryption=tuple(encryption),
        network=tuple(network),
        logging=tuple(logging),
        identities=tuple(identities),
        deviations=tuple(sec.deviations()),
    )


def plan_summary(settings: AzureStackSettings) -> dict[str, Any]:
    """The plan's JSON object for an Azure stack (the same keys as an AWS stack's)."""
    sizing = settings.sizing
    enabled = settings.cluster.enabled
    cost = estimate_hourly_cost(settings)
    notes = list(cost.notes)
    notes.append(
        f"the hub's {settings.stream.partitions} partitions are fixed once it exists (Event Hubs Standard)"
    )
    libraries = pool_requirements(PROJECT_DIR / SYNAPSE_LOCK_FILE).split() if enabled else []
    if libraries:
        notes.append(
            f"the pool installs {', '.join(libraries)} over its runtime's own ({SYNAPSE_LOCK_FILE}: the versions the "
            "Synapse-line tests ran)"
        )
    if enabled and not settings.allowed_ip_ranges:
        notes.append(
            "pulumi up refuses this stack until lakestack:network.allowedIpRanges lists your public address"
        )
    return {
        "stack": settings.stack,
        "cloud": settings.cloud,
        "runtime": SYNAPSE_RUNTIME.describe() if enabled else None,
        "region": settings.location,
        "workers": sizing.workers if enabled else 0,
        "max_workers": sizing.max_workers if enabled else 0,
        "executor_cores": sizing.executor_cores,
        "executor_memory_gb": sizing.executor_memory_gb,
        "instance_type": sizing.node_size if enabled else None,
        "stream_mode": "standard",
        "shards": settings.stream.partitions,
        "pipelines": list(settings.pipelines),
        # Filesystems of the one storage account play the buckets' roles.
        "buckets": {role: settings.abfss(role) for role in FILESYSTEMS},
        "expires_at": settings.tags[EXPIRES_AT_TAG],
        "loadgen": None,
        "pool_libraries": libraries,
        "hourly_cost_usd": cost.hourly_usd,
        "hourly_cost_usd_at_max_workers": cost.hourly_usd_at_max_workers,
        "prices_as_of": cost.prices_as_of,
        "cost_lines": cost.lines,
        "usd_per_gb": cost.usd_per_gb,
        "per_gb_lines": cost.per_gb_lines,
        "loadgen_hourly_cost_usd": None,
        "notes": notes,
        "capacity": event_hubs_capacity(
            throughput_units=settings.stream.throughput_units,
            max_throughput_units=settings.stream.max_throughput_units,
            partitions=settings.stream.partitions,
            cores=sizing.task_slots if enabled else 0,
            event_bytes=settings.stream.event_bytes,
        ).as_dict(),
        "security": security_posture(settings).as_dict(),
    }
