"""The executor-side range arithmetic without Spark: where a batch starts, what it reads, what a replay reads.

A fake one-shard client and the real :class:`ShardReader`, :class:`RangeLog` on a local checkpoint: an
off-by-one in the advance from one batch's recorded range to the next batch's start fails here, in
``make test-fast``, instead of in a Spark test.
"""

from __future__ import annotations

import datetime as dt
import json
import threading

import pytest
from botocore.exceptions import ClientError

from jobs._store import CheckpointStore
from jobs.sources._offsets import ShardPosition, StartPosition, StreamOffset
from jobs.sources._shards import ShardReader
from jobs.sources.errors import DataLossError, StreamAccessError
from jobs.sources.kinesis_ranges import (
    Limits,
    PlannedBatch,
    RangeLog,
    RangeRecord,
    advance,
    has_more,
    next_positions,
    range_batch,
    range_name,
    read_task,
    replay_loss_name,
)

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SHARD = "shardId-000000000000"
BASE = 49_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000


class OneShard:
    """One shard whose sequence numbers step by 10 from BASE (never contiguous, like AWS) unless told otherwise;
    payloads of 100 bytes."""

    arrival = T0
    never_behind = False  # moto answers MillisBehindLatest 0 whatever is left

    def __init__(self, records: int, *, reply_limit: int = 10_000, base: int = BASE, step: int = 10) -> None:
        self.seqs: list[int] = []
        self.reply_limit = reply_limit
        self.get_records_calls = 0
        self.base, self.step = base, step
        self.append(records)

    def append(self, records: int) -> None:
        start = len(self.seqs)
        self.seqs.extend(self.base + self.step * (start + i) for i in range(records))

    def get_shard_iterator(self, **kwargs):
        kind = kwargs["ShardIteratorType"]
        after = int(kwargs["StartingSequenceNumber"]) if kind == "AFTER_SEQUENCE_NUMBER" else -1
        return {"ShardIterator": f"it:{after}"}

    def get_records(self, ShardIterator, Limit):
        self.get_records_calls += 1
        after = int(ShardIterator.split(":")[1])
        newer = [s for s in self.seqs if s > after]
        batch = newer[: min(Limit, self.reply_limit)]
        last = batch[-1] if batch else after
        return {
            "Records": [
                {
                    "SequenceNumber": str(s),
                    "Data": f"{(s - self.base) // self.step:08d}".encode().ljust(100, b"."),
                    "PartitionKey": "k",
                    "ApproximateArrivalTimestamp": self.arrival
                    + dt.timedelta(milliseconds=(s - self.base) // self.step),
                }
                for s in batch
            ],
            "NextShardIterator": f"it:{last}",
            "MillisBehindLatest": 0 if self.never_behind or len(newer) == len(batch) else 5000,
        }


def _reader(client: OneShard, *, fail_on_data_loss: bool = True) -> ShardReader:
    return ShardReader(
        client,
        "s",
        fail_on_data_loss=fail_on_data_loss,
        sleep=lambda _seconds: None,
        now_ms=lambda: int(T0.timestamp() * 1000),
    )


def _read_from_start(client, log, limits, *, batch: int, fail_on_data_loss: bool = True):
    """One task of ``batch`` reading the test shard from its start."""
    return read_task(
        _reader(client, fail_on_data_loss=fail_on_data_loss),
        log,
        "s",
        batch=batch,
        shard_id=SHARD,
        start=ShardPosition(),
        closed_end=None,
        limits=limits,
    )


def _numbers(read) -> list[int]:
    return [(int(s) - BASE) // 10 for s in read.sequence_numbers]


def _planned(batch: int, position: ShardPosition) -> PlannedBatch:
    return PlannedBatch(StreamOffset("s", {SHARD: position}), batch, {SHARD: None}, 24 * 3600 * 1000)


def _drain(
    client: OneShard, log: RangeLog, limits: Limits, batches: int
) -> tuple[list[list[int]], ShardPosition]:
    """Run ``batches`` batches the way the planner and the executors do; the numbers each batch read."""
    position, seen = ShardPosition(), []
    for batch in range(batches):
        planned = _planned(batch, position)
        read = read_task(
            _reader(client),
            log,
            "s",
            batch=batch,
            shard_id=SHARD,
            start=position,
            closed_end=None,
            limits=limits,
        )
        seen.append(_numbers(read))
        records = log.read_batch(planned)
        assert records is not None
        position = next_positions(planned, records)[SHARD]
    return seen, position


def test_each_batch_starts_right_after_the_last_record_the_previous_one_recorded(tmp_path):
    client = OneShard(10)
    log = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    seen, position = _drain(client, log, Limits(records=4, bytes=10**9, seconds=60), batches=4)
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9], []]
    assert position.sequence == str(BASE + 90)
    assert position.last_arrival_ms == int(T0.timestamp() * 1000) + 9


