"""The ranges a Kinesis micro-batch's executors read, recorded in the checkpoint: the source's exactly-once core.

The planner never calls GetRecords. It plans batch ``N`` as the position every shard stands at and the
shards to read (:class:`PlannedBatch`, what Spark logs as the batch's end offset). The task of each shard
reads on the executor from that position, bounded by the batch's limits, and records the range it read in
``<checkpoint>/sources/kinesis/ranges/batch-<N>-<shard>.json`` (:class:`RangeRecord`) before it hands a
single row to Spark. A replay of batch ``N`` (a retried task, a restart after a kill, a lost commit) finds
the record and reads exactly that range again; batch ``N+1`` starts where the records of batch ``N`` end
(:func:`advance`). The record is created put-if-absent: two attempts of one task agree on the first one's.
The record also keeps the range's first sequence number, so a replay that cannot start there (its first
records expired since) is data loss, raised or (``failOnDataLoss=false``) logged and counted, never a silently
shorter batch. A record whose start differs from the batch's logged offset (the offsets were edited by hand)
is refused (:class:`~jobs.sources.errors.RangeMismatchError`), never replaced by another range.

Everything here but :func:`read_task` is plain data, so the position arithmetic is unit-tested without Spark.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from jobs._store import CheckpointStore
from jobs.sources._offsets import ShardPosition, StreamOffset
from jobs.sources._shards import READ_BYTES_PER_SECOND, ShardRead, ShardReader
from jobs.sources.errors import DataLossError, RangeMismatchError

logger = logging.getLogger(__name__)

RANGES_DIR = "sources/kinesis/ranges"
# How many range files the planner reads at once (S3 GETs of a few hundred bytes each): as many as botocore's
# connection pool per client holds (max_pool_connections, 10), so no plan opens connections only to drop them.
_READ_THREADS = 10


def range_name(batch_id: int, shard_id: str) -> str:
    """The record's path under the checkpoint."""
    return f"{RANGES_DIR}/batch-{batch_id:010d}-{shard_id}.json"


def replay_loss_name(batch_id: int, shard_id: str) -> str:
    """The path of the note a replay leaves beside the record when the range's first records expired."""
    return f"{RANGES_DIR}/batch-{batch_id:010d}-{shard_id}.replay-lost.json"


def range_batch(name: str) -> int | None:
    """The batch id of a record's file name (as :meth:`CheckpointStore.list` gives it), None for others."""
    stem = name.removeprefix("batch-")
    digits = stem.split("-", 1)[0]
    if not name.startswith("batch-") or not name.endswith(".json") or not digits.isdigit():
        return None
    return int(digits)


