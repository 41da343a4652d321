"""`lakestack bench` on a cloud stack, with the Automation API and AWS replaced by stand-ins: when the
pipelines count as running, when the lake has drained, what the report measures, what teardown left.

AWS clients are real boto3 clients behind botocore's Stubber, which checks every request and response against
the service's model, so the code reads the shapes AWS really returns.
"""

from __future__ import annotations

import io
import itertools
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pytest
from botocore.stub import ANY, Stubber

from infra.config import load_stack_settings
from jobs.lake import DeltaRsEngine
from lakestack.bench import cloud
from lakestack.bench.cloud import CloudBench, steps_running
from lakestack.bench.cloudwatch import STREAM_METRICS, fetch_stream_metrics
from lakestack.bench.settings import BenchSettings
from lakestack.demo import Progress
from lakestack.errors import PulumiCliMissingError, PulumiRunError, RunFailedError
from loadtest.ledger import LedgerEntry, LedgerWriter

URN = "urn:pulumi:dev::lakestack::{type}::{name}"


class FakeAutomation:
    def __init__(self, outputs: dict[str, Any] | None = None, *, cli: bool = True) -> None:
        self.outputs = outputs or {}
        self.cli = cli
        self.calls: list[str] = []
        self.down_error: Exception | None = None
        self.left: list[str] = []

    def require_cli(self, command: str) -> str:
        self.calls.append(f"require_cli {command}")
        if not self.cli:
            raise PulumiCliMissingError(command)
        return "/usr/bin/pulumi"

    def up(self, stack: str, *, on_output) -> dict[str, Any]:
        self.calls.append(f"up {stack}")
        on_output("Updating (dev)\n")
        return self.outputs

    def down(self, stack: str, *, on_output) -> None:
        self.calls.append(f"down {stack}")
        if self.down_error is not None:
            raise self.down_error

    def resources(self, stack: str) -> list[str]:
        self.calls.append(f"resources {stack}")
        return self.left


