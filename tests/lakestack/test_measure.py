"""Measuring a run from storage: the bronze table and its commits, the ledger, Spark's offset log."""

from __future__ import annotations

import io
import json
from pathlib import Path

import boto3
import pyarrow as pa
from botocore.response import StreamingBody
from botocore.stub import Stubber

from jobs.lake import DeltaRsEngine
from lakestack.measure import batch_start_times, batch_timings, ledger_event_times, read_bronze, run_timeline
from loadtest.ledger import LedgerEntry, LedgerWriter

# 2027-01-15T08:00:00Z
T0_MS = 1_800_000_000_000


def _payload(event_id: str, second: int) -> bytes:
    return json.dumps({"event_id": event_id, "event_time": f"2027-01-15T08:00:{second:02d}.000000Z"}).encode()


def _bronze(path: Path) -> str:
    """A bronze table of two batches whose commits are pinned to T0+5 s and T0+9 s."""
    table = DeltaRsEngine().table(str(path))
    table.append(
        pa.table({"data": [_payload("a", 1), _payload("b", 2)], "batch_id": pa.array([0, 0], pa.int64())}),
        app_id="query",
        batch_id=0,
    )
    table.append(
        pa.table({"data": [_payload("c", 6), b"not json"], "batch_id": pa.array([1, 1], pa.int64())}),
        app_id="query",
        batch_id=1,
    )
    # delta-rs stamps commits with the wall clock; pin them so latencies are exact.
    for version, at_ms in ((0, T0_MS + 5000), (1, T0_MS + 9000)):
        log = path / "_delta_log" / f"{version:020d}.json"
        actions = [json.loads(line) for line in log.read_text().splitlines()]
        for action in actions:
            if "commitInfo" in action:
                action["commitInfo"]["timestamp"] = at_ms
        log.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    return str(path)


def test_bronze_rows_carry_event_and_commit_times(tmp_path):
    reading = read_bronze(_bronze(tmp_path / "bronze"), {})
    assert sorted(reading.rows, key=repr) == sorted(
        [
            (1_800_000_001.0, 1_800_000_005.0),
            (1_800_000_002.0, 1_800_000_005.0),
            (1_800_000_006.0, 1_800_000_009.0),
            (None, 1_800_000_009.0),  # the payload that is not JSON: landed, no event time
        ],
        key=repr,
    )
    assert dict(reading.rows_per_batch) == {0: 2, 1: 2}
    assert dict(reading.commit_times) == {0: 1_800_000_005.0, 1: 1_800_000_009.0}
    assert (reading.files, reading.version) == (2, 1)
    assert reading.payload_bytes == sum(len(_payload(e, 1)) for e in "abc") + len(b"not json")


def _offsets(folder: Path, batch: int, started_ms: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": started_ms, "conf": {}}
    (folder / str(batch)).write_text(f'v1\n{json.dumps(meta)}\n{{"shardId-0":"1"}}')


def test_batch_starts_come_from_the_offset_log(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    _offsets(checkpoint / "offsets", 0, T0_MS + 4000)
    _offsets(checkpoint / "offsets", 1, T0_MS + 7500)
    (checkpoint / "offsets" / ".1.crc").write_text("x")
    (checkpoint / "offsets" / "2").write_text("v1\n")  # planned but unreadable: skipped
    assert batch_start_times(str(checkpoint)) == {0: 1_800_000_004.0, 1: 1_800_000_007.5}
    assert batch_start_times(f"file://{checkpoint}") == {0: 1_800_000_004.0, 1: 1_800_000_007.5}
    assert batch_start_times(str(tmp_path / "missing")) == {}


def test_batch_starts_from_an_s3_checkpoint():
    client = boto3.client("s3", region_name="us-east-1")
    text = f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":{T0_MS + 2000}}}\n{{}}'.encode()
    with Stubber(client) as stub:
        stub.add_response(
            "list_objects_v2",
            {
                "Contents": [{"Key": "ingest/offsets/3"}, {"Key": "ingest/offsets/.3.crc"}],
                "IsTruncated": False,
            },
            {"Bucket": "ckpt", "Prefix": "ingest/offsets/"},
        )
        stub.add_response(
            "get_object",
            {"Body": StreamingBody(io.BytesIO(text), len(text))},
            {"Bucket": "ckpt", "Key": "ingest/offsets/3"},
        )
        assert batch_start_times("s3://ckpt/ingest", s3_client=lambda: client) == {3: 1_800_000_002.0}
        stub.assert_no_pending_responses()


def test_ledger_times_from_every_folder(tmp_path):
    for folder, second in (("sales", 1), ("orders", 3)):
        writer = LedgerWriter(tmp_path / "ledger" / folder)
        writer.write([LedgerEntry(folder, f"2027-01-15T08:00:0{second}.000000Z", "shardId-0", "1")])
        writer.close()
    assert sorted(ledger_event_times(tmp_path / "ledger")) == [1_800_000_001.0, 1_800_000_003.0]


def test_run_timeline_joins_ledger_table_and_checkpoint(tmp_path):
    reading = read_bronze(_bronze(tmp_path / "bronze"), {})
    _offsets(tmp_path / "checkpoint" / "offsets", 0, T0_MS + 4000)
    _offsets(tmp_path / "checkpoint" / "offsets", 1, T0_MS + 7500)
    writer = LedgerWriter(tmp_path / "ledger")
    writer.write(
        [LedgerEntry(e, f"2027-01-15T08:00:0{s}.000000Z", "shardId-0", str(s)) for e, s in ("a1", "b2", "c6")]
    )
    writer.close()
    timeline = run_timeline(reading, ledger_dir=tmp_path / "ledger", checkpoint=str(tmp_path / "checkpoint"))
    assert timeline is not None
    assert (timeline.interval_s, timeline.sent, timeline.landed) == (
        1.0,
        (1, 1, 0, 0, 0, 1, 0, 0, 0),
        (0, 0, 0, 0, 2, 0, 0, 0, 2),
    )
    assert [(b.batch_id, b.start_s, b.duration_s, b.rows) for b in timeline.batches] == [
        (0, 3.0, 1.0, 2),
        (1, 6.5, 1.5, 2),
    ]
    assert [(b.batch_id, b.rows) for b in batch_timings(reading, {1: 1_800_000_007.5})] == [(1, 2)]
