"""Table tests of the Kinesis source's model: offsets as Spark checkpoints them, lineage and lost shards."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from jobs.sources import ShardPosition, SourceSettingsError, StartPosition, StreamOffset
from jobs.sources._offsets import ShardInfo, carried_forward, eligible_shards, lost_shards

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    "option,spec",
    [
        ("trim-horizon", "TRIM_HORIZON"),
        ("latest", "AT_TIMESTAMP:1767225600000"),
        ("at-timestamp=2026-01-01T00:00:01Z", "AT_TIMESTAMP:1767225601000"),
        ("at-timestamp=2026-01-01T01:00:01+01:00", "AT_TIMESTAMP:1767225601000"),
        (" trim-horizon ", "TRIM_HORIZON"),
    ],
)
def test_start_position_options_map_to_checkpointed_specs(option, spec):
    start = StartPosition.from_option(option, now=T0)
    assert start.spec == spec
    assert StartPosition.from_spec(spec) == start


@pytest.mark.parametrize(
    "option,message",
    [
        ("earliest", "found 'earliest'"),
        ("at-timestamp=yesterday", "found timestamp 'yesterday' which is not ISO-8601"),
    ],
)
def test_bad_start_options_name_the_value(option, message):
    with pytest.raises(SourceSettingsError, match=message):
        StartPosition.from_option(option)


def test_offset_json_is_the_checkpointed_form_and_round_trips():
    raw = {
        "stream": "orders",
        "shards": {
            "shardId-1": {"seq": None, "from": "AT_TIMESTAMP:5", "done": False, "ts": None},
            "shardId-0": {"seq": "42", "from": "TRIM_HORIZON", "done": True, "ts": 1767225600000},
        },
    }
    offset = StreamOffset.from_json(raw)
    assert offset.shards["shardId-0"] == ShardPosition(StartPosition(), "42", True, 1767225600000)
    assert offset.shards["shardId-1"] == ShardPosition(StartPosition(5))
    text = json.dumps(offset.to_json())
    assert text == (
        '{"stream": "orders", "shards": {'
        '"shardId-0": {"seq": "42", "from": "TRIM_HORIZON", "done": true, "ts": 1767225600000}, '
        '"shardId-1": {"seq": null, "from": "AT_TIMESTAMP:5", "done": false, "ts": null}}}'
    )


def test_offsets_written_before_ts_was_recorded_still_load():
    offset = StreamOffset.from_json({"stream": "s", "shards": {"a": {"seq": "7", "from": "TRIM_HORIZON"}}})
    assert offset.shards["a"] == ShardPosition(sequence="7")


def test_position_after_moves_only_when_something_was_read():
    position = ShardPosition(StartPosition(5), "1", False, 10)
    assert position.after(None, None) is position
    assert position.after("9", 20) == ShardPosition(StartPosition(5), "9", False, 20)


def _listed(*shards: tuple[str, tuple[str, ...]]) -> dict[str, ShardInfo]:
    return {shard_id: ShardInfo(shard_id, parents, None) for shard_id, parents in shards}


DONE = ShardPosition(sequence="9", done=True)
READING = ShardPosition(sequence="3")


@pytest.mark.parametrize(
    "shards,positions,expected",
    [
        # No lineage: every shard not read to its end.
        ([("a", ()), ("b", ())], {"a": READING, "b": DONE}, ["a"]),
        # A child waits while its parent is unfinished.
        ([("p", ()), ("c", ("p",))], {"p": READING, "c": ShardPosition()}, ["p"]),
        # ...and is eligible once the parent is done.
        ([("p", ()), ("c", ("p",))], {"p": DONE, "c": ShardPosition()}, ["c"]),
        # A merge child waits for both parents.
        ([("p", ()), ("q", ()), ("m", ("p", "q"))], {"p": DONE, "q": READING, "m": READING}, ["q"]),
        # A parent no longer listed (expired) does not hold its child back.
        ([("c", ("gone",))], {"c": ShardPosition()}, ["c"]),
    ],
)
def test_eligible_shards_follow_lineage(shards, positions, expected):
    listed = _listed(*shards)
    assert [info.shard_id for info in eligible_shards(listed, positions)] == expected


def test_lost_shards_are_unfinished_shards_no_longer_listed():
    offset = StreamOffset("s", {"a": READING, "b": DONE, "c": READING})
    assert lost_shards(offset, _listed(("c", ()))) == ["a"]


def test_carried_forward_keeps_known_positions_and_starts_new_shards_from_their_beginning():
    offset = StreamOffset("s", {"a": READING, "old": DONE})
    positions = carried_forward(offset, _listed(("b", ("a",)), ("a", ())))
    assert positions == {"a": READING, "b": ShardPosition()}
    assert list(positions) == ["a", "b"]
