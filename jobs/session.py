"""The one SparkSession factory every job and test uses."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

# Local mode on a laptop or a 2-core CI box: few shuffle partitions (the default 200 costs seconds per
# micro-batch), no UI port to collide on, UTC so event times read the same everywhere.
_LOCAL_DEFAULTS: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    "spark.sql.streaming.stopTimeout": "30s",
}


def build_session(
    app_name: str = "lakestack",
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Return a SparkSession, reusing the active one when there is one.

    Args:
        app_name: Spark application name.
        master: Spark master URL. ``None`` keeps what spark-submit set, or ``local[2]`` outside a cluster.
        conf: extra Spark configuration, applied over the local defaults.
    """
    # Python workers must run the interpreter that has the project installed (the venv), not `python3`.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    on_cluster = "SPARK_SUBMIT_OPTS" in os.environ or os.environ.get("SPARK_ENV_LOADED") == "1"
    if master is not None:
        builder = builder.master(master)
    elif not on_cluster:
        builder = builder.master("local[2]")
    if not on_cluster:
        # Bind Spark's driver and block manager to loopback only: nothing here needs to be reachable.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        log_config = Path(__file__).with_name("log4j2-local.properties")
        builder = builder.config(
            "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log_config.as_uri()}"
        )
        for key, value in _LOCAL_DEFAULTS.items():
            builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
