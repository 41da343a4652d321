"""Abstract Locust users: a producer per user, a generator per user, and one coordinator per process.

The locustfile only adds tasks; everything about options, budgets, pacing, the ledger and the exit
code lives here. Importing this module registers lakestack's Locust options and event listeners.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import sys
import time
from collections.abc import Callable
from typing import Any, cast

import gevent
import gevent.event
from gevent.event import AsyncResult
from locust import User, events
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import LocalRunner, MasterRunner, WorkerRunner
from locust.stats import CSV_STATS_INTERVAL_SEC

from loadtest.clients._base import Producer
from loadtest.clients.kinesis import (
    RETRYABLE_CALL_ERRORS,
    Acknowledged,
    KinesisProducer,
    Rejected,
    RetryPolicy,
    SendResult,
    aws_error_code,
    check_event,
    make_kinesis_client,
)
from loadtest.errors import LoadTestError, OptionError, RecordTooLargeError, StreamNotFoundError
from loadtest.events import Event
from loadtest.generators import Generator, make_generator
from loadtest.ledger import LedgerWriter, ProducerStats, write_producer_stats
from loadtest.options import LoadSettings, add_arguments, settings_from_options
from loadtest.partitioning import HotKeyMonitor
from loadtest.quota import Quota
from loadtest.stats import record_logger

logger = logging.getLogger(__name__)

LEASE_MESSAGE = "lakestack_lease"
GRANT_MESSAGE = "lakestack_grant"
SETTLE_MESSAGE = "lakestack_settle"
LEASE_TIMEOUT_SECONDS = 60.0


class _Process:
    """Per-process state shared by the users of one Locust process (local, master or worker)."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.quota = Quota()  # the authority on local and master runners; replaced at test_start
        self.pending: dict[int, AsyncResult[tuple[int, float]]] = {}
        self.request_ids = itertools.count()
        self.ledger: LedgerWriter | None = None
        self.generators: list[Generator] = []
        self.acknowledged = 0
        self.failed = 0
        self.producer_stats = ProducerStats()
        self.limited = False
        # Set while the runner stops: wakes users waiting for a lease or a pacing slot, so a graceful
        # stop (--stop-timeout) never waits on them.
        self.stopping = gevent.event.Event()
        self._kinesis: tuple[tuple[str, str | None], Any] | None = None

    @property
    def runner(self) -> Any:
        return self.environment.runner

    def kinesis(self, settings: LoadSettings) -> Any:
        # One client per process, built before the users start: botocore loads its service model on
        # the first client (a few hundred ms), which would otherwise count against the measured run.
        key = (settings.region, settings.endpoint_url)
        if self._kinesis is None or self._kinesis[0] != key:
            self._kinesis = (key, kinesis_client(settings))
        return self._kinesis[1]

    def ledger_writer(self, directory: str) -> LedgerWriter:
        if self.ledger is None:
            self.ledger = LedgerWriter(directory)
        return self.ledger

    def lease(self, wanted: int) -> tuple[int, float]:
        if not self.limited:
            return wanted, 0.0
        if isinstance(self.runner, WorkerRunner):
            request_id = next(self.request_ids)
            reply: AsyncResult[tuple[int, float]] = AsyncResult()
            self.pending[request_id] = reply
            self.runner.send_message(LEASE_MESSAGE, {"id": request_id, "n": wanted})
            try:
                granted, delay = cast("tuple[int, float]", reply.get(timeout=LEASE_TIMEOUT_SECONDS))
            finally:
                self.pending.pop(request_id, None)
            return int(granted), float(delay)
        return self.quota.lease(wanted)

    def settle(self, acknowledged: int, failed: int) -> None:
        self.acknowledged += acknowledged
        self.failed += failed
        if isinstance(self.runner, WorkerRunner):
            self.runner.send_message(SETTLE_MESSAGE, {"acknowledged": acknowledged, "failed": failed})
        elif self.quota.settle(acknowledged, failed):
            _quit_soon(self.runner)


_STATE: dict[int, _Process] = {}


def process_state(environment: Environment) -> _Process:
    """The shared state of this Locust process (created on first use)."""
    state = _STATE.get(id(environment))
    if state is None or state.environment is not environment:
        state = _STATE[id(environment)] = _Process(environment)
    return state


