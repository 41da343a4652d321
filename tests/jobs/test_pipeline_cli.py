"""Every job's and command's real command line, run as a user runs it: a mistake is one line on stderr naming
the thing and the fix, exit 2, no traceback, and nothing recorded or created (issue 16).

All but the last test fail in the checks before Spark starts, so each is a second or two.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake

from jobs.checkpoint import SourceRef, claim_checkpoint
from jobs.ingest import bronze_schema
from lakestack.emulator import free_port

ROOT = Path(__file__).resolve().parents[2]
JAVA_MISSING = (
    "Spark (pyspark 4) needs Java 17 or newer and no 'java' was found; install a Java 17+ runtime: "
    "'sudo apt-get install openjdk-17-jre-headless' (Debian/Ubuntu), 'sudo dnf install java-17-openjdk-headless' "
    "(Fedora/RHEL) or 'brew install openjdk@17' (macOS), or point JAVA_HOME at one."
)


def run(*argv: str, tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # TMPDIR: the job logs land in the test's folder. PYTHONPATH: the project, whatever the cwd.
    environ = {**(os.environ if env is None else env), "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", *argv], capture_output=True, text=True, timeout=120, env=environ, cwd=tmp_path
    )


def one_line(result: subprocess.CompletedProcess[str], exit_code: int = 2) -> str:
    """The one line on stderr, after checking the exit status and that nothing else was printed."""
    assert result.returncode == exit_code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def bronze(tmp_path: Path) -> Path:
    path = tmp_path / "bronze"
    write_deltalake(str(path), bronze_schema().empty_table())
    return path


def pipeline(job: str, source: Path | str, lake: Path | str, checkpoint: Path | str, *more: str) -> list[str]:
    layout = ["--layout", "cow"] if job == "orders" else []
    return [
        "jobs",
        job,
        *layout,
        "--source-table",
        str(source),
        "--lake",
        str(lake),
        "--checkpoint",
        str(checkpoint),
        "--trigger",
        "available-now",
        *more,
    ]


def used_checkpoint(path: Path, *, job: str, source: SourceRef, target: Path) -> Path:
    """A checkpoint as a run of ``job`` leaves it: its owner record and a planned batch."""
    claim_checkpoint(str(path), job=job, source=source, target=str(target))
    (path / "offsets").mkdir()
    (path / "offsets" / "0").write_text("v1\n")
    return path


@pytest.mark.parametrize("job", ["sales", "fraud", "orders"])
def test_a_missing_source_table(job, tmp_path):
    lake, checkpoint = tmp_path / "lake", tmp_path / "c"
    result = run(*pipeline(job, tmp_path / "nope", lake, checkpoint), tmp_path=tmp_path)
    assert one_line(result) == (
        f"error: --source-table: expected a Delta table at {tmp_path}/nope, found none (no _delta_log). Check "
        "the URI, or run the job that writes that table first."
    )
    assert not lake.exists() and not checkpoint.exists()


@pytest.mark.parametrize(
    ("job", "first_table"), [("sales", "sales"), ("fraud", "transactions"), ("orders", "orders")]
)
def test_a_lake_that_cannot_hold_tables(job, first_table, bronze, tmp_path):
    lake = tmp_path / "a-file"
    lake.write_text("not a folder")
    result = run(*pipeline(job, bronze, lake, tmp_path / "c"), tmp_path=tmp_path)
    assert one_line(result) == (
        f"error: --lake: cannot create the Delta table at {lake}/{first_table}: {lake} is a file, not a "
        "directory. Point --lake somewhere else."
    )
    assert not (tmp_path / "c").exists()


def test_a_lake_table_holding_other_files(bronze, tmp_path):
    gold = tmp_path / "lake" / "sales_by_product_minute"
    gold.mkdir(parents=True)
    (gold / "part-0.csv").write_text("a,b\n")
    result = run(*pipeline("sales", bronze, tmp_path / "lake", tmp_path / "c"), tmp_path=tmp_path)
    assert one_line(result) == (
        f"error: --lake: expected a Delta table or an empty location at {gold}, found files but no _delta_log. "
        "Point --lake at a new location, or move those files away."
    )


def test_the_s3_emulator_not_running(tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"
    argv = pipeline("fraud", "s3://lake/bronze", "s3://lake/silver", tmp_path / "c")
    result = run(*argv, "--endpoint-url", endpoint, "--region", "us-east-1", tmp_path=tmp_path)
    assert one_line(result) == (
        f"error: --source-table: could not connect to S3 at {endpoint} to list s3://lake/bronze. Is the emulator "
        "running there? `lakestack local up` starts it; pass the endpoint it prints."
    )


def test_missing_aws_credentials(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    argv = pipeline("sales", "s3://lake/bronze", "s3://lake/silver", tmp_path / "c", "--region", "us-east-1")
    assert one_line(run(*argv, tmp_path=tmp_path, env=env)) == (
        "error: --source-table: no AWS credentials found to list s3://lake/bronze. Set "
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, or run with an instance role."
    )


def test_a_json_sink_that_is_a_file(bronze, tmp_path):
    sink = tmp_path / "sink"
    sink.write_text("")
    argv = pipeline("sales", bronze, tmp_path / "lake", tmp_path / "c", "--json-sink", str(sink / "json"))
    assert one_line(run(*argv, tmp_path=tmp_path)) == (
        f"error: --json-sink: cannot write JSON files under {sink}/json: {sink} is a file. Point --json-sink at "
        "a folder this user may write."
    )
    assert not (tmp_path / "c").exists()


def test_a_checkpoint_of_another_job_is_refused(bronze, tmp_path):
    lake = tmp_path / "lake"
    checkpoint = used_checkpoint(
        tmp_path / "c", job="sales", source=SourceRef.table(str(bronze)), target=lake
    )
    owner = f"the sales job reading Delta table {bronze} into {lake}"
    result = run(*pipeline("fraud", bronze, lake, checkpoint), tmp_path=tmp_path)
    assert one_line(result) == (
        f"error: checkpoint {checkpoint} belongs to {owner}, not to this run (the fraud job reading Delta table "
        f"{bronze} into {lake}); its positions are the first one's and reusing it would skip or misplace "
        f"records. Either give this run a new --checkpoint, or run it with the original source and target "
        f"({owner})."
    )
    assert not lake.exists()


def test_an_ingest_checkpoint_is_refused_by_a_pipeline(bronze, tmp_path):
    checkpoint = used_checkpoint(
        tmp_path / "c", job="ingest", source=SourceRef.kinesis("events", "us-east-1"), target=bronze
    )
    result = run(*pipeline("sales", bronze, tmp_path / "lake", checkpoint), tmp_path=tmp_path)
    assert one_line(result).startswith(
        f"error: checkpoint {checkpoint} belongs to the ingest job reading Kinesis stream 'events' in us-east-1 "
        f"into {bronze}, not to this run (the sales job reading Delta table {bronze} into {tmp_path}/lake);"
    )


def test_a_checkpoint_of_the_other_orders_layout_is_refused(bronze, tmp_path):
    lake = tmp_path / "lake"
    checkpoint = used_checkpoint(
        tmp_path / "c", job="orders --layout cow", source=SourceRef.table(str(bronze)), target=lake
    )
    argv = pipeline("orders", bronze, lake, checkpoint)
    argv[argv.index("cow")] = "mor"
    assert one_line(run(*argv, tmp_path=tmp_path)).startswith(
        f"error: checkpoint {checkpoint} belongs to the orders --layout cow job reading Delta table {bronze} "
        f"into {lake}, not to this run (the orders --layout mor job reading Delta table {bronze} into {lake});"
    )


def test_a_checkpoint_that_is_a_file(bronze, tmp_path):
    checkpoint = tmp_path / "c"
    checkpoint.write_text("")
    result = run(*pipeline("sales", bronze, tmp_path / "lake", checkpoint), tmp_path=tmp_path)
    assert one_line(result) == (
        f"error: --checkpoint: expected a folder (or nothing yet) at {checkpoint}, found a file. Point "
        "--checkpoint at a new folder."
    )
    assert not (tmp_path / "lake").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["orders", "--layout", "xyz", "--source-table", "b", "--lake", "l", "--checkpoint", "c"],
            "argument --layout: invalid choice: 'xyz' (choose from 'cow', 'mor') "
            "(see `python -m jobs orders --help`)",
        ),
        (
            ["sales", "--source-table", "b", "--lake", "l", "--checkpoint", "c", "--trigger", "hourly"],
            "--trigger: expected 'available-now' or 'processing-time=<N>s' (e.g. processing-time=5s), found "
            "'hourly'.",
        ),
        (
            ["fraud", "--source-table", "b", "--lake", "l", "--checkpoint", "c", "--watermark", "-1"],
            "--watermark: expected seconds >= 0, found -1.",
        ),
        (
            ["sales", "--source-table", "b", "--lake", "l"],
            "the following arguments are required: --checkpoint (see `python -m jobs sales --help`)",
        ),
        (
            ["maintenance", "--table", "t", "--every", "soon"],
            "--every: expected a duration like 30s, 10m, 168h or 7d (a number and a unit s/m/h/d), found 'soon'.",
        ),
        (
            ["train-fraud", "--events", "e.jsonl", "--truth", "t.json"],
            "--events: expected a file written by `python -m loadtest.generate`, found none at e.jsonl.",
        ),
    ],
    ids=[
        "orders-layout",
        "sales-trigger",
        "fraud-watermark",
        "sales-missing-flag",
        "maintenance-every",
        "train",
    ],
)
def test_a_bad_flag(argv, message, tmp_path):
    assert one_line(run("jobs", *argv, tmp_path=tmp_path)) == f"error: {message}"


def test_an_unreadable_fraud_model_is_named_before_spark_starts(bronze, tmp_path):
    argv = pipeline("fraud", bronze, tmp_path / "lake", tmp_path / "c", "--model", str(tmp_path / "m.json"))
    assert one_line(run(*argv, tmp_path=tmp_path)) == (
        f"error: --model: expected a model file written by `python -m jobs train-fraud`, could not read "
        f"{tmp_path}/m.json (No such file or directory)."
    )
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("job", ["fraud"])  # one: every pipeline checks Java in the same shared preflight
def test_java_missing(job, bronze, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # the venv's python, and no java
    result = run(*pipeline(job, bronze, tmp_path / "lake", tmp_path / "c"), tmp_path=tmp_path, env=env)
    assert one_line(result) == f"error: {JAVA_MISSING}"


@pytest.mark.e2e
def test_maintenance_of_a_missing_table_and_an_unknown_z_order_column(bronze, tmp_path):
    missing = run("jobs", "maintenance", "--table", str(tmp_path / "nope"), tmp_path=tmp_path)
    assert one_line(missing) == (
        f"error: --table: expected a Delta table at {tmp_path}/nope, found none (no _delta_log). Check the URI, "
        "or run the job that writes that table first."
    )
    column = run("jobs", "maintenance", "--table", str(bronze), "--z-order", "account", tmp_path=tmp_path)
    assert one_line(column) == (
        f"error: --z-order: expected columns of {bronze}, found account among data, partition_key, shard_id, "
        "sequence_number, arrival_time, ingest_time, batch_id. Name columns the table has."
    )
    assert not (tmp_path / "_maintenance").exists()


def test_train_fraud_output_that_cannot_be_written(tmp_path):
    events, truth = tmp_path / "e.jsonl", tmp_path / "t.json"
    events.write_text("")
    truth.write_text("{}")
    result = run(
        "jobs",
        "train-fraud",
        *("--events", str(events), "--truth", str(truth), "--output", str(events / "model.json")),
        tmp_path=tmp_path,
    )
    assert one_line(result) == (
        f"error: --output: cannot write the model to {events}/model.json: {events} is not a directory. "
        "Give another path."
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["bench", "--stack", "nope"],
            "lakestack bench: error: invalid stack configuration: --stack = 'nope'; expected a stack with a file "
            f"Pulumi.<stack>.yaml in {ROOT} (found: Pulumi.azure-dev.yaml, Pulumi.dev.yaml, Pulumi.local.yaml)",
        ),
        (
            ["plan", "--stack", "nope"],
            "lakestack plan: error: invalid stack configuration: --stack = 'nope'; expected a stack with a file "
            f"Pulumi.<stack>.yaml in {ROOT} (found: Pulumi.azure-dev.yaml, Pulumi.dev.yaml, Pulumi.local.yaml)",
        ),
        (
            ["demo", "--faults", "nonsense"],
            "lakestack demo: error: argument --faults: 'nonsense': expected KIND=VALUE, e.g. "
            "put-throttle=0.2,get-throttle=0.1,s3-503=0.05,s3-latency=200ms. (see `lakestack demo --help`)",
        ),
        (
            ["demo", "--pipelines", "sales,nope"],
            "lakestack demo: error: argument --pipelines: expected names among ingest, sales, fraud, orders (or "
            "orders-cow, orders-mor), found 'nope' (see `lakestack demo --help`)",
        ),
        (
            ["load", "--batch-size", "501"],
            "lakestack load: error: argument --batch-size: expected 1 to 500 (the PutRecords entry limit), found "
            "501 (see `lakestack load --help`)",
        ),
        (
            ["load", "--users", "0"],
            "lakestack load: error: argument --users: expected at least 1, found 0 (see `lakestack load --help`)",
        ),
    ],
    ids=["bench-stack", "plan-stack", "demo-faults", "demo-pipelines", "load-batch-size", "load-users"],
)
def test_lakestack_mistakes(argv, message, tmp_path):
    # From the project root: the stack files live there.
    environ = {**os.environ, "TMPDIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "lakestack", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
        cwd=ROOT,
    )
    assert one_line(result) == message


def test_lakestack_a_state_dir_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = run(
        "lakestack",
        "local",
        "--state-dir",
        str(blocker / "state"),
        "up",
        "--port",
        str(free_port()),
        tmp_path=tmp_path,
    )
    [kept] = (tmp_path / "lakestack").glob("local-*.log")
    assert one_line(result) == (
        f"lakestack local: error: Not a directory: {blocker}/state. Check that path (a folder this user may "
        f"create and write, e.g. for --state-dir, --reports-dir, --out-dir); the full trace is in {kept}."
    )
    assert "Traceback (most recent call last)" in kept.read_text()


@pytest.fixture
def retain_2_batches(spark):
    key = "spark.sql.streaming.minBatchesToRetain"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "2")
    yield
    if before is None:
        spark.conf.unset(key)
    else:
        spark.conf.set(key, before)


def test_after_a_real_sales_run_its_checkpoint_refuses_fraud_and_keeps_two_batches(
    spark, retain_2_batches, bronze, tmp_path
):
    from datetime import UTC, datetime

    import pyarrow as pa

    from jobs.pipelines import sales
    from jobs.pipelines._job import BatchMetrics, JobSettings

    now = datetime.now(UTC)
    for batch in range(5):
        rows = [
            (b'{"event_type": "sales"}', "k", "shard-0", str(2 * batch + n), now, now, batch) for n in (1, 2)
        ]
        columns = [pa.array(c) for c in zip(*rows, strict=True)]
        write_deltalake(str(bronze), pa.Table.from_arrays(columns, schema=bronze_schema()), mode="append")
    lake, checkpoint = tmp_path / "lake", tmp_path / "c"
    job = JobSettings(
        source_table=str(bronze), lake=str(lake), checkpoint=str(checkpoint), trigger="available-now"
    )
    assert sales.run(sales.SalesSettings(job=job, max_files_per_trigger=1), spark=spark) == 0

    # Five micro-batches (one bronze file each), the newest two batches' figures kept, as Spark keeps its logs.
    assert BatchMetrics(str(checkpoint)).batch_ids() == [3, 4]
    assert [m["quarantined"] for m in sales.read_metrics(sales.SalesSettings(job=job))] == [2, 2]
    totals = sales.read_totals(sales.SalesSettings(job=job))  # every batch, the pruned ones too
    assert (totals["bronze_rows"], totals["quarantined"], totals["silver_rows"]) == (10, 10, 0)
    # Every batch commits to silver (its transaction marks the batch done) and to the quarantine; gold, with
    # no sale to add, keeps the version it was created at.
    tables = ("sales", "sales_quarantine", "sales_by_product_minute")
    versions = {name: DeltaTable(str(lake / name)).version() for name in tables}
    assert versions == {"sales": 5, "sales_quarantine": 5, "sales_by_product_minute": 0}

    result = run(*pipeline("fraud", bronze, lake, checkpoint), tmp_path=tmp_path)
    assert one_line(result).startswith(
        f"error: checkpoint {checkpoint} belongs to the sales job reading Delta table {bronze} into {lake}, not "
        f"to this run (the fraud job reading Delta table {bronze} into {lake});"
    )
    assert not (lake / "transactions").exists()


@pytest.mark.parametrize("job", ["ingest", "sales", "fraud", "orders", "maintenance", "train-fraud"])
def test_each_jobs_help_shows_the_flags_every_job_takes(job, tmp_path):
    result = run("jobs", job, "--help", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: python -m jobs {job}")
    tail = result.stdout[result.stdout.index("\nflags every job takes:\n") :].splitlines()
    assert tail[2].startswith("  --verbose        show everything on the terminal too")
    assert tail[3].startswith("  --log-file PATH  the job log")
    # A value's placeholder says what it is (N, PATH, URI, ...), never the flag's own name in capitals.
    flags = re.findall(r"--([a-z-]+) ([A-Z_]+)", result.stdout)
    assert [flag for flag, metavar in flags if metavar == flag.upper().replace("-", "_")] == []


def test_train_fraud_refuses_to_replace_the_shipped_model_without_force(tmp_path):
    from jobs.pipelines.train_fraud import SHIPPED_MODEL

    events, truth = tmp_path / "e.jsonl", tmp_path / "t.json"
    events.write_text("")
    truth.write_text("{}")
    before = SHIPPED_MODEL.read_bytes()
    result = run(
        "jobs",
        "train-fraud",
        *("--events", str(events), "--truth", str(truth), "--output", str(SHIPPED_MODEL)),
        tmp_path=tmp_path,
    )
    assert one_line(result) == (
        f"error: --output: {SHIPPED_MODEL} is the model shipped with the kit (the fraud job's default --model); "
        "give another path, or pass --force to replace it."
    )
    assert SHIPPED_MODEL.read_bytes() == before


def test_train_fraud_writes_under_reports_by_default(tmp_path, monkeypatch):
    from jobs.pipelines.train_fraud import TrainSettings

    events, truth = tmp_path / "e.jsonl", tmp_path / "t.json"
    events.write_text("")
    truth.write_text("{}")
    monkeypatch.chdir(tmp_path)
    output = TrainSettings(events=events, truth=truth).output
    assert output.parent == Path("reports")
    assert re.fullmatch(r"fraud-model-\d{8}T\d{6}Z\.json", output.name)
