"""Reads Spark's offset log and keeps per-batch source metrics next to the checkpoint (local path or s3://)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from jobs._aws import error_code

METRICS_DIR = "sources/kinesis/metrics"


class _Store:
    """Minimal list/read/write over a local directory or an s3:// prefix."""

    def __init__(self, root: str, s3_client: Callable[[], Any]) -> None:
        parsed = urlparse(root)
        self._s3 = parsed.scheme in ("s3", "s3a")
        if self._s3:
            self._bucket, self._prefix = parsed.netloc, parsed.path.strip("/")
            self._client_factory = s3_client
        else:
            self._root = Path(parsed.path if parsed.scheme == "file" else root)

    def _key(self, rel: str) -> str:
        return f"{self._prefix}/{rel}" if self._prefix else rel

    def list(self, rel_dir: str) -> list[str]:
        if not self._s3:
            folder = self._root / rel_dir
            return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        client = self._client_factory()
        names: list[str] = []
        prefix = self._key(rel_dir).rstrip("/") + "/"
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=prefix):
            names.extend(obj["Key"][len(prefix) :] for obj in page.get("Contents", []))
        return sorted(n for n in names if "/" not in n)

    def read(self, rel: str) -> str:
        if not self._s3:
            return (self._root / rel).read_text(encoding="utf-8")
        body = self._client_factory().get_object(Bucket=self._bucket, Key=self._key(rel))["Body"]
        return body.read().decode("utf-8")

    def read_if_exists(self, rel: str) -> str | None:
        # One GET instead of listing the folder: the metrics folder grows by a file per batch.
        if not self._s3:
            path = self._root / rel
            return path.read_text(encoding="utf-8") if path.is_file() else None
        try:
            return self.read(rel)
        except Exception as error:
            if error_code(error) in ("NoSuchKey", "404"):
                return None
            raise

    def write(self, rel: str, text: str) -> None:
        if not self._s3:
            target = self._root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, target)
            return
        self._client_factory().put_object(Bucket=self._bucket, Key=self._key(rel), Body=text.encode("utf-8"))


def last_logged_offset(
    checkpoint: str, stream_name: str, s3_client: Callable[[], Any]
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
    checkpoint: str, s3_client: Callable[[], Any], match: Callable[[dict[str, Any]], bool]
) -> tuple[int, dict[str, Any]] | None:
    """The newest (batch id, offset) in Spark's offset log whose offset ``match`` accepts, or None."""
    store = _Store(checkpoint, s3_client)
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


def write_metrics(
    checkpoint: str, batch_id: int, metrics: dict[str, Any], s3_client: Callable[[], Any]
) -> None:
    _Store(checkpoint, s3_client).write(_metrics_file(batch_id), json.dumps(metrics))


def read_metrics(
    checkpoint: str, s3_client: Callable[[], Any], *, batch_id: int | None = None
) -> list[dict[str, Any]]:
    store = _Store(checkpoint, s3_client)
    if batch_id is not None:
        # Called once per batch by the ingest job: read the one file, never list them all.
        text = store.read_if_exists(_metrics_file(batch_id))
        return [] if text is None else [json.loads(text)]
    names = [n for n in store.list(METRICS_DIR) if n.startswith("batch-") and n.endswith(".json")]
    return [json.loads(store.read(f"{METRICS_DIR}/{n}")) for n in names]


def _metrics_file(batch_id: int) -> str:
    return f"{METRICS_DIR}/batch-{batch_id:010d}.json"


def pinned_start(
    checkpoint: str, start: str, s3_client: Callable[[], Any], *, source: str = "kinesis"
) -> str:
    """The start spec recorded for this checkpoint; records ``start`` there on first use."""
    store = _Store(checkpoint, s3_client)
    rel = f"sources/{source}/start.json"
    pinned = store.read_if_exists(rel)
    if pinned is not None:
        return json.loads(pinned)["start"]
    store.write(rel, json.dumps({"start": start}))
    return start
