from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from infra.config import load_stack_settings, parse_settings
from infra.errors import ConfigError, StackFileSyntaxError
from infra.pricing import estimate_hourly_cost, interface_endpoint_plan, load_prices


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
            "pipeline names among ingest, sales",
        ),
        (
            {"pipelines": ["ingest", "order-mor"]},
            "lakestack:pipelines",
            "'order-mor'",
            "pipeline names among ingest, sales, fraud, orders-cow, orders-mor, maintenance (orders: both "
            "layouts); did you mean orders-mor?",
        ),
        (
            {"stream": {"mode": "burst"}},
            "lakestack:stream.mode",
            "'burst'",
            "on-demand or provisioned",
        ),
        (
            # The value out of range is the parallelism; maxWorkers x parallelismPerWorker sets the range.
            {"parallelism": 8, "cluster": {"maxWorkers": 1}},
            "lakestack:parallelism",
            "8",
            "an integer from 1 to 4 (lakestack:cluster.maxWorkers 1 x lakestack:parallelismPerWorker 4); lower "
            "it, or raise lakestack:cluster.maxWorkers to at least 2",
        ),
        ({"namePrefix": "Lake_Stack"}, "lakestack:namePrefix", "'Lake_Stack'", "lowercase letters"),
        ({"paralelism": 4}, "lakestack:paralelism", "4", "one of lakestack:cloud"),
        ({"cluster": {"maxWorker": 4}}, "lakestack:cluster.maxWorker", "4", "one of the keys enabled"),
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
    assert estimate.lines == {
        "cluster_primary": 0.24,  # EC2 0.192 + EMR 0.048
        "cluster_core": 0.48,
        # (32 root + 32 data) + 2 x (32 root + 64 data) GB of gp3 at 0.08 per GB-month
        "ebs_volumes": 0.0281,
        "nat_gateway": 0.045,
        "public_ipv4": 0.005,
        "stream_on_demand": 0.04,
        # The Kinesis interface endpoint, in the private subnet's one zone (auto: it pays at the planned load).
        "vpc_endpoints": 0.01,
        "kms_key": 0.0014,
        "cloudwatch": 0.0042,  # dashboard 3.00 + alarm 0.10 per month
    }
    assert estimate.hourly_usd == 0.8537
    # Two more core nodes, each 0.24 plus 96 GB of EBS.
    assert estimate.hourly_usd_at_max_workers == 1.3547
    # Per GB of events: on-demand ingest and retrieval, and the ingest job's reads through the Kinesis endpoint
    # (0.01 per GB, where the NAT charged 0.045).
    assert estimate.per_gb_lines == {
        "kinesis_ingest": 0.08,
        "kinesis_retrieval": 0.04,
        "kinesis_endpoint": 0.01,
    }
    assert estimate.usd_per_gb == 0.13
    assert estimate.loadgen_hourly_usd is None
    assert estimate.prices_as_of == "2025-06-01"


def test_provisioned_stream_is_priced_per_shard():
    settings = parse_settings(
        "t",
        {
            "namePrefix": "team-t",
            "parallelism": 4,
            "stream": {"mode": "provisioned", "shards": 10},
            "cluster": {"enabled": False},
        },
    )
    estimate = estimate_hourly_cost(settings)
    assert estimate.lines == {"stream_shards": 0.15, "kms_key": 0.0014, "cloudwatch": 0.0042}
    # No per-GB Kinesis charges on a provisioned stream, and no NAT without a VPC.
    assert estimate.per_gb_lines == {}


