"""The demo's plug-in interface: what a pipeline tells ``lakestack demo`` and what the demo gives it.

A plug-in is a class with two class attributes and two methods (see :class:`DemoPipeline`); the demo starts
every selected pipeline's query in one Spark session, loads the scenarios they need, drains each query once
its upstream has caught up, then asks each plug-in to check its tables against the scenarios' ground truth.

Adding a pipeline: one module in this package with its plug-in class, and one line in ``PIPELINES``
(``lakestack/demo_pipelines/__init__.py``).
"""

from __future__ import annotations

import importlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast

if TYPE_CHECKING:
    from types import ModuleType

    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from jobs.pipelines._job import JobSettings
    from lakestack.targets import LocalTarget
    from loadtest.ledger import LedgerEntry

# A bronze position: (shard_id, sequence_number) as the ledger and the bronze table spell them.
Position = tuple[str, str]
# Kinds of malformed records that carry no usable event_type: every pipeline quarantines them.
UNATTRIBUTABLE_KINDS = frozenset({"not_utf8", "not_json", "not_object", "no_event_type"})


@dataclass(frozen=True)
class RunContext:
    """Where one demo run keeps things, and the Spark session every pipeline's query runs in.

    Attributes:
        spark: the demo's session (local mode).
        run_dir: ``reports/<timestamp>/``; checkpoints and the local lake live under it.
        target: the emulators of ``--cloud`` (``lakestack.targets``): the stream, the bronze table.
        lake: where pipelines put their tables (``--lake``), a local folder of the run.
        trigger: the trigger pipelines run with while load flows.
        max_records_per_shard: the ingest job's cap per shard (partition) and micro-batch.
    """

    spark: SparkSession
    run_dir: Path
    target: LocalTarget
    lake: str
    trigger: str = "processing-time=1s"
    max_records_per_shard: int = 10_000

    @property
    def bronze(self) -> str:
        """The bronze table's URI (on the emulator's S3, or Azurite)."""
        return self.target.table_uri

    @property
    def endpoint_url(self) -> str | None:
        """The S3 emulator's endpoint (``--cloud aws``); None elsewhere."""
        emulator = getattr(self.target, "emulator", None)
        return None if emulator is None else str(emulator.state.endpoint_url)

    @property
    def region(self) -> str | None:
        emulator = getattr(self.target, "emulator", None)
        return None if emulator is None else str(emulator.state.region)

    def checkpoint(self, pipeline: str) -> str:
        """The checkpoint of one pipeline's query in this run."""
        return str((self.run_dir / "checkpoints" / pipeline).resolve())

    def job_settings(self, pipeline: str) -> JobSettings:
        """The common flags (contract C3) of one pipeline's job in this run: bronze in, the run's lake out."""
        from jobs.pipelines._job import JobSettings

        return JobSettings(
            source_table=self.bronze,
            lake=self.lake,
            checkpoint=self.checkpoint(pipeline),
            trigger=self.trigger,
            endpoint_url=self.endpoint_url,
            region=self.region,
        )

    def bronze_rows(self) -> int:
        """Rows in the bronze table now."""
        from deltalake import DeltaTable

        return (
            DeltaTable(self.bronze, storage_options=self.storage_options(self.bronze))
            .to_pyarrow_dataset()
            .count_rows()
        )

    def storage_options(self, uri: str) -> dict[str, str]:
        """delta-rs storage options for a table of this run (the emulator's endpoint for s3:// URIs)."""
        from jobs.lake import scoped_storage_options

        if uri == self.bronze:
            return self.target.storage_options()
        return scoped_storage_options(uri, endpoint_url=self.endpoint_url, region=self.region)


@dataclass
class ScenarioLoad:
    """What one scenario's Locust run acknowledged (its ledger) and generated (its ground-truth files)."""

    scenario: str
    entries: list[LedgerEntry] = field(default_factory=list)
    truths: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def read(cls, scenario: str, directory: Path) -> ScenarioLoad:
        """The scenario's share of a ledger folder every Locust process writes to.

        Each process writes ``ledger-<host>-<pid>.jsonl`` and, per user, ``truth-<scenario>-<host>-<pid>-<n>.json``:
        the truth files name the processes that sent this scenario, so their ledgers are its entries.
        """
        from loadtest.ledger import read_ledger

        truth_files = sorted(directory.glob(f"truth-{scenario}-*.json"))
        processes = {
            match.group(1)
            for path in truth_files
            if (match := re.fullmatch(rf"truth-{re.escape(scenario)}-(.+)-\d+\.json", path.name))
        }
        entries = [
            entry
            for process in sorted(processes)
            if (directory / f"ledger-{process}.jsonl").is_file()
            for entry in read_ledger(directory / f"ledger-{process}.jsonl")
        ]
        return cls(scenario, entries, [json.loads(p.read_text()) for p in truth_files])

    def malformed(self) -> dict[str, str]:
        """Event id -> kind of every malformed record the scenario's generators made."""
        found: dict[str, str] = {}
        for truth in self.truths:
            found.update(truth.get("malformed", {}))
        return found

    def positions(self, event_ids: Iterable[str] | None = None) -> list[Position]:
        """Bronze positions the stream acknowledged (for ``event_ids`` only, when given)."""
        wanted = None if event_ids is None else set(event_ids)
        return [
            (e.shard_id, e.sequence_number) for e in self.entries if wanted is None or e.event_id in wanted
        ]


