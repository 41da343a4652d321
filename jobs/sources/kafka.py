"""Event Hubs (its Kafka endpoint) or any Kafka broker as the ingest job's stream, on Spark 3.5 and 4.0.

The stream is Spark's own Kafka source (``format("kafka")``) everywhere: on Synapse (Spark 3.5, which ships its
jar) it reads the hub over SASL_SSL on port 9093, user ``$ConnectionString``, the connection string as password;
here it reads the local broker (Tansu, plaintext on loopback) with the pinned jar of either Spark line. Spark's
driver plans each micro-batch's offset ranges and records them in the checkpoint; the executors fetch the
records. :func:`kafka_to_records` maps its rows to the stream columns every ingest source gives.

Nothing here needs Spark 4: this module is part of the Azure path and is tested under pyspark 3.5.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from jobs.sources.errors import SourceSettingsError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

StartingOffsets = Literal["earliest", "latest"]
STARTING_OFFSETS: tuple[str, ...] = get_args(StartingOffsets)
SHARD_PREFIX = "partition-"
SPARK_KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})
# Event Hubs' guidance for Kafka clients: requests may take up to a minute under throttling.
_EVENT_HUBS_CLIENT_OPTIONS = {"kafka.request.timeout.ms": "60000", "kafka.session.timeout.ms": "30000"}


def _host_port(server: str) -> tuple[str, int] | None:
    host, sep, port = server.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost: the only places a plaintext connection is allowed."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class KafkaSettings:
    """The Kafka source of the ingest job (contract C8), validated once at start-up.

    With no secret option the connection is plaintext, which is allowed to a loopback broker only (the local
    stand-in for Event Hubs); anything else needs the Event Hubs connection string, from an environment
    variable (``secret_env``) or a Key Vault secret (``key_vault`` + ``secret_name``, read on Synapse).
    """

    bootstrap: str
    topic: str
    secret_env: str | None = None
    key_vault: str | None = None
    secret_name: str | None = None
    key_vault_linked_service: str | None = None
    starting_offsets: StartingOffsets = "earliest"
    max_offsets_per_trigger: int = 100_000
    fail_on_data_loss: bool = True
    servers: tuple[tuple[str, int], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        servers = [_host_port(s) for s in self.bootstrap.split(",") if s.strip()]
        if not servers or any(s is None for s in servers):
            raise SourceSettingsError(
                f"--kafka-bootstrap: expected HOST:PORT[,HOST:PORT...] (Event Hubs: "
                f"<namespace>.servicebus.windows.net:9093), found {self.bootstrap!r}."
            )
        object.__setattr__(self, "servers", tuple(s for s in servers if s is not None))
        if not self.topic.strip():
            raise SourceSettingsError("--topic: expected the Event Hub (Kafka topic) name, found nothing.")
        self._check_secret_options()
        if self.starting_offsets not in STARTING_OFFSETS:
            raise SourceSettingsError(
                f"--starting-offsets: expected one of {', '.join(STARTING_OFFSETS)}, found {self.starting_offsets!r}."
            )
        if self.max_offsets_per_trigger < 1:
            raise SourceSettingsError(
                f"--max-offsets-per-trigger: expected a whole number of at least 1, found {self.max_offsets_per_trigger}."
            )

    def _check_secret_options(self) -> None:
        if (self.key_vault is None) != (self.secret_name is None):
            raise SourceSettingsError(
                "--kafka-key-vault and --kafka-secret-name go together: the vault and the name of the secret "
                "holding the Event Hubs connection string; one was given without the other."
            )
        if self.key_vault is not None and self.secret_env is not None:
            raise SourceSettingsError(
                "expected one source of the connection string, found both --kafka-secret-env and "
                "--kafka-key-vault. Keep the Key Vault on Synapse, the environment variable elsewhere."
            )
        if self.key_vault_linked_service is not None and self.key_vault is None:
            raise SourceSettingsError("--kafka-key-vault-linked-service needs --kafka-key-vault.")
        remote = [host for host, _ in self.servers if not is_loopback(host)]
        if remote and not self.authenticated:
            raise SourceSettingsError(
                f"--kafka-bootstrap {self.bootstrap}: a broker off this machine ({remote[0]}) is reached over "
                "SASL_SSL only, and no connection string was given. Pass --kafka-key-vault VAULT "
                "--kafka-secret-name NAME (Synapse) or --kafka-secret-env VAR."
            )

    @property
    def authenticated(self) -> bool:
        """True when the connection is SASL_SSL with a connection string (Event Hubs)."""
        return self.secret_env is not None or self.key_vault is not None


class ConnectionString:
    """The Event Hubs connection string: shown nowhere (repr and str are masked)."""

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "ConnectionString(***)"

    __str__ = __repr__


def vault_name(vault: str) -> str:
    """A Key Vault's name from its name or its URI (``https://<name>.vault.azure.net/``)."""
    text = vault.strip().rstrip("/")
    if "://" in text:
        text = text.split("://", 1)[1].split("/", 1)[0].split(".", 1)[0]
    return text


