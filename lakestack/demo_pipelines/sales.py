"""The sales pipeline in the demo: its query, and its tables checked against the sales scenario's ground truth.

Checks (each must hold for ``ok``): silver holds every acknowledged valid sale exactly once (``missing``,
``duplicates``); the quarantine holds exactly the malformed records' positions; the job removed as many
duplicates as were resent and counted every other scenario's row; bronze rows = silver + quarantined +
duplicates removed + other types; gold equals the truth per product and minute. Also reported: latency from
event time to the silver commit, and the JSON-vs-Delta comparison.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from lakestack.demo_pipelines._base import (
    JobPipeline,
    Loads,
    RunContext,
    ScenarioLoad,
    invariant_holds,
    job_totals,
    mismatch,
    quarantined_positions,
)
from lakestack.report import percentile

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from jobs.pipelines.sales import SalesSettings

_JSON_DDL = (
    "sales_id BIGINT, product_name STRING, sales_datetime TIMESTAMP, sales_amount DECIMAL(12,2), "
    "event_id STRING, event_time TIMESTAMP, event_processing_time TIMESTAMP, shard_id STRING, "
    "sequence_number STRING"
)
_QUERY_RUNS = 2


class SalesPipeline(JobPipeline):
    """bronze -> silver ``sales``, ``sales_quarantine``, gold ``sales_by_product_minute`` (+ JSON sink)."""

    name: ClassVar[str] = "sales"
    scenarios: ClassVar[tuple[str, ...]] = ("sales",)

    def settings(self, run: RunContext) -> SalesSettings:
        from jobs.pipelines.sales import SalesSettings

        return SalesSettings(job=run.job_settings(self.name), json_sink=f"{run.lake}/sales_json")

    def check(self, run: RunContext, loads: Loads) -> dict[str, Any]:
        from deltalake import DeltaTable

        from jobs.pipelines import sales

        settings = self.settings(run)
        load = loads["sales"]
        malformed = load.malformed()
        silver = DeltaTable(
            settings.silver, storage_options=run.storage_options(settings.silver)
        ).to_pyarrow_table(columns=["event_id", "event_time"])
        silver_ids = Counter(silver["event_id"].to_pylist())
        acked_valid = [e.event_id for e in load.entries if e.event_id not in malformed]
        expected_ids = Counter(set(acked_valid))
        missing, unexpected = mismatch(expected_ids, {i: 1 for i in silver_ids})
        duplicates = sum(n - 1 for n in silver_ids.values())

        quarantine = DeltaTable(
            settings.quarantine, storage_options=run.storage_options(settings.quarantine)
        ).to_pyarrow_table(columns=["shard_id", "sequence_number"])
        quarantined = quarantined_positions(quarantine)
        expected_quarantine = loads.expected_quarantine("sales")
        # Totals over every batch: the per-batch files of all but the newest are pruned on long runs.
        total = job_totals(sales.read_totals(settings))
        bronze_rows = run.bronze_rows()
        figures: dict[str, Any] = {
            "rows": silver.num_rows,
            "missing": missing,
            "duplicates": duplicates,
            "unexpected": unexpected,
            "quarantined": sum(quarantined.values()),
            "expected_quarantined": sum(expected_quarantine.values()),
            "quarantine_matches_truth": quarantined == expected_quarantine,
            "duplicates_removed": total["duplicates_removed"],
            "expected_duplicates_removed": len(acked_valid) - len(set(acked_valid)),
            "other_types": total["other_types"],
            "expected_other_types": loads.expected_other_types("sales"),
            "late": total["late"],
            "bronze_rows": bronze_rows,
            "invariant_holds": invariant_holds(bronze_rows, total),
            "gold_matches_truth": _gold_matches(
                settings, load, acked_valid, run.storage_options(settings.gold)
            ),
            **_latency(settings, run.storage_options(settings.silver)),
            "json_vs_delta": compare_json_and_delta(run, settings),
        }
        figures["ok"] = bool(
            missing == 0
            and duplicates == 0
            and unexpected == 0
            and figures["quarantine_matches_truth"]
            and figures["duplicates_removed"] == figures["expected_duplicates_removed"]
            and figures["other_types"] == figures["expected_other_types"]
            and figures["invariant_holds"]
            and figures["gold_matches_truth"]
            and figures["json_vs_delta"].get("answers_match", False)
        )
        return {"ok": figures.pop("ok"), **figures}


def _gold_matches(
    settings: SalesSettings, load: ScenarioLoad, acked_valid: list[str], storage_options: dict[str, str]
) -> bool:
    """Gold (on-time plus late) equals the generators' per product and minute truth.

    The truth counts what was generated; it is comparable when every generated valid event was acknowledged.
    """
    from deltalake import DeltaTable

    truth: Counter[str] = Counter()
    cents: Counter[str] = Counter()
    generated = 0
    for part in load.truths:
        generated += int(part.get("valid_events", 0))
        for key, (count, amount) in part.get("by_product_minute", {}).items():
            truth[key] += count
            cents[key] += amount
    if generated != len(set(acked_valid)):
        return False
    found: Counter[str] = Counter()
    found_cents: Counter[str] = Counter()
    for row in DeltaTable(settings.gold, storage_options=storage_options).to_pyarrow_table().to_pylist():
        key = f"{row['product_name']}|{row['minute']:%Y-%m-%dT%H:%M}:00Z"
        found[key] += row["sales"] + row["late_sales"]
        found_cents[key] += int((row["revenue"] + row["late_revenue"]) * 100)
    return +found == +truth and +found_cents == +cents


def _latency(settings: SalesSettings, options: dict[str, str]) -> dict[str, float | None]:
    """Event time to the silver commit that made each row visible (p50, p95)."""
    import pyarrow.parquet as pq

    from jobs._files import filesystem_for, join
    from jobs.sources._delta_log import DeltaHistory

    history = DeltaHistory(settings.silver, options)
    committed: dict[str, float] = {}
    for version in range(history.latest_version() + 1):
        commit = history.commit(version)
        for entry in commit.adds:
            committed[entry.path] = commit.timestamp_ms / 1000
    fs, root = filesystem_for(settings.silver, options)
    latencies: list[float] = []
    for path, at in committed.items():
        times = pq.read_table(join(root, path), columns=["event_time"], filesystem=fs)["event_time"]
        latencies.extend(at - t.timestamp() for t in times.to_pylist() if t is not None)
    return {
        "latency_p50_s": _rounded(percentile(latencies, 50)),
        "latency_p95_s": _rounded(percentile(latencies, 95)),
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _stored(uri: str, options: dict[str, str]) -> tuple[int, int] | None:
    """Bytes and files stored under ``uri`` (a local folder or an object-store prefix), Spark's ``.crc`` side
    files left out; None when nothing is there."""
    from pyarrow import fs as pafs

    from jobs._files import filesystem_for

    fs, root = filesystem_for(uri, options)
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    files = [i for i in infos if i.type == pafs.FileType.File and not i.base_name.endswith(".crc")]
    if not files:
        return None
    return sum(i.size or 0 for i in files), len(files)


def _timed(run: Callable[[], Any]) -> tuple[float, Any]:
    runs = []
    answer = None
    for _ in range(_QUERY_RUNS):
        started = time.perf_counter()
        answer = run()
        runs.append(time.perf_counter() - started)
    return min(runs), answer


def _bound(query: Callable[[DataFrame], Any], frame: Callable[[], DataFrame]) -> Callable[[], Any]:
    return lambda: query(frame())


def compare_json_and_delta(run: RunContext, settings: SalesSettings) -> dict[str, Any]:
    """Bytes stored, file count, and Spark's time for three queries on silver as Delta and as JSON files.

    Three readers: ``json`` is Spark's JSON reader (given the silver schema: no inference pass); ``delta`` is
    Spark's Parquet reader over the files the Delta log lists, which is how a JVM Delta reader reads a table;
    ``delta_python_source`` is ``jobs.sources.read_delta``, the kit's reader where no Delta jars load (the
    same files, plus a Python planner per query). Each time is the faster of two runs of the query (the first
    may pay for a cold cache); the three readers must give the same answers.
    """
    from deltalake import DeltaTable
    from pyspark.sql import functions as F

    from jobs.sources import read_delta

    if settings.json_sink is None:
        return {}
    spark = run.spark
    json_sink = settings.json_sink
    options = run.storage_options(settings.silver)
    stored = {
        "json": _stored(json_sink, run.storage_options(json_sink)),
        "delta": _stored(settings.silver, options),
    }
    if stored["json"] is None:
        return {"answers_match": True, "note": "no silver rows, nothing to compare"}
    frames: dict[str, Callable[[], DataFrame]] = {
        "json": lambda: spark.read.schema(_JSON_DDL).json(json_sink),
        "delta": lambda: spark.read.parquet(
            *DeltaTable(settings.silver, storage_options=options).file_uris()
        ),
        "delta_python_source": lambda: read_delta(spark, settings.silver, storage_options=options),
    }
    probe = (
        frames["delta"]().agg(F.max("sales_datetime").alias("newest"), F.min("sales_id").alias("one")).first()
    )
    assert probe is not None
    newest, one_id = probe["newest"], probe["one"]
    queries: dict[str, Callable[[DataFrame], Any]] = {
        "revenue_by_product": lambda df: sorted(
            (r[0], str(r[1])) for r in df.groupBy("product_name").agg(F.sum("sales_amount")).collect()
        ),
        "one_sales_id": lambda df: sorted(
            r["event_id"] for r in df.filter(F.col("sales_id") == one_id).collect()
        ),
        "last_hour_revenue": lambda df: str(
            df.filter(F.col("sales_datetime") > newest - timedelta(hours=1))
            .agg(F.sum("sales_amount"))
            .collect()[0][0]
        ),
    }
    result: dict[str, Any] = {}
    answers: dict[str, dict[str, Any]] = {}
    for reader, frame in frames.items():
        size, files = stored["json" if reader == "json" else "delta"] or (0, 0)
        result[reader] = {"bytes": size, "files": files}
        answers[reader] = {}
        for name, query in queries.items():
            seconds, answer = _timed(_bound(query, frame))
            result[reader][f"{name}_s"] = round(seconds, 3)
            answers[reader][name] = answer
    result["answers_match"] = answers["json"] == answers["delta"] == answers["delta_python_source"]
    return result
