"""What every Delta -> Delta pipeline job shares (contract C3): the common flags, storage options per URI,
the checks before Spark starts, the query's transaction identity, per-batch metrics next to the checkpoint
(the newest batches' kept), and the run loop.

    python -m jobs <pipeline> --source-table URI --lake URI --checkpoint PATH
        [--trigger available-now | processing-time=<N>s] [--endpoint-url URL] [--region R]
        [--delta-reader auto | spark | python] [pipeline flags]

A pipeline's ``run()`` calls :func:`preflight` before it builds a Spark session, so a wrong URI, missing
credentials, an emulator that is not running or a checkpoint of another job is one line and exit 2 within a
second or two, instead of an error from inside Spark's first micro-batch.

Everything here keeps to Spark 3.5 APIs: the pipelines run on Synapse too.
"""

from __future__ import annotations

import argparse
import bisect
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from jobs._files import filesystem_for, join, write_file
from jobs._options import parse_trigger
from jobs._run import DRAIN_POLL, stop_and_raise, stop_on_signals, wait_for_query
from jobs.errors import AccessError, JobError, SettingsError, one_line
from jobs.sources import DELTA_READERS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from jobs.checkpoint import SourceRef

log = logging.getLogger(__name__)

METRICS_DIR = "pipeline/metrics"
_BATCH_FILE = re.compile(r"batch-(\d+)\.json$")


@dataclass(frozen=True)
class JobSettings:
    """The flags every pipeline job takes, validated once (pipelines hold one and add their own)."""

    source_table: str
    lake: str
    checkpoint: str
    trigger: str = "processing-time=5s"
    endpoint_url: str | None = None
    region: str | None = None
    delta_reader: str = "auto"

    def __post_init__(self) -> None:
        for flag, value in (("--source-table", self.source_table), ("--lake", self.lake)):
            if not value:
                raise SettingsError(
                    f"{flag}: expected a URI (a path, s3://... or abfss://...), found nothing."
                )
        if not self.checkpoint:
            raise SettingsError("--checkpoint: expected a checkpoint path or URI, found nothing.")
        parse_trigger(self.trigger)
        check_delta_reader(self.delta_reader)

    @property
    def available_now(self) -> bool:
        return self.trigger == "available-now"

    @property
    def interval(self) -> str:
        """The Spark trigger interval this trigger runs with."""
        seconds = parse_trigger(self.trigger)
        return DRAIN_POLL if seconds is None else f"{seconds:g} seconds"

    def table(self, name: str) -> str:
        """The URI of one of the pipeline's tables under ``--lake``."""
        return f"{self.lake.rstrip('/')}/{name}"

    def batch_metrics(self, *, retain: int | None = None) -> BatchMetrics:
        """The job's per-batch figures next to ``--checkpoint`` (:class:`BatchMetrics`)."""
        return BatchMetrics(self.checkpoint, self.storage_options(self.checkpoint), retain=retain)

    def storage_options(self, uri: str) -> dict[str, str]:
        """delta-rs storage options for ``uri``: the endpoint and region apply to s3:// URIs only."""
        from jobs.lake import scoped_storage_options

        return scoped_storage_options(uri, endpoint_url=self.endpoint_url, region=self.region)


def add_common_arguments(parser: argparse.ArgumentParser, *, stream_required: bool = True) -> None:
    """The flags of contract C3. ``stream_required=False`` leaves ``--source-table`` and ``--checkpoint`` to the
    job's settings to require, for a job with a mode that runs no stream (``orders --compact``)."""
    parser.add_argument(
        "--source-table", required=stream_required, metavar="URI", help="the Delta table to read (bronze)"
    )
    parser.add_argument(
        "--lake", required=True, metavar="URI", help="where the pipeline's tables go (path, s3://, abfss://)"
    )
    parser.add_argument(
        "--checkpoint",
        required=stream_required,
        metavar="PATH",
        help="Spark checkpoint location for this query",
    )
    parser.add_argument(
        "--trigger",
        default="processing-time=5s",
        help="'available-now' (process what is there, commit, stop) or 'processing-time=<N>s' (default: %(default)s)",
    )
    parser.add_argument(
        "--endpoint-url", default=None, metavar="URL", help="S3 endpoint for an emulator (s3:// URIs only)"
    )
    parser.add_argument("--region", default=None, help="AWS region of s3:// tables")
    add_delta_reader_argument(parser)