def test_a_byte_limit_stops_inside_a_reply_and_the_next_batch_takes_the_rest(tmp_path):
    client = OneShard(10)
    log = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    # 100-byte payloads, 250 bytes per batch: three records pass the limit, the reply's rest waits.
    seen, _ = _drain(client, log, Limits(records=10_000, bytes=250, seconds=60), batches=5)
    assert seen == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9], []]
    assert [log.read(b, SHARD).more for b in range(5)] == [True, True, True, False, False]


def test_a_replay_reads_the_recorded_range_even_after_more_records_arrived(tmp_path):
    client = OneShard(5)
    log = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    limits = Limits(records=100, bytes=10**9, seconds=60)
    first = _read_from_start(client, log, limits, batch=0)
    client.append(7)
    again = _read_from_start(client, log, limits, batch=0)
    assert _numbers(first) == _numbers(again) == [0, 1, 2, 3, 4]
    assert [bytes(d[:8]) for d in again.data] == [b"%08d" % n for n in range(5)]
    recorded = json.loads((tmp_path / range_name(0, SHARD)).read_text())
    assert (recorded["after"], recorded["end"], recorded["records"]) == (None, str(BASE + 40), 5)


def test_the_first_attempts_range_wins_over_a_later_attempts(tmp_path):
    client = OneShard(3)
    log = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    limits = Limits(records=100, bytes=10**9, seconds=60)
    # A slow first attempt recorded 3 records; a speculative second attempt saw 6 but must return 3.
    _read_from_start(client, log, limits, batch=0)
    client.append(3)
    other = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    second = _read_from_start(client, other, limits, batch=0)
    assert _numbers(second) == [0, 1, 2]


def test_a_replay_whose_records_expired_is_data_loss(tmp_path):
    client = OneShard(5)
    log = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    limits = Limits(records=100, bytes=10**9, seconds=60)
    _read_from_start(client, log, limits, batch=0)
    client.seqs = client.seqs[:2]
    with pytest.raises(DataLossError, match=r"shard shardId-000000000000 of batch 0 up to sequence number"):
        _read_from_start(client, log, limits, batch=0)


LIMITS = Limits(records=100, bytes=10**9, seconds=60)


@pytest.mark.parametrize(
    ("base", "step", "end", "ended_at"),
    [
        # moto numbers a shard's records 1, 2, 3, ...: as text "9" sorts after "10".
        pytest.param(1, 1, "10", "9", id="moto-9-against-10"),
        # AWS's are 56-digit decimals, beyond a float's precision.
        pytest.param(BASE, 10, str(BASE + 90), str(BASE + 80), id="56-digits"),
        pytest.param(10**56 - 90, 10, str(10**56), str(10**56 - 10), id="56-digits-against-57"),
    ],
)
def test_a_replay_that_ends_before_the_recorded_end_is_data_loss_by_number_not_text(
    tmp_path, base, step, end, ended_at
):
    client = OneShard(10, base=base, step=step)
    log = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    first = _read_from_start(client, log, LIMITS, batch=0)
    assert first.last_sequence == end
    assert _read_from_start(client, log, LIMITS, batch=0).sequence_numbers == first.sequence_numbers
    client.seqs = client.seqs[:9]  # the range's last record is gone, its first is still there
    with pytest.raises(DataLossError) as caught:
        _read_from_start(client, log, LIMITS, batch=0)
    assert f"up to sequence number {end}, but the shard ended at {ended_at}:" in str(caught.value)


def _expired_first_records(tmp_path, *, fail_on_data_loss: bool):
    """Batch 0 read records 0..4; the trim horizon has since passed records 0 and 1; the batch is replayed."""
    client = OneShard(5)
    log = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    _read_from_start(client, log, LIMITS, batch=0)
    client.seqs = client.seqs[2:]
    return client, log, _read_from_start(client, log, LIMITS, batch=0, fail_on_data_loss=fail_on_data_loss)


def test_a_replay_whose_expired_first_records_are_data_loss_naming_stream_shard_batch_and_firsts(tmp_path):
    with pytest.raises(DataLossError) as info:
        _expired_first_records(tmp_path, fail_on_data_loss=True)
    assert str(info.value) == (
        f"data loss on the replay of stream 's' shard {SHARD} batch 0: the recorded range (from the shard's "
        f"start position) starts at sequence number {BASE}, but the first record a replay can read is "
        f"{BASE + 20}; records of the range expired since the batch was first read. Expected a replay to read the batch's "
        "recorded range whole. Restart from a new checkpoint, raise the stream's retention, or pass "
        "--fail-on-data-loss false to replay what is left (the loss is then logged and counted)."
    )


