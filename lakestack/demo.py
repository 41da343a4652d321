"""`lakestack demo`: the whole pipeline on one machine, then a reconciled report.

Emulators (``--cloud aws``: moto server; ``--cloud azure``: Azurite + a Kafka-protocol broker, see
``lakestack.targets``) -> Locust sends sales events -> Spark ingest job (Delta bronze table through delta-rs)
runs while events flow -> drain -> reconcile the ledger of acknowledged event ids against the table -> report
(terminal, reports/<timestamp>/report.{json,md}).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from lakestack.emulator import FaultSpec
from lakestack.errors import RunFailedError
from lakestack.reconcile import reconcile
from lakestack.report import RunReport
from lakestack.targets import Cloud, LoadPlan, LocalTarget, start_target

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from loadtest.ledger import LedgerEntry

_TRIGGER = "processing-time=1s"
_DRAIN_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class DemoSettings:
    events: int = 10_000
    rate: float = 1_000.0
    users: int = 4
    port: int | None = None
    reports_dir: Path = Path("reports")
    keep_emulator: bool = False
    max_records_per_shard: int = 10_000
    # Faults the emulator injects once provisioned (None: none), and the seed of their generator.
    faults: FaultSpec | None = None
    faults_seed: int | None = None
    cloud: Cloud = "aws"


class Progress:
    """One status line, rewritten in place on a terminal and printed every few seconds otherwise."""

    def __init__(self, stream: TextIO = sys.stderr, *, every_s: float = 5.0) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.every_s = every_s
        self._last = 0.0
        self._started = time.monotonic()

    def step(self, message: str) -> None:
        self.line(message, force=True)
        if self.tty:
            self.stream.write("\n")

    def line(self, message: str, *, force: bool = False) -> None:
        now = time.monotonic()
        stamp = f"[{now - self._started:6.1f}s] {message}"
        if self.tty:
            self.stream.write("\r\033[K" + stamp)
            self.stream.flush()
        elif force or now - self._last >= self.every_s:
            self.stream.write(stamp + "\n")
            self.stream.flush()
            self._last = now

    def done(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


class _LedgerCount:
    """Lines in the ledger files so far, reading only what was appended since the last call."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._offsets: dict[Path, int] = {}
        self.lines = 0

    def update(self) -> int:
        for path in self._directory.glob("ledger-*.jsonl"):
            with path.open("rb") as handle:
                handle.seek(self._offsets.get(path, 0))
                chunk = handle.read()
            # Count whole lines only; a line still being written is counted on a later call.
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self._offsets[path] = self._offsets.get(path, 0) + len(complete)
            self.lines += complete.count(b"\n")
        return self.lines


class _Ingested:
    """Rows read per micro-batch, collected from query progress as it is polled.

    `recentProgress` keeps only the last 100 events and idle triggers report too, so a total over it alone
    would fall short on a long run; keyed by batch id, each poll adds what the buffer still holds.
    """

    def __init__(self, query: StreamingQuery) -> None:
        self._query = query
        self._rows: dict[int, int] = {}

    def update(self) -> int:
        for progress in self._query.recentProgress or []:
            rows = int(progress.get("numInputRows", 0))
            if rows:
                self._rows[int(progress["batchId"])] = rows
        return sum(self._rows.values())

    @property
    def batches(self) -> int:
        return len(self._rows)


def _wait_for(
    condition: Callable[[], bool], *, timeout_s: float, tick: Callable[[], None], poll_s: float = 0.5
) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        tick()
        time.sleep(poll_s)
    return condition()


@dataclass(frozen=True)
class _Landed:
    event_ids: list[str]
    latencies_s: list[float]
    files: int
    version: int
    first_event_s: float | None
    last_commit_s: float | None


def _landed_rows(table_uri: str, storage_options: dict[str, str]) -> _Landed:
    """Event ids, latencies (event_time -> commit timestamp), files and version of the bronze table."""
    from deltalake import DeltaTable

    from jobs.lake import DeltaRsEngine

    table = DeltaTable(table_uri, storage_options=storage_options)
    commit_time = {
        record.batch_id: record.timestamp.timestamp()
        for record in DeltaRsEngine().table(table_uri, storage_options=storage_options).commits()
        if record.batch_id is not None
    }
    # Through the dataset: to_pyarrow_table() on an abfss:// table can abort the interpreter at exit
    # (delta-rs 1.6 with pyarrow's I/O threads).
    data = table.to_pyarrow_dataset().to_table(columns=["data", "batch_id"]).to_pydict()
    ids: list[str] = []
    latencies: list[float] = []
    first_event: float | None = None
    last_commit: float | None = None
    for payload, batch_id in zip(data["data"], data["batch_id"], strict=True):
        event = json.loads(payload)
        ids.append(event["event_id"])
        sent = datetime.fromisoformat(event["event_time"]).timestamp()
        first_event = sent if first_event is None else min(first_event, sent)
        committed = commit_time.get(batch_id)
        if committed is not None:
            latencies.append(committed - sent)
            last_commit = committed if last_commit is None else max(last_commit, committed)
    return _Landed(ids, latencies, len(table.file_uris()), table.version(), first_event, last_commit)


