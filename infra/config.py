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
from typing import Any, Literal, TypeVar, get_args

import yaml

from infra.errors import ConfigError
from infra.sizing import INSTANCE_TYPES, Sizing, size_cluster

Cloud = Literal["aws", "azure"]
StreamMode = Literal["on-demand", "provisioned"]
# The jobs a stack can deploy; a pipeline joins this list when its job exists.
Pipeline = Literal["ingest"]
T = TypeVar("T", bound=str)

PROJECT = "lakestack"
PROJECT_DIR = Path(__file__).resolve().parent.parent
# Where the ingest job's bronze table lives inside the lake bucket, on every stack and on the emulator.
BRONZE_TABLE = "bronze/events"
CLOUDS: tuple[Cloud, ...] = get_args(Cloud)
STREAM_MODES: tuple[StreamMode, ...] = get_args(StreamMode)
PIPELINES: tuple[Pipeline, ...] = get_args(Pipeline)
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
    pipelines: tuple[Pipeline, ...]
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
    _check_keys(config, where=where)
    cloud = _parse_choice("lakestack:cloud", config.get("cloud", "aws"), CLOUDS, where=where)
    prefix = _parse_prefix(config.get("namePrefix", f"{PROJECT}-{stack}"), where=where)
    parallelism = _int(
        "lakestack:parallelism", config.get("parallelism", 4), minimum=1, maximum=None, where=where
    )
    cluster, per_worker = _parse_cluster(
        config.get("cluster"), config.get("parallelismPerWorker"), parallelism=parallelism, where=where
    )
    return StackSettings(
        stack=stack,
        cloud=cloud,
        region=region or "us-east-1",
        name_prefix=prefix,
        parallelism=parallelism,
        parallelism_per_worker=per_worker,
        stream=_parse_stream(config.get("stream"), prefix=prefix, where=where),
        cluster=cluster,
        pipelines=_parse_pipelines(config.get("pipelines", ["ingest"]), where=where),
        bucket_names=_parse_buckets(config.get("buckets"), prefix=prefix, where=where),
        endpoint_url=endpoint_url,
    )


def _check_keys(config: Mapping[str, Any], *, where: str) -> None:
    for key in config:
        if key not in _KNOWN_KEYS:
            raise ConfigError(
                f"lakestack:{key}",
                config[key],
                f"one of lakestack:{', lakestack:'.join(_KNOWN_KEYS)}",
                where=where,
            )


def _parse_choice(key: str, value: Any, allowed: tuple[T, ...], *, where: str) -> T:
    """``value`` when it is one of ``allowed`` (the values of a ``Literal``), else a ConfigError."""
    for choice in allowed:
        if value == choice:
            return choice
    raise ConfigError(key, value, f"one of {', '.join(map(str, allowed))}", where=where)


def _parse_prefix(prefix: Any, *, where: str) -> str:
    max_prefix = 63 - _LONGEST_ROLE
    if not isinstance(prefix, str) or not _PREFIX_RE.match(prefix) or len(prefix) > max_prefix:
        raise ConfigError(
            "lakestack:namePrefix",
            prefix,
            f"lowercase letters, digits and hyphens, 3 to {max_prefix} characters "
            "(it starts every bucket name, and S3 bucket names are at most 63)",
            where=where,
        )
    return prefix


def _parse_cluster(
    value: Any, per_worker_value: Any, *, parallelism: int, where: str
) -> tuple[ClusterSettings, int]:
    """``lakestack:cluster`` and ``lakestack:parallelismPerWorker`` (bounded by the instance's vCPUs)."""
    raw = _mapping(
        "lakestack:cluster",
        value,
        where=where,
        fields=("enabled", "instanceType", "releaseLabel", "idleTimeoutMinutes", "maxWorkers"),
    )
    instance_type = raw.get("instanceType", "m5.xlarge")
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
        instance.vcpus if per_worker_value is None else per_worker_value,
        minimum=1,
        maximum=instance.vcpus,
        where=where,
        allowed=f"an integer from 1 to {instance.vcpus} (the vCPUs of {instance_type})",
    )
    workers = size_cluster(
        parallelism=parallelism, parallelism_per_worker=per_worker, instance=instance
    ).workers
    release = raw.get("releaseLabel", DEFAULT_RELEASE_LABEL)
    if not isinstance(release, str) or not _RELEASE_RE.match(release):
        raise ConfigError(
            "lakestack:cluster.releaseLabel",
            release,
            f"an EMR release label such as {DEFAULT_RELEASE_LABEL}",
            where=where,
        )
    cluster = ClusterSettings(
        enabled=_bool("lakestack:cluster.enabled", raw.get("enabled", True), where=where),
        instance_type=instance_type,
        release_label=release,
        idle_timeout_minutes=_int(
            "lakestack:cluster.idleTimeoutMinutes",
            raw.get("idleTimeoutMinutes", 60),
            minimum=1,
            maximum=MAX_IDLE_MINUTES,
            where=where,
        ),
        max_workers=_int(
            "lakestack:cluster.maxWorkers",
            raw.get("maxWorkers", workers),
            minimum=workers,
            maximum=None,
            where=where,
            allowed=f"an integer >= {workers} (the workers parallelism {parallelism} needs at {per_worker} per worker)",
        ),
    )
    return cluster, per_worker


