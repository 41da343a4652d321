"""Every pipeline in `lakestack:pipelines` runs as its own EMR step, each streaming one with its own checkpoint,
its command line as the jobs' shared contract (C3) says (maintenance: the design notes' `--table` shape); its
tables are registered in the Glue database for Athena."""

from __future__ import annotations

import pytest
from pulumi_mocks import ACCOUNT, Run, container_environment, execute_program, stack_config, step_conf

from infra.errors import NotBuiltError
from infra.pipelines import pipeline_args
from jobs.session import on_cluster

ALL = ["ingest", "sales", "fraud", "orders-cow", "orders-mor", "maintenance"]
CONFIG = {
    **stack_config("dev"),
    "lakestack:pipelines": ALL,
    # Room for six drivers and six executors per node.
    "lakestack:cluster": {"instanceType": "r5.xlarge", "maxWorkers": 6},
    "lakestack:jobFlags": {
        "sales": ["--trigger", "processing-time=10s"],
        "maintenance": ["--z-order", "account_id"],
    },
}
LAKE = f"lakestack-dev-lake-{ACCOUNT}-us-east-1"
CHECKPOINTS = f"lakestack-dev-checkpoints-{ACCOUNT}-us-east-1"
BRONZE = f"s3://{LAKE}/bronze/events"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    return execute_program(CONFIG, tmp_path=tmp_path_factory.mktemp("all"))


def job_args(run: Run, pipeline: str) -> list[str]:
    """What follows the launcher script on the pipeline's spark-submit line."""
    args = run.named(f"jobs-{pipeline}").inputs["args"]
    launcher = next(i for i, a in enumerate(args) if a.endswith("/run_job.py"))
    return args[launcher + 1 :]


def contract(job: str, lake: str, checkpoint: str, *flags: str) -> list[str]:
    return [
        job,
        "--source-table",
        BRONZE,
        "--lake",
        lake,
        "--checkpoint",
        f"s3://{CHECKPOINTS}/{checkpoint}",
        "--region",
        "us-east-1",
        *flags,
    ]


def test_every_pipeline_is_its_own_step(run):
    steps = {r.name: r.inputs for r in run.of_type("pulumi-python:dynamic:Resource")}
    assert sorted(steps) == sorted(f"jobs-{p}" for p in ALL)
    assert {s["step_name"] for s in steps.values()} == {f"lakestack-{p}" for p in ALL}
    assert run.exports["step_ids"] == {p: f"s-jobs-{p}" for p in ALL}
    # One slot per pipeline, one for the step that stops an application before its redeploy.
    assert run.one("aws:emr/cluster:Cluster").inputs["stepConcurrencyLevel"] == 7


@pytest.mark.parametrize(
    ("pipeline", "expected"),
    [
        (
            "ingest",
            [
                "ingest",
                "--stream",
                "lakestack-dev-events",
                "--region",
                "us-east-1",
                "--table",
                BRONZE,
                "--checkpoint",
                f"s3://{CHECKPOINTS}/ingest",
            ],
        ),
        ("sales", contract("sales", f"s3://{LAKE}", "sales", "--trigger", "processing-time=10s")),
        ("fraud", contract("fraud", f"s3://{LAKE}", "fraud")),
        ("orders-cow", contract("orders", f"s3://{LAKE}/orders-cow", "orders-cow", "--layout", "cow")),
        ("orders-mor", contract("orders", f"s3://{LAKE}/orders-mor", "orders-mor", "--layout", "mor")),
        (
            "maintenance",
            [
                "maintenance",
                *[
                    arg
                    for path in (
                        "bronze/events",
                        "sales",
                        "sales_quarantine",
                        "sales_by_product_minute",
                        "transactions",
                        "transactions_quarantine",
                        "fraud_alerts",
                        "orders-cow/orders",
                        "orders-cow/orders_quarantine",
                        "orders-mor/orders_base",
                        "orders-mor/orders_changes",
                        "orders-mor/orders_quarantine",
                    )
                    for arg in ("--table", f"s3://{LAKE}/{path}")
                ],
                "--lake",
                f"s3://{LAKE}",
                "--region",
                "us-east-1",
                # No schedule among the stack's flags: every hour, beside the streams.
                "--every",
                "1h",
                "--z-order",
                "account_id",
            ],
        ),
    ],
)
def test_step_command_lines_follow_the_jobs_contract(run, pipeline, expected):
    assert job_args(run, pipeline) == expected


def test_no_two_pipelines_share_a_checkpoint(run):
    streaming = [p for p in ALL if p != "maintenance"]
    checkpoints = [a[a.index("--checkpoint") + 1] for a in (job_args(run, p) for p in streaming)]
    assert len(set(checkpoints)) == len(streaming)
    assert "--checkpoint" not in job_args(run, "maintenance")
    assert run.exports["pipelines"]["maintenance"] == {"lake": f"s3://{LAKE}", "checkpoint": None}