def test_load_generator_is_priced_per_hour_of_load_and_its_writes_cross_the_subnets_edge():
    settings = parse_settings("t", {"loadgen": {"workers": 3, "cpu": 2048, "memory": 4096}})
    estimate = estimate_hourly_cost(settings)
    # 4 tasks x (2 vCPU x 0.04048 + 4 GB x 0.004445)
    assert estimate.loadgen_hourly_usd == 0.3950
    # The ingest job's reads and the load generator's writes both leave the private subnet: by the Kinesis
    # endpoint at 0.01 per GB each, or by the NAT at 0.045 each without it.
    assert estimate.per_gb_lines["kinesis_endpoint"] == 0.02
    nat = estimate_hourly_cost(
        parse_settings("t", {"loadgen": {"workers": 3}, "network": {"interfaceEndpoints": "none"}})
    )
    assert nat.per_gb_lines["nat_data_processing"] == 0.09
    assert "vpc_endpoints" not in nat.lines and "kinesis_endpoint" not in nat.per_gb_lines


@pytest.mark.parametrize(
    ("config", "services", "hourly", "break_even", "reason"),
    [
        # dev: sized for 4,000 events/s; one crossing saves 0.035 USD/GB, so the 0.01 USD/h endpoint pays above
        # 0.01 / 0.035 GB/h = 155 events/s of 512 bytes.
        (
            {},
            ("kinesis-streams",),
            0.01,
            155,
            "auto: sized for 4,000 events/s; the Kinesis endpoint costs less than the NAT above 155 events/s "
            "(512-byte events leaving the subnet once each); CloudWatch Logs and STS carry too little to pay "
            "for theirs",
        ),
        # With the load generator in the subnet too, each event crosses twice: half the break-even.
        ({"loadgen": {"workers": 1}}, ("kinesis-streams",), 0.01, 78, None),
        # A provisioned stream of one shard sustains 1,000 events/s: still above it.
        ({"stream": {"mode": "provisioned", "shards": 1}}, ("kinesis-streams",), 0.01, 155, None),
        # Only maintenance and sales read no stream: nothing crosses, nothing to save.
        (
            {"pipelines": ["sales"]},
            (),
            0.0,
            None,
            "auto: no Kinesis traffic leaves the subnet",
        ),
        ({"network": {"interfaceEndpoints": "all"}}, ("kinesis-streams", "logs", "sts"), 0.03, 155, None),
        ({"network": {"interfaceEndpoints": "none"}}, (), 0.0, 155, None),
        ({"cluster": {"enabled": False}}, (), 0.0, None, "no VPC in this stack"),
    ],
)
def test_interface_endpoints_are_chosen_by_their_cost_at_the_planned_load(
    config, services, hourly, break_even, reason
):
    plan = interface_endpoint_plan(parse_settings("dev", config))
    assert (plan.services, plan.hourly_usd, plan.break_even_events_s) == (services, hourly, break_even)
    if reason is not None:
        assert plan.reason == reason


def test_below_the_break_even_auto_adds_no_endpoint():
    prices = {**load_prices(), "interface_endpoint_hourly": 1.0}
    plan = interface_endpoint_plan(parse_settings("dev", {}), prices=prices)
    assert (plan.services, plan.break_even_events_s) == ((), 15501)
    assert plan.reason == (
        "auto: sized for 4,000 events/s, below the 15,501 events/s above which the Kinesis endpoint costs less "
        "than the NAT"
    )


NOW = datetime(2026, 3, 1, 9, 15, tzinfo=UTC)


def test_bucket_names_get_the_account_and_region_unless_the_prefix_is_yours():
    shipped = parse_settings("dev", {}, region="eu-west-1")
    assert shipped.bucket_suffix == "account-region"
    assert shipped.bucket_names_for("111122223333")["lake"] == "lakestack-dev-lake-111122223333-eu-west-1"
    own = parse_settings("dev", {"namePrefix": "acme-data-dev", "bucketSuffix": "none"})
    assert own.bucket_names_for("111122223333")["lake"] == "acme-data-dev-lake"
    explicit = parse_settings("dev", {"buckets": {"lake": "acme-lake"}})
    names = explicit.bucket_names_for("111122223333")
    assert (names["lake"], names["logs"]) == ("acme-lake", "lakestack-dev-logs-111122223333-us-east-1")
    # The emulator's buckets are local: no suffix.
    local = parse_settings("local", {}, endpoint_url="http://127.0.0.1:4566")
    assert local.bucket_names_for("123")["lake"] == "lakestack-local-lake"


