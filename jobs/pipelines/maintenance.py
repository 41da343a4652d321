"""The ``maintenance`` job: compaction (bin-packing or Z-order), vacuum and log checkpoints for any Delta table.

``python -m jobs maintenance --table URI [--table URI ...] [--compact] [--z-order COLS] [--vacuum-retention 168h]
[--checkpoint-log] [--every 10m | --every-commits N]``. It runs beside streaming jobs: compaction only
rewrites files the table already has and retries when a writer's commit lands first; vacuum removes only
files no version within the retention needs. Every run is logged and recorded in ``<lake>/_maintenance``.
"""

from __future__ import annotations

import argparse
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pyarrow as pa

from jobs._options import parse_duration, parse_size
from jobs._retry import RetryPolicy
from jobs._run import stop_on_signals
from jobs.errors import JobError, SettingsError
from jobs.lake import (
    LakeTable,
    LakeTableNotFoundError,
    maintenance_engine,
    scoped_storage_options,
    spark_job_engine,
    with_retries,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

MAINTENANCE_TABLE = "_maintenance"
# Below this, a full vacuum (which also deletes files no commit references) could delete the files of a
# write that is still in flight beside it.
MIN_FULL_VACUUM_RETENTION = timedelta(hours=1)
# OPTIMIZE races every writer that rewrites files (MERGE, DELETE): more tries than an append needs.
MAINTENANCE_RETRY = RetryPolicy(max_attempts=8, base_delay_s=0.5, max_delay_s=10.0)

_RECORD_FIELDS: list[tuple[str, pa.DataType]] = [
    ("run_id", pa.string()),
    ("table_uri", pa.string()),
    ("operations", pa.string()),
    ("started_at", pa.timestamp("us", tz="UTC")),
    ("duration_s", pa.float64()),
    ("version_before", pa.int64()),
    ("version_after", pa.int64()),
    ("files_before", pa.int64()),
    ("bytes_before", pa.int64()),
    ("files_after", pa.int64()),
    ("bytes_after", pa.int64()),
    ("files_compacted", pa.int64()),
    ("files_written", pa.int64()),
    ("vacuumed_files", pa.int64()),
    ("vacuumed", pa.list_(pa.string())),
    ("checkpoint_version", pa.int64()),
    ("error", pa.string()),
]
RECORD_SCHEMA = pa.schema(_RECORD_FIELDS)


@dataclass(frozen=True)
class MaintenanceSettings:
    """What to maintain, how, and when; validated once at start-up.

    Attributes:
        tables: table URIs to maintain.
        lake: where ``_maintenance`` lives (default: the folder holding the first table).
        compact: bin-pack small files into ``target_file_size`` ones.
        target_file_size: bytes (None: delta-rs' default, 100 MiB).
        z_order: cluster by these columns (rewrites the table; replaces bin-packing).
        vacuum_retention: delete files unreferenced for longer than this (None: no vacuum).
        vacuum_full: also delete files no commit ever referenced (left by failed writes).
        checkpoint_log: write a log checkpoint.
        every: run on this period (None and no ``every_commits``: run once).
        every_commits: run on a table once it has this many new commits.
        poll: how often ``every_commits`` looks at the tables' versions.
        max_runs: stop after this many runs (None: until stopped).
    """

    tables: tuple[str, ...]
    lake: str | None = None
    compact: bool = True
    target_file_size: int | None = None
    z_order: tuple[str, ...] = ()
    vacuum_retention: timedelta | None = None
    vacuum_full: bool = False
    checkpoint_log: bool = True
    every: timedelta | None = None
    every_commits: int | None = None
    poll: timedelta = timedelta(seconds=10)
    max_runs: int | None = None
    endpoint_url: str | None = None
    region: str | None = None

    def __post_init__(self) -> None:
        if not self.tables or any(not t for t in self.tables):
            raise SettingsError("--table: expected at least one Delta table URI, found none.")
        if self.every is not None and self.every_commits is not None:
            raise SettingsError("--every and --every-commits: expected one schedule, found both; pick one.")
        if self.every is not None and self.every <= timedelta(0):
            raise SettingsError(f"--every: expected a positive duration, found {self.every}.")
        if self.every_commits is not None and self.every_commits < 1:
            raise SettingsError(f"--every-commits: expected a whole number >= 1, found {self.every_commits}.")
        if self.max_runs is not None and self.max_runs < 1:
            raise SettingsError(f"--max-runs: expected a whole number >= 1, found {self.max_runs}.")
        if self.vacuum_full and self.vacuum_retention is None:
            raise SettingsError("--vacuum-full: needs --vacuum-retention (e.g. 168h); found no retention.")
        if self.vacuum_retention is not None and self.vacuum_retention < timedelta(0):
            raise SettingsError(f"--vacuum-retention: expected 0h or more, found {self.vacuum_retention}.")
        if (
            self.vacuum_full
            and self.vacuum_retention is not None
            and self.vacuum_retention < MIN_FULL_VACUUM_RETENTION
        ):
            raise SettingsError(
                f"--vacuum-full with --vacuum-retention {self.vacuum_retention}: expected at least "
                f"{MIN_FULL_VACUUM_RETENTION}, because a full vacuum also deletes files a running writer has "
                "written but not yet committed. Use a longer retention, or drop --vacuum-full."
            )
        if not self.operations:
            raise SettingsError(
                "expected at least one operation (--compact, --z-order, --vacuum-retention, --checkpoint-log), "
                "found none."
            )

    @property
    def operations(self) -> tuple[str, ...]:
        """The operations each run performs, in the order it performs them."""
        ops = []
        if self.z_order:
            ops.append("z-order")
        elif self.compact:
            ops.append("compact")
        if self.vacuum_retention is not None:
            ops.append("vacuum-full" if self.vacuum_full else "vacuum")
        if self.checkpoint_log:
            ops.append("checkpoint")
        return tuple(ops)

    @property
    def record_lake(self) -> str:
        """The lake root holding ``_maintenance``."""
        if self.lake:
            return self.lake
        first = self.tables[0].rstrip("/")
        parent = first.rsplit("/", 1)[0] if "/" in first else "."
        # s3://bucket/table has the bucket root as its parent.
        return parent if not parent.endswith(":/") else first

    def options_for(self, uri: str) -> dict[str, str]:
        return scoped_storage_options(uri, endpoint_url=self.endpoint_url, region=self.region)


@dataclass(frozen=True)
class MaintenanceRecord:
    """One table's maintenance in one run: a row of ``_maintenance``."""

    run_id: str
    table_uri: str
    operations: str
    started_at: datetime
    duration_s: float
    version_before: int
    version_after: int
    files_before: int
    bytes_before: int
    files_after: int
    bytes_after: int
    files_compacted: int = 0
    files_written: int = 0
    vacuumed_files: int = 0
    vacuumed: list[str] = field(default_factory=list)
    checkpoint_version: int | None = None
    error: str | None = None


def maintain_table(
    table: LakeTable, settings: MaintenanceSettings, *, run_id: str, retry: RetryPolicy | None = None
) -> MaintenanceRecord:
    """Run the configured operations on one table; an error after the retries is recorded, not raised.

    Raises:
        LakeTableNotFoundError: there is no table at the URI (a user's mistake, not a maintenance failure).
    """
    policy = retry or MAINTENANCE_RETRY
    started, clock = datetime.now(UTC), time.perf_counter()
    before = table.file_stats()
    compacted = written = 0
    vacuumed: list[str] = []
    checkpoint: int | None = None
    error: str | None = None
    try:
        if settings.z_order or settings.compact:
            result = with_retries(
                lambda: table.compact(
                    z_order_by=list(settings.z_order) or None, target_file_size=settings.target_file_size
                ),
                what=f"{'Z-order' if settings.z_order else 'compaction'} of {table.uri}",
                policy=policy,
            )
            compacted, written = result.files_removed, result.files_added
        if settings.vacuum_retention is not None:
            # Delta's retention is whole hours; round up so nothing younger than asked is removed.
            hours = math.ceil(settings.vacuum_retention.total_seconds() / 3600)
            vacuumed = with_retries(
                lambda: table.vacuum(retention_hours=hours, full=settings.vacuum_full),
                what=f"vacuum of {table.uri}",
                policy=policy,
            )
        if settings.checkpoint_log:
            checkpoint = with_retries(table.checkpoint, what=f"log checkpoint of {table.uri}", policy=policy)
    except (JobError, OSError) as failure:
        error = str(failure)
        log.error("maintenance: %s: %s", table.uri, failure)
    after = table.file_stats()
    return MaintenanceRecord(
        run_id=run_id,
        table_uri=table.uri,
        operations=",".join(settings.operations),
        started_at=started,
        duration_s=round(time.perf_counter() - clock, 3),
        version_before=before.version,
        version_after=after.version,
        files_before=before.files,
        bytes_before=before.bytes,
        files_after=after.files,
        bytes_after=after.bytes,
        files_compacted=compacted,
        files_written=written,
        vacuumed_files=len(vacuumed),
        vacuumed=vacuumed,
        checkpoint_version=checkpoint,
        error=error,
    )


def record(table: LakeTable, records: Sequence[MaintenanceRecord], *, app_id: str, batch_id: int) -> None:
    """Append the run's records to the ``_maintenance`` table (one commit, idempotent on the run)."""
    rows = pa.Table.from_pylist([asdict(r) for r in records], schema=RECORD_SCHEMA)
    with_retries(
        lambda: table.append(rows, app_id=app_id, batch_id=batch_id),
        what=f"record of maintenance run {batch_id} in {table.uri}",
    )


def describe(record: MaintenanceRecord) -> str:
    """One log line a person reads: what ran, files and bytes before and after, what was removed."""
    outcome = f"FAILED: {record.error}" if record.error else "ok"
    return (
        f"maintenance: {record.table_uri} [{record.operations}] {outcome} in {record.duration_s:.2f}s: "
        f"files {record.files_before} -> {record.files_after}, "
        f"{_size(record.bytes_before)} -> {_size(record.bytes_after)}, "
        f"rewrote {record.files_compacted} into {record.files_written}, vacuumed {record.vacuumed_files}, "
        f"version {record.version_before} -> {record.version_after}"
    )


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


class Schedule:
    """When each table is due: at start, then every ``every``, or once it has ``every_commits`` new commits.

    Pure bookkeeping (no clock, no I/O), so the rules are tested as tables of cases.
    """

    def __init__(self, settings: MaintenanceSettings) -> None:
        self._every = settings.every
        self._commits = settings.every_commits
        self._next_at: datetime | None = None
        self._baseline: dict[str, int] = {}

    @property
    def once(self) -> bool:
        return self._every is None and self._commits is None

    def due(self, now: datetime, versions: dict[str, int]) -> list[str]:
        """The tables to maintain now, given each table's latest version."""
        if self._commits is not None:
            return [
                uri
                for uri, version in versions.items()
                if uri not in self._baseline or version - self._baseline[uri] >= self._commits
            ]
        if self._next_at is None or now >= self._next_at:
            return list(versions)
        return []

    def done(self, now: datetime, versions_after: dict[str, int]) -> None:
        """Record a run: the next period starts, and each table's own commits stop counting as new."""
        if self._every is not None:
            self._next_at = now + self._every
        self._baseline.update(versions_after)

    def wait_s(self, now: datetime, poll: timedelta) -> float:
        """Seconds until the next look."""
        if self._next_at is not None and self._commits is None:
            return max(0.0, (self._next_at - now).total_seconds())
        return poll.total_seconds()


class MaintenanceRunner:
    """Runs maintenance on a schedule until ``max_runs`` or until ``stop`` is set."""

    def __init__(
        self,
        settings: MaintenanceSettings,
        *,
        spark: SparkSession | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        """``spark``: the session to run OPTIMIZE / VACUUM / checkpoints in (default: the active one, or a new
        one); delta-spark does the work on the executors, except on tables Spark cannot reach here (Azurite)."""
        self.settings = settings
        if spark is None:
            from jobs.session import build_session

            spark = build_session("lakestack-maintenance")

        def table(uri: str) -> LakeTable:
            options = settings.options_for(uri)
            return maintenance_engine(spark, uri, options).table(uri, storage_options=options)

        self.tables = {uri: table(uri) for uri in settings.tables}
        # The run's records are a few rows per table: the one write of driver-side rows this job makes.
        journal = f"{settings.record_lake.rstrip('/')}/{MAINTENANCE_TABLE}"
        options = settings.options_for(journal)
        self.journal = spark_job_engine(spark, options).table(journal, storage_options=options)
        self.app_id = f"lakestack-maintenance-{uuid.uuid4()}"
        self.records: list[MaintenanceRecord] = []
        self._retry = retry
        self._runs = 0

    def preflight(self) -> None:
        """The cheap checks before the first run: each ``--table`` is a Delta table these credentials may read
        (and has the ``--z-order`` columns), and ``_maintenance`` under ``--lake`` may be written.

        Raises:
            SettingsError: (or a subclass) naming the flag, the place and the fix; exit 2.
        """
        from deltalake import DeltaTable

        from jobs.lake import check_table_readable, check_table_writable

        for uri in self.tables:
            options = self.settings.options_for(uri)
            check_table_readable(uri, storage_options=options, flag="--table")
            if self.settings.z_order:
                columns = DeltaTable(uri, storage_options=options or None).schema().to_arrow().names
                unknown = [c for c in self.settings.z_order if c not in columns]
                if unknown:
                    raise SettingsError(
                        f"--z-order: expected columns of {uri}, found {', '.join(unknown)} among "
                        f"{', '.join(columns)}. Name columns the table has."
                    )
        lake = self.settings.record_lake
        check_table_writable(self.journal.uri, storage_options=self.settings.options_for(lake), flag="--lake")

    def check_tables(self) -> dict[str, int]:
        """The tables' latest versions.

        Raises:
            LakeTableNotFoundError: naming the table that is not there.
        """
        versions = {}
        for uri, table in self.tables.items():
            version = table.version()
            if version is None:
                raise LakeTableNotFoundError(
                    f"--table {uri}: expected a Delta table there, found no _delta_log. Check the URI (and "
                    "--endpoint-url/--region for s3://)."
                )
            versions[uri] = version
        return versions

    def run_once(self, uris: Sequence[str]) -> list[MaintenanceRecord]:
        """Maintain ``uris`` now, record the run, and return its records."""
        run_id = str(uuid.uuid4())
        records = [
            maintain_table(self.tables[uri], self.settings, run_id=run_id, retry=self._retry) for uri in uris
        ]
        record(self.journal, records, app_id=self.app_id, batch_id=self._runs)
        self._runs += 1
        for item in records:
            (log.error if item.error else log.info)("%s", describe(item))
        self.records.extend(records)
        return records

    def run(self, stop: threading.Event, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> int:
        """Run as scheduled; return 0, or 1 when any table's maintenance failed."""
        schedule = Schedule(self.settings)
        versions = self.check_tables()
        while not stop.is_set():
            due = schedule.due(clock(), versions)
            if due:
                self.run_once(due)
                versions = self.check_tables()
                schedule.done(clock(), versions)
            if schedule.once or (self.settings.max_runs is not None and self._runs >= self.settings.max_runs):
                break
            stop.wait(schedule.wait_s(clock(), self.settings.poll))
            versions = self.check_tables()
        return 1 if any(r.error for r in self.records) else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The maintenance job's flags."""
    parser.add_argument(
        "--table",
        action="append",
        required=True,
        dest="tables",
        metavar="URI",
        help="a Delta table URI (repeat for more)",
    )
    parser.add_argument(
        "--lake",
        default=None,
        metavar="URI",
        help="lake root for <lake>/_maintenance (default: the table's folder)",
    )
    parser.add_argument(
        "--compact", action="store_true", help="bin-pack small files (default when no operation is named)"
    )
    parser.add_argument(
        "--target-file-size",
        default=None,
        metavar="SIZE",
        help="file size to pack to, e.g. 128MiB (default 100MiB)",
    )
    parser.add_argument(
        "--z-order",
        default=None,
        metavar="COLS",
        help="cluster by these comma-separated columns (rewrites the table)",
    )
    parser.add_argument(
        "--vacuum-retention",
        default=None,
        metavar="DURATION",
        help="vacuum files unreferenced for longer than this, e.g. 168h (time travel stops there); no vacuum "
        "without it",
    )
    parser.add_argument(
        "--vacuum-full",
        action="store_true",
        help="also delete files no commit referenced (needs >= 1h retention)",
    )
    parser.add_argument(
        "--checkpoint-log",
        action="store_true",
        help="write a log checkpoint (default when no operation is named)",
    )
    parser.add_argument(
        "--every", default=None, metavar="DURATION", help="run on this period, e.g. 10m (default: run once)"
    )
    parser.add_argument(
        "--every-commits", type=int, default=None, metavar="N", help="run on a table after N new commits"
    )
    parser.add_argument(
        "--poll",
        default="10s",
        metavar="DURATION",
        help="how often --every-commits checks (default: %(default)s)",
    )
    parser.add_argument(
        "--max-runs", type=int, default=None, metavar="N", help="stop after N runs (default: until stopped)"
    )
    parser.add_argument(
        "--endpoint-url",
        default=None,
        metavar="URL",
        help="S3 endpoint for an emulator, e.g. http://127.0.0.1:4566",
    )
    parser.add_argument("--region", default=None, help="AWS region of s3:// tables")


def settings_from_args(args: argparse.Namespace) -> MaintenanceSettings:
    named = args.compact or args.z_order or args.vacuum_retention or args.checkpoint_log
    return MaintenanceSettings(
        tables=tuple(args.tables),
        lake=args.lake,
        compact=args.compact or not named,
        target_file_size=None
        if args.target_file_size is None
        else parse_size(args.target_file_size, name="--target-file-size"),
        z_order=tuple(c.strip() for c in (args.z_order or "").split(",") if c.strip()),
        vacuum_retention=None
        if args.vacuum_retention is None
        else parse_duration(args.vacuum_retention, name="--vacuum-retention"),
        vacuum_full=args.vacuum_full,
        checkpoint_log=args.checkpoint_log or not named,
        every=None if args.every is None else parse_duration(args.every, name="--every"),
        every_commits=args.every_commits,
        poll=parse_duration(args.poll, name="--poll"),
        max_runs=args.max_runs,
        endpoint_url=args.endpoint_url,
        region=args.region,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jobs maintenance",
        description="Compact (bin-packing or Z-order), vacuum and checkpoint Delta tables, once or on a "
        "schedule, beside running streams; every run is recorded in <lake>/_maintenance.",
    )
    add_arguments(parser)
    settings = settings_from_args(parser.parse_args(argv))
    runner = MaintenanceRunner(settings)
    runner.preflight()
    with stop_on_signals(log, "maintenance", after="the current run") as stop:
        return runner.run(stop)


__all__ = [
    "MAINTENANCE_TABLE",
    "MaintenanceRecord",
    "MaintenanceRunner",
    "MaintenanceSettings",
    "Schedule",
    "add_arguments",
    "main",
    "maintain_table",
    "settings_from_args",
]
