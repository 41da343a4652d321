"""The jobs' errors: exit status per class, and finding ours inside the exceptions Spark wraps them in."""

from __future__ import annotations

import pytest

from jobs.errors import (
    BatchNotKeptError,
    CheckpointMismatchError,
    JobError,
    SettingsError,
    find_job_error,
    one_line,
)
from jobs.lake.errors import (
    EngineUnavailableError,
    LakeTableNotFoundError,
    LakeWriteError,
    StorageConfigError,
    TableAccessError,
    TableSchemaError,
    TableUnreadableError,
)
from jobs.sources.errors import (
    DataLossError,
    KinesisReadError,
    SourceSettingsError,
    StreamAccessError,
    StreamNotFoundError,
)

# Shapes of the text Spark 4.0.2 carries our errors in (taken from real runs, paths shortened).
DATA_SOURCE = """[STREAM_FAILED] Query [id = d7b0f684, runId = c441cf7b] terminated with exception: \
[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform latestOffset: \
Traceback (most recent call last):
  File "/x/botocore/auth.py", line 418, in add_auth
    raise NoCredentialsError()
botocore.exceptions.NoCredentialsError: Unable to locate credentials

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/x/jobs/sources/_client.py", line 102, in explain_access_error
    raise StreamAccessError(
jobs.sources.errors.StreamAccessError: no AWS credentials found for Kinesis stream 'nope' in region 'us-east-1'. \
Set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, or run with an instance role.
 SQLSTATE: 38000 SQLSTATE: XXKST
=== Streaming Query ===
Identifier: ingest-nope [id = d7b0f684, runId = c441cf7b]
"""
FOREACH_BATCH = """[STREAM_FAILED] Query [id = 31d5e1e3] terminated with exception: \
[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach batch sink. \
Reason: An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):
  File "/x/pyspark/sql/utils.py", line 162, in call
    self.func(DataFrame(jdf, wrapped_session_jdf), batch_id)
jobs.lake.errors.LakeWriteError: append of batch 7 to s3://lake/bronze failed 5 times with transient storage \
errors; last: OSError: Generic S3 error. Check that the storage is reachable and retry the query.
 SQLSTATE: 39000 SQLSTATE: XXKST
"""
STATE_FUNCTION = """[STREAM_FAILED] Query [id = a3d75dc7] terminated with exception: Job aborted due to stage \
failure: Task 1 in stage 3.0 failed 1 times, most recent failure: Lost task 1.0 in stage 3.0 (TID 9) \
(localhost executor driver): org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/x/jobs/pipelines/fraud.py", line 19, in detect
    raise SettingsError("--rule: expected a threshold, found nothing")
jobs.errors.SettingsError: --rule: expected a threshold, found nothing

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:581)
"""


class SparkLikeError(Exception):
    """Stands in for pyspark's captured exceptions: our error only as text, no Python chain."""


@pytest.mark.parametrize(
    ("text", "expected_type", "message", "exit_code"),
    [
        (
            DATA_SOURCE,
            StreamAccessError,
            "no AWS credentials found for Kinesis stream 'nope' in region 'us-east-1'. Set "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, or run with an instance role.",
            2,
        ),
        (
            FOREACH_BATCH,
            LakeWriteError,
            "append of batch 7 to s3://lake/bronze failed 5 times with transient storage errors; last: "
            "OSError: Generic S3 error. Check that the storage is reachable and retry the query.",
            1,
        ),
        (STATE_FUNCTION, SettingsError, "--rule: expected a threshold, found nothing", 2),
    ],
    ids=["data-source", "foreach-batch", "state-function"],
)
def test_our_error_is_found_in_the_text_spark_carries_it_in(text, expected_type, message, exit_code):
    found = find_job_error(SparkLikeError(text))
    assert type(found) is expected_type
    assert str(found) == message
    assert found.exit_code == exit_code


def test_the_outermost_error_of_ours_wins_and_unknown_names_are_skipped():
    text = (
        "jobs.sources.errors.StreamNotFoundError: expected Kinesis stream 'a', but it was not found.\n"
        "jobs.sources.errors.DataLossError: data loss on stream 'a' shard 1.\n"
        "jobs.nowhere.FakeError: not ours\n"
        "jobs.errors.one_line: a function, not an error\n"
        "notjobs.errors.SettingsError: another package\n"
    )
    found = find_job_error(SparkLikeError(text))
    assert type(found) is DataLossError
    assert str(found) == "data loss on stream 'a' shard 1."
    assert find_job_error(SparkLikeError("jobs.nowhere.FakeError: x\nValueError: y")) is None


def test_a_rebuilt_error_keeps_its_message_even_when_its_class_composes_one():
    original = TableSchemaError("s3://lake/sales", missing=["amount"])
    found = find_job_error(SparkLikeError(f"jobs.lake.errors.TableSchemaError: {original}\n"))
    assert isinstance(found, TableSchemaError)
    assert str(found) == str(original)
    assert str(found).startswith("schema of the data does not match Delta table s3://lake/sales: missing")


def test_an_error_of_ours_in_the_python_chain_is_returned_as_it_is():
    cause = StreamNotFoundError("no such stream")
    try:
        try:
            raise cause
        except StreamNotFoundError as error:
            raise RuntimeError("wrapped") from error
    except RuntimeError as wrapped:
        assert find_job_error(wrapped) is cause
    assert find_job_error(RuntimeError("nothing of ours")) is None


@pytest.mark.parametrize(
    ("error", "exit_code"),
    [
        (SettingsError("x"), 2),
        (SourceSettingsError("x"), 2),
        (StreamNotFoundError("x"), 2),
        (StreamAccessError("x"), 2),
        (CheckpointMismatchError("x"), 2),
        (StorageConfigError("x"), 2),
        (TableSchemaError("t", extra=["x"]), 2),
        (EngineUnavailableError("x"), 2),
        (LakeTableNotFoundError("x"), 2),
        (TableAccessError("x"), 2),
        (TableUnreadableError("x"), 2),
        (JobError("x"), 1),
        (DataLossError("x"), 1),
        (KinesisReadError("x"), 1),
        (LakeWriteError("x"), 1),
        (BatchNotKeptError("x"), 1),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
)
def test_exit_status_is_2_for_the_users_mistakes_and_1_for_failures(error, exit_code):
    assert error.exit_code == exit_code


def test_one_line_keeps_the_first_line_and_the_deepest_cause_without_colours_or_frames():
    delta_rs = (
        "Kernel error -> Generic S3 error\n"
        "  \x1b[31m↳\x1b[0m Error performing list request\n"
        "   \x1b[31m↳\x1b[0m 404 Not Found\n"
        "   0: <unknown>\n"
        "  12: start_thread\n"
    )
    assert one_line(delta_rs) == "Kernel error -> Generic S3 error (404 Not Found)"
    assert one_line(OSError("Json error: unexpected 'g'\n   0: <unknown>\n   1: <unknown>")) == (
        "Json error: unexpected 'g'"
    )
    assert one_line("x" * 500, limit=20) == "x" * 17 + "..."
