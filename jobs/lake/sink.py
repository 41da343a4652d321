"""Exactly-once ``foreachBatch`` sink: one Delta commit per micro-batch, skipped when already committed."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from jobs._retry import RetryPolicy
from jobs.lake._arrow import to_arrow
from jobs.lake._retry import LAKE_RETRY, with_retries
from jobs.lake.engine import AppendResult, LakeTable, SchemaMode

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


def foreach_batch_writer(  # noqa: PLR0913 -- keyword-only writer options
    table: LakeTable,
    *,
    app_id: str,
    partition_by: Sequence[str] | None = None,
    prepare: Callable[[DataFrame, int], DataFrame] | None = None,
    schema_mode: SchemaMode = "strict",
    target_file_size: int | None = None,
    retry: RetryPolicy | None = None,
    timings: Callable[[int, dict[str, Any]], None] | None = None,
    skip_empty: bool = False,
) -> Callable[[DataFrame, int], None]:
    """Return a function for ``writeStream.foreachBatch(...)`` that appends each batch exactly once.

    Spark's checkpoint commit comes after ``foreachBatch`` returns, so after a crash Spark replays the
    last batch with the same id. Every batch is one commit carrying the transaction ``(app_id, batch_id)``,
    and a batch at or below the table's transaction version for ``app_id`` is skipped:

    - with the JVM engine (delta-spark, what every Spark job writes with), the batch DataFrame itself is
      written by the executors, and Delta skips a seen transaction on its own from the log; nothing of the
      batch comes to the driver;
    - with delta-rs (tables Spark cannot reach here: Azurite), the writer looks the transaction up, moves the
      batch to Arrow on the driver (:func:`jobs.lake.to_arrow`) and appends it.

    Empty batches are committed too (a commit with the transaction and no files): an available-now run
    then always leaves a commit behind, and ``commits()`` shows every batch the query ran. With
    ``skip_empty`` a batch without rows commits nothing: for a source that can only learn whether a stream
    has new records by running a batch (the Kinesis source, whose executors read), so an idle stream, or a
    restart with nothing new, does not add a commit per poll. Nothing is lost: a replay of that batch is
    empty too, and the next batch that has rows carries a higher transaction version.

    Transient storage errors are retried (bounded, full jitter) and then raised as ``LakeWriteError`` so
    the query fails and replays the batch; a batch is never dropped.

    Args:
        table: the Delta table, from ``engine.table(uri, storage_options=storage_options_for(uri, ...))``.
        app_id: identity of the streaming query; keep it stable across restarts of the same checkpoint.
        partition_by: partition columns, used when the first batch creates the table.
        prepare: optional ``(batch_df, batch_id) -> DataFrame`` transform applied before writing.
        schema_mode: ``"strict"`` rejects any schema difference; ``"merge"`` adds new columns.
        target_file_size: target Parquet file size in bytes (None: the engine's default).
        retry: retry policy for transient storage errors.
        timings: optional ``(batch_id, timings)`` callback after each batch: ``transfer_s`` (the batch into
            Arrow, ``prepare`` included; 0 with the JVM engine, where no rows move to the driver), ``commit_s``
            (transaction lookup and append; with the JVM engine the executors' write and the commit), ``total_s``,
            ``committed_at`` (epoch seconds the commit returned), ``rows``, ``committed``. Stage timings
            (:mod:`jobs.stages`) are built from it.
        skip_empty: commit nothing for a batch without rows (see above).
    """
    policy = retry or LAKE_RETRY
    table_uri = table.uri
    # One batch's append, the same call for either engine (Arrow data or the batch DataFrame).
    append = functools.partial(
        table.append, partition_by=partition_by, schema_mode=schema_mode, target_file_size=target_file_size
    )
    if table.engine.accepts_frames:
        return _frame_writer(
            table,
            append,
            app_id=app_id,
            prepare=prepare,
            policy=policy,
            timings=timings,
            skip_empty=skip_empty,
        )

    def write_batch(batch_df: DataFrame, batch_id: int) -> None:
        started = time.perf_counter()
        done = with_retries(
            lambda: table.transaction_version(app_id),
            what=f"transaction lookup for batch {batch_id} of {table_uri}",
            policy=policy,
        )
        if done is not None and done >= batch_id:
            _skipped(
                table_uri, app_id, batch_id, started, timings, why=f"already committed (txn version {done})"
            )
            return
        looked_up = time.perf_counter()
        frame = prepare(batch_df, batch_id) if prepare is not None else batch_df
        data = to_arrow(frame)
        converted = time.perf_counter()
        if skip_empty and data.num_rows == 0:
            _skipped(table_uri, app_id, batch_id, started, timings, why="no rows")
            return

        result = with_retries(
            lambda: append(data, app_id=app_id, batch_id=batch_id),
            what=f"append of batch {batch_id} to {table_uri}",
            policy=policy,
        )
        finished = time.perf_counter()
        if timings is not None:
            timings(
                batch_id,
                {
                    "transfer_s": converted - looked_up,
                    # The transaction lookup is part of committing: it decides whether this batch commits.
                    "commit_s": (looked_up - started) + (finished - converted),
                    "total_s": finished - started,
                    "committed_at": time.time(),
                    "rows": data.num_rows,
                    "committed": result.committed,
                },
            )
        log.info(
            "lake %s app=%s batch=%d rows=%d version=%d %s in %.3fs",
            table_uri,
            app_id,
            batch_id,
            data.num_rows,
            result.table_version,
            "committed" if result.committed else "skipped: already committed",
            time.perf_counter() - started,
        )

    return write_batch


def _frame_writer(
    table: LakeTable,
    append: Callable[..., AppendResult],
    *,
    app_id: str,
    prepare: Callable[[DataFrame, int], DataFrame] | None,
    policy: RetryPolicy,
    timings: Callable[[int, dict[str, Any]], None] | None,
    skip_empty: bool,
) -> Callable[[DataFrame, int], None]:
    """The writer for an engine that takes DataFrames: the executors write, the driver commits the log.

    With ``skip_empty`` the batch is persisted on the executors first, so finding out whether it has a row
    and writing it read the source once (a Kinesis batch's range is read by its tasks, not re-fetched).
    """
    table_uri = table.uri

    def write_batch(batch_df: DataFrame, batch_id: int) -> None:
        started = time.perf_counter()
        frame = prepare(batch_df, batch_id) if prepare is not None else batch_df
        if skip_empty:
            from pyspark import StorageLevel

            frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            # count(), not isEmpty(): isEmpty takes one partition, then more, job after job, and a Kinesis
            # partition is a shard's read; count reads every shard in one job and caches them for the write.
            if skip_empty and frame.count() == 0:
                _skipped(table_uri, app_id, batch_id, started, timings, why="no rows")
                return
            result = with_retries(
                lambda: append(frame, app_id=app_id, batch_id=batch_id),
                what=f"append of batch {batch_id} to {table_uri}",
                policy=policy,
            )
        finally:
            if skip_empty:
                frame.unpersist()
        finished = time.perf_counter()
        if timings is not None:
            measured: dict[str, Any] = {"total_s": finished - started, "rows": result.rows}
            if result.committed:
                measured |= {
                    "transfer_s": 0.0,
                    "commit_s": finished - started,
                    "committed_at": time.time(),
                    "committed": True,
                }
            else:
                measured["committed"] = False
            timings(batch_id, measured)
        log.info(
            "lake %s app=%s batch=%d rows=%d version=%d %s in %.3fs",
            table_uri,
            app_id,
            batch_id,
            result.rows,
            result.table_version,
            "committed" if result.committed else "skipped: already committed",
            finished - started,
        )

    return write_batch


def _skipped(
    table_uri: str,
    app_id: str,
    batch_id: int,
    started: float,
    timings: Callable[[int, dict[str, Any]], None] | None,
    *,
    why: str,
) -> None:
    """A batch that commits nothing (``why``: no rows under ``skip_empty``, or already committed): its timing
    says so (no rows, not committed) and the log says why."""
    if timings is not None:
        timings(batch_id, {"total_s": time.perf_counter() - started, "rows": 0, "committed": False})
    log.info("lake %s app=%s batch=%d skipped: %s", table_uri, app_id, batch_id, why)