@dataclass
class Loads:
    """Every scenario loaded in this run, and what a pipeline should therefore find (contract C1)."""

    scenarios: dict[str, ScenarioLoad] = field(default_factory=dict)

    def __getitem__(self, scenario: str) -> ScenarioLoad:
        return self.scenarios.get(scenario) or ScenarioLoad(scenario)

    def all_entries(self) -> list[LedgerEntry]:
        return [e for load in self.scenarios.values() for e in load.entries]

    def unattributable(self) -> set[str]:
        """Event ids of malformed records no pipeline can attribute (quarantined by every pipeline)."""
        return {
            event_id
            for load in self.scenarios.values()
            for event_id, kind in load.malformed().items()
            if kind in UNATTRIBUTABLE_KINDS
        }

    def expected_quarantine(self, event_type: str) -> Counter[Position]:
        """Positions the pipeline of ``event_type`` must quarantine: its scenario's malformed records and
        every scenario's unattributable ones."""
        ids = set(self[event_type].malformed()) | self.unattributable()
        return Counter(p for load in self.scenarios.values() for p in load.positions(ids))

    def expected_other_types(self, event_type: str) -> int:
        """Rows of other scenarios the pipeline of ``event_type`` must count as ``other_types``."""
        unattributable = self.unattributable()
        return sum(
            1
            for name, load in self.scenarios.items()
            if name != event_type
            for e in load.entries
            if e.event_id not in unattributable
        )


class DemoPipeline(Protocol):
    """A pipeline as ``lakestack demo`` runs it.

    Class attributes:
        name: the pipeline's name on ``--pipelines`` and in the report (``"sales"``).
        scenarios: the Locust scenarios it needs loaded (``("sales",)``); the demo loads the union of the
            selected pipelines', each with ``--events`` events.

    Methods:
        start: start the pipeline's streaming query in ``run.spark`` with the run's paths
            (``run.bronze``, ``run.lake``, ``run.checkpoint(name)``, ``run.trigger``) and return it. Called
            after ingest has created the bronze table and before any load is sent.
        check: after every query has drained and stopped (Spark still up), compare the pipeline's tables
            with the ground truth in ``loads`` and return its figures: a JSON-able dict with ``ok`` (True
            only when every check passed). It goes into the report as ``pipelines[name]``.
    """

    name: ClassVar[str]
    scenarios: ClassVar[tuple[str, ...]]

    def start(self, run: RunContext) -> StreamingQuery: ...

    def check(self, run: RunContext, loads: Loads) -> dict[str, Any]: ...


class JobPipeline:
    """The start-up the bronze -> silver plug-ins (sales, fraud) share: their job is the module
    ``jobs.pipelines.<name>``, imported on first use (it loads pyspark), and their query is that module's
    ``start(spark, settings)`` with the plug-in's :meth:`settings` (the run's common flags, ``run.job_settings``,
    plus the pipeline's own)."""

    name: ClassVar[str]
    scenarios: ClassVar[tuple[str, ...]]

    def job(self) -> ModuleType:
        """The pipeline's job module."""
        return importlib.import_module(f"jobs.pipelines.{self.name}")

    def settings(self, run: RunContext) -> Any:
        """The job's settings in this run."""
        raise NotImplementedError

    def start(self, run: RunContext) -> StreamingQuery:
        query: StreamingQuery = self.job().start(run.spark, self.settings(run))
        return query


# What a bronze -> silver job counts over its query (its ``read_totals``), as the demo reports them.
JOB_COUNTS = ("bronze_rows", "silver_rows", "quarantined", "duplicates_removed", "other_types", "late")


def job_totals(totals: Mapping[str, Any]) -> dict[str, int]:
    """The job's :data:`JOB_COUNTS` over every batch of its query (0 for a count it never made)."""
    return {k: int(totals.get(k, 0)) for k in JOB_COUNTS}


def invariant_holds(bronze_rows: int, total: Mapping[str, int]) -> bool:
    """Contract C1: the job read every bronze row, and bronze rows = silver + quarantined + duplicates removed
    + other types."""
    return (
        bronze_rows
        == total["bronze_rows"]
        == total["silver_rows"] + total["quarantined"] + total["duplicates_removed"] + total["other_types"]
    )


def quarantined_positions(quarantine: pa.Table) -> Counter[Position]:
    """The bronze positions in rows read from a quarantine table (its ``shard_id``, ``sequence_number``)."""
    shards, sequences = quarantine["shard_id"].to_pylist(), quarantine["sequence_number"].to_pylist()
    return Counter(zip(cast("list[str]", shards), cast("list[str]", sequences), strict=True))


def counted(positions: Iterable[Position]) -> Counter[Position]:
    return Counter(positions)


def mismatch(expected: Mapping[Any, int], found: Mapping[Any, int]) -> tuple[int, int]:
    """(missing, extra) between two multisets."""
    missing = sum((Counter(expected) - Counter(found)).values())
    extra = sum((Counter(found) - Counter(expected)).values())
    return missing, extra