def resolve_connection_string(
    settings: KafkaSettings, environ: Mapping[str, str], *, synapse_secrets: Any = None
) -> ConnectionString | None:
    """Read the connection string once, at job start: None for a plaintext (loopback) broker.

    Args:
        settings: the source settings.
        environ: the process environment (for ``--kafka-secret-env``).
        synapse_secrets: the runtime's ``mssparkutils.credentials``; looked up when None.

    Raises:
        SourceSettingsError: the variable is unset or empty, the secret is empty, or Key Vault was asked for
            outside Synapse.
    """
    if settings.secret_env is not None:
        value = environ.get(settings.secret_env, "")
        if not value:
            raise SourceSettingsError(
                f"--kafka-secret-env {settings.secret_env}: expected the Event Hubs connection string in "
                f"${settings.secret_env}, found it unset or empty. Export it, or use --kafka-key-vault."
            )
        return ConnectionString(value)
    if settings.key_vault is None or settings.secret_name is None:
        return None
    secrets = synapse_secrets if synapse_secrets is not None else _synapse_credentials()
    vault = vault_name(settings.key_vault)
    args = [vault, settings.secret_name]
    if settings.key_vault_linked_service:
        args.append(settings.key_vault_linked_service)
    value = str(secrets.getSecret(*args) or "")
    if not value:
        raise SourceSettingsError(
            f"Key Vault {vault!r} secret {settings.secret_name!r}: expected the Event Hubs connection string, "
            "found an empty value. Check the secret, and that the workspace identity may get it."
        )
    return ConnectionString(value)


def _synapse_credentials() -> Any:
    try:
        from notebookutils import mssparkutils  # type: ignore[import-not-found]
    except ImportError:
        raise SourceSettingsError(
            "--kafka-key-vault reads the connection string through the Synapse runtime (mssparkutils), which "
            "is not here. Off Synapse pass --kafka-secret-env VAR with the connection string in $VAR."
        ) from None
    return mssparkutils.credentials


def jaas_config(secret: ConnectionString) -> str:
    """The SASL PLAIN login of Event Hubs' Kafka endpoint (user ``$ConnectionString``)."""
    value = secret.reveal()
    if '"' in value or "\n" in value:
        raise SourceSettingsError(
            "the Event Hubs connection string contains a double quote or a line break, which no Event Hubs "
            "connection string has; check the secret's value."
        )
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="$ConnectionString" password="{value}";'
    )


def spark_kafka_options(settings: KafkaSettings, secret: ConnectionString | None) -> dict[str, str]:
    """Options of Spark's built-in Kafka source for these settings. Holds the secret: never log them."""
    options = {
        "kafka.bootstrap.servers": settings.bootstrap,
        "subscribe": settings.topic,
        "startingOffsets": settings.starting_offsets,
        "failOnDataLoss": str(settings.fail_on_data_loss).lower(),
        "maxOffsetsPerTrigger": str(settings.max_offsets_per_trigger),
        "includeHeaders": "false",
    }
    if secret is None:
        return {**options, "kafka.security.protocol": "PLAINTEXT"}
    return {
        **options,
        **_EVENT_HUBS_CLIENT_OPTIONS,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": jaas_config(secret),
    }


def kafka_to_records(kafka: DataFrame) -> DataFrame:
    """Map Kafka source rows to the stream columns every ingest source gives (C8).

    partition 0 -> ``shard_id`` ``"partition-0"``, offset -> ``sequence_number`` (decimal string),
    key -> ``partition_key`` (UTF-8; empty when the message has none), timestamp -> ``arrival_time``;
    the value's bytes are ``data``, untouched.
    """
    from pyspark.sql import functions as F

    return kafka.select(
        F.col("value").alias("data"),
        F.coalesce(F.col("key").cast("string"), F.lit("")).alias("partition_key"),
        F.concat(F.lit(SHARD_PREFIX), F.col("partition").cast("string")).alias("shard_id"),
        F.col("offset").cast("string").alias("sequence_number"),
        F.col("timestamp").alias("arrival_time"),
    )


