"""The `ingest` job: Kinesis stream or Event Hubs (Kafka) -> bronze Delta table, every record exactly once.

The same entry runs on a laptop (Spark local mode against the embedded emulators), on EMR through
spark-submit: ``python -m jobs ingest --stream NAME --region R --table URI --checkpoint PATH``, and on a
Synapse Spark 3.5 pool: ``python -m jobs ingest --source kafka --kafka-bootstrap NS.servicebus.windows.net:9093
--topic HUB --kafka-key-vault VAULT --kafka-secret-name NAME --table abfss://... --checkpoint abfss://...``.
Before Spark starts, :func:`preflight` checks the stream, the table and the checkpoint's owner, so a wrong
name, missing credentials or a checkpoint of another stream is one line and exit 2 within a second or two.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from jobs._options import parse_bool, parse_trigger
from jobs._run import DRAIN_POLL, stop_and_raise, stop_on_signals, wait_for_query
from jobs.errors import SettingsError
from jobs.sources.kafka import KafkaSettings, add_kafka_arguments, kafka_settings_from_args

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from jobs.checkpoint import SourceRef
    from jobs.stages import StageRecorder

log = logging.getLogger(__name__)

BRONZE_COLUMNS: tuple[str, ...] = (
    "data",
    "partition_key",
    "shard_id",
    "sequence_number",
    "arrival_time",
    "ingest_time",
    "batch_id",
)


def bronze_schema() -> Any:
    """The bronze table's Arrow schema (the ingest job creates the table with it at start-up)."""
    import pyarrow as pa

    utc = pa.timestamp("us", tz="UTC")
    kinds = [pa.binary(), pa.string(), pa.string(), pa.string(), utc, utc, pa.int64()]
    return pa.schema([pa.field(name, kind) for name, kind in zip(BRONZE_COLUMNS, kinds, strict=True)])


Source = Literal["kinesis", "kafka"]


@dataclass(frozen=True, kw_only=True)
class IngestSettings:
    """Everything the ingest job needs, validated once at start-up.

    ``source="kinesis"`` reads ``stream`` in ``region``; ``source="kafka"`` reads ``kafka`` (Event Hubs'
    Kafka endpoint on Azure, a local broker here).
    """

    table: str
    checkpoint: str
    stream: str = ""
    region: str = ""
    source: Source = "kinesis"
    kafka: KafkaSettings | None = None
    endpoint_url: str | None = None
    trigger: str = "processing-time=5s"
    starting_position: str = "trim-horizon"
    max_records_per_shard: int = 10_000
    fail_on_data_loss: bool = True

    def __post_init__(self) -> None:
        if self.source == "kafka":
            if self.kafka is None:
                raise SettingsError("--source kafka: expected --kafka-bootstrap and --topic, found none.")
        elif self.source != "kinesis":
            raise SettingsError(f"--source: expected kinesis or kafka, found {self.source!r}.")
        elif not self.stream:
            raise SettingsError(
                "--stream: expected a Kinesis stream name, found an empty value (or pass --source kafka)."
            )
        elif not self.region:
            raise SettingsError(
                "--region: expected the Kinesis stream's AWS region, e.g. us-east-1, found nothing."
            )
        if not self.table:
            raise SettingsError(
                "--table: expected a table URI (a path, s3://... or abfss://...), found nothing."
            )
        if not self.checkpoint:
            raise SettingsError("--checkpoint: expected a checkpoint path or URI, found nothing.")
        parse_trigger(self.trigger)
        from jobs.sources import parse_starting_position

        parse_starting_position(self.starting_position)  # the source's own rules; raises a SettingsError
        if self.max_records_per_shard < 1:
            raise SettingsError(
                f"--max-records-per-shard: expected a whole number of at least 1, found {self.max_records_per_shard}."
            )

    @property
    def available_now(self) -> bool:
        return self.trigger == "available-now"

    @property
    def processing_seconds(self) -> float:
        return parse_trigger(self.trigger) or 0.0


