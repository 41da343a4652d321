"""The sales job end to end in Spark, against the generator's ground truth: nothing dropped, nothing twice."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from jobs.ingest import bronze_schema
from jobs.lake import DeltaRsEngine
from jobs.pipelines import sales
from jobs.pipelines._job import BatchMetrics, JobSettings

START = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _clock():
    ticks = itertools.count()
    return lambda: START + timedelta(milliseconds=250 * next(ticks))


class Bronze:
    """A bronze table written the way the ingest job writes it, one append per call, positions in order."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.positions: dict[str, list[tuple[str, str]]] = {}
        self._seq = itertools.count(1)
        self._batch = itertools.count()

    def append(self, events) -> None:
        rows = []
        now = datetime.now(UTC)
        batch = next(self._batch)
        for event in events:
            seq = str(next(self._seq))
            self.positions.setdefault(event.event_id, []).append(("shardId-000000000000", seq))
            rows.append((event.data, event.partition_key, "shardId-000000000000", seq, now, now, batch))
        columns = list(zip(*rows, strict=True))
        write_deltalake(
            self.uri,
            pa.Table.from_arrays([pa.array(c) for c in columns], schema=bronze_schema()),
            mode="append",
        )


def _settings(tmp_path: Path, bronze: Bronze) -> sales.SalesSettings:
    job = JobSettings(
        source_table=bronze.uri,
        lake=str(tmp_path / "lake"),
        checkpoint=str(tmp_path / "checkpoint"),
        trigger="available-now",
    )
    return sales.SalesSettings(job=job, json_sink=str(tmp_path / "json"), max_files_per_trigger=1)


def _read(uri: str) -> list[dict]:
    return DeltaTable(uri).to_pyarrow_table().to_pylist()


def _gold_as_truth(settings: sales.SalesSettings) -> dict[str, list[int]]:
    return {
        f"{r['product_name']}|{r['minute']:%Y-%m-%dT%H:%M}:00Z": [
            r["sales"] + r["late_sales"],
            int((r["revenue"] + r["late_revenue"]) * 100),
        ]
        for r in _read(settings.gold)
    }


def _json_lines(root: Path) -> list[dict]:
    return [
        json.loads(line) for path in sorted(root.rglob("*.json")) for line in path.read_text().splitlines()
    ]


def test_every_bronze_row_lands_once_in_silver_quarantine_or_the_counts(spark, tmp_path):
    from loadtest.generators import make_generator

    gen = make_generator("sales", seed=11, clock=_clock(), malformed_rate=0.05, duplicate_rate=0.05)
    orders = make_generator("orders", seed=2)
    events = [gen.next_event() for _ in range(240)]
    others = [orders.next_event() for _ in range(15)]
    bronze = Bronze(str(tmp_path / "bronze"))
    bronze.append(events[:100] + others)
    bronze.append(events[100:])
    settings = _settings(tmp_path, bronze)

    assert sales.run(settings, spark=spark) == 0

    truth = gen.ground_truth()
    malformed = truth["malformed"]
    expected_silver = {e.event_id for e in events if e.event_id not in malformed}
    silver = _read(settings.silver)
    assert sorted(r["event_id"] for r in silver) == sorted(expected_silver)
    first_positions = {r["event_id"]: (r["shard_id"], r["sequence_number"]) for r in silver}
    assert all(
        first_positions[i] == bronze.positions[i][0] for i in expected_silver
    )  # the first delivery wins
    quarantined = sorted((r["shard_id"], r["sequence_number"]) for r in _read(settings.quarantine))
    assert quarantined == sorted(p for i in malformed for p in bronze.positions[i])
    assert all(r["reason"] for r in _read(settings.quarantine))

    metrics = sales.read_metrics(settings)
    totals = {
        k: sum(m[k] for m in metrics)
        for k in ("bronze_rows", "silver_rows", "quarantined", "duplicates_removed", "other_types", "late")
    }
    resent = sum(n for i, n in truth["duplicates"].items() if i not in malformed)
    assert totals == {
        "bronze_rows": 255,
        "silver_rows": len(expected_silver),
        "quarantined": len(quarantined),
        "duplicates_removed": resent,
        "other_types": 15,
        "late": 0,
    }
    assert resent > 0 and len(quarantined) > 0
    assert _gold_as_truth(settings) == truth["by_product_minute"]
    assert sorted(r["event_id"] for r in _json_lines(tmp_path / "json")) == sorted(expected_silver)
    assert list((tmp_path / "json").glob("event_date=2026-01-02/event_hour=03/batch-*.json"))

    # A rerun adds nothing; a redelivery of an event already in silver, in a later batch, is a duplicate.
    versions = {
        uri: DeltaTable(uri).version() for uri in (settings.silver, settings.gold, settings.quarantine)
    }
    assert sales.run(settings, spark=spark) == 0
    assert {uri: DeltaTable(uri).version() for uri in versions} == versions
    more = [gen.next_event() for _ in range(30)]
    redelivered = next(e for e in events if e.event_id in expected_silver)
    bronze.append([redelivered, *more])
    assert sales.run(settings, spark=spark) == 0
    new_valid = {e.event_id for e in more} - set(gen.ground_truth()["malformed"])
    assert sorted(r["event_id"] for r in _read(settings.silver)) == sorted(expected_silver | new_valid)
    assert sales.read_metrics(settings)[-1]["duplicates_removed"] >= 1
    assert _gold_as_truth(settings) == gen.ground_truth()["by_product_minute"]


