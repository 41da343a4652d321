"""The throughput a planned stack should sustain: the stream's documented limits beside the cluster's rows/s.

The stream side is arithmetic on the providers' published limits (below, with where each comes from). The
cluster side multiplies the stack's task slots by one per-core figure measured by ``lakestack demo --sweep``
(:data:`INGEST_ROWS_PER_CORE_S`). The expected sustainable rate is the lower of the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# Kinesis Data Streams, "Choose the data stream capacity mode" and "Quotas and limits" (AWS docs, checked
# 2026-11): a shard takes 1 MB/s or 1,000 records/s in and gives 2 MB/s out, in both modes. An on-demand
# stream starts with 4 MB/s or 4,000 records/s of write capacity (8 MB/s read), absorbs up to twice its
# previous peak (within 15 minutes; faster ramps are throttled), and scales by default to 200 MB/s and
# 200,000 records/s of write per stream.
SHARD_IN_BYTES_S = 1_000_000
SHARD_IN_RECORDS_S = 1_000
SHARD_OUT_BYTES_S = 2_000_000
ON_DEMAND_START_BYTES_S = 4_000_000
ON_DEMAND_START_RECORDS_S = 4_000
ON_DEMAND_START_OUT_BYTES_S = 8_000_000
ON_DEMAND_MAX_BYTES_S = 200_000_000
ON_DEMAND_MAX_RECORDS_S = 200_000

# Event Hubs Standard ("Event Hubs scalability", Microsoft docs, checked 2026-11): one throughput unit takes
# 1 MB/s or 1,000 events/s in and gives 2 MB/s or 4,096 events/s out; one partition never gets more than
# one unit's worth, so a hub is capped at min(units, partitions) units.
TU_IN_BYTES_S = 1_000_000
TU_IN_EVENTS_S = 1_000
TU_OUT_BYTES_S = 2_000_000
TU_OUT_EVENTS_S = 4_096

# The kit's generated events are 225-280 bytes of JSON (sales 225, transactions 240, orders 277 on
# average); 512 bytes leaves room for larger payloads. Azure stacks set it as lakestack:stream.eventBytes.
DEFAULT_EVENT_BYTES = 512

# The ingest job's rows per second per Spark core, measured by `lakestack demo --sweep 1000,2000,4000,6000
# --sweep-seconds 30` on 2026-11-24 on the kit's 2-core development machine, load average 12-25 (shared with
# other work): at the 6,000/s step the job's 11 micro-batches averaged 15.4k rows in 7.2 s of Spark-side stages
# (transfer into Spark 3.0 s, processing 0.4 s, Delta commit 3.5 s, checkpoint 0.4 s; the emulator's reads are
# left out, real Kinesis serves those): 2,140 rows/s on 2 cores, rounded down to 1,000 per core. Assumption:
# the job scales linearly with task slots until the stream's limit. The figure is a floor: those 2 cores also
# ran the emulator (moto), Locust and other engineers' jobs. Measure again with the sweep and change it here.
INGEST_ROWS_PER_CORE_S = 1_000
INGEST_FIGURE_SOURCE = "lakestack demo --sweep on a shared 2-core machine, 2026-11-24"

Bound = Literal["stream", "cluster"]


@dataclass(frozen=True)
class Capacity:
    """What a planned stack should sustain, in events (rows) per second, and why."""

    stream_events_s: int
    stream_limit: str
    stream_ceiling_events_s: int | None
    cluster_cores: int
    cluster_rows_s: int | None
    sustainable_events_s: int
    bound_by: Bound
    assumptions: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """The plan's ``capacity`` object."""
        return {
            "stream_events_per_s": self.stream_events_s,
            "stream_limit": self.stream_limit,
            "stream_ceiling_events_per_s": self.stream_ceiling_events_s,
            "cluster_cores": self.cluster_cores,
            "cluster_rows_per_s": self.cluster_rows_s,
            "rows_per_core_s": INGEST_ROWS_PER_CORE_S,
            "sustainable_events_per_s": self.sustainable_events_s,
            "bound_by": self.bound_by,
            "assumptions": list(self.assumptions),
        }


