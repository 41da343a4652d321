"""One conformance suite, run against every lake engine: delta-rs, and delta-spark from the pinned jars (fetched by
`make`; their absence is a failure, not a skip)."""

from __future__ import annotations

import os
import threading
from datetime import UTC, date, datetime, timedelta

import boto3
import pyarrow as pa
import pytest

from jobs.lake import (
    DeltaRsEngine,
    JvmDeltaEngine,
    LakeEngine,
    LakeError,
    LakeTableNotFoundError,
    MergeResult,
    TableProtocol,
    TableSchemaError,
    storage_options_for,
)

EVENTS = pa.schema([("id", pa.int64()), ("name", pa.string()), ("ts", pa.timestamp("us", tz="UTC"))])
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def events(ids: list[int], name: str = "x") -> pa.Table:
    return pa.table(
        {"id": ids, "name": [f"{name}{i}" for i in ids], "ts": [T0 + timedelta(minutes=i) for i in ids]},
        schema=EVENTS,
    )


# The JVM engine needs a SparkSession even to find out that its classes are absent.
@pytest.fixture(params=["delta-rs", pytest.param("jvm", marks=pytest.mark.slow)])
def engine(request) -> LakeEngine:
    if request.param == "delta-rs":
        return DeltaRsEngine()
    jvm = JvmDeltaEngine(request.getfixturevalue("spark"))
    status = jvm.available()
    assert status, f"the jvm engine must run here (make fetches its jars): {status.reason}"
    return jvm


