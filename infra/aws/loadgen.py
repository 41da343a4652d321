"""Load from more than one machine: Locust on ECS Fargate in the stack's private subnet (``lakestack:loadgen``).

The stack declares what a run needs and nothing that costs money while idle: an ECS cluster, a master and a
worker task definition (Docker's official Python image from public ECR, which does not throttle anonymous pulls
per address as Docker Hub does; Locust and boto3 installed at start at the lock's versions, then the kit's load
suite from the artifacts bucket by ``infra/aws/loadgen_task.py``), their roles, security groups and log group. A run (``lakestack
bench``) starts one master task with the run's options as container overrides, waits for its private address,
starts ``workers`` worker tasks pointed at it, and collects the statistics and ledgers the tasks upload to the
logs bucket under ``loadgen/<run id>/``. Tasks rather than ECS services: a service would restart a finished
master into a new, unasked-for run, and a run's options differ from run to run.

Least privilege: the task role may only put records on this stream (and describe it), use the stack key for
that, read the load-generator artifacts and write under ``loadgen/`` in the logs bucket; the execution role may
only write to the task's own log group (the image comes from a public registry, so no ECR rights).
"""

from __future__ import annotations

import functools
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.artifacts import LOADGEN_RUNNER_NAME, LoadgenArtifacts
from infra.aws._policy import document, statement
from infra.aws.layout import LOADGEN_RESULTS_PREFIX, log_group_prefix
from infra.aws.loadgen_tasks import RunningTasksStop
from infra.config import AwsCredentials

LOCUST_PORT = 5557
HTTPS_PORT = 443
CONTAINER = "locust"
LOG_RETENTION_DAYS = 30


def bootstrap(requirements: Sequence[str]) -> str:
    """The task's start-up command: install ``requirements`` (the lock's pins of Locust, boto3 and all they need:
    no resolution, wheels only, so a slim image needs no compiler), fetch the runner and the load-suite wheel from
    the artifacts bucket, hand over to the runner."""
    pins = " ".join(shlex.quote(r) for r in requirements)
    return (
        "set -eu; "
        f"python -m pip install --quiet --user --no-cache-dir --no-deps --only-binary=:all: {pins}; "
        "python -c 'import os, pathlib, boto3; "
        'd = pathlib.Path.home() / "lakestack"; d.mkdir(exist_ok=True); s3 = boto3.client("s3"); '
        '[s3.download_file(os.environ["LAKESTACK_BUNDLE_BUCKET"], os.environ["LAKESTACK_BUNDLE_PREFIX"] + n, str(d / n)) '
        'for n in os.environ["LAKESTACK_BUNDLE_FILES"].split(",")]\'; '
        f'exec python "$HOME/lakestack/{LOADGEN_RUNNER_NAME}"'
    )


@dataclass(frozen=True)
class LoadGeneratorArgs:
    """Inputs of :class:`LoadGenerator`."""

    name_prefix: str
    region: str
    workers: int
    cpu: int
    memory_mb: int
    image: str
    artifacts: LoadgenArtifacts
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    stream_name: pulumi.Input[str]
    stream_arn: pulumi.Input[str]
    kms_key_arn: pulumi.Input[str]
    artifact_bucket: pulumi.Input[str]
    artifact_bucket_arn: pulumi.Input[str]
    logs_bucket: pulumi.Input[str]
    logs_bucket_arn: pulumi.Input[str]
    account_id: pulumi.Input[str]
    # Encrypt the log group with the stack key (the key policy must let CloudWatch Logs use it).
    log_kms_key_arn: pulumi.Input[str] | None = None
    # What lets CloudWatch Logs use that key (the key policy): creating the group before it fails.
    log_key_ready: Sequence[pulumi.Resource] = ()
    # How `pulumi destroy` calls ECS to stop the tasks still running (the provider's profile and credentials).
    profile: str | None = None
    credentials: AwsCredentials | None = None
    tags: Mapping[str, str] = field(default_factory=dict)


def log_group_name(name_prefix: str) -> str:
    """The load generator's CloudWatch log group (under the ``/lakestack/<prefix>/`` the key policy names)."""
    return f"{log_group_prefix(name_prefix)}loadgen"


def _trust_ecs_tasks(account_id: pulumi.Input[str]) -> pulumi.Output[str]:
    # The account condition keeps another account's ECS from passing these roles (confused deputy).
    return pulumi.Output.from_input(account_id).apply(
        lambda account: json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "ecs-tasks.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                        "Condition": {"StringEquals": {"aws:SourceAccount": account}},
                    }
                ],
            },
            sort_keys=True,
        )
    )


