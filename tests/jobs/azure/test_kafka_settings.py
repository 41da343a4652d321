"""The ingest job's C8 flags, the connection string's sources and Spark's Kafka options (Synapse's path).

No Spark needed; they run under pyspark 3.5 too (`make test-spark35`), so the Azure entry imports there.
"""

from __future__ import annotations

import argparse
import base64
import json

import pytest

from jobs import ingest
from jobs.__main__ import main as jobs_main
from jobs.errors import SettingsError
from jobs.lake import storage_options_for
from jobs.lake._azure import RenewingTokenOptions, azure_storage_options, token_expiry
from jobs.lake.engine import TableRef
from jobs.lake.errors import StorageConfigError
from jobs.sources.kafka import (
    ConnectionString,
    KafkaSettings,
    read_kafka_stream,
    resolve_connection_string,
    spark_kafka_options,
    vault_name,
)

HUB = "evh.servicebus.windows.net:9093"
C8_ARGV = [
    "--source", "kafka", "--kafka-bootstrap", HUB, "--topic", "events",
    "--kafka-key-vault", "https://kv-lake.vault.azure.net/", "--kafka-secret-name", "eh-listen",
    "--table", "abfss://lake@acct.dfs.core.windows.net/bronze/events",
    "--checkpoint", "abfss://checkpoints@acct.dfs.core.windows.net/ingest",
]  # fmt: skip


def _parse(argv: list[str]) -> ingest.IngestSettings:
    parser = argparse.ArgumentParser()
    ingest.add_arguments(parser)
    return ingest.settings_from_args(parser.parse_args(argv))


def test_c8_flags_build_the_kafka_settings_synapse_runs_with():
    settings = _parse(C8_ARGV)
    assert (settings.source, settings.stream, settings.table) == (
        "kafka",
        "",
        "abfss://lake@acct.dfs.core.windows.net/bronze/events",
    )
    assert settings.kafka == KafkaSettings(
        bootstrap=HUB, topic="events", key_vault="https://kv-lake.vault.azure.net/", secret_name="eh-listen"
    )
    assert ingest.stream_label(settings) == "events"


def test_kinesis_stays_the_default_with_todays_flags():
    settings = _parse(["--stream", "s", "--region", "eu-west-1", "--table", "t", "--checkpoint", "c"])
    assert (settings.source, settings.stream, settings.region, settings.kafka) == (
        "kinesis",
        "s",
        "eu-west-1",
        None,
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--table", "t", "--checkpoint", "c"], r"--stream: expected a Kinesis stream name, found an empty value \(or pass --source kafka\)"),
        (["--stream", "s", "--table", "t", "--checkpoint", "c"], "--region: expected the Kinesis stream's AWS region"),
        (["--source", "kafka", "--topic", "e", "--table", "t", "--checkpoint", "c"], "expected --kafka-bootstrap"),
        (
            ["--source", "kafka", "--kafka-bootstrap", HUB, "--topic", "e", "--table", "t", "--checkpoint", "c"],
            "reached over SASL_SSL only, and no connection string was given",
        ),
        (
            ["--source", "kafka", "--kafka-bootstrap", HUB, "--topic", "e", "--kafka-key-vault", "kv",
             "--table", "t", "--checkpoint", "c"],
            "--kafka-key-vault and --kafka-secret-name go together",
        ),
        (
            ["--source", "kafka", "--kafka-bootstrap", "evh.servicebus.windows.net", "--topic", "e",
             "--table", "t", "--checkpoint", "c"],
            "expected HOST:PORT",
        ),
    ],
)  # fmt: skip
def test_bad_flags_are_refused_naming_the_flag(argv, message):
    with pytest.raises(SettingsError, match=message):
        _parse(argv)


def test_plaintext_only_to_a_broker_on_this_machine():
    assert not KafkaSettings(bootstrap="127.0.0.1:9092,localhost:9093", topic="e").authenticated
    with pytest.raises(SettingsError, match=r"a broker off this machine \(10.0.0.5\)"):
        KafkaSettings(bootstrap="127.0.0.1:9092,10.0.0.5:9092", topic="e")


