from __future__ import annotations

import random

import pytest
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError, ReadTimeoutError
from locust.env import Environment

from loadtest.clients.kinesis import (
    MAX_BYTES_PER_RECORD,
    KinesisProducer,
    RetryPolicy,
    batch_events,
    check_event,
)
from loadtest.errors import RecordTooLargeError, StreamNotFoundError
from loadtest.events import Event
from loadtest.ledger import LedgerWriter, read_ledger
from loadtest.stats import record_logger

THROTTLED = "ProvisionedThroughputExceededException"


def event(n: int, size: int = 10) -> Event:
    return Event(f"id-{n}", "2026-01-01T00:00:00.000000Z", f"pk-{n}", b"x" * size)


class FakeKinesis:
    """Replies from a script: one list of error codes (None = accepted) per call, or an exception."""

    def __init__(self, plan: list[list[str | None] | Exception]) -> None:
        self.plan = list(plan)
        self.calls: list[list[bytes]] = []
        self.sequence = 0

    def put_records(self, *, StreamName: str, Records: list[dict]) -> dict:
        self.calls.append([r["Data"] for r in Records])
        step = self.plan.pop(0)
        if isinstance(step, Exception):
            raise step
        assert len(step) == len(Records), "test plan does not match the number of entries sent"
        out = []
        for code in step:
            if code is None:
                self.sequence += 1
                out.append({"ShardId": "shardId-000000000001", "SequenceNumber": str(self.sequence)})
            else:
                out.append({"ErrorCode": code, "ErrorMessage": f"{code} for test"})
        return {"FailedRecordCount": sum(c is not None for c in step), "Records": out}


def client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, "PutRecords")


def producer(fake: FakeKinesis, **kwargs) -> tuple[KinesisProducer, list[float]]:
    sleeps: list[float] = []
    return (
        KinesisProducer(fake, "s", sleep=sleeps.append, rng=random.Random(1), **kwargs),
        sleeps,
    )


def test_partial_failure_resends_exactly_the_failed_entries():
    batch = [Event(f"id-{n}", "t", f"pk-{n}", f"d{n}".encode()) for n in range(5)]
    fake = FakeKinesis([[None, THROTTLED, None, "InternalFailure", None], [None, THROTTLED], [None]])
    kinesis, sleeps = producer(fake)

    result = kinesis.send(batch)

    assert fake.calls == [[b"d0", b"d1", b"d2", b"d3", b"d4"], [b"d1", b"d3"], [b"d3"]]
    assert [(a.event.event_id, a.sequence_number) for a in result.acknowledged] == [
        ("id-0", "1"),
        ("id-2", "2"),
        ("id-4", "3"),
        ("id-1", "4"),
        ("id-3", "5"),
    ]
    assert result.failed == []
    assert result.throttled_attempts == 2
    assert result.calls == 3
    # Full jitter: each wait is below the growing ceiling (0.05 s, then 0.1 s).
    assert len(sleeps) == 2
    assert 0 <= sleeps[0] <= 0.05
    assert 0 <= sleeps[1] <= 0.1


def test_acknowledged_entries_are_handed_over_per_reply_before_any_backoff():
    fake = FakeKinesis([[None, THROTTLED, None], [None]])
    seen: list[list[str]] = []
    kinesis = KinesisProducer(fake, "s", sleep=lambda _: seen.append(["<sleep>"]), rng=random.Random(1))

    kinesis.send(
        [event(0), event(1), event(2)],
        on_acknowledged=lambda acked: seen.append([a.event.event_id for a in acked]),
    )

    assert seen == [["id-0", "id-2"], ["<sleep>"], ["id-1"]]


def test_entries_still_failing_after_the_last_attempt_are_failed_not_dropped():
    fake = FakeKinesis([[None, THROTTLED], [THROTTLED]])
    kinesis, _ = producer(fake, retry=RetryPolicy(max_attempts=2))

    result = kinesis.send([event(0), event(1)])

    assert [a.event.event_id for a in result.acknowledged] == ["id-0"]
    assert [(f.event.event_id, f.error_code) for f in result.failed] == [("id-1", "RetriesExhausted")]
    assert len(fake.calls) == 2


def test_non_retryable_entry_error_fails_at_once():
    fake = FakeKinesis([[None, "KMSAccessDeniedException"]])
    kinesis, sleeps = producer(fake)

    result = kinesis.send([event(0), event(1)])

    assert [(f.event.event_id, f.error_code) for f in result.failed] == [("id-1", "KMSAccessDeniedException")]
    assert sleeps == []


