from __future__ import annotations

from pathlib import Path

import pytest

from infra.config import load_stack_settings, parse_settings
from infra.errors import ConfigError
from infra.pricing import estimate_hourly_cost


def test_dev_stack_settings_read_without_pulumi_cli():
    settings = load_stack_settings("dev")
    assert settings.cloud == "aws"
    assert settings.region == "us-east-1"
    assert settings.name_prefix == "lakestack-dev"
    assert settings.stream_name == "lakestack-dev-events"
    assert settings.bucket_names == {
        "lake": "lakestack-dev-lake",
        "checkpoints": "lakestack-dev-checkpoints",
        "artifacts": "lakestack-dev-artifacts",
        "logs": "lakestack-dev-logs",
    }
    sizing = settings.sizing
    assert (sizing.workers, sizing.executor_cores, sizing.executor_memory_gb) == (2, 4, 9)
    assert settings.cluster.max_workers == 4
    assert settings.pipelines == ("ingest",)
    assert settings.endpoint_url is None


def test_local_stack_points_at_the_emulator_and_declares_no_cluster():
    settings = load_stack_settings("local")
    assert settings.endpoint_url == "http://127.0.0.1:4566"
    assert settings.name_prefix == "lakestack-local"
    assert settings.stream_name == "lakestack-local-events"
    assert settings.bucket_names["lake"] == "lakestack-local-lake"
    assert settings.cluster.enabled is False
    assert settings.stream.mode == "on-demand"


@pytest.mark.parametrize(
    ("parallelism", "per_worker", "instance", "expected"),
    [
        (1, 4, "m5.xlarge", (1, 4, 9, 1024)),
        (8, 4, "m5.xlarge", (2, 4, 9, 1024)),
        (9, 4, "m5.xlarge", (3, 4, 9, 1024)),
        (16, 8, "m5.2xlarge", (2, 8, 20, 2048)),
        (6, 2, "r5.xlarge", (3, 2, 20, 2048)),
        (64, 16, "m5.4xlarge", (4, 16, 49, 5120)),
    ],
)
def test_sizing_follows_the_kpu_rule(parallelism, per_worker, instance, expected):
    settings = parse_settings(
        "t",
        {
            "parallelism": parallelism,
            "parallelismPerWorker": per_worker,
            "cluster": {"instanceType": instance},
        },
    )
    s = settings.sizing
    assert (s.workers, s.executor_cores, s.executor_memory_gb, s.executor_memory_overhead_mb) == expected


@pytest.mark.parametrize(
    ("config", "key", "value", "allowed"),
    [
        ({"parallelism": 0}, "lakestack:parallelism", "0", "an integer >= 1"),
        ({"parallelism": "many"}, "lakestack:parallelism", "'many'", "an integer >= 1"),
        (
            {"parallelismPerWorker": 8, "cluster": {"instanceType": "m5.xlarge"}},
            "lakestack:parallelismPerWorker",
            "8",
            "an integer from 1 to 4 (the vCPUs of m5.xlarge)",
        ),
        (
            {"stream": {"mode": "provisioned"}},
            "lakestack:stream.shards",
            "None",
            "a shard count >= 1 when lakestack:stream.mode is provisioned",
        ),
        ({"cloud": "gcp"}, "lakestack:cloud", "'gcp'", "one of aws, azure"),
        (
            {"cluster": {"instanceType": "t2.micro"}},
            "lakestack:cluster.instanceType",
            "'t2.micro'",
            "one of m5.xlarge",
        ),
        ({"stream": {"mode": "fast"}}, "lakestack:stream.mode", "'fast'", "on-demand or provisioned"),
        (
            {"stream": {"retentionHours": 2}},
            "lakestack:stream.retentionHours",
            "2",
            "an integer from 24 to 8760",
        ),
        (
            {"pipelines": ["ingest", "etl"]},
            "lakestack:pipelines",
            "'etl'",
            "pipeline names among ingest",
        ),
        (
            # Only jobs that exist are pipeline names: sales is refused until its job is built.
            {"pipelines": ["sales"]},
            "lakestack:pipelines",
            "'sales'",
            "pipeline names among ingest",
        ),
        (
            {"stream": {"mode": "burst"}},
            "lakestack:stream.mode",
            "'burst'",
            "on-demand or provisioned",
        ),
        (
            {"parallelism": 8, "cluster": {"maxWorkers": 1}},
            "lakestack:cluster.maxWorkers",
            "1",
            "an integer >= 2",
        ),
        ({"namePrefix": "Lake_Stack"}, "lakestack:namePrefix", "'Lake_Stack'", "lowercase letters"),
        ({"paralelism": 4}, "lakestack:paralelism", "4", "one of lakestack:cloud"),
    ],
)
def test_invalid_configuration_is_refused_naming_key_value_and_what_is_allowed(config, key, value, allowed):
    with pytest.raises(ConfigError) as caught:
        parse_settings("t", config, where="Pulumi.t.yaml")
    message = str(caught.value)
    assert caught.value.key == key
    assert f"{key} = {value};" in message
    assert f"expected {allowed}" in message
    assert "Pulumi.t.yaml" in message


def test_invalid_yaml_file_is_refused_before_anything_else(tmp_path: Path):
    (tmp_path / "Pulumi.bad.yaml").write_text(
        "config:\n  lakestack:parallelism: 8\n  lakestack:parallelismPerWorker: 16\n"
    )
    with pytest.raises(
        ConfigError, match=r"lakestack:parallelismPerWorker = 16; expected an integer from 1 to 4"
    ):
        load_stack_settings("bad", project_dir=tmp_path)


def test_missing_stack_file_names_the_stacks_found(tmp_path: Path):
    (tmp_path / "Pulumi.dev.yaml").write_text("config: {}\n")
    with pytest.raises(ConfigError, match=r"--stack = 'prod'.*found: Pulumi.dev.yaml"):
        load_stack_settings("prod", project_dir=tmp_path)


def test_dev_stack_hourly_cost_from_the_price_table():
    estimate = estimate_hourly_cost(load_stack_settings("dev"))
    # 3 x m5.xlarge (EC2 0.192 + EMR 0.048) + NAT 0.045 + on-demand stream 0.04 + KMS 1/730
    assert estimate.hourly_usd == 0.8064
    assert estimate.hourly_usd_at_max_workers == 1.2864
    assert estimate.prices_as_of == "2025-06-01"


def test_provisioned_stream_is_priced_per_shard():
    settings = parse_settings(
        "t",
        {"parallelism": 4, "stream": {"mode": "provisioned", "shards": 10}, "cluster": {"enabled": False}},
    )
    estimate = estimate_hourly_cost(settings)
    assert estimate.lines == {"stream_shards": 0.15, "kms_key": 0.0014}
