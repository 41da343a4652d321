"""Engine lookup by name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from jobs.lake._deltars import DeltaRsEngine
from jobs.lake._jvm import JvmDeltaEngine
from jobs.lake.engine import LakeEngine
from jobs.lake.errors import EngineUnavailableError, LakeError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ENGINE_NAMES = ("delta-rs", "jvm")


def spark_job_engine(spark: SparkSession, storage_options: Mapping[str, str]) -> LakeEngine:
    """The engine a Spark job writes a table with (``storage_options`` from ``storage_options_for``):
    delta-spark, its rows written by the executors.

    The one exception is a table on the Azurite emulator (its options say ``AZURE_STORAGE_USE_EMULATOR``):
    Azurite has no ADLS Gen2 (dfs) endpoint, so no Hadoop Azure file system reaches it, and delta-rs (through
    Azurite's blob endpoint) writes it from the driver. On Synapse, ``abfss://`` is delta-spark's.
    """
    if str(storage_options.get("AZURE_STORAGE_USE_EMULATOR", "")).lower() == "true":
        return DeltaRsEngine()
    return JvmDeltaEngine(spark)


def get_engine(name: str = "delta-rs") -> LakeEngine:
    """Return the lake engine called ``name``.

    Args:
        name: ``"delta-rs"`` (default, runs everywhere) or ``"jvm"`` (delta-spark in the active session).

    Raises:
        LakeError: the name is unknown.
        EngineUnavailableError: ``"jvm"`` was asked for and its classes do not load here.
    """
    if name == "delta-rs":
        return DeltaRsEngine()
    if name == "jvm":
        engine = JvmDeltaEngine()
        status = engine.available()
        if not status:
            raise EngineUnavailableError(
                f"lake engine 'jvm' cannot run here: {status.reason}. Use the default engine 'delta-rs'."
            )
        return engine
    raise LakeError(f"expected a lake engine name in {ENGINE_NAMES}, found {name!r}.")


def maintenance_engine(spark: SparkSession, uri: str, storage_options: Mapping[str, str]) -> LakeEngine:
    """The engine to maintain a table with beside its running writer: the writer's own kind, read from the
    table's newest commit (delta-rs stamps ``clientVersion: delta-rs.*``). Two kinds of writer on one S3 table
    can lose a commit (delta-rs commits with conditional puts, delta-spark's S3 log store does not), so a
    table delta-rs writes is compacted and vacuumed by delta-rs; any other by :func:`spark_job_engine`.
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        newest = DeltaTable(uri, storage_options=dict(storage_options) or None).history(1)
    except TableNotFoundError:
        newest = []
    if newest and str(newest[0].get("clientVersion", "")).startswith("delta-rs"):
        return DeltaRsEngine()
    return spark_job_engine(spark, storage_options)
