"""The lakestack Pulumi program: settings in, components declared, outputs exported.

``infra/__main__.py`` only calls :func:`main`. Nothing here declares resources at import time; the AWS stack
itself is in :mod:`infra.aws.stack`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pulumi

from infra.artifacts import JobArtifacts, LoadgenArtifacts, build_artifacts, build_loadgen_artifacts
from infra.config import PROJECT_DIR, StackSettings, settings_from_pulumi
from infra.errors import NotBuiltError
from infra.pipelines import check_jobs_exist
from infra.tags import tag_every_resource

# What `lakestack outputs` prints and a bench reads.
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
    "alarm_topic_arn",
    "table_uri",
    "glue_database",
    "table_uris",
    "pipelines",
    "expires_at",
    "step_ids",
    "loadgen",
)


@dataclass(frozen=True)
class ClusterInputs:
    """Local files the stack ships: the job artifacts (with a cluster), the load generator's bundle (with
    ``lakestack:loadgen``)."""

    artifacts: JobArtifacts | None = None
    loadgen: LoadgenArtifacts | None = None


def build_cluster_inputs(settings: StackSettings) -> ClusterInputs:
    """Build (or reuse from ``.lakestack/``) what the settings need shipped."""
    cache = PROJECT_DIR / ".lakestack"
    return ClusterInputs(
        artifacts=(
            build_artifacts(PROJECT_DIR, cache / "artifacts", architecture=settings.sizing.architecture)
            if settings.cluster.enabled
            else None
        ),
        loadgen=build_loadgen_artifacts(PROJECT_DIR, cache / "loadgen") if settings.loadgen else None,
    )


def check_buildable(settings: StackSettings, *, source_dir: Path = PROJECT_DIR) -> None:
    """Refuse, before any resource is declared, what this version cannot build.

    Args:
        settings: validated settings.
        source_dir: the checkout whose ``jobs/`` would be packed for the cluster.
    """
    if settings.cloud == "azure":
        raise NotBuiltError(
            "lakestack:cloud = 'azure' reached the AWS program; the Azure stack is declared by infra.azure.program "
            "(infra.program.main hands over on that value)."
        )
    if settings.cluster.enabled:
        check_jobs_exist(source_dir, settings.pipelines)


def declare(settings: StackSettings, *, cluster_inputs: ClusterInputs) -> dict[str, pulumi.Input[object]]:
    """Declare the stack and return its outputs (see ``OUTPUT_NAMES``)."""
    from infra.aws.stack import AwsInputs, declare_aws

    return declare_aws(
        settings, AwsInputs(artifacts=cluster_inputs.artifacts, loadgen=cluster_inputs.loadgen)
    )


def main(
    *,
    prepare: Callable[[StackSettings], ClusterInputs] = build_cluster_inputs,
    project_dir: Path | None = None,
    source_dir: Path = PROJECT_DIR,
) -> None:
    """Run the program: read and validate the stack configuration, declare, export.

    Args:
        prepare: builds the stack's local inputs; tests pass a cheap stand-in.
        project_dir: where the stack files are; the repository root by default.
        source_dir: the checkout whose jobs are deployed; the repository root by default.
    """
    if pulumi.Config("lakestack").get("cloud") == "azure":
        from infra.azure.program import main as azure_main

        azure_main(project_dir=project_dir, source_dir=source_dir)
        return
    settings = settings_from_pulumi(project_dir=project_dir)
    check_buildable(settings, source_dir=source_dir)
    inputs = prepare(settings) if settings.cluster.enabled or settings.loadgen else ClusterInputs()
    tag_every_resource(settings.tags)
    for name, value in declare(settings, cluster_inputs=inputs).items():
        pulumi.export(name, value)
