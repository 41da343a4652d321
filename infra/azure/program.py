"""The lakestack Pulumi program on Azure: settings in, components declared, outputs exported.

``infra.program.main`` hands over here when ``lakestack:cloud`` is ``azure``. Nothing here declares resources
at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pulumi
from pulumi_azure_native import authorization, resources

from infra.azure.access import Access, AccessArgs, Grant
from infra.azure.deploy import (
    JobDeployment,
    JobDeploymentArgs,
    SynapseArtifacts,
    build_synapse_artifacts,
)
from infra.azure.eventhubs import EventHubs, EventHubsArgs
from infra.azure.keyvault import SecretStore, SecretStoreArgs
from infra.azure.monitoring import DiagnosticTarget, Monitoring, MonitoringArgs
from infra.azure.pool_packages import SYNAPSE_LOCK_FILE, pool_requirements
from infra.azure.private_link import ManagedPrivateEndpoints
from infra.azure.settings import (
    FILESYSTEMS,
    POOL_NAME,
    AzureStackSettings,
    azure_settings_from_pulumi,
)
from infra.azure.storage import LakeStorage, LakeStorageArgs
from infra.azure.synapse import SparkWorkspace, SparkWorkspaceArgs
from infra.config import BRONZE_TABLE, EXPIRES_AT_TAG, PROJECT_DIR, Pipeline
from infra.errors import NotBuiltError
from infra.pipelines import (
    PIPELINE_JOBS,
    check_jobs_exist,
    delta_pipeline_args,
    pipeline_checkpoint,
    pipeline_lake,
)
from infra.tags import tag_every_resource

# Key Vault secrets: the jobs' listen connection string (only the identity the jobs run as may read it) and the
# load generator's send connection string (only the identity that deployed the stack may read it).
LISTEN_SECRET = "eventhubs-listen"
SEND_SECRET = "eventhubs-send"
OUTPUT_NAMES = (
    "expires_at",
    "region",
    "resource_group",
    "stream_name",
    "eventhubs_namespace",
    "kafka_bootstrap",
    "storage_account",
    "lake_uri",
    "checkpoint_uri",
    "table_uri",
    "key_vault_name",
    "listen_secret_name",
    "send_secret_name",
    "workspace_name",
    "workspace_dev_endpoint",
    "cluster_id",
    "log_workspace_id",
    "pipelines",
    "batch_ids",
)


@dataclass(frozen=True)
class PoolInputs:
    """Local inputs of the Spark side: the job artifacts and the pool's requirements file."""

    artifacts: SynapseArtifacts
    requirements: str


def build_pool_inputs(settings: AzureStackSettings) -> PoolInputs:
    """Build (or reuse from ``.lakestack/``) the wheel and launcher, and read the pool's requirements."""
    requirements = pool_requirements(PROJECT_DIR / SYNAPSE_LOCK_FILE)
    artifacts = build_synapse_artifacts(
        PROJECT_DIR, PROJECT_DIR / ".lakestack" / "synapse", requirements=requirements
    )
    return PoolInputs(artifacts=artifacts, requirements=requirements)


def check_buildable(settings: AzureStackSettings, *, source_dir: Path = PROJECT_DIR) -> None:
    """Refuse, before any resource is declared, what this version cannot build or deploy.

    Args:
        settings: validated settings.
        source_dir: the checkout whose ``jobs/`` is packed for the pool.
    """
    if not settings.cluster.enabled:
        return
    check_jobs_exist(source_dir, settings.pipelines)
    if not settings.allowed_ip_ranges:
        raise NotBuiltError(
            "lakestack:network.allowedIpRanges is empty: storage, Key Vault, Event Hubs and the Synapse "
            "workspace deny every network not listed, and `pulumi up` uploads the job and starts it from this "
            "machine. Add this machine's public address (e.g. the output of `curl -s https://ifconfig.me`), "
            "or set lakestack:cluster.enabled to false to declare the stack without the Spark pool."
        )


def _roots(settings: AzureStackSettings) -> tuple[str, str]:
    """The lake's and the checkpoints' root URIs (``abfss://<filesystem>@<account>.dfs.core.windows.net``)."""
    return settings.abfss("lake").rstrip("/"), settings.abfss("checkpoints").rstrip("/")


