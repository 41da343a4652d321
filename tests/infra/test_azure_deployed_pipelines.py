"""Every pipeline in `lakestack:pipelines` on Synapse: its own Spark job definition, its own checkpoint, the jobs'
shared command line (C3) under `abfss://`, the AWS names; the pool sized for all of them. Under Pulumi's mocks."""

from __future__ import annotations

import argparse
from datetime import timedelta

import pytest
from azure_mocks import execute_azure_program
from pulumi_mocks import Run, container_environment, stack_config

from infra.azure.pricing import estimate_hourly_cost
from infra.azure.settings import parse_azure_settings
from infra.errors import ConfigError, NotBuiltError
from jobs.session import on_cluster

ALL = ["ingest", "sales", "fraud", "orders-cow", "orders-mor", "maintenance"]
LAKE = "abfss://lake@lakestackazdev.dfs.core.windows.net"
CHECKPOINTS = "abfss://checkpoints@lakestackazdev.dfs.core.windows.net"
BRONZE = f"{LAKE}/bronze/events"
CONFIG = {
    **stack_config("azure-dev"),
    "lakestack:network": {"allowedIpRanges": ["198.51.100.7/32"]},
    "lakestack:expiresAt": "2026-12-01T18:00:00Z",
    "lakestack:pipelines": ALL,
    "lakestack:jobFlags": {
        "sales": ["--trigger", "processing-time=10s"],
        "maintenance": ["--vacuum-retention", "168h"],
    },
}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    return execute_azure_program(CONFIG, tmp_path=tmp_path_factory.mktemp("azure-all"))


def _jobs(run: Run) -> dict[str, dict]:
    return {
        r.name: r.inputs for r in run.of_type("pulumi-python:dynamic:Resource") if r.name.startswith("jobs-")
    }


def _props(run: Run, pipeline: str) -> dict:
    return run.named(f"jobs-{pipeline}").inputs["definition"]["jobProperties"]


def contract(job: str, lake: str, checkpoint: str, *flags: str) -> list[str]:
    return [
        job,
        "--source-table",
        BRONZE,
        "--lake",
        lake,
        "--checkpoint",
        f"{CHECKPOINTS}/{checkpoint}",
        *flags,
    ]


def test_every_pipeline_is_its_own_spark_job_definition(run):
    jobs = _jobs(run)
    assert sorted(jobs) == sorted(["jobs-artifacts", *(f"jobs-{p}" for p in ALL)])
    assert {jobs[f"jobs-{p}"]["job_name"] for p in ALL} == {f"lakestack-{p}" for p in ALL}
    assert {p: _props(run, p)["name"] for p in ALL} == {p: f"lakestack-{p}" for p in ALL}
    assert run.exports["batch_ids"] == dict.fromkeys(ALL)
    # Each runs the same uploaded wheel through the same launcher.
    assert {_props(run, p)["file"] for p in ALL} == {
        "abfss://artifacts@lakestackazdev.dfs.core.windows.net/jobs/0123456789abcdef/run_job.py"
    }


@pytest.mark.parametrize(
    ("pipeline", "expected"),
    [
        ("sales", contract("sales", LAKE, "sales", "--trigger", "processing-time=10s")),
        ("fraud", contract("fraud", LAKE, "fraud")),
        ("orders-cow", contract("orders", f"{LAKE}/orders-cow", "orders-cow", "--layout", "cow")),
        ("orders-mor", contract("orders", f"{LAKE}/orders-mor", "orders-mor", "--layout", "mor")),
        (
            "maintenance",
            [
                "maintenance",
                "--table",
                f"{LAKE}/bronze/events",
                "--table",
                f"{LAKE}/sales",
                "--table",
                f"{LAKE}/sales_quarantine",
                "--table",
                f"{LAKE}/sales_by_product_minute",
                "--table",
                f"{LAKE}/transactions",
                "--table",
                f"{LAKE}/transactions_quarantine",
                "--table",
                f"{LAKE}/fraud_alerts",
                "--table",
                f"{LAKE}/orders-cow/orders",
                "--table",
                f"{LAKE}/orders-cow/orders_quarantine",
                "--table",
                f"{LAKE}/orders-mor/orders_base",
                "--table",
                f"{LAKE}/orders-mor/orders_changes",
                "--table",
                f"{LAKE}/orders-mor/orders_quarantine",
                "--lake",
                LAKE,
                "--every",
                "1h",
                "--vacuum-retention",
                "168h",
            ],
        ),
    ],
)
def test_job_command_lines_follow_the_jobs_contract_under_abfss(run, pipeline, expected):
    assert _props(run, pipeline)["args"] == expected


