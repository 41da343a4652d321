"""A Delta table as a stream on Spark 3.5 and 4.0: Spark's own Delta source where its classes load, the kit's
Python source (:mod:`jobs.sources.delta`, Spark 4's Python Data Source API) everywhere else.

Synapse (Spark 3.5, Delta 3.2.1 in the runtime) has Delta's classes and no Python Data Source API; this
machine and EMR as the kit deploys it (Delta not enabled) have the Python API and no Delta jar. The choice is
made here, once per read, and logged; ``reader="spark" | "python"`` (the jobs' ``--delta-reader``) overrides
it. Reading with JVM Delta while delta-rs writes the table is fine (Delta 3.2 reads the protocol 1/2 tables
delta-rs writes); writing with both never is.

The two readers give the same rows with one difference, in the extra columns:

- ``read_change_feed=True``: Delta's change data feed has ``_commit_version``, ``_commit_timestamp`` and
  ``_change_type`` per row, the same columns as the Python source (put in the same order).
- append-only reads (the default): Delta 3.2's streaming source says nothing per row about the commit a row
  came from, and its change data feed only serves tables that record it (``delta.enableChangeDataFeed``,
  writer 4), which bronze does not. So on Spark's reader ``_commit_version`` and ``_commit_timestamp`` are
  **null** (typed long and timestamp, so the schema is the same). No pipeline reads them.

This module imports nothing of Spark 4: it is part of the Azure path and runs under pyspark 3.5 in
``make test-spark35``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, get_args

from jobs.sources._delta_log import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION, open_table
from jobs.sources.errors import SourceSettingsError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

DeltaReader = Literal["auto", "spark", "python"]
DELTA_READERS: tuple[str, ...] = get_args(DeltaReader)
# The class Delta registers for format("delta"); present in Synapse's runtime and with the delta-spark jars.
SPARK_DELTA_PROVIDER = "org.apache.spark.sql.delta.sources.DeltaDataSource"


@dataclass(frozen=True)
class DeltaStreamOptions:
    """The options of a Delta stream, validated once, whichever reader runs it.

    ``starting_timestamp`` is time-zone-aware; ``starting_version`` a version number or ``"latest"``.
    """

    starting_version: int | Literal["latest"] | None = None
    starting_timestamp: datetime | None = None
    max_files_per_trigger: int = 1000
    max_bytes_per_trigger: int | None = None
    read_change_feed: bool = False
    skip_change_commits: bool = False

    def __post_init__(self) -> None:
        if self.max_files_per_trigger < 1:
            raise SourceSettingsError(
                f"max_files_per_trigger: expected at least 1, found {self.max_files_per_trigger}."
            )
        if self.max_bytes_per_trigger is not None and self.max_bytes_per_trigger < 1:
            raise SourceSettingsError(
                f"max_bytes_per_trigger: expected at least 1, found {self.max_bytes_per_trigger}."
            )
        if self.read_change_feed and self.skip_change_commits:
            raise SourceSettingsError(
                "read_delta_stream: read_change_feed reads change commits and skip_change_commits passes over "
                "them; choose one."
            )
        if self.starting_version is not None and self.starting_timestamp is not None:
            raise SourceSettingsError(
                "read_delta_stream: give starting_version or starting_timestamp, not both "
                f"(found {self.starting_version!r} and {self.starting_timestamp!r})."
            )
        version = self.starting_version
        if version is not None and version != "latest":
            if isinstance(version, bool) or not isinstance(version, int) or version < 0:
                raise SourceSettingsError(
                    f"starting_version: expected a version number, 'latest' or None, found {version!r}."
                )
        if self.starting_timestamp is not None and self.starting_timestamp.tzinfo is None:
            raise SourceSettingsError(
                f"starting_timestamp: expected a time-zone-aware moment such as 2026-01-31T12:00:00Z, found "
                f"{self.starting_timestamp.isoformat()!r} without a zone."
            )

    @classmethod
    def of(
        cls,
        *,
        starting_version: int | str | None,
        starting_timestamp: datetime | str | None,
        max_files_per_trigger: int,
        max_bytes_per_trigger: int | None,
        read_change_feed: bool,
        skip_change_commits: bool,
    ) -> DeltaStreamOptions:
        """The options as ``read_delta_stream`` takes them (an ISO-8601 string is accepted for the moment)."""
        if isinstance(starting_version, str) and starting_version != "latest":
            raise SourceSettingsError(
                f"starting_version: expected a version number, 'latest' or None, found {starting_version!r}."
            )
        moment = starting_timestamp
        if isinstance(moment, str):
            try:
                moment = datetime.fromisoformat(moment)
            except ValueError:
                raise SourceSettingsError(
                    f"starting_timestamp: expected an ISO-8601 moment such as 2026-01-31T12:00:00Z, found "
                    f"{starting_timestamp!r}."
                ) from None
        return cls(
            starting_version=starting_version,  # type: ignore[arg-type]  # checked in __post_init__
            starting_timestamp=moment,
            max_files_per_trigger=max_files_per_trigger,
            max_bytes_per_trigger=max_bytes_per_trigger,
            read_change_feed=read_change_feed,
            skip_change_commits=skip_change_commits,
        )

    def spark_options(self) -> dict[str, str]:
        """The same options for Spark's Delta source (``readStream.format("delta")``)."""
        options = {"maxFilesPerTrigger": str(self.max_files_per_trigger)}
        if self.max_bytes_per_trigger is not None:
            options["maxBytesPerTrigger"] = str(self.max_bytes_per_trigger)
        if self.starting_version is not None:
            options["startingVersion"] = str(self.starting_version)
        if self.starting_timestamp is not None:
            # UTC with an explicit zone: Delta casts the string with the session's time zone otherwise.
            moment = self.starting_timestamp.astimezone(UTC)
            options["startingTimestamp"] = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if self.read_change_feed:
            options["readChangeFeed"] = "true"
        if self.skip_change_commits:
            options["skipChangeCommits"] = "true"
        return options