def ingest_checkpoint(settings: AzureStackSettings) -> str:
    """The ingest job's checkpoint: per hub, so a new hub (a new partition count) starts from one of its own."""
    return settings.abfss("checkpoints", f"ingest/{settings.stream.name}")


def job_args(
    pipeline: Pipeline, settings: AzureStackSettings, *, vault_name: pulumi.Input[str]
) -> list[pulumi.Input[str]]:
    """What one pipeline's Spark job runs on Synapse: ``<job> [flags]`` (what follows ``python -m jobs``).

    Ingest reads the hub (contract C8); every other pipeline reads the lake with the jobs' shared command line
    (contract C3), its tables and checkpoint named as on AWS (``infra.pipelines``), under ``abfss://``.
    ``lakestack:jobFlags`` come last.
    """
    extra = settings.job_flags.get(pipeline, ())
    if pipeline == "ingest":
        return [
            PIPELINE_JOBS["ingest"].job,
            "--source",
            "kafka",
            "--kafka-bootstrap",
            settings.kafka_bootstrap,
            "--topic",
            settings.stream.name,
            "--table",
            settings.abfss("lake", BRONZE_TABLE),
            "--checkpoint",
            ingest_checkpoint(settings),
            "--kafka-key-vault",
            vault_name,
            "--kafka-secret-name",
            LISTEN_SECRET,
            *extra,
        ]
    lake, checkpoints = _roots(settings)
    return list(
        delta_pipeline_args(
            pipeline, lake_root=lake, checkpoint_root=checkpoints, pipelines=settings.pipelines, extra=extra
        )
    )


def pipeline_outputs(settings: AzureStackSettings) -> dict[str, dict[str, str | None]]:
    """Per pipeline: its lake and checkpoint URIs (the AWS stack's ``pipelines`` output)."""
    lake, checkpoints = _roots(settings)
    return {
        p: {
            "lake": pipeline_lake(lake, p),
            "checkpoint": ingest_checkpoint(settings)
            if p == "ingest"
            else pipeline_checkpoint(checkpoints, p),
        }
        for p in settings.pipelines
    }


@dataclass(frozen=True)
class _Core:
    """What every Azure stack declares, whether or not it has a Spark pool."""

    group: resources.ResourceGroup
    storage: LakeStorage
    hubs: EventHubs
    secrets: SecretStore
    subscription_id: pulumi.Output[str]
    deployer_id: pulumi.Output[str]


def _declare_core(settings: AzureStackSettings) -> _Core:
    client = authorization.get_client_config_output()
    group = resources.ResourceGroup(
        "group", resource_group_name=settings.resource_group, location=settings.location
    )
    # The workspace's id is known before it exists; the storage firewall's resource instance rule needs it,
    # and the workspace in turn needs the account: naming it breaks the cycle.
    workspace_id = pulumi.Output.concat(
        "/subscriptions/",
        client.subscription_id,
        "/resourceGroups/",
        group.name,
        "/providers/Microsoft.Synapse/workspaces/",
        settings.workspace_name,
    )
    storage = LakeStorage(
        "storage",
        LakeStorageArgs(
            resource_group=group.name,
            location=settings.location,
            account_name=settings.storage_account,
            filesystems=FILESYSTEMS,
            tenant_id=client.tenant_id,
            trusted_resource_ids=[workspace_id] if settings.cluster.enabled else [],
            allowed_ip_ranges=settings.allowed_ip_ranges,
            firewall=settings.security.storage_firewall,
            shared_key_access=settings.security.storage_shared_key,
        ),
    )
    hubs = EventHubs(
        "events",
        EventHubsArgs(
            resource_group=group.name,
            location=settings.location,
            settings=settings.stream,
            allowed_ip_ranges=settings.allowed_ip_ranges,
        ),
    )
    secrets = SecretStore(
        "secrets",
        SecretStoreArgs(
            resource_group=group.name,
            location=settings.location,
            tenant_id=client.tenant_id,
            secrets={
                LISTEN_SECRET: hubs.connection_string("listen", group.name),
                SEND_SECRET: hubs.connection_string("send", group.name),
            },
            allowed_ip_ranges=settings.allowed_ip_ranges,
        ),
    )
    return _Core(group, storage, hubs, secrets, client.subscription_id, client.object_id)