GAP = (
    f"stream 's' shard {SHARD} batch 0: the recorded range (from the shard's start position) starts at "
    f"sequence number {BASE}, but the first record a replay can read is {BASE + 20}; records of the range "
    "expired since the batch was first read"
)


def test_a_tolerated_replay_loss_is_logged_once_noted_in_the_range_and_counted_per_shard(tmp_path, caplog):
    from jobs.sources.kinesis import with_ranges

    with caplog.at_level("WARNING", logger="jobs.sources.kinesis_ranges"):
        client, log, read = _expired_first_records(tmp_path, fail_on_data_loss=False)
    assert _numbers(read) == [2, 3, 4]
    assert read.lost == GAP
    assert [r.getMessage() for r in caplog.records] == [
        f"kinesis source replaying what is left of a range: {GAP}"
    ]
    # A second replay finds the loss noted already: it is logged and counted once for the batch's shard.
    caplog.clear()
    with caplog.at_level("WARNING", logger="jobs.sources.kinesis_ranges"):
        again = _read_from_start(client, log, LIMITS, batch=0, fail_on_data_loss=False)
    assert (_numbers(again), again.lost) == ([2, 3, 4], GAP)
    assert caplog.records == []
    # The record stays as the first attempt wrote it; the loss is the note beside it.
    assert log.read(0, SHARD).replay_lost is None
    assert json.loads((tmp_path / replay_loss_name(0, SHARD)).read_text()) == {
        "batch": 0,
        "shard": SHARD,
        "replay_lost": GAP,
    }
    recorded = log.read_noted(0, SHARD)
    assert (recorded.first, recorded.end, recorded.lost, recorded.replay_lost) == (
        str(BASE),
        str(BASE + 40),
        None,
        GAP,
    )
    metrics = with_ranges({"data_loss": [], "shards": {}}, {SHARD: recorded})
    assert (metrics["data_loss_events"], metrics["data_loss"]) == (1, [GAP])
    assert metrics["shards"][SHARD]["data_loss_events"] == 1


def test_a_tolerated_replay_whose_whole_range_expired_reads_nothing_and_counts_the_loss(tmp_path):
    client = OneShard(5)
    log = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    _read_from_start(client, log, LIMITS, batch=0)
    client.append(3)
    client.seqs = client.seqs[6:]  # records 0..5 expired: the range (0..4) is gone, 6 and 7 are newer
    read = _read_from_start(client, log, LIMITS, batch=0, fail_on_data_loss=False)
    assert _numbers(read) == []
    assert log.read_noted(0, SHARD).replay_lost == (
        f"stream 's' shard {SHARD} batch 0: the recorded range (from the shard's start position) starts at "
        f"sequence number {BASE}, but no record of it up to {BASE + 40} is left; records of the range expired "
        "since the batch was first read"
    )


def test_a_tolerated_replay_loss_is_noted_once_on_an_s3_checkpoint_too():
    import boto3
    from moto import mock_aws

    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="checkpoints")
        log = RangeLog(CheckpointStore("s3://checkpoints/q", lambda: s3), retain=100)
        client = OneShard(5)
        _read_from_start(client, log, LIMITS, batch=0)
        client.seqs = client.seqs[2:]
        for _ in range(2):
            read = _read_from_start(client, log, LIMITS, batch=0, fail_on_data_loss=False)
            assert (_numbers(read), read.lost) == ([2, 3, 4], GAP)
        body = s3.get_object(Bucket="checkpoints", Key=f"q/{range_name(0, SHARD)}")["Body"].read()
        assert (json.loads(body)["first"], json.loads(body)["replay_lost"]) == (str(BASE), None)
        note = s3.get_object(Bucket="checkpoints", Key=f"q/{replay_loss_name(0, SHARD)}")["Body"].read()
        assert json.loads(note)["replay_lost"] == GAP
        assert log.read_noted(0, SHARD).replay_lost == GAP