def _bool_flag(value: str) -> bool:
    try:
        return parse_bool(value, name="flag")
    except SettingsError as error:
        raise argparse.ArgumentTypeError(f"expected true or false, found {value!r}") from error


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ingest job's flags to ``parser`` (shared by ``python -m jobs ingest`` and the CLI)."""
    parser.add_argument(
        "--source",
        default="kinesis",
        choices=("kinesis", "kafka"),
        help="the stream: Kinesis, or Kafka / Event Hubs' Kafka endpoint (default: %(default)s)",
    )
    parser.add_argument("--stream", default="", help="Kinesis stream name (--source kinesis)")
    parser.add_argument(
        "--region", default="", help="AWS region of the stream, e.g. us-east-1 (--source kinesis)"
    )
    parser.add_argument(
        "--endpoint-url", default=None, help="AWS endpoint for an emulator, e.g. http://127.0.0.1:4566"
    )
    parser.add_argument("--table", required=True, help="bronze Delta table URI (path, s3://..., abfss://...)")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint location for this query")
    parser.add_argument(
        "--trigger",
        default="processing-time=5s",
        help="'available-now' (drain what is there, then stop) or 'processing-time=<N>s' (default: %(default)s)",
    )
    parser.add_argument(
        "--starting-position",
        default="trim-horizon",
        help="where a new query starts: trim-horizon | latest | at-timestamp=<ISO-8601> (default: %(default)s)",
    )
    parser.add_argument(
        "--max-records-per-shard",
        type=int,
        default=10_000,
        help="cap on records read per shard in one micro-batch (default: %(default)s)",
    )
    parser.add_argument(
        "--fail-on-data-loss",
        type=_bool_flag,
        default=True,
        metavar="true|false",
        help="fail when records expired from the stream before they were read (default: true)",
    )
    add_kafka_arguments(parser)


def settings_from_args(args: argparse.Namespace) -> IngestSettings:
    kafka = (
        kafka_settings_from_args(args, fail_on_data_loss=args.fail_on_data_loss)
        if args.source == "kafka"
        else None
    )
    return IngestSettings(
        source=args.source,
        kafka=kafka,
        stream=args.stream,
        region=args.region,
        endpoint_url=args.endpoint_url,
        table=args.table,
        checkpoint=args.checkpoint,
        trigger=args.trigger,
        starting_position=args.starting_position,
        max_records_per_shard=args.max_records_per_shard,
        fail_on_data_loss=args.fail_on_data_loss,
    )


def to_bronze(batch: DataFrame, batch_id: int) -> DataFrame:
    """Shape one micro-batch of Kinesis records into bronze rows (payload bytes untouched)."""
    from pyspark.sql import functions as F

    return batch.select(
        "data",
        "partition_key",
        "shard_id",
        "sequence_number",
        "arrival_time",
        F.current_timestamp().alias("ingest_time"),
        F.lit(batch_id).cast("long").alias("batch_id"),
    )


def table_options(settings: IngestSettings) -> dict[str, str]:
    """Storage options of the bronze table."""
    from jobs.lake import scoped_storage_options

    # The endpoint and region say where the stream is; they describe the table only when it is on S3 too.
    return scoped_storage_options(settings.table, endpoint_url=settings.endpoint_url, region=settings.region)


def source_ref(settings: IngestSettings) -> SourceRef:
    """What the query reads, as its checkpoint's owner record names it."""
    from jobs.checkpoint import SourceRef

    if settings.kafka is not None and settings.source == "kafka":
        # The broker's hosts, not its ports: a local broker gets a new port every run.
        hosts = ",".join(sorted({host for host, _port in settings.kafka.servers}))
        return SourceRef("kafka", settings.kafka.topic, hosts)
    return SourceRef.kinesis(settings.stream, settings.region)


