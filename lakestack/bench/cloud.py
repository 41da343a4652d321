"""The bench on a cloud stack: `pulumi up` through the Automation API, the EMR steps running, Locust (from this
machine, or from the stack's Fargate tasks) against the real stream, the lake read back from S3, CloudWatch's
view of the stream, `pulumi destroy`.

Everything that talks to the outside is injected (the Automation API, boto3 clients, the clock), so the
decisions (when the pipelines count as running, when the lake has drained, what teardown left) are tested
offline with stand-ins; the calls themselves need the Pulumi CLI and an AWS account.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, Protocol

from infra.config import StackSettings
from infra.pricing import estimate_hourly_cost
from lakestack import stacks
from lakestack.bench.cloudwatch import StreamMetrics, fetch_stream_metrics
from lakestack.bench.cost import GB, metered_bytes
from lakestack.bench.lifecycle import Teardown
from lakestack.bench.loadgen import FargateLoad, FargateLoadGenerators, LoadGenerators, LocalLocusts, drive
from lakestack.bench.settings import BenchSettings
from lakestack.demo import Progress
from lakestack.errors import RunFailedError
from lakestack.report import RunReport
from lakestack.timeline import CostModel

# EMR needs 8-15 minutes to start a cluster and bootstrap it; the steps then start their drivers.
READY_TIMEOUT_S = 30 * 60
# The scenario each of a stack's pipelines needs loaded (contract C1: every event carries its type).
PIPELINE_SCENARIOS = {
    "sales": "sales",
    "fraud": "transactions",
    "orders-cow": "orders",
    "orders-mor": "orders",
}
POLL_S = 15.0
_TERMINAL_STEP_STATES = ("COMPLETED", "CANCELLED", "FAILED", "INTERRUPTED")
_REQUIRED_OUTPUTS = ("stream_name", "region", "table_uri", "pipelines")


def scenarios_for(pipelines: Sequence[str]) -> list[str]:
    """The scenarios a stack's pipelines need loaded, in order (``sales`` when none names one: ingest alone
    still needs events)."""
    needed = list(dict.fromkeys(PIPELINE_SCENARIOS[p] for p in pipelines if p in PIPELINE_SCENARIOS))
    return needed or ["sales"]


class Automation(Protocol):
    """What the bench needs from Pulumi (:mod:`lakestack.stacks` in real runs)."""

    def require_cli(self, command: str) -> str: ...

    def up(self, stack: str, *, on_output: Callable[[str], None]) -> dict[str, Any]: ...

    def down(self, stack: str, *, on_output: Callable[[str], None]) -> None: ...

    def resources(self, stack: str) -> list[str]: ...


class PulumiAutomation:
    """:class:`Automation` through Pulumi's Automation API (needs the ``pulumi`` CLI)."""

    def require_cli(self, command: str) -> str:
        return stacks.require_cli(command)

    def up(self, stack: str, *, on_output: Callable[[str], None]) -> dict[str, Any]:
        return stacks.up(stack, on_output=on_output)

    def down(self, stack: str, *, on_output: Callable[[str], None]) -> None:
        stacks.down(stack, on_output=on_output)

    def resources(self, stack: str) -> list[str]:
        return stacks.resources(stack)


def boto3_clients(settings: StackSettings) -> Callable[[str], Any]:
    """boto3 clients with the stack's region and profile (``aws:profile``), as the Pulumi program uses."""
    import boto3

    session = boto3.session.Session(profile_name=settings.aws_profile, region_name=settings.region)
    return lambda service: session.client(service)  # type: ignore[call-overload]


