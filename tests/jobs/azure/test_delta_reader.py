"""Which Delta reader runs where, and the options Spark's own Delta source gets (Synapse's path). No Spark.

They run under pyspark 3.5 too (`make test-spark35`): the choice and the options are made there.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace

import pyspark
import pytest
from pyspark.sql import SparkSession

from jobs.pipelines._job import JobSettings
from jobs.sources import DeltaStreamOptions, SourceSettingsError, choose_delta_reader
from jobs.sources._delta_spark import resolve_delta_reader

SPARK_35 = os.environ.get("LAKESTACK_EXPECT_SPARK") == "3.5"


@pytest.mark.parametrize(
    ("requested", "spark_delta", "python_sources", "chosen"),
    [
        ("auto", True, False, "spark"),  # Synapse: Spark 3.5 with Delta 3.2 in the runtime
        ("auto", True, True, "spark"),  # Spark 4.0 with the delta-spark jars
        ("auto", False, True, "python"),  # this machine, EMR as deployed: no Delta jar
        ("spark", True, True, "spark"),
        ("python", True, True, "python"),  # asked for: the Python source even where Delta's classes load
        ("python", False, True, "python"),
    ],
)
def test_the_reader_follows_what_this_spark_has(requested, spark_delta, python_sources, chosen):
    assert choose_delta_reader(requested, spark_delta=spark_delta, python_sources=python_sources) == chosen


@pytest.mark.parametrize(
    ("requested", "spark_delta", "python_sources", "message"),
    [
        ("auto", False, False, "no Delta reader can run here"),
        ("spark", False, True, "--delta-reader spark: Spark's Delta source .* is not on the classpath"),
        ("python", True, False, "no Delta reader can run here"),
        ("jvm", True, True, "--delta-reader: expected one of auto, spark, python, found 'jvm'"),
    ],
)
def test_a_reader_that_cannot_run_is_refused_saying_what_to_do(
    requested, spark_delta, python_sources, message
):
    with pytest.raises(SourceSettingsError, match=message):
        choose_delta_reader(requested, spark_delta=spark_delta, python_sources=python_sources)


def _options(**overrides) -> DeltaStreamOptions:
    arguments = {
        "starting_version": None,
        "starting_timestamp": None,
        "max_files_per_trigger": 1000,
        "max_bytes_per_trigger": None,
        "read_change_feed": False,
        "skip_change_commits": False,
        **overrides,
    }
    return DeltaStreamOptions.of(**arguments)


@pytest.mark.parametrize(
    ("overrides", "spark_options"),
    [
        ({}, {"maxFilesPerTrigger": "1000"}),
        (
            {"max_files_per_trigger": 5, "max_bytes_per_trigger": 1_048_576},
            {"maxFilesPerTrigger": "5", "maxBytesPerTrigger": "1048576"},
        ),
        ({"starting_version": 7}, {"maxFilesPerTrigger": "1000", "startingVersion": "7"}),
        ({"starting_version": "latest"}, {"maxFilesPerTrigger": "1000", "startingVersion": "latest"}),
        (
            {"starting_timestamp": "2026-01-31T13:00:00+01:00"},
            {"maxFilesPerTrigger": "1000", "startingTimestamp": "2026-01-31T12:00:00.000000Z"},
        ),
        (
            {"starting_timestamp": datetime(2026, 1, 31, 12, 0, 0, 250_000, tzinfo=UTC)},
            {"maxFilesPerTrigger": "1000", "startingTimestamp": "2026-01-31T12:00:00.250000Z"},
        ),
        ({"read_change_feed": True}, {"maxFilesPerTrigger": "1000", "readChangeFeed": "true"}),
        ({"skip_change_commits": True}, {"maxFilesPerTrigger": "1000", "skipChangeCommits": "true"}),
    ],
)
def test_spark_delta_gets_the_equivalent_options(overrides, spark_options):
    assert _options(**overrides).spark_options() == spark_options


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_files_per_trigger": 0}, "max_files_per_trigger: expected at least 1, found 0"),
        ({"max_bytes_per_trigger": 0}, "max_bytes_per_trigger: expected at least 1, found 0"),
        ({"read_change_feed": True, "skip_change_commits": True}, "choose one"),
        (
            {"starting_version": 3, "starting_timestamp": "2026-01-31T12:00:00Z"},
            "give starting_version or starting_timestamp, not both",
        ),
        ({"starting_version": -1}, "starting_version: expected a version number, 'latest' or None, found -1"),
        ({"starting_version": "first"}, "found 'first'"),
        ({"starting_version": True}, "found True"),
        ({"starting_timestamp": "2026-01-31T12:00:00"}, "time-zone-aware moment .* without a zone"),
        ({"starting_timestamp": "yesterday"}, "expected an ISO-8601 moment .* found 'yesterday'"),
    ],
)
def test_invalid_options_are_refused_before_any_reader_runs(overrides, message):
    with pytest.raises(SourceSettingsError, match=message):
        _options(**overrides)


def test_a_zone_other_than_utc_is_converted_not_dropped():
    moment = datetime(2026, 6, 1, 8, 30, tzinfo=timezone(timedelta(hours=-4)))
    assert (
        _options(starting_timestamp=moment).spark_options()["startingTimestamp"]
        == "2026-06-01T12:30:00.000000Z"
    )


def test_pipelines_take_the_reader_as_a_flag_and_refuse_an_unknown_one():
    assert JobSettings(source_table="b", lake="l", checkpoint="c").delta_reader == "auto"
    assert (
        JobSettings(source_table="b", lake="l", checkpoint="c", delta_reader="spark").delta_reader == "spark"
    )
    with pytest.raises(
        ValueError, match="--delta-reader: expected one of auto, spark, python, found 'delta'"
    ):
        JobSettings(source_table="b", lake="l", checkpoint="c", delta_reader="delta")


class _ClassLoader:
    def __init__(self, loadable: bool) -> None:
        self.loadable = loadable
        self.asked: list[str] = []

    def loadClass(self, name: str) -> str:
        self.asked.append(name)
        if not self.loadable:
            raise RuntimeError(f"py4j: java.lang.ClassNotFoundException: {name}")
        return name


class _Session:
    """What resolve_delta_reader looks at in a session: the JVM's class loader, and `dataSource` (Spark 4.0)."""

    def __init__(self, *, delta_jar: bool, python_sources: bool) -> None:
        self.loader = _ClassLoader(delta_jar)
        thread = SimpleNamespace(getContextClassLoader=lambda: self.loader)
        self._jvm = SimpleNamespace(
            java=SimpleNamespace(lang=SimpleNamespace(Thread=SimpleNamespace(currentThread=lambda: thread)))
        )
        if python_sources:
            self.dataSource = object()


@pytest.mark.parametrize(
    ("delta_jar", "python_sources", "chosen"),
    [
        (True, False, "spark"),  # Synapse: Spark 3.5, Delta 3.2 in the runtime
        (False, True, "python"),  # this machine and EMR as deployed: Spark 4.0, no Delta jar
        (True, True, "spark"),  # Spark 4.0 with delta-spark's jars
    ],
)
def test_a_session_gets_the_reader_its_classes_allow(delta_jar, python_sources, chosen):
    session = _Session(delta_jar=delta_jar, python_sources=python_sources)
    assert (
        resolve_delta_reader(session, "auto", "abfss://lake@acct.dfs.core.windows.net/bronze/events")
        == chosen
    )
    assert session.loader.asked == ["org.apache.spark.sql.delta.sources.DeltaDataSource"]


def test_python_data_sources_are_what_tells_spark_4_from_3_5():
    # The real class, no session: 3.5 (Synapse, .venv-spark35) has no `dataSource`, 4.x has it.
    assert pyspark.__version__.startswith("3.5." if SPARK_35 else "4.1.")
    assert hasattr(SparkSession, "dataSource") is (not SPARK_35)
