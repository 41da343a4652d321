"""`lakestack demo`: the whole pipeline on one machine, then a reconciled report.

Emulators (``--cloud aws``: moto server; ``--cloud azure``: Azurite + a Kafka-protocol broker, see
``lakestack.targets``) -> Locust sends each needed scenario's events (one Locust per scenario, at once) ->
Spark runs the ingest job (Delta bronze table through delta-rs) and every
selected pipeline (``--pipelines``, plug-ins in ``lakestack.demo_pipelines``) while events flow -> drain, in
pipeline order -> reconcile: ingest by bronze position against the ledgers, each pipeline against its
scenario's ground truth -> report (terminal, reports/<timestamp>/report.{json,md}).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from lakestack.demo_pipelines import Loads, RunContext, ScenarioLoad, scenarios_for, select
from lakestack.demo_pipelines.ingest import IngestPipeline
from lakestack.emulator import FaultSpec
from lakestack.errors import RunFailedError
from lakestack.report import RunReport
from lakestack.targets import Cloud, LoadPlan, LocalTarget, start_target
from lakestack.timeline import CostModel, Timeline

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from lakestack.bench.loadgen import LoadGenerators
    from lakestack.rate_sweep import BacklogSample, RateResult


log = logging.getLogger(__name__)
T = TypeVar("T")

# What the emulator costs: nothing; the cost plot says so rather than staying blank.
EMULATOR_COST = CostModel(note="embedded emulator: no cloud charges")
_TRIGGER = "processing-time=1s"
_DRAIN_TIMEOUT_S = 120.0
# How long Locust may take beyond its planned run to stop (users finish the batch in flight); how long it then
# has to exit once told to is lakestack.bench.loadgen's.
_LOCUST_GRACE_S = 60.0
# A streaming query asked to stop waits for its micro-batch at most this long (Spark's default: forever).
_QUERY_STOP_TIMEOUT = "60s"


@dataclass(frozen=True)
class DemoSettings:
    """One demo run. ``events``, ``rate`` and ``users`` are per scenario; ``pipelines`` None means all."""

    events: int = 10_000
    rate: float = 1_000.0
    users: int = 4
    port: int | None = None
    reports_dir: Path = Path("reports")
    keep_emulator: bool = False
    max_records_per_shard: int = 10_000
    pipelines: tuple[str, ...] | None = None
    # Faults the emulator injects once provisioned (None: none), and the seed of their generator.
    faults: FaultSpec | None = None
    faults_seed: int | None = None
    cloud: Cloud = "aws"
    # A time-bound load (`lakestack bench`): each scenario's Locust follows ``shape`` for ``duration_s``
    # seconds, peaking at ``users`` and at most ``rate`` events/s, instead of sending ``events`` events.
    duration_s: float | None = None
    shape: str | None = None
    # Where the pipelines' Spark runs (None: local[2]) and settings over the defaults: every job of the run
    # shares this one session, as `--spark-master` / `--spark-conf` give each job run alone.
    spark_master: str | None = None
    spark_conf: Mapping[str, str] = field(default_factory=dict)

    def load_summary(self, scenarios: Sequence[str]) -> str:
        """What the load step sends, in words."""
        names = ", ".join(scenarios)
        if self.duration_s is not None:
            return (
                f"events of each of {names} for {self.duration_s:g}s ({self.shape or 'constant'} shape, up to "
                f"{self.users} users and {self.rate:,.0f}/s each)"
            )
        return f"{self.events:,} events of each of {names} at {self.rate:,.0f}/s with Locust ({self.users} users each)"


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


class _Throttled:
    """``make()``'s value, made again at most every ``every_s`` (a progress line that reads a table)."""

    def __init__(self, make: Callable[[], str], *, every_s: float) -> None:
        self._make = make
        self._every_s = every_s
        self._at = -math.inf
        self._value = ""

    def __call__(self) -> str:
        now = time.monotonic()
        if now - self._at >= self._every_s:
            self._value, self._at = self._make(), now
        return self._value