def _quit_soon(runner: Any) -> None:
    # Quit from a fresh greenlet: the caller is usually a user greenlet the runner is about to kill.
    if getattr(runner, "_lakestack_quitting", False):
        return
    runner._lakestack_quitting = True
    gevent.spawn(runner.quit)


@events.init_command_line_parser.add_listener
def _on_parser(parser: Any, **_kwargs: Any) -> None:
    add_arguments(parser)


@events.init.add_listener
def _on_init(environment: Environment, **_kwargs: Any) -> None:
    runner = environment.runner
    state = process_state(environment)
    if isinstance(runner, MasterRunner):
        runner.register_message(LEASE_MESSAGE, _on_lease)
        runner.register_message(SETTLE_MESSAGE, _on_settle)
    elif isinstance(runner, WorkerRunner):
        runner.register_message(GRANT_MESSAGE, _on_grant)
    if isinstance(runner, MasterRunner | LocalRunner) and environment.parsed_options is not None:
        try:
            settings = settings_from_options(environment.parsed_options)
            if any(issubclass(cls, KinesisUser) for cls in environment.user_classes):
                check_stream(settings, client=state.kinesis(settings))
        except LoadTestError as exc:
            # A user mistake: say what is wrong and stop, without a stack trace.
            sys.stderr.write(f"error: {exc}\n")
            raise SystemExit(2) from None
        state.limited = settings.max_events is not None or settings.target_rate is not None


@events.test_stopping.add_listener
def _on_test_stopping(environment: Environment, **_kwargs: Any) -> None:
    state = process_state(environment)
    state.stopping.set()
    for reply in list(state.pending.values()):
        reply.set((0, 0.0))


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_kwargs: Any) -> None:
    process_state(environment).stopping.clear()
    if isinstance(environment.runner, MasterRunner | LocalRunner) and environment.parsed_options is not None:
        settings = settings_from_options(environment.parsed_options)
        state = process_state(environment)
        state.quota = Quota(max_events=settings.max_events, rate=settings.target_rate)
        state.limited = state.quota.limited


def _on_lease(environment: Environment, msg: Any, **_kwargs: Any) -> None:
    granted, delay = process_state(environment).quota.lease(int(msg.data["n"]))
    if environment.runner is None:
        return  # the runner is gone: the run is over and the worker waits for no grant
    environment.runner.send_message(
        GRANT_MESSAGE, {"id": msg.data["id"], "granted": granted, "delay": delay}, client_id=msg.node_id
    )


def _on_grant(environment: Environment, msg: Any, **_kwargs: Any) -> None:
    reply = process_state(environment).pending.get(msg.data["id"])
    if reply is not None:
        reply.set((msg.data["granted"], msg.data["delay"]))


def _on_settle(environment: Environment, msg: Any, **_kwargs: Any) -> None:
    state = process_state(environment)
    if state.quota.settle(int(msg.data["acknowledged"]), int(msg.data["failed"])):
        _quit_soon(environment.runner)


@events.quitting.add_listener
def _on_quitting(environment: Environment, **_kwargs: Any) -> None:
    state = process_state(environment)
    runner = environment.runner
    if state.ledger is not None:
        for index, generator in enumerate(state.generators):
            path = (
                state.ledger.directory
                / f"truth-{generator.scenario}-{state.ledger.path.stem.removeprefix('ledger-')}-{index}.json"
            )
            path.write_text(json.dumps(generator.ground_truth(), indent=1), encoding="utf-8")
        state.ledger.close()
        write_producer_stats(state.ledger.directory, state.producer_stats)
    if runner is None or runner.exceptions or environment.process_exit_code is not None:
        return  # unhandled errors keep Locust's own exit code
    # Throttled-then-acknowledged entries are reported as failures in the statistics (they happened),
    # but the exit code answers "did every event get acknowledged?".
    if isinstance(runner, WorkerRunner):
        environment.process_exit_code = 1 if state.failed else 0
    else:
        options = environment.parsed_options
        if options is not None and getattr(options, "csv_prefix", None):
            # Locust's CSV writer rewrites the files once a CSV_STATS_INTERVAL_SEC and gets no final turn
            # when a run ends by itself; yield to it once so *_stats.csv holds the final numbers.
            gevent.sleep(CSV_STATS_INTERVAL_SEC + 0.2)
        environment.process_exit_code = state.quota.exit_code()
        logger.info(
            "lakestack: %d events acknowledged, %d failed%s",
            state.quota.acknowledged,
            state.quota.failed,
            f" of {state.quota.max_events}" if state.quota.max_events else "",
        )