def choose_delta_reader(
    requested: str, *, spark_delta: bool, python_sources: bool
) -> Literal["spark", "python"]:
    """Which Delta reader runs: Spark's own where its classes load, else the Python source on Spark 4.

    Raises:
        SourceSettingsError: the requested reader cannot run in this Spark.
    """
    if requested not in DELTA_READERS:
        raise SourceSettingsError(
            f"--delta-reader: expected one of {', '.join(DELTA_READERS)}, found {requested!r}."
        )
    if requested in ("auto", "spark") and spark_delta:
        return "spark"
    if requested == "spark":
        raise SourceSettingsError(
            f"--delta-reader spark: Spark's Delta source ({SPARK_DELTA_PROVIDER}) is not on the classpath. "
            "Synapse ships it; elsewhere start Spark with the delta-spark package, or use --delta-reader "
            "python (Spark 4)."
        )
    if python_sources:
        return "python"
    raise SourceSettingsError(
        f"no Delta reader can run here: Spark's Delta source ({SPARK_DELTA_PROVIDER}) is not on the classpath "
        "and this Spark has no Python data sources (they came in 4.0). Run on Synapse (whose runtime ships "
        "Delta), start Spark with the delta-spark package, or use Spark 4."
    )


def spark_has_delta_source(spark: SparkSession) -> bool:
    """True when Spark's Delta source class loads in this session's JVM."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    try:
        jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(SPARK_DELTA_PROVIDER)
    except Exception:  # py4j wraps ClassNotFoundException in its own error type
        return False
    return True


def resolve_delta_reader(
    spark: SparkSession,
    requested: str,
    table_uri: str,
    storage_options: Mapping[str, str] | None = None,
) -> Literal["spark", "python"]:
    """The reader for one table in this session (see :func:`choose_delta_reader`), logged with the reason.

    A table on the Azurite emulator (its options say ``AZURE_STORAGE_USE_EMULATOR``) is out of Hadoop's reach
    (Azurite has no ADLS Gen2 endpoint), so ``auto`` reads it with the Python source there.
    """
    on_azurite = str((storage_options or {}).get("AZURE_STORAGE_USE_EMULATOR", "")).lower() == "true"
    spark_delta = spark_has_delta_source(spark) and not (requested == "auto" and on_azurite)
    python_sources = hasattr(spark, "dataSource")
    chosen = choose_delta_reader(requested, spark_delta=spark_delta, python_sources=python_sources)
    why = (
        f"requested {requested}"
        if requested != "auto"
        else "Delta's classes load"
        if chosen == "spark"
        else "no Delta classes here; Spark has Python data sources"
    )
    log.info(
        "delta source %s: %s reader (%s)", table_uri, "Spark's Delta" if chosen == "spark" else "Python", why
    )
    return chosen


def with_commit_columns(frame: DataFrame, *, change_feed: bool) -> DataFrame:
    """Spark's Delta rows with the Python source's extra columns, in its order (see the module docstring).

    With the change feed, Delta's own ``_change_type``, ``_commit_version``, ``_commit_timestamp`` are moved
    to ``_commit_version``, ``_commit_timestamp``, ``_change_type``; without it the first two are added, null.
    """
    from pyspark.sql import functions as F

    extra = (COMMIT_VERSION, COMMIT_TIMESTAMP, CHANGE_TYPE)
    table = [F.col(f"`{c}`") for c in frame.columns if c not in extra]
    if change_feed:
        return frame.select(*table, F.col(COMMIT_VERSION), F.col(COMMIT_TIMESTAMP), F.col(CHANGE_TYPE))
    return frame.select(
        *table,
        F.lit(None).cast("long").alias(COMMIT_VERSION),
        F.lit(None).cast("timestamp").alias(COMMIT_TIMESTAMP),
    )


def _latest_version(table_uri: str, storage_options: Mapping[str, str]) -> int:
    # Read with delta-rs (as the lake layer does, same credentials): a missing table fails with the kit's
    # error naming what to do, not with a JVM AnalysisException and its stack trace.
    return int(open_table(table_uri, storage_options).version())


def read_spark_delta_stream(
    spark: SparkSession,
    table_uri: str,
    options: DeltaStreamOptions,
    *,
    storage_options: Mapping[str, str] | None = None,
    check_table: bool = True,
) -> DataFrame:
    """The stream through Spark's own Delta source (``readStream.format("delta")``).

    Spark reads the table with its Hadoop file system settings (on Synapse, the workspace identity);
    ``storage_options`` serve only the check that the table exists and has ``starting_version``.
    """
    if check_table:
        latest = _latest_version(table_uri, storage_options or {})
        version = options.starting_version
        if isinstance(version, int) and version > latest:
            raise SourceSettingsError(
                f"starting_version: expected a version of the table between 0 and its latest, {latest}, "
                f"found {version}."
            )
    _reach(spark, table_uri, storage_options or {})
    frame = spark.readStream.format("delta").options(**options.spark_options()).load(table_uri)
    return with_commit_columns(frame, change_feed=options.read_change_feed)


def _reach(spark: SparkSession, table_uri: str, storage_options: Mapping[str, str]) -> None:
    """Give the session the table's bucket settings (an emulator's endpoint), as the lake's writer does."""
    from jobs.lake._jvm import hadoop_settings

    for key, value in hadoop_settings(table_uri, storage_options).items():
        spark.conf.set(key, value)