def test_no_two_pipelines_share_a_checkpoint(run):
    streaming = [p for p in ALL if p != "maintenance"]
    args = {p: _props(run, p)["args"] for p in streaming}
    checkpoints = [a[a.index("--checkpoint") + 1] for a in args.values()]
    assert checkpoints == [
        f"{CHECKPOINTS}/ingest/events",
        f"{CHECKPOINTS}/sales",
        f"{CHECKPOINTS}/fraud",
        f"{CHECKPOINTS}/orders-cow",
        f"{CHECKPOINTS}/orders-mor",
    ]
    assert "--checkpoint" not in _props(run, "maintenance")["args"]
    assert run.exports["pipelines"]["maintenance"] == {"lake": LAKE, "checkpoint": None}
    assert run.exports["pipelines"]["orders-mor"] == {
        "lake": f"{LAKE}/orders-mor",
        "checkpoint": f"{CHECKPOINTS}/orders-mor",
    }


@pytest.mark.parametrize("pipeline", ALL)
def test_every_job_definition_marks_its_driver_and_executors_as_on_a_cluster(run, pipeline):
    conf = _props(run, pipeline)["conf"]
    assert conf["spark.yarn.appMasterEnv.LAKESTACK_ON_CLUSTER"] == "1"
    assert conf["spark.executorEnv.LAKESTACK_ON_CLUSTER"] == "1"
    # Synapse runs the job on YARN in cluster mode: the environment YARN builds from these settings is enough
    # for the job to know it runs on a cluster.
    assert on_cluster(container_environment(conf, "spark.yarn.appMasterEnv."))
    assert on_cluster(container_environment(conf, "spark.executorEnv."))


def test_the_pool_fits_every_pipelines_driver_and_executors(run):
    # parallelism 8 at 4 per worker: 2 executor nodes + 1 driver node per streaming pipeline (5 of them), two
    # nodes for maintenance: 17; up to maxWorkers 4 executors each: 5 * 5 + 2 = 27.
    pool = run.one("azure-native:synapse:BigDataPool").inputs
    assert (pool["nodeCount"], pool["autoScale"]) == (
        17,
        {"enabled": True, "minNodeCount": 17, "maxNodeCount": 27},
    )
    fraud = _props(run, "fraud")
    assert (fraud["numExecutors"], fraud["executorCores"], fraud["driverCores"]) == (2, 4, 4)
    assert fraud["conf"]["spark.dynamicAllocation.maxExecutors"] == "4"
    maintenance = _props(run, "maintenance")
    assert maintenance["numExecutors"] == 1
    assert maintenance["conf"]["spark.dynamicAllocation.maxExecutors"] == "1"


def test_the_plan_prices_the_pool_that_holds_them():
    settings = parse_azure_settings(
        "azure-dev", {"pipelines": ALL, "parallelism": 8, "parallelismPerWorker": 4}
    )
    assert (settings.sizing.workers, settings.sizing.nodes, settings.sizing.max_nodes) == (2, 17, 17)
    alone = parse_azure_settings(
        "azure-dev", {"pipelines": ["ingest"], "parallelism": 8, "parallelismPerWorker": 4}
    )
    assert alone.sizing.nodes == 3
    # Synapse bills every vCore the pool's applications hold: 17 and 3 Small nodes (4 vCores) at 0.143 USD.
    assert estimate_hourly_cost(settings).lines["spark_pool"] == pytest.approx(9.724)
    assert estimate_hourly_cost(alone).lines["spark_pool"] == pytest.approx(1.716)


