"""The lake layer: exactly-once Delta appends from Spark micro-batches and the table operations pipelines use.

Two engines behind one interface: delta-spark (``JvmDeltaEngine``), which Spark jobs write with (their batch
DataFrames written by the executors; ``spark_job_engine`` picks it), and delta-rs (``DeltaRsEngine``) for code
with no Spark (the reconciler, reports, tools, tests that read tables) and for tables Spark cannot reach here. Storage options for every table are built by ``storage_options_for``. Before a query starts,
``check_table_readable`` (a source) and ``check_table_writable`` (a target) find a wrong URI, missing access
or an unreadable log in a second, with one line naming the flag and the fix.
"""

from __future__ import annotations

from jobs._retry import RetryPolicy
from jobs.lake._arrow import rows_for, to_arrow
from jobs.lake._deltars import DeltaRsEngine
from jobs.lake._jvm import Availability, JvmDeltaEngine
from jobs.lake._preflight import check_table_readable, check_table_writable
from jobs.lake._registry import ENGINE_NAMES, get_engine, maintenance_engine, spark_job_engine
from jobs.lake._retry import is_transient, with_retries
from jobs.lake._storage import redact, scoped_storage_options, storage_options_for
from jobs.lake.engine import (
    APP_ID_KEY,
    BATCH_ID_KEY,
    AppendResult,
    CommitRecord,
    CompactResult,
    DeleteResult,
    FileStats,
    Filter,
    LakeEngine,
    LakeTable,
    MergeResult,
    SchemaMode,
    TableProtocol,
    TableRef,
)
from jobs.lake.errors import (
    EngineUnavailableError,
    LakeError,
    LakeTableNotFoundError,
    LakeWriteError,
    StorageConfigError,
    TableAccessError,
    TableSchemaError,
    TableUnreadableError,
)
from jobs.lake.sink import foreach_batch_writer

__all__ = [
    "APP_ID_KEY",
    "BATCH_ID_KEY",
    "ENGINE_NAMES",
    "AppendResult",
    "Availability",
    "CommitRecord",
    "CompactResult",
    "DeleteResult",
    "DeltaRsEngine",
    "EngineUnavailableError",
    "FileStats",
    "Filter",
    "JvmDeltaEngine",
    "LakeEngine",
    "LakeError",
    "LakeTable",
    "LakeTableNotFoundError",
    "LakeWriteError",
    "MergeResult",
    "RetryPolicy",
    "SchemaMode",
    "StorageConfigError",
    "TableAccessError",
    "TableProtocol",
    "TableRef",
    "TableSchemaError",
    "TableUnreadableError",
    "check_table_readable",
    "check_table_writable",
    "foreach_batch_writer",
    "get_engine",
    "is_transient",
    "maintenance_engine",
    "redact",
    "rows_for",
    "scoped_storage_options",
    "spark_job_engine",
    "storage_options_for",
    "to_arrow",
    "with_retries",
]
