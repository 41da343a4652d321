"""End-to-end tests of the Kinesis source against the embedded emulator (moto server)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import boto3
import pyarrow.parquet as pq
import pytest
from moto.kinesis import models as moto_kinesis

from jobs.errors import USER_MISTAKE, find_job_error
from jobs.sources import SourceSettingsError, check_kinesis_stream, read_kinesis_stream, read_source_metrics
from jobs.sources.errors import StreamAccessError


def _open_shard_for_key(self, partition_key, explicit_hash_key):
    # moto routes writes to the first shard whose hash range matches, closed parents included.
    key = (
        int(explicit_hash_key)
        if explicit_hash_key
        else int(moto_kinesis.md5_hash(partition_key.encode()).hexdigest(), 16)
    )
    for shard in self.shards.values():
        if shard.is_open and shard.starting_hash <= key <= shard.ending_hash:
            return shard
    raise AssertionError(f"no open shard for hash {key}")


def _split_like_aws(self, shard_to_split, new_starting_hash_key):
    # moto moves the parent's records into the children (duplicating data); AWS keeps them in the parent.
    shard = self.shards[shard_to_split]
    start = int(new_starting_hash_key)
    last = max(s._shard_id for s in self.shards.values())
    for index, (low, high) in enumerate(((shard.starting_hash, start - 1), (start, shard.ending_hash)), 1):
        child = moto_kinesis.Shard(last + index, low, high, parent=shard.shard_id)
        self.shards[child.shard_id] = child
    shard.is_open = False


def _merge_like_aws(self, shard_to_merge, adjacent_shard_to_merge):
    # moto copies both parents' records into the child; AWS keeps them in the parents.
    first, second = self.shards[shard_to_merge], self.shards[adjacent_shard_to_merge]
    last = max(s._shard_id for s in self.shards.values())
    child = moto_kinesis.Shard(
        last + 1,
        min(first.starting_hash, second.starting_hash),
        max(first.ending_hash, second.ending_hash),
        parent=first.shard_id,
        adjacent_parent=second.shard_id,
    )
    self.shards[child.shard_id] = child
    first.is_open = second.is_open = False


@pytest.fixture(scope="module")
def resharding_endpoint():
    """An in-process emulator that reshards like AWS: parents keep their records, writes go to open shards.

    The shared ``moto_endpoint`` runs in another process, out of reach of these patches.
    """
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(moto_kinesis.Stream, "get_shard_for_key", _open_shard_for_key)
        patch.setattr(moto_kinesis.Stream, "split_shard", _split_like_aws)
        patch.setattr(moto_kinesis.Stream, "merge_shards", _merge_like_aws)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
        server.stop()


@pytest.fixture
def reshard_kinesis(resharding_endpoint):
    return boto3.client("kinesis", region_name="us-east-1", endpoint_url=resharding_endpoint)


@pytest.fixture
def kinesis(moto_endpoint):
    return boto3.client("kinesis", region_name="us-east-1", endpoint_url=moto_endpoint)


def _create_stream(kinesis, name: str, shards: int = 4) -> list[str]:
    kinesis.create_stream(StreamName=name, ShardCount=shards)
    return [s["ShardId"] for s in kinesis.list_shards(StreamName=name)["Shards"]]


def _put(kinesis, name: str, events: list[tuple[str, bytes]]) -> None:
    for offset in range(0, len(events), 500):
        chunk = events[offset : offset + 500]
        reply = kinesis.put_records(
            StreamName=name, Records=[{"PartitionKey": key, "Data": data} for key, data in chunk]
        )
        assert reply["FailedRecordCount"] == 0


def _events(start: int, stop: int, keys: int = 8) -> list[tuple[str, bytes]]:
    return [(f"k{i % keys}", f"{i}".encode()) for i in range(start, stop)]


def _parquet_sink(out: Path):
    """A foreachBatch writer of one parquet folder per batch, idempotent on the batch id."""

    def sink(batch, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(str(out / f"batch={batch_id:06d}"))

    return sink


def _rows(out: Path) -> list[dict]:
    """Every row the sink wrote, sorted by (batch, shard, sequence number)."""
    if not out.exists():
        return []
    rows = pq.read_table(str(out)).to_pylist()
    return sorted(rows, key=lambda r: (r["batch"], r["shard_id"], int(r["sequence_number"])))


class Run:
    """One streaming query from the source into per-batch parquet files (idempotent on batch id)."""

    def __init__(self, spark, tmp_path: Path, stream: str, endpoint: str, **options) -> None:
        self.spark, self.stream, self.endpoint, self.options = spark, stream, endpoint, options
        self.checkpoint = str(tmp_path / "checkpoint")
        self.out = tmp_path / "out"

    def drain(self, *, batches_before_stop: int | None = None) -> None:
        df = read_kinesis_stream(
            self.spark,
            stream_name=self.stream,
            region="us-east-1",
            checkpoint_location=self.checkpoint,
            endpoint_url=self.endpoint,
            **self.options,
        )
        query = (
            df.writeStream.foreachBatch(_parquet_sink(self.out))
            .option("checkpointLocation", self.checkpoint)
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    def rows(self) -> list[dict]:
        return _rows(self.out)


def test_reads_every_record_once_with_capped_batches(spark, moto_endpoint, kinesis, unique_name, tmp_path):
    _create_stream(kinesis, unique_name)
    _put(kinesis, unique_name, _events(0, 300))
    run = Run(spark, tmp_path, unique_name, moto_endpoint, max_records_per_shard=50)
    run.drain()
    rows = run.rows()
    assert sorted(int(r["data"]) for r in rows) == list(range(300))
    per_batch_shard: dict[tuple, int] = {}
    for r in rows:
        per_batch_shard[(r["batch"], r["shard_id"])] = per_batch_shard.get((r["batch"], r["shard_id"]), 0) + 1
    assert max(per_batch_shard.values()) <= 50
    metrics = read_source_metrics(run.checkpoint)
    assert sum(m["records"] for m in metrics) == 300
    assert {m["stream"] for m in metrics} == {unique_name}
    first = read_source_metrics(run.checkpoint, batch_id=0)
    assert [(m["batch_id"], m["records"]) for m in first] == [(0, 200)]
    assert sorted(first[0]["shards"]) == [f"shardId-00000000000{i}" for i in range(4)]
    assert all(s["millis_behind_latest"] is not None for s in first[0]["shards"].values())

    # A restart on the same checkpoint adds nothing; new records after it land once.
    run.drain()
    assert len(run.rows()) == 300
    _put(kinesis, unique_name, _events(300, 340))
    run.drain()
    assert sorted(int(r["data"]) for r in run.rows()) == list(range(340))


NO_GET_RECORDS = f"{Path(__file__).with_name('flaky_kinesis.py')}:build_no_get_records"


def test_the_preflight_checks_the_stream_without_reading_records(moto_endpoint, kinesis, unique_name):
    # Credentials without kinesis:GetRecords pass the driver-side check: it makes no GetRecords call.
    _create_stream(kinesis, unique_name)
    found = check_kinesis_stream(
        unique_name, region="us-east-1", endpoint_url=moto_endpoint, client_factory=NO_GET_RECORDS
    )
    assert found == 4


def test_a_missing_get_records_permission_fails_the_first_executor_read_as_one_access_error(
    spark, moto_endpoint, kinesis, unique_name, tmp_path
):
    _create_stream(kinesis, unique_name, shards=1)
    _put(kinesis, unique_name, _events(0, 10))
    run = Run(spark, tmp_path, unique_name, moto_endpoint, client_factory=NO_GET_RECORDS)
    with pytest.raises(Exception) as info:
        run.drain()
    # What `python -m jobs` prints as its one line, and its exit status.
    found = find_job_error(info.value)
    assert type(found) is StreamAccessError and found.exit_code == USER_MISTAKE
    message = str(found)
    assert message.startswith(
        f"could not read Kinesis stream {unique_name!r} shard shardId-000000000000: GetRecords was refused "
        "with AccessDeniedException (An error occurred (AccessDeniedException) when calling the GetRecords "
        "operation: User: arn:aws:sts::123456789012:assumed-role/emr-ec2/i-0 is not authorized"
    ), message
    assert message.endswith(
        "Expected the credentials the executors run with to allow kinesis:GetRecords on the stream; grant it "
        "(on EMR to the cluster's EC2 instance profile role) and rerun the job."
    ), message
    assert run.rows() == []


def test_missing_stream_names_stream_and_region(spark, moto_endpoint, unique_name, tmp_path):
    run = Run(spark, tmp_path, unique_name + "-missing", moto_endpoint)
    with pytest.raises(Exception, match=r"(?s)StreamNotFoundError.*t-.*-missing.*us-east-1"):
        run.drain()


@pytest.mark.parametrize("value", ["earliest", "at-timestamp=yesterday", ""])
def test_invalid_starting_position_is_a_settings_error(spark, value):
    with pytest.raises(SourceSettingsError, match="starting position"):
        read_kinesis_stream(
            spark, stream_name="s", region="us-east-1", checkpoint_location="unused", starting_position=value
        )


def test_at_timestamp_and_latest_start_where_they_should(
    spark, moto_endpoint, kinesis, unique_name, tmp_path
):
    _create_stream(kinesis, unique_name, shards=2)
    _put(kinesis, unique_name, _events(0, 20))
    middle = dt.datetime.now(dt.UTC)
    # Arrival timestamps are taken by the emulator's clock: wait until it is surely past `middle`.
    while dt.datetime.now(dt.UTC) <= middle + dt.timedelta(milliseconds=5):
        pass
    _put(kinesis, unique_name, _events(20, 30))
    at_ts = Run(
        spark,
        tmp_path / "ts",
        unique_name,
        moto_endpoint,
        starting_position=f"at-timestamp={middle.isoformat()}",
    )
    at_ts.drain()
    assert sorted(int(r["data"]) for r in at_ts.rows()) == list(range(20, 30))

    latest = Run(spark, tmp_path / "latest", unique_name, moto_endpoint, starting_position="latest")
    latest.drain()
    assert latest.rows() == []
    _put(kinesis, unique_name, _events(30, 36))
    latest.drain()
    assert sorted(int(r["data"]) for r in latest.rows()) == list(range(30, 36))


def _assert_exactly_once_in_key_order(rows: list[dict], expected: int) -> None:
    values = [int(r["data"]) for r in rows]
    assert sorted(values) == list(range(expected))
    by_key: dict[str, list[int]] = {}
    for r in rows:  # rows come sorted by (batch, shard, sequence number)
        by_key.setdefault(r["partition_key"], []).append(int(r["data"]))
    for key, seen in by_key.items():
        assert seen == sorted(seen), f"key {key} out of order: {seen}"


def test_split_and_merge_between_runs(spark, resharding_endpoint, reshard_kinesis, unique_name, tmp_path):
    moto_endpoint, kinesis = resharding_endpoint, reshard_kinesis
    shards = _create_stream(kinesis, unique_name)
    _put(kinesis, unique_name, _events(0, 200))
    run = Run(spark, tmp_path, unique_name, moto_endpoint, max_records_per_shard=30)
    run.drain()
    kinesis.split_shard(StreamName=unique_name, ShardToSplit=shards[0], NewStartingHashKey=str(2**128 // 8))
    kinesis.merge_shards(StreamName=unique_name, ShardToMerge=shards[2], AdjacentShardToMerge=shards[3])
    _put(kinesis, unique_name, _events(200, 400))
    run.drain()
    rows = run.rows()
    _assert_exactly_once_in_key_order(rows, 400)
    assert {r["shard_id"] for r in rows if int(r["data"]) >= 200} == {
        shards[1],
        "shardId-000000000004",
        "shardId-000000000005",
        "shardId-000000000006",
    }
    # Finished parents are not polled any more: the last batches only touch open shards.
    last = read_source_metrics(run.checkpoint)[-1]
    assert sorted(last["shards"]) == [
        shards[1],
        "shardId-000000000004",
        "shardId-000000000005",
        "shardId-000000000006",
    ]


def test_split_and_merge_while_running_with_restarts(
    spark, resharding_endpoint, reshard_kinesis, unique_name, tmp_path
):
    moto_endpoint, kinesis = resharding_endpoint, reshard_kinesis
    shards = _create_stream(kinesis, unique_name)
    run = Run(spark, tmp_path, unique_name, moto_endpoint, max_records_per_shard=25)
    df = read_kinesis_stream(
        spark,
        stream_name=unique_name,
        region="us-east-1",
        checkpoint_location=run.checkpoint,
        endpoint_url=moto_endpoint,
        max_records_per_shard=25,
    )
    query = (
        df.writeStream.foreachBatch(_parquet_sink(run.out))
        .option("checkpointLocation", run.checkpoint)
        .start()
    )
    try:
        _put(kinesis, unique_name, _events(0, 150))
        # Reshard while the parents still hold unread records: children must wait for them.
        kinesis.split_shard(
            StreamName=unique_name, ShardToSplit=shards[1], NewStartingHashKey=str(3 * 2**128 // 8)
        )
        _put(kinesis, unique_name, _events(150, 300))
        query.processAllAvailable()
        kinesis.merge_shards(StreamName=unique_name, ShardToMerge=shards[2], AdjacentShardToMerge=shards[3])
        _put(kinesis, unique_name, _events(300, 420))
        query.processAllAvailable()
    finally:
        query.stop()
    _put(kinesis, unique_name, _events(420, 500))
    run.drain()
    _assert_exactly_once_in_key_order(run.rows(), 500)


def test_binary_payloads_are_kept_unchanged(spark, moto_endpoint, kinesis, unique_name, tmp_path):
    _create_stream(kinesis, unique_name, shards=1)
    payloads = [bytes(range(256)), b"\xff\xfe\x00\x80not-utf8\xc3", b"\x07" * (1024 * 1024 - 8), b"plain"]
    before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    kinesis.put_records(
        StreamName=unique_name, Records=[{"PartitionKey": f"p{i}", "Data": p} for i, p in enumerate(payloads)]
    )
    after = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    run = Run(spark, tmp_path, unique_name, moto_endpoint)
    run.drain()
    rows = run.rows()
    assert [r["data"] for r in rows] == payloads
    assert [r["partition_key"] for r in rows] == ["p0", "p1", "p2", "p3"]
    assert [r["sequence_number"] for r in rows] == ["1", "2", "3", "4"]
    # Spark hands timestamps back as naive UTC (session time zone UTC).
    arrivals = [r["arrival_time"].replace(tzinfo=dt.UTC) for r in rows]
    assert all(before <= a <= after for a in arrivals), (before, arrivals, after)


def test_injected_throttling_and_expired_iterators_are_survived(
    spark, moto_endpoint, kinesis, unique_name, tmp_path
):
    _create_stream(kinesis, unique_name, shards=2)
    _put(kinesis, unique_name, _events(0, 120))
    run = Run(
        spark,
        tmp_path,
        unique_name,
        moto_endpoint,
        max_records_per_shard=20,
        client_factory=f"{Path(__file__).with_name('flaky_kinesis.py')}:build",
    )
    run.drain()
    _assert_exactly_once_in_key_order(run.rows(), 120)
    metrics = read_source_metrics(run.checkpoint)
    assert sum(m["throttled"] for m in metrics) >= 3
    assert sum(sum(s["iterator_refreshes"] for s in m["shards"].values()) for m in metrics) >= 1
    assert sum(m["records"] for m in metrics) == 120


def test_restart_after_a_batch_ran_but_was_not_committed_replays_it_exactly(
    spark, moto_endpoint, kinesis, unique_name, tmp_path
):
    _create_stream(kinesis, unique_name, shards=2)
    _put(kinesis, unique_name, _events(0, 100))
    run = Run(spark, tmp_path, unique_name, moto_endpoint, max_records_per_shard=20)
    run.drain()
    before = run.rows()
    last = max(int(p.name) for p in (Path(run.checkpoint) / "commits").iterdir() if p.name.isdigit())
    # A crash after the sink wrote batch `last` and before Spark committed it: the batch is replayed from
    # its logged offsets with no prefetched rows, so the executor re-reads the exact range.
    (Path(run.checkpoint) / "commits" / str(last)).unlink()
    (Path(run.checkpoint) / "commits" / f".{last}.crc").unlink(missing_ok=True)
    (run.out / f"batch={last:06d}").rename(tmp_path / "first-attempt")
    _put(kinesis, unique_name, _events(100, 130))
    run.drain()
    replayed = pq.read_table(str(run.out / f"batch={last:06d}")).to_pylist()
    first = pq.read_table(str(tmp_path / "first-attempt")).to_pylist()
    key = lambda r: (r["shard_id"], int(r["sequence_number"]))  # noqa: E731
    assert sorted(replayed, key=key) == sorted(first, key=key)
    assert len(first) > 0
    _assert_exactly_once_in_key_order(run.rows(), 130)
    assert len(before) == 100


def test_ranges_too_big_to_ship_are_read_by_the_executor(
    spark, moto_endpoint, kinesis, unique_name, tmp_path
):
    from jobs.sources import KinesisDataSource

    _create_stream(kinesis, unique_name, shards=2)
    _put(kinesis, unique_name, _events(0, 90))
    spark.dataSource.register(KinesisDataSource)
    checkpoint, out = str(tmp_path / "checkpoint"), tmp_path / "out"
    df = (
        spark.readStream.format("kinesis")
        .option("streamName", unique_name)
        .option("region", "us-east-1")
        .option("checkpointLocation", checkpoint)
        .option("endpointUrl", moto_endpoint)
        .option("maxRecordsPerShard", "25")
        .option("inlineBytesPerShard", "1")  # nothing fits: every range is re-read on the executor
        .load()
    )
    query = df.writeStream.foreachBatch(_parquet_sink(out)).option("checkpointLocation", checkpoint).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    rows = _rows(out)
    _assert_exactly_once_in_key_order(rows, 90)
    assert (
        max(
            sum(1 for r in rows if (r["batch"], r["shard_id"]) == key)
            for key in {(r["batch"], r["shard_id"]) for r in rows}
        )
        == 25
    )


def test_expired_records_are_detected_as_data_loss(spark, moto_endpoint, kinesis, unique_name, tmp_path):
    _create_stream(kinesis, unique_name, shards=1)
    _put(kinesis, unique_name, _events(0, 40))
    checkpoint, out = str(tmp_path / "checkpoint"), tmp_path / "out"
    trimmed = f"{Path(__file__).with_name('flaky_kinesis.py')}:build_trimmed"

    def start(**options):
        df = read_kinesis_stream(
            spark,
            stream_name=unique_name,
            region="us-east-1",
            checkpoint_location=checkpoint,
            endpoint_url=moto_endpoint,
            max_records_per_shard=10,
            **options,
        )
        return df.writeStream.foreachBatch(_parquet_sink(out)).option("checkpointLocation", checkpoint)

    # Spark 4.0 runs a Python source once under available-now: one capped batch, position 10.
    start().trigger(availableNow=True).start().awaitTermination(120)
    query = start(client_factory=trimmed).start()
    with pytest.raises(
        Exception, match=r"(?s)DataLossError.*shard shardId-000000000000.*after sequence number 10"
    ):
        query.processAllAvailable()
    query.stop()
    assert [int(r["sequence_number"]) for r in pq.read_table(str(out)).to_pylist()] == list(range(1, 11))

    query = start(client_factory=trimmed, fail_on_data_loss=False).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    seqs = sorted(int(r["sequence_number"]) for r in pq.read_table(str(out)).to_pylist())
    assert seqs == list(range(1, 11)) + list(range(21, 41))
    lost = [m for m in read_source_metrics(checkpoint) if m["data_loss_events"]]
    assert len(lost) == 1 and "before 21" in lost[0]["data_loss"][0]
