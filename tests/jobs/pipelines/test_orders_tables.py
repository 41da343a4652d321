"""Both layouts on real Delta tables (delta-rs, no Spark): end state, replays, crashes, concurrent compaction."""

from __future__ import annotations

import threading
from datetime import timedelta

import pyarrow as pa
import pytest
from orders_scenarios import T0, as_expected, at_t0, scenario, several_sources

from jobs.lake import DeltaRsEngine, LakeTable, LakeWriteError, RetryPolicy
from jobs.pipelines._cdc import CHANGE_SCHEMA
from jobs.pipelines._orders_tables import (
    COMPACTION_APP_ID,
    Compactor,
    CowWriter,
    MorWriter,
    OrdersStateError,
    OrdersTables,
    read_base,
    read_snapshot,
)

NO_WAIT = RetryPolicy(max_attempts=4, base_delay_s=0.0, max_delay_s=0.0)


@pytest.fixture
def tables(tmp_path) -> OrdersTables:
    return OrdersTables(str(tmp_path / "lake"))


@pytest.mark.parametrize("seed", [1, 2])
def test_both_layouts_end_in_the_generators_expected_state(tmp_path, seed):
    batches, expected = scenario(seed, 600, out_of_order_rate=0.2, duplicate_rate=0.1)
    assert len(expected) > 10
    cow, mor = OrdersTables(str(tmp_path / "cow")), OrdersTables(str(tmp_path / "mor"))
    cow_writer, mor_writer = CowWriter(cow, app_id="q", clock=at_t0), MorWriter(mor, app_id="q")
    compactor = Compactor(mor, clock=at_t0)
    for batch_id, batch in enumerate(batches):
        cow_writer.write(batch, batch_id)
        mor_writer.write(batch, batch_id)
        if batch_id % 5 == 4:
            compactor.run()
    assert as_expected(read_snapshot(cow, "cow")) == expected
    assert as_expected(read_snapshot(mor, "mor")) == expected
    assert compactor.status().pending_commits == len(batches) % 5
    compactor.run()
    assert as_expected(read_base(mor)) == expected
    assert compactor.status().pending_commits == 0


def test_changes_from_several_sources_share_change_ids_and_are_all_applied(tables):
    batches, expected = several_sources([41, 42, 43, 44], 600, out_of_order_rate=0.2, duplicate_rate=0.1)
    assert len({r["order_id"][:6] for r in expected}) == 4  # four sources, each numbering changes from 1
    cow, mor = CowWriter(tables, app_id="q", clock=at_t0), MorWriter(tables, app_id="q")
    for batch_id, batch in enumerate(batches):
        cow.write(batch, batch_id)
        mor.write(batch, batch_id)
    Compactor(tables, clock=at_t0).run()
    assert as_expected(read_snapshot(tables, "cow")) == expected
    assert as_expected(read_base(tables)) == expected


def test_a_late_insert_cannot_bring_a_deleted_order_back(tables):
    def change(cid: int, op: str, seconds: int) -> pa.Table:
        ts = T0 + timedelta(seconds=seconds)
        return pa.Table.from_pylist(
            [
                {
                    "change_id": cid,
                    "op": op,
                    "order_id": "o1",
                    "order_ts": ts,
                    "customer_id": "c",
                    "amount": 1.0,
                    "status": "placed",
                    "event_id": f"e{cid}",
                    "event_time": ts,
                }
            ],
            schema=CHANGE_SCHEMA,
        )

    cow = CowWriter(tables, app_id="q", clock=at_t0)
    mor, compactor = MorWriter(tables, app_id="q"), Compactor(tables, clock=at_t0)
    for batch_id, batch in enumerate(
        [change(1, "insert", 1), change(3, "delete", 3), change(2, "update", 2)]
    ):
        outcome = cow.write(batch, batch_id)
        mor.write(batch, batch_id)
        compactor.run()  # after each batch, so the late update meets a compacted delete (a tombstone)
    assert outcome.late == 1
    assert read_snapshot(tables, "cow").num_rows == 0
    assert read_snapshot(tables, "mor").num_rows == 0
    assert tables.tombstones.read().to_pylist() == [{"order_id": "o1", "order_ts": T0 + timedelta(seconds=3)}]
    assert [(r["order_id"], r["is_deleted"]) for r in tables.base.read().to_pylist()] == [("o1", True)]