class Clock:
    """Time that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


OUTPUTS = {
    "stream_name": "lakestack-dev-events",
    "region": "us-east-1",
    "table_uri": "s3://lake/bronze/events",
    "cluster_id": "j-ABC",
    "step_ids": {"ingest": "s-1", "sales": "s-2"},
    "pipelines": {
        "ingest": {"lake": "s3://lake", "checkpoint": "s3://ckpt/ingest"},
        "sales": {"lake": "s3://lake", "checkpoint": "s3://ckpt/sales"},
        "maintenance": {"lake": "s3://lake", "checkpoint": None},
    },
    "expires_at": "2027-01-16T08:00:00Z",
}


def _target(
    tmp_path: Path, automation: FakeAutomation, clients=None, clock: Clock | None = None
) -> CloudBench:
    clock = clock or Clock()
    return CloudBench(
        load_stack_settings("dev"),
        BenchSettings(stack="dev", duration_s=60, reports_dir=tmp_path, drain_timeout_s=120),
        Progress(stream=io.StringIO()),
        automation=automation,
        clients=clients,
        clock=clock,
        sleep=clock.sleep,
    )


def _step(state: str, reason: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {"State": state, "StateChangeReason": {}}
    if reason:
        status["FailureDetails"] = {"Reason": "Error", "Message": reason, "LogFile": "s3://logs/emr/j-ABC/"}
    return {"Step": {"Id": "s-1", "Name": "ingest", "Status": status}}


def test_without_the_cli_nothing_is_called(tmp_path):
    automation = FakeAutomation(cli=False)
    with pytest.raises(PulumiCliMissingError, match="`lakestack bench --stack dev` drives Pulumi"):
        _target(tmp_path, automation)
    assert automation.calls == ["require_cli bench --stack dev"]


def test_up_without_the_outputs_a_bench_reads_fails_and_destroy_is_still_owed(tmp_path):
    automation = FakeAutomation({"stream_name": "s", "region": "us-east-1"})
    target = _target(tmp_path, automation)
    with pytest.raises(RunFailedError, match="missing table_uri, pipelines"):
        target.up()
    assert target.destroy().complete
    assert automation.calls[-2:] == ["down dev", "resources dev"]
    assert (
        tmp_path / next(iter(p.name for p in tmp_path.iterdir() if p.is_dir())) / "pulumi-up.log"
    ).read_text() == ("Updating (dev)\n")


def test_ready_once_every_step_runs_and_every_query_wrote_its_metadata(tmp_path):
    emr, s3 = boto3.client("emr", region_name="us-east-1"), boto3.client("s3", region_name="us-east-1")
    clock = Clock()
    target = _target(
        tmp_path, FakeAutomation(OUTPUTS), clients={"emr": emr, "s3": s3}.__getitem__, clock=clock
    )
    target.up()
    with Stubber(emr) as emr_stub, Stubber(s3) as s3_stub:
        for ingest, sales in (("PENDING", "PENDING"), ("RUNNING", "PENDING"), ("RUNNING", "RUNNING")):
            emr_stub.add_response("describe_step", _step(ingest), {"ClusterId": "j-ABC", "StepId": "s-1"})
            emr_stub.add_response("describe_step", _step(sales), {"ClusterId": "j-ABC", "StepId": "s-2"})
        s3_stub.add_response(
            "list_objects_v2",
            {"Contents": [{"Key": "ingest/metadata"}], "KeyCount": 1},
            {"Bucket": "ckpt", "Prefix": "ingest/metadata", "MaxKeys": 1},
        )
        s3_stub.add_response(
            "list_objects_v2", {"KeyCount": 0}, {"Bucket": "ckpt", "Prefix": "sales/metadata", "MaxKeys": 1}
        )
        s3_stub.add_response(
            "list_objects_v2",
            {"Contents": [{"Key": "ingest/metadata"}], "KeyCount": 1},
            {"Bucket": "ckpt", "Prefix": "ingest/metadata", "MaxKeys": 1},
        )
        s3_stub.add_response(
            "list_objects_v2",
            {"Contents": [{"Key": "sales/metadata"}], "KeyCount": 1},
            {"Bucket": "ckpt", "Prefix": "sales/metadata", "MaxKeys": 1},
        )
        target.wait_ready()
        emr_stub.assert_no_pending_responses()
        s3_stub.assert_no_pending_responses()
    assert clock.slept == [15.0, 15.0, 15.0]


def test_a_step_that_ended_fails_the_run_with_emrs_reason():
    with pytest.raises(RunFailedError) as caught:
        steps_running({"ingest": ("RUNNING", ""), "sales": ("FAILED", "exit code 1")}, cluster_id="j-ABC")
    assert str(caught.value) == (
        "the sales pipeline's EMR step is FAILED: exit code 1. Its logs are under the logs bucket's "
        "emr/j-ABC/steps/; the stack is being torn down."
    )
    assert steps_running({"a": ("RUNNING", ""), "b": ("PENDING", "")}, cluster_id="j") is False


def test_drain_waits_for_the_lake_to_hold_what_was_acknowledged(tmp_path, monkeypatch):
    counts = iter([0, 400, 1000])
    monkeypatch.setattr(cloud, "lake_rows", lambda uri, options: next(counts))
    clock = Clock()
    target = _target(tmp_path, FakeAutomation(OUTPUTS), clock=clock)
    target.up()
    target.drain(1000)
    assert clock.slept == [15.0, 15.0]
    assert target._notes == []


def test_drain_gives_up_at_its_timeout_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(cloud, "lake_rows", lambda uri, options: 10)
    clock = Clock()
    target = _target(tmp_path, FakeAutomation(OUTPUTS), clock=clock)
    target.up()
    target.drain(1000)
    assert clock.now == 120.0
    assert target._notes == ["the bronze table held 10 of 1,000 rows after the 120s drain timeout"]


def test_destroy_reports_what_the_state_still_holds(tmp_path):
    automation = FakeAutomation(OUTPUTS)
    automation.down_error = PulumiRunError(
        "`pulumi destroy` failed:\nerror: deleting VPC: DependencyViolation"
    )
    automation.left = [
        URN.format(type="aws:ec2/vpc:Vpc", name="dev-vpc"),
        URN.format(type="aws:s3/bucketV2:BucketV2", name="dev-logs"),
    ]
    target = _target(tmp_path, automation)
    target.up()
    teardown = target.destroy()
    assert not teardown.complete
    assert teardown.left == (
        "dev-vpc (aws:ec2/vpc:Vpc)",
        "dev-logs (aws:s3/bucketV2:BucketV2)",
        "(pulumi destroy: `pulumi destroy` failed:)",
    )
    assert teardown.remove_with.startswith("lakestack down --stack dev (or pulumi destroy --stack dev)")


def test_keep_leaves_the_stack_until_its_expiry(tmp_path):
    target = _target(tmp_path, FakeAutomation(OUTPUTS))
    target.up()
    assert target.kept().summary() == (
        "kept (--keep): left every resource of stack dev (billed until destroyed; expires 2027-01-16T08:00:00Z); "
        "remove with: lakestack down --stack dev, or `lakestack sweep --yes` after it expires"
    )


def test_nothing_created_nothing_to_destroy(tmp_path):
    automation = FakeAutomation(OUTPUTS)
    assert _target(tmp_path, automation).destroy().summary() == "complete"
    assert automation.calls == ["require_cli bench --stack dev"]


@pytest.mark.parametrize(
    ("pipelines", "scenarios"),
    [
        (("ingest",), ["sales"]),
        (("ingest", "fraud", "orders-cow", "orders-mor", "maintenance"), ["transactions", "orders"]),
        (("ingest", "sales", "fraud"), ["sales", "transactions"]),
    ],
)
def test_the_stack_pipelines_decide_the_scenarios_loaded(pipelines, scenarios):
    assert cloud.scenarios_for(pipelines) == scenarios


def test_locust_follows_the_shape_against_the_real_stream(tmp_path):
    target = _target(tmp_path, FakeAutomation(OUTPUTS))
    target.up()
    argv = target._locust_argv("sales")
    assert "--endpoint-url" not in argv
    flags = {
        flag: value
        for flag, value in itertools.pairwise(argv)
        if flag.startswith("--") and not value.startswith("--")
    }
    assert {
        k: flags[k] for k in ("--stream", "--region", "--shape", "--shape-users", "--shape-duration")
    } == {
        "--stream": "lakestack-dev-events",
        "--region": "us-east-1",
        "--shape": "ramp",
        "--shape-users": "4",
        "--shape-duration": "60",
    }
    assert argv[4].endswith(
        "loadtest/locustfile.py," + str(Path(cloud.__file__).parents[2] / "loadtest/shapefile.py")
    )


def _metric_reply(stamps: list[datetime], token: str | None = None) -> dict[str, Any]:
    values = {"incoming": [600.0, 1200.0], "iterator_age": [0.0, 2500.0], "write_throttled": [0.0, 3.0]}
    reply: dict[str, Any] = {
        "MetricDataResults": [
            {
                "Id": metric_id,
                "Label": metric_id,
                "Timestamps": stamps,
                "Values": points,
                "StatusCode": "Complete",
            }
            for metric_id, points in values.items()
        ]
        + [
            {
                "Id": "read_throttled",
                "Label": "read_throttled",
                "Timestamps": [],
                "Values": [],
                "StatusCode": "PartialData",
            }
        ],
        "Messages": [],
    }
    if token:
        reply["NextToken"] = token
    return reply


def test_cloudwatch_metrics_of_the_stream_over_pages():
    client = boto3.client("cloudwatch", region_name="us-east-1")
    first = [datetime(2027, 1, 15, 8, 0, tzinfo=UTC), datetime(2027, 1, 15, 8, 1, tzinfo=UTC)]
    second = [datetime(2027, 1, 15, 8, 2, tzinfo=UTC), datetime(2027, 1, 15, 8, 3, tzinfo=UTC)]
    start, end = datetime(2027, 1, 15, 8, 0, tzinfo=UTC), datetime(2027, 1, 15, 8, 5, tzinfo=UTC)
    expected = {"MetricDataQueries": ANY, "StartTime": start, "EndTime": end, "ScanBy": "TimestampAscending"}
    with Stubber(client) as stub:
        stub.add_response("get_metric_data", _metric_reply(first, "page-2"), expected)
        stub.add_response("get_metric_data", _metric_reply(second), {**expected, "NextToken": "page-2"})
        metrics = fetch_stream_metrics(client, "lakestack-dev-events", start=start, end=end)
    assert metrics.summary() == {
        "incoming_records": 3600.0,
        "max_iterator_age_ms": 2500.0,
        "write_throttled_records": 6.0,
        "read_throttled_calls": 0,
    }
    assert metrics.messages == ("read_throttled: CloudWatch returned partial data",) * 2
    incoming = metrics.series(start.timestamp())[0]
    assert (incoming.unit, incoming.points) == (
        "records/s",
        ((0.0, 10.0), (60.0, 20.0), (120.0, 10.0), (180.0, 20.0)),
    )
    assert [m.name for m in STREAM_METRICS] == [
        "IncomingRecords",
        "GetRecords.IteratorAgeMilliseconds",
        "WriteProvisionedThroughputExceeded",
        "ReadProvisionedThroughputExceeded",
    ]


def test_the_queries_cloudwatch_gets():
    client = boto3.client("cloudwatch", region_name="us-east-1")
    sent: list[dict[str, Any]] = []
    with Stubber(client) as stub:
        stub.add_response("get_metric_data", {"MetricDataResults": []}, None)
        client.meta.events.register(
            "before-parameter-build.cloudwatch.GetMetricData", lambda params, **_: sent.append(params)
        )
        fetch_stream_metrics(
            client, "s", start=datetime(2027, 1, 1, tzinfo=UTC), end=datetime(2027, 1, 2, tzinfo=UTC)
        )
    first = sent[0]["MetricDataQueries"][0]
    assert first == {
        "Id": "incoming",
        "MetricStat": {
            "Metric": {
                "Namespace": "AWS/Kinesis",
                "MetricName": "IncomingRecords",
                "Dimensions": [{"Name": "StreamName", "Value": "s"}],
            },
            "Period": 60,
            "Stat": "Sum",
        },
        "Label": "records put (IncomingRecords)",
        "ReturnData": True,
    }


def _local_bronze(path: Path) -> str:
    table = DeltaRsEngine().table(str(path))
    payloads = [
        json.dumps({"event_id": e, "event_time": "2027-01-15T08:00:01.000000Z"}).encode() for e in "ab"
    ]
    table.append(
        pa.table(
            {
                "data": payloads,
                "shard_id": ["shardId-0", "shardId-0"],
                "sequence_number": ["0", "1"],
                "batch_id": pa.array([0, 0], pa.int64()),
            }
        ),
        app_id="q",
        batch_id=0,
    )
    return str(path)


def test_measure_reconciles_the_lake_with_the_ledger_and_adds_cloudwatch(tmp_path):
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    outputs = {**OUTPUTS, "table_uri": _local_bronze(tmp_path / "bronze")}
    outputs["pipelines"] = {"ingest": {"lake": "x", "checkpoint": str(tmp_path / "checkpoint")}}
    clock = Clock()
    target = _target(
        tmp_path, FakeAutomation(outputs), clients={"cloudwatch": cloudwatch}.__getitem__, clock=clock
    )
    target.up()
    clock.now = 1200.0  # 20 minutes standing up
    target._load_started = clock.now
    target._load_window = (datetime(2027, 1, 15, 8, 0, tzinfo=UTC), datetime(2027, 1, 15, 8, 1, tzinfo=UTC))
    writer = LedgerWriter(target.ledger_dir / "sales")
    writer.write(
        [LedgerEntry(e, "2027-01-15T08:00:01.000000Z", "shardId-0", str(i)) for i, e in enumerate("abc")]
    )
    writer.close()
    stamps = [datetime(2027, 1, 15, 8, 0, tzinfo=UTC), datetime(2027, 1, 15, 8, 1, tzinfo=UTC)]
    with Stubber(cloudwatch) as stub:
        stub.add_response("get_metric_data", _metric_reply(stamps), None)
        report = target.measure()
    # Reconciled by stream position, as the demo's ingest check does.
    assert (report.events_sent, report.events_landed, report.missing, report.missing_sample) == (
        3,
        2,
        1,
        ("shardId-0@2",),
    )
    assert "missing c: acknowledged in shardId-0 at sequence 2" in report.notes
    assert report.pipelines["ingest"]["ok"] is False
    assert target.facts["cloudwatch"]["incoming_records"] == 1800.0
    assert report.timeline is not None
    assert [s.unit for s in report.timeline.stream_metrics] == ["records/s", "ms", "records", "calls"]
    # 20 minutes of the dev stack at 0.8537 USD/h before the load started.
    assert (report.timeline.cost_at_start_usd, report.timeline.cost_note) == (
        0.2846,
        "includes 0.28 USD while the stack stood up",
    )
    assert "latency compares this machine's clock (event_time) with the cluster's (commit)" in report.notes


LOADGEN_OUTPUT = {
    "cluster": "lakestack-dev-loadgen",
    "master_task_definition": "arn:aws:ecs:us-east-1:123456789012:task-definition/lakestack-dev-master:1",
    "worker_task_definition": "arn:aws:ecs:us-east-1:123456789012:task-definition/lakestack-dev-worker:1",
    "container": "locust",
    "workers": 1,
    "subnets": ["subnet-0a1"],
    "security_groups": {"master": "sg-0m", "worker": "sg-0w"},
    "assign_public_ip": "DISABLED",
    "propagate_tags": "TASK_DEFINITION",
    "results_uri": "s3://lakestack-dev-logs/loadgen",
}


def test_a_stack_without_a_load_generator_keeps_loading_from_this_machine(tmp_path):
    from lakestack.bench.loadgen import LocalLocusts

    target = _target(tmp_path, FakeAutomation(OUTPUTS), clients={}.__getitem__)  # no AWS client asked for
    target.outputs = dict(OUTPUTS)

    generators = target.load_generators()

    assert isinstance(generators, LocalLocusts)
    assert (tmp_path / target.run_dir.name / "ledger" / "sales").is_dir()


def test_a_stack_with_a_load_generator_loads_from_fargate_and_collects_the_ledgers(tmp_path):
    ecs = boto3.client("ecs", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    s3 = boto3.client("s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    clock = Clock()
    target = _target(tmp_path, FakeAutomation(), clients={"ecs": ecs, "s3": s3}.__getitem__, clock=clock)
    target.outputs = {**OUTPUTS, "loadgen": LOADGEN_OUTPUT}
    run_id = target.run_dir.name
    target.run_dir.mkdir(parents=True)
    cluster = "lakestack-dev-loadgen"
    master_arn = "arn:aws:ecs:us-east-1:123456789012:task/lakestack-dev-loadgen/m1"
    worker_arn = "arn:aws:ecs:us-east-1:123456789012:task/lakestack-dev-loadgen/w1"
    run_env = [
        {"name": "LAKESTACK_RUN_ID", "value": f"{run_id}/sales"},
        {"name": "LAKESTACK_SCENARIO", "value": "sales"},
        {"name": "LAKESTACK_SHAPE", "value": "ramp"},
        {"name": "LAKESTACK_SHAPE_DURATION", "value": "60"},
        {"name": "LAKESTACK_TARGET_RATE", "value": "1000"},
    ]

    def run_task(role: str, env: list[dict[str, str]]) -> dict[str, Any]:
        return {
            "cluster": cluster,
            "taskDefinition": LOADGEN_OUTPUT[f"{role}_task_definition"],
            "launchType": "FARGATE",
            "count": 1,
            "networkConfiguration": {
                "awsvpcConfiguration": {
                    "subnets": ["subnet-0a1"],
                    "securityGroups": [f"sg-0{role[0]}"],
                    "assignPublicIp": "DISABLED",
                }
            },
            "propagateTags": "TASK_DEFINITION",
            "overrides": {
                "containerOverrides": [
                    {"name": "locust", "environment": sorted(env, key=lambda e: e["name"])}
                ]
            },
        }

    def task(arn: str, status: str, ip: str | None = None, exit_code: int | None = None) -> dict[str, Any]:
        found: dict[str, Any] = {"taskArn": arn, "lastStatus": status, "containers": []}
        if exit_code is not None:
            found["containers"] = [{"name": "locust", "exitCode": exit_code}]
        if ip:
            found["attachments"] = [
                {"type": "ElasticNetworkInterface", "details": [{"name": "privateIPv4Address", "value": ip}]}
            ]
        return found

    both = {"cluster": cluster, "tasks": [master_arn, worker_arn]}
    prefix = f"loadgen/{run_id}/sales/"
    ledger_key = prefix + "worker-ip-10-0-1-8/ledger/ledger-ip-10-0-1-8-7.jsonl"
    with Stubber(ecs) as ecs_stub, Stubber(s3) as s3_stub:
        master_env = [
            *run_env,
            {"name": "LOCUST_USERS", "value": "4"},
            {"name": "LOCUST_SPAWN_RATE", "value": "4"},
            {"name": "LOCUST_RUN_TIME", "value": "60s"},
        ]
        ecs_stub.add_response(
            "run_task", {"tasks": [{"taskArn": master_arn}]}, run_task("master", master_env)
        )
        ecs_stub.add_response(
            "describe_tasks",
            {"tasks": [task(master_arn, "RUNNING", ip="10.0.1.7")]},
            {"cluster": cluster, "tasks": [master_arn]},
        )
        worker_env = [*run_env, {"name": "LOCUST_MASTER_NODE_HOST", "value": "10.0.1.7"}]
        ecs_stub.add_response(
            "run_task", {"tasks": [{"taskArn": worker_arn}]}, run_task("worker", worker_env)
        )
        ecs_stub.add_response(
            "describe_tasks", {"tasks": [task(master_arn, "RUNNING"), task(worker_arn, "RUNNING")]}, both
        )
        stopped = {
            "tasks": [task(master_arn, "STOPPED", exit_code=0), task(worker_arn, "STOPPED", exit_code=0)]
        }
        ecs_stub.add_response("describe_tasks", stopped, both)
        ecs_stub.add_response("describe_tasks", stopped, both)  # stop: nothing left to stop
        s3_stub.add_response(
            "list_objects_v2",
            {
                "Contents": [{"Key": prefix + "master-ip-10-0-1-7/locust_stats.csv"}, {"Key": ledger_key}],
                "IsTruncated": False,
            },
            {"Bucket": "lakestack-dev-logs", "Prefix": prefix},
        )
        s3_stub.add_response(
            "get_object",
            {"Body": io.BytesIO(b"Type,Name,Request Count\n")},
            {"Bucket": "lakestack-dev-logs", "Key": prefix + "master-ip-10-0-1-7/locust_stats.csv"},
        )
        s3_stub.add_response(
            "get_object",
            {"Body": io.BytesIO(b'{"a":1}\n{"a":2}\n')},
            {"Bucket": "lakestack-dev-logs", "Key": ledger_key},
        )

        acknowledged = target.load()

        ecs_stub.assert_no_pending_responses()
        s3_stub.assert_no_pending_responses()
    assert acknowledged == 2
    assert clock.slept == [15.0]
    assert (target.run_dir / "locust-sales_stats.csv").read_bytes() == b"Type,Name,Request Count\n"
    assert (target.ledger_dir / "sales" / "ledger-ip-10-0-1-8-7.jsonl").read_bytes() == b'{"a":1}\n{"a":2}\n'
    assert target._notes == []
