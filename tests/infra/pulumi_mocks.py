"""Run the Pulumi program under the SDK's mocks and record every resource it declares (imported by the tests
here; a uniquely named module, since several test folders have a `conftest`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import pulumi
import yaml
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.mocks import MockMonitor

from infra.artifacts import JobArtifacts, LoadgenArtifacts
from infra.config import PROJECT_DIR

ACCOUNT = "123456789012"
MOCK_KEY_PEM = "-----BEGIN RSA PRIVATE KEY-----\nMOCKKEY\n-----END RSA PRIVATE KEY-----\n"
MOCK_CERT_PEM = "-----BEGIN CERTIFICATE-----\nMOCKCERT\n-----END CERTIFICATE-----\n"
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
# Zones that offer an instance type (AWS's DescribeInstanceTypeOfferings); types not listed: every zone.
OFFERINGS = {"m5.xlarge": ["us-east-1b", "us-east-1c"], "r5.2xlarge": []}
# What a load-generator task installs before the suite (the real list is the lock's closure of locust and boto3).
LOADGEN_PINS = ("boto3==1.44.5", "locust==2.47.0")
# Job modules a checkout has, for the check that refuses to deploy a pipeline whose job is missing.
JOB_FILES = (
    "ingest.py",
    "pipelines/sales.py",
    "pipelines/fraud.py",
    "pipelines/orders.py",
    "pipelines/maintenance.py",
)


@dataclass
class Resource:
    typ: str
    name: str
    inputs: dict[str, Any]
    urn: str = ""
    # What the engine is told: resources this one depends on (URNs), properties it ignores, its provider.
    dependencies: list[str] = field(default_factory=list)
    ignore_changes: list[str] = field(default_factory=list)
    parent: str = ""


@dataclass
class Run:
    resources: list[Resource] = field(default_factory=list)
    exports: dict[str, Any] = field(default_factory=dict)

    def of_type(self, typ: str) -> list[Resource]:
        return [r for r in self.resources if r.typ == typ]

    def one(self, typ: str, name: str | None = None) -> Resource:
        found = [r for r in self.of_type(typ) if name is None or r.name == name]
        assert len(found) == 1, f"expected one {typ} {name or ''}, found {[r.name for r in found]}"
        return found[0]

    def named(self, name: str) -> Resource:
        (found,) = [r for r in self.resources if r.name == name]
        return found

    def names(self, typ: str) -> list[str]:
        return sorted(r.name for r in self.of_type(typ))

    def depends_on(self, resource: Resource) -> set[str]:
        """Names of the resources ``resource`` was declared to depend on."""
        by_urn = {r.urn: r.name for r in self.resources}
        return {by_urn.get(urn, urn) for urn in resource.dependencies}


class RecordingMonitor(MockMonitor):
    """The SDK's mock monitor, also keeping what it is told beyond inputs: URN, dependencies, ignoreChanges."""

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        self.run = mocks.run

    def RegisterResource(self, request: Any) -> Any:
        reply = super().RegisterResource(request)
        for resource in reversed(self.run.resources):
            if resource.name == request.name and resource.typ == request.type and not resource.urn:
                resource.urn = reply.urn
                resource.dependencies = list(request.dependencies)
                resource.ignore_changes = list(request.ignoreChanges)
                resource.parent = request.parent
                break
        return reply


