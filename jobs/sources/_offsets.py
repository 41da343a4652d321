"""The Kinesis source's model: where a query starts, where each shard stands, and the shard-lineage rules.

Everything here is plain data and pure functions (no boto3, no Spark), so the rules that decide what a
micro-batch may read are table-tested on their own. The JSON form of :class:`StreamOffset` is what Spark
writes to the checkpoint's offset log, so it must stay readable by every released version::

    {"stream": "orders", "shards": {"shardId-000000000000": {"seq": "4957...", "from": "TRIM_HORIZON",
                                                             "done": false, "ts": 1767225600000}}}
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from jobs.sources.errors import SourceSettingsError

_TRIM_HORIZON = "TRIM_HORIZON"
_AT_TIMESTAMP = "AT_TIMESTAMP:"


@dataclass(frozen=True)
class StartPosition:
    """Where reading a shard begins before any of its records was read.

    Attributes:
        at_timestamp_ms: the first record that arrived at or after this moment (epoch milliseconds);
            None means the shard's trim horizon (its oldest retained record).
    """

    at_timestamp_ms: int | None = None

    @classmethod
    def from_spec(cls, spec: str) -> StartPosition:
        """Read the checkpointed form: ``TRIM_HORIZON`` or ``AT_TIMESTAMP:<epoch ms>``."""
        if spec.startswith(_AT_TIMESTAMP):
            return cls(int(spec[len(_AT_TIMESTAMP) :]))
        return cls()

    @property
    def spec(self) -> str:
        """The checkpointed form (see :meth:`from_spec`)."""
        return _TRIM_HORIZON if self.at_timestamp_ms is None else f"{_AT_TIMESTAMP}{self.at_timestamp_ms}"

    @classmethod
    def from_option(cls, value: str, *, now: dt.datetime | None = None) -> StartPosition:
        """Read the user's ``trim-horizon`` | ``latest`` | ``at-timestamp=<ISO-8601>``.

        ``latest`` is pinned to ``now`` (AT_TIMESTAMP), so a restart before the first batch and a shard that
        stays empty for a while both keep the meaning the query started with.

        Raises:
            SourceSettingsError: naming the value and the accepted forms.
        """
        text = value.strip()
        if text == "trim-horizon":
            return cls()
        if text == "latest":
            return cls(_epoch_ms(now or dt.datetime.now(dt.UTC)))
        if text.startswith("at-timestamp="):
            raw = text.split("=", 1)[1]
            try:
                moment = dt.datetime.fromisoformat(raw)
            except ValueError as error:
                raise SourceSettingsError(
                    "expected starting position 'at-timestamp=<ISO-8601>' like "
                    f"'at-timestamp=2025-01-31T12:00:00Z', found timestamp {raw!r} which is not ISO-8601. "
                    "Fix --starting-position."
                ) from error
            return cls(_epoch_ms(moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)))
        raise SourceSettingsError(
            "expected starting position 'trim-horizon', 'latest' or 'at-timestamp=<ISO-8601>', found "
            f"{value!r}. Fix --starting-position."
        )


def _epoch_ms(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


def parse_starting_position(value: str, *, now: dt.datetime | None = None) -> str:
    """The checkpointed start spec of a user's ``--starting-position`` (see :meth:`StartPosition.from_option`)."""
    return StartPosition.from_option(value, now=now).spec


@dataclass(frozen=True)
class ShardPosition:
    """How far one shard has been read.

    Attributes:
        start: where reading begins while ``sequence`` is None.
        sequence: the last sequence number read (reading resumes after it); None before the first record.
        done: a closed shard read to its end; never polled again.
        last_arrival_ms: arrival time of the record at ``sequence`` (epoch ms), to tell when it nears expiry.
    """

    start: StartPosition = StartPosition()
    sequence: str | None = None
    done: bool = False
    last_arrival_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.sequence, "from": self.start.spec, "done": self.done, "ts": self.last_arrival_ms}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ShardPosition:
        return cls(
            start=StartPosition.from_spec(raw.get("from") or _TRIM_HORIZON),
            sequence=raw.get("seq"),
            done=bool(raw.get("done", False)),
            last_arrival_ms=raw.get("ts"),
        )

    def after(self, sequence: str | None, arrival_ms: int | None) -> ShardPosition:
        """This position moved past ``sequence`` (unchanged when nothing was read)."""
        if sequence is None:
            return self
        return replace(self, sequence=sequence, last_arrival_ms=arrival_ms)


# A shard the offset has not seen yet was born after the query started (a reshard's child): it holds only
# records newer than the start, so it is read from its beginning.
NEW_SHARD = ShardPosition()


@dataclass(frozen=True)
class StreamOffset:
    """Every shard's position: the offset of one micro-batch's end (what Spark checkpoints)."""

    stream: str
    shards: Mapping[str, ShardPosition]

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "shards": {k: self.shards[k].to_json() for k in sorted(self.shards)}}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> StreamOffset:
        return cls(
            stream=str(raw["stream"]),
            shards={k: ShardPosition.from_json(v) for k, v in raw.get("shards", {}).items()},
        )

    def position(self, shard_id: str) -> ShardPosition:
        """The shard's position; a shard this offset does not know is new (see :data:`NEW_SHARD`)."""
        return self.shards.get(shard_id, NEW_SHARD)


@dataclass(frozen=True)
class ShardInfo:
    """One shard as ListShards reports it."""

    shard_id: str
    parents: tuple[str, ...]
    ending_sequence: str | None  # None while the shard is open


def lost_shards(offset: StreamOffset, listed: Mapping[str, ShardInfo]) -> list[str]:
    """Shards the offset had not read to their end that are no longer listed: their unread records expired."""
    return [k for k, position in offset.shards.items() if k not in listed and not position.done]


def carried_forward(offset: StreamOffset, listed: Mapping[str, ShardInfo]) -> dict[str, ShardPosition]:
    """The positions of the listed shards, sorted by id: known shards keep theirs, new ones start unread."""
    return {shard_id: offset.position(shard_id) for shard_id in sorted(listed)}


def eligible_shards(
    listed: Mapping[str, ShardInfo], positions: Mapping[str, ShardPosition]
) -> list[ShardInfo]:
    """Listed shards not read to their end whose listed parents all are.

    A child waits for its parents, so its records land in a later micro-batch than theirs and per-key order
    holds across reshards. A parent that is no longer listed has expired and cannot hold the child back.
    """
    return [
        info
        for shard_id, info in listed.items()
        if not positions[shard_id].done
        and all(parent not in listed or positions.get(parent, NEW_SHARD).done for parent in info.parents)
    ]