def task_policy_statements(args: LoadGeneratorArgs) -> list[dict[str, Any]]:
    """What the Locust processes may do: write this stream, read their bundle, write their results."""
    bundle = pulumi.Output.from_input(args.artifact_bucket_arn).apply(
        lambda arn: f"{arn}/{args.artifacts.key_prefix}*"
    )
    results = pulumi.Output.from_input(args.logs_bucket_arn).apply(
        lambda arn: f"{arn}/{LOADGEN_RESULTS_PREFIX}/*"
    )
    return [
        statement(
            "PutRecordsOnStream",
            [
                "kinesis:PutRecord",
                "kinesis:PutRecords",
                "kinesis:DescribeStreamSummary",
                "kinesis:ListShards",
            ],
            [args.stream_arn],
        ),
        # Records on a KMS-encrypted stream are encrypted with a data key the producer asks for.
        statement("EncryptRecords", ["kms:GenerateDataKey", "kms:Decrypt"], [args.kms_key_arn]),
        statement("ReadBundle", ["s3:GetObject"], [bundle]),
        statement("WriteResults", ["s3:PutObject"], [results]),
    ]


def container_definition(  # noqa: PLR0913 - the values baked into one task's container, by keyword
    *,
    role: str,
    image: str,
    requirements: Sequence[str],
    region: str,
    stream_name: str,
    workers: int,
    bundle_bucket: str,
    bundle_prefix: str,
    bundle_files: list[str],
    results_uri: str,
    log_group: str,
) -> dict[str, Any]:
    """The Locust container of a master or worker task. A run adds its options as environment overrides
    (``LOCUST_USERS``, ``LOCUST_SPAWN_RATE``, ``LOCUST_RUN_TIME``, ``LAKESTACK_RUN_ID``, ``LAKESTACK_SCENARIO``,
    ``LAKESTACK_TARGET_RATE``, and ``LOCUST_MASTER_NODE_HOST`` for workers)."""
    environment = {
        "LAKESTACK_LOCUST_ROLE": role,
        "LAKESTACK_STREAM": stream_name,
        "LAKESTACK_REGION": region,
        "LAKESTACK_WORKERS": str(workers),
        "LAKESTACK_BUNDLE_BUCKET": bundle_bucket,
        "LAKESTACK_BUNDLE_PREFIX": bundle_prefix,
        "LAKESTACK_BUNDLE_FILES": ",".join(bundle_files),
        "LAKESTACK_RESULTS_URI": results_uri,
        "AWS_DEFAULT_REGION": region,
    }
    definition: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "essential": True,
        "entryPoint": ["sh", "-c"],
        "command": [bootstrap(requirements)],
        "environment": [{"name": k, "value": v} for k, v in sorted(environment.items())],
        "logConfiguration": {
            "logDriver": "awslogs",
            "options": {
                "awslogs-group": log_group,
                "awslogs-region": region,
                "awslogs-stream-prefix": role,
            },
        },
        # Time for the runner to upload the ledger and statistics after Locust stops.
        "stopTimeout": 120,
    }
    if role == "master":
        definition["portMappings"] = [{"containerPort": LOCUST_PORT, "protocol": "tcp"}]
    return definition


def _containers_json(args: LoadGeneratorArgs, role: str, bundle_files: list[str], values: list[Any]) -> str:
    """The task definition's container list, once the stream, bucket and log-group names are known."""
    stream_name, bundle_bucket, results_uri, log_group = values
    return json.dumps(
        [
            container_definition(
                role=role,
                image=args.image,
                requirements=args.artifacts.requirements,
                region=args.region,
                stream_name=stream_name,
                workers=args.workers,
                bundle_bucket=bundle_bucket,
                bundle_prefix=args.artifacts.key_prefix,
                bundle_files=bundle_files,
                results_uri=results_uri,
                log_group=log_group,
            )
        ],
        sort_keys=True,
    )