def test_a_pipeline_whose_job_this_checkout_lacks_is_refused_before_any_resource(tmp_path):
    recorded = Run()
    with pytest.raises(NotBuiltError) as caught:
        execute_azure_program(
            CONFIG, tmp_path=tmp_path, run=recorded, job_files=("ingest.py", "pipelines/sales.py")
        )
    assert str(caught.value).startswith(
        "lakestack:pipelines includes 'fraud', but this checkout has no job 'fraud' (looked for "
        "jobs/pipelines/fraud.py under"
    )
    assert recorded.resources == []


@pytest.mark.parametrize(
    ("config", "key", "message"),
    [
        (
            {"jobFlags": {"ingest": ["--topic", "other"]}},
            "lakestack:jobFlags.ingest",
            "flags other than --source-table, --lake, --checkpoint, --table, --stream, --layout, --region, --source, "
            "--kafka-bootstrap, --topic",
        ),
        (
            {"pipelines": ["ingest", "sales"], "jobFlags": {"sales": ["--checkpoint=abfss://x"]}},
            "lakestack:jobFlags.sales",
            "the program sets those itself, one checkpoint per pipeline",
        ),
        (
            {"pipelines": ALL, "parallelism": 160, "parallelismPerWorker": 4},
            "lakestack:parallelism",
            "at most 152 at 4 per worker with 5 streaming pipeline(s)",
        ),
    ],
)
def test_flags_the_program_sets_and_pools_past_synapses_limit_are_refused(config, key, message):
    with pytest.raises(ConfigError) as caught:
        parse_azure_settings("azure-dev", config)
    assert caught.value.key == key
    assert message in str(caught.value)


def _parsed(args: list[str]):
    """The settings the job itself makes of a deployed command line: its own flags parser and validation."""
    from jobs import ingest
    from jobs.pipelines import fraud, maintenance, orders, sales

    modules = {"ingest": ingest, "sales": sales, "fraud": fraud, "orders": orders, "maintenance": maintenance}
    job, *flags = args
    parser = argparse.ArgumentParser(prog=f"python -m jobs {job}")
    modules[job].add_arguments(parser)
    return modules[job].settings_from_args(parser.parse_args(flags))


def test_every_deployed_command_line_is_accepted_by_its_job(run):
    ingest = _parsed(_props(run, "ingest")["args"])
    assert (ingest.source, ingest.kafka.bootstrap, ingest.kafka.topic, ingest.table, ingest.checkpoint) == (
        "kafka",
        "lakestack-azdev-events.servicebus.windows.net:9093",
        "events",
        BRONZE,
        f"{CHECKPOINTS}/ingest/events",
    )
    sales = _parsed(_props(run, "sales")["args"])
    assert (sales.job.source_table, sales.job.lake, sales.job.trigger, sales.job.delta_reader) == (
        BRONZE,
        LAKE,
        "processing-time=10s",
        "auto",
    )
    fraud = _parsed(_props(run, "fraud")["args"])
    assert (fraud.job.source_table, fraud.job.checkpoint, fraud.job.delta_reader) == (
        BRONZE,
        f"{CHECKPOINTS}/fraud",
        "auto",
    )
    layouts = [_parsed(_props(run, p)["args"]) for p in ("orders-cow", "orders-mor")]
    assert [(o.layout, o.lake, o.checkpoint, o.delta_reader, o.compact_only) for o in layouts] == [
        ("cow", f"{LAKE}/orders-cow", f"{CHECKPOINTS}/orders-cow", "auto", False),
        ("mor", f"{LAKE}/orders-mor", f"{CHECKPOINTS}/orders-mor", "auto", False),
    ]
    maintenance = _parsed(_props(run, "maintenance")["args"])
    assert (
        len(maintenance.tables),
        maintenance.lake,
        maintenance.every,
        maintenance.vacuum_retention,
        maintenance.compact,
    ) == (12, LAKE, timedelta(hours=1), timedelta(hours=168), False)