def test_maintenance_keeps_the_schedule_the_stack_gives_it():
    args = pipeline_args(
        "maintenance",
        stream="s",
        region="r",
        lake_bucket="l",
        checkpoint_bucket="c",
        pipelines=("ingest", "maintenance"),
        extra=("--every-commits", "20"),
    )
    assert args == [
        "maintenance",
        "--table",
        "s3://l/bronze/events",
        "--lake",
        "s3://l",
        "--region",
        "r",
        "--every-commits",
        "20",
    ]


def test_each_pipelines_application_gets_its_share_of_the_nodes(run):
    conf = step_conf(run.named("jobs-fraud").inputs["args"])
    # r5.xlarge: 24576 MB of YARN memory; 2 workers host 6 drivers (3 each, 6144 MB); (24576 - 6144) / 6 = 3072
    # MB per pipeline's executor: 2 GB heap (3072 / 1.1 = 2792 MB, whole GB) and 1024 MB overhead.
    assert (conf["spark.executor.memory"], conf["spark.executor.memoryOverhead"]) == ("2g", "1024m")
    assert conf["spark.dynamicAllocation.minExecutors"] == "2"


@pytest.mark.parametrize("pipeline", ALL)
def test_every_step_marks_its_driver_and_executors_as_on_a_cluster(run, pipeline):
    conf = step_conf(run.named(f"jobs-{pipeline}").inputs["args"])
    assert conf["spark.yarn.appMasterEnv.LAKESTACK_ON_CLUSTER"] == "1"
    assert conf["spark.executorEnv.LAKESTACK_ON_CLUSTER"] == "1"
    # The environment YARN builds from these settings is enough for the job to know it runs on a cluster.
    assert on_cluster(container_environment(conf, "spark.yarn.appMasterEnv."))
    assert on_cluster(container_environment(conf, "spark.executorEnv."))


def test_every_pipelines_tables_are_registered_as_delta_tables(run):
    tables = {r.inputs["name"]: r.inputs for r in run.of_type("aws:glue/catalogTable:CatalogTable")}
    assert {name: t["storageDescriptor"]["location"] for name, t in tables.items()} == {
        "bronze_events": f"s3://{LAKE}/bronze/events",
        "sales": f"s3://{LAKE}/sales",
        "sales_quarantine": f"s3://{LAKE}/sales_quarantine",
        "sales_by_product_minute": f"s3://{LAKE}/sales_by_product_minute",
        "transactions": f"s3://{LAKE}/transactions",
        "transactions_quarantine": f"s3://{LAKE}/transactions_quarantine",
        "fraud_alerts": f"s3://{LAKE}/fraud_alerts",
        "orders_cow": f"s3://{LAKE}/orders-cow/orders",
        "orders_cow_quarantine": f"s3://{LAKE}/orders-cow/orders_quarantine",
        "orders_mor_base": f"s3://{LAKE}/orders-mor/orders_base",
        "orders_mor_changes": f"s3://{LAKE}/orders-mor/orders_changes",
        "orders_mor_quarantine": f"s3://{LAKE}/orders-mor/orders_quarantine",
        "maintenance_runs": f"s3://{LAKE}/_maintenance",
    }
    sales = tables["sales"]
    assert (sales["databaseName"], sales["tableType"], sales["parameters"]) == (
        "lakestack_dev",
        "EXTERNAL_TABLE",
        {"table_type": "DELTA", "EXTERNAL": "TRUE"},
    )
    assert run.exports["table_uris"]["fraud_alerts"] == f"s3://{LAKE}/fraud_alerts"
    assert run.exports["pipelines"]["orders-mor"] == {
        "lake": f"s3://{LAKE}/orders-mor",
        "checkpoint": f"s3://{CHECKPOINTS}/orders-mor",
    }


def test_a_pipeline_whose_job_this_checkout_lacks_is_refused_before_any_resource(tmp_path):
    recorded = Run()
    with pytest.raises(NotBuiltError) as caught:
        execute_program(
            CONFIG, tmp_path=tmp_path, run=recorded, job_files=("ingest.py", "pipelines/sales.py")
        )
    assert str(caught.value).startswith(
        "lakestack:pipelines includes 'fraud', but this checkout has no job 'fraud' (looked for "
        "jobs/pipelines/fraud.py under"
    )
    assert recorded.resources == []


def test_pipeline_args_are_a_pure_function_of_names():
    assert pipeline_args(
        "orders-mor",
        stream="s",
        region="eu-west-1",
        lake_bucket="l",
        checkpoint_bucket="c",
        extra=("--x", "1"),
    ) == [
        "orders",
        "--source-table",
        "s3://l/bronze/events",
        "--lake",
        "s3://l/orders-mor",
        "--checkpoint",
        "s3://c/orders-mor",
        "--region",
        "eu-west-1",
        "--layout",
        "mor",
        "--x",
        "1",
    ]
