"""What each pipeline in ``lakestack:pipelines`` runs on a cluster: its job, its command line, its tables.

The streaming pipelines' command line follows the jobs' shared contract (``python -m jobs <job> --source-table
URI --lake URI --checkpoint PATH [--region R] [pipeline flags]``); the ingest job keeps its Kinesis flags. Every
streaming pipeline gets a checkpoint of its own, so no two queries ever share one. ``maintenance`` is not a
streaming query: it takes the design notes' ``--table URI`` (one per table of the stack's other pipelines) and
``--lake``, keeps its record in ``<lake>/_maintenance``, and runs on a schedule (``--every 1h`` unless
``lakestack:jobFlags`` names one). Tables live under the lake by the fixed names the
jobs use; the two orders layouts each get a lake folder of their own because both write an
``orders_quarantine`` table, and two writers must never share a table.

Pure functions of strings: the cloud programs resolve bucket names first (``Output.apply``) and call these.
Both clouds share :func:`delta_pipeline_args` (the lake under ``s3://`` or ``abfss://``); ingest's flags are
each cloud's own (Kinesis here, Event Hubs in ``infra.azure.program``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from infra.config import BRONZE_TABLE, Pipeline
from infra.errors import NotBuiltError


@dataclass(frozen=True)
class PipelineJob:
    """The job behind a pipeline name: its ``python -m jobs`` name, fixed flags, lake folder and tables."""

    job: str
    # Folder under the lake bucket the job's --lake points at ("" = the bucket root).
    lake_folder: str
    # Catalog table name -> the table's path under the lake bucket.
    tables: Mapping[str, str]
    flags: tuple[str, ...] = ()
    # A streaming query with a checkpoint of its own (maintenance is a scheduled batch job).
    streaming: bool = True


PIPELINE_JOBS: dict[Pipeline, PipelineJob] = {
    "ingest": PipelineJob("ingest", "", {"bronze_events": BRONZE_TABLE}),
    "sales": PipelineJob(
        "sales",
        "",
        {
            "sales": "sales",
            "sales_quarantine": "sales_quarantine",
            "sales_by_product_minute": "sales_by_product_minute",
        },
    ),
    "fraud": PipelineJob(
        "fraud",
        "",
        {
            "transactions": "transactions",
            "transactions_quarantine": "transactions_quarantine",
            "fraud_alerts": "fraud_alerts",
        },
    ),
    "orders-cow": PipelineJob(
        "orders",
        "orders-cow",
        {"orders_cow": "orders-cow/orders", "orders_cow_quarantine": "orders-cow/orders_quarantine"},
        ("--layout", "cow"),
    ),
    "orders-mor": PipelineJob(
        "orders",
        "orders-mor",
        {
            "orders_mor_base": "orders-mor/orders_base",
            "orders_mor_changes": "orders-mor/orders_changes",
            "orders_mor_quarantine": "orders-mor/orders_quarantine",
        },
        ("--layout", "mor"),
    ),
    "maintenance": PipelineJob("maintenance", "", {"maintenance_runs": "_maintenance"}, streaming=False),
}
# What maintenance does beside the streams unless lakestack:jobFlags.maintenance sets a schedule of its own.
MAINTENANCE_SCHEDULE = ("--every", "1h")
_SCHEDULE_FLAGS = ("--every", "--every-commits")


def pipeline_lake(lake_root: str, pipeline: Pipeline) -> str:
    """The ``--lake`` of a pipeline under a lake root URI (``s3://bucket``, ``abfss://lake@account...``)."""
    folder = PIPELINE_JOBS[pipeline].lake_folder
    root = lake_root.rstrip("/")
    return f"{root}/{folder}" if folder else root


def pipeline_checkpoint(checkpoint_root: str, pipeline: Pipeline) -> str | None:
    """The pipeline's own checkpoint under a root URI (``None`` for maintenance, which keeps none)."""
    return f"{checkpoint_root.rstrip('/')}/{pipeline}" if PIPELINE_JOBS[pipeline].streaming else None


def lake_uri(lake_bucket: str, pipeline: Pipeline) -> str:
    """The ``--lake`` of a pipeline: the lake bucket, or its own folder in it."""
    return pipeline_lake(f"s3://{lake_bucket}", pipeline)


def checkpoint_uri(checkpoint_bucket: str, pipeline: Pipeline) -> str | None:
    """The pipeline's own checkpoint prefix (``None`` for maintenance, which keeps no checkpoint)."""
    return pipeline_checkpoint(f"s3://{checkpoint_bucket}", pipeline)


def catalog_tables(pipelines: Sequence[Pipeline]) -> dict[str, str]:
    """Catalog table name -> path under the lake bucket, for every table the pipelines write."""
    return {name: path for p in pipelines for name, path in PIPELINE_JOBS[p].tables.items()}


def delta_pipeline_args(
    pipeline: Pipeline,
    *,
    lake_root: str,
    checkpoint_root: str,
    location: Sequence[str] = (),
    pipelines: Sequence[Pipeline] = (),
    extra: Sequence[str] = (),
) -> list[str]:
    """``<job> [flags]`` for a pipeline that reads the lake (every one but ingest), on any cloud.

    Args:
        pipeline: a name from ``lakestack:pipelines`` other than ``ingest``.
        lake_root: the lake's root URI (``s3://<bucket>``, ``abfss://lake@<account>.dfs.core.windows.net``);
            bronze is at ``<lake_root>/bronze/events``.
        checkpoint_root: the root URI of the checkpoints; each streaming pipeline gets ``<root>/<pipeline>``.
        location: flags that say where the storage is (AWS: ``--region R``; ADLS needs none).
        pipelines: every pipeline of the stack (maintenance looks after their tables).
        extra: flags from ``lakestack:jobFlags``, appended last.
    """
    if pipeline == "ingest":
        raise NotBuiltError(
            "delta_pipeline_args builds the flags of pipelines that read the lake; ingest reads the stream "
            "and its flags are each cloud's own (pipeline_args on AWS, infra.azure.program.job_args on Azure)."
        )
    spec = PIPELINE_JOBS[pipeline]
    root = lake_root.rstrip("/")
    if pipeline == "maintenance":
        tables = catalog_tables([p for p in pipelines if p != "maintenance"])
        head = [arg for path in tables.values() for arg in ("--table", f"{root}/{path}")]
        schedule = () if any(f.split("=", 1)[0] in _SCHEDULE_FLAGS for f in extra) else MAINTENANCE_SCHEDULE
        return [spec.job, *head, "--lake", pipeline_lake(root, pipeline), *location, *schedule, *extra]
    head = [
        "--source-table",
        f"{root}/{BRONZE_TABLE}",
        "--lake",
        pipeline_lake(root, pipeline),
        "--checkpoint",
        f"{checkpoint_root.rstrip('/')}/{pipeline}",
        *location,
    ]
    return [spec.job, *head, *spec.flags, *extra]


def pipeline_args(
    pipeline: Pipeline,
    *,
    stream: str,
    region: str,
    lake_bucket: str,
    checkpoint_bucket: str,
    pipelines: Sequence[Pipeline] = (),
    extra: Sequence[str] = (),
) -> list[str]:
    """``<job> [flags]`` for one pipeline on the AWS cluster (what follows ``python -m jobs``).

    Args:
        pipeline: a name from ``lakestack:pipelines``.
        stream: the Kinesis stream the ingest job reads.
        region: the AWS region (Kinesis, and S3 for delta-rs).
        lake_bucket: the lake bucket's name.
        checkpoint_bucket: the checkpoint bucket's name.
        pipelines: every pipeline of the stack (maintenance looks after their tables).
        extra: flags from ``lakestack:jobFlags``, appended last.
    """
    if pipeline == "ingest":
        # The ingest job reads the stream (its own flags, contract C8), not a source table.
        bronze = f"s3://{lake_bucket}/{BRONZE_TABLE}"
        checkpoint = f"s3://{checkpoint_bucket}/{pipeline}"
        head = ["--stream", stream, "--region", region, "--table", bronze, "--checkpoint", checkpoint]
        return [PIPELINE_JOBS[pipeline].job, *head, *extra]
    return delta_pipeline_args(
        pipeline,
        lake_root=f"s3://{lake_bucket}",
        checkpoint_root=f"s3://{checkpoint_bucket}",
        location=("--region", region),
        pipelines=pipelines,
        extra=extra,
    )


def job_module(project_dir: Path, pipeline: Pipeline) -> Path | None:
    """The job's source in this checkout (``jobs/ingest.py``, ``jobs/pipelines/<job>.py`` or a package of
    that name), or ``None`` when the checkout does not have it."""
    job = PIPELINE_JOBS[pipeline].job
    candidates = (
        project_dir / "jobs" / f"{job}.py",
        project_dir / "jobs" / "pipelines" / f"{job}.py",
        project_dir / "jobs" / "pipelines" / job / "__init__.py",
    )
    return next((path for path in candidates if path.is_file()), None)


def check_jobs_exist(project_dir: Path, pipelines: Sequence[Pipeline]) -> None:
    """Refuse to deploy a pipeline whose job this checkout does not have: its step would fail on the cluster.

    Raises:
        NotBuiltError: naming the pipeline and where its job was looked for.
    """
    for pipeline in pipelines:
        if job_module(project_dir, pipeline) is None:
            job = PIPELINE_JOBS[pipeline].job
            raise NotBuiltError(
                f"lakestack:pipelines includes {pipeline!r}, but this checkout has no job {job!r} "
                f"(looked for jobs/pipelines/{job}.py under {project_dir}); update the checkout or remove "
                f"{pipeline!r} from lakestack:pipelines."
            )