def spark_has_kafka_source(spark: SparkSession) -> bool:
    """True when Spark's built-in Kafka source class loads in this session's JVM."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        loader.loadClass(SPARK_KAFKA_PROVIDER)
    except Exception:  # py4j wraps ClassNotFoundException in its own error type
        return False
    return True


def read_kafka_stream(
    spark: SparkSession, settings: KafkaSettings, *, secret: ConnectionString | None
) -> DataFrame:
    """Spark's Kafka source over the topic, in the stream columns (see :func:`kafka_to_records`).

    Args:
        spark: the session; its JVM must have Spark's Kafka source (Synapse ships it; locally the pinned jars).
        settings: the source settings.
        secret: the Event Hubs connection string (SASL_SSL), or None for a plaintext loopback broker.

    Raises:
        SourceSettingsError: Spark's Kafka source is not on the session's classpath.
    """
    if not spark_has_kafka_source(spark):
        raise SourceSettingsError(
            f"Spark's Kafka source ({SPARK_KAFKA_PROVIDER}) is not on this session's classpath. Synapse ships it; "
            "locally `make jars` (Spark 4.1) or `make jars-spark35` fetches the pinned spark-sql-kafka-0-10 jar; "
            "elsewhere add that package at Spark's exact version."
        )
    log.info(
        "kafka source: topic %s at %s (%s), at most %d records per micro-batch",
        settings.topic,
        settings.bootstrap,
        "SASL_SSL" if secret is not None else "plaintext",
        settings.max_offsets_per_trigger,
    )
    frame = spark.readStream.format("kafka").options(**spark_kafka_options(settings, secret)).load()
    return kafka_to_records(frame)


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--source kafka`` flags of the ingest job (contract C8)."""
    group = parser.add_argument_group("Kafka / Event Hubs source (--source kafka)")
    group.add_argument(
        "--kafka-bootstrap",
        default=None,
        metavar="HOST:PORT",
        help="Kafka bootstrap servers; Event Hubs: <namespace>.servicebus.windows.net:9093",
    )
    group.add_argument("--topic", default=None, help="Kafka topic (the Event Hub's name)")
    group.add_argument(
        "--kafka-secret-env",
        default=None,
        metavar="VAR",
        help="environment variable holding the Event Hubs connection string (SASL_SSL)",
    )
    group.add_argument(
        "--kafka-key-vault",
        default=None,
        metavar="VAULT",
        help="Key Vault holding the connection string (Synapse)",
    )
    group.add_argument(
        "--kafka-secret-name", default=None, metavar="NAME", help="name of that Key Vault secret"
    )
    group.add_argument(
        "--kafka-key-vault-linked-service",
        default=None,
        metavar="NAME",
        help="Synapse linked service to the vault (the secret is then read with the workspace identity)",
    )
    group.add_argument(
        "--starting-offsets",
        default="earliest",
        choices=STARTING_OFFSETS,
        help="where a new query starts in each partition (default: %(default)s)",
    )
    group.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        default=100_000,
        help="cap on records per micro-batch, over all partitions (default: %(default)s)",
    )


def kafka_settings_from_args(args: argparse.Namespace, *, fail_on_data_loss: bool) -> KafkaSettings:
    """Build :class:`KafkaSettings` from the parsed flags.

    Raises:
        SourceSettingsError: a required flag is missing or a value is invalid.
    """
    missing = [
        flag
        for flag, value in (("--kafka-bootstrap", args.kafka_bootstrap), ("--topic", args.topic))
        if not value
    ]
    if missing:
        raise SourceSettingsError(f"--source kafka: expected {' and '.join(missing)}, found none.")
    return KafkaSettings(
        bootstrap=args.kafka_bootstrap,
        topic=args.topic,
        secret_env=args.kafka_secret_env,
        key_vault=args.kafka_key_vault,
        secret_name=args.kafka_secret_name,
        key_vault_linked_service=args.kafka_key_vault_linked_service,
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        fail_on_data_loss=fail_on_data_loss,
    )


__all__ = [
    "ConnectionString",
    "KafkaSettings",
    "add_kafka_arguments",
    "kafka_settings_from_args",
    "kafka_to_records",
    "read_kafka_stream",
    "resolve_connection_string",
    "spark_kafka_options",
]
