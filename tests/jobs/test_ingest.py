"""The ingest job end to end against the emulator: every record lands once, also across restarts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from deltalake import DeltaTable

from jobs import ingest
from jobs.errors import SettingsError
from jobs.lake import storage_options_for

REGION = "us-east-1"


def _put(kinesis, stream: str, ids: range) -> dict[str, bytes]:
    sent: dict[str, bytes] = {}
    entries = []
    for number in ids:
        event_id = f"e{number:05d}"
        payload = json.dumps({"event_id": event_id, "event_time": "2026-11-21T12:00:00.000000Z"}).encode()
        sent[event_id] = payload
        entries.append({"Data": payload, "PartitionKey": f"key-{number % 17}"})
    for start in range(0, len(entries), 500):
        reply = kinesis.put_records(StreamName=stream, Records=entries[start : start + 500])
        assert reply["FailedRecordCount"] == 0
    return sent


@pytest.fixture
def stream_and_table(moto_endpoint, unique_name, tmp_path):
    kinesis = boto3.client("kinesis", endpoint_url=moto_endpoint, region_name=REGION)
    kinesis.create_stream(StreamName=unique_name, StreamModeDetails={"StreamMode": "ON_DEMAND"})
    boto3.client("s3", endpoint_url=moto_endpoint, region_name=REGION).create_bucket(Bucket=unique_name)
    settings = ingest.IngestSettings(
        stream=unique_name,
        region=REGION,
        endpoint_url=moto_endpoint,
        table=f"s3://{unique_name}/bronze/events",
        checkpoint=str(tmp_path / "checkpoint"),
        trigger="available-now",
        max_records_per_shard=50,
    )
    return kinesis, settings


def _table(settings: ingest.IngestSettings) -> DeltaTable:
    options = storage_options_for(settings.table, endpoint_url=settings.endpoint_url, region=settings.region)
    return DeltaTable(settings.table, storage_options=options)


def _payloads(settings: ingest.IngestSettings) -> list[bytes]:
    return _table(settings).to_pyarrow_table(columns=["data"]).column("data").to_pylist()


def test_ingest_lands_every_record_once_and_restarts_add_nothing(spark, stream_and_table):
    kinesis, settings = stream_and_table
    sent = _put(kinesis, settings.stream, range(0, 400))

    assert ingest.run(settings, spark=spark) == 0
    table = _table(settings)
    assert [field.name for field in table.schema().fields] == list(ingest.BRONZE_COLUMNS)
    first = _payloads(settings)
    assert len(first) == 400
    assert sorted(first) == sorted(sent.values())  # payload bytes unchanged, each exactly once
    version_after_first = table.version()

    # A restart with nothing new commits nothing new.
    assert ingest.run(settings, spark=spark) == 0
    assert _table(settings).version() == version_after_first
    assert len(_payloads(settings)) == 400

    # New records after a restart: only those are added.
    more = _put(kinesis, settings.stream, range(400, 520))
    assert ingest.run(settings, spark=spark) == 0
    after = _payloads(settings)
    assert len(after) == 520
    assert sorted(after) == sorted([*sent.values(), *more.values()])


def test_crash_between_delta_commit_and_checkpoint_commit_adds_nothing(spark, stream_and_table):
    kinesis, settings = stream_and_table
    _put(kinesis, settings.stream, range(0, 150))
    assert ingest.run(settings, spark=spark) == 0
    version = _table(settings).version()

    # The Delta commit of the last batch happened but Spark "crashed" before recording it as committed.
    commits = sorted(
        (p for p in (Path(settings.checkpoint) / "commits").iterdir() if p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    commits[-1].unlink()
    (commits[-1].parent / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    assert ingest.run(settings, spark=spark) == 0
    assert _table(settings).version() == version
    assert len(_payloads(settings)) == 150


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"trigger": "every-5s"}, "--trigger: expected 'available-now' or 'processing-time=<N>s'"),
        ({"starting_position": "beginning"}, "expected starting position 'trim-horizon', 'latest' or"),
        (
            {"starting_position": "at-timestamp=yesterday"},
            "found timestamp 'yesterday' which is not ISO-8601",
        ),
        (
            {"max_records_per_shard": 0},
            "--max-records-per-shard: expected a whole number of at least 1, found 0",
        ),
        ({"stream": ""}, "--stream: expected a Kinesis stream name"),
    ],
)
def test_invalid_settings_are_refused_with_the_flag_named(changes, message):
    base = {"stream": "s", "region": REGION, "table": "/t", "checkpoint": "/c"}
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ingest.IngestSettings(**{**base, **changes})


def test_job_entry_reports_bad_flags_without_a_traceback(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs",
            "ingest",
            "--stream",
            "s",
            "--region",
            REGION,
            "--table",
            "/t",
            "--checkpoint",
            "/c",
            "--trigger",
            "sometimes",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # the job log goes to the test's folder
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: --trigger: expected 'available-now' or 'processing-time=<N>s'")
    assert len(result.stderr.splitlines()) == 1


def test_job_entry_lists_jobs():
    result = subprocess.run(
        [sys.executable, "-m", "jobs", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    assert "ingest" in result.stdout


def test_local_table_with_an_emulated_stream_and_per_batch_source_metrics(
    spark, moto_endpoint, unique_name, tmp_path, caplog
):
    import logging
    import re

    kinesis = boto3.client("kinesis", endpoint_url=moto_endpoint, region_name=REGION)
    kinesis.create_stream(StreamName=unique_name, StreamModeDetails={"StreamMode": "ON_DEMAND"})
    sent = _put(kinesis, unique_name, range(0, 30))
    settings = ingest.IngestSettings(
        stream=unique_name,
        region=REGION,
        endpoint_url=moto_endpoint,
        table=str(tmp_path / "bronze"),
        checkpoint=str(tmp_path / "checkpoint"),
        trigger="available-now",
    )
    with caplog.at_level(logging.INFO, logger="jobs.ingest"):
        assert ingest.run(settings, spark=spark) == 0
    rows = DeltaTable(settings.table).to_pyarrow_table(columns=["data"]).column("data").to_pylist()
    assert sorted(rows) == sorted(sent.values())
    counts = [int(n) for n in re.findall(r"ingest: batch \d+ read (\d+) records", caplog.text)]
    assert sum(counts) == 30
    assert "throttled 0, retries 0, data-loss events 0" in caplog.text
