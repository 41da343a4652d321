"""Stack configuration, read once into a validated, frozen settings object.

One parser (:func:`parse_settings`) is fed either from ``Pulumi.<stack>.yaml`` (:func:`load_stack_settings`,
no Pulumi CLI needed: ``lakestack plan`` and ``lakestack local up`` use it) or from ``pulumi.Config`` inside
the program (:func:`settings_from_pulumi`), so both refuse the same configurations with the same messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from infra.errors import ConfigError
from infra.sizing import INSTANCE_TYPES, Sizing, size_cluster

Cloud = Literal["aws", "azure"]
StreamMode = Literal["on-demand", "provisioned"]

PROJECT = "lakestack"
PROJECT_DIR = Path(__file__).resolve().parent.parent
# Where the ingest job's bronze table lives inside the lake bucket, on every stack and on the emulator.
BRONZE_TABLE = "bronze/events"
CLOUDS: tuple[str, ...] = ("aws", "azure")
PIPELINES: tuple[str, ...] = ("ingest", "sales", "fraud", "orders", "maintenance")
BUCKET_ROLES: tuple[str, ...] = ("lake", "checkpoints", "artifacts", "logs")
DEFAULT_RELEASE_LABEL = "emr-spark-8.0.0"
# Kinesis keeps data 24 hours at least and 365 days at most.
MIN_RETENTION_HOURS, MAX_RETENTION_HOURS = 24, 8760
# EMR's auto-termination idle timeout ranges from 1 minute to 7 days.
MAX_IDLE_MINUTES = 7 * 24 * 60
_LONGEST_ROLE = max(len(r) for r in BUCKET_ROLES) + 1
_PREFIX_RE = re.compile(r"^[a-z0-9][a-z0-9-]*[a-z0-9]$")
_RELEASE_RE = re.compile(r"^emr-[a-z0-9.-]+$")
# Keys the program reads; anything else under `lakestack:` is a typo worth reporting.
_KNOWN_KEYS = (
    "cloud",
    "parallelism",
    "parallelismPerWorker",
    "stream",
    "cluster",
    "pipelines",
    "namePrefix",
    "buckets",
)


@dataclass(frozen=True)
class StreamSettings:
    """The Kinesis stream (or Event Hub on Azure)."""

    name: str
    mode: StreamMode = "on-demand"
    shards: int | None = None
    retention_hours: int = 24


@dataclass(frozen=True)
class ClusterSettings:
    """The Spark cluster. ``enabled=False`` (the local stack) declares no cluster: jobs run on the user's machine."""

    enabled: bool = True
    instance_type: str = "m5.xlarge"
    release_label: str = DEFAULT_RELEASE_LABEL
    idle_timeout_minutes: int = 60
    max_workers: int = 0


@dataclass(frozen=True)
class StackSettings:
    """Everything the program and ``lakestack plan`` need, validated."""

    stack: str
    cloud: Cloud
    region: str
    name_prefix: str
    parallelism: int
    parallelism_per_worker: int
    stream: StreamSettings
    cluster: ClusterSettings
    pipelines: tuple[str, ...]
    bucket_names: Mapping[str, str]
    endpoint_url: str | None = None
    sizing: Sizing = field(init=False)

    def __post_init__(self) -> None:
        sizing = size_cluster(
            parallelism=self.parallelism,
            parallelism_per_worker=self.parallelism_per_worker,
            instance=INSTANCE_TYPES[self.cluster.instance_type],
        )
        object.__setattr__(self, "sizing", sizing)

    @property
    def stream_name(self) -> str:
        """Name of the stream."""
        return self.stream.name

    @property
    def is_local(self) -> bool:
        """True when the provider endpoints point at the embedded emulator."""
        return self.endpoint_url is not None


def _int(key: str, value: Any, *, minimum: int, maximum: int | None, where: str, allowed: str = "") -> int:
    bound = f"an integer from {minimum} to {maximum}" if maximum is not None else f"an integer >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigError(key, value, allowed or bound, where=where)
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(key, value, allowed or bound, where=where) from None
    if number < minimum or (maximum is not None and number > maximum):
        raise ConfigError(key, value, allowed or bound, where=where)
    return number


