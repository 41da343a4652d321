"""The fraud pipeline in the demo: start its query beside ingest, then judge its tables against the truth."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakestack.pipelines._fraud_score import model_figures, rule_figures

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

# Demo-sized rewrite target (64 KiB): at a few thousand rows the default (100 MiB+) makes one file, which
# shows no skipping; real tables use the engine's default through `python -m jobs fraud --optimize`.
DEMO_TARGET_FILE_SIZE = 64 * 1024


def read_truth(ledger_dir: Path) -> set[str]:
    """The injected frauds' (large) transaction ids from every generator's truth file of the run."""
    ids: set[str] = set()
    for path in sorted(ledger_dir.glob("truth-transactions-*.json")):
        ids.update(json.loads(path.read_text(encoding="utf-8")).get("fraud_transaction_ids", []))
    return ids


@dataclass(frozen=True)
class FraudRun:
    """Where one demo run's fraud job reads and writes."""

    source_table: str
    lake: str
    checkpoint: str
    endpoint_url: str | None = None
    region: str | None = None

    def settings(self, trigger: str) -> Any:
        from jobs.pipelines import fraud
        from jobs.pipelines._job import JobSettings

        job = JobSettings(
            source_table=self.source_table,
            lake=self.lake,
            checkpoint=self.checkpoint,
            trigger=trigger,
            endpoint_url=self.endpoint_url,
            region=self.region,
        )
        return fraud.FraudSettings(job=job)

    def start(self, spark: SparkSession, *, trigger: str = "processing-time=1s") -> StreamingQuery:
        from jobs.pipelines import fraud

        return fraud.start(spark, self.settings(trigger))

    def check(self, truth: set[str]) -> dict[str, Any]:
        """The rule's and the model's figures, then the layout before/after compaction + Z-order."""
        from jobs.lake import DeltaRsEngine
        from jobs.pipelines import fraud
        from jobs.pipelines._fraud_model import load_model

        settings = self.settings("available-now")
        engine = DeltaRsEngine()

        def table(name: str) -> Any:
            uri = settings.table_uri(name)
            return engine.table(uri, storage_options=settings.job.storage_options(uri))

        transactions = table(fraud.TRANSACTIONS).read()
        alerts_table = table(fraud.ALERTS)
        commits: Mapping[int, Any] = {
            c.batch_id: c.timestamp for c in alerts_table.commits() if c.batch_id is not None
        }
        figures = rule_figures(truth, alerts_table.read(), transactions, commits)
        model = load_model(None)
        figures["transactions"] = transactions.num_rows
        figures["quarantined"] = table(fraud.QUARANTINE).read(columns=["reason"]).num_rows
        figures["model"] = model_figures(
            truth, transactions, threshold=model.threshold, version=model.version
        )
        layout = fraud.optimize_transactions(
            self.lake,
            storage_options=settings.job.storage_options(settings.table_uri(fraud.TRANSACTIONS)),
            target_file_size=DEMO_TARGET_FILE_SIZE,
        )
        figures["layout"] = layout.to_dict() if layout else None
        return figures
