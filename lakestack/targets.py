"""Where a local run goes: the emulators standing in for one cloud, and what the run's parts need to use them.

A target starts its emulators, and gives the environment of the run's processes, the Locust command that
loads its stream, the ingest job's settings and the bronze table's storage options. ``aws`` is the moto
server (Kinesis + S3); ``azure`` is Azurite (blob storage, ``abfss://`` through delta-rs) and a Kafka-protocol
broker (Tansu) standing in for Event Hubs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

from infra.config import BRONZE_TABLE
from lakestack import emulator as aws_emulator
from lakestack.emulator.azurite import ACCOUNT as AZURITE_ACCOUNT
from lakestack.emulator.azurite import Azurite
from lakestack.emulator.kafka import KafkaBroker
from lakestack.errors import UserError

if TYPE_CHECKING:
    from jobs.ingest import IngestSettings
    from loadtest.runner import LocustRun

Cloud = Literal["aws", "azure"]
CLOUDS: tuple[str, ...] = get_args(Cloud)

# The local Azure stand-ins' names: one hub with 4 partitions (as an on-demand Kinesis stream starts with
# 4 shards), the lake and checkpoint filesystems of the stack.
AZURE_HUB = "lakestack-local-events"
AZURE_PARTITIONS = 4
AZURE_LAKE_CONTAINER = "lake"
# The pipelines' tables of a local run, under the lake bucket (AWS) or the run's folder (Azure).
DEMO_LAKE_FOLDER = "lake"
AZURE_CONTAINERS = ("lake", "checkpoints")
EMULATOR_URL_VARIABLE = "AZURITE_BLOB_STORAGE_URL"


@dataclass(frozen=True)
class LoadPlan:
    """What a run asks of Locust, whichever stream it loads: an event budget within ``run_time``, or (the
    bench) a ``shape`` for ``shape_duration_s`` seconds."""

    ledger_dir: str
    users: int
    run_time: str | None
    max_events: int | None
    target_rate: float
    csv_prefix: str
    html: str
    scenario: str = "sales"
    shape: str | None = None
    shape_duration_s: float | None = None


class LocalTarget(Protocol):
    """One cloud's emulators, started; see the module docstring."""

    cloud: Cloud
    table_uri: str

    def summary(self) -> str:
        """One line saying where each emulator listens and which stream and table the run uses."""
        ...

    def environment(self) -> dict[str, str]:
        """Variables the run's processes (Spark's workers, Locust) need to reach the emulators."""
        ...

    def locust_run(self, plan: LoadPlan) -> LocustRun:
        """The Locust command that sends the run's events to this target's stream."""
        ...

    def ingest_settings(self, *, checkpoint: str, trigger: str, max_records: int) -> IngestSettings:
        """The ingest job reading this target's stream into its bronze table."""
        ...

    def storage_options(self) -> dict[str, str]:
        """delta-rs options of the bronze table (inside the run's environment)."""
        ...

    def lake_uri(self, run_dir: Path) -> str:
        """Where the run's pipelines keep their tables (``--lake``) and the sales job its JSON sink."""
        ...

    def close(self, *, keep: bool) -> str | None:
        """Stop the emulators, or with ``keep`` leave them running and say how to stop them."""
        ...

    def fault_report(self, *, ledger_dir: Path, checkpoint: str) -> dict[str, Any] | None:
        """The report's ``faults`` block (injected, survived, the clients' own counts); None without faults.

        Stops the injection first, so the reads that reconcile the run are not faulted.
        """
        ...