def _per_second(limit_bytes: int, limit_events: int, event_bytes: int) -> int:
    return min(limit_events, limit_bytes // event_bytes)


def _combine(
    stream_events_s: int,
    stream_limit: str,
    ceiling: int | None,
    cores: int,
    assumptions: list[str],
) -> Capacity:
    cluster = cores * INGEST_ROWS_PER_CORE_S if cores else None
    if cluster is None:
        assumptions.append(
            "no cluster in this stack: the jobs run elsewhere, only the stream bounds the rate"
        )
    else:
        assumptions.append(
            f"cluster: {INGEST_ROWS_PER_CORE_S:,} rows/s per core ({INGEST_FIGURE_SOURCE}), linear in task slots"
        )
    bound: Bound = "cluster" if cluster is not None and cluster < stream_events_s else "stream"
    sustainable = stream_events_s if cluster is None else min(stream_events_s, cluster)
    return Capacity(
        stream_events_s=stream_events_s,
        stream_limit=stream_limit,
        stream_ceiling_events_s=ceiling,
        cluster_cores=cores,
        cluster_rows_s=cluster,
        sustainable_events_s=sustainable,
        bound_by=bound,
        assumptions=tuple(assumptions),
    )


def kinesis_capacity(
    *, mode: str, shards: int | None, cores: int, event_bytes: int = DEFAULT_EVENT_BYTES
) -> Capacity:
    """Capacity of a Kinesis stream (``on-demand`` or ``provisioned`` with ``shards``) and ``cores`` task slots.

    One consumer (the ingest job) reads the stream; its read share is the whole stream's read limit.
    """
    if event_bytes < 1:
        raise ValueError(f"expected event_bytes >= 1, found {event_bytes}")
    assumptions = [f"events of {event_bytes} bytes", "one consumer (the ingest job) reading the stream"]
    if mode == "provisioned":
        if not shards or shards < 1:
            raise ValueError(f"expected a shard count >= 1 for a provisioned stream, found {shards!r}")
        write = shards * _per_second(SHARD_IN_BYTES_S, SHARD_IN_RECORDS_S, event_bytes)
        read = shards * SHARD_OUT_BYTES_S // event_bytes
        limit = (
            f"{shards} shards x (1 MB/s or 1,000 records/s in, 2 MB/s out): {write:,} events/s in, "
            f"{read:,} events/s out"
        )
        return _combine(min(write, read), limit, None, cores, assumptions)
    if mode != "on-demand":
        raise ValueError(f"expected a stream mode 'on-demand' or 'provisioned', found {mode!r}")
    write = _per_second(ON_DEMAND_START_BYTES_S, ON_DEMAND_START_RECORDS_S, event_bytes)
    read = ON_DEMAND_START_OUT_BYTES_S // event_bytes
    ceiling = _per_second(ON_DEMAND_MAX_BYTES_S, ON_DEMAND_MAX_RECORDS_S, event_bytes)
    limit = (
        f"on-demand, from creation 4 MB/s or 4,000 records/s in (8 MB/s out): {min(write, read):,} events/s; "
        f"grows to twice its previous peak within 15 minutes, up to 200 MB/s or 200,000 records/s "
        f"({ceiling:,} events/s) by default"
    )
    assumptions.append("on-demand: no pre-warming, so the starting capacity; ramp load up to go beyond it")
    return _combine(min(write, read), limit, ceiling, cores, assumptions)


def event_hubs_capacity(
    *, throughput_units: int, max_throughput_units: int, partitions: int, cores: int, event_bytes: int
) -> Capacity:
    """Capacity of an Event Hubs Standard hub (units, auto-inflate maximum, partitions) and ``cores`` task slots."""
    if min(throughput_units, partitions, event_bytes) < 1 or max_throughput_units < throughput_units:
        raise ValueError(
            "expected throughput_units, partitions and event_bytes >= 1 and max_throughput_units >= "
            f"throughput_units, found {throughput_units}, {partitions}, {event_bytes}, {max_throughput_units}"
        )
    per_unit = min(
        _per_second(TU_IN_BYTES_S, TU_IN_EVENTS_S, event_bytes),
        _per_second(TU_OUT_BYTES_S, TU_OUT_EVENTS_S, event_bytes),
    )
    units = min(throughput_units, partitions)
    stream = units * per_unit
    ceiling = min(max_throughput_units, partitions) * per_unit
    limit = (
        f"Event Hubs Standard, {throughput_units} throughput units x (1 MB/s or 1,000 events/s in, 2 MB/s or "
        f"4,096 events/s out) over {partitions} partitions (at most one unit each): {stream:,} events/s; "
        f"auto-inflate to {max_throughput_units} units: {ceiling:,} events/s"
    )
    assumptions = [
        f"events of {event_bytes} bytes (lakestack:stream.eventBytes)",
        "one consumer group reading",
    ]
    return _combine(stream, limit, ceiling, cores, assumptions)
