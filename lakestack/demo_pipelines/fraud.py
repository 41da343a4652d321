"""The fraud pipeline in the demo: its query beside ingest, then its tables judged against the truth.

Checks (each must hold for ``ok``): silver ``transactions`` holds every acknowledged valid transaction
exactly once (``missing``, ``duplicates``, ``unexpected``); every injected fraud alerted once and nothing
else (precision and recall 1.0 when nothing was late; with late transactions, every fraud that could be
judged), the quarantine holds exactly the malformed records' positions, every other scenario's row was
counted, and bronze rows = silver + quarantined + duplicates removed + other types. Also reported: detection
latency, the model's ROC AUC and precision at its threshold, and the transactions table's layout before and
after compaction + Z-order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from lakestack.demo_pipelines._base import (
    JobPipeline,
    Loads,
    RunContext,
    invariant_holds,
    job_totals,
    quarantined_positions,
)
from lakestack.demo_pipelines._fraud_score import model_figures, rule_figures, silver_figures

if TYPE_CHECKING:
    from jobs.lake import LakeTable
    from jobs.pipelines.fraud import FraudSettings

# Demo-sized rewrite target (64 KiB): at a few thousand rows delta-rs' default target makes one file, which
# shows no skipping; `python -m jobs fraud --optimize` on a real table keeps the engine's default.
DEMO_TARGET_FILE_SIZE = 64 * 1024


class FraudPipeline(JobPipeline):
    """bronze -> ``transactions`` (scored), ``transactions_quarantine``, ``fraud_alerts``."""

    name: ClassVar[str] = "fraud"
    scenarios: ClassVar[tuple[str, ...]] = ("transactions",)

    def settings(self, run: RunContext) -> FraudSettings:
        from jobs.pipelines.fraud import FraudSettings

        return FraudSettings(job=run.job_settings(self.name))

    def check(self, run: RunContext, loads: Loads) -> dict[str, Any]:
        from jobs.pipelines import fraud
        from jobs.pipelines._fraud_model import load_model

        settings = self.settings(run)
        job = settings.job

        def table(name: str) -> LakeTable:
            from jobs.lake import DeltaRsEngine

            uri = job.table(name)
            return DeltaRsEngine().table(uri, storage_options=job.storage_options(uri))

        load = loads["transactions"]
        truth = {tid for part in load.truths for tid in part.get("fraud_transaction_ids", [])}
        malformed = load.malformed()
        acknowledged_valid = [e.event_id for e in load.entries if e.event_id not in malformed]
        transactions = table(fraud.TRANSACTIONS).read()
        silver = silver_figures(acknowledged_valid, transactions)
        alerts = table(fraud.ALERTS)
        commits = {c.batch_id: c.timestamp for c in alerts.commits() if c.batch_id is not None}
        figures = rule_figures(truth, alerts.read(), transactions, commits)

        quarantine = table(fraud.QUARANTINE).read(columns=["shard_id", "sequence_number"])
        quarantined = quarantined_positions(quarantine)
        expected_quarantine = loads.expected_quarantine("transactions")
        total = job_totals(fraud.read_totals(settings))  # over every batch, pruned ones included
        bronze_rows = run.bronze_rows()
        model = load_model(settings.model)
        layout = fraud.optimize_transactions(
            job.lake,
            storage_options=job.storage_options(job.table(fraud.TRANSACTIONS)),
            target_file_size=DEMO_TARGET_FILE_SIZE,
        )
        checks = {
            "transactions": transactions.num_rows,
            **silver,
            "quarantined": sum(quarantined.values()),
            "expected_quarantined": sum(expected_quarantine.values()),
            "quarantine_matches_truth": quarantined == expected_quarantine,
            "duplicates_removed": total["duplicates_removed"],
            "other_types": total["other_types"],
            "expected_other_types": loads.expected_other_types("transactions"),
            "bronze_rows": bronze_rows,
            "invariant_holds": invariant_holds(bronze_rows, total),
        }
        ok = bool(
            figures.pop("ok")
            and silver == {"missing": 0, "duplicates": 0, "unexpected": 0}
            and checks["quarantine_matches_truth"]
            and checks["other_types"] == checks["expected_other_types"]
            and checks["invariant_holds"]
        )
        return {
            "ok": ok,
            **figures,
            **checks,
            "model": model_figures(truth, transactions, threshold=model.threshold, version=model.version),
            "layout": layout.to_dict() if layout else None,
        }