class AwsLocalTarget:
    """The moto server with the local stack's stream and buckets (Pulumi.local.yaml)."""

    cloud: Cloud = "aws"
    starting = "starting the emulator (moto server: Kinesis + S3 on 127.0.0.1)"

    def __init__(self, emulator: aws_emulator.Emulator) -> None:
        self.emulator = emulator
        self.table_uri = emulator.state.table_uri

    @classmethod
    def start(
        cls,
        run_dir: Path,
        *,
        port: int | None = None,
        faults: aws_emulator.FaultSpec | None = None,
        faults_seed: int | None = None,
    ) -> AwsLocalTarget:
        return cls(
            aws_emulator.Emulator.start(
                port=port, log_path=run_dir / "emulator.log", faults=faults, faults_seed=faults_seed
            )
        )

    def summary(self) -> str:
        state = self.emulator.state
        line = f"emulator at {state.endpoint_url}; stream {state.stream_name} (on-demand), table {state.table_uri}"
        if state.faults:
            line += f"; injecting faults {state.faults} (seed {state.faults_seed})"
        return line

    def fault_report(self, *, ledger_dir: Path, checkpoint: str) -> dict[str, Any] | None:
        from lakestack.fault_report import collect_faults

        state = self.emulator.state
        if not state.faults:
            return None
        return collect_faults(
            state.endpoint_url, ledger_dir=ledger_dir, checkpoint=checkpoint, region=state.region
        )

    def environment(self) -> dict[str, str]:
        return {**aws_emulator.EMULATOR_CREDENTIALS, "AWS_DEFAULT_REGION": self.emulator.state.region}

    def locust_run(self, plan: LoadPlan) -> LocustRun:
        state = self.emulator.state
        return _locust_run(
            plan, stream=state.stream_name, region=state.region, endpoint_url=state.endpoint_url
        )

    def ingest_settings(self, *, checkpoint: str, trigger: str, max_records: int) -> IngestSettings:
        from jobs import ingest

        state = self.emulator.state
        return ingest.IngestSettings(
            stream=state.stream_name,
            region=state.region,
            endpoint_url=state.endpoint_url,
            table=state.table_uri,
            checkpoint=checkpoint,
            trigger=trigger,
            max_records_per_shard=max_records,
        )

    def storage_options(self) -> dict[str, str]:
        from jobs.lake import storage_options_for

        state = self.emulator.state
        return storage_options_for(state.table_uri, endpoint_url=state.endpoint_url, region=state.region)

    def lake_uri(self, run_dir: Path) -> str:
        # Beside bronze in the emulator's lake bucket, as a stack's pipelines keep theirs in its S3 bucket:
        # Spark reads and writes them through s3a, delta-rs through its object store.
        return f"s3://{self.emulator.state.lake_bucket}/{DEMO_LAKE_FOLDER}"

    def close(self, *, keep: bool) -> str | None:
        state = self.emulator.state
        if keep:
            return (
                f"emulator left running at {state.endpoint_url} (pid {state.pid}); stop it: kill {state.pid}"
            )
        self.emulator.close()
        return None


