"""Reads Spark's offset log and keeps per-batch source metrics next to the checkpoint (local path or s3://)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from jobs._store import CheckpointStore, S3ClientFactory
from jobs.checkpoint import BatchFiles

METRICS_DIR = "sources/kinesis/metrics"


def last_logged_offset(
    checkpoint: str, stream_name: str, s3_client: S3ClientFactory
) -> tuple[int, dict[str, Any]] | None:
    """The newest (batch id, offset) of this stream in Spark's offset log, or None for a fresh query.

    Spark writes the planned end of a batch to ``<checkpoint>/offsets/<batch>`` before running it, and
    after a restart asks ``latestOffset()`` before telling the source where it stands: this is how the
    reader finds its position without ever planning a batch that ends before the checkpointed start.
    """
    return last_logged(
        checkpoint,
        s3_client,
        lambda offset: offset.get("stream") == stream_name and "shards" in offset,
    )


def last_logged(
    checkpoint: str, s3_client: S3ClientFactory, match: Callable[[dict[str, Any]], bool]
) -> tuple[int, dict[str, Any]] | None:
    """The newest (batch id, offset) in Spark's offset log whose offset ``match`` accepts, or None."""
    store = CheckpointStore(checkpoint, s3_client)
    batches = sorted((int(n) for n in store.list("offsets") if n.isdigit()), reverse=True)
    for batch in batches:
        lines = store.read(f"offsets/{batch}").splitlines()
        # Line 0 is the version, line 1 the batch metadata, then one line per source of the query.
        for line in lines[2:]:
            if not line.startswith("{"):
                continue
            offset = json.loads(line)
            if isinstance(offset, dict) and match(offset):
                return batch, offset
    return None


def metrics_files(checkpoint: str, s3_client: S3ClientFactory, *, retain: int | None = None) -> BatchFiles:
    """The source's per-batch metrics files (``batch-<id>.json``), the newest ``retain`` batches kept."""
    return BatchFiles(CheckpointStore(checkpoint, s3_client), METRICS_DIR, retain=retain)


def read_metrics(
    checkpoint: str, s3_client: S3ClientFactory, *, batch_id: int | None = None
) -> list[dict[str, Any]]:
    files = metrics_files(checkpoint, s3_client)
    if batch_id is not None:
        # Called once per batch by the ingest job: read the one file, list only when it is missing.
        found = files.read(batch_id)
        return [] if found is None else [found]
    return files.read_all()


def pinned_start(checkpoint: str, start: str, s3_client: S3ClientFactory, *, source: str = "kinesis") -> str:
    """The start spec recorded for this checkpoint; records ``start`` there on first use."""
    store = CheckpointStore(checkpoint, s3_client)
    rel = f"sources/{source}/start.json"
    pinned = store.read_if_exists(rel)
    if pinned is not None:
        return json.loads(pinned)["start"]
    store.write(rel, json.dumps({"start": start}))
    return start
