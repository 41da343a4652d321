"""Estimated cost of a stack from the price table kept in ``infra/prices.json``.

Two kinds of figures: what the stack costs per hour while it exists (nodes, their disks, the NAT gateway and
its public address, the stream, the key, the dashboard and alarm), and what each GB of events costs on top as it
flows through (Kinesis ingest and retrieval on an on-demand stream, NAT data processing for the traffic that
leaves the private subnet). The load generator costs only while a run is on, so it is priced per run-hour.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from infra.config import StackSettings
from infra.errors import ConfigError
from infra.sizing import CORE_VOLUME_GB, PRIMARY_VOLUME_GB, ROOT_VOLUME_GB

PRICES_PATH = Path(__file__).with_name("prices.json")
HOURS_PER_MONTH = 730


@dataclass(frozen=True)
class CostEstimate:
    """An hourly estimate, split by what it pays for, and the per-GB charges of the data flowing through.

    S3 storage and requests, and flow-log volume, depend on the load and are left out; ``notes`` says so.
    """

    hourly_usd: float
    hourly_usd_at_max_workers: float
    lines: dict[str, float]
    prices_as_of: str
    notes: tuple[str, ...]
    per_gb_lines: dict[str, float] = field(default_factory=dict)
    loadgen_hourly_usd: float | None = None

    @property
    def usd_per_gb(self) -> float:
        """What one GB of events adds as it goes from the load generator through the stream into the lake."""
        return round(sum(self.per_gb_lines.values()), 4)


@cache
def load_prices(path: Path = PRICES_PATH) -> dict[str, Any]:
    """The price table (see its ``sources`` and ``prices_as_of``)."""
    return json.loads(path.read_text())


def _node_ebs_gb(*, core: bool) -> int:
    return ROOT_VOLUME_GB + (CORE_VOLUME_GB if core else PRIMARY_VOLUME_GB)


def estimate_hourly_cost(settings: StackSettings, *, prices: dict[str, Any] | None = None) -> CostEstimate:
    """Estimate what the stack costs per hour while it runs, and per GB of events.

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
    gb_hour = table["ebs_gp3_gb_monthly"] / HOURS_PER_MONTH
    core_node = table["ec2_hourly"][itype] + table["emr_hourly"][itype] + _node_ebs_gb(core=True) * gb_hour
    lines: dict[str, float] = {}
    per_gb: dict[str, float] = {}
    notes = [f"{table['region']} on-demand list prices as of {table['prices_as_of']}"]
    if settings.cluster.enabled:
        # One primary node (same type) plus the core nodes, each with its EBS volumes.
        lines["cluster_primary"] = table["ec2_hourly"][itype] + table["emr_hourly"][itype]
        lines["cluster_core"] = (
            table["ec2_hourly"][itype] + table["emr_hourly"][itype]
        ) * settings.sizing.workers
        lines["ebs_volumes"] = (
            _node_ebs_gb(core=False) + _node_ebs_gb(core=True) * settings.sizing.workers
        ) * gb_hour
    if settings.needs_network:
        # The private subnet's way out, and the public IPv4 address AWS bills for it.
        lines["nat_gateway"] = table["nat_gateway_hourly"]
        lines["public_ipv4"] = table["public_ipv4_hourly"]
    _stream_lines(settings, table, lines, per_gb)
    if settings.needs_network:
        # Kinesis traffic from the private subnet goes through the NAT (S3 uses the free gateway endpoint): the
        # ingest job's reads, and the load generator's writes when it runs in the subnet.
        crossings = ("ingest" in settings.pipelines) + (settings.loadgen is not None)
        if crossings:
            per_gb["nat_data_processing"] = table["nat_gateway_per_gb"] * crossings
    lines["kms_key"] = table["kms_key_monthly"] / HOURS_PER_MONTH
    lines["cloudwatch"] = (
        table["cloudwatch_dashboard_monthly"] + table["cloudwatch_alarm_monthly"]
    ) / HOURS_PER_MONTH
    if settings.needs_network and settings.security.flow_logs:
        notes.append(f"plus {table['vpc_flow_logs_s3_per_gb']} USD per GB of VPC flow-log records")
    notes.append("S3 storage and request charges depend on data volume and are not included")
    total = sum(lines.values())
    extra_workers = settings.cluster.max_workers - settings.sizing.workers if settings.cluster.enabled else 0
    return CostEstimate(
        hourly_usd=round(total, 4),
        hourly_usd_at_max_workers=round(total + core_node * extra_workers, 4),
        lines={k: round(v, 4) for k, v in lines.items()},
        prices_as_of=table["prices_as_of"],
        notes=tuple(notes),
        per_gb_lines={k: round(v, 4) for k, v in per_gb.items()},
        loadgen_hourly_usd=_loadgen_hourly(settings, table),
    )


def _stream_lines(
    settings: StackSettings, table: dict[str, Any], lines: dict[str, float], per_gb: dict[str, float]
) -> None:
    if settings.stream.mode == "provisioned":
        lines["stream_shards"] = table["kinesis_shard_hourly"] * (settings.stream.shards or 0)
        return
    lines["stream_on_demand"] = table["kinesis_on_demand_stream_hourly"]
    per_gb["kinesis_ingest"] = table["kinesis_on_demand_ingest_per_gb"]
    # Only the ingest job reads the stream; every other pipeline reads the bronze table.
    if "ingest" in settings.pipelines:
        per_gb["kinesis_retrieval"] = table["kinesis_on_demand_retrieval_per_gb"]


def _loadgen_hourly(settings: StackSettings, table: dict[str, Any]) -> float | None:
    if settings.loadgen is None:
        return None
    task = settings.loadgen.cpu / 1024 * table["fargate_vcpu_hourly"] + (
        settings.loadgen.memory_mb / 1024 * table["fargate_gb_hourly"]
    )
    return round(task * (1 + settings.loadgen.workers), 4)
