"""Bounded, jittered retries of lake writes, and the sink's use of them."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from jobs.lake import (
    AppendResult,
    DeltaRsEngine,
    LakeWriteError,
    RetryPolicy,
    foreach_batch_writer,
    with_retries,
)

NO_WAIT = RetryPolicy(max_attempts=3, base_delay_s=0.0, max_delay_s=0.0)


def test_transient_errors_are_retried_then_succeed():
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OSError("Generic S3 error: 503 SlowDown")
        return "ok"

    assert with_retries(flaky, what="test", policy=NO_WAIT) == "ok"
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("text", "retried"),
    [
        (
            "An error occurred while calling o123.execute.\n: io.delta.exceptions.ConcurrentDeleteReadException: "
            "This transaction attempted to read one or more files that were deleted",
            True,
        ),
        ("io.delta.exceptions.ConcurrentAppendException: Files were added to the root of the table", True),
        ("org.apache.spark.sql.AnalysisException: [DELTA_MISSING_DELTA_TABLE] is not a Delta table", False),
    ],
)
def test_delta_spark_commit_races_are_retried_and_nothing_else(text, retried):
    class Py4JJavaError(Exception):  # what py4j raises, by name: jobs carry no py4j import for it
        pass

    calls = []

    def once_then_ok() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise Py4JJavaError(text)
        return "ok"

    if retried:
        assert with_retries(once_then_ok, what="test", policy=NO_WAIT) == "ok"
        assert len(calls) == 2
    else:
        with pytest.raises(Py4JJavaError):
            with_retries(once_then_ok, what="test", policy=NO_WAIT)
        assert len(calls) == 1


def test_backoff_is_full_jitter_and_capped():
    slept: list[float] = []

    def always() -> None:
        raise TimeoutError("operation timed out")

    policy = RetryPolicy(max_attempts=4, base_delay_s=1.0, max_delay_s=2.5)
    with pytest.raises(LakeWriteError, match="failed 4 times with transient storage errors"):
        with_retries(
            always, what="append of batch 3", policy=policy, sleep=slept.append, rng=random.Random(7)
        )
    assert len(slept) == 3
    caps = [1.0, 2.0, 2.5]
    assert all(0 <= s <= cap for s, cap in zip(slept, caps, strict=True))


def test_permanent_errors_are_raised_at_once():
    calls = []

    def denied() -> None:
        calls.append(1)
        raise PermissionError("access denied")

    with pytest.raises(PermissionError):
        with_retries(denied, what="test", policy=NO_WAIT)
    assert len(calls) == 1


class FlakyEngine(DeltaRsEngine):
    """Fails the first append after committing it, as when the reply to a successful PUT is lost."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def append(self, ref, data, **kwargs) -> AppendResult:
        self.calls += 1
        result = super().append(ref, data, **kwargs)
        if self.calls == 1:
            raise OSError("connection reset after commit")
        return result


def test_sink_retry_after_a_lost_reply_does_not_write_twice(spark, tmp_path):
    uri = str(tmp_path / "t")
    engine = FlakyEngine()
    writer = foreach_batch_writer(engine.table(uri), app_id="q", retry=NO_WAIT)
    writer(spark.createDataFrame(pa.table({"id": [1, 2]}).to_pandas()), 0)
    assert engine.calls == 2
    assert engine.table(uri).version() == 0
    assert sorted(engine.table(uri).read().column("id").to_pylist()) == [1, 2]


def test_retry_policy_rejects_nonsense():
    with pytest.raises(ValueError, match="expected max_attempts >= 1"):
        RetryPolicy(max_attempts=0)


@pytest.mark.parametrize("rival", ["optimize", "merge"])
def test_merge_that_loses_a_commit_race_is_retried_on_the_new_version(tmp_path, monkeypatch, rival):
    from jobs.lake import _deltars

    uri = str(tmp_path / "t")
    engine = DeltaRsEngine()
    for batch in range(3):
        engine.table(uri).merge(
            pa.table({"id": [batch], "ts": [1], "v": ["a"]}), keys=["id"], precombine="ts"
        )
    real_open, opened = _deltars._open, []

    def open_then_lose_the_race(table_uri, options):
        table = real_open(table_uri, options)
        if not opened:
            # A concurrent writer commits after this MERGE read the table and before it commits.
            opened.append(table.version())
            if rival == "optimize":
                DeltaRsEngine().table(uri).compact()
            else:
                DeltaRsEngine().table(uri).merge(
                    pa.table({"id": [1], "ts": [5], "v": ["rival"]}), keys=["id"], precombine="ts"
                )
        return table

    monkeypatch.setattr(_deltars, "_open", open_then_lose_the_race)
    result = with_retries(
        lambda: engine.table(uri).merge(
            pa.table({"id": [1, 9], "ts": [3, 3], "v": ["mine", "mine"]}),
            keys=["id"],
            precombine="ts",
            app_id="q",
            batch_id=0,
        ),
        what="merge",
        policy=NO_WAIT,
    )
    assert opened == [3]
    assert (result.committed, result.table_version) == (True, 5)
    rows = sorted((r["id"], r["v"]) for r in engine.table(uri).read().to_pylist())
    # Against the rival's newer row for id 1 the retried merge's older change loses, as precombine says.
    assert rows == [(0, "a"), (1, "rival" if rival == "merge" else "mine"), (2, "a"), (9, "mine")]
    assert engine.table(uri).transaction_version("q") == 0