def test_the_shipped_prefix_without_a_suffix_is_refused():
    with pytest.raises(ConfigError) as caught:
        parse_settings("dev", {"bucketSuffix": "none"}, where="Pulumi.dev.yaml")
    assert caught.value.key == "lakestack:bucketSuffix"
    assert "S3 bucket names are global, so lakestack-dev-lake belongs to whoever deployed it first" in str(
        caught.value
    )


def test_the_prefix_leaves_room_for_the_suffix_in_63_characters():
    # 63 - len("-checkpoints") - len("-123456789012-ap-southeast-2") = 23
    parse_settings("t", {"namePrefix": "a" * 23}, region="ap-southeast-2")
    with pytest.raises(ConfigError, match=r"3 to 23 characters \(it starts every bucket name plus the"):
        parse_settings("t", {"namePrefix": "a" * 24}, region="ap-southeast-2")


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({}, "2026-03-03T00:00:00Z"),  # 24 h default, rounded up to midnight UTC
        ({"ttlHours": 2}, "2026-03-02T00:00:00Z"),
        ({"expiresAt": "2026-04-01T18:30:00+02:00"}, "2026-04-01T16:30:00Z"),
    ],
)
def test_every_resource_is_tagged_with_an_expiry(config, expected):
    settings = parse_settings("t", config, now=NOW)
    assert settings.tags == {
        "lakestack:project": "lakestack",
        "lakestack:stack": "t",
        "lakestack:expires-at": expected,
    }


def test_an_expiry_at_midnight_stays_on_that_midnight():
    an_hour_before = datetime(2026, 3, 1, 23, 0, tzinfo=UTC)
    assert (
        parse_settings("t", {"ttlHours": 1}, now=an_hour_before).tags["lakestack:expires-at"]
        == "2026-03-02T00:00:00Z"
    )


def test_every_up_of_the_same_day_keeps_the_expiry():
    early, late = datetime(2026, 3, 1, 0, 5, tzinfo=UTC), datetime(2026, 3, 1, 23, 55, tzinfo=UTC)
    expiries = {parse_settings("t", {}, now=t).tags["lakestack:expires-at"] for t in (early, late)}
    assert expiries == {"2026-03-03T00:00:00Z"}


def test_several_pipelines_share_each_node_and_each_gets_its_driver_room():
    settings = parse_settings(
        "t",
        {
            "parallelism": 8,
            "parallelismPerWorker": 4,
            "pipelines": ["ingest", "sales", "fraud"],
            "cluster": {"instanceType": "m5.2xlarge"},
        },
    )
    s = settings.sizing
    # 2 workers; 3 drivers means room for 2 on each node (2 x 2048 MB); (24576 - 4096) / 3 = 6826 MB per
    # pipeline's executor: a 6 GB heap (6826 / 1.1 = 6205 MB, whole GB) and the remaining 682 MB as overhead.
    assert (s.workers, s.applications, s.executor_memory_gb, s.executor_memory_overhead_mb) == (2, 3, 6, 682)
    assert (s.driver_memory_mb, s.driver_memory_overhead_mb) == (1024, 1024)


def test_an_instance_too_small_for_the_pipelines_is_refused():
    with pytest.raises(ConfigError) as caught:
        parse_settings(
            "t",
            {
                "parallelism": 4,
                "pipelines": ["ingest", "sales", "fraud", "orders-cow", "orders-mor", "maintenance"],
            },
        )
    assert caught.value.key == "lakestack:cluster.instanceType"
    assert "room for 6 pipelines' drivers and executors on 1 node(s)" in str(caught.value)