def _with_ticks(work: Callable[[], T], *, tick: Callable[[], None], every_s: float = 0.5) -> T:
    """``work()``'s result (or its exception), run on a thread while ``tick()`` is called every ``every_s``."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakestack-check") as pool:
        future = pool.submit(work)
        while True:
            try:
                return future.result(timeout=every_s)
            except concurrent.futures.TimeoutError:
                tick()


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

    Steps, in order: :meth:`start_emulator`, :meth:`start_pipelines`, :meth:`send_load`, :meth:`drain`,
    :meth:`report`. Leaving the context (normally or on an error) stops the Locust processes, the queries,
    Spark and the emulator (unless ``keep_emulator``), in that order, and restores the environment.
    """

    def __init__(self, settings: DemoSettings, show: Progress) -> None:
        self.settings = settings
        self.show = show
        self.pipelines = select(settings.pipelines)
        self.scenarios = scenarios_for(self.pipelines)
        self.started_at = datetime.now(UTC)
        self.run_dir = settings.reports_dir / self.started_at.strftime("%Y%m%dT%H%M%SZ")
        self.ledger_dir = self.run_dir / "ledger"
        self.notes: list[str] = []
        self._clock = time.monotonic()
        self._stack = contextlib.ExitStack()
        self._target: LocalTarget | None = None
        self._spark: SparkSession | None = None
        self._context: RunContext | None = None
        self.queries: dict[str, StreamingQuery] = {}
        self._read: dict[str, _Ingested] = {}

    def __enter__(self) -> DemoRun:
        self.ledger_dir.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, *exc_info: object) -> None:
        # Every step runs even when one before it fails (the emulators must go whatever Spark did); callbacks
        # run last-in first-out: the queries (downstream first), then Spark, then the emulators and the
        # environment.
        with contextlib.ExitStack() as cleanup:
            cleanup.callback(self._stack.close)
            if self._spark is not None:
                from jobs.session import stop_session

                cleanup.callback(stop_session, self._spark)
            for pipeline in self.pipelines:
                if isinstance(pipeline, IngestPipeline):
                    cleanup.callback(pipeline.stages.close)
            for query in self.queries.values():
                cleanup.callback(_stop_query, query)

    @property
    def spark_log(self) -> Path:
        """Where the JVM's output goes (see :meth:`start_spark`)."""
        return self.run_dir / "spark.log"

    @property
    def target(self) -> LocalTarget:
        if self._target is None:
            raise RunFailedError("the demo's steps ran out of order: the emulator is not started.")
        return self._target

    @property
    def has_target(self) -> bool:
        """True once :meth:`start_emulator` has started the emulators."""
        return self._target is not None

    @property
    def context(self) -> RunContext:
        if self._context is None:
            raise RunFailedError("the demo's steps ran out of order: the pipelines are not started.")
        return self._context

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

    def start_spark(self) -> None:
        """Start Spark in local mode (the JVM and the session) for the pipelines' queries."""
        from jobs.session import build_session

        names = ", ".join(p.name for p in self.pipelines)
        where = self.settings.spark_master or "local mode"
        self.show.step(f"starting Spark ({where}) and the pipelines: {names}; Spark's log: {self.spark_log}")
        # Spark's own output (its warnings, the JDK's, a thread's dying trace) goes to the run's log: the
        # terminal shows the demo's progress and verdict only.
        spark = build_session(
            "lakestack-demo",
            master=self.settings.spark_master,
            conf=self.settings.spark_conf,
            jvm_output=self.spark_log,
        )
        self._spark = spark
        spark.conf.set("spark.sql.streaming.stopTimeout", _QUERY_STOP_TIMEOUT)

    def start_pipelines(self) -> None:
        """Start Spark (unless :meth:`start_spark` did), then each pipeline's query in order (ingest first: it
        creates the bronze table)."""
        if self._spark is None:
            self.start_spark()
        assert self._spark is not None
        target = self.target
        from jobs.session import warm_python_workers

        # An empty first trigger starts no read task: warm the workers the first batch with records needs.
        warm_python_workers(self._spark)
        self._context = RunContext(
            spark=self._spark,
            run_dir=self.run_dir,
            target=target,
            lake=target.lake_uri(self.run_dir),
            trigger=_TRIGGER,
            max_records_per_shard=self.settings.max_records_per_shard,
        )
        for pipeline in self.pipelines:
            query = pipeline.start(self._context)
            self.queries[pipeline.name] = query
            self._read[pipeline.name] = _Ingested(query)
        # Let the first (empty) triggers pay for Python worker start-up before events flow, so latency
        # measures the pipelines' steady state rather than Spark's cold start.
        for name, query in self.queries.items():
            message = f"waiting for the {name} job's first trigger"
            _wait_for(_first_trigger(query), timeout_s=120, tick=functools.partial(self.show.line, message))

    def _locust_argv(
        self,
        scenario: str,
        *,
        rate: float | None = None,
        events: int | None = None,
        users: int | None = None,
        ledger_dir: Path | None = None,
    ) -> list[str]:
        settings = self.settings
        timed = settings.duration_s is not None and events is None
        rate = rate or settings.rate
        events = events or settings.events
        folder = ledger_dir.parent if ledger_dir is not None else self.run_dir
        plan = LoadPlan(
            ledger_dir=str(ledger_dir or self.ledger_dir),
            users=users or settings.users,
            run_time=None if timed else f"{self._load_seconds(rate=rate, events=events):.0f}s",
            max_events=None if timed else events,
            target_rate=rate,
            csv_prefix=str(folder / f"locust-{scenario}"),
            html=str(folder / f"locust-{scenario}.html"),
            scenario=scenario,
            shape=(settings.shape or "constant") if timed else None,
            shape_duration_s=settings.duration_s if timed else None,
        )
        return self.target.locust_run(plan).argv()

    def _load_seconds(self, *, rate: float | None = None, events: int | None = None) -> float:
        """How long the load step runs at most: the duration asked for, or time for the event budget (the
        settings' own, or ``events`` at ``rate``: one rate of a sweep)."""
        settings = self.settings
        if settings.duration_s is not None and events is None:
            return settings.duration_s
        return max(60.0, 4 * (events or settings.events) / (rate or settings.rate) + 30)

    def _status(self, sent: int, elapsed_s: float) -> str:
        read = " | ".join(f"{name} read {counter.update():,}" for name, counter in self._read.items())
        planned = (
            f"/{self.settings.events * len(self.scenarios):,}" if self.settings.duration_s is None else ""
        )
        return f"sent {sent:,}{planned} acknowledged | {read} | {elapsed_s:.0f}s"

    def send_load(
        self, *, on_tick: Callable[[], None] | None = None, generators: LoadGenerators | None = None
    ) -> int:
        """Run one Locust per scenario, at once, to its event budget while the jobs run; return the
        events acknowledged. ``on_tick`` is called on every status poll (about twice a second) while Locust
        runs: the soak samples from it. ``generators`` generate the load (Locust processes on this machine
        when None: one per scenario, logging to ``locust-<scenario>.log``)."""
        from lakestack.bench.loadgen import LedgerCount, drive

        settings = self.settings
        # One ledger folder for every Locust: each process writes its own files (ledger-, truth-<scenario>-).
        acked = LedgerCount(self.ledger_dir)
        self.show.step(f"sending {settings.load_summary(self.scenarios)}")
        send_started = time.monotonic()
        if generators is None:
            from lakestack.bench.loadgen import LocalLocusts

            generators = LocalLocusts(
                argv=self._locust_argv,
                env={**os.environ, **self.environment()},
                run_dir=self.run_dir,
                ledger_dirs=[self.ledger_dir],
            )

        def tick(_acknowledged: int) -> bool:
            self.show.line(self._status(acked.update(), time.monotonic() - send_started))
            if any(q.exception() is not None for q in self.queries.values()):
                return True
            if on_tick is not None:
                on_tick()
            return False

        overran, failures = drive(
            generators, self.scenarios, budget_s=self._load_seconds() + _LOCUST_GRACE_S, on_tick=tick
        )
        if overran:
            self.notes.append(f"Locust was still running {_LOCUST_GRACE_S:.0f}s past its plan: stopped")
        self.notes.extend(failures)
        generators.collect(self.run_dir)
        total = acked.update()
        self.show.step(
            f"Locust done: {total:,} events acknowledged in {time.monotonic() - send_started:.1f}s; "
            "draining the pipelines"
        )
        return total

    def send_phase(self, *, rate: float, events: int, ledger_dir: Path) -> list[BacklogSample]:
        """One rate of a sweep: ``events`` at ``rate`` with Locust (first scenario only) while the queries run;
        returns the backlog samples (acknowledged vs landed by ingest) taken while it sent."""
        from lakestack.bench.loadgen import LedgerCount, stop_process
        from lakestack.demo_pipelines.ingest import IngestPipeline
        from lakestack.rate_sweep import SAMPLE_EVERY_S, BacklogSample, users_for

        ledger_dir.mkdir(parents=True, exist_ok=True)
        acked = LedgerCount(ledger_dir)
        ingested = self._read[IngestPipeline.name]
        before = ingested.update()
        scenario = self.scenarios[0]
        argv = self._locust_argv(
            scenario,
            rate=rate,
            events=events,
            users=users_for(rate, self.settings.users),
            ledger_dir=ledger_dir,
        )
        samples: list[BacklogSample] = []
        began = time.monotonic()
        with (ledger_dir.parent / f"locust-{scenario}.log").open("wb") as log_file:
            process = subprocess.Popen(
                argv,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.environment()},
            )
            try:
                while process.poll() is None:
                    sample = BacklogSample(
                        round(time.monotonic() - began, 2), acked.update(), ingested.update() - before
                    )
                    samples.append(sample)
                    self.show.line(f"{rate:,.0f}/s: sent {sample.acknowledged:,} | landed {sample.landed:,}")
                    if any(q.exception() is not None for q in self.queries.values()):
                        break
                    time.sleep(SAMPLE_EVERY_S)
            finally:
                stop_process(process)
        if process.returncode != 0:
            self.notes.append(
                f"Locust at {rate:g}/s exited with status {process.returncode}; see {ledger_dir.parent}"
            )
        return samples

    def wait_drained(self, name: str) -> None:
        """Wait until the query ``name`` ran a trigger that found nothing new (bounded), then go on.

        Raises:
            RunFailedError: the query failed.
        """
        from jobs._run import caught_up

        query, since = self.queries[name], datetime.now(UTC)
        if not _wait_for(
            lambda: query.exception() is not None or caught_up(query, since=since),
            timeout_s=_DRAIN_TIMEOUT_S,
            tick=lambda: self.show.line(f"draining {name}"),
        ):
            self.notes.append(f"{name} did not drain within {_DRAIN_TIMEOUT_S:.0f}s")
        error = query.exception()
        if error is not None:
            raise RunFailedError(
                f"the {name} query failed: {error}. Its checkpoint and logs are in {self.run_dir}."
            )

    def drain(self, acked_total: int, *, timeout_s: float = _DRAIN_TIMEOUT_S) -> None:
        """Wait until each pipeline has read everything its upstream wrote (at most ``timeout_s`` each), in
        order, stopping each as it drains, then stop any left.

        A query has drained when a trigger that started after its upstream drained found nothing new. The load
        has ended, and every downstream query reads bronze alone, so a drained query has nothing left to do: once
        stopped, its idle triggers (ingest polls the stream every ``idle_poll_ms``) stop taking the cores the
        queries still draining need.

        Raises:
            RunFailedError: a query failed.
        """
        from jobs._run import caught_up

        since = datetime.now(UTC)
        for name, query in self.queries.items():
            counter = self._read[name]
            progress = _Throttled(functools.partial(self._drain_progress, name, acked_total), every_s=1.0)

            def drained(q: StreamingQuery = query, t: datetime = since) -> bool:
                return q.exception() is not None or caught_up(q, since=t)

            def tick(p: _Throttled = progress) -> None:
                self.show.line(p())

            finished = _wait_for(drained, timeout_s=timeout_s, tick=tick)
            if not finished:
                self.notes.append(f"{name} did not drain within {timeout_s:.0f}s")
            error = query.exception()
            if error is not None:
                raise RunFailedError(
                    f"the {name} query failed: {error}. Its checkpoint and logs are in {self.run_dir}."
                )
            counter.update()
            since = datetime.now(UTC)
            if finished:
                _stop_query(query)
        for query in reversed(list(self.queries.values())):
            _stop_query(query)

    def _checking(self, name: str, started: float) -> None:
        self.show.line(
            f"checking {name}: reading its tables and the ledgers ({time.monotonic() - started:.0f}s)"
        )

    def _drain_progress(self, name: str, acked_total: int) -> str:
        """One job's progress against what it should reach: ingest's rows in bronze against the events the
        stream acknowledged; a downstream job's bronze rows read (its own batch totals) against bronze's rows."""
        try:
            bronze = self.context.bronze_rows()
            if name == IngestPipeline.name:
                return f"draining {name}: {bronze:,} of {acked_total:,} acknowledged events landed in bronze"
            read = self.context.job_settings(name).batch_metrics().totals().get("bronze_rows", 0)
            return f"draining {name}: read {read:,} of {bronze:,} bronze rows"
        except Exception as error:  # a table or metrics file mid-write: say the job drains, without figures
            log.debug("drain progress of %s unreadable: %s", name, error)
            return f"draining {name}"

    def timeline(self, cost: CostModel | None = None) -> Timeline | None:
        """The run over time, for the report's plots: measured from the ledgers, the bronze table and the
        ingest query's checkpoint (the emulators must still be up)."""
        from lakestack.measure import read_bronze, run_timeline

        context = self.context
        return run_timeline(
            read_bronze(context.bronze, context.storage_options(context.bronze)),
            ledger_dir=self.ledger_dir,
            checkpoint=context.checkpoint(IngestPipeline.name),
            cost=cost or EMULATOR_COST,
        )

    def report(self) -> RunReport:
        """Reconcile ingest by position against the ledgers and check every pipeline against its truth."""
        # Stops fault injection first, so the reads that reconcile the run are not faulted.
        faults = self.target.fault_report(
            ledger_dir=self.ledger_dir, checkpoint=self.context.checkpoint(IngestPipeline.name)
        )
        self.show.step("reconciling: ingest against the ledgers, each pipeline against its ground truth")
        loads = Loads({s: ScenarioLoad.read(s, self.ledger_dir) for s in self.scenarios})
        figures: dict[str, dict[str, Any]] = {}
        for pipeline in self.pipelines:
            started = time.monotonic()
            self.show.line(f"checking {pipeline.name}", force=True)
            figures[pipeline.name] = _with_ticks(
                functools.partial(pipeline.check, self.context, loads),
                tick=functools.partial(self._checking, pipeline.name, started),
            )
        stages = next((p.stage_report() for p in self.pipelines if isinstance(p, IngestPipeline)), None)
        return report_from_figures(
            figures,
            micro_batches=self._read[IngestPipeline.name].batches,
            duration_s=round(time.monotonic() - self._clock, 1),
            started_at=self.started_at.isoformat(timespec="seconds"),
            notes=self.notes,
            faults=faults,
            stages=stages,
        )