def test_a_range_recorded_before_first_was_kept_still_replays_exactly(tmp_path):
    client = OneShard(8)
    store = CheckpointStore(str(tmp_path), lambda: None)
    # Written by the version before: no "first", no "replay_lost".
    old = {
        "batch": 0, "shard": SHARD, "after": None, "end": str(BASE + 40), "end_arrival_ms": 4, "done": False,
        "more": False, "records": 5, "bytes": 500, "arrival_sum_us": 0, "millis_behind_latest": 0,
        "throttled": 0, "retries": 0, "iterator_refreshes": 0, "lost": None, "read_seconds": 0.1,
        "read_at": 1.0,
    }  # fmt: skip
    assert store.create(range_name(0, SHARD), json.dumps(old))
    log = RangeLog(store, retain=100)
    assert log.read(0, SHARD).first is None
    read = _read_from_start(client, log, LIMITS, batch=0)
    assert _numbers(read) == [0, 1, 2, 3, 4]
    assert json.loads((tmp_path / range_name(0, SHARD)).read_text()) == old  # replayed, not rewritten
    # A new record keeps the first sequence number its read started at.
    _read_from_start(client, log, LIMITS, batch=1)
    assert json.loads((tmp_path / range_name(1, SHARD)).read_text())["first"] == str(BASE)


def test_a_record_of_another_start_is_refused_in_one_line_and_left_as_it_was(tmp_path):
    from jobs.errors import find_job_error
    from jobs.sources.errors import RangeMismatchError

    client = OneShard(8)
    log = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    _read_from_start(client, log, LIMITS, batch=3)
    before = (tmp_path / range_name(3, SHARD)).read_text()
    calls = client.get_records_calls
    # The checkpoint's offsets were edited by hand: batch 3 now starts after record 2.
    with pytest.raises(RangeMismatchError) as info:
        read_task(
            _reader(client),
            log,
            "s",
            batch=3,
            shard_id=SHARD,
            start=ShardPosition(sequence=str(BASE + 20)),
            closed_end=None,
            limits=LIMITS,
        )
    assert str(info.value) == (
        f"batch 3 of stream 's' shard {SHARD} was first read at the shard's start position (recorded in "
        f"{tmp_path}/{range_name(3, SHARD)}), but the checkpoint's offsets now start it after sequence number "
        f"{BASE + 20}: they were changed after the batch ran. Expected a replay of a batch to read its recorded "
        "range; restore the checkpoint's offsets/3 as it was, or start from a new checkpoint (delete the "
        "batch's range files only if you know it never reached the table: its batch id may be committed there "
        "already)."
    )
    assert info.value.exit_code == 2
    # Raised on an executor, it reaches the job as Spark's text: still this error, exit 2, one line.
    carried = find_job_error(
        RuntimeError(f"Task failed\njobs.sources.errors.RangeMismatchError: {info.value}\n")
    )
    assert (type(carried), carried.exit_code, str(carried)) == (RangeMismatchError, 2, str(info.value))
    assert (tmp_path / range_name(3, SHARD)).read_text() == before
    assert client.get_records_calls == calls  # refused before reading