@pytest.mark.parametrize(
    ("config", "key", "allowed"),
    [
        ({"ttlHours": 0}, "lakestack:ttlHours", "an integer from 1 to 8760"),
        ({"ttlHours": 4, "expiresAt": "2026-01-01T00:00:00Z"}, "lakestack:ttlHours", "no value when"),
        ({"expiresAt": "tomorrow"}, "lakestack:expiresAt", "an ISO 8601 time with a zone"),
        ({"expiresAt": "2026-01-01T00:00:00"}, "lakestack:expiresAt", "an ISO 8601 time with a zone"),
        ({"alertEmail": "ops"}, "lakestack:alertEmail", "an e-mail address"),
        ({"security": {"flowLogs": "maybe"}}, "lakestack:security.flowLogs", "true or false"),
        ({"security": {"waf": False}}, "lakestack:security.waf", "one of the keys flowLogs"),
        ({"bucketSuffix": "random"}, "lakestack:bucketSuffix", "one of account-region, none"),
        ({"loadgen": {"cpu": 1024}}, "lakestack:loadgen.workers", "an integer from 1 to 50"),
        ({"loadgen": {"workers": 0}}, "lakestack:loadgen.workers", "an integer from 1 to 50"),
        ({"loadgen": {"workers": 2, "cpu": 300}}, "lakestack:loadgen.cpu", "Fargate CPU units, one of 256"),
        (
            {"loadgen": {"workers": 2, "cpu": 512, "memory": 512}},
            "lakestack:loadgen.memory",
            "MiB Fargate allows with 512 CPU units: 1024, 2048, 3072, 4096",
        ),
        ({"jobFlags": {"fraud": ["--x"]}}, "lakestack:jobFlags.fraud", "one of the keys ingest"),
        (
            {"pipelines": ["ingest", "sales"], "jobFlags": {"sales": ["--checkpoint", "s3://x"]}},
            "lakestack:jobFlags.sales",
            "flags other than --source-table, --lake, --checkpoint",
        ),
        (
            {"pipelines": ["ingest", "sales"], "jobFlags": {"sales": ["--lake=s3://x"]}},
            "lakestack:jobFlags.sales",
            "flags other than",
        ),
        ({"buckets": {"lake": "Not_A_Bucket"}}, "lakestack:buckets.lake", "an S3 bucket name"),
        ({"pipelines": ["ingest", "ingest"]}, "lakestack:pipelines", "each pipeline once"),
        ({"pipelines": ["maintenance"]}, "lakestack:pipelines", "maintenance beside at least one pipeline"),
    ],
)
def test_new_keys_are_validated(config, key, allowed):
    with pytest.raises(ConfigError) as caught:
        parse_settings("t", config, now=NOW)
    assert caught.value.key == key
    assert f"expected {allowed}" in str(caught.value)


def test_the_load_generator_is_refused_on_the_emulator_stack():
    with pytest.raises(ConfigError, match="no value on an emulator stack"):
        parse_settings("local", {"loadgen": {"workers": 2}}, endpoint_url="http://127.0.0.1:4566")


def test_security_controls_default_on_and_switching_one_off_is_a_named_deviation():
    assert parse_settings("t", {}).security.deviations() == []
    settings = parse_settings("t", {"security": {"flowLogs": False, "s3AccessLogging": "false"}})
    assert settings.security.deviations() == [
        "lakestack:security.flowLogs",
        "lakestack:security.s3AccessLogging",
    ]


def test_the_aws_profile_of_the_stack_file_is_kept(tmp_path: Path):
    (tmp_path / "Pulumi.p.yaml").write_text("config:\n  aws:profile: lab\n  lakestack:namePrefix: lab-p\n")
    assert load_stack_settings("p", project_dir=tmp_path).aws_profile == "lab"


