"""Stack configuration, read once into a validated, frozen settings object.

One parser (:func:`parse_settings`) is fed either from ``Pulumi.<stack>.yaml`` (:func:`load_stack_settings`,
no Pulumi CLI needed: ``lakestack plan`` and ``lakestack local up`` use it) or from ``pulumi.Config`` inside
the program (:func:`settings_from_pulumi`), so both refuse the same configurations with the same messages.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

import yaml

from infra.errors import ConfigError, StackFileSyntaxError
from infra.runtime import DEFAULT_RELEASE_LABEL, EMR_RELEASES, REFUSED_RELEASES, EmrRelease
from infra.sizing import INSTANCE_TYPES, Sizing, size_cluster

Cloud = Literal["aws", "azure"]
StreamMode = Literal["on-demand", "provisioned"]
# The pipelines a stack can run, each as its own step with its own checkpoint. orders-cow and orders-mor are
# the orders job in its two layouts (`--layout cow|mor`), side by side.
Pipeline = Literal["ingest", "sales", "fraud", "orders-cow", "orders-mor", "maintenance"]
# How bucket names are made globally unique: `<prefix>-<role>-<account>-<region>`, or as configured.
BucketSuffix = Literal["account-region", "none"]
# Which interface VPC endpoints the AWS stack adds: those that cost less than the NAT at the planned load, all, none.
EndpointMode = Literal["auto", "all", "none"]
T = TypeVar("T", bound=str)

PROJECT = "lakestack"
PROJECT_DIR = Path(__file__).resolve().parent.parent
# Where the ingest job's bronze table lives inside the lake bucket, on every stack and on the emulator.
BRONZE_TABLE = "bronze/events"
CLOUDS: tuple[Cloud, ...] = get_args(Cloud)
STREAM_MODES: tuple[StreamMode, ...] = get_args(StreamMode)
PIPELINES: tuple[Pipeline, ...] = get_args(Pipeline)
# What `orders` in lakestack:pipelines stands for: both layouts, side by side, as the demo runs them.
ORDERS_LAYOUTS: tuple[Pipeline, ...] = ("orders-cow", "orders-mor")
BUCKET_ROLES: tuple[str, ...] = ("lake", "checkpoints", "artifacts", "logs")
# Kinesis keeps data 24 hours at least and 365 days at most.
MIN_RETENTION_HOURS, MAX_RETENTION_HOURS = 24, 8760
# EMR's auto-termination idle timeout ranges from 1 minute to 7 days.
MAX_IDLE_MINUTES = 7 * 24 * 60
# A stack nobody re-deploys is tagged to expire this long after its last `pulumi up` (then to midnight UTC).
DEFAULT_TTL_HOURS = 24
MAX_TTL_HOURS = 365 * 24
EXPIRES_AT_TAG = "lakestack:expires-at"
# An AWS account id is 12 digits; the longest region names (ap-southeast-2, ...) have 14 characters.
_ACCOUNT_DIGITS = 12
_LONGEST_ROLE = max(len(r) for r in BUCKET_ROLES) + 1
_PREFIX_RE = re.compile(r"^[a-z0-9][a-z0-9-]*[a-z0-9]$")
_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
# Fargate's valid task sizes: CPU units -> allowed memory (MiB).
FARGATE_SIZES: dict[int, tuple[int, ...]] = {
    256: (512, 1024, 2048),
    512: tuple(range(1024, 4097, 1024)),
    1024: tuple(range(2048, 8193, 1024)),
    2048: tuple(range(4096, 16385, 1024)),
    4096: tuple(range(8192, 30721, 1024)),
}
MAX_LOADGEN_WORKERS = 50
# The load generator's image: Docker's official Python image as public ECR serves it (Docker Hub limits anonymous
# pulls per address, and every task of a run pulls through the NAT's one address). Each task installs Locust and
# boto3 at the lock's versions for this Python at start-up (infra.artifacts.build_loadgen_artifacts).
LOADGEN_PYTHON = "3.11"
DEFAULT_LOADGEN_IMAGE = f"public.ecr.aws/docker/library/python:{LOADGEN_PYTHON}-slim"
# The flags the program sets on every pipeline step itself (contract C3 and the ingest job's); extra flags
# from lakestack:jobFlags may not override them, or two pipelines could end up sharing a checkpoint.
RESERVED_JOB_FLAGS = (
    "--source-table",
    "--lake",
    "--checkpoint",
    "--table",
    "--stream",
    "--layout",
    "--region",
)
# Security controls that are on by default; each can be switched off only by its own key (see the plan).
SECURITY_CONTROLS = ("flowLogs", "restrictDefaultSecurityGroup", "explicitKeyPolicy", "s3AccessLogging")
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
    "bucketSuffix",
    "ttlHours",
    "expiresAt",
    "alertEmail",
    "security",
    "loadgen",
    "jobFlags",
    "network",
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

    @property
    def release(self) -> EmrRelease:
        """What the release runs (``infra.runtime``): Spark, Delta, the interpreter, the Delta jar."""
        return EMR_RELEASES[self.release_label]


@dataclass(frozen=True)
class SecuritySettings:
    """Security controls beyond the always-on ones; each is on unless its ``lakestack:security.<key>`` is false."""

    flow_logs: bool = True
    restrict_default_security_group: bool = True
    explicit_key_policy: bool = True
    s3_access_logging: bool = True

    def deviations(self) -> list[str]:
        """The config keys that switched a control off, in the order of ``SECURITY_CONTROLS``."""
        values = (
            self.flow_logs,
            self.restrict_default_security_group,
            self.explicit_key_policy,
            self.s3_access_logging,
        )
        return [
            f"lakestack:security.{key}" for key, on in zip(SECURITY_CONTROLS, values, strict=True) if not on
        ]


@dataclass(frozen=True)
class NetworkSettings:
    """The AWS VPC's interface endpoints (``lakestack:network.interfaceEndpoints``): ``auto`` adds each one whose
    hourly price is less than the NAT's per-GB charges it saves at the planned load (see
    :func:`infra.pricing.interface_endpoint_plan`), ``all`` every one the stack can add, ``none`` none."""

    interface_endpoints: EndpointMode = "auto"


@dataclass(frozen=True)
class LoadgenSettings:
    """Locust on ECS Fargate in the stack's private subnet: one master and ``workers`` workers per run."""

    workers: int
    cpu: int = 1024
    memory_mb: int = 2048
    # A Python 3.11 image with pip (the task installs the load suite's pins for that Python).
    image: str = DEFAULT_LOADGEN_IMAGE


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
    bucket_suffix: BucketSuffix = "none"
    # Roles whose bucket name was set in lakestack:buckets: used exactly as given, never suffixed.
    explicit_buckets: frozenset[str] = frozenset()
    expires_at: datetime = datetime(2000, 1, 1, tzinfo=UTC)
    alert_email: str | None = None
    security: SecuritySettings = SecuritySettings()
    network: NetworkSettings = NetworkSettings()
    loadgen: LoadgenSettings | None = None
    job_flags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    aws_profile: str | None = None
    # The AWS provider's own credentials beyond the profile (keys, assumed roles): the program's direct AWS
    # calls (the EMR step provider) act with exactly what the provider acts with.
    aws_credentials: AwsCredentials | None = None
    sizing: Sizing = field(init=False)

    def __post_init__(self) -> None:
        sizing = size_cluster(
            parallelism=self.parallelism,
            parallelism_per_worker=self.parallelism_per_worker,
            instance=INSTANCE_TYPES[self.cluster.instance_type],
            applications=len(self.pipelines),
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

    @property
    def needs_network(self) -> bool:
        """True when the stack declares a VPC: for the cluster or for the load generator."""
        return self.cluster.enabled or self.loadgen is not None

    def bucket_names_for(self, account_id: str) -> dict[str, str]:
        """The real bucket names once the account is known: ``<prefix>-<role>-<account>-<region>`` with the
        ``account-region`` suffix, except for names set explicitly in ``lakestack:buckets``."""
        if self.bucket_suffix == "none":
            return dict(self.bucket_names)
        return {
            role: name if role in self.explicit_buckets else f"{name}-{account_id}-{self.region}"
            for role, name in self.bucket_names.items()
        }

    @property
    def tags(self) -> dict[str, str]:
        """Tags on every resource of the stack."""
        return {
            "lakestack:project": PROJECT,
            "lakestack:stack": self.stack,
            EXPIRES_AT_TAG: self.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }


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


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """``; did you mean X?`` when ``word`` is close to one of ``choices`` (a typo); empty otherwise."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.7)
    return f"; did you mean {close[0]}?" if close else ""


def _mapping(key: str, value: Any, *, where: str, fields: tuple[str, ...]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, f"a mapping with keys {', '.join(fields)}", where=where)
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ConfigError(
            f"{key}.{unknown[0]}",
            value[unknown[0]],
            f"one of the keys {', '.join(fields)}{did_you_mean(unknown[0], fields)}",
            where=where,
        )
    return value


def parse_settings(
    stack: str,
    config: Mapping[str, Any],
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
    aws_profile: str | None = None,
    aws_credentials: AwsCredentials | None = None,
    now: datetime | None = None,
    where: str = "",
) -> StackSettings:
    """Validate raw ``lakestack:*`` configuration into :class:`StackSettings`.

    Args:
        stack: stack name (``dev``, ``local``, ...).
        config: values keyed without the ``lakestack:`` prefix, as YAML or JSON would decode them.
        region: the ``aws:region`` value; ``us-east-1`` when unset.
        endpoint_url: the emulator endpoint when the provider is aimed at one (the local stack).
        aws_profile: the ``aws:profile`` value, which the program's own AWS calls use too.
        now: the time a TTL counts from (``pulumi up`` time); the current time when ``None``.
        where: where the values came from, for error messages.

    Raises:
        ConfigError: naming the key, the value found and what is allowed.
    """
    _check_keys(config, where=where)
    cloud = _parse_choice("lakestack:cloud", config.get("cloud", "aws"), CLOUDS, where=where)
    region = _parse_region(region, where=where)
    local = endpoint_url is not None
    suffix = _parse_choice(
        "lakestack:bucketSuffix",
        config.get("bucketSuffix", "none" if local or cloud != "aws" else "account-region"),
        get_args(BucketSuffix),
        where=where,
    )
    default_prefix = f"{PROJECT}-{stack}"
    prefix = _parse_prefix(
        config.get("namePrefix", default_prefix),
        reserved=len(f"-{'0' * _ACCOUNT_DIGITS}-{region}") if suffix == "account-region" else 0,
        where=where,
    )
    parallelism = _int(
        "lakestack:parallelism", config.get("parallelism", 4), minimum=1, maximum=None, where=where
    )
    pipelines = _parse_pipelines(config.get("pipelines", ["ingest"]), where=where)
    cluster, per_worker = _parse_cluster(
        config.get("cluster"),
        config.get("parallelismPerWorker"),
        parallelism=parallelism,
        pipelines=len(pipelines),
        region=None if local or cloud != "aws" else region,
        where=where,
    )
    explicit = _mapping("lakestack:buckets", config.get("buckets"), where=where, fields=BUCKET_ROLES)
    if (
        suffix == "none"
        and not local
        and cloud == "aws"
        and prefix == default_prefix
        and len(explicit) < len(BUCKET_ROLES)
    ):
        raise ConfigError(
            "lakestack:bucketSuffix",
            "none",
            f"account-region while lakestack:namePrefix is the shipped {default_prefix!r}: S3 bucket names are "
            f"global, so {default_prefix}-lake belongs to whoever deployed it first. Set lakestack:namePrefix "
            "to something only you use, or remove lakestack:bucketSuffix",
            where=where,
        )
    return StackSettings(
        stack=stack,
        cloud=cloud,
        region=region,
        name_prefix=prefix,
        parallelism=parallelism,
        parallelism_per_worker=per_worker,
        stream=_parse_stream(config.get("stream"), prefix=prefix, where=where),
        cluster=cluster,
        pipelines=pipelines,
        bucket_names=_parse_buckets(explicit, prefix=prefix, where=where),
        endpoint_url=endpoint_url,
        bucket_suffix=suffix,
        explicit_buckets=frozenset(explicit),
        expires_at=_parse_expiry(config.get("ttlHours"), config.get("expiresAt"), now=now, where=where),
        alert_email=_parse_email(config.get("alertEmail"), where=where),
        security=_parse_security(config.get("security"), where=where),
        network=_parse_network(config.get("network"), where=where),
        loadgen=_parse_loadgen(config.get("loadgen"), local=local, where=where),
        job_flags=_parse_job_flags(config.get("jobFlags"), pipelines=pipelines, where=where),
        aws_profile=aws_profile,
        aws_credentials=aws_credentials,
    )


def _check_keys(config: Mapping[str, Any], *, where: str) -> None:
    for key in config:
        if key not in _KNOWN_KEYS:
            raise ConfigError(
                f"lakestack:{key}",
                config[key],
                f"one of lakestack:{', lakestack:'.join(_KNOWN_KEYS)}"
                + did_you_mean(f"lakestack:{key}", [f"lakestack:{k}" for k in _KNOWN_KEYS]),
                where=where,
            )


def aws_regions(partition: str | None = None) -> tuple[str, ...]:
    """The AWS regions where the stack's services run (Kinesis), from botocore's tables: of ``partition``
    (``aws``, ``aws-cn``, ...), or of every partition when ``None``."""
    import botocore.session

    session = botocore.session.get_session()
    partitions = session.get_available_partitions() if partition is None else [partition]
    return tuple(
        region
        for name in partitions
        for region in session.get_available_regions("kinesis", partition_name=name)
    )


def _parse_region(value: Any, *, where: str) -> str:
    """``aws:region``: unset means us-east-1; a name AWS does not have is refused (it would be planned and priced
    as if it were us-east-1, and fail only at `pulumi up`)."""
    if value is None:
        return "us-east-1"
    if value not in aws_regions():
        commercial = sorted(aws_regions("aws"))
        raise ConfigError(
            "aws:region",
            value,
            f"an AWS region{did_you_mean(value, commercial)} (one of {', '.join(commercial)}, or a GovCloud/China "
            "region)",
            where=where,
        )
    return str(value)


def _parse_choice(key: str, value: Any, allowed: tuple[T, ...], *, where: str) -> T:
    """``value`` when it is one of ``allowed`` (the values of a ``Literal``), else a ConfigError."""
    for choice in allowed:
        if value == choice:
            return choice
    raise ConfigError(key, value, f"one of {', '.join(map(str, allowed))}", where=where)


def _parse_prefix(prefix: Any, *, reserved: int, where: str) -> str:
    """The name prefix; ``reserved`` characters of the 63 a bucket name may have go to the suffix."""
    max_prefix = 63 - _LONGEST_ROLE - reserved
    if not isinstance(prefix, str) or not _PREFIX_RE.match(prefix) or len(prefix) > max_prefix:
        suffix = " plus the -<account>-<region> suffix" if reserved else ""
        raise ConfigError(
            "lakestack:namePrefix",
            prefix,
            f"lowercase letters, digits and hyphens, 3 to {max_prefix} characters "
            f"(it starts every bucket name{suffix}, and S3 bucket names are at most 63)",
            where=where,
        )
    return prefix


def _parse_cluster(
    value: Any, per_worker_value: Any, *, parallelism: int, pipelines: int, region: str | None, where: str
) -> tuple[ClusterSettings, int]:
    """``lakestack:cluster`` and ``lakestack:parallelismPerWorker`` (bounded by the instance's vCPUs); the release
    must be one the kit knows (``infra.runtime``) and offered in ``region`` (None: no AWS region to check)."""
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
    if "maxWorkers" in raw:
        # A set maxWorkers caps the parallelism: name the value that is out of range, and the range.
        ceiling = _int(
            "lakestack:cluster.maxWorkers", raw["maxWorkers"], minimum=1, maximum=None, where=where
        )
        if parallelism > ceiling * per_worker:
            raise ConfigError(
                "lakestack:parallelism",
                parallelism,
                f"an integer from 1 to {ceiling * per_worker} (lakestack:cluster.maxWorkers {ceiling} x "
                f"lakestack:parallelismPerWorker {per_worker}); lower it, or raise lakestack:cluster.maxWorkers "
                f"to at least {-(-parallelism // per_worker)}",
                where=where,
            )
    sizing = size_cluster(
        parallelism=parallelism, parallelism_per_worker=per_worker, instance=instance, applications=pipelines
    )
    workers = sizing.workers
    enabled = _bool("lakestack:cluster.enabled", raw.get("enabled", True), where=where)
    if enabled and sizing.executor_memory_gb < 1:
        raise ConfigError(
            "lakestack:cluster.instanceType",
            instance_type,
            f"an instance type with room for {pipelines} pipelines' drivers and executors on {workers} "
            f"node(s): {instance_type} leaves less than 1 GB per executor. Choose a larger type (e.g. one "
            "with twice the memory), raise lakestack:parallelism, or run fewer pipelines",
            where=where,
        )
    release = _parse_release(
        raw.get("releaseLabel", DEFAULT_RELEASE_LABEL), region=region if enabled else None, where=where
    )
    cluster = ClusterSettings(
        enabled=enabled,
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


def _parse_release(value: Any, *, region: str | None, where: str) -> str:
    """``lakestack:cluster.releaseLabel``: a release of :data:`infra.runtime.EMR_RELEASES` (the jobs are tested on
    its twin), offered in the stack's region."""
    known = ", ".join(EMR_RELEASES)
    if not isinstance(value, str) or value not in EMR_RELEASES:
        why = REFUSED_RELEASES.get(value) if isinstance(value, str) else None
        allowed = f"one of {known} (the EMR releases whose Spark and Delta the jobs are tested on here)"
        raise ConfigError(
            "lakestack:cluster.releaseLabel",
            value,
            allowed + (f"; not {value}: {why}" if why else ""),
            where=where,
        )
    release = EMR_RELEASES[value]
    if region is not None and region in release.unavailable_regions:
        raise ConfigError(
            "aws:region",
            region,
            f"a region where {value} is offered (AWS does not offer it in "
            f"{', '.join(sorted(release.unavailable_regions))}); choose another region",
            where=where,
        )
    return value


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


def expand_pipeline_names(names: Iterable[Any]) -> list[Any]:
    """``orders`` stands for both layouts, ``orders-cow`` and ``orders-mor`` (as in ``lakestack demo``)."""
    return [layout for name in names for layout in (ORDERS_LAYOUTS if name == "orders" else (name,))]


def _parse_pipelines(value: Any, *, where: str) -> tuple[Pipeline, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(
            "lakestack:pipelines", value, f"a non-empty list of {', '.join(PIPELINES)}", where=where
        )
    expanded = expand_pipeline_names(value)
    try:
        names = tuple(_parse_choice("lakestack:pipelines", name, PIPELINES, where=where) for name in expanded)
    except ConfigError as error:
        bad = next(name for name in expanded if name not in PIPELINES)
        raise ConfigError(
            "lakestack:pipelines",
            bad,
            f"pipeline names among {', '.join(PIPELINES)} (orders: both layouts)"
            + did_you_mean(bad, [*PIPELINES, "orders"]),
            where=where,
        ) from error
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise ConfigError(
            "lakestack:pipelines", twice, "each pipeline once (one step and checkpoint each)", where=where
        )
    if names == ("maintenance",):
        raise ConfigError(
            "lakestack:pipelines",
            list(names),
            "maintenance beside at least one pipeline whose tables it looks after",
            where=where,
        )
    return names


def _parse_buckets(raw: Mapping[str, Any], *, prefix: str, where: str) -> dict[str, str]:
    names = {role: raw.get(role, f"{prefix}-{role}") for role in BUCKET_ROLES}
    for role, name in names.items():
        if not isinstance(name, str) or not re.match(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", name):
            raise ConfigError(
                f"lakestack:buckets.{role}",
                name,
                "an S3 bucket name (3-63 lowercase letters, digits, '.', '-')",
                where=where,
            )
    return names


def _now() -> datetime:
    """The time a TTL counts from (one place, so tests can set the clock)."""
    return datetime.now(UTC)


def _parse_expiry(ttl_value: Any, at_value: Any, *, now: datetime | None, where: str) -> datetime:
    """``lakestack:expiresAt`` (an ISO 8601 time) or ``lakestack:ttlHours`` from now, rounded up to midnight UTC.

    The tag is on every resource, and a tag change re-sends some of them whole (a Synapse pool, say): rounding
    to the day keeps every ``pulumi up`` of the same day a no-op; the expiry moves only when asked
    (``expiresAt``, a new ``ttlHours``) or once a day.
    """
    if ttl_value is not None and at_value is not None:
        raise ConfigError(
            "lakestack:ttlHours",
            ttl_value,
            "no value when lakestack:expiresAt is set (use one of the two)",
            where=where,
        )
    if at_value is not None:
        try:
            parsed = datetime.fromisoformat(str(at_value))
        except ValueError:
            parsed = None
        if parsed is None or parsed.tzinfo is None:
            raise ConfigError(
                "lakestack:expiresAt",
                at_value,
                "an ISO 8601 time with a zone, e.g. 2026-12-01T18:00:00Z",
                where=where,
            )
        return parsed.astimezone(UTC)
    hours = _int(
        "lakestack:ttlHours",
        DEFAULT_TTL_HOURS if ttl_value is None else ttl_value,
        minimum=1,
        maximum=MAX_TTL_HOURS,
        where=where,
    )
    start = (now or _now()).astimezone(UTC) + timedelta(hours=hours)
    midnight = start.replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight if midnight == start else midnight + timedelta(days=1)


def _parse_email(value: Any, *, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _EMAIL_RE.match(value):
        raise ConfigError(
            "lakestack:alertEmail", value, "an e-mail address for the alarm's SNS topic", where=where
        )
    return value


def _parse_security(value: Any, *, where: str) -> SecuritySettings:
    raw = _mapping("lakestack:security", value, where=where, fields=SECURITY_CONTROLS)
    on = {
        key: _bool(f"lakestack:security.{key}", raw.get(key, True), where=where) for key in SECURITY_CONTROLS
    }
    return SecuritySettings(
        flow_logs=on["flowLogs"],
        restrict_default_security_group=on["restrictDefaultSecurityGroup"],
        explicit_key_policy=on["explicitKeyPolicy"],
        s3_access_logging=on["s3AccessLogging"],
    )


def _parse_network(value: Any, *, where: str) -> NetworkSettings:
    raw = _mapping("lakestack:network", value, where=where, fields=("interfaceEndpoints",))
    mode = _parse_choice(
        "lakestack:network.interfaceEndpoints",
        raw.get("interfaceEndpoints", NetworkSettings.interface_endpoints),
        get_args(EndpointMode),
        where=where,
    )
    return NetworkSettings(interface_endpoints=mode)


def _parse_loadgen(value: Any, *, local: bool, where: str) -> LoadgenSettings | None:
    if value is None:
        return None
    raw = _mapping("lakestack:loadgen", value, where=where, fields=("workers", "cpu", "memory", "image"))
    if local:
        raise ConfigError(
            "lakestack:loadgen",
            dict(raw),
            "no value on an emulator stack (Fargate runs in AWS); use `lakestack load --workers N` locally",
            where=where,
        )
    if "workers" not in raw:
        raise ConfigError(
            "lakestack:loadgen.workers", None, f"an integer from 1 to {MAX_LOADGEN_WORKERS}", where=where
        )
    workers = _int(
        "lakestack:loadgen.workers", raw["workers"], minimum=1, maximum=MAX_LOADGEN_WORKERS, where=where
    )
    cpu = _int(
        "lakestack:loadgen.cpu",
        raw.get("cpu", 1024),
        minimum=256,
        maximum=4096,
        where=where,
        allowed=f"Fargate CPU units, one of {', '.join(map(str, FARGATE_SIZES))}",
    )
    if cpu not in FARGATE_SIZES:
        raise ConfigError(
            "lakestack:loadgen.cpu",
            raw["cpu"],
            f"Fargate CPU units, one of {', '.join(map(str, FARGATE_SIZES))}",
            where=where,
        )
    allowed = FARGATE_SIZES[cpu]
    memory = _int(
        "lakestack:loadgen.memory",
        raw.get("memory", 2048 if 2048 in allowed else allowed[0]),
        minimum=allowed[0],
        maximum=allowed[-1],
        where=where,
        allowed=f"MiB Fargate allows with {cpu} CPU units: {', '.join(map(str, allowed))}",
    )
    if memory not in allowed:
        raise ConfigError(
            "lakestack:loadgen.memory",
            raw["memory"],
            f"MiB Fargate allows with {cpu} CPU units: {', '.join(map(str, allowed))}",
            where=where,
        )
    image = raw.get("image", LoadgenSettings.image)
    if not isinstance(image, str) or not image or any(c.isspace() for c in image):
        raise ConfigError("lakestack:loadgen.image", image, "a container image reference", where=where)
    return LoadgenSettings(workers=workers, cpu=cpu, memory_mb=memory, image=image)


def _parse_job_flags(
    value: Any,
    *,
    pipelines: tuple[Pipeline, ...],
    where: str,
    reserved: tuple[str, ...] = RESERVED_JOB_FLAGS,
) -> dict[str, tuple[str, ...]]:
    raw = _mapping("lakestack:jobFlags", value, where=where, fields=pipelines)
    flags: dict[str, tuple[str, ...]] = {}
    for pipeline, extra in raw.items():
        key = f"lakestack:jobFlags.{pipeline}"
        if not isinstance(extra, list | tuple) or not all(isinstance(f, str | int | float) for f in extra):
            raise ConfigError(
                key,
                extra,
                "a list of command-line arguments, e.g. [--trigger, processing-time=10s]",
                where=where,
            )
        values = tuple(str(f) for f in extra)
        for flag in values:
            if flag.split("=", 1)[0] in reserved:
                raise ConfigError(
                    key,
                    list(values),
                    f"flags other than {', '.join(reserved)}: the program sets those itself, one "
                    "checkpoint per pipeline",
                    where=where,
                )
        flags[pipeline] = values
    return flags


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
        names = [name.removeprefix("Pulumi.").removesuffix(".yaml") for name in found]
        raise ConfigError(
            "--stack",
            stack,
            f"a stack with a file Pulumi.<stack>.yaml in {path.parent} (found: {', '.join(found) or 'none'})"
            + did_you_mean(stack, names),
        )
    raw = stack_file_config(path)
    return parse_settings(
        stack,
        project_values(raw),
        region=raw.get("aws:region"),
        endpoint_url=_endpoint_from(raw.get("aws:endpoints")),
        aws_profile=raw.get("aws:profile"),
        where=path.name,
    )


def settings_from_pulumi(*, project_dir: Path | None = None) -> StackSettings:
    """Build the settings inside a running Pulumi program from ``pulumi.Config``.

    ``pulumi.Config`` reads keys but cannot list them, so the keys set for the stack are taken from its
    ``Pulumi.<stack>.yaml`` (in ``project_dir``, the repository root by default): a misspelt key there is
    refused here with the same message as :func:`load_stack_settings` gives.
    """
    import pulumi

    stack, values = values_from_pulumi(_KNOWN_KEYS, project_dir=project_dir)
    aws = pulumi.Config("aws")
    return parse_settings(
        stack,
        values,
        region=aws.get("region"),
        endpoint_url=_endpoint_from(decode_config_value(aws.get("endpoints"))),
        aws_profile=aws.get("profile"),
        aws_credentials=aws_credentials_from(
            {key: aws.get(key) for key in ("accessKey", "secretKey", "token", "assumeRole", "assumeRoles")}
        ),
        where="stack configuration",
    )


def values_from_pulumi(
    known_keys: tuple[str, ...], *, project_dir: Path | None
) -> tuple[str, dict[str, Any]]:
    """The running program's stack name and the ``lakestack:*`` values set for it (keys without the prefix).

    ``pulumi.Config`` reads keys but cannot list them: the keys asked for are ``known_keys`` and those in the
    stack's ``Pulumi.<stack>.yaml`` (in ``project_dir``, the repository root by default), so a misspelt key
    there reaches the parser, which refuses it.
    """
    import pulumi

    stack = pulumi.get_stack()
    ours = pulumi.Config(PROJECT)
    keys = sorted(set(_stack_file_keys(stack, project_dir or PROJECT_DIR)) | set(known_keys))
    raw = {key: decode_config_value(ours.get(key)) for key in keys}
    return stack, {k: v for k, v in raw.items() if v is not None}


@dataclass(frozen=True)
class AssumedRole:
    """One role of the AWS provider's ``assumeRoles`` chain."""

    role_arn: str
    external_id: str = ""
    session_name: str = ""


@dataclass(frozen=True)
class AwsCredentials:
    """The AWS provider's explicit credentials: static keys and the roles it assumes, in order."""

    access_key: str = ""
    secret_key: str = field(default="", repr=False)
    token: str = field(default="", repr=False)
    assume_roles: tuple[AssumedRole, ...] = ()


def aws_credentials_from(values: Mapping[str, str | None]) -> AwsCredentials | None:
    """The provider's credentials from its ``aws:*`` config (``accessKey``, ``secretKey``, ``token``,
    ``assumeRoles`` or the older single ``assumeRole``); ``None`` when none is set (profile or environment)."""
    raw_roles = decode_config_value(values.get("assumeRoles")) or []
    single = decode_config_value(values.get("assumeRole"))
    if isinstance(single, Mapping):
        raw_roles = [*raw_roles, single]
    roles = tuple(
        AssumedRole(
            role_arn=str(r.get("roleArn", "")),
            external_id=str(r.get("externalId") or ""),
            session_name=str(r.get("sessionName") or ""),
        )
        for r in raw_roles
        if isinstance(r, Mapping) and r.get("roleArn")
    )
    found = AwsCredentials(
        access_key=values.get("accessKey") or "",
        secret_key=values.get("secretKey") or "",
        token=values.get("token") or "",
        assume_roles=roles,
    )
    return None if found == AwsCredentials() else found


def decode_config_value(value: str | None) -> Any:
    """A ``pulumi.Config`` value as YAML would have given it: structured values arrive JSON-encoded, scalars
    as plain strings."""
    if value is None:
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def stack_file_config(path: Path) -> dict[str, Any]:
    """The ``config`` section of a ``Pulumi.<stack>.yaml`` (every provider's keys, prefixed).

    Raises:
        StackFileSyntaxError: the file is not YAML, as ``file:line:column: what is wrong``.
    """
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        what = " ".join(str(error.problem or error.context or "not valid YAML").split())
        start = error.context_mark if error.context and error.problem else None
        context = f" ({error.context} at {start.line + 1}:{start.column + 1})" if start else ""
        raise StackFileSyntaxError(f"{where}: {what}{context}; fix the YAML there") from None
    except yaml.YAMLError as error:
        raise StackFileSyntaxError(f"{path}: {' '.join(str(error).split())}; fix the YAML there") from None
    if document is None:
        return {}
    if not isinstance(document, Mapping) or not isinstance(document.get("config") or {}, Mapping):
        raise StackFileSyntaxError(f"{path}:1:1: expected a mapping with a `config:` mapping in it")
    return dict(document.get("config") or {})


def project_values(config: Mapping[str, Any]) -> dict[str, Any]:
    """The ``lakestack:*`` values of a stack file's ``config``, keyed without the prefix."""
    return {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith(f"{PROJECT}:")}


def _stack_file_keys(stack: str, project_dir: Path) -> list[str]:
    """The ``lakestack:*`` keys (without the prefix) in ``Pulumi.<stack>.yaml``; none when there is no file."""
    path = project_dir / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        return []
    return list(project_values(stack_file_config(path)))


def stack_cloud(stack: str, *, project_dir: Path | None = None) -> Cloud:
    """The ``lakestack:cloud`` of ``Pulumi.<stack>.yaml`` (``aws`` when unset or when there is no file).

    Raises:
        ConfigError: the value is not a cloud the kit knows.
    """
    path = (project_dir or PROJECT_DIR) / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        return "aws"
    raw = stack_file_config(path)
    return _parse_choice("lakestack:cloud", raw.get(f"{PROJECT}:cloud", "aws"), CLOUDS, where=path.name)