def test_replays_racing_to_note_the_same_loss_return_the_same_rows_and_one_note_wins(tmp_path, caplog):
    import threading

    client = OneShard(5)
    log = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    _read_from_start(client, log, LIMITS, batch=0)
    client.seqs = client.seqs[2:]
    start = threading.Barrier(6)
    reads: list = []

    def replay_batch_0() -> None:
        # Each replay with its own store and log, as tasks on other executors have.
        mine = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
        start.wait()
        reads.append(_read_from_start(client, mine, LIMITS, batch=0, fail_on_data_loss=False))

    with caplog.at_level("WARNING", logger="jobs.sources.kinesis_ranges"):
        threads = [threading.Thread(target=replay_batch_0) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted((tuple(_numbers(r)), r.lost) for r in reads) == [((2, 3, 4), GAP)] * 6
    assert [r.getMessage() for r in caplog.records] == [
        f"kinesis source replaying what is left of a range: {GAP}"
    ]
    assert log.read_noted(0, SHARD).replay_lost == GAP


def test_of_several_writers_noting_a_loss_exactly_the_first_wins(tmp_path):
    import threading

    log = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    record = log.create(_record(0, first=str(BASE), end=str(BASE + 40)))
    start = threading.Barrier(8)
    won: list[str] = []

    def note(writer: int) -> None:
        start.wait()
        if log.note_replay_loss(record, f"gap seen by writer {writer}"):
            won.append(f"gap seen by writer {writer}")

    threads = [threading.Thread(target=note, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    assert log.read_noted(0, SHARD).replay_lost == won[0]
    assert log.note_replay_loss(record, "a later replay's") is False
    assert log.read_noted(0, SHARD).replay_lost == won[0]


def _record(batch: int, **fields) -> RangeRecord:
    base = dict(
        batch=batch, shard=SHARD, after=None, end=None, end_arrival_ms=None, done=False, more=False,
        records=0, bytes=0, arrival_sum_us=0, millis_behind_latest=0, throttled=0, retries=0,
        iterator_refreshes=0, lost=None, read_seconds=0.0, read_at=0.0,
    )  # fmt: skip
    return RangeRecord(**{**base, **fields})


def test_advance_moves_past_the_end_keeps_the_start_and_marks_a_closed_shard_done():
    start = ShardPosition(StartPosition(at_timestamp_ms=5), "100", False, 1)
    assert advance(start, _record(0)) == start
    assert advance(start, _record(0, end="170", end_arrival_ms=9)) == ShardPosition(
        StartPosition(at_timestamp_ms=5), "170", False, 9
    )
    assert advance(start, _record(0, done=True)) == ShardPosition(
        StartPosition(at_timestamp_ms=5), "100", True, 1
    )


def test_has_more_when_a_limit_stopped_a_read_the_shard_was_behind_or_a_shard_closed():
    assert not has_more([_record(0), _record(0, records=3, end="9")])
    assert has_more([_record(0), _record(0, more=True)])
    assert has_more([_record(0, millis_behind_latest=10)])
    assert has_more([_record(0, done=True)])


def test_planned_batches_round_trip_and_older_offsets_have_none():
    planned = PlannedBatch(
        StreamOffset("s", {SHARD: ShardPosition(sequence="12"), "shardId-1": ShardPosition()}),
        7,
        {SHARD: "99"},
        3_600_000,
    )
    raw = json.loads(json.dumps(planned.to_json()))
    assert raw["batch"] == 7 and raw["read"] == {SHARD: "99"} and raw["shards"][SHARD]["seq"] == "12"
    assert PlannedBatch.from_json(raw) == planned
    assert PlannedBatch.from_json(StreamOffset("s", {}).to_json()) is None


def _kept_after_five_batches(folder, retain: int) -> list[int | None]:
    """The batches whose range records are left after batches 0..4 were planned and read."""
    log = RangeLog(CheckpointStore(str(folder), lambda: None), retain=retain)
    for batch in range(5):
        log.planned(_planned(batch, ShardPosition()))
        log.create(_record(batch))
    return [range_batch(p.name) for p in sorted((folder / "sources/kinesis/ranges").iterdir())]


def test_range_records_are_kept_for_the_newest_batches_only(tmp_path):
    assert _kept_after_five_batches(tmp_path, retain=2) == [3, 4]
    assert range_batch("batch-x.json") is None


def test_a_retention_of_one_batch_still_keeps_the_batch_before_the_planned_one(tmp_path):
    # A restart whose offset log ends at batch 3 (batch 4 planned, never logged) reads batch 3's ranges.
    assert _kept_after_five_batches(tmp_path, retain=1) == [3, 4]


def test_a_replays_loss_note_is_removed_with_its_batchs_record(tmp_path):
    folder = tmp_path / "sources/kinesis/ranges"
    log = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=2)
    for batch in range(4):
        log.planned(_planned(batch, ShardPosition()))
        # Noted after this log listed the folder (a replay on an executor), as notes are.
        assert log.note_replay_loss(log.create(_record(batch)), f"gap {batch}")
    assert sorted(p.name for p in folder.iterdir()) == [
        f"batch-{b:010d}-{SHARD}{suffix}" for b in (2, 3) for suffix in (".json", ".replay-lost.json")
    ]
    # A restarted planner lists the folder first: the notes it finds go with their batches too.
    restarted = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=2)
    restarted.planned(_planned(4, ShardPosition()))
    restarted.planned(_planned(5, ShardPosition()))
    assert sorted(p.name for p in folder.iterdir()) == []
    assert [log.read_noted(b, SHARD) for b in (2, 3)] == [None, None]


def test_a_range_removed_between_a_lost_race_and_its_read_is_put_if_absent_again(tmp_path):
    store = CheckpointStore(str(tmp_path), lambda: None)
    answers = iter([False, True])
    calls: list[str] = []

    def create(name, text):
        calls.append(f"create {name}")
        return next(answers)

    def read_if_exists(name):
        calls.append(f"read {name}")
        return None

    store.create = create  # type: ignore[method-assign]
    store.read_if_exists = read_if_exists  # type: ignore[method-assign]
    store.write = lambda name, text: calls.append(f"write {name}")  # type: ignore[method-assign]
    record = _record(7)
    assert RangeLog(store, retain=100).create(record) == record
    name = range_name(7, record.shard)
    assert calls == [f"create {name}", f"read {name}", f"create {name}"]


class Stream(OneShard):
    """The one-shard fake as the planner sees a stream too (summary, listing); records arrived just now, so
    no read probes the trim horizon for expired records."""

    arrival = dt.datetime.now(dt.UTC)

    def describe_stream_summary(self, StreamName):
        return {"StreamDescriptionSummary": {"RetentionPeriodHours": 24}}

    def list_shards(self, **kwargs):
        return {"Shards": [{"ShardId": SHARD, "SequenceNumberRange": {}}]}


def _log_offset(checkpoint, batch: int, offset: dict) -> None:
    """What Spark writes before it runs a batch: ``offsets/<batch>`` (version, metadata, one line per source)."""
    folder = checkpoint / "offsets"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(batch)).write_text("v1\n{}\n" + json.dumps(offset) + "\n")