def ids_of(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


# -- idempotent append ----------------------------------------------------------------------------------


def test_replaying_a_batch_changes_nothing(engine, tmp_path):
    uri = str(tmp_path / "t")
    first = engine.table(uri).append(events([1, 2]), app_id="app", batch_id=0)
    replay = engine.table(uri).append(events([1, 2]), app_id="app", batch_id=0)
    assert (first.committed, first.table_version, first.rows) == (True, 0, 2)
    assert (replay.committed, replay.table_version, replay.rows) == (False, 0, 0)
    assert engine.table(uri).version() == 0
    assert ids_of(engine.table(uri).read()) == [1, 2]


def test_transaction_ids_are_per_app(engine, tmp_path):
    uri = str(tmp_path / "t")
    engine.table(uri).append(events([1]), app_id="a", batch_id=5)
    engine.table(uri).append(events([2]), app_id="b", batch_id=0)
    engine.table(uri).append(events([3]), app_id="a", batch_id=4)
    assert engine.table(uri).transaction_version("a") == 5
    assert engine.table(uri).transaction_version("b") == 0
    assert engine.table(uri).transaction_version("c") is None
    assert ids_of(engine.table(uri).read()) == [1, 2]


def test_a_transaction_far_behind_the_newest_commits_or_behind_a_checkpoint_is_found(engine, tmp_path):
    # The JVM engine reads the newest commits for the app's transaction and asks the snapshot's whole state only
    # past them: here the app's one transaction is older than the ten newest commits, then behind a checkpoint.
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    uri = str(tmp_path / "t")
    write_deltalake(
        uri, events([0]), commit_properties=CommitProperties(app_transactions=[Transaction("a", 3)])
    )
    for i in range(1, 12):
        write_deltalake(uri, events([i]), mode="append")
    assert [engine.table(uri).transaction_version(app) for app in ("a", "c")] == [3, None]
    DeltaTable(uri).create_checkpoint()
    for i, batch in ((12, 7), (13, 8)):
        transaction = CommitProperties(app_transactions=[Transaction("b", batch)])
        write_deltalake(uri, events([i]), mode="append", commit_properties=transaction)
    # The newest of b's two transactions is its version.
    assert [engine.table(uri).transaction_version(app) for app in ("a", "b", "c")] == [3, 8, None]
    assert engine.table(uri).version() == 13


def test_commits_record_app_and_batch(engine, tmp_path):
    uri = str(tmp_path / "t")
    before = datetime.now(UTC) - timedelta(seconds=5)
    engine.table(uri).append(events([1]), app_id="ingest", batch_id=7)
    engine.table(uri).append(events([2]), app_id="ingest", batch_id=8)
    commits = engine.table(uri).commits()
    assert [(c.version, c.operation, c.app_id, c.batch_id) for c in commits] == [
        (0, "WRITE", "ingest", 7),
        (1, "WRITE", "ingest", 8),
    ]
    assert all(c.timestamp.tzinfo is UTC and c.timestamp > before for c in commits)


def test_missing_table_is_reported(engine, tmp_path):
    uri = str(tmp_path / "none")
    assert engine.table(uri).version() is None
    assert engine.table(uri).transaction_version("app") is None
    with pytest.raises(LakeTableNotFoundError, match="expected a Delta table at"):
        engine.table(uri).commits()


# -- schema ------------------------------------------------------------------------------------------------


def test_strict_schema_names_the_columns_that_differ(engine, tmp_path):
    uri = str(tmp_path / "t")
    engine.table(uri).append(events([1]), app_id="app", batch_id=0)
    wrong = pa.table({"id": pa.array(["2"], pa.string()), "name": ["y"], "extra": [1.0]})
    with pytest.raises(TableSchemaError) as caught:
        engine.table(uri).append(wrong, app_id="app", batch_id=1)
    assert caught.value.missing == ["ts"]
    assert caught.value.extra == ["extra"]
    assert caught.value.changed == [("id", "long", "string")]
    assert "missing from the data: ts" in str(caught.value)
    assert engine.table(uri).version() == 0


def test_merge_schema_adds_columns(engine, tmp_path):
    uri = str(tmp_path / "t")
    engine.table(uri).append(events([1]), app_id="app", batch_id=0)
    wider = events([2]).append_column("score", pa.array([0.5]))
    engine.table(uri).append(wider, app_id="app", batch_id=1, schema_mode="merge")
    rows = sorted(engine.table(uri).read(columns=["id", "score"]).to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": 1, "score": None}, {"id": 2, "score": 0.5}]


def test_naive_timestamps_are_stored_time_zone_aware(engine, tmp_path):
    uri = str(tmp_path / "t")
    naive = pa.table({"id": [1], "ts": pa.array([datetime(2026, 5, 1, 12, 0)], pa.timestamp("ns"))})
    engine.table(uri).append(naive, app_id="app", batch_id=0)
    back = engine.table(uri).read()
    assert back.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert back.column("ts").to_pylist() == [datetime(2026, 5, 1, 12, 0, tzinfo=UTC)]


# -- partitioning -----------------------------------------------------------------------------------------


def test_partitioned_by_event_date(engine, tmp_path):
    uri = tmp_path / "t"
    data = pa.table({"id": [1, 2, 3], "event_date": [date(2026, 1, 1), date(2026, 1, 2), date(2026, 1, 1)]})
    engine.table(str(uri)).append(data, app_id="app", batch_id=0, partition_by=["event_date"])
    assert sorted(p.name for p in uri.iterdir() if p.is_dir() and not p.name.startswith("_")) == [
        "event_date=2026-01-01",
        "event_date=2026-01-02",
    ]
    assert ids_of(engine.table(str(uri)).read()) == [1, 2, 3]


# -- MERGE -------------------------------------------------------------------------------------------------

ORDERS = pa.schema(
    [("order_id", pa.int64()), ("status", pa.string()), ("order_ts", pa.int64()), ("deleted", pa.bool_())]
)


def orders(rows: list[tuple[int, str, int, bool]]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(ORDERS.names, r, strict=True)) for r in rows], schema=ORDERS)


def merge_orders(
    engine: LakeEngine, uri: str, rows: list[tuple[int, str, int, bool]], **kwargs
) -> MergeResult:
    return engine.table(uri).merge(
        orders(rows), keys=["order_id"], precombine="order_ts", delete_column="deleted", **kwargs
    )


def table_rows(engine: LakeEngine, uri: str) -> list[tuple]:
    return sorted((r["order_id"], r["status"], r["order_ts"]) for r in engine.table(uri).read().to_pylist())


def test_merge_latest_precombine_wins_with_out_of_order_and_duplicate_keys(engine, tmp_path):
    uri = str(tmp_path / "orders")
    merge_orders(engine, uri, [(1, "new", 10, False), (2, "new", 10, False), (3, "new", 10, False)])
    result = merge_orders(
        engine,
        uri,
        [
            (1, "shipped", 30, False),  # newest for key 1 ...
            (1, "paid", 20, False),  # ... arrives before an older one in the same batch
            (2, "stale", 5, False),  # older than the stored row: ignored
            (3, "gone", 40, False),
            (3, "gone", 41, True),  # delete newer than the update: key 3 goes
            (4, "dup-a", 50, False),
            (4, "dup-b", 50, False),  # equal precombine: the later row in the batch wins
        ],
    )
    assert table_rows(engine, uri) == [(1, "shipped", 30), (2, "new", 10), (4, "dup-b", 50)]
    assert (result.source_rows, result.inserted, result.updated, result.deleted) == (7, 1, 1, 1)
    assert engine.table(uri).read().column_names == ["order_id", "status", "order_ts"]