def add_delta_reader_argument(parser: argparse.ArgumentParser) -> None:
    """``--delta-reader``: which Delta reader streams ``--source-table`` (every pipeline)."""
    parser.add_argument(
        "--delta-reader",
        default="auto",
        choices=DELTA_READERS,
        help="how --source-table is read: Spark's own Delta source (spark: Synapse, where its jars load), the "
        "kit's Python source (python: Spark 4), or auto: Spark's where its classes load (default: %(default)s)",
    )


def check_delta_reader(delta_reader: str) -> None:
    """Refuse a ``--delta-reader`` that is not one of :data:`jobs.sources.DELTA_READERS`.

    Raises:
        SettingsError: naming the flag, the choices and the value.
    """
    if delta_reader not in DELTA_READERS:
        raise SettingsError(
            f"--delta-reader: expected one of {', '.join(DELTA_READERS)}, found {delta_reader!r}."
        )


DEFAULT_MAX_FILES_PER_TRIGGER = 1000


def add_max_files_argument(parser: argparse.ArgumentParser) -> None:
    """``--max-files-per-trigger``: how many bronze files a micro-batch reads at most (every pipeline)."""
    parser.add_argument(
        "--max-files-per-trigger",
        type=int,
        default=DEFAULT_MAX_FILES_PER_TRIGGER,
        metavar="N",
        help="bronze files read per micro-batch at most (default: %(default)s)",
    )


def check_max_files(max_files_per_trigger: int) -> None:
    """Refuse a ``--max-files-per-trigger`` below 1.

    Raises:
        SettingsError: naming the flag and the value.
    """
    if max_files_per_trigger < 1:
        raise SettingsError(
            f"--max-files-per-trigger: expected a whole number of at least 1, found {max_files_per_trigger}."
        )