def test_tombstones_past_the_retention_are_dropped(tables):
    now = [T0 + timedelta(days=30)]
    batches, _ = scenario(7, 300, out_of_order_rate=0.0, duplicate_rate=0.0)
    writer = CowWriter(tables, app_id="q", tombstone_retention=timedelta(days=1), clock=lambda: now[0])
    for batch_id, batch in enumerate(batches):
        writer.write(batch, batch_id)
    assert tables.tombstones.read().num_rows > 0  # order_ts is T0: 30 days old, but no purge ran since start
    now[0] += timedelta(hours=2)
    writer.write(batches[0].slice(0, 0), len(batches))
    assert tables.tombstones.read().num_rows == 0


def test_replayed_batches_change_nothing(tables):
    batches, expected = scenario(4, 200, out_of_order_rate=0.2, duplicate_rate=0.1)
    cow, mor = CowWriter(tables, app_id="q", clock=at_t0), MorWriter(tables, app_id="q")
    for batch_id, batch in enumerate(batches):
        cow.write(batch, batch_id)
        mor.write(batch, batch_id)
    versions = {name: table.version() for name, table in tables.layout_tables("cow").items()}
    versions |= {name: table.version() for name, table in tables.layout_tables("mor").items()}
    replays = [cow.write(batches[-1], len(batches) - 1), mor.write(batches[-1], len(batches) - 1)]
    replays.append(cow.write(batches[0], 0))
    assert [r.committed for r in replays] == [False, False, False]
    after = {name: table.version() for name, table in tables.layout_tables("cow").items()}
    after |= {name: table.version() for name, table in tables.layout_tables("mor").items()}
    assert after == versions
    assert as_expected(read_snapshot(tables, "cow")) == expected
    assert as_expected(read_snapshot(tables, "mor")) == expected


def test_crash_between_the_tombstones_and_the_merge_resolves_the_same_on_replay(tables, monkeypatch):
    batches, expected = scenario(5, 300, out_of_order_rate=0.2, duplicate_rate=0.1)
    writer = CowWriter(tables, app_id="q", retry=NO_WAIT, clock=at_t0)
    original = LakeTable.merge
    crashes = []

    def crash_on_orders(self, data, **kwargs):
        # The tombstones of a deleting batch are committed, then the process dies before the MERGE.
        if self.uri.endswith("/orders") and kwargs["batch_id"] == 3 and not crashes:
            crashes.append(kwargs["batch_id"])
            raise PermissionError("killed")
        return original(self, data, **kwargs)

    monkeypatch.setattr(LakeTable, "merge", crash_on_orders)
    assert any(r["op"] == "delete" for r in batches[3].to_pylist())
    for batch_id, batch in enumerate(batches):
        if batch_id == 3:
            with pytest.raises(PermissionError):
                writer.write(batch, batch_id)
            assert tables.tombstones.transaction_version("q") == 3
            assert tables.orders.transaction_version("q") == 2
        writer.write(batch, batch_id)  # the replay Spark makes after a restart
    assert crashes == [3]
    assert as_expected(read_snapshot(tables, "cow")) == expected


def test_compactions_racing_each_other_and_the_stream_lose_nothing(tables):
    batches, expected = scenario(6, 600, out_of_order_rate=0.2, duplicate_rate=0.1)
    writer = MorWriter(tables, app_id="q")
    stop, errors, runs = threading.Event(), [], []
    retry = RetryPolicy(max_attempts=20, base_delay_s=0.01, max_delay_s=0.2)

    def compact_until_stopped() -> None:
        compactor = Compactor(tables, retry=retry, clock=at_t0)
        try:
            while not stop.is_set():
                runs.append(compactor.run().committed)
        except BaseException as error:  # surfaced by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=compact_until_stopped) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        for batch_id, batch in enumerate(batches):
            assert writer.write(batch, batch_id).committed
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    assert errors == []
    assert any(runs)
    final = Compactor(tables, clock=at_t0).run()
    assert final.merged_through == writer.tables.changes.version()
    assert as_expected(read_base(tables)) == expected
    assert as_expected(read_snapshot(tables, "mor")) == expected
    assert tables.changes.transaction_version("q") == len(batches) - 1