def test_the_job_entry_prints_one_line_for_bad_flags(capsys):
    assert (
        jobs_main(["ingest", "--source", "kafka", "--topic", "e", "--table", "t", "--checkpoint", "c"]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: --source kafka: expected --kafka-bootstrap")
    assert "Traceback" not in err


class FakeSynapseCredentials:
    """Records what the job asked mssparkutils.credentials for (the runtime is not here)."""

    def __init__(self, value: str) -> None:
        self.value = value
        self.calls: list[tuple[str, ...]] = []

    def getSecret(self, *args: str) -> str:
        self.calls.append(args)
        return self.value


def test_the_connection_string_comes_from_key_vault_by_vault_name_and_is_masked():
    secrets = FakeSynapseCredentials("Endpoint=sb://evh.servicebus.windows.net/;SharedAccessKey=k")
    settings = _parse(C8_ARGV).kafka
    assert settings is not None

    secret = resolve_connection_string(settings, {}, synapse_secrets=secrets)

    assert secrets.calls == [("kv-lake", "eh-listen")]
    assert secret is not None and secret.reveal().endswith("SharedAccessKey=k")
    assert "SharedAccessKey" not in repr(secret) + str(secret)


def test_key_vault_off_synapse_says_what_to_use_instead():
    settings = KafkaSettings(bootstrap=HUB, topic="e", key_vault="kv", secret_name="s")
    with pytest.raises(SettingsError, match="Off Synapse pass --kafka-secret-env VAR"):
        resolve_connection_string(settings, {})


def test_the_connection_string_from_an_environment_variable():
    settings = KafkaSettings(bootstrap=HUB, topic="e", secret_env="EH_CONN")
    assert resolve_connection_string(settings, {"EH_CONN": "Endpoint=sb://x/"}).reveal() == "Endpoint=sb://x/"  # type: ignore[union-attr]
    with pytest.raises(SettingsError, match=r"found it unset or empty"):
        resolve_connection_string(settings, {"EH_CONN": ""})
    assert resolve_connection_string(KafkaSettings(bootstrap="127.0.0.1:1", topic="e"), {}) is None


def test_spark_kafka_options_for_event_hubs():
    settings = KafkaSettings(bootstrap=HUB, topic="events", secret_env="X", max_offsets_per_trigger=5000)
    options = spark_kafka_options(settings, ConnectionString("Endpoint=sb://evh/;SharedAccessKey=k"))
    assert options == {
        "kafka.bootstrap.servers": HUB,
        "subscribe": "events",
        "startingOffsets": "earliest",
        "failOnDataLoss": "true",
        "maxOffsetsPerTrigger": "5000",
        "includeHeaders": "false",
        "kafka.request.timeout.ms": "60000",
        "kafka.session.timeout.ms": "30000",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="$ConnectionString" password="Endpoint=sb://evh/;SharedAccessKey=k";',
    }
    local = spark_kafka_options(KafkaSettings(bootstrap="127.0.0.1:9092", topic="events"), None)
    assert local["kafka.security.protocol"] == "PLAINTEXT" and "kafka.sasl.jaas.config" not in local


@pytest.mark.parametrize(
    ("given", "name"),
    [
        ("kv-lake", "kv-lake"),
        ("https://kv-lake.vault.azure.net/", "kv-lake"),
        ("https://kv.vault.azure.net", "kv"),
    ],
)
def test_vault_name(given, name):
    assert vault_name(given) == name


def _jwt(expiry: int) -> str:
    claims = base64.urlsafe_b64encode(json.dumps({"exp": expiry}).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJub25lIn0.{claims}.sig"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"AZURITE_BLOB_STORAGE_URL": "http://127.0.0.1:10000"}, {"AZURE_STORAGE_USE_EMULATOR": "true"}),
        (
            {"AZURE_CLIENT_ID": "id", "AZURE_FEDERATED_TOKEN_FILE": "/f"},
            {"AZURE_STORAGE_ACCOUNT_NAME": "devstoreaccount1"},
        ),
        ({}, {"AZURE_STORAGE_ACCOUNT_NAME": "devstoreaccount1"}),
    ],
)
def test_azure_options_by_environment_never_carry_a_key(environ, expected):
    assert azure_storage_options("devstoreaccount1", environ) == expected


def test_the_emulator_serves_its_development_account_only():
    with pytest.raises(
        StorageConfigError, match="serves the account 'devstoreaccount1'; the table URI names 'acct'"
    ):
        azure_storage_options("acct", {"AZURITE_BLOB_STORAGE_URL": "http://127.0.0.1:1"})


def test_synapse_token_is_renewed_before_it_expires_on_every_table_operation():
    now = [1_000.0]
    issued = [_jwt(4_600), _jwt(8_200)]
    assert isinstance(
        azure_storage_options("acct", {}, token_source=lambda: _jwt(9_999)), RenewingTokenOptions
    )
    options = RenewingTokenOptions("acct", lambda: issued.pop(0), clock=lambda: now[0])
    ref = TableRef("abfss://lake@acct.dfs.core.windows.net/t", options)

    assert dict(ref.storage_options) == {"AZURE_STORAGE_ACCOUNT_NAME": "acct", "BEARER_TOKEN": _jwt(4_600)}
    now[0] = 4_400.0  # within five minutes of expiry: the next read renews
    assert dict(ref.storage_options)["BEARER_TOKEN"] == _jwt(8_200)
    assert "eyJ" not in repr(options)
    assert token_expiry(_jwt(4_600)) == 4_600.0 and token_expiry("opaque") is None


def test_engine_handles_keep_renewing_options_and_copy_plain_ones():
    from jobs.lake import DeltaRsEngine

    renewing = RenewingTokenOptions("acct", lambda: _jwt(10**10))
    plain = {"AZURE_STORAGE_ACCOUNT_NAME": "acct"}
    engine = DeltaRsEngine()
    assert (
        engine.table("abfss://l@acct.dfs.core.windows.net/t", storage_options=renewing).ref.storage_options
        is renewing
    )
    assert (
        engine.table("abfss://l@acct.dfs.core.windows.net/t", storage_options=plain).ref.storage_options
        is not plain
    )


def test_storage_options_for_an_adls_uri_names_the_account(monkeypatch):
    monkeypatch.delenv("AZURITE_BLOB_STORAGE_URL", raising=False)
    assert storage_options_for("abfss://lake@lakestackdev.dfs.core.windows.net/bronze/events") == {
        "AZURE_STORAGE_ACCOUNT_NAME": "lakestackdev"
    }


def test_without_spark_s_kafka_jar_the_source_says_which_jar_to_fetch():
    class NoJvm:  # a session whose JVM cannot load the Kafka source
        _jvm = None

    settings = KafkaSettings(bootstrap="127.0.0.1:9092", topic="events")
    with pytest.raises(
        SettingsError,
        match=r"Kafka source \(org\.apache\.spark\.sql\.kafka010\.KafkaSourceProvider\) is not on this session's classpath\. Synapse ships it; locally `make jars`",
    ):
        read_kafka_stream(NoJvm(), settings, secret=None)  # type: ignore[arg-type]