def test_a_crash_after_gold_before_silver_never_doubles_a_minute(spark, tmp_path, monkeypatch):
    from loadtest.generators import make_generator

    gen = make_generator("sales", seed=5, clock=_clock(), malformed_rate=0.02, duplicate_rate=0.02)
    bronze = Bronze(str(tmp_path / "bronze"))
    for _ in range(3):
        bronze.append([gen.next_event() for _ in range(40)])
    settings = _settings(tmp_path, bronze)

    real_write = BatchMetrics.write

    def crash_on_batch_1(self, batch_id, metrics):
        if batch_id == 1:
            raise OSError("injected: the driver died after gold was merged, before silver was appended")
        real_write(self, batch_id, metrics)

    monkeypatch.setattr(BatchMetrics, "write", crash_on_batch_1)
    with pytest.raises(Exception, match="injected: the driver died"):
        sales.run(settings, spark=spark)
    monkeypatch.setattr(BatchMetrics, "write", real_write)
    assert sales.run(settings, spark=spark) == 0

    truth = gen.ground_truth()
    assert _gold_as_truth(settings) == truth["by_product_minute"]
    silver_ids = [r["event_id"] for r in _read(settings.silver)]
    assert len(silver_ids) == len(set(silver_ids)) == truth["valid_events"]
    gold_batches = [
        c.batch_id for c in DeltaRsEngine().table(settings.gold).commits() if c.batch_id is not None
    ]
    assert gold_batches == sorted(set(gold_batches))  # one merge per batch, batch 1 included once


def _sale(event_id: str, product: str, at: datetime, amount: str):
    from loadtest.events import Event

    stamp = at.isoformat().replace("+00:00", "Z")
    body = {
        "event_type": "sales",
        "event_id": event_id,
        "event_time": stamp,
        "SalesId": int(event_id[1:]),
        "ProductName": product,
        "SalesDateTime": stamp,
        "SalesAmount": float(amount),
    }
    return Event(event_id, stamp, product, json.dumps(body).encode())


def test_a_bronze_commit_far_behind_the_watermark_lands_in_silver_and_in_gold_as_late(spark, tmp_path):
    bronze = Bronze(str(tmp_path / "bronze"))
    minute = START.replace(second=0)  # 03:04
    bronze.append(
        [
            _sale("s1", "Widget", minute + timedelta(seconds=5), "10.00"),
            _sale("s2", "Widget", minute + timedelta(seconds=30), "5.50"),
            _sale("s3", "Gadget", minute + timedelta(minutes=16), "7.25"),  # 03:20: the watermark is 03:10
        ]
    )
    # One commit an hour behind (and a few minutes behind) the watermark, with one sale still on time.
    bronze.append(
        [
            _sale("s4", "Widget", minute - timedelta(hours=1) + timedelta(seconds=10), "3.00"),
            _sale("s5", "Gadget", minute + timedelta(seconds=50), "2.50"),
            _sale("s6", "Widget", minute + timedelta(seconds=59), "1.25"),
            _sale("s7", "Gadget", minute + timedelta(minutes=15), "4.00"),  # 03:19, after 03:10: on time
        ]
    )
    settings = _settings(tmp_path, bronze)

    assert sales.run(settings, spark=spark) == 0

    assert sorted(r["event_id"] for r in _read(settings.silver)) == ["s1", "s2", "s3", "s4", "s5", "s6", "s7"]
    gold = sorted(
        (
            r["product_name"],
            f"{r['minute']:%H:%M}",
            r["sales"],
            str(r["revenue"]),
            r["late_sales"],
            str(r["late_revenue"]),
        )
        for r in _read(settings.gold)
    )
    assert gold == [
        ("Gadget", "03:04", 0, "0.00", 1, "2.50"),
        ("Gadget", "03:19", 1, "4.00", 0, "0.00"),
        ("Gadget", "03:20", 1, "7.25", 0, "0.00"),
        ("Widget", "02:04", 0, "0.00", 1, "3.00"),
        ("Widget", "03:04", 2, "15.50", 1, "1.25"),
    ]
    metrics = sales.read_metrics(settings)
    assert [(m["silver_rows"], m["late"], m["watermark"]) for m in metrics] == [
        (3, 0, None),
        (4, 3, "2026-01-02T03:10:00+00:00"),
    ]


def test_job_entry_lists_sales_and_refuses_bad_flags_in_one_line(tmp_path):
    listed = subprocess.run(
        [sys.executable, "-m", "jobs", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "sales" in listed.stdout
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs",
            "sales",
            "--source-table",
            "/b",
            "--lake",
            "/l",
            "--checkpoint",
            "/c",
            "--trigger",
            "once",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --trigger: expected 'available-now' or 'processing-time=<N>s' (e.g. processing-time=5s), found 'once'."
    )
    assert "Traceback" not in result.stderr