def test_a_compaction_that_loses_the_commit_race_starts_over(tables, monkeypatch):
    batches, expected = scenario(8, 200, out_of_order_rate=0.2, duplicate_rate=0.1)
    writer = MorWriter(tables, app_id="q")
    for batch_id, batch in enumerate(batches[:5]):
        writer.write(batch, batch_id)
    rival = Compactor(tables, clock=at_t0)
    original = LakeTable.merge
    raced = []

    def rival_commits_first(self, data, **kwargs):
        if self.uri.endswith("/orders_base") and not raced:
            raced.append(True)
            # Another compactor merges (the same changes and one more batch) between our read and commit.
            writer.write(batches[5], 5)
            monkeypatch.setattr(LakeTable, "merge", original)
            rival.run()
            monkeypatch.setattr(LakeTable, "merge", rival_commits_first)
        return original(self, data, **kwargs)

    monkeypatch.setattr(LakeTable, "merge", rival_commits_first)
    outcome = Compactor(tables, retry=NO_WAIT, clock=at_t0).run()
    assert raced == [True]
    # Our merge was through batch 4's log_seq; the rival's through batch 5's: ours finds it done.
    assert outcome.committed is False
    assert outcome.merged_through == tables.changes.version()
    assert tables.base.transaction_version(COMPACTION_APP_ID) == tables.changes.version()
    for batch_id, batch in enumerate(batches[6:], start=6):
        writer.write(batch, batch_id)
    Compactor(tables, clock=at_t0).run()
    assert as_expected(read_base(tables)) == expected


def test_mor_time_travel_by_change_log_version(tables):
    batches, _ = scenario(9, 300, out_of_order_rate=0.2, duplicate_rate=0.1)
    writer, compactor = MorWriter(tables, app_id="q"), Compactor(tables, clock=at_t0)
    cow = OrdersTables(tables.lake + "-cow")
    cow_writer = CowWriter(cow, app_id="q", clock=at_t0)
    marks = []
    for batch_id, batch in enumerate(batches):
        writer.write(batch, batch_id)
        cow_writer.write(batch, batch_id)
        if batch_id % 3 == 2:
            compactor.run()
        marks.append((tables.changes.version(), cow.orders.version()))
    for changes_version, orders_version in marks[1::4]:
        assert (
            read_snapshot(tables, "mor", version=changes_version).to_pylist()
            == read_snapshot(cow, "cow", version=orders_version).to_pylist()
        )


def test_a_change_log_recreated_without_its_base_is_refused(tables):
    batches, _ = scenario(10, 100)
    writer = MorWriter(tables, app_id="q")
    for batch_id, batch in enumerate(batches):
        writer.write(batch, batch_id)
    Compactor(tables, clock=at_t0).run()
    import shutil

    shutil.rmtree(tables.changes.uri)
    with pytest.raises(OrdersStateError, match="re-created without its base"):
        Compactor(tables, clock=at_t0).run()


def test_a_failing_write_is_reported_not_dropped(tables, monkeypatch):
    writer = CowWriter(tables, app_id="q", retry=NO_WAIT, clock=at_t0)
    batches, _ = scenario(11, 50)

    original = LakeTable.merge

    def unreachable(self, data, **kwargs):
        if self.uri.endswith("/orders"):
            raise OSError("Generic S3 error: 503 Slow Down")
        return original(self, data, **kwargs)

    monkeypatch.setattr(LakeTable, "merge", unreachable)
    with pytest.raises(LakeWriteError, match=r"MERGE of batch 0 into .*/orders failed 4 times"):
        writer.write(batches[0], 0)
    assert DeltaRsEngine().table(tables.orders.uri).transaction_version("q") is None


class _FlakyCompactor:
    """A compactor whose first run fails, as a storage outage would; later runs succeed."""

    def __init__(self) -> None:
        self.runs = 0

    def status(self):
        from jobs.pipelines._orders_tables import CompactionStatus

        return CompactionStatus(merged_through=-1, latest=3, pending_commits=1)

    def run(self):
        from jobs.pipelines._orders_tables import CompactionOutcome

        self.runs += 1
        if self.runs == 1:
            raise LakeWriteError("compaction of orders_changes failed 5 times with transient storage errors")
        return CompactionOutcome(merged_through=7, changes=10, rows=4, committed=True, seconds=0.1)


def test_compaction_is_due_every_n_commits_and_a_failure_does_not_stop_the_stream():
    from jobs.pipelines.orders import CompactionCadence

    compactor = _FlakyCompactor()
    cadence = CompactionCadence(3, lambda: compactor)
    cadence.committed()  # the status counts this commit: 1 pending
    cadence.committed()
    assert compactor.runs == 0
    cadence.committed()  # 3 pending: due, and it fails
    assert (compactor.runs, [str(e)[:25] for e in cadence.failures]) == (1, ["compaction of orders_chan"])
    cadence.committed()  # still due: tried again, and it merges
    assert compactor.runs == 2
    assert [o.merged_through for o in cadence.outcomes] == [7]
    cadence.committed()
    cadence.committed()
    assert compactor.runs == 2
    cadence.committed()
    assert compactor.runs == 3
