"""The AWS stack: every component, wired together in the order a real account needs.

Order matters where AWS checks at create time: the roles exist before the key policy that names them; the
cluster waits for its network routes and endpoints, its roles' policies and the key policy (and so is destroyed
before them); the flow log waits for the bucket policy that lets it write.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.artifacts import JobArtifacts, LoadgenArtifacts, tls_domain
from infra.aws.catalog import Catalog, CatalogArgs
from infra.aws.cluster import SparkCluster, SparkClusterArgs
from infra.aws.deploy import JobDeployment, JobDeploymentArgs, job_spark_conf
from infra.aws.iam import ClusterRoles, ClusterRolesArgs
from infra.aws.kms import KeyAccess, KeyAccessArgs, StackKey, StackKeyArgs
from infra.aws.layout import FLOW_LOG_PREFIX, log_group_prefix
from infra.aws.loadgen import LoadGenerator, LoadGeneratorArgs
from infra.aws.monitoring import Monitoring, MonitoringArgs
from infra.aws.network import Network, NetworkArgs
from infra.aws.storage import LakeStorage, LakeStorageArgs
from infra.aws.stream import Stream, StreamArgs
from infra.config import BRONZE_TABLE, BUCKET_ROLES, EXPIRES_AT_TAG, LoadgenSettings, Pipeline, StackSettings
from infra.errors import NotBuiltError
from infra.pipelines import catalog_tables, checkpoint_uri, lake_uri, pipeline_args
from infra.pricing import interface_endpoint_plan


@dataclass(frozen=True)
class AwsInputs:
    """Local files the stack ships: the job artifacts (with a cluster) and the load generator's bundle."""

    artifacts: JobArtifacts | None = None
    loadgen: LoadgenArtifacts | None = None


@dataclass
class _Core:
    """What every part of the stack shares."""

    settings: StackSettings
    account_id: pulumi.Output[str]
    # aws, aws-cn or aws-us-gov (whatever the provider's credentials and region are in), and its DNS suffix.
    partition: pulumi.Output[str]
    dns_suffix: pulumi.Output[str]
    key: StackKey
    stream: Stream
    storage: LakeStorage


def declare_aws(settings: StackSettings, inputs: AwsInputs) -> dict[str, pulumi.Input[object]]:
    """Declare the AWS stack and return its outputs.

    Args:
        settings: validated settings (``cloud == "aws"``).
        inputs: the files the cluster and the load generator need, when those are enabled.
    """
    account_id = aws.get_caller_identity_output().account_id
    partition = aws.get_partition_output()
    names = account_id.apply(settings.bucket_names_for)
    key = StackKey("key", StackKeyArgs(alias=settings.name_prefix))
    stream = Stream("stream", StreamArgs(settings=settings.stream, kms_key_arn=key.arn))
    storage = LakeStorage(
        "storage",
        LakeStorageArgs(
            bucket_names={role: names.apply(itemgetter(role)) for role in BUCKET_ROLES},
            kms_key_arn=key.arn,
            account_id=account_id,
            region=settings.region,
            partition=partition.partition,
            access_logging=settings.security.s3_access_logging,
            accept_flow_logs=settings.needs_network and settings.security.flow_logs,
        ),
    )
    core = _Core(settings, account_id, partition.partition, partition.dns_suffix, key, stream, storage)
    lake = storage.names["lake"]
    catalog = Catalog(
        "catalog",
        CatalogArgs(
            database_name=settings.name_prefix.replace("-", "_"),
            lake_bucket=lake,
            tables=catalog_tables(settings.pipelines),
        ),
    )
    network = _network(core) if settings.needs_network else None
    roles = _roles(core, catalog) if settings.cluster.enabled else None
    key_access = _key_access(core, roles) if settings.security.explicit_key_policy else None
    cluster_id: pulumi.Output[str] | None = None
    step_ids: Mapping[str, pulumi.Output[str]] = {}
    if settings.cluster.enabled:
        if inputs.artifacts is None or network is None or roles is None:
            raise NotBuiltError("the cluster is enabled but no job artifacts were built (internal error)")
        cluster_id, step_ids = _cluster(core, inputs.artifacts, network, roles, key_access)
    monitoring = Monitoring(
        "monitoring",
        MonitoringArgs(
            name_prefix=settings.name_prefix,
            region=settings.region,
            stream_name=stream.name,
            cluster_id=cluster_id,
            topic_kms_key_arn=key.arn if key_access is not None else None,
            alert_email=settings.alert_email,
        ),
    )
    loadgen = None
    if settings.loadgen is not None:
        if inputs.loadgen is None or network is None:
            raise NotBuiltError("the load generator is enabled but its bundle was not built (internal error)")
        loadgen = _loadgen(core, settings.loadgen, inputs.loadgen, network, key_access=key_access)
    return {
        "stream_name": stream.name,
        "stream_arn": stream.arn,
        "region": settings.region,
        "lake_bucket": lake,
        "checkpoint_bucket": storage.names["checkpoints"],
        "artifact_bucket": storage.names["artifacts"],
        "log_bucket": storage.names["logs"],
        "cluster_id": cluster_id,
        "dashboard_url": monitoring.dashboard_url,
        "alarm_topic_arn": monitoring.topic_arn,
        "table_uri": pulumi.Output.concat("s3://", lake, f"/{BRONZE_TABLE}"),
        "glue_database": catalog.database_name,
        "table_uris": catalog.table_uris,
        "pipelines": _pipeline_outputs(settings, storage),
        "expires_at": settings.tags[EXPIRES_AT_TAG],
        "step_ids": step_ids,
        "loadgen": loadgen,
    }