def _rows_of(reader, start: dict, end: dict) -> list[int]:
    """The rows of one batch as an executor produces them (a pickled copy of the reader, as Spark ships it)."""
    import pickle

    executor = pickle.loads(pickle.dumps(reader))
    return [
        int(bytes(row["data"][:8]))
        for task in reader.partitions(start, end)
        for part in executor.read(task)
        for row in part.to_pylist()
    ]


def test_the_planner_reads_no_records_and_a_restart_replays_and_continues_exactly(tmp_path, monkeypatch):
    from jobs.sources import kinesis

    stream = Stream(10)
    monkeypatch.setattr(kinesis, "_cached_client", lambda service, settings: stream)
    checkpoint = tmp_path / "checkpoint"
    settings = kinesis.KinesisSourceSettings(
        stream_name="s",
        region="us-east-1",
        checkpoint_location=str(checkpoint),
        start="TRIM_HORIZON",
        max_records_per_shard=4,
        idle_poll_ms=3_600_000,
    )
    planner = kinesis.KinesisStreamReader(settings)
    offsets = [planner.initialOffset()]
    seen = []
    for batch in range(3):
        offsets.append(planner.latestOffset())
        assert offsets[-1]["batch"] == batch
        _log_offset(checkpoint, batch, offsets[-1])
        calls_before = stream.get_records_calls
        seen.append(_rows_of(planner, offsets[-2], offsets[-1]))
        assert stream.get_records_calls > calls_before  # the executor's read
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    # Batch 2 read up to the tip: the planner waits (the idle poll) rather than plan an empty batch.
    stream.append(3)
    calls = stream.get_records_calls
    assert planner.latestOffset() == offsets[-1]
    assert stream.get_records_calls == calls  # planning makes no GetRecords call

    # The job dies after batch 2 ran but before Spark committed it: Spark replays batch 2 from its log.
    restarted = kinesis.KinesisStreamReader(settings)
    assert _rows_of(restarted, offsets[-2], offsets[-1]) == [8, 9]
    # A restarted reader polls at once; batch 3 starts after batch 2's recorded end.
    third = restarted.latestOffset()
    assert third["batch"] == 3 and third["shards"][SHARD]["seq"] == str(BASE + 90)
    assert _rows_of(restarted, offsets[-1], third) == [10, 11, 12]
    assert stream.get_records_calls == calls + 2  # the replay's and batch 3's reads only


def test_a_range_read_faster_than_2_mb_per_s_holds_the_shards_next_read_back():
    from jobs.sources.kinesis_ranges import quota_ready_at

    # 4 MiB read in 0.5 s: the quota allows it in 2 s, so the next read waits 1.5 s after this one ended.
    assert quota_ready_at(_record(0, bytes=4 * 1024 * 1024, read_seconds=0.5, read_at=1000.0)) == 1001.5
    # A read slower than the quota holds nothing back.
    assert quota_ready_at(_record(0, bytes=1024 * 1024, read_seconds=3.0, read_at=1000.0)) == 1000.0


def test_a_record_limit_means_more_even_when_the_shard_says_it_is_at_its_tip(tmp_path):
    client = OneShard(6)
    client.never_behind = True
    log = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    seen, _ = _drain(client, log, Limits(records=4, bytes=10**9, seconds=60), batches=3)
    assert seen == [[0, 1, 2, 3], [4, 5], []]
    assert [log.read(b, SHARD).more for b in range(3)] == [True, False, False]


def test_a_zero_retention_survives_the_offset():
    planned = PlannedBatch(StreamOffset("s", {}), 0, {}, 0)
    assert PlannedBatch.from_json(json.loads(json.dumps(planned.to_json()))).retention_ms == 0


class LateShard(Stream):
    """A stream that lists no shard at first (as while it is being created), then its one shard."""

    listed = False

    def list_shards(self, **kwargs):
        return super().list_shards(**kwargs) if self.listed else {"Shards": []}