class AzureLocalTarget:
    """Azurite (blob storage) and a Tansu broker (the Event Hub's Kafka endpoint), both on 127.0.0.1."""

    cloud: Cloud = "azure"
    starting = "starting the Azure stand-ins (Azurite: blob storage; Tansu: Kafka protocol for Event Hubs)"

    def __init__(self, azurite: Azurite, broker: KafkaBroker) -> None:
        self.azurite = azurite
        self.broker = broker
        self.hub = AZURE_HUB
        self.table_uri = (
            f"abfss://{AZURE_LAKE_CONTAINER}@{AZURITE_ACCOUNT}.dfs.core.windows.net/{BRONZE_TABLE}"
        )

    @classmethod
    def start(cls, run_dir: Path, *, say: Callable[[str], None] = print) -> AzureLocalTarget:
        azurite = Azurite.start(location=run_dir / "azurite", log_path=run_dir / "azurite.log", say=say)
        try:
            azurite.create_containers(AZURE_CONTAINERS)
            broker = KafkaBroker.start(log_path=run_dir / "broker.log", topics={AZURE_HUB: AZURE_PARTITIONS})
        except BaseException:
            azurite.close()
            raise
        return cls(azurite, broker)

    def summary(self) -> str:
        return (
            f"Azurite at {self.azurite.endpoint_url}; broker at {self.broker.bootstrap}, hub {self.hub} "
            f"({AZURE_PARTITIONS} partitions); table {self.table_uri}"
        )

    def environment(self) -> dict[str, str]:
        # object_store's emulator option reads Azurite's address from this variable only.
        return {EMULATOR_URL_VARIABLE: self.azurite.endpoint_url}

    def locust_run(self, plan: LoadPlan) -> LocustRun:
        return _locust_run(plan, stream=self.hub, eventhubs_bootstrap=self.broker.bootstrap)

    def ingest_settings(self, *, checkpoint: str, trigger: str, max_records: int) -> IngestSettings:
        from jobs import ingest
        from jobs.sources.kafka import KafkaSettings

        return ingest.IngestSettings(
            source="kafka",
            kafka=KafkaSettings(
                bootstrap=self.broker.bootstrap,
                topic=self.hub,
                max_offsets_per_trigger=max_records * AZURE_PARTITIONS,
            ),
            table=self.table_uri,
            checkpoint=checkpoint,
            trigger=trigger,
        )

    def storage_options(self) -> dict[str, str]:
        from jobs.lake import storage_options_for

        return storage_options_for(self.table_uri)

    def lake_uri(self, run_dir: Path) -> str:
        # The run's folder, not Azurite: no Hadoop file system of the Spark lines here reaches Azurite
        # (docs/concepts/scale.md), and the pipeline tables are written by delta-spark from the executors.
        return str((run_dir / DEMO_LAKE_FOLDER).resolve())

    def close(self, *, keep: bool) -> str | None:
        if keep:
            pids = f"{self.azurite.process.pid} {self.broker.process.pid}"
            return (
                f"Azurite left running at {self.azurite.endpoint_url}, the broker at {self.broker.bootstrap} "
                f"(pids {pids}); stop them: kill {pids}"
            )
        self.broker.close()
        self.azurite.close()
        return None

    def fault_report(self, *, ledger_dir: Path, checkpoint: str) -> dict[str, Any] | None:
        return None  # start_target refuses faults for the Azure stand-ins


def _locust_run(
    plan: LoadPlan,
    *,
    stream: str,
    region: str = "",
    endpoint_url: str | None = None,
    eventhubs_bootstrap: str | None = None,
) -> LocustRun:
    from loadtest.runner import LocustRun

    return LocustRun(
        stream=stream,
        region=region,
        endpoint_url=endpoint_url,
        eventhubs_bootstrap=eventhubs_bootstrap,
        ledger_dir=plan.ledger_dir,
        scenario=plan.scenario,
        users=plan.users,
        spawn_rate=plan.users,
        run_time=plan.run_time,
        max_events=plan.max_events,
        target_rate=plan.target_rate,
        csv_prefix=plan.csv_prefix,
        html=plan.html,
        shape=plan.shape,
        shape_duration_s=plan.shape_duration_s,
    )


def start_target(
    cloud: Cloud,
    run_dir: Path,
    *,
    port: int | None = None,
    faults: aws_emulator.FaultSpec | None = None,
    faults_seed: int | None = None,
    say: Callable[[str], None] = print,
) -> LocalTarget:
    """Start ``cloud``'s emulators for a run whose files go under ``run_dir``.

    Raises:
        UserError: faults were asked of the Azure stand-ins, which do not inject any.
    """
    if cloud == "azure":
        if faults:
            raise UserError(
                "--faults: fault injection is built into the AWS emulator only; found it asked of "
                "--cloud azure (Azurite and the Kafka broker inject none). Drop --faults or use --cloud aws."
            )
        say(AzureLocalTarget.starting)
        return AzureLocalTarget.start(run_dir, say=say)
    say(AwsLocalTarget.starting)
    return AwsLocalTarget.start(run_dir, port=port, faults=faults, faults_seed=faults_seed)
