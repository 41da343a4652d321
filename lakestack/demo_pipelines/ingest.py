"""The ingest job in the demo: stream -> bronze, reconciled by bronze position against every scenario's ledger.

Positions, not event ids: a malformed payload carries no readable id, and a producer's resend is the same id
acknowledged at two positions; the stream's position is what identifies a record in both places.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from lakestack.demo_pipelines._base import Loads, RunContext
from lakestack.reconcile import reconcile
from lakestack.report import percentile

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

    from loadtest.ledger import LedgerEntry


def position_key(shard_id: str, sequence_number: str) -> str:
    return f"{shard_id}@{sequence_number}"


class IngestPipeline:
    """Kinesis -> bronze (always runs: every other pipeline reads bronze)."""

    name: ClassVar[str] = "ingest"
    scenarios: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        from jobs.stages import StageRecorder

        # Every micro-batch's stage timings, for the report's `stages` (jobs.stages).
        self.stages = StageRecorder()

    def start(self, run: RunContext) -> StreamingQuery:
        from jobs import ingest

        settings = run.target.ingest_settings(
            checkpoint=run.checkpoint(self.name), trigger=run.trigger, max_records=run.max_records_per_shard
        )
        return ingest.start(run.spark, settings, stages=self.stages)

    def stage_report(self, *, plot: str | None = "stages.png") -> dict[str, Any]:
        """The report's ``stages``: per-stage summary, every batch's record, and the plot's file name."""
        records = self.stages.records()
        return {"summary": self.stages.summary(), "batches": records, "plot": plot if records else None}

    def check(self, run: RunContext, loads: Loads) -> dict[str, Any]:
        """Every acknowledged position landed exactly once; latency from event time to the bronze commit."""
        return reconcile_bronze(run.bronze, run.storage_options(run.bronze), loads.all_entries())


def reconcile_bronze(
    table_uri: str, storage_options: Mapping[str, str], entries: Sequence[LedgerEntry]
) -> dict[str, Any]:
    """The ingest figures of a bronze table against the ledger ``entries``: missing and duplicate positions,
    latency from each event's time to its bronze commit, throughput, files. The demo and `lakestack bench`
    (locally and on a stack's S3) both measure ingest with it."""
    from deltalake import DeltaTable

    from jobs.lake import DeltaRsEngine

    options = dict(storage_options)
    table = DeltaTable(table_uri, storage_options=options)
    commit_time = {
        record.batch_id: record.timestamp.timestamp()
        for record in DeltaRsEngine().table(table_uri, storage_options=options).commits()
        if record.batch_id is not None
    }
    # Through the dataset: to_pyarrow_table() on an abfss:// table can abort the interpreter at exit
    # (delta-rs 1.6 with pyarrow's I/O threads).
    landed = (
        table.to_pyarrow_dataset().to_table(columns=["shard_id", "sequence_number", "batch_id"]).to_pydict()
    )
    result = reconcile(
        [position_key(e.shard_id, e.sequence_number) for e in entries],
        [position_key(s, q) for s, q in zip(landed["shard_id"], landed["sequence_number"], strict=True)],
    )
    sent = {position_key(e.shard_id, e.sequence_number): e for e in entries}
    latencies: list[float] = []
    first_event: float | None = None
    last_commit: float | None = None
    for shard, seq, batch in zip(
        landed["shard_id"], landed["sequence_number"], landed["batch_id"], strict=True
    ):
        entry = sent.get(position_key(shard, seq))
        committed = commit_time.get(batch)
        if entry is None or committed is None:
            continue
        event_time = datetime.fromisoformat(entry.event_time).timestamp()
        latencies.append(committed - event_time)
        first_event = event_time if first_event is None else min(first_event, event_time)
        last_commit = committed if last_commit is None else max(last_commit, committed)
    span = last_commit - first_event if last_commit is not None and first_event is not None else None
    return {
        "ok": result.exactly_once,
        "rows": result.landed,
        "events_sent": result.acknowledged,
        "events_landed": result.landed,
        "missing": result.missing,
        "duplicates": result.duplicates,
        "unacknowledged": result.unacknowledged,
        "missing_sample": list(result.missing_sample),
        "duplicate_sample": list(result.duplicate_sample),
        "latency_p50_s": _rounded(percentile(latencies, 50)),
        "latency_p95_s": _rounded(percentile(latencies, 95)),
        "latency_p99_s": _rounded(percentile(latencies, 99)),
        "throughput_eps": round(result.landed / span, 1) if span else None,
        "send_rate_eps": send_rate(entries),
        "table_uri": table_uri,
        "files": len(table.file_uris()),
        "table_version": table.version(),
        "notes": stream_notes(entries, result.missing_sample),
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def send_rate(entries: Sequence[LedgerEntry]) -> float | None:
    """Acknowledged events per second of generation time (first to last ``event_time``)."""
    stamps = [datetime.fromisoformat(entry.event_time).timestamp() for entry in entries]
    span = max(stamps) - min(stamps) if len(stamps) > 1 else 0.0
    return round(len(stamps) / span, 1) if span > 0 else None


def stream_notes(entries: Sequence[LedgerEntry], missing: Sequence[str]) -> list[str]:
    """Positions the stream acknowledged twice, and which event each missing position held."""
    notes: list[str] = []
    positions = Counter(position_key(e.shard_id, e.sequence_number) for e in entries)
    reused = sorted(position for position, count in positions.items() if count > 1)
    if reused:
        # Two events acknowledged at one position: the stream itself kept only one of them.
        notes.append(
            f"the stream acknowledged {len(reused)} position(s) twice ({', '.join(reused[:3])}): it lost events"
        )
    where = {position_key(e.shard_id, e.sequence_number): e for e in entries}
    for position in missing:
        entry = where.get(position)
        if entry is not None:
            notes.append(
                f"missing {entry.event_id}: acknowledged in {entry.shard_id} at sequence {entry.sequence_number}"
            )
    return notes
