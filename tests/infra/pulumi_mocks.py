"""Run the Pulumi program under the SDK's mocks and record every resource it declares (imported by the tests
here; a uniquely named module, since several test folders have a `conftest`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import pulumi
import yaml

from infra.artifacts import JobArtifacts
from infra.config import PROJECT_DIR

ACCOUNT = "123456789012"


@dataclass
class Resource:
    typ: str
    name: str
    inputs: dict[str, Any]


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


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(self, run: Run) -> None:
        self.run = run

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.run.resources.append(Resource(args.typ, args.name, dict(args.inputs)))
        outs = dict(args.inputs)
        rid = f"{args.name}-id"
        if args.typ == "aws:kinesis/stream:Stream":
            outs["arn"] = f"arn:aws:kinesis:us-east-1:{ACCOUNT}:stream/{args.inputs['name']}"
        elif args.typ == "aws:s3/bucket:Bucket":
            rid = args.inputs["bucket"]
            outs["arn"] = f"arn:aws:s3:::{args.inputs['bucket']}"
        elif args.typ == "aws:kms/key:Key":
            rid = "key-1234"
            outs.update(keyId=rid, arn=f"arn:aws:kms:us-east-1:{ACCOUNT}:key/{rid}")
        elif args.typ == "aws:iam/role:Role":
            outs.update(name=args.name, arn=f"arn:aws:iam::{ACCOUNT}:role/{args.name}")
        elif args.typ == "aws:iam/instanceProfile:InstanceProfile":
            outs.update(name=args.name, arn=f"arn:aws:iam::{ACCOUNT}:instance-profile/{args.name}")
        elif args.typ == "aws:emr/cluster:Cluster":
            rid = "j-MOCKCLUSTER"
        elif args.typ == "aws:emr/securityConfiguration:SecurityConfiguration":
            outs["name"] = f"{args.inputs['namePrefix']}mock"
        elif args.typ == "pulumi-python:dynamic:Resource":
            rid = f"s-{args.name}"
        else:
            outs.setdefault("arn", f"arn:aws:mock:us-east-1:{ACCOUNT}:{args.name}")
        return rid, outs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": ACCOUNT, "arn": f"arn:aws:iam::{ACCOUNT}:user/test", "userId": "test"}
        if args.token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            return {
                "names": ["us-east-1a", "us-east-1b"],
                "zoneIds": ["use1-az1", "use1-az2"],
                "id": "us-east-1",
            }
        raise AssertionError(f"unexpected call {args.token}")


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


def execute_program(
    config: dict[str, Any],
    *,
    tmp_path: Path,
    stack: str = "dev",
    artifacts: JobArtifacts | None = None,
    run: Run | None = None,
) -> Run:
    """Run `infra.program.main` for a stack config under mocks; returns the recorded resources and exports."""
    from infra import program

    recorded = run if run is not None else Run()
    pulumi.runtime.set_mocks(RecordingMocks(recorded), project="lakestack", stack=stack, preview=False)
    pulumi.runtime.set_all_config({k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()})
    # The program lists the stack's keys from its Pulumi.<stack>.yaml, as `pulumi up` leaves it on disk.
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
    tls = tmp_path / "tls.zip"
    tls.write_bytes(b"certs")
    inputs = program.ClusterInputs(artifacts=artifacts or fake_artifacts(tmp_path), tls_certificates=tls)
    exported: dict[str, Any] = {}

    @pulumi.runtime.test
    def program_run():
        program.main(prepare=lambda _settings: inputs, project_dir=project)
        return pulumi.Output.from_input(exported).apply(recorded.exports.update)

    with mock.patch.object(pulumi, "export", lambda name, value: exported.__setitem__(name, value)):
        program_run()
    return recorded
