"""The job's real command lines, run as a user runs them: every mistake is one line on stderr that names the
fix, with the right exit status and no traceback (issue 16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from jobs import ingest
from lakestack.emulator import free_port

REGION = "us-east-1"


def run(*argv: str, tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # TMPDIR: the job logs land in the test's folder, not the machine's temp folder.
    environ = {**(os.environ if env is None else env), "TMPDIR": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-m", *argv], capture_output=True, text=True, timeout=300, env=environ, cwd=tmp_path
    )


def one_line(result: subprocess.CompletedProcess[str], exit_code: int) -> str:
    """The one line on stderr, after checking the exit status and that nothing else was printed."""
    assert result.returncode == exit_code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def stream(moto_endpoint, unique_name):
    kinesis = boto3.client("kinesis", endpoint_url=moto_endpoint, region_name=REGION)
    kinesis.create_stream(StreamName=unique_name, ShardCount=1)
    return unique_name


def ingest_args(stream: str, endpoint: str, table: Path | str, checkpoint: Path, *more: str) -> list[str]:
    return [
        "jobs",
        "ingest",
        "--stream",
        stream,
        "--region",
        REGION,
        "--endpoint-url",
        endpoint,
        "--table",
        str(table),
        "--checkpoint",
        str(checkpoint),
        "--trigger",
        "available-now",
        *more,
    ]


def test_missing_credentials(moto_endpoint, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    result = run(*ingest_args("s", moto_endpoint, tmp_path / "t", tmp_path / "c"), tmp_path=tmp_path, env=env)
    assert one_line(result, 2) == (
        "error: no AWS credentials found for Kinesis stream 's' in region 'us-east-1' at "
        f"endpoint {moto_endpoint}. Set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, or run with an "
        "instance role."
    )
    assert not (tmp_path / "c").exists()  # nothing claimed for a run that could not start


def test_unknown_stream(moto_endpoint, tmp_path):
    result = run(
        *ingest_args("no-such-stream", moto_endpoint, tmp_path / "t", tmp_path / "c"), tmp_path=tmp_path
    )
    line = one_line(result, 2)
    assert line.startswith(
        "error: expected Kinesis stream 'no-such-stream' in region 'us-east-1' at endpoint "
        f"{moto_endpoint}, but it was not found"
    )
    assert line.endswith("Check the stream name and the region (--region), or create the stream first.")


def test_the_emulator_not_running(tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"
    result = run(*ingest_args("events", endpoint, tmp_path / "t", tmp_path / "c"), tmp_path=tmp_path)
    line = one_line(result, 2)
    assert line.startswith(
        f"error: could not connect to Kinesis for stream 'events' in region 'us-east-1' "
        f"at endpoint {endpoint}"
    )
    assert line.endswith(
        "Is the emulator running there? `lakestack local up` starts it; pass the endpoint it prints."
    )


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (
            {"_delta_log/00000000000000000000.json": "not json{"},
            "the Delta table at {table} cannot be read: Kernel error: Json error: ",
        ),
        (
            {"part-00000.parquet": "PAR1"},
            "expected a Delta table or an empty location at {table}, found files but no _delta_log. Point "
            "--table at a new location, or move those files away.",
        ),
        (
            {"": "a file, not a directory"},
            "expected a directory for the Delta table at {table}, found a file.",
        ),
    ],
    ids=["corrupt-log", "not-a-delta-table", "a-file"],
)
def test_unreadable_table(stream, moto_endpoint, tmp_path, layout, message):
    table = tmp_path / "bronze"
    for name, text in layout.items():
        path = table / name if name else table
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    result = run(*ingest_args(stream, moto_endpoint, table, tmp_path / "c"), tmp_path=tmp_path)
    assert one_line(result, 2).startswith(f"error: --table: {message.format(table=table)}")


def test_a_missing_bucket_for_the_table(stream, moto_endpoint, tmp_path):
    result = run(
        *ingest_args(stream, moto_endpoint, "s3://no-such-bucket/bronze", tmp_path / "c"), tmp_path=tmp_path
    )
    assert one_line(result, 2) == (
        "error: --table: bucket 'no-such-bucket' of s3://no-such-bucket/bronze does not "
        f"exist at {moto_endpoint}. Create it (the stack or `lakestack local up` does), or fix the URI."
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--bogus"], "unrecognized arguments: --bogus (see `python -m jobs ingest --help`)"),
        (["--max-records-per-shard", "many"], "argument --max-records-per-shard: invalid int value: 'many'"),
        (["--trigger", "sometimes"], "--trigger: expected 'available-now' or 'processing-time=<N>s'"),
        (["--log-file"], "--log-file: expected a file path, found nothing."),
    ],
    ids=["unknown-flag", "bad-number", "bad-trigger", "log-file-without-path"],
)
def test_a_bad_flag(tmp_path, extra, message):
    argv = ingest_args("s", "http://127.0.0.1:9", tmp_path / "t", tmp_path / "c")
    result = run(*argv, *extra, tmp_path=tmp_path)
    assert one_line(result, 2).startswith(f"error: {message}")


def test_a_missing_flag_and_an_unknown_job(tmp_path):
    missing = run("jobs", "ingest", "--stream", "s", tmp_path=tmp_path)
    assert one_line(missing, 2) == (
        "error: the following arguments are required: --table, --checkpoint "
        "(see `python -m jobs ingest --help`)"
    )
    unknown = run("jobs", "ingets", tmp_path=tmp_path)
    assert one_line(unknown, 2).startswith("error: unknown job 'ingets'; expected one of: ingest")


def test_java_missing(stream, moto_endpoint, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # the venv's python, and no java
    result = run(
        *ingest_args(stream, moto_endpoint, tmp_path / "t", tmp_path / "c"), tmp_path=tmp_path, env=env
    )
    assert one_line(result, 2) == (
        "error: Spark (pyspark 4) needs Java 17 or newer and no 'java' was found; "
        "install a Java 17+ runtime: 'sudo apt-get install openjdk-17-jre-headless' (Debian/Ubuntu), "
        "'sudo dnf install java-17-openjdk-headless' (Fedora/RHEL) or 'brew install openjdk@17' (macOS), or "
        "point JAVA_HOME at one."
    )


def test_lakestack_ingest_says_the_same_in_one_line(moto_endpoint, tmp_path):
    argv = ingest_args("no-such-stream", moto_endpoint, tmp_path / "t", tmp_path / "c")[2:]
    unknown = run("lakestack", "ingest", *argv, tmp_path=tmp_path)
    assert one_line(unknown, 2).startswith(
        "lakestack ingest: error: expected Kinesis stream 'no-such-stream' in region 'us-east-1'"
    )
    bad_flag = run("lakestack", "ingest", *argv, "--bogus", tmp_path=tmp_path)
    assert one_line(bad_flag, 2) == (
        "lakestack ingest: error: unrecognized arguments: --bogus (see `lakestack ingest --help`)"
    )


def _put(moto_endpoint: str, stream: str, count: int) -> None:
    kinesis = boto3.client("kinesis", endpoint_url=moto_endpoint, region_name=REGION)
    records = [{"Data": json.dumps({"n": n}).encode(), "PartitionKey": str(n)} for n in range(count)]
    assert kinesis.put_records(StreamName=stream, Records=records)["FailedRecordCount"] == 0


def test_a_checkpoint_reused_for_another_stream_or_table_is_refused(
    spark, moto_endpoint, unique_name, tmp_path
):
    kinesis = boto3.client("kinesis", endpoint_url=moto_endpoint, region_name=REGION)
    stream_a, stream_b = f"{unique_name}-a", f"{unique_name}-b"
    for name in (stream_a, stream_b):
        kinesis.create_stream(StreamName=name, ShardCount=1)
        _put(moto_endpoint, name, 100)
    checkpoint, table_a, table_b = tmp_path / "c", tmp_path / "table-a", tmp_path / "table-b"
    first = ingest.IngestSettings(
        stream=stream_a,
        region=REGION,
        endpoint_url=moto_endpoint,
        table=str(table_a),
        checkpoint=str(checkpoint),
        trigger="available-now",
    )
    assert ingest.run(first, spark=spark) == 0

    owner = f"the ingest job reading Kinesis stream '{stream_a}' in us-east-1 into {table_a}"
    other_stream = run(*ingest_args(stream_b, moto_endpoint, table_b, checkpoint), tmp_path=tmp_path)
    assert one_line(other_stream, 2) == (
        f"error: checkpoint {checkpoint} belongs to {owner}, not to this run (the ingest "
        f"job reading Kinesis stream '{stream_b}' in us-east-1 into {table_b}); its positions are the first one's "
        "and reusing it would skip or misplace records. Either give this run a new --checkpoint, or run it with "
        f"the original source and target ({owner})."
    )
    other_table = run(*ingest_args(stream_a, moto_endpoint, table_b, checkpoint), tmp_path=tmp_path)
    assert one_line(other_table, 2).startswith(
        f"error: checkpoint {checkpoint} belongs to {owner}, not to this run (the ingest "
        f"job reading Kinesis stream '{stream_a}' in us-east-1 into {table_b});"
    )
    assert not table_b.exists()
