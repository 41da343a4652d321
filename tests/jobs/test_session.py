"""Warming Spark's Python workers: one task per slot, importing what the source's reads need."""

from __future__ import annotations

import pytest

from jobs.session import warm_python_workers


def test_warming_runs_one_task_per_slot_and_imports_the_source(spark):
    assert warm_python_workers(spark) == 4  # spark.default.parallelism of the local session


def test_warming_a_module_that_does_not_import_fails_naming_it(spark):
    with pytest.raises(Exception, match="No module named 'lakestack_no_such_module'"):
        warm_python_workers(spark, modules=("lakestack_no_such_module",))


def test_the_local_driver_runs_the_serial_collector_and_the_local_log_config(spark):
    jvm = spark.sparkContext._jvm
    collectors = sorted(
        bean.getName() for bean in jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    )
    assert collectors == ["Copy", "MarkSweepCompact"]  # the serial collector's young and old generations
    assert "log4j2-local.properties" in jvm.java.lang.System.getProperty("log4j2.configurationFile")