def report_from_figures(
    figures: Mapping[str, Mapping[str, Any]],
    *,
    micro_batches: int,
    duration_s: float,
    started_at: str,
    notes: Sequence[str] = (),
    faults: dict[str, Any] | None = None,
    stages: dict[str, Any] | None = None,
) -> RunReport:
    """The run report from each pipeline's figures: ingest's are its top-level keys (the demo's and the
    bench's alike); ``stages`` is the ingest job's stage breakdown when it was recorded."""
    ingest = figures[IngestPipeline.name]
    return RunReport(
        events_sent=ingest["events_sent"],
        events_landed=ingest["events_landed"],
        missing=ingest["missing"],
        duplicates=ingest["duplicates"],
        unacknowledged=ingest["unacknowledged"],
        latency_p50_s=ingest["latency_p50_s"],
        latency_p95_s=ingest["latency_p95_s"],
        latency_p99_s=ingest["latency_p99_s"],
        throughput_eps=ingest["throughput_eps"],
        send_rate_eps=ingest["send_rate_eps"],
        table_uri=ingest["table_uri"],
        files=ingest["files"],
        table_version=ingest["table_version"],
        micro_batches=micro_batches,
        duration_s=duration_s,
        started_at=started_at,
        missing_sample=tuple(ingest["missing_sample"]),
        duplicate_sample=tuple(ingest["duplicate_sample"]),
        notes=tuple([*ingest["notes"], *notes]),
        faults=faults,
        stages=stages,
        pipelines={name: {k: v for k, v in f.items() if k not in _TOP_LEVEL} for name, f in figures.items()},
    )