def _network(core: _Core) -> Network:
    s = core.settings
    return Network(
        "network",
        NetworkArgs(
            region=s.region,
            instance_type=s.cluster.instance_type if s.cluster.enabled else None,
            flow_logs_destination=(
                core.storage.arns["logs"].apply(lambda arn: f"{arn}/{FLOW_LOG_PREFIX}/")
                if s.security.flow_logs
                else None
            ),
            flow_logs_after=[core.storage.logs_policy],
            restrict_default_security_group=s.security.restrict_default_security_group,
            # Chosen with the prices and the planned load, as `lakestack plan` shows and prices them.
            interface_endpoints=interface_endpoint_plan(s).services,
        ),
    )


def _roles(core: _Core, catalog: Catalog) -> ClusterRoles:
    return ClusterRoles(
        "roles",
        ClusterRolesArgs(
            stream_arn=core.stream.arn,
            bucket_arns=core.storage.arns,
            kms_key_arn=core.key.arn,
            glue_database=catalog.database_name,
            region=core.settings.region,
            account_id=core.account_id,
            partition=core.partition,
        ),
    )


def _key_access(core: _Core, roles: ClusterRoles | None) -> KeyAccess:
    return KeyAccess(
        "key-access",
        KeyAccessArgs(
            key_id=core.key.key_id,
            account_id=core.account_id,
            region=core.settings.region,
            user_role_arns=[roles.instance_role_arn] if roles else [],
            disk_role_arns=[roles.service_role_arn] if roles else [],
            log_group_prefix=log_group_prefix(core.settings.name_prefix) if core.settings.loadgen else None,
            partition=core.partition,
            dns_suffix=core.dns_suffix,
        ),
    )


