"""A batch the Arrow writer skips because its transaction is already in the table: no read, no append, its
timing says no rows and not committed, and the log says why. No Spark: the batch is never touched."""

from __future__ import annotations

import logging
from types import SimpleNamespace

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
