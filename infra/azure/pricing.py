"""Estimated hourly cost of an Azure stack from the price table kept in ``infra/azure/prices.json``."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from infra.azure.settings import AzureStackSettings
from infra.pricing import CostEstimate

PRICES_PATH = Path(__file__).with_name("prices.json")
# Managed private endpoints from the workspace's managed network: blob and dfs on the storage account, the
# Key Vault, the Event Hubs namespace (see infra.azure.private_link).
PRIVATE_ENDPOINTS = 4


@cache
def load_prices(path: Path = PRICES_PATH) -> dict[str, Any]:
    """The Azure price table (see its ``sources`` and ``prices_as_of``)."""
    return json.loads(path.read_text())


def estimate_hourly_cost(
    settings: AzureStackSettings, *, prices: dict[str, Any] | None = None
) -> CostEstimate:
    """Estimate what the Azure stack costs per hour while its Spark job runs.

    Args:
        settings: validated Azure stack settings.
        prices: a price table; the repository's ``infra/azure/prices.json`` when ``None``.
    """
    table = prices if prices is not None else load_prices()
    sizing = settings.sizing
    vcore = table["synapse_spark_vcore_hourly"]
    lines: dict[str, float] = {}
    notes = [f"{table['region']} pay-as-you-go list prices as of {table['prices_as_of']}"]
    extra = 0.0
    if settings.cluster.enabled:
        # Synapse bills every vCore of the nodes a Spark application holds: the driver node and the workers.
        lines["spark_pool"] = sizing.nodes * sizing.vcores_per_node * vcore
        lines["private_endpoints"] = PRIVATE_ENDPOINTS * table["private_endpoint_hourly"]
        extra = (sizing.max_nodes - sizing.nodes) * sizing.vcores_per_node * vcore
        notes.append(
            f"the Spark pool bills only while its jobs run (one per pipeline); with none it pauses after "
            f"{settings.cluster.idle_timeout_minutes} minutes idle"
        )
    lines["event_hub_units"] = settings.stream.throughput_units * table["event_hubs_standard_tu_hourly"]
    notes.append(
        f"Event Hubs ingress: {table['event_hubs_ingress_per_million_events']} USD per million events, priced "
        f"per GB at {settings.stream.event_bytes} bytes an event (lakestack:stream.eventBytes); auto-inflate may "
        f"raise throughput units to {settings.stream.max_throughput_units}"
    )
    notes.append(
        f"storage ({table['adls_hot_lrs_gb_monthly']} USD per GB-month), Log Analytics ingestion "
        f"({table['log_analytics_ingest_per_gb']} USD per GB) and Key Vault operations depend on data volume "
        "and are not included"
    )
    total = sum(lines.values())
    # Event Hubs bills ingress per event (up to 64 KB each): per GB, that depends on the event size.
    events_per_gb = 1e9 / min(settings.stream.event_bytes, 64 * 1024)
    per_gb = {"event_hubs_ingress": events_per_gb / 1e6 * table["event_hubs_ingress_per_million_events"]}
    return CostEstimate(
        hourly_usd=round(total, 4),
        hourly_usd_at_max_workers=round(total + extra, 4),
        lines={k: round(v, 4) for k, v in lines.items()},
        prices_as_of=table["prices_as_of"],
        notes=tuple(notes),
        per_gb_lines={k: round(v, 4) for k, v in per_gb.items()},
    )