def _send_rate(entries: list[LedgerEntry]) -> float | None:
    """Acknowledged events per second of generation time (first to last `event_time`)."""
    stamps = [datetime.fromisoformat(entry.event_time).timestamp() for entry in entries]
    span = max(stamps) - min(stamps) if len(stamps) > 1 else 0.0
    return round(len(stamps) / span, 1) if span > 0 else None


@contextlib.contextmanager
def _scoped_environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in this process's environment for the run only; what was there before comes back.

    The ingest job's driver side (foreachBatch, the metrics reader) runs in this process and finds its
    credentials through boto3's default chain, as it does on a cluster; the emulator's dummy credentials
    must not outlive the run in a process that may go on to talk to real AWS.
    """
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class DemoRun(contextlib.AbstractContextManager["DemoRun"]):
    """One demo run, as named steps; the context owns the emulator, Spark and Locust and stops them all.

    Steps, in order: :meth:`start_emulator`, :meth:`start_ingest`, :meth:`send_load`, :meth:`drain`,
    :meth:`report`. Leaving the context (normally or on an error) stops the Locust process, the query,
    Spark and the emulator (unless ``keep_emulator``), in that order, and restores the environment.
    """

    def __init__(self, settings: DemoSettings, show: Progress) -> None:
        self.settings = settings
        self.show = show
        self.started_at = datetime.now(UTC)
        self.run_dir = settings.reports_dir / self.started_at.strftime("%Y%m%dT%H%M%SZ")
        self.ledger_dir = self.run_dir / "ledger"
        self.notes: list[str] = []
        self._clock = time.monotonic()
        self._stack = contextlib.ExitStack()
        self._target: LocalTarget | None = None
        self._spark: SparkSession | None = None
        self._query: StreamingQuery | None = None
        self._ingested: _Ingested | None = None

    def __enter__(self) -> DemoRun:
        self.ledger_dir.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, *exc_info: object) -> None:
        query, spark = self._query, self._spark
        if query is not None and query.isActive:
            query.stop()
        if spark is not None:
            spark.stop()
        self._stack.close()

    @property
    def target(self) -> LocalTarget:
        if self._target is None:
            raise RunFailedError("the demo's steps ran out of order: the emulator is not started.")
        return self._target

    @property
    def query(self) -> StreamingQuery:
        if self._query is None:
            raise RunFailedError("the demo's steps ran out of order: the ingest job is not started.")
        return self._query

    def start_emulator(self) -> None:
        target = start_target(
            self.settings.cloud,
            self.run_dir,
            port=self.settings.port,
            faults=self.settings.faults,
            faults_seed=self.settings.faults_seed,
            say=self.show.step,
        )
        self._stack.callback(self._release_target, target)
        self._target = target
        # This process and its children (Spark's Python workers, Locust) talk only to the emulators.
        self._stack.enter_context(_scoped_environ(self.environment()))
        self.show.step(target.summary())

    def environment(self) -> dict[str, str]:
        """What the run's processes need in their environment to reach the emulators."""
        return self.target.environment()

    def _release_target(self, target: LocalTarget) -> None:
        kept = target.close(keep=self.settings.keep_emulator)
        if kept:
            self.show.step(kept)

    def start_ingest(self) -> None:
        from jobs import ingest
        from jobs.session import build_session

        self.show.step("starting Spark (local mode) and the ingest job")
        spark = build_session("lakestack-demo")
        self._spark = spark
        job = self.target.ingest_settings(
            checkpoint=str((self.run_dir / "checkpoint").resolve()),
            trigger=_TRIGGER,
            max_records=self.settings.max_records_per_shard,
        )
        query = ingest.start(spark, job)
        self._query = query
        self._ingested = _Ingested(query)
        # Let the first (empty) trigger pay for Python worker start-up before events flow, so latency
        # measures the pipeline's steady state rather than Spark's cold start.
        _wait_for(
            lambda: query.lastProgress is not None or query.exception() is not None,
            timeout_s=120,
            tick=lambda: self.show.line("waiting for the ingest job's first trigger"),
        )

    def _locust_argv(self) -> list[str]:
        settings = self.settings
        run_time_cap = max(60, int(4 * settings.events / settings.rate) + 30)
        plan = LoadPlan(
            ledger_dir=str(self.ledger_dir),
            users=settings.users,
            run_time=f"{run_time_cap}s",
            max_events=settings.events,
            target_rate=settings.rate,
            csv_prefix=str(self.run_dir / "locust"),
            html=str(self.run_dir / "locust.html"),
        )
        return self.target.locust_run(plan).argv()

    def send_load(self) -> int:
        """Run Locust to its event budget while the job ingests; return the events acknowledged."""
        settings, query = self.settings, self.query
        ingested, acked = self._counter(), _LedgerCount(self.ledger_dir)
        self.show.step(
            f"sending {settings.events:,} sales events at {settings.rate:,.0f}/s with Locust ({settings.users} users)"
        )
        send_started = time.monotonic()
        log_path = self.run_dir / "locust.log"
        with log_path.open("wb") as locust_log:
            locust = subprocess.Popen(
                self._locust_argv(),
                stdout=locust_log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.environment()},
            )
            try:
                while locust.poll() is None:
                    self.show.line(
                        f"sent {acked.update():,}/{settings.events:,} acknowledged | ingested {ingested.update():,}"
                    )
                    if query.exception() is not None:
                        break
                    time.sleep(0.5)
            finally:
                if locust.poll() is None:
                    locust.terminate()
                locust.wait(timeout=30)
        acked_total = acked.update()
        if locust.returncode != 0:
            self.notes.append(f"Locust exited with status {locust.returncode}; see {log_path}")
        self.show.step(
            f"Locust done: {acked_total:,} events acknowledged in {time.monotonic() - send_started:.1f}s; "
            "draining the stream"
        )
        return acked_total

    def _counter(self) -> _Ingested:
        if self._ingested is None:
            raise RunFailedError("the demo's steps ran out of order: the ingest job is not started.")
        return self._ingested

    def drain(self, acked_total: int) -> None:
        """Wait until the job has read everything sent, then stop it.

        Raises:
            RunFailedError: the ingest query failed.
        """
        from jobs import ingest

        query, ingested = self.query, self._counter()
        sent_by = datetime.now(UTC)

        def caught_up() -> bool:
            return query.exception() is not None or ingest.caught_up(query, since=sent_by)

        def tick() -> None:
            self.show.line(f"draining: ingested {ingested.update():,}/{acked_total:,}")

        if not _wait_for(caught_up, timeout_s=_DRAIN_TIMEOUT_S, tick=tick):
            self.notes.append(f"the stream was not drained within {_DRAIN_TIMEOUT_S:.0f}s")
        error = query.exception()
        query.stop()
        if error is not None:
            raise RunFailedError(
                f"the ingest query failed: {error}. Its checkpoint and logs are in {self.run_dir}."
            )
        ingested.update()

    def report(self) -> RunReport:
        """Reconcile the ledger of acknowledged events against the bronze table."""
        from loadtest.ledger import read_ledger

        table_uri = self.target.table_uri
        faults = self.target.fault_report(
            ledger_dir=self.ledger_dir, checkpoint=str((self.run_dir / "checkpoint").resolve())
        )
        self.show.step("reconciling the ledger against the table")
        entries = read_ledger(self.ledger_dir)
        landed = _landed_rows(table_uri, self.target.storage_options())
        result = reconcile([entry.event_id for entry in entries], landed.event_ids)
        self.notes.extend(_stream_notes(entries, result.missing_sample))
        span = (
            landed.last_commit_s - landed.first_event_s
            if landed.last_commit_s is not None and landed.first_event_s is not None
            else None
        )
        return RunReport.build(
            result,
            latencies_s=landed.latencies_s,
            throughput_eps=round(result.landed / span, 1) if span else None,
            send_rate_eps=_send_rate(entries),
            table_uri=table_uri,
            files=landed.files,
            table_version=landed.version,
            micro_batches=self._counter().batches,
            duration_s=round(time.monotonic() - self._clock, 1),
            started_at=self.started_at.isoformat(timespec="seconds"),
            notes=tuple(self.notes),
            faults=faults,
        )


