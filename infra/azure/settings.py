"""Azure stack configuration, read once into a validated, frozen settings object.

The Azure stack shares the shape of the AWS one (``parallelism``, ``parallelismPerWorker``, ``cluster``,
``stream``, ``pipelines``, ``namePrefix``) with Azure's own values: a Synapse node size instead of an EC2
instance type, an Event Hub instead of a Kinesis stream. As on AWS, one parser is fed either from
``Pulumi.<stack>.yaml`` (``lakestack plan``, no Pulumi CLI) or from ``pulumi.Config`` inside the program, so
both refuse the same configurations with the same messages, before any resource is declared.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

from infra.config import (
    EXPIRES_AT_TAG,
    PROJECT,
    PROJECT_DIR,
    RESERVED_JOB_FLAGS,
    Pipeline,
    _bool,
    _int,
    _mapping,
    _parse_choice,
    _parse_expiry,
    _parse_job_flags,
    _parse_pipelines,
    project_values,
    stack_file_config,
    values_from_pulumi,
)
from infra.errors import ConfigError
from infra.pipelines import PIPELINE_JOBS

NodeSizeName = Literal["Small", "Medium", "Large", "XLarge", "XXLarge"]
SparkVersion = Literal["3.5"]
FilesystemRole = Literal["lake", "checkpoints", "artifacts", "logs", "workspace"]
DeployerType = Literal["User", "ServicePrincipal"]

DEFAULT_LOCATION = "eastus"
# Synapse keeps its own files (libraries, Spark event logs) in the workspace's default filesystem; the job's
# tables, checkpoints, artifacts and logs each get their own, so access can be granted per filesystem.
FILESYSTEMS: tuple[FilesystemRole, ...] = get_args(FilesystemRole)
NODE_SIZES: tuple[NodeSizeName, ...] = get_args(NodeSizeName)
SPARK_VERSIONS: tuple[SparkVersion, ...] = get_args(SparkVersion)
DEPLOYER_TYPES: tuple[DeployerType, ...] = get_args(DeployerType)
POOL_NAME = "lakestack"
# Synapse refuses a Spark pool of fewer than 3 nodes; one of them runs the driver.
MIN_POOL_NODES = 3
MAX_POOL_NODES = 200
# A job that does no Spark work (maintenance: delta-rs in the driver) gets its driver node and one executor.
BATCH_JOB_NODES = 2
# On top of the AWS program's own flags, the Event Hubs flags the Azure program sets on the ingest job.
AZURE_RESERVED_JOB_FLAGS = (
    *RESERVED_JOB_FLAGS,
    "--source",
    "--kafka-bootstrap",
    "--topic",
    "--kafka-key-vault",
    "--kafka-secret-name",
    "--kafka-secret-env",
)
# Auto-pause delay bounds accepted by Synapse (minutes).
MIN_IDLE_MINUTES, MAX_IDLE_MINUTES = 5, 7 * 24 * 60
# Event Hubs Standard: 1-32 partitions per hub (fixed when the hub is created), retention 1 hour to 7 days,
# 1-40 throughput units per namespace; one unit takes 1 MB/s or 1,000 events/s in, whichever comes first.
MAX_PARTITIONS = 32
MIN_RETENTION_HOURS, MAX_RETENTION_HOURS = 1, 7 * 24
MAX_THROUGHPUT_UNITS = 40
TU_EVENTS_PER_SECOND = 1000
TU_BYTES_PER_SECOND = 1_000_000
# Log Analytics (PerGB2018) keeps data 30 to 730 days.
MIN_LOG_RETENTION_DAYS, MAX_LOG_RETENTION_DAYS = 30, 730
# Azure's IP rules take public addresses only: private, loopback and link-local ranges are refused.
_NON_PUBLIC = tuple(
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.168.0.0/16",
    )
)
# The prefix starts the resource group, workspace and namespace names (`<prefix>-events`: at most 50).
MAX_PREFIX = 43
_PREFIX_RE = re.compile(r"^[a-z][a-z0-9-]*[a-z0-9]$")
_ACCOUNT_RE = re.compile(r"^[a-z0-9]{3,24}$")
_NAMESPACE_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]{4,48}[a-zA-Z0-9]$")
_HUB_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,255}$")
# Keys the Azure program reads; anything else under `lakestack:` is a typo worth reporting.
_KNOWN_KEYS = (
    "cloud",
    "parallelism",
    "parallelismPerWorker",
    "stream",
    "cluster",
    "pipelines",
    "namePrefix",
    "storageAccount",
    "network",
    "security",
    "deployerType",
    "ttlHours",
    "expiresAt",
    "jobFlags",
)
_STREAM_KEYS = (
    "name",
    "namespace",
    "partitions",
    "retentionHours",
    "expectedEventsPerSecond",
    "eventBytes",
    "maxThroughputUnits",
)
_CLUSTER_KEYS = ("enabled", "nodeSize", "sparkVersion", "idleTimeoutMinutes", "maxWorkers")
_SECURITY_KEYS = ("storageFirewall", "storageSharedKey", "diagnostics", "logRetentionDays")


@dataclass(frozen=True)
class NodeSize:
    """A Synapse Spark node size (memory-optimized family) and the executor Synapse fits on one node."""

    name: NodeSizeName
    vcores: int
    memory_gb: int
    # Synapse's executor preset for the size: the node's memory less what the OS and YARN keep.
    executor_memory_gb: int


NODE_SIZE_TABLE: dict[str, NodeSize] = {
    n.name: n
    for n in (
        NodeSize("Small", 4, 32, 28),
        NodeSize("Medium", 8, 64, 56),
        NodeSize("Large", 16, 128, 112),
        NodeSize("XLarge", 32, 256, 224),
        NodeSize("XXLarge", 64, 432, 400),
    )
}


@dataclass(frozen=True)
class PoolSizing:
    """The Spark pool shape derived from parallelism and the node size (the KPU rule, as on EMR).

    Every pipeline is its own Spark job on the pool, and Synapse gives each executor and each driver a node
    of its own (the node size's executor preset). So each streaming pipeline takes ``workers`` nodes, one
    executor each with ``executor_cores`` task slots, plus one node for its driver; a job without Spark work
    (maintenance) takes two. ``nodes`` is their sum, with Synapse's floor of 3.
    """

    workers: int
    nodes: int
    max_nodes: int
    max_workers: int
    executor_cores: int
    executor_memory_gb: int
    node_size: NodeSizeName
    vcores_per_node: int

    @property
    def task_slots(self) -> int:
        """Number of tasks the executors run at once."""
        return self.workers * self.executor_cores


def size_pool(
    *,
    parallelism: int,
    parallelism_per_worker: int,
    node: NodeSize,
    max_workers: int,
    streaming_jobs: int = 1,
    batch_jobs: int = 0,
) -> PoolSizing:
    """Size the Spark pool: ``workers = ceil(parallelism / parallelism_per_worker)`` per streaming job, plus
    one driver node each, plus :data:`BATCH_JOB_NODES` per batch job.

    Inputs are assumed validated: ``1 <= parallelism_per_worker <= node.vcores``, ``max_workers >= workers``.
    """
    workers = math.ceil(parallelism / parallelism_per_worker)
    fixed = batch_jobs * BATCH_JOB_NODES
    return PoolSizing(
        workers=workers,
        nodes=max(MIN_POOL_NODES, streaming_jobs * (workers + 1) + fixed),
        max_nodes=max(MIN_POOL_NODES, streaming_jobs * (max_workers + 1) + fixed),
        max_workers=max_workers,
        executor_cores=parallelism_per_worker,
        executor_memory_gb=node.executor_memory_gb,
        node_size=node.name,
        vcores_per_node=node.vcores,
    )


def job_counts(pipelines: tuple[Pipeline, ...]) -> tuple[int, int]:
    """(streaming jobs, batch jobs) the pipelines run on the pool."""
    streaming = sum(1 for p in pipelines if PIPELINE_JOBS[p].streaming)
    return streaming, len(pipelines) - streaming


def throughput_units(*, events_per_second: int, event_bytes: int) -> int:
    """Event Hubs throughput units for an expected rate: 1 per 1,000 events/s or 1 MB/s, at least 1."""
    by_events = math.ceil(events_per_second / TU_EVENTS_PER_SECOND)
    by_bytes = math.ceil(events_per_second * event_bytes / TU_BYTES_PER_SECOND)
    return max(1, by_events, by_bytes)


@dataclass(frozen=True)
class EventHubSettings:
    """The Event Hubs namespace (Standard tier, Kafka endpoint) and the one hub the pipeline reads."""

    name: str
    namespace: str
    partitions: int
    retention_hours: int
    expected_events_per_second: int
    event_bytes: int
    throughput_units: int
    max_throughput_units: int


@dataclass(frozen=True)
class PoolSettings:
    """The Synapse Spark pool. ``enabled=False`` declares no workspace, pool or job."""

    enabled: bool = True
    node_size: NodeSizeName = "Small"
    spark_version: SparkVersion = "3.5"
    idle_timeout_minutes: int = 15
    max_workers: int = 0


@dataclass(frozen=True)
class SecuritySettings:
    """Controls that are on by default; switching one off is reported by ``lakestack plan`` as a deviation."""

    storage_firewall: bool = True
    storage_shared_key: bool = False
    diagnostics: bool = True
    log_retention_days: int = 30

    def deviations(self) -> list[str]:
        """One line per control switched off, naming its config key (the AWS plan's form)."""
        found = []
        if not self.storage_firewall:
            found.append(
                "storage firewall off: the account accepts traffic from any network "
                "(lakestack:security.storageFirewall: false)"
            )
        if self.storage_shared_key:
            found.append(
                "storage shared-key access on: account keys and SAS work besides Entra ID "
                "(lakestack:security.storageSharedKey: true)"
            )
        if not self.diagnostics:
            found.append(
                "no diagnostic settings: storage, Event Hubs, Key Vault and Synapse logs are not collected "
                "(lakestack:security.diagnostics: false)"
            )
        return found


@dataclass(frozen=True)
class AzureStackSettings:
    """Everything the Azure program and ``lakestack plan`` need, validated."""

    stack: str
    location: str
    name_prefix: str
    parallelism: int
    parallelism_per_worker: int
    stream: EventHubSettings
    cluster: PoolSettings
    pipelines: tuple[Pipeline, ...]
    storage_account: str
    allowed_ip_ranges: tuple[str, ...]
    security: SecuritySettings
    # Who runs `pulumi up`: Azure checks a role assignment's principal type against the principal.
    deployer_type: DeployerType = "User"
    # Extra command-line flags per pipeline (lakestack:jobFlags), appended to what the program sets.
    job_flags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    expires_at: datetime = datetime(2000, 1, 1, tzinfo=UTC)
    cloud: Literal["azure"] = "azure"
    sizing: PoolSizing = field(init=False)

    def __post_init__(self) -> None:
        streaming, batch = job_counts(self.pipelines)
        sizing = size_pool(
            parallelism=self.parallelism,
            parallelism_per_worker=self.parallelism_per_worker,
            node=NODE_SIZE_TABLE[self.cluster.node_size],
            max_workers=self.cluster.max_workers,
            streaming_jobs=streaming,
            batch_jobs=batch,
        )
        object.__setattr__(self, "sizing", sizing)

    @property
    def tags(self) -> dict[str, str]:
        """Tags on every resource of the stack (the AWS stack's, expiry included)."""
        return {
            "lakestack:project": PROJECT,
            "lakestack:stack": self.stack,
            EXPIRES_AT_TAG: self.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }

    @property
    def resource_group(self) -> str:
        """Name of the stack's resource group."""
        return f"{self.name_prefix}-rg"

    @property
    def workspace_name(self) -> str:
        """Name of the Synapse workspace (global: ``<name>.dev.azuresynapse.net``)."""
        return self.name_prefix

    @property
    def log_workspace_name(self) -> str:
        """Name of the Log Analytics workspace the diagnostic settings send to."""
        return f"{self.name_prefix}-logs"

    @property
    def filesystems(self) -> dict[str, str]:
        """Filesystem (container) name per role."""
        return {role: role for role in FILESYSTEMS}

    def abfss(self, role: FilesystemRole, path: str = "") -> str:
        """``abfss://`` URI of a path in one of the stack's filesystems."""
        return f"abfss://{role}@{self.storage_account}.dfs.core.windows.net/{path}"

    @property
    def kafka_bootstrap(self) -> str:
        """The namespace's Kafka endpoint."""
        return f"{self.stream.namespace}.servicebus.windows.net:9093"


def parse_azure_settings(
    stack: str,
    config: Mapping[str, Any],
    *,
    location: str | None = None,
    where: str = "",
    now: datetime | None = None,
) -> AzureStackSettings:
    """Validate raw ``lakestack:*`` configuration of an Azure stack into :class:`AzureStackSettings`.

    Args:
        stack: stack name (``azure-dev``, ...).
        config: values keyed without the ``lakestack:`` prefix, as YAML or JSON would decode them.
        location: the ``azure-native:location`` value; ``eastus`` when unset.
        where: where the values came from, for error messages.
        now: the time ``lakestack:ttlHours`` counts from; the current time when ``None``.

    Raises:
        ConfigError: naming the key, the value found and what is allowed.
    """
    for key in config:
        if key not in _KNOWN_KEYS:
            raise ConfigError(
                f"lakestack:{key}",
                config[key],
                f"one of lakestack:{', lakestack:'.join(_KNOWN_KEYS)} (the keys of an Azure stack)",
                where=where,
            )
    cloud = config.get("cloud", "azure")
    if cloud != "azure":
        raise ConfigError("lakestack:cloud", cloud, "azure (this is the Azure settings parser)", where=where)
    prefix = _parse_azure_prefix(config.get("namePrefix", f"{PROJECT}-{stack}"), where=where)
    parallelism = _int(
        "lakestack:parallelism", config.get("parallelism", 4), minimum=1, maximum=None, where=where
    )
    pipelines = _parse_pipelines(config.get("pipelines", ["ingest"]), where=where)
    cluster, per_worker = _parse_pool(
        config.get("cluster"),
        config.get("parallelismPerWorker"),
        parallelism=parallelism,
        jobs=job_counts(pipelines),
        where=where,
    )
    return AzureStackSettings(
        stack=stack,
        location=_parse_location(location, where=where),
        name_prefix=prefix,
        parallelism=parallelism,
        parallelism_per_worker=per_worker,
        stream=_parse_event_hub(config.get("stream"), prefix=prefix, parallelism=parallelism, where=where),
        cluster=cluster,
        pipelines=pipelines,
        storage_account=_parse_account(config.get("storageAccount"), prefix=prefix, where=where),
        allowed_ip_ranges=_parse_network(config.get("network"), where=where),
        security=_parse_security(config.get("security"), where=where),
        deployer_type=_parse_choice(
            "lakestack:deployerType", config.get("deployerType", "User"), DEPLOYER_TYPES, where=where
        ),
        expires_at=_parse_expiry(config.get("ttlHours"), config.get("expiresAt"), now=now, where=where),
        job_flags=_parse_job_flags(
            config.get("jobFlags"), pipelines=pipelines, where=where, reserved=AZURE_RESERVED_JOB_FLAGS
        ),
    )


def _parse_azure_prefix(prefix: Any, *, where: str) -> str:
    if not isinstance(prefix, str) or not _PREFIX_RE.match(prefix) or len(prefix) > MAX_PREFIX:
        raise ConfigError(
            "lakestack:namePrefix",
            prefix,
            f"lowercase letters, digits and hyphens, starting with a letter, 3 to {MAX_PREFIX} characters "
            "(it starts the resource group, Synapse workspace and Event Hubs namespace names)",
            where=where,
        )
    return prefix


def _parse_location(location: Any, *, where: str) -> str:
    value = DEFAULT_LOCATION if location is None else location
    if not isinstance(value, str) or not re.match(r"^[a-z][a-z0-9]+$", value):
        raise ConfigError(
            "azure-native:location",
            value,
            "an Azure region name in lowercase without spaces, such as eastus or westeurope",
            where=where,
        )
    return value


def _parse_account(value: Any, *, prefix: str, where: str) -> str:
    name = prefix.replace("-", "")[:24] if value is None else value
    if not isinstance(name, str) or not _ACCOUNT_RE.match(name):
        raise ConfigError(
            "lakestack:storageAccount",
            name,
            "3 to 24 lowercase letters and digits (storage account names are global: pick one only you use)",
            where=where,
        )
    return name


def _parse_pool(
    value: Any, per_worker_value: Any, *, parallelism: int, jobs: tuple[int, int], where: str
) -> tuple[PoolSettings, int]:
    """``lakestack:cluster`` and ``lakestack:parallelismPerWorker`` (bounded by the node size's vCores, and
    by the pool's node limit shared by ``jobs``: (streaming, batch) jobs)."""
    raw = _mapping("lakestack:cluster", value, where=where, fields=_CLUSTER_KEYS)
    node_size = _parse_choice(
        "lakestack:cluster.nodeSize", raw.get("nodeSize", "Small"), NODE_SIZES, where=where
    )
    node = NODE_SIZE_TABLE[node_size]
    per_worker = _int(
        "lakestack:parallelismPerWorker",
        node.vcores if per_worker_value is None else per_worker_value,
        minimum=1,
        maximum=node.vcores,
        where=where,
        allowed=f"an integer from 1 to {node.vcores} (the vCores of a {node_size} node)",
    )
    workers = math.ceil(parallelism / per_worker)
    # Each streaming job's driver takes a node, batch jobs take theirs: each job's workers share the rest.
    streaming, batch = jobs
    most = (MAX_POOL_NODES - batch * BATCH_JOB_NODES) // max(streaming, 1) - 1
    if workers > most:
        raise ConfigError(
            "lakestack:parallelism",
            parallelism,
            f"at most {most * per_worker} at {per_worker} per worker with {streaming} streaming pipeline(s) "
            f"(a Synapse pool has at most {MAX_POOL_NODES} nodes, and each pipeline runs its own executors "
            "and driver); raise lakestack:parallelismPerWorker, pick a larger node size or deploy fewer "
            "pipelines",
            where=where,
        )
    cluster = PoolSettings(
        enabled=_bool("lakestack:cluster.enabled", raw.get("enabled", True), where=where),
        node_size=node_size,
        spark_version=_parse_choice(
            "lakestack:cluster.sparkVersion", str(raw.get("sparkVersion", "3.5")), SPARK_VERSIONS, where=where
        ),
        idle_timeout_minutes=_int(
            "lakestack:cluster.idleTimeoutMinutes",
            raw.get("idleTimeoutMinutes", 15),
            minimum=MIN_IDLE_MINUTES,
            maximum=MAX_IDLE_MINUTES,
            where=where,
        ),
        max_workers=_int(
            "lakestack:cluster.maxWorkers",
            raw.get("maxWorkers", workers),
            minimum=workers,
            maximum=most,
            where=where,
            allowed=f"an integer from {workers} (the workers parallelism {parallelism} needs at {per_worker} "
            f"per worker) to {most}",
        ),
    )
    return cluster, per_worker


def _parse_event_hub(value: Any, *, prefix: str, parallelism: int, where: str) -> EventHubSettings:
    """``lakestack:stream`` of an Azure stack: the hub, its partitions and the namespace's throughput units."""
    raw = _mapping("lakestack:stream", value, where=where, fields=_STREAM_KEYS)
    if "partitions" in raw:
        partitions = _int(
            "lakestack:stream.partitions", raw["partitions"], minimum=1, maximum=MAX_PARTITIONS, where=where
        )
    elif parallelism > MAX_PARTITIONS:
        raise ConfigError(
            "lakestack:parallelism",
            parallelism,
            f"at most {MAX_PARTITIONS} when lakestack:stream.partitions is unset (one Event Hubs partition per "
            f"task slot, and a Standard hub has at most {MAX_PARTITIONS}); set lakestack:stream.partitions",
            where=where,
        )
    else:
        partitions = parallelism
    rate = _int(
        "lakestack:stream.expectedEventsPerSecond",
        raw.get("expectedEventsPerSecond", 1000),
        minimum=1,
        maximum=None,
        where=where,
    )
    event_bytes = _int(
        # Generated events are a few hundred bytes of JSON.
        "lakestack:stream.eventBytes",
        raw.get("eventBytes", 512),
        minimum=1,
        maximum=1_048_576,
        where=where,
    )
    units = throughput_units(events_per_second=rate, event_bytes=event_bytes)
    if units > MAX_THROUGHPUT_UNITS:
        raise ConfigError(
            "lakestack:stream.expectedEventsPerSecond",
            rate,
            f"a rate that fits {MAX_THROUGHPUT_UNITS} throughput units (Event Hubs Standard's maximum; "
            f"{rate} events/s of {event_bytes} bytes needs {units})",
            where=where,
        )
    default_max = min(MAX_THROUGHPUT_UNITS, 2 * units)
    max_units = _int(
        "lakestack:stream.maxThroughputUnits",
        raw.get("maxThroughputUnits", default_max),
        minimum=units,
        maximum=MAX_THROUGHPUT_UNITS,
        where=where,
        allowed=f"an integer from {units} (the units the expected rate needs) to {MAX_THROUGHPUT_UNITS}",
    )
    namespace = raw.get("namespace", f"{prefix}-events")
    if not isinstance(namespace, str) or not _NAMESPACE_RE.match(namespace):
        raise ConfigError(
            "lakestack:stream.namespace",
            namespace,
            "6 to 50 letters, digits and hyphens, starting with a letter and ending with a letter or digit "
            "(namespace names are global)",
            where=where,
        )
    name = raw.get("name", "events")
    if not isinstance(name, str) or not _HUB_RE.match(name):
        raise ConfigError(
            "lakestack:stream.name", name, "1-256 letters, digits, '.', '_' or '-'", where=where
        )
    return EventHubSettings(
        name=name,
        namespace=namespace,
        partitions=partitions,
        retention_hours=_int(
            "lakestack:stream.retentionHours",
            raw.get("retentionHours", 24),
            minimum=MIN_RETENTION_HOURS,
            maximum=MAX_RETENTION_HOURS,
            where=where,
        ),
        expected_events_per_second=rate,
        event_bytes=event_bytes,
        throughput_units=units,
        max_throughput_units=max_units,
    )


# Azure Storage's IP rules take single addresses or ranges up to /30; a /32 is written as its address.
_REFUSED_BY_STORAGE = 31


def _parse_network(value: Any, *, where: str) -> tuple[str, ...]:
    """``lakestack:network.allowedIpRanges``: public IPv4 addresses or CIDR ranges, normalised."""
    raw = _mapping("lakestack:network", value, where=where, fields=("allowedIpRanges",))
    ranges = raw.get("allowedIpRanges", [])
    if not isinstance(ranges, list | tuple):
        raise ConfigError(
            "lakestack:network.allowedIpRanges",
            ranges,
            "a list of IPv4 addresses or CIDR ranges",
            where=where,
        )
    normalised = []
    for entry in ranges:
        try:
            network = ipaddress.ip_network(str(entry), strict=True)
        except ValueError:
            network = None
        if (
            not isinstance(network, ipaddress.IPv4Network)
            or network.prefixlen < 8
            or any(network.subnet_of(refused) for refused in _NON_PUBLIC)
        ):
            raise ConfigError(
                "lakestack:network.allowedIpRanges",
                entry,
                "public IPv4 addresses or CIDR ranges of /8 or narrower, such as 198.51.100.7 or "
                "198.51.100.0/28 (the addresses you run pulumi up and lakestack load from)",
                where=where,
            )
        if network.prefixlen == _REFUSED_BY_STORAGE:
            first, last = network.network_address, network.broadcast_address
            raise ConfigError(
                "lakestack:network.allowedIpRanges",
                entry,
                f"single addresses instead of a /31, which Azure Storage's firewall refuses: list {first} and "
                f"{last}",
                where=where,
            )
        normalised.append(str(network.network_address) if network.prefixlen == 32 else str(network))
    return tuple(normalised)


def _parse_security(value: Any, *, where: str) -> SecuritySettings:
    raw = _mapping("lakestack:security", value, where=where, fields=_SECURITY_KEYS)
    return SecuritySettings(
        storage_firewall=_bool(
            "lakestack:security.storageFirewall", raw.get("storageFirewall", True), where=where
        ),
        storage_shared_key=_bool(
            "lakestack:security.storageSharedKey", raw.get("storageSharedKey", False), where=where
        ),
        diagnostics=_bool("lakestack:security.diagnostics", raw.get("diagnostics", True), where=where),
        log_retention_days=_int(
            "lakestack:security.logRetentionDays",
            raw.get("logRetentionDays", 30),
            minimum=MIN_LOG_RETENTION_DAYS,
            maximum=MAX_LOG_RETENTION_DAYS,
            where=where,
        ),
    )


def load_azure_settings(stack: str, *, project_dir: Path | None = None) -> AzureStackSettings:
    """Read and validate an Azure stack's ``Pulumi.<stack>.yaml`` without the Pulumi CLI.

    Raises:
        ConfigError: a value is invalid.
    """
    path = (project_dir or PROJECT_DIR) / f"Pulumi.{stack}.yaml"
    raw = stack_file_config(path)
    return parse_azure_settings(
        stack, project_values(raw), location=raw.get("azure-native:location"), where=path.name
    )


def azure_settings_from_pulumi(*, project_dir: Path | None = None) -> AzureStackSettings:
    """Build the settings inside a running Pulumi program from ``pulumi.Config`` (see ``infra.config``)."""
    import pulumi

    stack, values = values_from_pulumi(_KNOWN_KEYS, project_dir=project_dir)
    return parse_azure_settings(
        stack,
        values,
        location=pulumi.Config("azure-native").get("location"),
        where="stack configuration",
    )