def test_merge_older_delete_is_ignored_and_replay_is_skipped(engine, tmp_path):
    uri = str(tmp_path / "orders")
    merge_orders(engine, uri, [(1, "new", 10, False)], app_id="cdc", batch_id=0)
    merge_orders(engine, uri, [(1, "x", 5, True)], app_id="cdc", batch_id=1)
    again = merge_orders(engine, uri, [(1, "new", 99, False)], app_id="cdc", batch_id=1)
    assert again.committed is False
    assert table_rows(engine, uri) == [(1, "new", 10)]
    assert [(c.app_id, c.batch_id) for c in engine.table(uri).commits()][-1] == ("cdc", 1)


# -- maintenance -------------------------------------------------------------------------------------------


def test_compaction_cuts_files_keeps_rows(engine, tmp_path):
    uri = str(tmp_path / "t")
    for batch in range(5):
        engine.table(uri).append(events([batch * 10 + i for i in range(3)]), app_id="app", batch_id=batch)
    before = ids_of(engine.table(uri).read())
    result = engine.table(uri).compact()
    assert (result.files_removed, result.files_added, result.table_version) == (5, 1, 5)
    assert ids_of(engine.table(uri).read()) == before
    zorder = engine.table(uri).compact(z_order_by=["id", "name"])
    assert zorder.files_added == 1
    assert ids_of(engine.table(uri).read()) == before


def test_vacuum_removes_compacted_files(engine, tmp_path):
    uri = tmp_path / "t"
    for batch in range(3):
        engine.table(str(uri)).append(events([batch]), app_id="app", batch_id=batch)
    engine.table(str(uri)).compact()
    assert len(list(uri.glob("*.parquet"))) == 4
    assert engine.table(str(uri)).vacuum() == []  # default 7-day retention keeps everything fresh
    listed = engine.table(str(uri)).vacuum(retention_hours=0, dry_run=True)
    assert len(listed) == 3
    engine.table(str(uri)).vacuum(retention_hours=0)
    assert len(list(uri.glob("*.parquet"))) == 1
    assert ids_of(engine.table(str(uri)).read()) == [0, 1, 2]


# -- time travel and change data feed ------------------------------------------------------------------------


def test_time_travel_by_version_and_timestamp(engine, tmp_path):
    uri = str(tmp_path / "t")
    for batch in range(3):
        engine.table(uri).append(events([batch]), app_id="app", batch_id=batch)
        # Commit times are milliseconds: two commits in one millisecond make a timestamp ambiguous.
        last = engine.table(uri).commits()[-1].timestamp
        while datetime.now(UTC) <= last + timedelta(milliseconds=1):
            pass
    assert ids_of(engine.table(uri).read(version=0)) == [0]
    assert ids_of(engine.table(uri).read(version=1)) == [0, 1]
    stamps = [c.timestamp for c in engine.table(uri).commits()]
    assert ids_of(engine.table(uri).read(timestamp=stamps[1])) == [0, 1]
    assert ids_of(engine.table(uri).read(timestamp=stamps[2] + timedelta(hours=1))) == [0, 1, 2]


def test_delta_rs_reads_as_of_a_commits_reported_time_whatever_its_log_files_modification_time(tmp_path):
    # delta-rs resolves a timestamp on the log files' modification times, which come some milliseconds after
    # the commit's own time (here: an hour, set by hand); a read as of a reported commit time must still see it.
    engine = DeltaRsEngine()
    uri = str(tmp_path / "t")
    for batch in range(3):
        engine.table(uri).append(events([batch]), app_id="app", batch_id=batch)
    later = datetime.now(UTC).timestamp() + 3600
    for version in range(3):
        os.utime(tmp_path / "t" / "_delta_log" / f"{version:020d}.json", (later + version, later + version))
    commits = engine.table(uri).commits()
    assert [c.batch_id for c in commits] == [0, 1, 2]
    assert ids_of(engine.table(uri).read(timestamp=commits[0].timestamp)) == [0]
    assert ids_of(engine.table(uri).read(timestamp=commits[1].timestamp)) == [0, 1]
    assert ids_of(engine.table(uri).read(timestamp=commits[2].timestamp)) == [0, 1, 2]
    with pytest.raises(
        LakeError, match=r"expected a commit at or before that time, found the earliest kept at"
    ):
        engine.table(uri).read(timestamp=commits[0].timestamp - timedelta(seconds=1))