def _stream_notes(entries: list[LedgerEntry], missing: Sequence[str]) -> list[str]:
    """Positions the stream acknowledged twice, and where each missing event was acknowledged."""
    notes: list[str] = []
    positions = Counter((entry.shard_id, entry.sequence_number) for entry in entries)
    reused = sorted(position for position, count in positions.items() if count > 1)
    if reused:
        # Two events acknowledged at one position: the stream itself kept only one of them.
        shown = ", ".join(f"{shard}@{sequence}" for shard, sequence in reused[:3])
        notes.append(f"the stream acknowledged {len(reused)} position(s) twice ({shown}): it lost events")
    where = {entry.event_id: entry for entry in entries}
    for event_id in missing:
        entry = where[event_id]
        notes.append(
            f"missing {event_id}: acknowledged in {entry.shard_id} at sequence {entry.sequence_number}"
        )
    return notes


def run_demo(settings: DemoSettings, *, progress: Progress | None = None) -> RunReport:
    """Run the demo end to end and return its report (also written under `settings.reports_dir`).

    Raises:
        RunFailedError: the ingest query failed.
        EmulatorError: the emulator could not start.
    """
    show = progress or Progress()
    with DemoRun(settings, show) as run:
        run.start_emulator()
        run.start_ingest()
        acked_total = run.send_load()
        run.drain(acked_total)
        report = run.report()
    show.done()
    json_path, md_path = report.write(run.run_dir)
    print(report.to_text())
    print(f"\nreport: {md_path} and {json_path}")
    return report