def preflight(settings: IngestSettings) -> None:
    """The cheap checks before Spark starts, then the checkpoint's claim.

    The Kinesis stream exists and these credentials may read it (a Kafka topic is not: the jobs carry
    no Kafka client of their own, and Spark's Kafka source reads a missing topic as empty); the table is a readable Delta table or an empty place this job
    may write; the checkpoint is new or already this job's, from this stream into this table. The claim comes
    last so that a run refused for a wrong name records nothing.

    Raises:
        SettingsError: (or a subclass) naming what is wrong and the fix; exit 2.
    """
    from jobs.lake import check_table_writable
    from jobs.pipelines._job import claim_for_run
    from jobs.sources import check_kinesis_stream

    if settings.source == "kinesis":
        check_kinesis_stream(settings.stream, region=settings.region, endpoint_url=settings.endpoint_url)
    check_table_writable(settings.table, storage_options=table_options(settings), flag="--table")
    claim_for_run(
        settings.checkpoint,
        job="ingest",
        source=source_ref(settings),
        target=settings.table,
        region=settings.region or None,
        endpoint_url=settings.endpoint_url,
    )


def _log_source_metrics(settings: IngestSettings, batch_id: int) -> dict[str, Any] | None:
    # The source plans in a Spark Python worker whose log is not the job's: surface its numbers here.
    if settings.source != "kinesis":
        return None
    from jobs.sources import read_source_metrics

    try:
        # The endpoint is used only when the checkpoint is on S3 (the emulator's, next to the stream).
        found = read_source_metrics(
            settings.checkpoint, batch_id=batch_id, region=settings.region, endpoint_url=settings.endpoint_url
        )
    except (OSError, ValueError, LookupError) as error:
        log.warning("ingest: batch %d: source metrics unreadable (%s)", batch_id, error)
        return None
    for metrics in found:
        behind = [m.get("millis_behind_latest") or 0 for m in metrics.get("shards", {}).values()]
        log.info(
            "ingest: batch %d read %d records, %d bytes from %d shards; max MillisBehindLatest %d; "
            "throttled %d, retries %d, data-loss events %d",
            batch_id,
            metrics.get("records", 0),
            metrics.get("bytes", 0),
            len(behind),
            max(behind, default=0),
            metrics.get("throttled", 0),
            metrics.get("retries", 0),
            metrics.get("data_loss_events", 0),
        )
    return found[-1] if found else None


def make_batch_writer(
    spark: SparkSession, settings: IngestSettings, *, stages: StageRecorder | None = None
) -> Callable[[DataFrame, int], None]:
    """Return the idempotent foreachBatch function that appends each micro-batch to the bronze table.

    With ``stages``, each batch's transfer and commit times (and the source's metrics) go to the recorder.
    """
    from jobs.lake import foreach_batch_writer, spark_job_engine
    from jobs.pipelines._job import query_app_id

    options = table_options(settings)
    writer: Callable[[DataFrame, int], None] | None = None
    source: dict[int, dict[str, Any] | None] = {}

    def timings(batch_id: int, measured: dict[str, Any]) -> None:
        # The source's numbers of a batch are complete once its rows were read, i.e. after the write.
        source[batch_id] = _log_source_metrics(settings, batch_id)
        if stages is not None:
            stages.batch_written(batch_id, measured, source=source[batch_id])

    def write(batch: DataFrame, batch_id: int) -> None:
        nonlocal writer
        if writer is None:
            writer = foreach_batch_writer(
                spark_job_engine(spark, options).table(settings.table, storage_options=options),
                app_id=query_app_id(spark, settings.checkpoint, "ingest"),
                prepare=to_bronze,
                timings=timings,
                # Executors read Kinesis: only a batch tells whether records came, and an empty one commits nothing.
                skip_empty=True,
            )
        writer(batch, batch_id)
        if source.pop(batch_id, False) is False:  # a batch the writer skipped (a replay) is logged too
            _log_source_metrics(settings, batch_id)

    return write


def read_records(spark: SparkSession, settings: IngestSettings) -> DataFrame:
    """The stream as a streaming DataFrame of data, partition_key, shard_id, sequence_number, arrival_time."""
    if settings.kafka is not None and settings.source == "kafka":
        from jobs.sources.kafka import read_kafka_stream, resolve_connection_string

        # Read once at start and never logged (the value is masked in every repr).
        secret = resolve_connection_string(settings.kafka, os.environ)
        return read_kafka_stream(spark, settings.kafka, secret=secret)
    from jobs.sources import read_kinesis_stream

    return read_kinesis_stream(
        spark,
        stream_name=settings.stream,
        region=settings.region,
        endpoint_url=settings.endpoint_url,
        checkpoint_location=settings.checkpoint,
        starting_position=settings.starting_position,
        max_records_per_shard=settings.max_records_per_shard,
        fail_on_data_loss=settings.fail_on_data_loss,
    )