def test_change_data_feed(engine, tmp_path):
    uri = str(tmp_path / "orders")
    engine.table(uri).create(ORDERS.remove(3), change_data_feed=True)
    merge_orders(engine, uri, [(1, "new", 10, False), (2, "new", 10, False)])
    merge_orders(engine, uri, [(1, "paid", 20, False), (2, "gone", 30, True)])
    changes = engine.table(uri).read_changes(starting_version=1)
    got = sorted(
        (r["_commit_version"], r["_change_type"], r["order_id"], r["status"]) for r in changes.to_pylist()
    )
    assert got == [
        (1, "insert", 1, "new"),
        (1, "insert", 2, "new"),
        (2, "delete", 2, "new"),
        (2, "update_postimage", 1, "paid"),
        (2, "update_preimage", 1, "new"),
    ]


# -- protocol --------------------------------------------------------------------------------------------------


def test_protocol_is_the_compatible_default(engine, tmp_path):
    plain, cdf = str(tmp_path / "plain"), str(tmp_path / "cdf")
    engine.table(plain).append(events([1]), app_id="app", batch_id=0)
    engine.table(cdf).create(EVENTS, change_data_feed=True)
    engine.table(cdf).merge(events([1]), keys=["id"], precombine="ts")
    assert engine.table(plain).protocol() == TableProtocol(min_reader_version=1, min_writer_version=2)
    assert engine.table(cdf).protocol() == TableProtocol(min_reader_version=1, min_writer_version=4)


# -- S3 (embedded emulator) ------------------------------------------------------------------------------------


def test_concurrent_appenders_on_s3_lose_nothing(engine, moto_endpoint, unique_name):
    # delta-rs: conditional puts; delta-spark: its S3 log store serialises the commits of one driver.
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(Bucket=unique_name)
    uri = f"s3://{unique_name}/events"
    options = storage_options_for(uri, endpoint_url=moto_endpoint)
    engine.table(uri, storage_options=options).create(EVENTS)
    writers, batches = 3, 6
    errors: list[BaseException] = []

    def run(writer: int) -> None:
        try:
            for batch in range(batches):
                first = (writer * batches + batch) * 10
                engine.table(uri, storage_options=options).append(
                    events([first, first + 1]), app_id=f"w{writer}", batch_id=batch
                )
        except BaseException as error:  # surfaced by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert engine.table(uri, storage_options=options).version() == writers * batches
    versions = [c.version for c in engine.table(uri, storage_options=options).commits()]
    assert versions == list(range(writers * batches + 1))
    got = ids_of(engine.table(uri, storage_options=options).read())
    assert len(got) == writers * batches * 2
    assert got == sorted({i for n in range(writers * batches) for i in (n * 10, n * 10 + 1)})
    assert [
        engine.table(uri, storage_options=options).transaction_version(f"w{w}") for w in range(writers)
    ] == [
        5,
        5,
        5,
    ]


def test_s3_table_round_trip_with_commits(engine, moto_endpoint, unique_name):
    # The JVM engine turns the same storage options into the bucket's S3A settings.
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(Bucket=unique_name)
    uri = f"s3://{unique_name}/bronze"
    options = storage_options_for(uri, endpoint_url=moto_endpoint)
    engine.table(uri, storage_options=options).append(events([1]), app_id="q", batch_id=0)
    engine.table(uri, storage_options=options).append(events([1]), app_id="q", batch_id=0)
    engine.table(uri, storage_options=options).append(events([2]), app_id="q", batch_id=1)
    assert [(c.version, c.batch_id) for c in engine.table(uri, storage_options=options).commits()] == [
        (0, 0),
        (1, 1),
    ]
    assert ids_of(engine.table(uri, storage_options=options).read(version=0)) == [1]
    engine.table(uri, storage_options=options).compact()
    assert ids_of(engine.table(uri, storage_options=options).read()) == [1, 2]