def test_a_misspelt_key_gets_the_nearest_one():
    with pytest.raises(ConfigError) as caught:
        parse_settings("t", {"paralelism": 4}, where="Pulumi.t.yaml")
    assert str(caught.value).endswith("lakestack:network; did you mean lakestack:parallelism?")
    with pytest.raises(ConfigError) as caught:
        parse_settings("t", {"cluster": {"maxWorker": 4}}, where="Pulumi.t.yaml")
    assert str(caught.value) == (
        "invalid stack configuration in Pulumi.t.yaml: lakestack:cluster.maxWorker = 4; expected one of the keys "
        "enabled, instanceType, releaseLabel, idleTimeoutMinutes, maxWorkers; did you mean maxWorkers?"
    )


def test_parallelism_beyond_max_workers_names_parallelism_and_its_range(tmp_path: Path):
    dev = (Path(__file__).parents[2] / "Pulumi.dev.yaml").read_text()
    (tmp_path / "Pulumi.big.yaml").write_text(
        dev.replace("lakestack:parallelism: 8\n", "lakestack:parallelism: 8000\n")
    )
    with pytest.raises(ConfigError) as caught:
        load_stack_settings("big", project_dir=tmp_path)
    assert str(caught.value) == (
        "invalid stack configuration in Pulumi.big.yaml: lakestack:parallelism = 8000; expected an integer from 1 "
        "to 16 (lakestack:cluster.maxWorkers 4 x lakestack:parallelismPerWorker 4); lower it, or raise "
        "lakestack:cluster.maxWorkers to at least 2000"
    )


def test_orders_in_a_stack_file_means_both_layouts():
    settings = parse_settings("t", {"pipelines": ["ingest", "orders"]})
    assert settings.pipelines == ("ingest", "orders-cow", "orders-mor")
    assert parse_settings("t", {"pipelines": ["ingest", "orders-mor"]}).pipelines == ("ingest", "orders-mor")


@pytest.mark.parametrize("region", ["eu-west-1", "ap-southeast-2", "us-gov-west-1"])
def test_a_real_region_is_kept(region):
    assert parse_settings("t", {}, region=region).region == region


def test_an_unknown_region_is_refused_with_the_nearest_one():
    with pytest.raises(ConfigError) as caught:
        parse_settings("t", {}, region="euwest-1", where="Pulumi.t.yaml")
    message = str(caught.value)
    assert message.startswith(
        "invalid stack configuration in Pulumi.t.yaml: aws:region = 'euwest-1'; expected an AWS region; did you "
        "mean eu-west-1? (one of af-south-1, "
    )
    assert message.endswith(", us-west-2, or a GovCloud/China region)")
    assert "\n" not in message


def test_a_yaml_syntax_error_names_file_line_and_column(tmp_path: Path):
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text("config:\n  lakestack:cloud: aws\n  lakestack:pipelines: [ingest, sales\n")
    with pytest.raises(StackFileSyntaxError) as caught:
        load_stack_settings("bad", project_dir=tmp_path)
    assert str(caught.value) == (
        f"{path}:4:1: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence at 3:24); fix the "
        "YAML there"
    )
    assert caught.value.exit_code == 2


def test_a_stack_file_that_is_not_a_mapping_is_refused(tmp_path: Path):
    path = tmp_path / "Pulumi.list.yaml"
    path.write_text("- config\n")
    with pytest.raises(StackFileSyntaxError) as caught:
        load_stack_settings("list", project_dir=tmp_path)
    assert str(caught.value) == f"{path}:1:1: expected a mapping with a `config:` mapping in it"


def test_a_misspelt_stack_name_gets_the_nearest_one(tmp_path: Path):
    (tmp_path / "Pulumi.dev.yaml").write_text("config: {}\n")
    with pytest.raises(ConfigError) as caught:
        load_stack_settings("devv", project_dir=tmp_path)
    assert str(caught.value).endswith("(found: Pulumi.dev.yaml); did you mean dev?")