def steps_state(emr: Any, cluster_id: str, step_ids: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Each pipeline's EMR step state, and the failure reason EMR gives (empty when none)."""
    states: dict[str, tuple[str, str]] = {}
    for pipeline, step_id in step_ids.items():
        status = emr.describe_step(ClusterId=cluster_id, StepId=step_id)["Step"]["Status"]
        details = status.get("FailureDetails") or {}
        reason = (
            details.get("Message")
            or details.get("Reason")
            or status.get("StateChangeReason", {}).get("Message", "")
        )
        states[pipeline] = (status["State"], reason)
    return states


def steps_running(states: Mapping[str, tuple[str, str]], *, cluster_id: str) -> bool:
    """True when every step runs; False while some are pending.

    Raises:
        RunFailedError: a step ended (a streaming pipeline's step never should), naming it and EMR's reason.
    """
    for pipeline, (state, reason) in states.items():
        if state in _TERMINAL_STEP_STATES:
            raise RunFailedError(
                f"the {pipeline} pipeline's EMR step is {state}{': ' + reason if reason else ''}. Its logs are "
                f"under the logs bucket's emr/{cluster_id}/steps/; the stack is being torn down."
            )
    return all(state == "RUNNING" for state, _ in states.values())


def query_started(s3: Any, checkpoint: str) -> bool:
    """True once the streaming query has written ``<checkpoint>/metadata`` (Spark does so as it starts)."""
    bucket, _, prefix = checkpoint.removeprefix("s3://").partition("/")
    key = f"{prefix.rstrip('/')}/metadata" if prefix else "metadata"
    reply = s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
    return any(item["Key"] == key for item in reply.get("Contents", []))


def wait_until(
    condition: Callable[[], bool],
    *,
    timeout_s: float,
    tick: Callable[[float], None],
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Poll ``condition`` until it holds or ``timeout_s`` passes; ``tick`` gets the seconds waited so far."""
    started = clock()
    while True:
        if condition():
            return True
        waited = clock() - started
        if waited >= timeout_s:
            return False
        tick(waited)
        sleep(poll_s)


def lake_rows(table_uri: str, storage_options: Mapping[str, str]) -> int:
    """Rows in a Delta table, from the Parquet footers of its current files (no data read)."""
    from deltalake import DeltaTable

    from jobs.lake import LakeTableNotFoundError

    try:
        table = DeltaTable(table_uri, storage_options=dict(storage_options))
    except Exception as error:  # delta-rs raises TableNotFoundError before the first commit
        if type(error).__name__ == "TableNotFoundError" or isinstance(error, LakeTableNotFoundError):
            return 0
        raise
    return int(table.to_pyarrow_dataset().count_rows())


class CloudBench:
    """A Pulumi stack on AWS, from ``pulumi up`` to ``pulumi destroy``."""

    def __init__(
        self,
        stack: StackSettings,
        settings: BenchSettings,
        show: Progress,
        *,
        automation: Automation | None = None,
        clients: Callable[[str], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        critical: Callable[[str], AbstractContextManager[None]] = lambda _doing: contextlib.nullcontext(),
    ) -> None:
        self.automation = automation or PulumiAutomation()
        # Before anything else: without the CLI nothing can be created, so nothing needs tearing down.
        self.automation.require_cli(f"bench --stack {stack.stack}")
        self.stack = stack.stack
        self.settings = settings
        self.stack_settings = stack
        self.show = show
        self.run_dir = settings.reports_dir / datetime.now(UTC).strftime(f"%Y%m%dT%H%M%SZ-{stack.stack}")
        self.ledger_dir = self.run_dir / "ledger"
        self.facts: dict[str, Any] = {}
        self.outputs: dict[str, Any] = {}
        self._clients = clients
        self._critical = critical
        self.scenarios = scenarios_for(stack.pipelines)
        self._clock, self._sleep = clock, sleep
        self._created = False
        self._up_started: float | None = None
        self._load_started: float | None = None
        self._load_window: tuple[datetime, datetime] | None = None
        self._notes: list[str] = []

    def _client(self, service: str) -> Any:
        if self._clients is None:
            self._clients = boto3_clients(self.stack_settings)
        return self._clients(service)

    def _pulumi_log(self, name: str) -> Callable[[str], None]:
        path = self.run_dir / f"pulumi-{name}.log"

        def write(line: str) -> None:
            with path.open("a", encoding="utf-8") as log:
                log.write(line if line.endswith("\n") else line + "\n")
            self.show.line(f"pulumi {name}: {line.strip()[:100]}")

        return write

    def up(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.show.step(f"pulumi up --stack {self.stack} (EMR takes 10-20 minutes to start a cluster)")
        self._up_started = self._clock()
        # From the first call on, something may exist: destroy is owed even if `up` fails half-way.
        self._created = True
        # Not cut short by a signal: an update stopped half-way can leave the stack locked, and then destroy
        # cannot run either. A signal is acted on (teardown) as soon as `up` returns.
        with self._critical(f"pulumi up --stack {self.stack} is creating resources"):
            self.outputs = self.automation.up(self.stack, on_output=self._pulumi_log("up"))
        missing = [key for key in _REQUIRED_OUTPUTS if not self.outputs.get(key)]
        if missing:
            raise RunFailedError(
                f"stack {self.stack}: expected the outputs {', '.join(_REQUIRED_OUTPUTS)}, missing "
                f"{', '.join(missing)}; is Pulumi.yaml's program this checkout's infra/?"
            )
        self.facts.update(
            {
                key: self.outputs[key]
                for key in ("stream_name", "region", "cluster_id", "dashboard_url", "expires_at")
                if self.outputs.get(key)
            }
        )

    def wait_ready(self) -> None:
        cluster_id = self.outputs.get("cluster_id")
        step_ids: Mapping[str, str] = self.outputs.get("step_ids") or {}
        checkpoints = [
            str(value["checkpoint"])
            for value in (self.outputs.get("pipelines") or {}).values()
            if isinstance(value, Mapping) and value.get("checkpoint")
        ]
        if cluster_id and step_ids:
            emr = self._client("emr")
            self.show.step(f"waiting for the pipelines' steps to run: {', '.join(step_ids)}")
            if not wait_until(
                lambda: steps_running(steps_state(emr, cluster_id, step_ids), cluster_id=cluster_id),
                timeout_s=READY_TIMEOUT_S,
                tick=lambda waited: self.show.line(f"steps starting ({waited:.0f}s)"),
                clock=self._clock,
                sleep=self._sleep,
            ):
                raise RunFailedError(
                    f"the pipelines' EMR steps were not all RUNNING within {READY_TIMEOUT_S // 60} minutes "
                    f"(cluster {cluster_id}); see the EMR console."
                )
        s3 = self._client("s3")
        if checkpoints and not wait_until(
            lambda: all(query_started(s3, uri) for uri in checkpoints),
            timeout_s=READY_TIMEOUT_S,
            tick=lambda waited: self.show.line(f"waiting for the queries to start ({waited:.0f}s)"),
            clock=self._clock,
            sleep=self._sleep,
        ):
            raise RunFailedError(
                f"the streaming queries did not start within {READY_TIMEOUT_S // 60} minutes (no metadata in "
                f"{', '.join(checkpoints)}); see the steps' logs."
            )

    def _locust_argv(self, scenario: str) -> list[str]:
        from loadtest.runner import LocustRun

        settings = self.settings
        return LocustRun(
            stream=str(self.outputs["stream_name"]),
            region=str(self.outputs["region"]),
            endpoint_url=None,
            ledger_dir=str(self.ledger_dir / scenario),
            scenario=scenario,
            users=settings.users,
            spawn_rate=settings.users,
            target_rate=settings.rate,
            csv_prefix=str(self.run_dir / f"locust-{scenario}"),
            html=str(self.run_dir / f"locust-{scenario}.html"),
            shape=settings.shape,
            shape_duration_s=settings.duration_s,
        ).argv()

    def load_generators(self) -> LoadGenerators:
        """Locust on the stack's Fargate tasks when it has ``lakestack:loadgen`` (its ``loadgen`` output), else
        one Locust process per scenario on this machine."""
        loadgen = self.outputs.get("loadgen")
        if loadgen:
            settings = self.settings
            return FargateLoadGenerators(
                ecs=self._client("ecs"),
                s3=self._client("s3"),
                loadgen=loadgen,
                load=FargateLoad(
                    run_id=self.run_dir.name,
                    users=settings.users,
                    rate=settings.rate,
                    duration_s=settings.duration_s,
                    shape=settings.shape,
                ),
                ledger_dir=self.ledger_dir,
                clock=self._clock,
                sleep=self._sleep,
                tick=self.show.line,
            )
        env = dict(os.environ)
        if self.stack_settings.aws_profile:
            env["AWS_PROFILE"] = self.stack_settings.aws_profile
        for scenario in self.scenarios:
            (self.ledger_dir / scenario).mkdir(parents=True, exist_ok=True)
        return LocalLocusts(
            argv=self._locust_argv,
            env=env,
            run_dir=self.run_dir,
            ledger_dirs=[self.ledger_dir / scenario for scenario in self.scenarios],
        )

    def load(self) -> int:
        """One Locust per scenario the stack's pipelines need, at once: on Fargate when the stack has a load
        generator, else from this machine; then its ledgers and statistics in the run's folder."""
        settings = self.settings
        generators = self.load_generators()
        where = "Fargate" if isinstance(generators, FargateLoadGenerators) else "this machine"
        self.show.step(
            f"sending {', '.join(self.scenarios)} events to {self.outputs['stream_name']} from {where}: "
            f"{settings.load_summary()} each"
        )
        self._load_started = self._clock()
        began = datetime.now(UTC)

        def tick(acknowledged: int) -> bool:
            elapsed = self._clock() - (self._load_started or 0.0)
            self.show.line(f"sent {acknowledged:,} acknowledged | {elapsed:.0f}s")
            return False

        overran, notes = drive(
            generators,
            self.scenarios,
            budget_s=settings.duration_s + 120,
            on_tick=tick,
            clock=self._clock,
            sleep=self._sleep,
            every_s=1.0 if where == "this machine" else POLL_S,
        )
        if overran:
            notes.insert(0, "the load generators were still running 120s past the planned duration: stopped")
        self._notes.extend(notes)
        self._load_window = (began, datetime.now(UTC))
        total = generators.collect(self.run_dir)
        self.show.step(f"Locust done: {total:,} events acknowledged; draining")
        return total

    def _storage_options(self) -> dict[str, str]:
        from jobs.lake import storage_options_for

        return storage_options_for(str(self.outputs["table_uri"]), region=str(self.outputs["region"]))

    def drain(self, acknowledged: int) -> None:
        table_uri, options = str(self.outputs["table_uri"]), self._storage_options()
        landed = 0

        def caught_up() -> bool:
            nonlocal landed
            landed = lake_rows(table_uri, options)
            return landed >= acknowledged

        if not wait_until(
            caught_up,
            timeout_s=self.settings.drain_timeout_s,
            tick=lambda waited: self.show.line(f"draining: {landed:,}/{acknowledged:,} in the bronze table"),
            clock=self._clock,
            sleep=self._sleep,
        ):
            self._notes.append(
                f"the bronze table held {landed:,} of {acknowledged:,} rows after the {self.settings.drain_timeout_s:g}s drain timeout"
            )

    def _cost_model(self, event_bytes: float) -> CostModel:
        estimate = estimate_hourly_cost(self.stack_settings)
        before_h = ((self._load_started or 0.0) - (self._up_started or 0.0)) / 3600
        accrued = estimate.hourly_usd * before_h
        return CostModel(
            hourly_usd=estimate.hourly_usd,
            usd_per_event=estimate.usd_per_gb * metered_bytes(event_bytes) / GB,
            accrued_before_usd=round(accrued, 4),
            note=f"includes {accrued:.2f} USD while the stack stood up",
        )

    def measure(self) -> RunReport:
        """Reconcile the bronze table read back from S3 with the ledgers, by stream position (as the demo's
        ingest check does); the run over time with CloudWatch's metrics beside it."""
        from lakestack.demo import report_from_figures
        from lakestack.demo_pipelines.ingest import IngestPipeline, reconcile_bronze
        from lakestack.measure import read_bronze, run_timeline
        from loadtest.ledger import read_ledger

        self.show.step("reading the bronze table back from S3 and reconciling it with the ledgers")
        table_uri, options = str(self.outputs["table_uri"]), self._storage_options()
        entries = [
            entry
            for scenario in self.scenarios
            if (self.ledger_dir / scenario).is_dir()
            for entry in read_ledger(self.ledger_dir / scenario)
        ]
        figures = reconcile_bronze(table_uri, options, entries)
        bronze = read_bronze(table_uri, options)
        event_bytes = bronze.payload_bytes / len(bronze.rows) if bronze.rows else 0.0
        metrics = self._stream_metrics()
        timeline = run_timeline(
            bronze,
            ledger_dir=self.ledger_dir,
            checkpoint=self._ingest_checkpoint(),
            cost=self._cost_model(event_bytes),
            s3_client=lambda: self._client("s3"),
            stream_metrics=metrics.series if metrics is not None else None,
        )
        report = report_from_figures(
            {IngestPipeline.name: figures},
            micro_batches=len(bronze.commit_times),
            duration_s=round(self._clock() - (self._up_started or self._clock()), 1),
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
            notes=(
                *self._notes,
                "latency compares this machine's clock (event_time) with the cluster's (commit)",
            ),
        )
        return dataclasses.replace(report, timeline=timeline)

    def _ingest_checkpoint(self) -> str | None:
        pipelines = self.outputs.get("pipelines") or {}
        ingest = pipelines.get("ingest") if isinstance(pipelines, Mapping) else None
        return str(ingest["checkpoint"]) if isinstance(ingest, Mapping) and ingest.get("checkpoint") else None

    def _stream_metrics(self) -> StreamMetrics | None:
        if self._load_window is None:
            return None
        began = self._load_window[0]
        try:
            metrics = fetch_stream_metrics(
                self._client("cloudwatch"),
                str(self.outputs["stream_name"]),
                start=began,
                end=datetime.now(UTC),
            )
        except Exception as error:  # the lake is the measure; CloudWatch is a second opinion
            self._notes.append(f"CloudWatch metrics unavailable: {error}")
            return None
        self.facts["cloudwatch"] = metrics.summary()
        self._notes.extend(metrics.messages)
        return metrics

    def destroy(self) -> Teardown:
        """`pulumi destroy`, then ask the state what is left (nothing, when it completed)."""
        if not self._created:
            return Teardown(complete=True)
        self.show.step(f"pulumi destroy --stack {self.stack}")
        failure = ""
        try:
            self.automation.down(self.stack, on_output=self._pulumi_log("destroy"))
        except Exception as error:
            failure = str(error).splitlines()[0] if str(error) else type(error).__name__
        try:
            left = self.automation.resources(self.stack)
        except Exception as error:
            return self._incomplete([f"unknown: the stack's state could not be read ({error})"], failure)
        if not left and not failure:
            return Teardown(complete=True)
        shown = [urn.rsplit("::", 1)[-1] + f" ({urn.split('::')[2]})" for urn in left[:10]]
        more = [f"and {len(left) - 10} more"] if len(left) > 10 else []
        return self._incomplete([*shown, *more] or ["nothing in the state, but destroy failed"], failure)

    def _incomplete(self, left: list[str], failure: str) -> Teardown:
        if failure:
            left = [*left, f"(pulumi destroy: {failure})"]
        return Teardown(
            complete=False,
            left=tuple(left),
            remove_with=(
                f"lakestack down --stack {self.stack} (or pulumi destroy --stack {self.stack}); every resource is "
                f"tagged lakestack:stack={self.stack}, and `lakestack sweep --yes` removes it once expired"
            ),
        )

    def kept(self) -> Teardown:
        if not self._created:
            return Teardown(complete=True)
        expires = self.outputs.get("expires_at") or "its lakestack:expires-at tag"
        return Teardown(
            complete=False,
            kept=True,
            left=(f"every resource of stack {self.stack} (billed until destroyed; expires {expires})",),
            remove_with=f"lakestack down --stack {self.stack}, or `lakestack sweep --yes` after it expires",
        )


__all__ = [
    "Automation",
    "CloudBench",
    "PulumiAutomation",
    "boto3_clients",
    "lake_rows",
    "query_started",
    "steps_running",
    "steps_state",
    "wait_until",
]
