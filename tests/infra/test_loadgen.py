"""Load from more than one machine (issue 14 §3): Locust master and workers on Fargate in the private subnet,
least privilege; the task's bootstrap and runner, run here against stand-ins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pulumi_mocks import ACCOUNT, execute_program, stack_config

from infra.aws.loadgen import bootstrap
from infra.aws.loadgen_task import TaskConfigError, locust_command, results_destination, upload_results

CONFIG = {**stack_config("dev"), "lakestack:loadgen": {"workers": 3, "cpu": 2048, "memory": 4096}}
ARTIFACTS = f"lakestack-dev-artifacts-{ACCOUNT}-us-east-1"
LOGS = f"lakestack-dev-logs-{ACCOUNT}-us-east-1"
STREAM_ARN = f"arn:aws:kinesis:us-east-1:{ACCOUNT}:stream/lakestack-dev-events"
KEY_ARN = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/key-1234"
LOG_GROUP = "/lakestack/lakestack-dev/loadgen"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return execute_program(CONFIG, tmp_path=tmp_path_factory.mktemp("loadgen"))


def test_no_load_generator_unless_configured(tmp_path):
    plain = execute_program(stack_config("dev"), tmp_path=tmp_path)
    assert not any(r.typ.startswith("aws:ecs/") for r in plain.resources)
    assert plain.exports["loadgen"] is None


def test_master_and_worker_task_definitions_run_python_from_public_ecr_on_fargate(run):
    definitions = {r.name: r.inputs for r in run.of_type("aws:ecs/taskDefinition:TaskDefinition")}
    assert sorted(definitions) == ["loadgen-master", "loadgen-worker"]
    for role in ("master", "worker"):
        task = definitions[f"loadgen-{role}"]
        assert {
            k: task[k] for k in ("family", "requiresCompatibilities", "networkMode", "cpu", "memory")
        } == {
            "family": f"lakestack-dev-locust-{role}",
            "requiresCompatibilities": ["FARGATE"],
            "networkMode": "awsvpc",
            "cpu": "2048",
            "memory": "4096",
        }
        assert task["taskRoleArn"] == f"arn:aws:iam::{ACCOUNT}:role/loadgen-task-role"
        assert task["executionRoleArn"] == f"arn:aws:iam::{ACCOUNT}:role/loadgen-execution-role"
        (container,) = json.loads(task["containerDefinitions"])
        # Public ECR, not Docker Hub: every task pulls through the NAT's one address, and Docker Hub limits
        # anonymous pulls per address.
        assert container["image"] == "public.ecr.aws/docker/library/python:3.11-slim"
        assert container["entryPoint"] == ["sh", "-c"]
        (command,) = container["command"]
        assert command == bootstrap(["boto3==1.44.5", "locust==2.47.0"])
        assert command.startswith(
            "set -eu; python -m pip install --quiet --user --no-cache-dir --no-deps --only-binary=:all: "
            "boto3==1.44.5 locust==2.47.0; "
        )
        assert {e["name"]: e["value"] for e in container["environment"]} == {
            "AWS_DEFAULT_REGION": "us-east-1",
            "LAKESTACK_BUNDLE_BUCKET": ARTIFACTS,
            "LAKESTACK_BUNDLE_FILES": "lakestack_loadtest-0.1.0-py3-none-any.whl,run_loadgen.py",
            "LAKESTACK_BUNDLE_PREFIX": "loadgen/fedcba9876543210/",
            "LAKESTACK_LOCUST_ROLE": role,
            "LAKESTACK_REGION": "us-east-1",
            "LAKESTACK_RESULTS_URI": f"s3://{LOGS}/loadgen",
            "LAKESTACK_STREAM": "lakestack-dev-events",
            "LAKESTACK_WORKERS": "3",
        }
        assert container["logConfiguration"]["options"] == {
            "awslogs-group": LOG_GROUP,
            "awslogs-region": "us-east-1",
            "awslogs-stream-prefix": role,
        }
    master = json.loads(definitions["loadgen-master"]["containerDefinitions"])[0]
    worker = json.loads(definitions["loadgen-worker"]["containerDefinitions"])[0]
    assert master["portMappings"] == [{"containerPort": 5557, "protocol": "tcp"}]
    assert "portMappings" not in worker


def test_the_bundle_is_uploaded_under_its_hash(run):
    keys = sorted(
        r.inputs["key"]
        for r in run.of_type("aws:s3/bucketObjectv2:BucketObjectv2")
        if r.name.startswith("loadgen-")
    )
    assert keys == [
        "loadgen/fedcba9876543210/lakestack_loadtest-0.1.0-py3-none-any.whl",
        "loadgen/fedcba9876543210/run_loadgen.py",
    ]


def test_the_task_role_may_only_write_this_stream_read_its_bundle_and_write_results(run):
    policy = json.loads(run.named("loadgen-task-access").inputs["policy"])
    assert {s["Sid"]: (s["Action"], s["Resource"]) for s in policy["Statement"]} == {
        "PutRecordsOnStream": (
            [
                "kinesis:PutRecord",
                "kinesis:PutRecords",
                "kinesis:DescribeStreamSummary",
                "kinesis:ListShards",
            ],
            [STREAM_ARN],
        ),
        "EncryptRecords": (["kms:GenerateDataKey", "kms:Decrypt"], [KEY_ARN]),
        "ReadBundle": (["s3:GetObject"], [f"arn:aws:s3:::{ARTIFACTS}/loadgen/fedcba9876543210/*"]),
        "WriteResults": (["s3:PutObject"], [f"arn:aws:s3:::{LOGS}/loadgen/*"]),
    }


def test_the_execution_role_may_only_write_its_log_group(run):
    policy = json.loads(run.named("loadgen-execution-access").inputs["policy"])
    assert policy["Statement"] == [
        {
            "Sid": "WriteTaskLogs",
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": [f"arn:aws:logs:us-east-1:{ACCOUNT}:log-group:{LOG_GROUP}:*"],
        }
    ]


def test_only_ecs_tasks_of_this_account_assume_the_roles(run):
    for name in ("loadgen-task-role", "loadgen-execution-role"):
        (trust,) = json.loads(run.named(name).inputs["assumeRolePolicy"])["Statement"]
        assert trust["Principal"] == {"Service": "ecs-tasks.amazonaws.com"}
        assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": ACCOUNT}}


def test_tasks_reach_out_over_https_and_workers_reach_only_the_master(run):
    rules = {
        r.name: {k: v for k, v in r.inputs.items() if k not in ("description", "tags")}
        for r in run.resources
        if r.typ.startswith("aws:vpc/securityGroup") and r.name.startswith("loadgen-")
    }
    https = {"ipProtocol": "tcp", "fromPort": 443, "toPort": 443, "cidrIpv4": "0.0.0.0/0"}
    locust = {"ipProtocol": "tcp", "fromPort": 5557, "toPort": 5557}
    assert rules == {
        "loadgen-master-egress-https": {"securityGroupId": "loadgen-master-sg-id", **https},
        "loadgen-worker-egress-https": {"securityGroupId": "loadgen-worker-sg-id", **https},
        "loadgen-worker-egress-master": {
            "securityGroupId": "loadgen-worker-sg-id",
            "referencedSecurityGroupId": "loadgen-master-sg-id",
            **locust,
        },
        "loadgen-master-ingress-workers": {
            "securityGroupId": "loadgen-master-sg-id",
            "referencedSecurityGroupId": "loadgen-worker-sg-id",
            **locust,
        },
    }


def test_logs_are_kept_30_days_and_encrypted_with_the_stack_key(run):
    group = run.one("aws:cloudwatch/logGroup:LogGroup").inputs
    assert (group["name"], group["retentionInDays"], group["kmsKeyId"]) == (LOG_GROUP, 30, KEY_ARN)
    statements = json.loads(run.one("aws:kms/keyPolicy:KeyPolicy").inputs["policy"])["Statement"]
    logs = next(s for s in statements if s["Sid"] == "CloudWatchLogsEncryptStackLogGroups")
    assert logs["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"] == (
        f"arn:aws:logs:us-east-1:{ACCOUNT}:log-group:/lakestack/lakestack-dev/*"
    )


def test_outputs_say_how_to_start_a_run(run):
    assert run.exports["loadgen"] == {
        "cluster": "lakestack-dev-loadgen",
        "master_task_definition": f"arn:aws:ecs:us-east-1:{ACCOUNT}:task-definition/lakestack-dev-locust-master:1",
        "worker_task_definition": f"arn:aws:ecs:us-east-1:{ACCOUNT}:task-definition/lakestack-dev-locust-worker:1",
        "container": "locust",
        "workers": 3,
        "subnets": ["network-private-id"],
        "security_groups": {"master": "loadgen-master-sg-id", "worker": "loadgen-worker-sg-id"},
        "assign_public_ip": "DISABLED",
        "propagate_tags": "TASK_DEFINITION",
        "results_uri": f"s3://{LOGS}/loadgen",
    }


def test_without_a_cluster_the_load_generator_still_gets_its_network(tmp_path):
    config = {**CONFIG, "lakestack:cluster": {"enabled": False}}
    run = execute_program(config, tmp_path=tmp_path)
    assert run.of_type("aws:emr/cluster:Cluster") == []
    assert len(run.of_type("aws:ecs/taskDefinition:TaskDefinition")) == 2
    # No cluster: the first available zone will do.
    assert run.named("network-private").inputs["availabilityZone"] == "us-east-1a"


# --- inside the task -------------------------------------------------------------------------------------


def test_master_command_waits_for_its_workers_and_writes_statistics(tmp_path):
    command = locust_command(
        {"LAKESTACK_LOCUST_ROLE": "master", "LAKESTACK_WORKERS": "3"},
        locustfile=Path("/site/loadtest/locustfile.py"),
        results=tmp_path,
    )
    assert command == [
        sys.executable,
        "-m",
        "locust",
        "-f",
        "/site/loadtest/locustfile.py",
        "--ledger",
        str(tmp_path / "ledger"),
        "--master",
        "--headless",
        "--expect-workers",
        "3",
        "--csv",
        str(tmp_path / "locust"),
        "--html",
        str(tmp_path / "locust.html"),
    ]


def test_worker_command_connects_to_its_master(tmp_path):
    command = locust_command(
        {"LAKESTACK_LOCUST_ROLE": "worker", "LOCUST_MASTER_NODE_HOST": "10.60.16.7"},
        locustfile=Path("/l.py"),
        results=tmp_path,
    )
    assert command[-3:] == ["--worker", "--master-host", "10.60.16.7"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "LAKESTACK_LOCUST_ROLE = ''; expected one of master, worker"),
        ({"LAKESTACK_LOCUST_ROLE": "worker"}, "LOCUST_MASTER_NODE_HOST is not set"),
    ],
)
def test_a_task_started_without_what_it_needs_says_so(env, message, tmp_path):
    with pytest.raises(TaskConfigError, match=message):
        locust_command(env, locustfile=Path("/l.py"), results=tmp_path)


def test_results_go_under_the_run_and_the_task(tmp_path):
    env = {
        "LAKESTACK_RESULTS_URI": "s3://logs-bucket/loadgen",
        "LAKESTACK_RUN_ID": "run-7",
        "LAKESTACK_LOCUST_ROLE": "worker",
    }
    assert results_destination(env, hostname="ip-10-60-16-7") == (
        "logs-bucket",
        "loadgen/run-7/worker-ip-10-60-16-7/",
    )
    with pytest.raises(TaskConfigError, match="expected s3://<bucket>/<prefix>"):
        results_destination({"LAKESTACK_RESULTS_URI": "/tmp/x"}, hostname="h")


def test_every_result_file_is_uploaded(tmp_path):
    (tmp_path / "ledger").mkdir()
    (tmp_path / "ledger" / "ledger-h-1.jsonl").write_text("{}\n")
    (tmp_path / "locust_stats.csv").write_text("a,b\n")

    class FakeS3:
        def __init__(self):
            self.uploads = []

        def upload_file(self, path, bucket, key):
            self.uploads.append((Path(path).read_text(), bucket, key))

    s3 = FakeS3()
    keys = upload_results(s3, tmp_path, bucket="b", prefix="loadgen/r/master-h/")
    assert keys == ["loadgen/r/master-h/ledger/ledger-h-1.jsonl", "loadgen/r/master-h/locust_stats.csv"]
    assert s3.uploads == [
        ("{}\n", "b", "loadgen/r/master-h/ledger/ledger-h-1.jsonl"),
        ("a,b\n", "b", "loadgen/r/master-h/locust_stats.csv"),
    ]


def test_the_bootstrap_installs_the_pins_fetches_the_bundle_and_hands_over(tmp_path):
    """`sh -c BOOTSTRAP` as the container runs it, with a stand-in `python` for pip and a stand-in boto3 that
    copies from a local folder."""
    bucket = tmp_path / "bucket"
    (bucket / "loadgen" / "h").mkdir(parents=True)
    (bucket / "loadgen" / "h" / "w.whl").write_text("wheel")
    (bucket / "loadgen" / "h" / "run_loadgen.py").write_text("print('runner started')\n")
    fake_modules = tmp_path / "modules"
    fake_modules.mkdir()
    (fake_modules / "boto3.py").write_text(
        "import shutil\n"
        "class _S3:\n"
        "    def download_file(self, bucket, key, path):\n"
        f"        shutil.copy({str(bucket)!r} + '/' + key, path)\n"
        "def client(name):\n"
        "    assert name == 's3'\n"
        "    return _S3()\n"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pip_log = tmp_path / "pip.log"
    (bin_dir / "python").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-m" ]; then echo "$@" >> {pip_log}; exit 0; fi\n'
        f'PYTHONPATH={fake_modules} exec {sys.executable} "$@"\n'
    )
    (bin_dir / "python").chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    result = subprocess.run(
        ["sh", "-c", bootstrap(["boto3==1.44.5", "locust==2.47.0"])],
        env={
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "HOME": str(home),
            "LAKESTACK_BUNDLE_BUCKET": "artifacts",
            "LAKESTACK_BUNDLE_PREFIX": "loadgen/h/",
            "LAKESTACK_BUNDLE_FILES": "w.whl,run_loadgen.py",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "runner started\n"
    assert pip_log.read_text() == (
        "-m pip install --quiet --user --no-cache-dir --no-deps --only-binary=:all: boto3==1.44.5 locust==2.47.0\n"
    )
    assert (home / "lakestack" / "w.whl").read_text() == "wheel"
