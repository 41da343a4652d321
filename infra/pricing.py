"""Estimated hourly cost of a stack from the price table kept in ``infra/prices.json``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from infra.config import StackSettings
from infra.errors import ConfigError

PRICES_PATH = Path(__file__).with_name("prices.json")
HOURS_PER_MONTH = 730


@dataclass(frozen=True)
class CostEstimate:
    """An hourly estimate, split by what it pays for. Data-volume charges (Kinesis on-demand ingest, S3
    storage and requests) depend on the load and are left out; ``notes`` says so."""

    hourly_usd: float
    hourly_usd_at_max_workers: float
    lines: dict[str, float]
    prices_as_of: str
    notes: tuple[str, ...]


@cache
def load_prices(path: Path = PRICES_PATH) -> dict[str, Any]:
    """The price table (see its ``sources`` and ``prices_as_of``)."""
    return json.loads(path.read_text())


def estimate_hourly_cost(settings: StackSettings, *, prices: dict[str, Any] | None = None) -> CostEstimate:
    """Estimate what the stack costs per hour while it runs.

    Args:
        settings: validated stack settings.
        prices: a price table; the repository's ``prices.json`` when ``None``.

    Raises:
        ConfigError: the price table has no price for the instance type.
    """
    table = prices if prices is not None else load_prices()
    itype = settings.cluster.instance_type
    if itype not in table["ec2_hourly"] or itype not in table["emr_hourly"]:
        raise ConfigError(
            "lakestack:cluster.instanceType",
            itype,
            f"an instance type priced in {PRICES_PATH.name}: add its prices",
        )
    if settings.is_local:
        # The local stack lives in the embedded emulator: nothing is billed.
        return CostEstimate(0.0, 0.0, {}, table["prices_as_of"], ("emulator stack: no cloud charges",))
    node = table["ec2_hourly"][itype] + table["emr_hourly"][itype]
    lines: dict[str, float] = {}
    notes = [f"{table['region']} on-demand list prices as of {table['prices_as_of']}"]
    if settings.cluster.enabled:
        # One primary node (same type) plus the core nodes; the NAT gateway gives the private subnet its way out.
        lines["cluster_primary"] = node
        lines["cluster_core"] = node * settings.sizing.workers
        lines["nat_gateway"] = table["nat_gateway_hourly"]
    if settings.stream.mode == "provisioned":
        lines["stream_shards"] = table["kinesis_shard_hourly"] * (settings.stream.shards or 0)
    else:
        lines["stream_on_demand"] = table["kinesis_on_demand_stream_hourly"]
        notes.append(
            f"plus {table['kinesis_on_demand_ingest_per_gb']} USD per GB written to the on-demand stream"
        )
    lines["kms_key"] = table["kms_key_monthly"] / HOURS_PER_MONTH
    notes.append("S3 storage and request charges depend on data volume and are not included")
    total = sum(lines.values())
    extra_workers = settings.cluster.max_workers - settings.sizing.workers if settings.cluster.enabled else 0
    return CostEstimate(
        hourly_usd=round(total, 4),
        hourly_usd_at_max_workers=round(total + node * extra_workers, 4),
        lines={k: round(v, 4) for k, v in lines.items()},
        prices_as_of=table["prices_as_of"],
        notes=tuple(notes),
    )
