"""Warming Spark's Python workers: one task per slot, importing what the source's reads need."""

from __future__ import annotations

import pytest

from jobs.session import _collector_chosen, warm_python_workers


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


@pytest.mark.parametrize(
    ("environment", "conf", "chosen"),
    [
        ({}, None, False),
        ({"JAVA_TOOL_OPTIONS": "-Xss4m"}, {"spark.driver.extraJavaOptions": "-Dx=1"}, False),
        ({"JAVA_TOOL_OPTIONS": "-XX:+UseParallelGC"}, None, True),
        ({"_JAVA_OPTIONS": "-Xmx2g -XX:+UseG1GC"}, None, True),
        ({"SPARK_SUBMIT_OPTS": "-XX:+UseZGC"}, None, True),
        ({}, {"spark.driver.extraJavaOptions": "-XX:+UseG1GC -Dy=2"}, True),
        ({}, {"spark.driver.defaultJavaOptions": "-XX:-UseSerialGC"}, True),
    ],
)
def test_the_serial_collector_is_left_out_when_the_user_chose_one(monkeypatch, environment, conf, chosen):
    # Two collectors chosen and the JVM refuses to start ("Multiple garbage collectors selected").
    for name in ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "SPARK_SUBMIT_OPTS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert _collector_chosen(conf) is chosen
