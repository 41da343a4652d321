"""Measure a run from what it left in storage: the ledger of acknowledged events, the bronze Delta table (rows,
commits) and the ingest query's checkpoint (when each micro-batch's trigger started).

The same readers serve the demo and `lakestack bench`, locally (the emulator's S3, a local checkpoint) and on
AWS (S3 with the user's credentials): nothing here asks the running query, so a cluster's run is measured the
same way as a local one.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from lakestack.timeline import BatchTiming, CostModel, Series, Timeline, build_timeline, timeline_start


@dataclass(frozen=True)
class BronzeReading:
    """The bronze table as read back: per row its event time (None when the payload has none) and commit time
    (epoch seconds; None when unknown), rows and commit time per batch, payload bytes, files and version."""

    rows: list[tuple[float | None, float | None]]
    rows_per_batch: Mapping[int, int]
    commit_times: Mapping[int, float]
    payload_bytes: int
    files: int
    version: int


def _event_time(payload: bytes) -> float | None:
    """The event time of a payload (epoch seconds); None for what is not one of our events."""
    try:
        return datetime.fromisoformat(json.loads(payload)["event_time"]).timestamp()
    except (ValueError, KeyError, TypeError):
        # Malformed records are part of some scenarios; they count as landed rows without a latency.
        return None


def read_bronze(table_uri: str, storage_options: Mapping[str, str]) -> BronzeReading:
    """Read the bronze table's payloads (for their event times) and batch ids, and its commit history."""
    from deltalake import DeltaTable

    from jobs.lake import DeltaRsEngine

    options = dict(storage_options)
    table = DeltaTable(table_uri, storage_options=options)
    commit_times = {
        record.batch_id: record.timestamp.timestamp()
        for record in DeltaRsEngine().table(table_uri, storage_options=options).commits()
        if record.batch_id is not None
    }
    # Through the dataset, as the demo's ingest check reads: to_pyarrow_table() on an abfss:// table can abort
    # the interpreter at exit (delta-rs 1.6 with pyarrow's I/O threads).
    data = table.to_pyarrow_dataset().to_table(columns=["data", "batch_id"]).to_pydict()
    rows: list[tuple[float | None, float | None]] = []
    size = 0
    for payload, batch_id in zip(data["data"], data["batch_id"], strict=True):
        rows.append((_event_time(payload), commit_times.get(batch_id)))
        size += len(payload)
    return BronzeReading(
        rows=rows,
        rows_per_batch=dict(Counter(int(b) for b in data["batch_id"])),
        commit_times=commit_times,
        payload_bytes=size,
        files=len(table.file_uris()),
        version=table.version(),
    )


def ledger_event_times(ledger_dir: Path) -> list[float]:
    """``event_time`` (epoch seconds) of every acknowledged event in the ledgers under ``ledger_dir``, at
    any depth (one folder per scenario or per Locust host)."""
    from loadtest.ledger import read_ledger

    times: list[float] = []
    for folder in sorted({path.parent for path in ledger_dir.rglob("ledger-*.jsonl")}):
        times.extend(datetime.fromisoformat(entry.event_time).timestamp() for entry in read_ledger(folder))
    return times


def batch_start_times(checkpoint: str, *, s3_client: Callable[[], Any] | None = None) -> dict[int, float]:
    """When each micro-batch's trigger started (epoch seconds), from Spark's offset log.

    Spark writes ``<checkpoint>/offsets/<batch id>`` when it plans a batch: a version line, then the batch's
    metadata with ``batchTimestampMs``. A checkpoint that is missing or unreadable gives an empty result (the
    report then has no batch durations), never an error: measuring must not fail a finished run.

    Args:
        checkpoint: a local folder, ``file://`` or ``s3://`` URI.
        s3_client: builds a boto3 S3 client, for ``s3://`` checkpoints.
    """
    parsed = urlparse(checkpoint)
    starts: dict[int, float] = {}
    if parsed.scheme in ("s3", "s3a"):
        if s3_client is None:
            return starts
        texts = _s3_offsets(s3_client(), parsed.netloc, parsed.path.strip("/"))
    else:
        folder = Path(parsed.path if parsed.scheme == "file" else checkpoint) / "offsets"
        texts = (
            {p.name: p.read_text(encoding="utf-8") for p in folder.iterdir() if p.name.isdigit()}
            if folder.is_dir()
            else {}
        )
    for name, text in texts.items():
        lines = text.splitlines()
        try:
            starts[int(name)] = int(json.loads(lines[1])["batchTimestampMs"]) / 1000
        except (IndexError, ValueError, KeyError, TypeError):
            continue
    return starts


def _s3_offsets(client: Any, bucket: str, prefix: str) -> dict[str, str]:
    folder = f"{prefix}/offsets/" if prefix else "offsets/"
    texts: dict[str, str] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder):
        for item in page.get("Contents", []):
            name = item["Key"][len(folder) :]
            if name.isdigit():
                body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"]
                texts[name] = body.read().decode("utf-8")
    return texts


def batch_timings(bronze: BronzeReading, starts: Mapping[int, float]) -> list[BatchTiming]:
    """Micro-batches that committed rows, from trigger start (offset log) to Delta commit."""
    return [
        BatchTiming(batch_id, starts[batch_id], committed, bronze.rows_per_batch.get(batch_id, 0))
        for batch_id, committed in bronze.commit_times.items()
        if batch_id in starts and committed >= starts[batch_id]
    ]


def run_timeline(
    bronze: BronzeReading,
    *,
    ledger_dir: Path,
    checkpoint: str | None,
    cost: CostModel | None = None,
    s3_client: Callable[[], Any] | None = None,
    stream_metrics: Callable[[float], list[Series]] | None = None,
) -> Timeline | None:
    """The run's :class:`Timeline` from the ledger, the bronze table and the checkpoint.

    Args:
        stream_metrics: given the epoch seconds the timeline starts at, series to plot beside it (AWS:
            the stream's CloudWatch metrics).
    """
    sent = ledger_event_times(ledger_dir)
    landed = [(event, commit) for event, commit in bronze.rows if commit is not None]
    starts = batch_start_times(checkpoint, s3_client=s3_client) if checkpoint else {}
    start = timeline_start(sent, [commit for _, commit in landed])
    series = stream_metrics(start) if stream_metrics is not None and start is not None else []
    return build_timeline(
        sent=sent,
        landed=landed,
        batches=batch_timings(bronze, starts),
        cost=cost,
        stream_metrics=series,
    )