def _declare_spark(
    settings: AzureStackSettings, core: _Core, inputs: PoolInputs
) -> tuple[SparkWorkspace, JobDeployment]:
    storage, hubs, secrets = core.storage, core.hubs, core.secrets
    spark = SparkWorkspace(
        "spark",
        SparkWorkspaceArgs(
            resource_group=core.group.name,
            location=settings.location,
            workspace_name=settings.workspace_name,
            pool_name=POOL_NAME,
            storage_account_name=settings.storage_account,
            storage_account_id=storage.account_id,
            default_filesystem="workspace",
            sizing=settings.sizing,
            spark_version=settings.cluster.spark_version,
            idle_timeout_minutes=settings.cluster.idle_timeout_minutes,
            library_requirements=inputs.requirements,
            allowed_ip_ranges=settings.allowed_ip_ranges,
            # The stack's tags (also added by the stack transformation): the library fingerprint covers them.
            tags=settings.tags,
        ),
    )
    endpoints = ManagedPrivateEndpoints(
        "private-endpoints",
        workspace_name=spark.workspace_name,
        workspace_endpoint=spark.dev_endpoint,
        targets=[
            {"name": "lakestack-blob", "resource_id": storage.account_id, "group_id": "blob"},
            {"name": "lakestack-dfs", "resource_id": storage.account_id, "group_id": "dfs"},
            {"name": "lakestack-vault", "resource_id": secrets.vault_id, "group_id": "vault"},
            {"name": "lakestack-eventhubs", "resource_id": hubs.namespace_id, "group_id": "namespace"},
        ],
        # The data-plane calls come from this machine: the workspace firewall must let it in first.
        opts=pulumi.ResourceOptions(depends_on=spark.firewall_rules),
    )
    fs = storage.filesystem_ids
    ws = spark.principal_id
    # Who the jobs run as. Synapse runs a Spark job definition submitted through its API as the identity that
    # submits it: getSecret (the listen secret) and getToken (the lake and checkpoints) inside the job act as
    # that identity, never as the workspace's. The job deployment submits with the deployer's credential, so
    # the job grants go to the deployer, and the job resource records (and checks) that identity.
    job_identity, job_identity_type = core.deployer_id, settings.deployer_type
    grants = [
        *(
            Grant(f"jobs-{role}", "Storage Blob Data Contributor", job_identity, fs[role], job_identity_type)
            for role in ("lake", "checkpoints", "logs")
        ),
        Grant(
            "jobs-listen-secret",
            "Key Vault Secrets User",
            job_identity,
            secrets.secret_ids[LISTEN_SECRET],
            job_identity_type,
        ),
        # No Event Hubs data role: the jobs read the hub with the listen rule's connection string (SASL PLAIN), which
        # Event Hubs authorizes by its SAS rule; an Azure RBAC role is only consulted for Entra ID (OAuth) clients.
        # The deployer uploads the artifacts (and, as the jobs' identity, the pool reads them as it).
        Grant(
            "deployer-artifacts",
            "Storage Blob Data Contributor",
            core.deployer_id,
            fs["artifacts"],
            settings.deployer_type,
        ),
        # What Synapse itself does as the workspace: its default filesystem (libraries, Spark logs), and the
        # artifacts it stages for a batch.
        Grant(
            "workspace-workspace", "Storage Blob Data Contributor", ws, fs["workspace"], "ServicePrincipal"
        ),
        Grant("workspace-artifacts", "Storage Blob Data Reader", ws, fs["artifacts"], "ServicePrincipal"),
    ]
    access = Access("spark-access", AccessArgs(subscription_id=core.subscription_id, grants=grants))
    libraries = spark.install_libraries(after=[access.assignments["workspace-workspace"], endpoints])
    jobs = JobDeployment(
        "jobs",
        JobDeploymentArgs(
            artifacts=inputs.artifacts,
            account_name=storage.account_name,
            artifact_container="artifacts",
            workspace_endpoint=spark.dev_endpoint,
            pool_name=POOL_NAME,
            spark_version=settings.cluster.spark_version,
            sizing=settings.sizing,
            parallelism=settings.parallelism,
            job_args={p: job_args(p, settings, vault_name=secrets.vault_name) for p in settings.pipelines},
            batch_pipelines=frozenset(p for p in settings.pipelines if not PIPELINE_JOBS[p].streaming),
            run_as_principal_id=job_identity,
            depends_on=[access, endpoints, libraries, *spark.firewall_rules],
        ),
    )
    return spark, jobs