def _cluster(
    core: _Core,
    artifacts: JobArtifacts,
    network: Network,
    roles: ClusterRoles,
    key_access: KeyAccess | None,
) -> tuple[pulumi.Output[str], dict[str, pulumi.Output[str]]]:
    s = core.settings
    names = core.storage.names
    cluster = SparkCluster(
        "spark",
        SparkClusterArgs(
            cluster_name=s.name_prefix,
            release_label=s.cluster.release_label,
            sizing=s.sizing,
            max_workers=s.cluster.max_workers,
            idle_timeout_minutes=s.cluster.idle_timeout_minutes,
            vpc_id=network.vpc_id,
            subnet_id=network.private_subnet_id,
            service_role_arn=roles.service_role_arn,
            instance_profile_arn=roles.instance_profile_arn,
            kms_key_arn=core.key.arn,
            log_bucket=names["logs"],
            artifact_bucket=names["artifacts"],
            tls_domain=tls_domain(s.region),
            # One slot per pipeline, plus one for the short step that stops an application before a redeploy.
            step_concurrency=len(s.pipelines) + 1,
            depends_on=[*network.ready, *roles.ready, *([key_access] if key_access else [])],
        ),
    )
    job_args: dict[str, pulumi.Output[list[str]]] = {
        p: pulumi.Output.all(core.stream.name, names["lake"], names["checkpoints"]).apply(
            functools.partial(_job_args, p, s)
        )
        for p in s.pipelines
    }
    deployment = JobDeployment(
        "jobs",
        JobDeploymentArgs(
            artifacts=artifacts,
            artifact_bucket=names["artifacts"],
            cluster_id=cluster.cluster_id,
            region=s.region,
            job_args=job_args,
            spark_conf=job_spark_conf(
                s.sizing,
                release=s.cluster.release,
                parallelism=s.parallelism,
                max_workers=s.cluster.max_workers,
            ),
            profile=s.aws_profile,
            credentials=s.aws_credentials,
        ),
    )
    return cluster.cluster_id, deployment.step_ids


def _loadgen(
    core: _Core,
    spec: LoadgenSettings,
    bundle: LoadgenArtifacts,
    network: Network,
    *,
    key_access: KeyAccess | None,
) -> pulumi.Output[dict[str, Any]]:
    s = core.settings
    generator = LoadGenerator(
        "loadgen",
        LoadGeneratorArgs(
            name_prefix=s.name_prefix,
            region=s.region,
            workers=spec.workers,
            cpu=spec.cpu,
            memory_mb=spec.memory_mb,
            image=spec.image,
            artifacts=bundle,
            vpc_id=network.vpc_id,
            subnet_id=network.private_subnet_id,
            stream_name=core.stream.name,
            stream_arn=core.stream.arn,
            kms_key_arn=core.key.arn,
            artifact_bucket=core.storage.names["artifacts"],
            artifact_bucket_arn=core.storage.arns["artifacts"],
            logs_bucket=core.storage.names["logs"],
            logs_bucket_arn=core.storage.arns["logs"],
            account_id=core.account_id,
            # Encrypted only when the key policy lets CloudWatch Logs use the key, and only after it does.
            log_kms_key_arn=core.key.arn if key_access is not None else None,
            log_key_ready=[key_access] if key_access is not None else [],
            profile=s.aws_profile,
            credentials=s.aws_credentials,
        ),
    )
    # Everything `lakestack bench` needs to start a run with ECS RunTask.
    return pulumi.Output.from_input(
        {
            "cluster": generator.cluster_name,
            "master_task_definition": generator.master_task_definition,
            "worker_task_definition": generator.worker_task_definition,
            "container": "locust",
            "workers": spec.workers,
            "subnets": [network.private_subnet_id],
            "security_groups": generator.security_groups,
            "assign_public_ip": "DISABLED",
            # Tasks carry the stack's tags (the expiry among them) only when started with this.
            "propagate_tags": "TASK_DEFINITION",
            "results_uri": generator.results_uri,
        }
    )


def _job_args(pipeline: Pipeline, settings: StackSettings, values: list[Any]) -> list[str]:
    """A pipeline's job arguments once the stream and bucket names are known (stream, lake, checkpoints)."""
    stream, lake, checkpoints = values
    return pipeline_args(
        pipeline,
        stream=stream,
        region=settings.region,
        lake_bucket=lake,
        checkpoint_bucket=checkpoints,
        pipelines=settings.pipelines,
        extra=settings.job_flags.get(pipeline, ()),
    )


def _pipeline_uris(pipeline: Pipeline, values: list[Any]) -> dict[str, str | None]:
    return {"lake": lake_uri(values[0], pipeline), "checkpoint": checkpoint_uri(values[1], pipeline)}


def _pipeline_outputs(
    settings: StackSettings, storage: LakeStorage
) -> dict[str, pulumi.Output[dict[str, str | None]]]:
    """Per pipeline: its lake and checkpoint URIs (what a bench reads and reconciles)."""
    names = pulumi.Output.all(storage.names["lake"], storage.names["checkpoints"])
    return {p: names.apply(functools.partial(_pipeline_uris, p)) for p in settings.pipelines}
