"""Azure stack settings: the shipped azure-dev stack, sizing, throughput units, refusals, the price table and
the plan's security section."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.azure.plan import plan_summary, security_posture
from infra.azure.pricing import estimate_hourly_cost
from infra.azure.settings import load_azure_settings, parse_azure_settings, throughput_units
from infra.config import stack_cloud
from infra.errors import ConfigError
from infra.settings import load_any_settings


def test_azure_dev_stack_settings_read_without_pulumi_cli():
    settings = load_azure_settings("azure-dev")
    assert settings.tags["lakestack:stack"] == "azure-dev"
    assert (settings.cloud, settings.location, settings.name_prefix) == ("azure", "eastus", "lakestack-azdev")
    assert (settings.resource_group, settings.workspace_name, settings.storage_account) == (
        "lakestack-azdev-rg",
        "lakestack-azdev",
        "lakestackazdev",
    )
    s = settings.stream
    assert (s.namespace, s.name, s.partitions, s.retention_hours) == (
        "lakestack-azdev-events",
        "events",
        8,
        24,
    )
    assert (s.throughput_units, s.max_throughput_units) == (2, 4)
    sizing = settings.sizing
    assert (
        sizing.workers,
        sizing.nodes,
        sizing.max_nodes,
        sizing.executor_cores,
        sizing.executor_memory_gb,
    ) == (
        2,
        3,
        5,
        4,
        28,
    )
    assert settings.allowed_ip_ranges == ()
    assert settings.pipelines == ("ingest",)
    assert settings.kafka_bootstrap == "lakestack-azdev-events.servicebus.windows.net:9093"


def test_the_stack_file_decides_which_parser_reads_it(tmp_path: Path):
    assert stack_cloud("azure-dev") == "azure"
    assert stack_cloud("dev") == "aws"
    assert load_any_settings("azure-dev").cloud == "azure"
    assert load_any_settings("dev").cloud == "aws"
    (tmp_path / "Pulumi.x.yaml").write_text("config:\n  lakestack:cloud: gcp\n")
    with pytest.raises(ConfigError, match=r"lakestack:cloud = 'gcp'; expected one of aws, azure"):
        stack_cloud("x", project_dir=tmp_path)


@pytest.mark.parametrize(
    ("parallelism", "per_worker", "node_size", "expected"),
    [
        # (workers, nodes, executor cores, executor memory GB): a pool has at least 3 nodes, one the driver's.
        (1, 4, "Small", (1, 3, 4, 28)),
        (8, 4, "Small", (2, 3, 4, 28)),
        (9, 4, "Small", (3, 4, 4, 28)),
        (16, 8, "Medium", (2, 3, 8, 56)),
        (6, 2, "Large", (3, 4, 2, 112)),
        (64, 32, "XLarge", (2, 3, 32, 224)),
    ],
)
def test_pool_sizing_follows_the_kpu_rule(parallelism, per_worker, node_size, expected):
    settings = parse_azure_settings(
        "t",
        {
            "parallelism": parallelism,
            "parallelismPerWorker": per_worker,
            "cluster": {"nodeSize": node_size},
            "stream": {"partitions": 4},
        },
    )
    s = settings.sizing
    assert (s.workers, s.nodes, s.executor_cores, s.executor_memory_gb) == expected


@pytest.mark.parametrize(
    ("events", "event_bytes", "units"),
    [(1, 1, 1), (1000, 1000, 1), (1001, 100, 2), (2000, 512, 2), (1000, 4096, 5), (30_000, 200, 30)],
)
def test_throughput_units_cover_events_and_bytes(events, event_bytes, units):
    assert throughput_units(events_per_second=events, event_bytes=event_bytes) == units


def test_partitions_follow_parallelism_unless_set():
    assert parse_azure_settings("t", {"parallelism": 12}).stream.partitions == 12
    assert (
        parse_azure_settings("t", {"parallelism": 40, "stream": {"partitions": 32}}).stream.partitions == 32
    )


def test_allowed_ranges_are_normalised():
    settings = parse_azure_settings(
        "t", {"network": {"allowedIpRanges": ["198.51.100.7/32", "203.0.113.0/28"]}}
    )
    assert settings.allowed_ip_ranges == ("198.51.100.7", "203.0.113.0/28")


@pytest.mark.parametrize(
    ("config", "key", "value", "allowed"),
    [
        ({"parallelism": 0}, "lakestack:parallelism", "0", "an integer >= 1"),
        (
            {"parallelism": 40},
            "lakestack:parallelism",
            "40",
            "at most 32 when lakestack:stream.partitions is unset",
        ),
        ({"stream": {"partitions": 33}}, "lakestack:stream.partitions", "33", "an integer from 1 to 32"),
        (
            {"stream": {"retentionHours": 200}},
            "lakestack:stream.retentionHours",
            "200",
            "an integer from 1 to 168",
        ),
        (
            {"stream": {"expectedEventsPerSecond": 50_000}},
            "lakestack:stream.expectedEventsPerSecond",
            "50000",
            "a rate that fits 40 throughput units (Event Hubs Standard's maximum; 50000 events/s of 512 bytes needs 50)",
        ),
        (
            {"stream": {"expectedEventsPerSecond": 5000, "maxThroughputUnits": 2}},
            "lakestack:stream.maxThroughputUnits",
            "2",
            "an integer from 5 (the units the expected rate needs) to 40",
        ),
        (
            {"stream": {"mode": "provisioned"}},
            "lakestack:stream.mode",
            "'provisioned'",
            "one of the keys name",
        ),
        ({"stream": {"namespace": "ab"}}, "lakestack:stream.namespace", "'ab'", "6 to 50 letters"),
        ({"cluster": {"nodeSize": "Tiny"}}, "lakestack:cluster.nodeSize", "'Tiny'", "one of Small, Medium"),
        ({"cluster": {"sparkVersion": "3.4"}}, "lakestack:cluster.sparkVersion", "'3.4'", "one of 3.5"),
        (
            {"cluster": {"idleTimeoutMinutes": 2}},
            "lakestack:cluster.idleTimeoutMinutes",
            "2",
            "an integer from 5 to 10080",
        ),
        (
            {"parallelism": 8, "cluster": {"maxWorkers": 1}},
            "lakestack:cluster.maxWorkers",
            "1",
            "an integer from 2 (the workers parallelism 8 needs at 4 per worker) to 199",
        ),
        (
            {"parallelismPerWorker": 5},
            "lakestack:parallelismPerWorker",
            "5",
            "an integer from 1 to 4 (the vCores of a Small node)",
        ),
        ({"storageAccount": "Lake-Stack"}, "lakestack:storageAccount", "'Lake-Stack'", "3 to 24 lowercase"),
        (
            {"network": {"allowedIpRanges": ["192.168.1.0/24"]}},
            "lakestack:network.allowedIpRanges",
            "'192.168.1.0/24'",
            "public IPv4 addresses",
        ),
        (
            {"network": {"allowedIpRanges": ["198.51.100.7/20"]}},
            "lakestack:network.allowedIpRanges",
            "'198.51.100.7/20'",
            "public IPv4 addresses",
        ),
        (
            {"security": {"logRetentionDays": 7}},
            "lakestack:security.logRetentionDays",
            "7",
            "an integer from 30 to 730",
        ),
        (
            {"security": {"storageFirewall": "maybe"}},
            "lakestack:security.storageFirewall",
            "'maybe'",
            "true or false",
        ),
        ({"deployerType": "Robot"}, "lakestack:deployerType", "'Robot'", "one of User, ServicePrincipal"),
        ({"buckets": {"lake": "x"}}, "lakestack:buckets", "{'lake': 'x'}", "one of lakestack:cloud"),
        ({"pipelines": ["ingest", "etl"]}, "lakestack:pipelines", "'etl'", "pipeline names among ingest"),
    ],
)
def test_invalid_configuration_is_refused_naming_key_value_and_what_is_allowed(config, key, value, allowed):
    with pytest.raises(ConfigError) as caught:
        parse_azure_settings("t", config, where="Pulumi.t.yaml")
    message = str(caught.value)
    assert caught.value.key == key
    assert f"{key} = {value};" in message
    assert f"expected {allowed}" in message
    assert "Pulumi.t.yaml" in message


def test_invalid_location_is_refused():
    with pytest.raises(
        ConfigError, match=r"azure-native:location = 'East US'; expected an Azure region name"
    ):
        parse_azure_settings("t", {}, location="East US")


def test_azure_dev_hourly_cost_from_the_azure_price_table():
    estimate = estimate_hourly_cost(load_azure_settings("azure-dev"))
    # 3 Small nodes x 4 vCores x 0.143 + 4 private endpoints x 0.01 + 2 TUs x 0.03; max: 5 nodes.
    assert estimate.lines == {"spark_pool": 1.716, "private_endpoints": 0.04, "event_hub_units": 0.06}
    assert estimate.hourly_usd == 1.816
    assert estimate.hourly_usd_at_max_workers == 2.96
    assert estimate.prices_as_of == "2026-11-24"


def test_stack_without_pool_pays_for_event_hubs_only():
    estimate = estimate_hourly_cost(parse_azure_settings("t", {"cluster": {"enabled": False}}))
    assert estimate.lines == {"event_hub_units": 0.03}
    assert (estimate.hourly_usd, estimate.hourly_usd_at_max_workers) == (0.03, 0.03)


def test_plan_has_the_aws_keys_and_the_security_section():
    plan = plan_summary(load_azure_settings("azure-dev"))
    assert set(plan) == {
        "runtime",
        "pipelines",
        "buckets",
        "expires_at",
        "loadgen",
        "usd_per_gb",
        "per_gb_lines",
        "loadgen_hourly_cost_usd",
        "stack",
        "cloud",
        "region",
        "workers",
        "max_workers",
        "executor_cores",
        "executor_memory_gb",
        "instance_type",
        "stream_mode",
        "shards",
        "hourly_cost_usd",
        "hourly_cost_usd_at_max_workers",
        "prices_as_of",
        "cost_lines",
        "notes",
        "security",
        "capacity",
        "pool_libraries",
    }
    # What the pool installs over its runtime: requirements-spark35.lock's pins (the Synapse-line tests' versions).
    assert plan["pool_libraries"] == [
        "arro3-core==0.9.1",
        "deltalake==1.6.6",
        "deprecated==1.3.1",
        "pyarrow==19.0.1",
        "typing-extensions==4.16.0",
        "wrapt==2.5.2",
    ]
    assert (plan["instance_type"], plan["stream_mode"], plan["shards"], plan["workers"]) == (
        "Small",
        "standard",
        8,
        2,
    )
    assert sorted(plan["security"]) == ["deviations", "encryption", "identities", "logging", "network"]
    assert plan["buckets"]["lake"] == "abfss://lake@lakestackazdev.dfs.core.windows.net/"
    assert (plan["pipelines"], plan["loadgen"]) == (["ingest"], None)
    # 1 GB of 512-byte events is 1.95M events at 0.028 USD per million.
    assert plan["per_gb_lines"] == {"event_hubs_ingress": 0.0547}
    assert plan["security"]["deviations"] == []
    assert (
        "pulumi up refuses this stack until lakestack:network.allowedIpRanges lists your public address"
        in plan["notes"]
    )


def test_every_switched_off_control_is_a_deviation_naming_its_key():
    settings = parse_azure_settings(
        "t",
        {
            "security": {"storageFirewall": False, "storageSharedKey": True, "diagnostics": False},
            "network": {"allowedIpRanges": ["198.51.100.7"]},
        },
    )
    posture = security_posture(settings)
    assert [line.rsplit("(", 1)[1] for line in posture.deviations] == [
        "lakestack:security.storageFirewall: false)",
        "lakestack:security.storageSharedKey: true)",
        "lakestack:security.diagnostics: false)",
    ]
    assert posture.network[0] == "storage: reachable from any network (firewall off); no public blob access"
    assert posture.logging == ("no diagnostic settings",)
    assert posture.identities[0] == "storage: Entra ID, account keys and SAS"


def test_security_section_names_the_allowed_ranges():
    settings = parse_azure_settings("t", {"network": {"allowedIpRanges": ["198.51.100.7"]}})
    posture = security_posture(settings)
    assert (
        posture.network[1]
        == "Event Hubs: denies by default; allowed: 198.51.100.7, the Spark pool by private endpoint"
    )
    assert list(posture.logging) == [
        "diagnostic settings (all log categories) to Log Analytics lakestack-t-logs, kept 30 days: storage (blob), "
        "Event Hubs, Key Vault, Synapse workspace, Spark pool"
    ]
    unset = security_posture(parse_azure_settings("t", {}))
    assert unset.network[0] == "no address range allowed in (lakestack:network.allowedIpRanges)"