def _stop_query(query: StreamingQuery) -> None:
    from jobs._run import stop_between_batches

    stop_between_batches(query)


def _first_trigger(query: StreamingQuery) -> Callable[[], bool]:
    return lambda: query.lastProgress is not None or query.exception() is not None


# Ingest figures that are the report's own top-level keys; pipelines["ingest"] keeps the rest.
_TOP_LEVEL = frozenset(
    {
        "events_sent",
        "events_landed",
        "missing_sample",
        "duplicate_sample",
        "notes",
        "table_uri",
        "send_rate_eps",
    }
)


def sweep_rates(
    run: DemoRun, rates: Sequence[float], *, seconds: float, say: Callable[[str], None]
) -> list[RateResult]:
    """Send each rate for ``seconds`` through the running ingest query of ``run``, drain, then measure.

    ``run`` has its emulator and the ingest pipeline started. Returns one result per rate, in order.
    """
    from jobs.stages import summarize
    from lakestack.rate_sweep import RateResult, measure_rate, users_for
    from loadtest.ledger import read_ledger

    results: list[RateResult] = []
    windows: list[tuple[float, float]] = []
    for rate in rates:
        result = RateResult(target_eps=rate, seconds=seconds)
        ledger = run.run_dir / "sweep" / f"{rate:g}" / "ledger"
        started = time.time()
        say(
            f"sweep: {rate:,.0f} events/s for {seconds:g} s ({users_for(rate, run.settings.users)} Locust users)"
        )
        result.samples = run.send_phase(rate=rate, events=int(rate * seconds), ledger_dir=ledger)
        drained = time.monotonic()
        run.wait_drained(IngestPipeline.name)
        result.drained_s = round(time.monotonic() - drained, 1)
        windows.append((started, time.time()))
        results.append(result)
    say("sweep: reconciling every rate against bronze")
    landed, commit_time = _bronze_positions(run)
    records = next(p.stages.records() for p in run.pipelines if isinstance(p, IngestPipeline))
    for result, (begin, end) in zip(results, windows, strict=True):
        ledger = run.run_dir / "sweep" / f"{result.target_eps:g}" / "ledger"
        entries = [e for path in sorted(ledger.glob("ledger-*.jsonl")) for e in read_ledger(path)]
        measure_rate(result, entries, landed, commit_time)
        result.stages = summarize(
            r for r in records if r.get("committed_at") and begin <= r["committed_at"] <= end
        )
    return results


