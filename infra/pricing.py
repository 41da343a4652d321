"""Estimated cost of a stack from the price table kept in ``infra/prices.json``.

Two kinds of figures: what the stack costs per hour while it exists (nodes, their disks, the NAT gateway and
its public address, interface endpoints, the stream, the key, the dashboard and alarm), and what each GB of
events costs on top as it flows through (Kinesis ingest and retrieval on an on-demand stream, and the way Kinesis
traffic leaves the private subnet: the NAT's data processing, or an interface endpoint's). The load generator
costs only while a run is on, so it is priced per run-hour.

Which interface endpoints the stack declares is a cost decision too (:func:`interface_endpoint_plan`): the
program and ``lakestack plan`` take it from here, so the plan prices exactly what ``pulumi up`` builds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from infra.capacity import DEFAULT_EVENT_BYTES, kinesis_capacity
from infra.config import StackSettings
from infra.errors import ConfigError
from infra.sizing import CORE_VOLUME_GB, PRIMARY_VOLUME_GB, ROOT_VOLUME_GB

PRICES_PATH = Path(__file__).with_name("prices.json")
HOURS_PER_MONTH = 730
BYTES_PER_GB = 1_000_000_000
# The interface endpoints the AWS stack can add, by AWS's endpoint-service names: Kinesis Data Streams, where the
# pipeline's bytes go, then CloudWatch Logs (the load generator's task logs) and STS.
KINESIS_ENDPOINT = "kinesis-streams"
INTERFACE_ENDPOINTS = (KINESIS_ENDPOINT, "logs", "sts")
# Endpoints sit in the private subnet, which is in one zone: AWS bills an endpoint per zone it is in.
ENDPOINT_ZONES = 1


@dataclass(frozen=True)
class EndpointPlan:
    """Which interface endpoints the stack declares, what they cost, and the load the choice was made for.

    ``kinesis_crossings`` counts the Kinesis flows that leave the private subnet (the load generator's puts, the
    ingest job's reads); each GB of events is charged once per crossing, by the NAT or by the endpoint.
    ``break_even_events_s`` is the rate above which the Kinesis endpoint costs less than the NAT (``None`` when
    no Kinesis traffic leaves the subnet).
    """

    mode: str
    services: tuple[str, ...]
    hourly_usd: float
    kinesis_crossings: int
    planned_events_s: int
    event_bytes: int
    break_even_events_s: int | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """The plan's ``endpoints`` object."""
        return {
            "mode": self.mode,
            "services": list(self.services),
            "hourly_usd": self.hourly_usd,
            "kinesis_crossings": self.kinesis_crossings,
            "planned_events_per_s": self.planned_events_s,
            "event_bytes": self.event_bytes,
            "break_even_events_per_s": self.break_even_events_s,
            "reason": self.reason,
        }


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
    endpoints = interface_endpoint_plan(settings, prices=table)
    if endpoints.services:
        lines["vpc_endpoints"] = endpoints.hourly_usd
    # Kinesis traffic from the private subnet (the ingest job's reads, the load generator's writes when it runs in
    # the subnet) goes through the Kinesis endpoint when there is one, else through the NAT; S3's goes through the
    # free gateway endpoint.
    if endpoints.kinesis_crossings and KINESIS_ENDPOINT in endpoints.services:
        per_gb["kinesis_endpoint"] = table["interface_endpoint_per_gb"] * endpoints.kinesis_crossings
    elif endpoints.kinesis_crossings:
        per_gb["nat_data_processing"] = table["nat_gateway_per_gb"] * endpoints.kinesis_crossings
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


def kinesis_crossings(settings: StackSettings) -> int:
    """How many Kinesis flows leave the stack's private subnet: the ingest job's reads, the load generator's puts."""
    if not settings.needs_network:
        return 0
    return ("ingest" in settings.pipelines) + (settings.loadgen is not None)


def interface_endpoint_plan(settings: StackSettings, *, prices: dict[str, Any] | None = None) -> EndpointPlan:
    """The interface endpoints the stack declares, from ``lakestack:network.interfaceEndpoints`` and the prices.

    ``auto`` adds the Kinesis endpoint when, at the rate the stack is sized to sustain (its capacity, events of
    :data:`~infra.capacity.DEFAULT_EVENT_BYTES`), the NAT's per-GB charge it avoids on every crossing exceeds its
    hourly price; CloudWatch Logs and STS carry a few KB/s (task logs, credentials), never enough to pay for an
    endpoint, so ``auto`` leaves them on the NAT. ``all`` adds all three (traffic kept off the NAT whatever it
    costs), ``none`` none.
    """
    table = prices if prices is not None else load_prices()
    mode = settings.network.interface_endpoints
    crossings = kinesis_crossings(settings)
    cores = settings.sizing.task_slots if settings.cluster.enabled else 0
    planned = kinesis_capacity(mode=settings.stream.mode, shards=settings.stream.shards, cores=cores)
    hourly = table["interface_endpoint_hourly"] * ENDPOINT_ZONES
    saving_per_gb = (table["nat_gateway_per_gb"] - table["interface_endpoint_per_gb"]) * crossings
    break_even = (
        round(hourly / saving_per_gb * BYTES_PER_GB / 3600 / DEFAULT_EVENT_BYTES)
        if saving_per_gb > 0
        else None
    )
    if not settings.needs_network or settings.is_local:
        services: tuple[str, ...] = ()
        reason = "no VPC in this stack"
    elif mode == "none":
        services, reason = (
            (),
            "lakestack:network.interfaceEndpoints: none (everything leaves through the NAT)",
        )
    elif mode == "all":
        services, reason = INTERFACE_ENDPOINTS, "lakestack:network.interfaceEndpoints: all"
    elif break_even is not None and planned.sustainable_events_s > break_even:
        services = (KINESIS_ENDPOINT,)
        reason = (
            f"auto: sized for {planned.sustainable_events_s:,} events/s; the Kinesis endpoint costs less than the "
            f"NAT above {break_even:,} events/s ({DEFAULT_EVENT_BYTES}-byte events leaving the subnet "
            f"{'once' if crossings == 1 else f'{crossings} times'} each); CloudWatch Logs and STS carry too little "
            "to pay for theirs"
        )
    else:
        services = ()
        reason = (
            "auto: no Kinesis traffic leaves the subnet"
            if break_even is None
            else f"auto: sized for {planned.sustainable_events_s:,} events/s, below the {break_even:,} events/s "
            "above which the Kinesis endpoint costs less than the NAT"
        )
    return EndpointPlan(
        mode=mode,
        services=services,
        hourly_usd=round(hourly * len(services), 4),
        kinesis_crossings=crossings,
        planned_events_s=planned.sustainable_events_s,
        event_bytes=DEFAULT_EVENT_BYTES,
        break_even_events_s=break_even,
        reason=reason,
    )