def _parse_stream(value: Any, *, prefix: str, where: str) -> StreamSettings:
    """``lakestack:stream``: a provisioned stream needs a shard count, an on-demand one refuses it."""
    raw = _mapping(
        "lakestack:stream", value, where=where, fields=("name", "mode", "shards", "retentionHours")
    )
    found = raw.get("mode", "on-demand")
    try:
        mode = _parse_choice(
            "lakestack:stream.mode", str(found).lower().replace("_", "-"), STREAM_MODES, where=where
        )
    except ConfigError:
        raise ConfigError("lakestack:stream.mode", found, " or ".join(STREAM_MODES), where=where) from None
    shards_raw = raw.get("shards")
    shards: int | None = None
    if mode == "provisioned":
        if shards_raw is None:
            raise ConfigError(
                "lakestack:stream.shards",
                None,
                "a shard count >= 1 when lakestack:stream.mode is provisioned",
                where=where,
            )
        shards = _int("lakestack:stream.shards", shards_raw, minimum=1, maximum=None, where=where)
    elif shards_raw is not None:
        raise ConfigError(
            "lakestack:stream.shards",
            shards_raw,
            "no value when lakestack:stream.mode is on-demand (Kinesis picks the shard count); "
            "set mode: provisioned to fix it",
            where=where,
        )
    name = raw.get("name", f"{prefix}-events")
    if not isinstance(name, str) or not re.match(r"^[a-zA-Z0-9_.-]{1,128}$", name):
        raise ConfigError(
            "lakestack:stream.name", name, "1-128 letters, digits, '_', '.' or '-'", where=where
        )
    return StreamSettings(
        name=name,
        mode=mode,
        shards=shards,
        retention_hours=_int(
            "lakestack:stream.retentionHours",
            raw.get("retentionHours", 24),
            minimum=MIN_RETENTION_HOURS,
            maximum=MAX_RETENTION_HOURS,
            where=where,
        ),
    )


def _parse_pipelines(value: Any, *, where: str) -> tuple[Pipeline, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(
            "lakestack:pipelines", value, f"a non-empty list of {', '.join(PIPELINES)}", where=where
        )
    try:
        return tuple(_parse_choice("lakestack:pipelines", name, PIPELINES, where=where) for name in value)
    except ConfigError as error:
        bad = next(name for name in value if name not in PIPELINES)
        raise ConfigError(
            "lakestack:pipelines", bad, f"pipeline names among {', '.join(PIPELINES)}", where=where
        ) from error


def _parse_buckets(value: Any, *, prefix: str, where: str) -> dict[str, str]:
    raw = _mapping("lakestack:buckets", value, where=where, fields=BUCKET_ROLES)
    return {role: str(raw.get(role, f"{prefix}-{role}")) for role in BUCKET_ROLES}


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


def settings_from_pulumi(*, project_dir: Path | None = None) -> StackSettings:
    """Build the settings inside a running Pulumi program from ``pulumi.Config``.

    ``pulumi.Config`` reads keys but cannot list them, so the keys set for the stack are taken from its
    ``Pulumi.<stack>.yaml`` (in ``project_dir``, the repository root by default): a misspelt key there is
    refused here with the same message as :func:`load_stack_settings` gives.
    """
    import pulumi

    def decode(value: str | None) -> Any:
        # Structured values arrive JSON-encoded, scalars as plain strings.
        if value is None:
            return None
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value

    stack = pulumi.get_stack()
    ours = pulumi.Config(PROJECT)
    keys = sorted(set(_stack_file_keys(stack, project_dir or PROJECT_DIR)) | set(_KNOWN_KEYS))
    raw = {key: decode(ours.get(key)) for key in keys}
    aws = pulumi.Config("aws")
    return parse_settings(
        stack,
        {k: v for k, v in raw.items() if v is not None},
        region=aws.get("region"),
        endpoint_url=_endpoint_from(decode(aws.get("endpoints"))),
        where="stack configuration",
    )


def _stack_file_keys(stack: str, project_dir: Path) -> list[str]:
    """The ``lakestack:*`` keys (without the prefix) in ``Pulumi.<stack>.yaml``; none when there is no file."""
    path = project_dir / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        return []
    raw = (yaml.safe_load(path.read_text()) or {}).get("config") or {}
    return [key.split(":", 1)[1] for key in raw if key.startswith(f"{PROJECT}:")]
