"""The start-up the sales and fraud plug-ins share (``JobPipeline``): each starts its own job module's query with
its settings in the run's session. No Spark: the job modules' ``start`` is a stand-in."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from jobs.pipelines.fraud import FraudSettings
from jobs.pipelines.sales import SalesSettings
from lakestack.demo_pipelines import FraudPipeline, SalesPipeline
from lakestack.demo_pipelines._base import RunContext


@pytest.mark.parametrize(
    ("plugin", "settings_class"), [(SalesPipeline, SalesSettings), (FraudPipeline, FraudSettings)]
)
def test_a_job_plugin_starts_its_job_module_with_the_runs_common_flags(
    plugin, settings_class, tmp_path, monkeypatch
):
    started = []
    stub = types.ModuleType(f"jobs.pipelines.{plugin.name}")
    setattr(stub, settings_class.__name__, settings_class)
    stub.start = lambda spark, settings: started.append((spark, settings)) or f"{plugin.name} query"
    monkeypatch.setitem(sys.modules, f"jobs.pipelines.{plugin.name}", stub)
    run = RunContext(
        spark="the run's session",
        run_dir=tmp_path,
        target=SimpleNamespace(table_uri="s3://bucket/bronze/events"),
        lake=str(tmp_path / "lake"),
    )

    assert plugin().start(run) == f"{plugin.name} query"
    [(spark, settings)] = started
    assert spark == "the run's session"
    assert type(settings) is settings_class
    job = settings.job
    assert (job.source_table, job.lake, job.checkpoint, job.trigger, job.endpoint_url, job.region) == (
        "s3://bucket/bronze/events",
        str(tmp_path / "lake"),
        str((tmp_path / "checkpoints" / plugin.name).resolve()),
        "processing-time=1s",
        None,
        None,
    )