_REGION_ACCOUNT = f"us-east-1:{ACCOUNT}"
# What AWS (and the tls provider) would report back for each type, from the inputs.
_ARNS = {
    "aws:sns/topic:Topic": lambda n, i: f"arn:aws:sns:{_REGION_ACCOUNT}:{i['name']}",
    "aws:cloudwatch/metricAlarm:MetricAlarm": lambda n, i: f"arn:aws:cloudwatch:{_REGION_ACCOUNT}:alarm:{n}",
    "aws:cloudwatch/logGroup:LogGroup": lambda n, i: f"arn:aws:logs:{_REGION_ACCOUNT}:log-group:{i['name']}",
    "aws:ecs/taskDefinition:TaskDefinition": lambda n, i: (
        f"arn:aws:ecs:{_REGION_ACCOUNT}:task-definition/{i['family']}:1"
    ),
    "aws:kinesis/stream:Stream": lambda n, i: f"arn:aws:kinesis:{_REGION_ACCOUNT}:stream/{i['name']}",
    "aws:s3/bucket:Bucket": lambda n, i: f"arn:aws:s3:::{i['bucket']}",
    "aws:kms/key:Key": lambda n, i: f"arn:aws:kms:{_REGION_ACCOUNT}:key/key-1234",
    "aws:iam/role:Role": lambda n, i: f"arn:aws:iam::{ACCOUNT}:role/{n}",
    "aws:iam/instanceProfile:InstanceProfile": lambda n, i: (
        f"arn:aws:iam::{ACCOUNT}:instance-profile/{i.get('name') or n}"
    ),
}
_EXTRA_OUTPUTS = {
    "tls:index/privateKey:PrivateKey": lambda n, i: {"privateKeyPem": MOCK_KEY_PEM},
    "tls:index/selfSignedCert:SelfSignedCert": lambda n, i: {"certPem": MOCK_CERT_PEM},
    "aws:kms/key:Key": lambda n, i: {"keyId": "key-1234"},
    "aws:iam/role:Role": lambda n, i: {"name": n},
    # Auto-named unless given a name, as AWS's provider does (a random suffix).
    "aws:iam/instanceProfile:InstanceProfile": lambda n, i: {"name": i.get("name") or f"{n}-7c1e9a0"},
    "aws:emr/securityConfiguration:SecurityConfiguration": lambda n, i: {"name": f"{i['namePrefix']}mock"},
}
_IDS = {
    "aws:s3/bucket:Bucket": lambda n, i: i["bucket"],
    "aws:kms/key:Key": lambda n, i: "key-1234",
    "aws:emr/cluster:Cluster": lambda n, i: "j-MOCKCLUSTER",
    "pulumi-python:dynamic:Resource": lambda n, i: f"s-{n}",
}


# What aws.get_partition reports for each partition the tests run in.
PARTITIONS = {
    "aws": {"dnsSuffix": "amazonaws.com", "reverseDnsPrefix": "com.amazonaws"},
    "aws-us-gov": {"dnsSuffix": "amazonaws.com", "reverseDnsPrefix": "com.amazonaws"},
    "aws-cn": {"dnsSuffix": "amazonaws.com.cn", "reverseDnsPrefix": "cn.com.amazonaws"},
}


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(self, run: Run, partition: str = "aws") -> None:
        self.run = run
        self.partition = partition

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.run.resources.append(Resource(args.typ, args.name, dict(args.inputs)))
        outs = dict(args.inputs)
        rid = f"{args.name}-id"
        inputs, name = args.inputs, args.name
        if args.typ in _ARNS:
            outs["arn"] = _ARNS[args.typ](name, inputs)
        else:
            outs.setdefault("arn", f"arn:aws:mock:us-east-1:{ACCOUNT}:{name}")
        # AWS answers with ARNs in the account's partition.
        if isinstance(outs["arn"], str):
            outs["arn"] = outs["arn"].replace("arn:aws:", f"arn:{self.partition}:", 1)
        if args.typ in _EXTRA_OUTPUTS:
            outs.update(_EXTRA_OUTPUTS[args.typ](name, inputs))
        if args.typ in _IDS:
            rid = _IDS[args.typ](name, inputs)
        return rid, outs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {
                "accountId": ACCOUNT,
                "arn": f"arn:{self.partition}:iam::{ACCOUNT}:user/test",
                "userId": "test",
            }
        if args.token == "aws:ec2/getVpcEndpointService:getVpcEndpointService":
            service = args.args["service"]
            prefix = PARTITIONS[self.partition]["reverseDnsPrefix"]
            return {
                "id": service,
                "service": service,
                "serviceName": f"{prefix}.us-east-1.{service}",
                "serviceType": args.args.get("serviceType", "Interface"),
                "availabilityZones": ZONES,
                "privateDnsName": f"{service}.us-east-1.{PARTITIONS[self.partition]['dnsSuffix']}",
            }
        if args.token == "aws:index/getPartition:getPartition":
            return {"id": self.partition, "partition": self.partition, **PARTITIONS[self.partition]}
        if args.token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            return {"names": ZONES, "zoneIds": [f"use1-az{i}" for i in range(1, 4)], "id": "us-east-1"}
        if args.token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
            (instance_type,) = args.args["filters"][0]["values"]
            locations = OFFERINGS.get(instance_type, ZONES)
            return {
                "id": "us-east-1",
                "instanceTypes": [instance_type] * len(locations),
                "locations": locations,
                "locationTypes": ["availability-zone"] * len(locations),
            }
        raise AssertionError(f"unexpected call {args.token}")