def test_a_fresh_querys_empty_first_batch_takes_batch_id_0_and_the_next_plan_is_sparks_batch_1(
    tmp_path, monkeypatch
):
    from jobs.sources import kinesis, read_source_metrics

    stream = LateShard(3)
    monkeypatch.setattr(kinesis, "_cached_client", lambda service, settings: stream)
    checkpoint = tmp_path / "checkpoint"
    settings = kinesis.KinesisSourceSettings(
        stream_name="s", region="us-east-1", checkpoint_location=str(checkpoint), start="TRIM_HORIZON"
    )
    planner = kinesis.KinesisStreamReader(settings)
    initial = planner.initialOffset()
    # Nothing to read, but a fresh query runs batch 0 anyway, from the initial offset to this same one.
    first = planner.latestOffset()
    assert first == initial
    _log_offset(checkpoint, 0, first)
    assert _rows_of(planner, initial, first) == []

    stream.listed = True
    second = planner.latestOffset()
    # Spark runs this as its batch 1: the offset, its ranges and its metrics carry that id.
    assert second["batch"] == 1
    _log_offset(checkpoint, 1, second)
    assert _rows_of(planner, first, second) == [0, 1, 2]
    (metrics,) = read_source_metrics(str(checkpoint), batch_id=1)
    assert (metrics["batch_id"], metrics["records"], metrics["read"]) == (1, 3, [SHARD])
    # The mean of arrivals 0, 1 and 2 ms after the first, rounded to 0.1 ms (either way of a half).
    assert metrics["mean_arrival_at"] == pytest.approx(stream.arrival.timestamp() + 0.001, abs=1e-4)
    (empty,) = read_source_metrics(str(checkpoint), batch_id=0)
    assert (empty["batch_id"], empty["records"], empty["read"]) == (0, 0, [])


class Refused(OneShard):
    """Credentials that may get an iterator but not the records (or not decrypt them)."""

    def __init__(self, code: str) -> None:
        super().__init__(5)
        self.code = code

    def get_records(self, ShardIterator, Limit):
        self.get_records_calls += 1
        raise ClientError(
            {"Error": {"Code": self.code, "Message": "refused"}, "ResponseMetadata": {"HTTPStatusCode": 400}},
            "GetRecords",
        )


@pytest.mark.parametrize(
    "code,permission",
    [
        ("AccessDeniedException", "kinesis:GetRecords on the stream"),
        ("KMSAccessDeniedException", "kms:Decrypt on the stream's KMS key"),
    ],
)
def test_a_refused_get_records_is_one_access_error_naming_stream_shard_and_permission(
    tmp_path, code, permission
):
    client = Refused(code)
    log = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    with pytest.raises(StreamAccessError) as info:
        _read_from_start(client, log, Limits(100, 10**6, 10.0), batch=0)
    message = str(info.value)
    assert message.startswith(
        f"could not read Kinesis stream 's' shard {SHARD}: GetRecords was refused with {code} (An error occurred"
    )
    assert f"allow {permission}" in message
    assert "\n" not in message
    # Refused at once (no retries: a permission does not come back by itself), and no range was recorded.
    assert client.get_records_calls == 1
    assert log.read(0, SHARD) is None


def test_the_planner_reads_a_batchs_range_files_at_once_not_one_after_another(tmp_path):
    # Four shards' files; each read waits until all four are being read (a barrier), so one-after-another
    # reads would time out. On S3 each is a GET: a 100-shard plan must not wait for 100 round trips.
    shards = [f"shardId-00000000000{i}" for i in range(4)]
    store = CheckpointStore(str(tmp_path), lambda: None)
    log = RangeLog(store, retain=100)
    for i, shard in enumerate(shards):
        log.create(_record(7, end=str(100 + i), shard=shard))
    together = threading.Barrier(len(shards), timeout=5)
    real_read = store.read_if_exists

    def read_when_all_are_reading(name: str) -> str | None:
        together.wait()
        return real_read(name)

    store.read_if_exists = read_when_all_are_reading  # type: ignore[method-assign]
    position = ShardPosition()
    planned = PlannedBatch(StreamOffset("s", dict.fromkeys(shards, position)), 7, dict.fromkeys(shards), 0)
    records = log.read_batch(planned)
    assert records is not None
    assert {shard: record.end for shard, record in records.items()} == {
        "shardId-000000000000": "100",
        "shardId-000000000001": "101",
        "shardId-000000000002": "102",
        "shardId-000000000003": "103",
    }
    # One file missing: the batch has not run yet.
    (tmp_path / range_name(7, shards[2])).unlink()
    together.reset()
    assert log.read_batch(planned) is None