def _bool(key: str, value: Any, *, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(key, value, "true or false", where=where)


def _mapping(key: str, value: Any, *, where: str, fields: tuple[str, ...]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, f"a mapping with keys {', '.join(fields)}", where=where)
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ConfigError(
            f"{key}.{unknown[0]}", value[unknown[0]], f"one of the keys {', '.join(fields)}", where=where
        )
    return value


def parse_settings(
    stack: str,
    config: Mapping[str, Any],
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
    where: str = "",
) -> StackSettings:
    """Validate raw ``lakestack:*`` configuration into :class:`StackSettings`.

    Args:
        stack: stack name (``dev``, ``local``, ...).
        config: values keyed without the ``lakestack:`` prefix, as YAML or JSON would decode them.
        region: the ``aws:region`` value; ``us-east-1`` when unset.
        endpoint_url: the emulator endpoint when the provider is aimed at one (the local stack).
        where: where the values came from, for error messages.

    Raises:
        ConfigError: naming the key, the value found and what is allowed.
    """
    for key in config:
        if key not in _KNOWN_KEYS:
            raise ConfigError(
                f"lakestack:{key}",
                config[key],
                f"one of lakestack:{', lakestack:'.join(_KNOWN_KEYS)}",
                where=where,
            )

    cloud = config.get("cloud", "aws")
    if cloud not in CLOUDS:
        raise ConfigError("lakestack:cloud", cloud, f"one of {', '.join(CLOUDS)}", where=where)

    prefix = config.get("namePrefix", f"{PROJECT}-{stack}")
    max_prefix = 63 - _LONGEST_ROLE
    if not isinstance(prefix, str) or not _PREFIX_RE.match(prefix) or len(prefix) > max_prefix:
        raise ConfigError(
            "lakestack:namePrefix",
            prefix,
            f"lowercase letters, digits and hyphens, 3 to {max_prefix} characters "
            "(it starts every bucket name, and S3 bucket names are at most 63)",
            where=where,
        )

    parallelism = _int(
        "lakestack:parallelism", config.get("parallelism", 4), minimum=1, maximum=None, where=where
    )

    cluster_raw = _mapping(
        "lakestack:cluster",
        config.get("cluster"),
        where=where,
        fields=("enabled", "instanceType", "releaseLabel", "idleTimeoutMinutes", "maxWorkers"),
    )
    instance_type = cluster_raw.get("instanceType", "m5.xlarge")
    if instance_type not in INSTANCE_TYPES:
        raise ConfigError(
            "lakestack:cluster.instanceType",
            instance_type,
            f"one of {', '.join(INSTANCE_TYPES)} (the types the sizing and price tables know)",
            where=where,
        )
    instance = INSTANCE_TYPES[instance_type]
    per_worker = _int(
        "lakestack:parallelismPerWorker",
        config.get("parallelismPerWorker", instance.vcpus),
        minimum=1,
        maximum=instance.vcpus,
        where=where,
        allowed=f"an integer from 1 to {instance.vcpus} (the vCPUs of {instance_type})",
    )
    workers = size_cluster(
        parallelism=parallelism, parallelism_per_worker=per_worker, instance=instance
    ).workers
    release = cluster_raw.get("releaseLabel", DEFAULT_RELEASE_LABEL)
    if not isinstance(release, str) or not _RELEASE_RE.match(release):
        raise ConfigError(
            "lakestack:cluster.releaseLabel",
            release,
            f"an EMR release label such as {DEFAULT_RELEASE_LABEL}",
            where=where,
        )
    cluster = ClusterSettings(
        enabled=_bool("lakestack:cluster.enabled", cluster_raw.get("enabled", True), where=where),
        instance_type=instance_type,
        release_label=release,
        idle_timeout_minutes=_int(
            "lakestack:cluster.idleTimeoutMinutes",
            cluster_raw.get("idleTimeoutMinutes", 60),
            minimum=1,
            maximum=MAX_IDLE_MINUTES,
            where=where,
        ),
        max_workers=_int(
            "lakestack:cluster.maxWorkers",
            cluster_raw.get("maxWorkers", workers),
            minimum=workers,
            maximum=None,
            where=where,
            allowed=f"an integer >= {workers} (the workers parallelism {parallelism} needs at {per_worker} per worker)",
        ),
    )

    stream_raw = _mapping(
        "lakestack:stream",
        config.get("stream"),
        where=where,
        fields=("name", "mode", "shards", "retentionHours"),
    )
    mode = str(stream_raw.get("mode", "on-demand")).lower().replace("_", "-")
    if mode not in ("on-demand", "provisioned"):
        raise ConfigError(
            "lakestack:stream.mode", stream_raw.get("mode"), "on-demand or provisioned", where=where
        )
    shards_raw = stream_raw.get("shards")
    if mode == "provisioned":
        if shards_raw is None:
            raise ConfigError(
                "lakestack:stream.shards",
                None,
                "a shard count >= 1 when lakestack:stream.mode is provisioned",
                where=where,
            )
        shards: int | None = _int("lakestack:stream.shards", shards_raw, minimum=1, maximum=None, where=where)
    elif shards_raw is not None:
        raise ConfigError(
            "lakestack:stream.shards",
            shards_raw,
            "no value when lakestack:stream.mode is on-demand (Kinesis picks the shard count); "
            "set mode: provisioned to fix it",
            where=where,
        )
    else:
        shards = None
    stream_name = stream_raw.get("name", f"{prefix}-events")
    if not isinstance(stream_name, str) or not re.match(r"^[a-zA-Z0-9_.-]{1,128}$", stream_name):
        raise ConfigError(
            "lakestack:stream.name", stream_name, "1-128 letters, digits, '_', '.' or '-'", where=where
        )
    stream = StreamSettings(
        name=stream_name,
        mode=mode,  # type: ignore[arg-type]  # narrowed by the check above
        shards=shards,
        retention_hours=_int(
            "lakestack:stream.retentionHours",
            stream_raw.get("retentionHours", 24),
            minimum=MIN_RETENTION_HOURS,
            maximum=MAX_RETENTION_HOURS,
            where=where,
        ),
    )

    pipelines = config.get("pipelines", ["ingest"])
    if not isinstance(pipelines, list | tuple) or not pipelines:
        raise ConfigError(
            "lakestack:pipelines", pipelines, f"a non-empty list of {', '.join(PIPELINES)}", where=where
        )
    for name in pipelines:
        if name not in PIPELINES:
            raise ConfigError(
                "lakestack:pipelines", name, f"pipeline names among {', '.join(PIPELINES)}", where=where
            )

    buckets_raw = _mapping("lakestack:buckets", config.get("buckets"), where=where, fields=BUCKET_ROLES)
    buckets = {role: str(buckets_raw.get(role, f"{prefix}-{role}")) for role in BUCKET_ROLES}

    return StackSettings(
        stack=stack,
        cloud=cloud,
        region=region or "us-east-1",
        name_prefix=prefix,
        parallelism=parallelism,
        parallelism_per_worker=per_worker,
        stream=stream,
        cluster=cluster,
        pipelines=tuple(pipelines),
        bucket_names=buckets,
        endpoint_url=endpoint_url,
    )


def _endpoint_from(endpoints: Any) -> str | None:
    # `aws:endpoints` is a list of {service: url} mappings; the local stack aims all of them at one emulator.
    if not isinstance(endpoints, list):
        return None
    for entry in endpoints:
        if isinstance(entry, Mapping):
            for service in ("kinesis", "s3"):
                if service in entry:
                    return str(entry[service])
    return None


def load_stack_settings(stack: str, *, project_dir: Path | None = None) -> StackSettings:
    """Read and validate ``Pulumi.<stack>.yaml`` without the Pulumi CLI.

    Args:
        stack: stack name; the file read is ``Pulumi.<stack>.yaml``.
        project_dir: folder holding the stack files; the repository root when ``None``.

    Raises:
        ConfigError: the file is missing or a value is invalid.
    """
    path = (project_dir or PROJECT_DIR) / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        found = sorted(p.name for p in path.parent.glob("Pulumi.*.yaml"))
        raise ConfigError(
            "--stack",
            stack,
            f"a stack with a file Pulumi.<stack>.yaml in {path.parent} (found: {', '.join(found) or 'none'})",
        )
    document = yaml.safe_load(path.read_text()) or {}
    raw = document.get("config") or {}
    ours = {k.split(":", 1)[1]: v for k, v in raw.items() if k.startswith(f"{PROJECT}:")}
    return parse_settings(
        stack,
        ours,
        region=raw.get("aws:region"),
        endpoint_url=_endpoint_from(raw.get("aws:endpoints")),
        where=path.name,
    )


def settings_from_pulumi() -> StackSettings:
    """Build the settings inside a running Pulumi program from ``pulumi.Config``."""
    import pulumi

    def decode(value: str | None) -> Any:
        # Structured values arrive JSON-encoded, scalars as plain strings.
        if value is None:
            return None
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value

    from pulumi.runtime import config as runtime_config

    # Every `lakestack:*` key the engine passed, so a misspelt key is refused here as it is by the YAML reader.
    # The SDK keeps the bag in runtime.config (set by the language host, or by set_all_config in tests).
    names = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    ours = pulumi.Config(PROJECT)
    keys = sorted({n.split(":", 1)[1] for n in names if n.startswith(f"{PROJECT}:")} | set(_KNOWN_KEYS))
    raw = {key: decode(ours.get(key)) for key in keys}
    aws = pulumi.Config("aws")
    return parse_settings(
        pulumi.get_stack(),
        {k: v for k, v in raw.items() if v is not None},
        region=aws.get("region"),
        endpoint_url=_endpoint_from(decode(aws.get("endpoints"))),
        where="stack configuration",
    )