def step_conf(args: list[str]) -> dict[str, str]:
    """The ``--conf key=value`` settings of a spark-submit command line."""
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")


def container_environment(conf: Mapping[str, str], prefix: str) -> dict[str, str]:
    """The variables YARN puts in a container's environment from a job's ``spark.yarn.appMasterEnv.*`` (the
    driver's, in cluster mode) or ``spark.executorEnv.*`` (the executors') settings."""
    return {key.removeprefix(prefix): value for key, value in conf.items() if key.startswith(prefix)}


def stack_config(stack: str) -> dict[str, Any]:
    """The `config:` section of a stack file in the repository."""
    return yaml.safe_load((PROJECT_DIR / f"Pulumi.{stack}.yaml").read_text())["config"]


def fake_artifacts(tmp_path: Path, content_hash: str = "0123456789abcdef") -> JobArtifacts:
    files = tmp_path / "artifacts"
    files.mkdir(exist_ok=True)
    paths = [files / n for n in ("lakestack_jobs-0.1.0-py3-none-any.whl", "environment.tar.gz", "run_job.py")]
    for p in paths:
        p.write_bytes(b"x")
    return JobArtifacts(content_hash, *paths)


def fake_loadgen_artifacts(tmp_path: Path, content_hash: str = "fedcba9876543210") -> LoadgenArtifacts:
    files = tmp_path / "loadgen"
    files.mkdir(exist_ok=True)
    wheel, runner = files / "lakestack_loadtest-0.1.0-py3-none-any.whl", files / "run_loadgen.py"
    for p in (wheel, runner):
        p.write_bytes(b"x")
    return LoadgenArtifacts(content_hash, wheel, runner, LOADGEN_PINS)


def fake_checkout(root: Path, job_files: tuple[str, ...] = JOB_FILES) -> Path:
    """A folder with the given job modules, standing in for the checkout whose jobs are deployed."""
    for name in job_files:
        path = root / "jobs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    return root


def execute_program(
    config: dict[str, Any],
    *,
    tmp_path: Path,
    stack: str = "dev",
    artifacts: JobArtifacts | None = None,
    run: Run | None = None,
    job_files: tuple[str, ...] = JOB_FILES,
    partition: str = "aws",
) -> Run:
    """Run `infra.program.main` for a stack config under mocks; returns the recorded resources and exports.
    ``partition`` is the AWS partition the mocked provider reports (and builds its ARNs in)."""
    from infra import program

    recorded = run if run is not None else Run()
    # A fresh root stack per run: stack transformations (the tags) must not carry over from an earlier run.
    pulumi_settings.ROOT.set(None)
    mocks = RecordingMocks(recorded, partition)
    pulumi.runtime.set_mocks(
        mocks, project="lakestack", stack=stack, preview=False, monitor=RecordingMonitor(mocks)
    )
    pulumi.runtime.set_all_config({k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()})
    # The program lists the stack's keys from its Pulumi.<stack>.yaml, as `pulumi up` leaves it on disk.
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
    inputs = program.ClusterInputs(
        artifacts=artifacts or fake_artifacts(tmp_path), loadgen=fake_loadgen_artifacts(tmp_path)
    )
    checkout = fake_checkout(tmp_path / "checkout", job_files)
    exported: dict[str, Any] = {}

    @pulumi.runtime.test
    def program_run():
        program.main(prepare=lambda _settings: inputs, project_dir=project, source_dir=checkout)
        return pulumi.Output.from_input(exported).apply(recorded.exports.update)

    with mock.patch.object(pulumi, "export", lambda name, value: exported.__setitem__(name, value)):
        program_run()
    return recorded