def check_stream(
    settings: LoadSettings,
    *,
    client: Any = None,
    retry: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Fail early, with a clear message, when the Kinesis stream is missing or unreachable.

    A busy service (throttling, InternalFailure, ServiceUnavailable) is asked again with backoff, as the
    producer does for PutRecords: a load test must not refuse to start on one 5xx.

    Raises:
        StreamNotFoundError: the stream does not exist at the endpoint.
        LoadTestError: the endpoint cannot be reached, or stayed busy for every attempt.
    """
    if client is None:
        client = kinesis_client(settings)
    policy = retry or RetryPolicy()
    rng = random.Random()
    for attempt in range(1, policy.max_attempts + 1):
        try:
            client.describe_stream_summary(StreamName=settings.stream)
            return
        except client.exceptions.ResourceNotFoundException:
            where = settings.endpoint_url or f"AWS {settings.region}"
            raise StreamNotFoundError(
                f"stream {settings.stream!r}: expected it to exist at {where}, found none. Start the emulator "
                "(`lakestack local up`) or deploy the stack, or pass the right --stream/--endpoint-url/--region."
            ) from None
        except Exception as exc:  # botocore's endpoint/credential errors have no common base worth naming.
            if aws_error_code(exc) in RETRYABLE_CALL_ERRORS and attempt < policy.max_attempts:
                sleep(policy.delay(attempt - 1, rng))
                continue
            raise LoadTestError(
                f"stream {settings.stream!r}: expected to reach Kinesis at "
                f"{settings.endpoint_url or settings.region}, found an error: {exc}"
            ) from None


def kinesis_client(settings: LoadSettings) -> Any:
    """The Kinesis client of these settings (see :func:`~loadtest.clients.kinesis.make_kinesis_client`)."""
    return make_kinesis_client(region=settings.region, endpoint_url=settings.endpoint_url)


class LakestackUser(User):
    """A producer user: leases events, generates them, sends one batch per task, records the outcome.

    Subclasses provide :meth:`make_producer` (and may replace :meth:`make_generator`); the locustfile adds
    a task that calls :meth:`send_batch`.
    """

    abstract = True
    producer: Producer  # set by make_producer

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.settings: LoadSettings | None = None
        self.generator: Generator | None = None
        self.hot_keys = HotKeyMonitor()

    def on_start(self) -> None:
        # Options are read here, not in __init__: on a worker the master's options arrive with the spawn.
        state = process_state(self.environment)
        try:
            self.settings = settings_from_options(self.environment.parsed_options)
        except LoadTestError as exc:
            logger.error("%s", exc)
            self.environment.process_exit_code = 2
            _quit_soon(self.environment.runner)
            raise StopUser() from None
        if isinstance(self.environment.runner, WorkerRunner):
            # Workers learn the budget and pace with the master's options; the master holds the quota.
            state.limited = self.settings.max_events is not None or self.settings.target_rate is not None
        seed = None if self.settings.seed is None else self.settings.seed + len(state.generators)
        self.generator = self.make_generator(self.settings, seed=seed)
        state.generators.append(self.generator)  # its ground truth is written when the process quits
        self.producer = self.make_producer(self.settings)

    def make_generator(self, settings: LoadSettings, *, seed: int | None) -> Generator:
        """This user's event generator (the scenario of ``--scenario``)."""
        return make_generator(
            settings.scenario,
            seed=seed,
            partition=settings.partition,
            fraud_rate=settings.fraud_rate,
            out_of_order_rate=settings.out_of_order_rate,
            duplicate_rate=settings.duplicate_rate,
            malformed_rate=settings.malformed_rate,
        )

    def make_producer(self, settings: LoadSettings) -> Producer:
        """This user's producer client."""
        raise NotImplementedError

    def send(
        self, events: list[Event], *, on_acknowledged: Callable[[list[Acknowledged]], None] | None = None
    ) -> SendResult:
        """Send events (already checked and batch-sized); report accepted ones as each reply arrives."""
        return self.producer.send(events, on_acknowledged=on_acknowledged)

    def refuse(self, event: Event, error: RecordTooLargeError) -> Rejected:
        """Report an event that cannot be sent as a failed record."""
        return self.producer.refuse(event, error)

    def send_batch(self) -> None:
        """Lease up to ``--batch-size`` events, send them, write the ledger, settle the lease."""
        assert self.settings is not None and self.generator is not None
        state = process_state(self.environment)
        granted, delay = state.lease(self.settings.batch_size)
        if granted == 0:
            raise StopUser()  # the run's --max-events are all leased
        if delay > 0 and state.stopping.wait(delay):
            raise StopUser()  # stopping while waiting for the pacing slot: nothing was generated
        to_send: list[Event] = []
        refused: list[Rejected] = []
        for _ in range(granted):
            event = self.generator.next_event()
            try:
                check_event(event)
            except RecordTooLargeError as exc:
                refused.append(self.refuse(event, exc))
                continue
            to_send.append(event)
        ledger = state.ledger_writer(self.settings.ledger_dir) if self.settings.ledger_dir else None
        record = None if ledger is None else ledger.write_acknowledged
        try:
            result = self.send(to_send, on_acknowledged=record) if to_send else SendResult()
        except StreamNotFoundError as exc:
            logger.error("%s", exc)
            state.settle(0, granted)
            self.environment.process_exit_code = 2
            _quit_soon(self.environment.runner)
            raise StopUser() from None
        if self.settings.partition == "entity":
            now = time.time()
            for ack in result.acknowledged:
                self.hot_keys.observe(ack.event.partition_key, now)
        state.producer_stats.add(result, refused=len(refused))
        for rejected in result.failed + refused:
            logger.warning(
                "event %s not delivered: %s %s",
                rejected.event.event_id,
                rejected.error_code,
                rejected.error_message,
            )
        state.settle(len(result.acknowledged), len(result.failed) + len(refused))


class KinesisUser(LakestackUser):
    """Sends to a Kinesis stream with PutRecords (batched, per-entry retries)."""

    abstract = True

    def client(self, settings: LoadSettings) -> Any:
        """The boto3 Kinesis client, one per process."""
        return process_state(self.environment).kinesis(settings)

    def make_producer(self, settings: LoadSettings) -> Producer:
        """The Kinesis producer: one PutRecords batch per send, retried for exactly the entries that failed.

        Accepted entries go into Locust's statistics once per reply (:func:`loadtest.stats.record_logger`).
        """
        return KinesisProducer(
            self.client(settings),
            settings.stream,
            fire=self.environment.events.request.fire,
            log_records=record_logger(self.environment.stats),
            retry=RetryPolicy(max_attempts=settings.max_attempts),
            sleep=gevent.sleep,
        )


class EventHubsUser(LakestackUser):
    """Sends to an Event Hub through its Kafka endpoint (``--eventhubs-bootstrap``, connection string)."""

    abstract = True

    def make_producer(self, settings: LoadSettings) -> Producer:
        """The Kafka producer: produces each batch and waits for its delivery reports."""
        from loadtest.clients.eventhubs import EventHubsProducer, kafka_config

        try:
            if not settings.eventhubs_bootstrap:
                raise OptionError(
                    "Event Hubs: expected --eventhubs-bootstrap (or LAKESTACK_EVENTHUBS_BOOTSTRAP), "
                    "<namespace>.servicebus.windows.net:9093, found it unset."
                )
            config = kafka_config(settings.eventhubs_bootstrap, settings.eventhubs_connection_string)
        except OptionError as exc:
            logger.error("%s", exc)
            self.environment.process_exit_code = 2
            _quit_soon(self.environment.runner)
            raise StopUser() from None
        return EventHubsProducer.from_config(
            config, settings.stream, fire=self.environment.events.request.fire
        )


__all__ = ["EventHubsUser", "KinesisUser", "LakestackUser", "check_stream", "kinesis_client", "process_state"]
