"""The Kafka source's position rules, as tables of cases (pure functions, no broker)."""

from __future__ import annotations

import pytest

from jobs.sources._kafka_offsets import (
    TopicOffsets,
    advance,
    check_retained,
    partition_cap,
    raise_on_loss,
    ranges,
)
from jobs.sources.errors import DataLossError


def test_json_form_is_sparks_kafka_offset():
    offsets = TopicOffsets("hub", {1: 7, 0: 42})
    assert offsets.to_json() == {"hub": {"0": 42, "1": 7}}
    assert TopicOffsets.from_json("hub", {"hub": {"0": 42, "1": 7}}) == offsets


@pytest.mark.parametrize(
    "logged",
    [
        {"other": {"0": 1}},  # another topic's offset in the same log
        {"stream": "s", "shards": {}},  # a Kinesis offset
        {"hub": {"0": "x"}},
        {"hub": {"0": 1}, "other": {"0": 1}},
    ],
)
def test_offsets_of_other_sources_are_not_read_as_ours(logged):
    assert TopicOffsets.from_json("hub", logged) is None


@pytest.mark.parametrize(
    ("start", "last_read", "end"),
    [
        ({0: 0, 1: 0}, {}, {0: 0, 1: 0}),  # nothing read: the batch is empty
        ({0: 0, 1: 5}, {0: 9}, {0: 10, 1: 5}),  # only partition 0 had records
        ({0: 3}, {0: 3, 1: 0}, {0: 4, 1: 1}),  # a new partition appears in the read
    ],
)
def test_a_batch_ends_after_the_last_offset_read(start, last_read, end):
    assert advance(TopicOffsets("hub", start), last_read).positions == end


def test_a_batch_never_ends_before_its_start():
    with pytest.raises(ValueError, match="read offset 2 before the start 5"):
        advance(TopicOffsets("hub", {0: 5}), {0: 2})
    with pytest.raises(ValueError, match="end offset 1 before the start 4"):
        ranges({0: 4}, {0: 1})


def test_ranges_are_the_partitions_that_moved():
    assert ranges({0: 0, 1: 5, 2: 9}, {0: 10, 1: 5, 2: 12, 3: 2}) == [(0, 0, 10), (2, 9, 12), (3, 0, 2)]


@pytest.mark.parametrize(
    ("total", "partitions", "cap"), [(1000, 4, 250), (1001, 4, 251), (3, 32, 1), (10, 0, 10)]
)
def test_partition_cap_keeps_the_batch_within_the_total(total, partitions, cap):
    assert partition_cap(total, partitions) == cap


def test_records_expired_before_they_were_read_are_data_loss():
    gaps = check_retained("hub", {0: 10, 1: 50}, {0: 25, 1: 40})
    assert gaps == ["topic hub partition 0: records 10 to 24 expired before they were read"]
    with pytest.raises(DataLossError, match="partition 0: records 10 to 24 expired"):
        raise_on_loss(gaps, fail_on_data_loss=True)
    raise_on_loss(gaps, fail_on_data_loss=False)  # opted out: reported by the caller, not raised