def _bronze_positions(run: DemoRun) -> tuple[dict[tuple[str, str], list[int]], dict[int, float]]:
    from deltalake import DeltaTable

    from jobs.lake import DeltaRsEngine

    context = run.context
    options = context.storage_options(context.bronze)
    commit_time = {
        record.batch_id: record.timestamp.timestamp()
        for record in DeltaRsEngine().table(context.bronze, storage_options=options).commits()
        if record.batch_id is not None
    }
    rows = (
        DeltaTable(context.bronze, storage_options=options)
        .to_pyarrow_dataset()
        .to_table(columns=["shard_id", "sequence_number", "batch_id"])
        .to_pydict()
    )
    landed: dict[tuple[str, str], list[int]] = {}
    for shard, seq, batch in zip(rows["shard_id"], rows["sequence_number"], rows["batch_id"], strict=True):
        landed.setdefault((shard, seq), []).append(batch)
    return landed, commit_time


def run_sweep_demo(
    settings: DemoSettings, rates: tuple[float, ...], *, seconds: float, progress: Progress | None = None
) -> list[RateResult]:
    """``lakestack demo --sweep``: the ingest pipeline alone at each rate for ``seconds`` (see
    :mod:`lakestack.rate_sweep`); prints the table and writes ``sweep.json`` and the stage report.

    Raises:
        RunFailedError: the ingest query failed.
        EmulatorError: the emulator could not start.
    """
    from lakestack.rate_sweep import format_sweep, write_sweep

    show = progress or Progress()
    only_ingest = dataclasses.replace(settings, pipelines=(IngestPipeline.name,))
    with DemoRun(only_ingest, show) as run:
        run.start_emulator()
        run.start_pipelines()
        results = sweep_rates(run, rates, seconds=seconds, say=show.step)
        for query in run.queries.values():
            query.stop()
        ingest = next(p for p in run.pipelines if isinstance(p, IngestPipeline))
        stages = ingest.stage_report()
    show.done()
    path = write_sweep(results, run.run_dir)
    if stages["plot"]:
        from lakestack.stage_plot import write_stage_plot

        write_stage_plot(run.run_dir / stages["plot"], stages["batches"])
    print(format_sweep(results))
    print(f"\nsweep: {path} (stage plot: {run.run_dir / 'stages.png'})")
    return results


def _run_settings(settings: DemoSettings, run: DemoRun) -> dict[str, str]:
    """What the report page shows at its top: the command, the load, the pipelines, the commit, the machine."""
    from lakestack.run_facts import run_settings

    return run_settings(
        events=settings.events,
        rate=settings.rate,
        users=settings.users,
        duration_s=settings.duration_s,
        pipelines=[pipeline.name for pipeline in run.pipelines],
    )


def run_demo(settings: DemoSettings, *, progress: Progress | None = None) -> RunReport:
    """Run the demo end to end and return its report (also written under `settings.reports_dir`).

    Raises:
        RunFailedError: a pipeline's query failed.
        EmulatorError: the emulator could not start.
        UserError: ``--pipelines`` names a pipeline that does not exist.
    """
    show = progress or Progress()
    with DemoRun(settings, show) as run:
        run.start_emulator()
        run.start_pipelines()
        acked_total = run.send_load()
        run.drain(acked_total)
        report = dataclasses.replace(run.report(), timeline=run.timeline())
    show.done()
    json_path, md_path = report.write(run.run_dir, settings=_run_settings(settings, run))
    print(report.to_text())
    print(f"\nreport: {md_path}, {md_path.with_suffix('.html')} and {json_path}")
    return report