def read_spark_delta(spark: SparkSession, uri: str, *, version: int | None = None) -> DataFrame:
    """A batch DataFrame of the table through Spark's own Delta reader (now, or at ``version``)."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", str(version))
    return reader.load(uri)


def read_delta_stream(  # noqa: PLR0913 -- keyword-only source options, as DataStreamReader takes them
    spark: SparkSession,
    table_uri: str,
    *,
    storage_options: Mapping[str, str] | None = None,
    starting_version: int | str | None = None,
    starting_timestamp: datetime | str | None = None,
    max_files_per_trigger: int = 1000,
    max_bytes_per_trigger: int | None = None,
    read_change_feed: bool = False,
    skip_change_commits: bool = False,
    checkpoint_location: str | None = None,
    reader: str = "auto",
) -> DataFrame:
    """A streaming DataFrame over the commits of a Delta table (contract C4), on Spark 3.5 or 4.0.

    A fresh query reads the table's snapshot first (unless a starting version or timestamp says otherwise),
    then every new commit, each file exactly once; a restart resumes where the checkpoint stands.

    Args:
        spark: the session.
        table_uri: the table (local path, ``s3://``, ``abfss://``).
        storage_options: from ``jobs.lake.storage_options_for(table_uri, ...)``; never credentials.
        starting_version: read the commits from this version on (no snapshot); ``"latest"``: only commits
            made after the query starts. Used by a new query only, like every starting option.
        starting_timestamp: read the commits made at or after this moment (aware datetime or ISO-8601).
        max_files_per_trigger: at most this many files per micro-batch.
        max_bytes_per_trigger: at most about this many bytes per micro-batch (at least one file).
        read_change_feed: emit inserts, updates and deletes with ``_change_type`` instead of failing on
            commits that change data.
        skip_change_commits: pass over commits that remove or rewrite data instead of failing on them.
        checkpoint_location: the SAME checkpoint the query writes with (the Python source reads its offset
            log at start-up; Spark's Delta source needs none).
        reader: ``auto`` (Spark's Delta source where its classes load, else the Python one), ``spark`` or
            ``python``.

    Returns:
        A streaming DataFrame with the table's columns plus ``_commit_version`` (long) and
        ``_commit_timestamp`` (timestamp) and, with the change feed, ``_change_type`` (string). On Spark's
        reader without the change feed the two commit columns are null (see the module docstring).

    Raises:
        DeltaTableNotFoundError: there is no Delta table at ``table_uri``.
        SourceSettingsError: an option is invalid, or no reader can run in this Spark.
        DeltaLogError: the table uses reader features the Python source cannot read.
    """
    options = DeltaStreamOptions.of(
        starting_version=starting_version,
        starting_timestamp=starting_timestamp,
        max_files_per_trigger=max_files_per_trigger,
        max_bytes_per_trigger=max_bytes_per_trigger,
        read_change_feed=read_change_feed,
        skip_change_commits=skip_change_commits,
    )
    if resolve_delta_reader(spark, reader, table_uri, storage_options) == "spark":
        return read_spark_delta_stream(spark, table_uri, options, storage_options=storage_options)
    from jobs.sources import delta

    return delta.read_delta_stream(
        spark,
        table_uri,
        storage_options=storage_options,
        starting_version=options.starting_version,
        starting_timestamp=options.starting_timestamp,
        max_files_per_trigger=max_files_per_trigger,
        max_bytes_per_trigger=max_bytes_per_trigger,
        read_change_feed=read_change_feed,
        skip_change_commits=skip_change_commits,
        checkpoint_location=checkpoint_location,
    )


def read_delta(
    spark: SparkSession,
    uri: str,
    *,
    storage_options: Mapping[str, str] | None = None,
    version: int | None = None,
    reader: str = "auto",
) -> DataFrame:
    """A batch DataFrame of a Delta table's snapshot (now, or at ``version``), by the reader
    :func:`read_delta_stream` would use.

    Raises:
        DeltaTableNotFoundError: there is no Delta table at ``uri``.
        SourceSettingsError: ``version`` is not one of the table's, or no reader can run in this Spark.
    """
    if resolve_delta_reader(spark, reader, uri, storage_options) == "spark":
        _reach(spark, uri, storage_options or {})
        latest = _latest_version(uri, storage_options or {})
        if version is not None and not 0 <= version <= latest:
            raise SourceSettingsError(
                f"version: expected a version of {uri} between 0 and {latest}, found {version}."
            )
        return read_spark_delta(spark, uri, version=version)
    from jobs.sources import delta

    return delta.read_delta(spark, uri, storage_options=storage_options, version=version)


__all__ = [
    "DELTA_READERS",
    "SPARK_DELTA_PROVIDER",
    "DeltaReader",
    "DeltaStreamOptions",
    "choose_delta_reader",
    "read_delta",
    "read_delta_stream",
    "read_spark_delta",
    "read_spark_delta_stream",
    "resolve_delta_reader",
    "spark_has_delta_source",
    "with_commit_columns",
]
