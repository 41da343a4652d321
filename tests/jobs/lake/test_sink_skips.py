"""A batch the Arrow writer skips because its transaction is already in the table: no read, no append, its
timing says no rows and not committed, and the log says why. No Spark: the batch is never touched."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pyarrow as pa
import pytest

import jobs.lake.sink
from jobs.lake.engine import AppendResult
from jobs.lake.sink import foreach_batch_writer


class CommittedTable:
    """A table whose transaction log already holds this query's batch 3."""

    uri = "s3://lake/silver/sales"
    engine = SimpleNamespace(accepts_frames=False)

    def transaction_version(self, app_id: str) -> int | None:
        return 3 if app_id == "q-sales" else None

    def append(self, *_args, **_kwargs):
        raise AssertionError("a committed batch must not be appended again")


class UntouchableBatch:
    def __getattr__(self, name: str):
        raise AssertionError(f"a committed batch must not be read (.{name})")


def test_a_replayed_batch_reports_no_rows_not_committed_and_why(caplog):
    measured: list[tuple[int, dict]] = []
    writer = foreach_batch_writer(
        CommittedTable(), app_id="q-sales", timings=lambda batch_id, m: measured.append((batch_id, m))
    )
    with caplog.at_level(logging.INFO, logger="jobs.lake.sink"):
        writer(UntouchableBatch(), 2)

    [(batch_id, timing)] = measured
    assert (batch_id, sorted(timing), timing["rows"], timing["committed"]) == (
        2,
        ["committed", "rows", "total_s"],
        0,
        False,
    )
    assert [r.getMessage() for r in caplog.records] == [
        "lake s3://lake/silver/sales app=q-sales batch=2 skipped: already committed (txn version 3)"
    ]


class RecordingTable(CommittedTable):
    """The same table, whose appends are recorded (batch 3 is in its log)."""

    def __init__(self) -> None:
        self.appended: list[tuple[int, int]] = []

    def append(self, data: pa.Table, *, app_id: str, batch_id: int, **_kwargs) -> AppendResult:
        self.appended.append((batch_id, data.num_rows))
        return AppendResult(committed=True, table_version=4, rows=data.num_rows)


SKIPPED = "lake s3://lake/silver/sales app=q-sales batch={} skipped: already committed (txn version 3)"


@pytest.mark.parametrize(
    ("batch_id", "appended", "logged"),
    [
        # Spark replays the batch whose Delta commit happened and whose checkpoint entry did not: the same id.
        pytest.param(3, [], SKIPPED.format(3), id="replay-of-the-committed-batch"),
        pytest.param(2, [], SKIPPED.format(2), id="an-older-batch"),
        pytest.param(
            4,
            [(4, 2)],
            "lake s3://lake/silver/sales app=q-sales batch=4 rows=2 version=4 committed in ",
            id="the-next",
        ),
    ],
)
def test_a_batch_is_skipped_up_to_and_including_the_tables_transaction_version(
    monkeypatch, caplog, batch_id, appended, logged
):
    monkeypatch.setattr(jobs.lake.sink, "to_arrow", lambda frame: pa.table({"id": [1, 2]}))
    table = RecordingTable()
    writer = foreach_batch_writer(table, app_id="q-sales")
    with caplog.at_level(logging.INFO, logger="jobs.lake.sink"):
        writer(object(), batch_id)

    assert table.appended == appended
    [message] = [r.getMessage() for r in caplog.records]
    assert message.startswith(logged)