class LoadGenerator(pulumi.ComponentResource):
    """ECS cluster, Locust master and worker task definitions, roles, security groups and log group.

    Outputs: ``cluster_name``, ``master_task_definition``, ``worker_task_definition``, ``security_groups``
    (role -> id), ``results_uri``.
    """

    def __init__(
        self, name: str, args: LoadGeneratorArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("lakestack:aws:LoadGenerator", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        cluster = aws.ecs.Cluster(
            f"{name}-cluster", name=f"{args.name_prefix}-loadgen", tags=tags, opts=child
        )
        logs = aws.cloudwatch.LogGroup(
            f"{name}-logs",
            name=log_group_name(args.name_prefix),
            retention_in_days=LOG_RETENTION_DAYS,
            kms_key_id=args.log_kms_key_arn,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.log_key_ready)),
        )
        execution_role = aws.iam.Role(
            f"{name}-execution-role",
            assume_role_policy=_trust_ecs_tasks(args.account_id),
            tags=tags,
            opts=child,
        )
        aws.iam.RolePolicy(
            f"{name}-execution-access",
            role=execution_role.id,
            policy=document(
                [
                    statement(
                        "WriteTaskLogs",
                        ["logs:CreateLogStream", "logs:PutLogEvents"],
                        [logs.arn.apply(lambda arn: f"{arn}:*")],
                    )
                ]
            ),
            opts=child,
        )
        task_role = aws.iam.Role(
            f"{name}-task-role", assume_role_policy=_trust_ecs_tasks(args.account_id), tags=tags, opts=child
        )
        aws.iam.RolePolicy(
            f"{name}-task-access",
            role=task_role.id,
            policy=document(task_policy_statements(args)),
            opts=child,
        )
        groups = self._security_groups(name, args, child)
        results_uri = pulumi.Output.concat("s3://", args.logs_bucket, f"/{LOADGEN_RESULTS_PREFIX}")
        bundle_files = [args.artifacts.wheel.name, LOADGEN_RUNNER_NAME]
        definitions = {}
        for role in ("master", "worker"):
            containers = pulumi.Output.all(
                args.stream_name, args.artifact_bucket, results_uri, logs.name
            ).apply(functools.partial(_containers_json, args, role, bundle_files))
            definitions[role] = aws.ecs.TaskDefinition(
                f"{name}-{role}",
                family=f"{args.name_prefix}-locust-{role}",
                requires_compatibilities=["FARGATE"],
                network_mode="awsvpc",
                cpu=str(args.cpu),
                memory=str(args.memory_mb),
                runtime_platform={"operating_system_family": "LINUX", "cpu_architecture": "X86_64"},
                execution_role_arn=execution_role.arn,
                task_role_arn=task_role.arn,
                container_definitions=containers,
                tags=tags,
                opts=child,
            )
        for role, path in (("wheel", args.artifacts.wheel), ("runner", args.artifacts.runner)):
            aws.s3.BucketObjectv2(
                f"{name}-{role}",
                bucket=args.artifact_bucket,
                key=f"{args.artifacts.key_prefix}{path.name}",
                source=pulumi.FileAsset(str(path)),
                opts=child,
            )
        # Tasks started outside Pulumi hold the subnet, the groups and the cluster: stopped first at destroy.
        RunningTasksStop(
            f"{name}-running-tasks",
            cluster=cluster.name,
            region=args.region,
            subnet_id=args.subnet_id,
            security_group_ids=[g.id for g in groups.values()],
            profile=args.profile,
            credentials=args.credentials,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(definitions.values())),
        )
        self.cluster_name: pulumi.Output[str] = cluster.name
        self.master_task_definition: pulumi.Output[str] = definitions["master"].arn
        self.worker_task_definition: pulumi.Output[str] = definitions["worker"].arn
        self.security_groups: dict[str, pulumi.Output[str]] = {role: g.id for role, g in groups.items()}
        self.results_uri: pulumi.Output[str] = results_uri
        self.register_outputs(
            {
                "cluster_name": self.cluster_name,
                "master_task_definition": self.master_task_definition,
                "worker_task_definition": self.worker_task_definition,
                "security_groups": self.security_groups,
                "results_uri": self.results_uri,
            }
        )

    def _security_groups(
        self, name: str, args: LoadGeneratorArgs, child: pulumi.ResourceOptions
    ) -> dict[str, aws.ec2.SecurityGroup]:
        """Master and worker groups: HTTPS out (Kinesis, S3, the image and PyPI through the NAT), workers to the
        master's Locust port, nothing else in or out."""
        groups = {
            role: aws.ec2.SecurityGroup(
                f"{name}-{role}-sg",
                description=f"lakestack load generator: Locust {role}",
                vpc_id=args.vpc_id,
                revoke_rules_on_delete=True,
                tags=dict(args.tags),
                opts=child,
            )
            for role in ("master", "worker")
        }
        for role, group in groups.items():
            aws.vpc.SecurityGroupEgressRule(
                f"{name}-{role}-egress-https",
                security_group_id=group.id,
                ip_protocol="tcp",
                from_port=HTTPS_PORT,
                to_port=HTTPS_PORT,
                cidr_ipv4="0.0.0.0/0",
                description="HTTPS: Kinesis, S3, image registry, PyPI",
                opts=child,
            )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-worker-egress-master",
            security_group_id=groups["worker"].id,
            ip_protocol="tcp",
            from_port=LOCUST_PORT,
            to_port=LOCUST_PORT,
            referenced_security_group_id=groups["master"].id,
            description="Locust workers to their master",
            opts=child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-master-ingress-workers",
            security_group_id=groups["master"].id,
            ip_protocol="tcp",
            from_port=LOCUST_PORT,
            to_port=LOCUST_PORT,
            referenced_security_group_id=groups["worker"].id,
            description="Locust workers to their master",
            opts=child,
        )
        return groups
