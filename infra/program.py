"""The lakestack Pulumi program: settings in, components declared, outputs exported.

``infra/__main__.py`` only calls :func:`main`. Nothing here declares resources at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_aws as aws

from infra.artifacts import JobArtifacts, build_artifacts, file_digest, tls_certificates
from infra.aws.catalog import Catalog, CatalogArgs
from infra.aws.cluster import SparkCluster, SparkClusterArgs
from infra.aws.deploy import JobDeployment, JobDeploymentArgs
from infra.aws.iam import ClusterRoles, ClusterRolesArgs
from infra.aws.kms import StackKey, StackKeyArgs
from infra.aws.monitoring import Monitoring, MonitoringArgs
from infra.aws.network import Network, NetworkArgs
from infra.aws.storage import LakeStorage, LakeStorageArgs
from infra.aws.stream import Stream, StreamArgs
from infra.config import BRONZE_TABLE, PROJECT_DIR, StackSettings, settings_from_pulumi
from infra.errors import NotBuiltError

# Pipelines whose command-line flags the program knows how to fill in on a cluster.
DEPLOYABLE = ("ingest",)
OUTPUT_NAMES = (
    "stream_name",
    "stream_arn",
    "region",
    "lake_bucket",
    "checkpoint_bucket",
    "artifact_bucket",
    "log_bucket",
    "cluster_id",
    "dashboard_url",
    "table_uri",
)


@dataclass(frozen=True)
class ClusterInputs:
    """Local files the cluster needs: the job artifacts and the in-transit TLS certificate zip."""

    artifacts: JobArtifacts
    tls_certificates: Path


def build_cluster_inputs(settings: StackSettings) -> ClusterInputs:
    """Build (or reuse from ``.lakestack/``) the artifacts and certificates for a real deployment."""
    cache = PROJECT_DIR / ".lakestack"
    return ClusterInputs(
        artifacts=build_artifacts(
            PROJECT_DIR, cache / "artifacts", architecture=settings.sizing.architecture
        ),
        tls_certificates=tls_certificates(cache / "tls", region=settings.region),
    )


def check_buildable(settings: StackSettings) -> None:
    """Refuse, before any resource is declared, what this version cannot build."""
    if settings.cloud == "azure":
        raise NotBuiltError(
            "lakestack:cloud = 'azure': the Azure stack (Synapse Spark 3.5, Event Hubs, ADLS Gen2) is not built "
            "yet; set lakestack:cloud to aws, or use `lakestack plan` to size an Azure deployment."
        )
    if settings.cluster.enabled:
        missing = [p for p in settings.pipelines if p not in DEPLOYABLE]
        if missing:
            raise NotBuiltError(
                f"lakestack:pipelines includes {missing[0]!r}, which cannot be deployed to a cluster yet "
                f"(deployable: {', '.join(DEPLOYABLE)}); remove it from the list or run it locally."
            )


def job_args(pipeline: str, settings: StackSettings) -> list[str]:
    """Command-line flags of one pipeline on the cluster."""
    buckets = settings.bucket_names
    if pipeline == "ingest":
        return [
            "--stream",
            settings.stream_name,
            "--region",
            settings.region,
            "--table",
            f"s3://{buckets['lake']}/{BRONZE_TABLE}",
            "--checkpoint",
            f"s3://{buckets['checkpoints']}/{pipeline}",
        ]
    raise NotBuiltError(f"no cluster flags for pipeline {pipeline!r}; deployable: {', '.join(DEPLOYABLE)}")


def declare(
    settings: StackSettings, *, cluster_inputs: ClusterInputs | None
) -> dict[str, pulumi.Input[object]]:
    """Declare the AWS stack and return its outputs (see ``OUTPUT_NAMES``).

    Args:
        settings: validated settings.
        cluster_inputs: artifacts and certificates; required when the settings enable the cluster.
    """
    check_buildable(settings)
    prefix = settings.name_prefix
    tags = {"lakestack:stack": settings.stack, "lakestack:project": "lakestack"}
    key = StackKey("key", StackKeyArgs(alias=prefix, tags=tags))
    stream = Stream("stream", StreamArgs(settings=settings.stream, kms_key_arn=key.arn, tags=tags))
    storage = LakeStorage(
        "storage", LakeStorageArgs(bucket_names=settings.bucket_names, kms_key_arn=key.arn, tags=tags)
    )
    catalog = Catalog(
        "catalog", CatalogArgs(database_name=prefix.replace("-", "_"), lake_bucket=storage.names["lake"])
    )
    cluster_id: pulumi.Output[str] | None = None
    if settings.cluster.enabled:
        if cluster_inputs is None:
            raise NotBuiltError("the cluster is enabled but no job artifacts were built (internal error)")
        cluster_id = _declare_cluster(
            settings, cluster_inputs, key=key, stream=stream, storage=storage, catalog=catalog, tags=tags
        )
    monitoring = Monitoring(
        "monitoring",
        MonitoringArgs(
            dashboard_name=prefix, region=settings.region, stream_name=stream.name, cluster_id=cluster_id
        ),
    )
    return {
        "stream_name": stream.name,
        "stream_arn": stream.arn,
        "region": settings.region,
        "lake_bucket": storage.names["lake"],
        "checkpoint_bucket": storage.names["checkpoints"],
        "artifact_bucket": storage.names["artifacts"],
        "log_bucket": storage.names["logs"],
        "cluster_id": cluster_id,
        "dashboard_url": monitoring.dashboard_url,
        "table_uri": pulumi.Output.concat("s3://", storage.names["lake"], f"/{BRONZE_TABLE}"),
    }


def _declare_cluster(
    settings: StackSettings,
    inputs: ClusterInputs,
    *,
    key: StackKey,
    stream: Stream,
    storage: LakeStorage,
    catalog: Catalog,
    tags: dict[str, str],
) -> pulumi.Output[str]:
    network = Network("network", NetworkArgs(region=settings.region, tags=tags))
    identity = aws.get_caller_identity_output()
    roles = ClusterRoles(
        "roles",
        ClusterRolesArgs(
            stream_arn=stream.arn,
            bucket_arns=storage.arns,
            kms_key_arn=key.arn,
            glue_database=catalog.database_name,
            region=settings.region,
            account_id=identity.account_id,
            tags=tags,
        ),
    )
    cluster = SparkCluster(
        "spark",
        SparkClusterArgs(
            cluster_name=settings.name_prefix,
            release_label=settings.cluster.release_label,
            sizing=settings.sizing,
            parallelism=settings.parallelism,
            max_workers=settings.cluster.max_workers,
            idle_timeout_minutes=settings.cluster.idle_timeout_minutes,
            vpc_id=network.vpc_id,
            subnet_id=network.private_subnet_id,
            service_role_arn=roles.service_role_arn,
            instance_profile_arn=roles.instance_profile_arn,
            kms_key_arn=key.arn,
            log_bucket=storage.names["logs"],
            artifact_bucket=storage.names["artifacts"],
            tls_certificates_zip=pulumi.FileAsset(str(inputs.tls_certificates)),
            tls_certificates_key=f"tls/{file_digest(inputs.tls_certificates)}.zip",
            step_concurrency=len(settings.pipelines) + 1,
            tags=tags,
        ),
    )
    JobDeployment(
        "jobs",
        JobDeploymentArgs(
            artifacts=inputs.artifacts,
            artifact_bucket=storage.names["artifacts"],
            cluster_id=cluster.cluster_id,
            region=settings.region,
            job_args={p: job_args(p, settings) for p in settings.pipelines},
        ),
    )
    return cluster.cluster_id


def main(
    *,
    prepare: Callable[[StackSettings], ClusterInputs] = build_cluster_inputs,
    project_dir: Path | None = None,
) -> None:
    """Run the program: read and validate the stack configuration, declare, export.

    Args:
        prepare: builds the cluster's local inputs; tests pass a cheap stand-in.
        project_dir: where the stack files are; the repository root by default.
    """
    settings = settings_from_pulumi(project_dir=project_dir)
    check_buildable(settings)
    inputs = prepare(settings) if settings.cluster.enabled else None
    for name, value in declare(settings, cluster_inputs=inputs).items():
        pulumi.export(name, value)