def declare(
    settings: AzureStackSettings, *, inputs: PoolInputs | None, source_dir: Path = PROJECT_DIR
) -> dict[str, pulumi.Input[object]]:
    """Declare the Azure stack and return its outputs (see ``OUTPUT_NAMES``).

    Args:
        settings: validated Azure settings.
        inputs: artifacts and pool requirements; required when the settings enable the Spark pool.
        source_dir: the checkout whose jobs are deployed.
    """
    check_buildable(settings, source_dir=source_dir)
    core = _declare_core(settings)
    spark: SparkWorkspace | None = None
    jobs: JobDeployment | None = None
    if settings.cluster.enabled:
        if inputs is None:
            raise NotBuiltError("the Spark pool is enabled but no job artifacts were built (internal error)")
        spark, jobs = _declare_spark(settings, core, inputs)
    Access(
        "deployer-access",
        AccessArgs(
            subscription_id=core.subscription_id,
            grants=[
                Grant(
                    "deployer-send-secret",
                    "Key Vault Secrets User",
                    core.deployer_id,
                    core.secrets.secret_ids[SEND_SECRET],
                    settings.deployer_type,
                )
            ],
        ),
    )
    monitoring = _declare_monitoring(settings, core, spark)
    return {
        "expires_at": settings.tags[EXPIRES_AT_TAG],
        "region": settings.location,
        "resource_group": core.group.name,
        "stream_name": core.hubs.hub_name,
        "eventhubs_namespace": core.hubs.namespace_name,
        "kafka_bootstrap": pulumi.Output.concat(core.hubs.namespace_name, ".servicebus.windows.net:9093"),
        "storage_account": core.storage.account_name,
        "lake_uri": settings.abfss("lake"),
        "checkpoint_uri": settings.abfss("checkpoints"),
        "table_uri": settings.abfss("lake", BRONZE_TABLE),
        "key_vault_name": core.secrets.vault_name,
        "listen_secret_name": LISTEN_SECRET,
        "send_secret_name": SEND_SECRET,
        "workspace_name": spark.workspace_name if spark else None,
        "workspace_dev_endpoint": spark.dev_endpoint if spark else None,
        "cluster_id": spark.pool_id if spark else None,
        "log_workspace_id": monitoring.workspace_id if monitoring else None,
        "pipelines": pipeline_outputs(settings),
        "batch_ids": jobs.batch_ids if jobs else None,
    }


def _declare_monitoring(
    settings: AzureStackSettings, core: _Core, spark: SparkWorkspace | None
) -> Monitoring | None:
    if not settings.security.diagnostics:
        return None
    targets = [
        DiagnosticTarget(
            "storage-blob",
            pulumi.Output.concat(core.storage.account_id, "/blobServices/default"),
            ["Transaction"],
        ),
        DiagnosticTarget("eventhubs", core.hubs.namespace_id, ["AllMetrics"]),
        DiagnosticTarget("keyvault", core.secrets.vault_id, ["AllMetrics"]),
    ]
    if spark is not None:
        targets += [
            DiagnosticTarget("synapse", spark.workspace_id),
            DiagnosticTarget("spark-pool", spark.pool_id),
        ]
    return Monitoring(
        "monitoring",
        MonitoringArgs(
            resource_group=core.group.name,
            location=settings.location,
            workspace_name=settings.log_workspace_name,
            retention_days=settings.security.log_retention_days,
            targets=targets,
        ),
    )


def main(
    *,
    prepare: Callable[[AzureStackSettings], PoolInputs] | None = None,
    project_dir: Path | None = None,
    source_dir: Path = PROJECT_DIR,
) -> None:
    """Run the Azure program: read and validate the stack configuration, declare, export.

    Args:
        prepare: builds the Spark side's local inputs (:func:`build_pool_inputs` when ``None``).
        project_dir: where the stack files are; the repository root by default.
        source_dir: the checkout whose jobs are deployed; the repository root by default.
    """
    settings = azure_settings_from_pulumi(project_dir=project_dir)
    check_buildable(settings, source_dir=source_dir)
    build = prepare or build_pool_inputs
    inputs = build(settings) if settings.cluster.enabled else None
    # The stack's tags (expiry included) on every Azure resource that takes tags, as on AWS.
    tag_every_resource(settings.tags)
    for name, value in declare(settings, inputs=inputs, source_dir=source_dir).items():
        pulumi.export(name, value)