# -- delete, filters, file statistics, checkpoints -----------------------------------------------------------


def test_delete_by_predicate_is_idempotent_per_transaction(engine, tmp_path):
    uri = str(tmp_path / "t")
    engine.table(uri).append(events([1, 2, 3, 4]), app_id="app", batch_id=0)
    first = engine.table(uri).delete("id >= 3", app_id="purge", batch_id=0)
    replay = engine.table(uri).delete("id >= 1", app_id="purge", batch_id=0)
    nothing = engine.table(uri).delete("id > 100")
    assert (first.committed, first.table_version, first.deleted) == (True, 1, 2)
    assert (replay.committed, replay.table_version) == (False, 1)
    assert (nothing.committed, nothing.table_version, nothing.deleted) == (False, 1, 0)
    assert ids_of(engine.table(uri).read()) == [1, 2]
    assert engine.table(uri).transaction_version("purge") == 0


def test_read_filters_keep_rows_passing_every_condition(engine, tmp_path):
    uri = str(tmp_path / "t")
    for batch in range(3):
        engine.table(uri).append(events([batch * 10, batch * 10 + 1]), app_id="app", batch_id=batch)
    assert ids_of(engine.table(uri).read(filters=[("id", ">", 10)])) == [11, 20, 21]
    assert ids_of(engine.table(uri).read(filters=[("id", ">=", 10), ("name", "in", ["x11", "x20"])])) == [
        11,
        20,
    ]
    assert ids_of(engine.table(uri).read(version=1, filters=[("id", "not in", [0, 10])])) == [1, 11]
    only = engine.table(uri).read(columns=["name"], filters=[("id", "=", 21)])
    assert only.to_pylist() == [{"name": "x21"}]


def test_read_filters_on_strings_written_by_merge(engine, tmp_path):
    # delta-rs' MERGE writes string_view Parquet columns, which pyarrow's pushed-down filter cannot compare.
    uri = str(tmp_path / "orders")
    engine.table(uri).merge(
        pa.table({"key": ["a", "b", "c"], "ts": [1, 1, 1]}), keys=["key"], precombine="ts"
    )
    got = engine.table(uri).read(filters=[("key", "in", ["a", "c"]), ("ts", "=", 1)])
    assert sorted(got.column("key").to_pylist()) == ["a", "c"]
    assert engine.table(uri).read(columns=["ts"], filters=[("key", "=", "b")]).to_pylist() == [{"ts": 1}]


def test_malformed_filter_is_named(engine, tmp_path):
    uri = str(tmp_path / "t")
    engine.table(uri).append(events([1]), app_id="app", batch_id=0)
    with pytest.raises(LakeError, match=r"expected filters as \(column, op, value\).*found \('id', '~', 1\)"):
        engine.table(uri).read(filters=[("id", "~", 1)])  # type: ignore[list-item]


def test_file_stats_and_commit_file_counts(engine, tmp_path):
    uri = tmp_path / "t"
    for batch in range(3):
        engine.table(str(uri)).append(events([batch]), app_id="app", batch_id=batch)
    on_disk = sorted(uri.glob("*.parquet"))
    stats = engine.table(str(uri)).file_stats()
    assert (stats.version, stats.files, stats.bytes) == (2, 3, sum(p.stat().st_size for p in on_disk))
    engine.table(str(uri)).compact()
    after = engine.table(str(uri)).file_stats()
    assert (after.version, after.files) == (3, 1)
    commits = engine.table(str(uri)).commits()
    if engine.name == "delta-rs":
        assert [(c.files_added, c.files_removed) for c in commits] == [(1, 0), (1, 0), (1, 0), (1, 3)]
        assert [c.bytes_added for c in commits[:3]] == [p.stat().st_size for p in on_disk]
        assert commits[3].bytes_added == after.bytes


def test_checkpoint_is_written_and_the_table_reads_the_same(engine, tmp_path):
    uri = tmp_path / "t"
    for batch in range(3):
        engine.table(str(uri)).append(events([batch]), app_id="app", batch_id=batch)
    assert engine.table(str(uri)).checkpoint() == 2
    assert (uri / "_delta_log" / "00000000000000000002.checkpoint.parquet").exists()
    assert ids_of(engine.table(str(uri)).read()) == [0, 1, 2]
    assert engine.table(str(uri)).transaction_version("app") == 2