@dataclass(frozen=True)
class Limits:
    """What one shard's task may read in one batch: records, payload bytes, seconds of reading."""

    records: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class RangeRecord:
    """What one shard's task read in one batch: after ``after`` from ``first`` up to ``end`` inclusive.

    ``first`` and ``end`` are None when nothing was read (``first`` is None too in records written before it
    was kept: their replays check the end only). ``more`` is True when a limit ended the read before the
    shard's tip (the next batch has work at once); ``done`` when a closed shard was read to its end.
    ``lost`` describes a gap the first attempt skipped, ``replay_lost`` one a replay found at the range's
    start (both only with ``failOnDataLoss=false``; they count in the batch's data-loss metrics). The record
    file itself never changes once created: ``replay_lost`` comes from the note beside it
    (:func:`replay_loss_name`, read by :meth:`RangeLog.read_noted`).
    """

    batch: int
    shard: str
    after: str | None
    end: str | None
    end_arrival_ms: int | None
    done: bool
    more: bool
    records: int
    bytes: int
    arrival_sum_us: int
    millis_behind_latest: int | None
    throttled: int
    retries: int
    iterator_refreshes: int
    lost: str | None
    read_seconds: float
    read_at: float
    first: str | None = None
    replay_lost: str | None = None

    def to_text(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_text(cls, text: str) -> RangeRecord:
        raw = json.loads(text)
        return cls(**{name: raw.get(name) for name in cls.__dataclass_fields__})


def advance(start: ShardPosition, record: RangeRecord) -> ShardPosition:
    """Where a shard stands after the recorded range: after its last record, done once a closed shard ended.

    Nothing read leaves the position as it was (a batch that found nothing moves nothing).
    """
    position = start.after(record.end, record.end_arrival_ms) if record.end is not None else start
    return replace(position, done=True) if record.done else position


@dataclass(frozen=True)
class PlannedBatch:
    """Spark's end offset of batch ``batch``: where each shard stands before it, and the shards it reads.

    ``read`` maps each shard read in this batch to its ``EndingSequenceNumber`` (None while open). The JSON
    keeps the old offset's ``stream`` and ``shards`` keys with the same meaning (positions read up to), so
    an offset logged before ranges were recorded still says where reading resumes.
    """

    offset: StreamOffset
    batch: int
    read: Mapping[str, str | None]
    retention_ms: int
    not_before: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.offset.to_json(),
            "batch": self.batch,
            "read": {shard: self.read[shard] for shard in sorted(self.read)},
            "retention_ms": self.retention_ms,
            "not_before": {shard: self.not_before[shard] for shard in sorted(self.not_before)},
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> PlannedBatch | None:
        """The planned batch of a logged offset; None for an offset without one (initial or older form)."""
        if "batch" not in raw:
            return None
        return cls(
            offset=StreamOffset.from_json(raw),
            batch=int(raw["batch"]),
            read=dict(raw.get("read", {})),
            # 0 is a retention too (a test's emulator): only a missing value means the default.
            retention_ms=int(raw["retention_ms"])
            if raw.get("retention_ms") is not None
            else 24 * 3600 * 1000,
            not_before={k: float(v) for k, v in raw.get("not_before", {}).items()},
        )


def next_positions(planned: PlannedBatch, records: Mapping[str, RangeRecord]) -> dict[str, ShardPosition]:
    """Every shard's position after ``planned`` ran: the read shards advanced by their records."""
    positions = dict(planned.offset.shards)
    for shard_id in planned.read:
        positions[shard_id] = advance(planned.offset.position(shard_id), records[shard_id])
    return positions


def quota_ready_at(record: RangeRecord) -> float:
    """When (epoch seconds) the shard's next read may start and keep to 2 MB/s of reads per shard: a
    range of ``bytes`` read faster than the quota allows holds the next batch's read back for the rest.
    (Within one process the reader also paces every call; this carries the pace across batches, whose
    tasks may run in other processes.)"""
    return record.read_at + max(0.0, record.bytes / READ_BYTES_PER_SECOND - record.read_seconds)


def has_more(records: Iterable[RangeRecord]) -> bool:
    """True when a batch's reads say the next batch has records waiting: a limit stopped a read before the
    tip, a shard answered it was behind, or a closed shard ended (its children may start)."""
    return any(r.more or r.done or (r.millis_behind_latest or 0) > 0 for r in records)


class RangeLog:
    """The range records of a query's batches under its checkpoint, the newest ``retain`` batches kept."""

    def __init__(self, store: CheckpointStore, *, retain: int | None = None) -> None:
        self._store = store
        self._retain = retain
        self._kept: dict[int, set[str]] | None = None

    def read(self, batch_id: int, shard_id: str) -> RangeRecord | None:
        text = self._store.read_if_exists(range_name(batch_id, shard_id))
        return None if text is None else RangeRecord.from_text(text)

    def read_noted(self, batch_id: int, shard_id: str) -> RangeRecord | None:
        """The record with the loss a replay noted beside it (what the batch's metrics count)."""
        record = self.read(batch_id, shard_id)
        if record is None or record.replay_lost is not None:
            return record  # a record of the version before kept its note inside
        note = self._store.read_if_exists(replay_loss_name(batch_id, shard_id))
        return record if note is None else replace(record, replay_lost=json.loads(note)["replay_lost"])

    def read_batch(self, planned: PlannedBatch) -> dict[str, RangeRecord] | None:
        """Every read shard's record of ``planned``; None while one is missing (the batch has not run).

        The planner calls this once per batch, one small file per shard: on S3 a GET each, so they are read
        ``_READ_THREADS`` at a time (a 100-shard stream's plan waits for about ten round trips, not 100).
        """
        shard_ids = list(planned.read)
        if len(shard_ids) <= 1:
            records = [self.read(planned.batch, shard_id) for shard_id in shard_ids]
        else:
            with ThreadPoolExecutor(min(_READ_THREADS, len(shard_ids)), "kinesis-ranges") as pool:
                records = list(pool.map(lambda shard_id: self.read(planned.batch, shard_id), shard_ids))
        found: dict[str, RangeRecord] = {}
        for shard_id, record in zip(shard_ids, records, strict=True):
            if record is None:
                return None
            found[shard_id] = record
        return found

    def create(self, record: RangeRecord) -> RangeRecord:
        """Record ``record`` unless its batch and shard have one already; returns the one that holds."""
        name = range_name(record.batch, record.shard)
        for _ in range(3):
            if self._store.create(name, record.to_text()):
                return record
            text = self._store.read_if_exists(name)
            if text is not None:
                return RangeRecord.from_text(text)
            # Removed in between (only by retention of a long-gone batch): put-if-absent again, never a plain
            # write, so a record another attempt holds is never replaced.
        raise OSError(f"could not record {name}: it was created and removed three times while this task ran.")

    def where(self, batch_id: int, shard_id: str) -> str:
        """The record's location, for messages."""
        return f"{self._store.root.rstrip('/')}/{range_name(batch_id, shard_id)}"

    def note_replay_loss(self, record: RangeRecord, gap: str) -> bool:
        """Note ``gap`` as what a replay of ``record`` found expired, unless a replay noted it already; True
        when this call's note is the one kept. A put-if-absent file beside the record (a hard link locally,
        If-None-Match on S3), so the first note wins on every file system and the record is never rewritten.
        """
        note = {"batch": record.batch, "shard": record.shard, "replay_lost": gap}
        return self._store.create(
            replay_loss_name(record.batch, record.shard), json.dumps(note, sort_keys=True)
        )

    def planned(self, planned: PlannedBatch) -> None:
        """Note the records ``planned`` will write and remove those of batches older than the kept ones."""
        if self._retain is None:
            return
        if self._kept is None:
            self._kept = {}
            for name in self._store.list(RANGES_DIR):
                batch = range_batch(name)
                if batch is not None:
                    self._kept.setdefault(batch, set()).add(name)
        # A replay's note is written later (and only sometimes): its name is kept with its batch's records,
        # so it goes with them (deleting a name that was never written is fine).
        self._kept.setdefault(planned.batch, set()).update(
            name(planned.batch, s).rsplit("/", 1)[-1]
            for s in planned.read
            for name in (range_name, replay_loss_name)
        )
        # The batch before the planned one stays whatever the setting: a restart whose offset log ends at it
        # (the planned batch never logged) reads its ranges to know where the next batch starts.
        oldest_kept = planned.batch - max(self._retain, 2) + 1
        for batch in sorted(b for b in self._kept if b < oldest_kept):
            for name in sorted(self._kept.pop(batch)):
                self._store.delete(f"{RANGES_DIR}/{name}")


def _record_of(
    batch: int, shard_id: str, start: ShardPosition, read: ShardRead, *, more: bool, seconds: float
) -> RangeRecord:
    return RangeRecord(
        batch=batch,
        shard=shard_id,
        after=start.sequence,
        first=read.sequence_numbers[0] if read.sequence_numbers else None,
        end=read.last_sequence if read.sequence_numbers else None,
        end_arrival_ms=read.last_arrival_ms if read.sequence_numbers else None,
        done=read.finished,
        more=more,
        records=len(read.sequence_numbers),
        bytes=read.nbytes,
        arrival_sum_us=read.arrival_sum_us,
        millis_behind_latest=read.millis_behind_latest,
        throttled=read.stats.throttled,
        retries=read.stats.retries,
        iterator_refreshes=read.stats.iterator_refreshes,
        lost=read.lost,
        read_seconds=round(seconds, 4),
        read_at=round(time.time(), 4),
    )


def fetch(
    reader: ShardReader,
    batch: int,
    shard_id: str,
    start: ShardPosition,
    *,
    closed_end: str | None,
    limits: Limits,
) -> tuple[ShardRead, RangeRecord]:
    """Read a shard's next range within ``limits`` (the first attempt of a batch's task)."""
    begun = time.monotonic()
    read = reader.read(
        shard_id,
        start,
        closed_end=closed_end,
        max_records=limits.records,
        max_bytes=limits.bytes,
        deadline=begun + limits.seconds,
    )
    return read, _record_of(batch, shard_id, start, read, more=read.limited, seconds=time.monotonic() - begun)


def replay(
    reader: ShardReader, ranges: RangeLog, stream: str, start: ShardPosition, record: RangeRecord
) -> ShardRead:
    """Read exactly the recorded range again (same records, same order).

    A record that keeps its first sequence number proves the replay starts there: when that record expired
    since the first attempt, the replay is data loss, raised, or with ``failOnDataLoss=false`` logged once,
    noted beside the record (so the batch's metrics count it) and the rest of the range returned.
    """
    if record.end is None:
        return ShardRead()
    first = record.first
    read = reader.read(
        record.shard, start, closed_end=None, until_sequence=record.end, report_gap=first is not None
    )
    if first is not None:
        read.lost = None  # the first record decides below, not the trim-horizon probe's estimate
        available = read.sequence_numbers[0] if read.sequence_numbers else None
        if available is None or int(available) != int(first):
            read.lost = _replay_gap(reader, stream, start, record, available)
            # Logged and counted once per batch and shard, by the replay whose note is first; the metrics read
            # it there. Every later replay of the batch returns the same rows and the same gap, unlogged.
            if ranges.note_replay_loss(record, read.lost):
                logger.warning("kinesis source replaying what is left of a range: %s", read.lost)
            if available is None:
                return read  # the whole range expired: nothing of it is left to check
    if read.last_sequence is None or int(read.last_sequence) < int(record.end):
        raise DataLossError(
            f"expected to re-read stream {stream!r} shard {record.shard} of batch {record.batch} up to "
            f"sequence number {record.end}, but the shard ended at {read.last_sequence}: the recorded "
            "records expired before this replay. Restart from a new checkpoint."
        )
    return read


def _replay_gap(
    reader: ShardReader, stream: str, start: ShardPosition, record: RangeRecord, available: str | None
) -> str:
    """The loss of a replay that cannot start at the recorded first record: raised, or returned."""
    found = (
        f"the first record a replay can read is {available}"
        if available is not None
        else f"no record of it up to {record.end} is left"
    )
    where = f"after sequence number {start.sequence}" if start.sequence else "from the shard's start position"
    gap = (
        f"stream {stream!r} shard {record.shard} batch {record.batch}: the recorded range ({where}) starts at "
        f"sequence number {record.first}, but {found}; records of the range expired since the batch was first "
        "read"
    )
    if reader.fail_on_data_loss:
        raise DataLossError(
            f"data loss on the replay of {gap}. Expected a replay to read the batch's recorded range whole. "
            "Restart from a new checkpoint, raise the stream's retention, or pass --fail-on-data-loss false to "
            "replay what is left (the loss is then logged and counted)."
        )
    return gap


def read_task(
    reader: ShardReader,
    log: RangeLog,
    stream: str,
    *,
    batch: int,
    shard_id: str,
    start: ShardPosition,
    closed_end: str | None,
    limits: Limits,
) -> ShardRead:
    """One shard's rows of batch ``batch``: the recorded range when there is one, else a fresh read that is
    recorded (put-if-absent) before it is returned. Another attempt's record, when it got there first,
    wins: its range is what this attempt returns."""
    recorded = log.read(batch, shard_id)
    if recorded is not None:
        if recorded.after != start.sequence:
            raise _mismatch(log, stream, start, recorded)
        return replay(reader, log, stream, start, recorded)
    read, mine = fetch(reader, batch, shard_id, start, closed_end=closed_end, limits=limits)
    held = log.create(mine)
    # The same end is not the same range: when the trim horizon moved between two attempts, the later one
    # starts after the recorded first record, and only a replay of the held record counts what it misses.
    if (held.first, held.end) == (mine.first, mine.end):
        return read
    return replay(reader, log, stream, start, held)


def _mismatch(log: RangeLog, stream: str, start: ShardPosition, recorded: RangeRecord) -> RangeMismatchError:
    # Refused, never replaced: the batch id is already bound to the recorded range (the sink's transaction
    # version is the batch id, and delta-spark skips a version it committed), so another range read under it
    # could be dropped by the sink without a sign. Only a person knows whether the batch reached the table.
    def after(sequence: str | None) -> str:
        return (
            f"after sequence number {sequence}" if sequence is not None else "at the shard's start position"
        )

    return RangeMismatchError(
        f"batch {recorded.batch} of stream {stream!r} shard {recorded.shard} was first read "
        f"{after(recorded.after)} (recorded in {log.where(recorded.batch, recorded.shard)}), but the "
        f"checkpoint's offsets now start it {after(start.sequence)}: they were changed after the batch ran. "
        f"Expected a replay of a batch to read its recorded range; restore the checkpoint's offsets/"
        f"{recorded.batch} as it was, or start from a new checkpoint (delete the batch's range files only if "
        "you know it never reached the table: its batch id may be committed there already)."
    )