def common_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :class:`JobSettings` from parsed flags."""
    return {
        "source_table": args.source_table,
        "lake": args.lake,
        "checkpoint": args.checkpoint,
        "trigger": args.trigger,
        "endpoint_url": args.endpoint_url,
        "region": args.region,
        "delta_reader": args.delta_reader,
    }


def preflight(
    job: str, settings: JobSettings, *, tables: Sequence[str], spark: SparkSession | None = None
) -> None:
    """The cheap checks of a pipeline's run, before Spark starts; then the checkpoint's claim.

    In order: Java (only when no session was given, i.e. this run builds one); ``--source-table`` is a Delta
    table these credentials may read; each of ``tables`` under ``--lake`` is a Delta table or an empty place
    they may write; the checkpoint is new or already this job's, reading this source into this lake. The claim
    comes last, so a run refused for a typo records nothing.

    Args:
        job: the job as its checkpoint's owner record names it (``sales``, ``orders --layout cow``, ...).
        settings: the common flags.
        tables: the names of the tables the job writes under ``--lake``.
        spark: the session the caller already has, if any (then Java is evidently there).

    Raises:
        SettingsError: (or a subclass) naming the flag, the place and the fix; exit 2. A storage that fails
            (HTTP 5xx after retries) is a :class:`~jobs.errors.JobError`, exit 1.
    """
    from jobs.checkpoint import SourceRef
    from jobs.lake import check_table_readable, check_table_writable
    from jobs.session import check_spark_prerequisites

    if spark is None:
        check_spark_prerequisites()
    source = settings.source_table
    check_table_readable(source, storage_options=settings.storage_options(source), flag="--source-table")
    for name in tables:
        uri = settings.table(name)
        check_table_writable(uri, storage_options=settings.storage_options(uri), flag="--lake")
    claim_for_run(
        settings.checkpoint,
        job=job,
        source=SourceRef.table(source),
        target=settings.lake,
        region=settings.region,
        endpoint_url=settings.endpoint_url,
    )


def claim_for_run(
    checkpoint: str,
    *,
    job: str,
    source: SourceRef,
    target: str,
    region: str | None,
    endpoint_url: str | None,
) -> None:
    """:func:`jobs.checkpoint.claim_checkpoint`, with a checkpoint that cannot be used named as the user's to fix.

    Raises:
        SettingsError: the checkpoint is a file; AccessError: it cannot be read or written (a folder without
            permission, a missing bucket, no credentials); CheckpointMismatchError: it belongs to another run.
    """
    from jobs.checkpoint import claim_checkpoint

    _check_local_checkpoint(checkpoint)
    try:
        claim_checkpoint(
            checkpoint, job=job, source=source, target=target, region=region, endpoint_url=endpoint_url
        )
    except JobError:
        raise
    except Exception as error:  # the store's own (OSError, botocore's): the place is what the user fixes
        raise AccessError(
            f"--checkpoint: could not read or write {checkpoint}: {one_line(error)}. Point "
            "--checkpoint at a folder this user may write, or at an s3:// bucket that exists (with "
            "--endpoint-url/--region and credentials that may write there)."
        ) from error


def _check_local_checkpoint(checkpoint: str) -> None:
    parsed = urlparse(checkpoint)
    if parsed.scheme.lower() not in ("", "file"):
        return
    path = Path(parsed.path if parsed.scheme else checkpoint)
    if path.exists() and not path.is_dir():
        raise SettingsError(
            f"--checkpoint: expected a folder (or nothing yet) at {checkpoint}, found a file. Point --checkpoint "
            "at a new folder."
        )


def read_bronze(spark: SparkSession, settings: JobSettings, *, max_files_per_trigger: int) -> DataFrame:
    """The stream of ``--source-table`` through the Delta reader ``--delta-reader`` picks (contract C4).

    Pipelines read only the bronze columns: ``_commit_version``/``_commit_timestamp`` are null on Spark's
    own Delta reader (Synapse), so nothing may depend on them.
    """
    from jobs.sources import read_delta_stream

    return read_delta_stream(
        spark,
        settings.source_table,
        storage_options=settings.storage_options(settings.source_table),
        max_files_per_trigger=max_files_per_trigger,
        checkpoint_location=settings.checkpoint,
        reader=settings.delta_reader,
    )


def query_app_id(spark: SparkSession, checkpoint: str, pipeline: str) -> str:
    """The transaction app id of a query: its id from Spark's checkpoint metadata.

    A new checkpoint is a new query (batch ids from 0 again), so its batches are never mistaken for ones an
    earlier query committed.
    """
    row = spark.read.text(f"{checkpoint.rstrip('/')}/metadata").first()
    if row is None:
        raise JobError(f"expected Spark's query metadata in {checkpoint}/metadata, found an empty file.")
    return f"lakestack-{pipeline}-{json.loads(row[0])['id']}"


class BatchMetrics:
    """Per-micro-batch figures a pipeline writes next to its checkpoint (``pipeline/metrics/batch-<id>.json``).

    Written before the batch's last table commit and overwritten by a replay, so every committed batch has
    exactly one file. Spark gives foreachBatch jobs no other durable place for their own counts. Like Spark's
    own logs (and the Kinesis source's :class:`~jobs.checkpoint.BatchFiles`), only the newest ``retain``
    batches' files are kept: writing batch ``n`` removes those of batches ``<= n - retain``, so a query that
    runs for weeks keeps a bounded folder. The folder is listed once per instance, then one delete per batch.
    So that nobody needs the pruned files' counts, each file also carries ``totals``: every whole-number
    figure summed over the query's batches so far (:meth:`totals` reads the newest).

    Args:
        checkpoint: the query's checkpoint location.
        storage_options: for a checkpoint on object storage.
        retain: batches whose files are kept (default: Spark's ``minBatchesToRetain`` default, 100; writers
            pass :func:`jobs.checkpoint.batches_to_retain` of their session).
    """

    def __init__(
        self,
        checkpoint: str,
        storage_options: Mapping[str, str] | None = None,
        *,
        retain: int | None = None,
    ) -> None:
        from jobs.checkpoint import DEFAULT_BATCHES_TO_RETAIN

        self._retain = DEFAULT_BATCHES_TO_RETAIN if retain is None else retain
        if self._retain < 1:
            raise SettingsError(f"expected batches to retain >= 1, found {self._retain}.")
        self._fs, self._root = filesystem_for(checkpoint, storage_options)
        self._kept: list[int] | None = None
        self._last: tuple[int, dict[str, int]] | None = None  # the batch last written here, and its totals

    def _path(self, batch_id: int) -> str:
        return join(self._root, f"{METRICS_DIR}/batch-{batch_id:010d}.json")

    def _paths(self) -> list[str]:
        selector = pafs.FileSelector(join(self._root, METRICS_DIR), allow_not_found=True)
        return sorted(i.path for i in self._fs.get_file_info(selector) if _BATCH_FILE.search(i.path))

    def batch_ids(self) -> list[int]:
        """The batches whose files are kept, oldest first (lists the folder)."""
        return [int(match.group(1)) for path in self._paths() if (match := _BATCH_FILE.search(path))]

    def write(self, batch_id: int, metrics: Mapping[str, Any]) -> None:
        """Write batch ``batch_id``'s figures, then remove the files older than the newest ``retain``."""
        path = self._path(batch_id)
        if self._kept is None:
            self._kept = self.batch_ids()
        counts = _counts(metrics)
        before = self._totals_before(batch_id)
        totals = {k: before.get(k, 0) + counts.get(k, 0) for k in sorted({*before, *counts})}
        write_file(self._fs, path, json.dumps({**metrics, "totals": totals}, sort_keys=True).encode())
        self._last = (batch_id, totals)
        if batch_id not in self._kept:
            bisect.insort(self._kept, batch_id)
        oldest_kept = self._kept[-1] - self._retain + 1
        while self._kept and self._kept[0] < oldest_kept:
            try:
                self._fs.delete_file(self._path(self._kept.pop(0)))
            except FileNotFoundError:
                pass  # removed already (a replay of this batch, another writer): what retention wants

    def _read(self, batch_id: int) -> dict[str, Any] | None:
        try:
            with self._fs.open_input_stream(self._path(batch_id)) as stream:
                return dict(json.loads(stream.read()))
        except FileNotFoundError:
            return None

    def _totals_before(self, batch_id: int) -> dict[str, int]:
        # The totals up to the batch before this one: from memory while this instance runs the query; else
        # from the newest kept file before it, or (a replay, with only this batch's file kept) its own file
        # less its own counts. Batches run one after another, so nothing older is ever needed.
        if self._last is not None and self._last[0] == batch_id - 1:
            return self._last[1]
        earlier = [i for i in self._kept or [] if i < batch_id]
        if earlier and (record := self._read(earlier[-1])) is not None:
            return dict(record.get("totals", {}))
        record = self._read(batch_id)
        if record is None:
            return {}
        own = _counts(record)
        return {k: v - own.get(k, 0) for k, v in record.get("totals", {}).items()}

    def totals(self) -> dict[str, int]:
        """Every whole-number figure summed over all the query's batches, pruned ones included."""
        ids = self.batch_ids()
        record = self._read(ids[-1]) if ids else None
        return dict(record.get("totals", {})) if record else {}

    def read_all(self) -> list[dict[str, Any]]:
        """Every kept batch's figures, oldest first."""
        found = []
        for path in self._paths():
            with self._fs.open_input_stream(path) as stream:
                found.append(json.loads(stream.read()))
        return found


def _counts(metrics: Mapping[str, Any]) -> dict[str, int]:
    # What adds up over batches: whole numbers, not the batch id (nor flags, which are bools).
    return {
        k: v
        for k, v in metrics.items()
        if isinstance(v, int) and not isinstance(v, bool) and k not in ("batch_id", "totals")
    }


def run_until_done(query: StreamingQuery, settings: JobSettings, *, name: str) -> int:
    """Wait on a started query: until a trigger finds nothing new (available-now) or SIGINT/SIGTERM.

    Every batch is committed in foreachBatch before its trigger ends, so a bounded run that stops here has
    committed everything it read. Returns 0; raises the query's error when it failed.
    """
    with stop_on_signals(log, name) as stop_requested:
        if wait_for_query(query, stop_requested, available_now=settings.available_now):
            log.info("%s: caught up with %s (available-now), stopping", name, settings.source_table)
        stop_and_raise(query)
    log.info("%s: stopped; the next run resumes from checkpoint %s", name, settings.checkpoint)
    return 0