def test_throttled_call_is_retried_whole():
    fake = FakeKinesis([client_error(THROTTLED), [None, None]])
    kinesis, _ = producer(fake)

    result = kinesis.send([event(0), event(1)])

    assert len(fake.calls) == 2
    assert [a.event.event_id for a in result.acknowledged] == ["id-0", "id-1"]
    assert result.throttled_attempts == 2


ENDPOINT = "https://kinesis.us-east-1.amazonaws.com"


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(EndpointConnectionError(endpoint_url=ENDPOINT), id="endpoint-connection"),
        pytest.param(ReadTimeoutError(endpoint_url=ENDPOINT), id="read-timeout"),
        pytest.param(ConnectionClosedError(endpoint_url=ENDPOINT), id="connection-reset"),
    ],
)
def test_a_transport_error_without_an_aws_code_resends_the_call_and_the_ledger_gets_each_event_once(
    tmp_path, error
):
    fake = FakeKinesis([error, [None, None, None]])
    kinesis, sleeps = producer(fake)
    ledger = LedgerWriter(tmp_path)

    result = kinesis.send([event(0), event(1), event(2)], on_acknowledged=ledger.write_acknowledged)
    ledger.close()

    assert fake.calls == [[b"x" * 10] * 3] * 2
    assert (result.calls, result.call_errors, result.retried, result.failed) == (2, 1, 3, [])
    assert len(sleeps) == 1
    assert [(e.event_id, e.shard_id, e.sequence_number) for e in read_ledger(tmp_path)] == [
        ("id-0", "shardId-000000000001", "1"),
        ("id-1", "shardId-000000000001", "2"),
        ("id-2", "shardId-000000000001", "3"),
    ]


def test_missing_stream_raises_a_clear_error():
    fake = FakeKinesis([client_error("ResourceNotFoundException")])
    kinesis, _ = producer(fake)

    with pytest.raises(StreamNotFoundError, match=r"stream 's': expected it to exist"):
        kinesis.send([event(0)])


def test_locust_statistics_count_calls_records_and_throttled_entries_as_failures():
    env = Environment()
    env.create_local_runner()  # hooks the request event up to env.stats
    fake = FakeKinesis([[None, THROTTLED, THROTTLED], [None, None]])
    kinesis, _ = producer(fake, fire=env.events.request.fire)

    kinesis.send([event(0), event(1), event(2)])

    calls = env.stats.get("call", "PutRecords")
    records = env.stats.get("record", "PutRecords")
    assert (calls.num_requests, calls.num_failures) == (2, 0)
    # 3 entries on the first call (2 throttled) + 2 resent entries, both accepted.
    assert (records.num_requests, records.num_failures) == (5, 2)
    assert records.total_content_length == 5 * (10 + 4)
    errors = {(e.name, repr(e.error)) for e in env.stats.errors.values()}
    assert errors == {("record", "EntryFailure('ProvisionedThroughputExceededException')")}


def test_oversized_record_is_refused_with_a_clear_message():
    too_big = event(7, size=MAX_BYTES_PER_RECORD)  # + 4 bytes of partition key

    with pytest.raises(RecordTooLargeError) as info:
        check_event(too_big)

    assert str(info.value) == (
        "event id-7: expected at most 1048576 bytes (1 MiB) of data plus partition key per Kinesis record, "
        "found 1048580 bytes; it was not sent. Make the payload smaller or split it into several events."
    )
    check_event(event(8, size=MAX_BYTES_PER_RECORD - 4))  # exactly 1 MiB is fine


def test_refused_record_is_reported_as_a_locust_failure():
    env = Environment()
    env.create_local_runner()  # hooks the request event up to env.stats
    kinesis, _ = producer(FakeKinesis([]), fire=env.events.request.fire)
    too_big = event(7, size=MAX_BYTES_PER_RECORD)

    with pytest.raises(RecordTooLargeError) as info:
        check_event(too_big)
    rejected = kinesis.refuse(too_big, info.value)

    assert rejected.error_code == "RecordTooLarge"
    assert env.stats.get("record", "PutRecords").num_failures == 1


def test_batches_respect_entry_and_byte_limits():
    small = [event(n, size=10) for n in range(1201)]
    assert [len(b) for b in batch_events(small)] == [500, 500, 201]

    big = [event(n, size=1_100_000) for n in range(11)]  # 4 fit in 5 MiB, 5 do not
    assert [len(b) for b in batch_events(big)] == [4, 4, 3]
    assert [len(b) for b in batch_events(small[:7], max_entries=3)] == [3, 3, 1]