def _lost_race_after_the_horizon_moved(tmp_path, *, fail_on_data_loss: bool):
    """Attempt A of batch 0 read records 0..4 and recorded them; attempt B had started before A's record
    existed, but by its read the trim horizon had passed records 0 and 1: B read 2..4 (the same end)."""
    client = OneShard(5)
    log = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    _read_from_start(client, log, LIMITS, batch=0)
    client.seqs = client.seqs[2:]
    late = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    late.read = lambda batch, shard_id: None  # type: ignore[method-assign]  # B looked before A recorded
    return log, _read_from_start(client, late, LIMITS, batch=0, fail_on_data_loss=fail_on_data_loss)


def test_an_attempt_that_lost_the_race_with_the_same_end_but_a_later_first_record_is_data_loss(tmp_path):
    with pytest.raises(DataLossError, match=r"starts at sequence number \d+, but the first record a replay"):
        _lost_race_after_the_horizon_moved(tmp_path, fail_on_data_loss=True)


def test_an_attempt_that_lost_the_race_with_a_later_first_record_notes_the_loss_when_tolerated(tmp_path):
    _, read = _lost_race_after_the_horizon_moved(tmp_path, fail_on_data_loss=False)
    # The recorded range's rows that are left, and the records it misses counted, never a silently short batch.
    assert (_numbers(read), read.lost) == ([2, 3, 4], GAP)


def _replay_of_batch_1_after_expiry(tmp_path, expired: int, *, fail_on_data_loss: bool):
    """Batch 0 read records 0..2, batch 1 (after record 2) read 3..5; a day later records 0..expired-1 are
    gone and batch 1 is replayed: its start position is behind the trim horizon, so the read probes it."""
    client = OneShard(6)
    log = RangeLog(CheckpointStore(str(tmp_path), lambda: None), retain=100)
    three = Limits(records=3, bytes=10**9, seconds=60)
    _read_from_start(client, log, three, batch=0)
    start = advance(ShardPosition(), log.read(0, SHARD))
    assert start.sequence == str(BASE + 20)

    def batch_1(reader: ShardReader):
        return read_task(
            reader, log, "s", batch=1, shard_id=SHARD, start=start, closed_end=None, limits=three
        )

    assert _numbers(batch_1(_reader(client))) == [3, 4, 5]
    client.seqs = client.seqs[expired:]
    a_day_later = ShardReader(
        client,
        "s",
        fail_on_data_loss=fail_on_data_loss,
        sleep=lambda _seconds: None,
        now_ms=lambda: int(T0.timestamp() * 1000) + 25 * 3600 * 1000,
    )
    return log, batch_1(a_day_later)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_replay_after_a_sequence_number_whose_start_record_expired_but_not_its_first_loses_nothing(
    tmp_path, fail_on_data_loss
):
    # Record 2 (the start position, read by batch 0) expired; batch 1's first record (3) is still there.
    log, read = _replay_of_batch_1_after_expiry(tmp_path, 3, fail_on_data_loss=fail_on_data_loss)
    assert (_numbers(read), read.lost) == ([3, 4, 5], None)
    assert log.read_noted(1, SHARD).replay_lost is None
    assert not (tmp_path / replay_loss_name(1, SHARD)).exists()


GAP_AFTER_2 = (
    f"stream 's' shard {SHARD} batch 1: the recorded range (after sequence number {BASE + 20}) starts at "
    f"sequence number {BASE + 30}, but the first record a replay can read is {BASE + 40}; records of the "
    "range expired since the batch was first read"
)


def test_a_replay_after_a_sequence_number_whose_first_record_expired_is_data_loss(tmp_path):
    with pytest.raises(DataLossError) as info:
        _replay_of_batch_1_after_expiry(tmp_path, 4, fail_on_data_loss=True)
    assert str(info.value).startswith(f"data loss on the replay of {GAP_AFTER_2}. Expected a replay")


def test_a_tolerated_replay_after_a_sequence_number_whose_first_record_expired_notes_the_loss(tmp_path):
    log, read = _replay_of_batch_1_after_expiry(tmp_path, 4, fail_on_data_loss=False)
    assert (_numbers(read), read.lost) == ([4, 5], GAP_AFTER_2)
    assert log.read_noted(1, SHARD).replay_lost == GAP_AFTER_2


def test_a_loss_noted_inside_the_record_by_the_version_before_still_counts(tmp_path):
    store = CheckpointStore(str(tmp_path), lambda: None)
    # The version before rewrote the record with its note (no note file beside it).
    assert store.create(range_name(0, SHARD), _record(0, end=str(BASE), replay_lost="old gap").to_text())
    assert RangeLog(store, retain=100).read_noted(0, SHARD).replay_lost == "old gap"