def stream_label(settings: IngestSettings) -> str:
    """The stream's name for query names and logs: the Kinesis stream or the Kafka topic."""
    return (
        settings.kafka.topic if settings.kafka is not None and settings.source == "kafka" else settings.stream
    )


def query_name(settings: IngestSettings) -> str:
    """The ingest query's name (Spark's progress and listeners know it by this)."""
    return f"ingest-{stream_label(settings)}"


def start(
    spark: SparkSession, settings: IngestSettings, *, stages: StageRecorder | None = None
) -> StreamingQuery:
    """Create the bronze table if missing, start the ingest query and return it (the caller waits on or stops it).

    The table exists from start-up on, so jobs that read bronze (``sales``, ...) can start before any record.
    With ``stages``, every micro-batch's stage timings are recorded there (:mod:`jobs.stages`); the caller
    closes the recorder when done with the query.
    """
    from jobs.lake import spark_job_engine

    options = table_options(settings)
    spark_job_engine(spark, options).table(settings.table, storage_options=options).create(bronze_schema())
    records = read_records(spark, settings)
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")
    writer = (
        records.writeStream.queryName(query_name(settings))
        .option("checkpointLocation", settings.checkpoint)
        .foreachBatch(make_batch_writer(spark, settings, stages=stages))
    )
    # Spark 4.0 and 4.1 fall back to a single (capped) batch for Python sources under Trigger.AvailableNow, so
    # available-now is a fast processing-time trigger that `run()` stops once the source has caught up.
    interval = DRAIN_POLL if settings.available_now else f"{settings.processing_seconds:g} seconds"
    writer = writer.trigger(processingTime=interval)
    log.info(
        "ingest: %s (%s) -> %s, checkpoint %s, trigger %s",
        stream_label(settings),
        settings.source if settings.source == "kafka" else settings.region,
        settings.table,
        settings.checkpoint,
        settings.trigger,
    )
    if stages is not None:
        # Before start: the first batch's progress must find the listener there.
        stages.listen(spark, query_name(settings))
    return writer.start()


def run(settings: IngestSettings, *, spark: SparkSession | None = None) -> int:
    """Run the job until it drains (available-now) or is stopped by SIGINT/SIGTERM. Returns an exit code.

    Raises:
        JobError: (or a subclass) before Spark starts, from :func:`preflight`; later, Spark's exception
            carries ours inside it (``python -m jobs`` finds it: :func:`jobs.errors.find_job_error`).
    """
    from jobs.session import build_session, check_spark_prerequisites
    from jobs.stages import StageRecorder

    if spark is None:
        check_spark_prerequisites()
    preflight(settings)
    session = spark or build_session("lakestack-ingest")
    # Each batch's stage timings are logged (one line per batch) as they complete.
    stages = StageRecorder()
    query = start(session, settings, stages=stages)
    with stop_on_signals(log, "ingest") as stop_requested:
        try:
            if wait_for_query(query, stop_requested, available_now=settings.available_now):
                log.info("ingest: caught up with the stream (available-now), stopping")
            stop_and_raise(query)
        finally:
            stages.close()
    # Per-batch counts are logged as each batch is written; recentProgress is a bounded buffer full of
    # idle triggers, so it is no total.
    log.info("ingest: stopped; the next run resumes from checkpoint %s", settings.checkpoint)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jobs ingest",
        description="Read a Kinesis stream or an Event Hub (Kafka) and append every record exactly once to a "
        "bronze Delta table.",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run(settings_from_args(args))


__all__ = [
    "BRONZE_COLUMNS",
    "IngestSettings",
    "add_arguments",
    "bronze_schema",
    "main",
    "preflight",
    "query_name",
    "run",
    "settings_from_args",
    "source_ref",
    "start",
    "table_options",
]