def test_record_logger_counts_many_records_as_one_request_each():
    env = Environment()
    env.create_local_runner()
    log_records = record_logger(env.stats)

    log_records("PutRecords", "record", 12.3, 7_000, 500)
    log_records("PutRecords", "record", 240.0, 140, 10)

    records = env.stats.get("record", "PutRecords")
    assert (records.num_requests, records.num_failures) == (510, 0)
    assert records.total_content_length == 7_140
    assert dict(records.response_times) == {12: 500, 240: 10}
    assert (records.min_response_time, records.max_response_time) == (12.3, 240.0)
    assert round(records.avg_response_time, 3) == round((12.3 * 500 + 240.0 * 10) / 510, 3)
    assert records.get_response_time_percentile(0.5) == 12
    assert records.get_response_time_percentile(0.99) == 240
    assert sum(records.num_reqs_per_sec.values()) == 510
    # Locust's "Aggregated" row counts them too, as it does for every request.
    assert (env.stats.total.num_requests, env.stats.total.total_content_length) == (510, 7_140)


def test_record_logger_gives_the_statistics_of_one_request_per_record():
    per_request, bulk = Environment(), Environment()
    for env in (per_request, bulk):
        env.create_local_runner()
    for _ in range(3):
        per_request.stats.log_request("PutRecords", "record", 57.0, 150)
    record_logger(bulk.stats)("PutRecords", "record", 57.0, 450, 3)

    def figures(env: Environment) -> tuple:
        entry = env.stats.get("record", "PutRecords")
        return (
            entry.num_requests,
            entry.total_content_length,
            entry.total_response_time,
            dict(entry.response_times),
            entry.min_response_time,
            entry.max_response_time,
            entry.num_none_requests,
            sum(entry.num_reqs_per_sec.values()),
        )

    assert figures(bulk) == figures(per_request) == (3, 450, 171.0, {57: 3}, 57.0, 57.0, 0, 3)


def test_with_a_record_logger_only_calls_and_failed_entries_fire_request_events():
    env = Environment()
    env.create_local_runner()
    fired: list[tuple[str, bool]] = []
    env.events.request.add_listener(lambda name, exception=None, **_: fired.append((name, exception is None)))
    fake = FakeKinesis([[None, THROTTLED, THROTTLED], [None, None]])
    kinesis, _ = producer(fake, fire=env.events.request.fire, log_records=record_logger(env.stats))

    kinesis.send([event(0), event(1), event(2)])

    # One event per call and one per failed entry; the 3 accepted entries are logged in bulk, one update a reply.
    assert fired == [("call", True), ("record", False), ("record", False), ("call", True)]
    calls = env.stats.get("call", "PutRecords")
    records = env.stats.get("record", "PutRecords")
    assert (calls.num_requests, calls.num_failures) == (2, 0)
    # The same figures as one request per entry: 3 entries on the first call (2 throttled) + 2 resent.
    assert (records.num_requests, records.num_failures) == (5, 2)
    assert records.total_content_length == 5 * (10 + 4)
    errors = {(e.name, repr(e.error), e.occurrences) for e in env.stats.errors.values()}
    assert errors == {("record", "EntryFailure('ProvisionedThroughputExceededException')", 2)}


def test_a_failing_statistics_update_loses_no_acknowledgement(caplog):
    env = Environment()
    env.create_local_runner()
    fired: list[tuple[str, bool]] = []
    env.events.request.add_listener(lambda name, exception=None, **_: fired.append((name, exception is None)))

    def broken(*_args: object) -> None:
        raise AttributeError("module 'locust.stats' has no attribute 'bucket_response_time'")

    fake = FakeKinesis([[None, THROTTLED, None], [None]])
    kinesis, _ = producer(fake, fire=env.events.request.fire, log_records=broken)

    result = kinesis.send([event(0), event(1), event(2)])

    # Every stored record is still acknowledged (what the ledger is written from), failures still fire.
    assert sorted(a.event.event_id for a in result.acknowledged) == ["id-0", "id-1", "id-2"]
    assert fired == [("call", True), ("record", False), ("call", True)]
    assert [r.getMessage() for r in caplog.records] == [
        "could not add 2 accepted records to the statistics",
        "could not add 1 accepted records to the statistics",
    ]
