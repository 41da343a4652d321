"""Contract C1/C2: every pipeline classifies bronze rows the same way, and quarantines in the same shape."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from jobs.errors import SettingsError
from jobs.pipelines._envelope import (
    INVALID,
    KIND,
    QUARANTINE_COLUMNS,
    REASON,
    Envelope,
    Field,
    classify,
    count_kinds,
    quarantine_arrow,
    quarantine_rows,
    quarantine_table,
)
from loadtest.generators import make_generator
from loadtest.generators.sales import BAD_FIELD, UNATTRIBUTABLE

SALES = Envelope(
    "sales",
    (
        Field("sales_id", "SalesId", "bigint", rule="{} > 0", expects="a positive id"),
        Field("sales_amount", "SalesAmount", "decimal(12,2)", rule="{} > 0", expects="a positive amount"),
        Field("sales_datetime", "SalesDateTime", "timestamp"),
    ),
)
ORDERS = Envelope("orders", (Field("order_id", "order_id", "string"),))
T = '"event_time":"2026-01-02T03:04:05Z"'

CASES = [
    (
        b'{"event_type":"sales","event_id":"a",'
        + T.encode()
        + b',"SalesId":5,"SalesAmount":12.5,"SalesDateTime":"2026-01-02T03:04:05.678901Z"}',
        "valid",
        None,
    ),
    (
        b'{"event_type":"sales","event_id":"b",'
        + T.encode()
        + b',"SalesId":"x","SalesAmount":-1,"SalesDateTime":"nope"}',
        "invalid",
        "field SalesId: expected bigint, found 'x'; field SalesAmount: expected a positive amount, found '-1'; "
        "field SalesDateTime: expected timestamp, found 'nope'",
    ),
    (
        b'{"event_type":"sales","event_id":"",'
        + T.encode()
        + b',"SalesId":5,"SalesAmount":{"x":1},"SalesDateTime":"2026-01-02T03:04:05Z"}',
        "invalid",
        "field event_id: expected a non-empty id, found ''; field SalesAmount: expected decimal(12,2), found "
        "'{\"x\":1}'",
    ),
    (
        b'{"event_type":"sales","event_id":"c"}',
        "invalid",
        "field event_time is missing; field SalesId is missing; field SalesAmount is missing; field SalesDateTime is missing",
    ),
    (b'{"event_type":"orders","event_id":"d"}', "other", None),
    (
        b'{"event_type":"clicks"}',
        "invalid",
        "event_type 'clicks' is not a known scenario (sales, transactions, orders)",
    ),
    (b'{"event_id":"e"}', "invalid", "event_type is missing"),
    (b"[1,2]", "invalid", "payload is not a JSON object: '[1,2]'"),
    (b'{"event_type":"sales", broken', "invalid", "payload is not valid JSON"),
    (b"\xff\xfe{}", "invalid", "payload is not valid UTF-8"),
]


def _bronze(spark, payloads: list[bytes]):
    rows = [(p, "shardId-000000000000", str(i + 1)) for i, p in enumerate(payloads)]
    return spark.createDataFrame(rows, "data binary, shard_id string, sequence_number string")


def test_classification_names_every_problem_and_types_valid_rows(spark):
    rows = classify(_bronze(spark, [p for p, _, _ in CASES]), SALES).orderBy("sequence_number").collect()
    assert [(r[KIND], r[REASON]) for r in sorted(rows, key=lambda r: int(r["sequence_number"]))] == [
        (kind, reason) for _, kind, reason in CASES
    ]
    valid = rows[0]
    assert (valid["event_id"], valid["sales_id"], str(valid["sales_amount"]), valid["sales_datetime"]) == (
        "a",
        5,
        "12.50",
        datetime(2026, 1, 2, 3, 4, 5, 678901),
    )
    quarantined = quarantine_rows(classify(_bronze(spark, [p for p, _, _ in CASES]), SALES), 7).collect()
    assert len(quarantined) == 8
    assert tuple(quarantined[0].asDict()) == QUARANTINE_COLUMNS
    assert {r["batch_id"] for r in quarantined} == {7}


def test_generated_malformed_records_land_where_their_truth_says(spark):
    gen = make_generator("sales", seed=3, malformed_rate=0.5, duplicate_rate=0)
    events = [gen.next_event() for _ in range(80)]
    kinds = gen.ground_truth()["malformed"]
    assert set(kinds.values()) == set(UNATTRIBUTABLE) | set(BAD_FIELD)
    bronze = _bronze(spark, [e.data for e in events])
    for envelope in (SALES, ORDERS):
        found = {
            events[int(r["sequence_number"]) - 1].event_id: r[KIND]
            for r in classify(bronze, envelope).select("sequence_number", KIND).collect()
        }
        expected = {
            e.event_id: (
                INVALID
                if kinds.get(e.event_id) in UNATTRIBUTABLE or (envelope is SALES and e.event_id in kinds)
                else ("valid" if envelope is SALES else "other")
            )
            for e in events
        }
        assert found == expected, envelope.event_type


def test_envelopes_are_checked_when_defined():
    with pytest.raises(
        SettingsError, match="expected an event_type in sales, transactions, orders, found 'clicks'"
    ):
        Envelope("clicks")
    with pytest.raises(SettingsError, match=r"output columns \['event_id'\] appear twice"):
        Envelope("sales", (Field("event_id", "id", "string"),))


def test_quarantine_in_arrow_has_the_contract_shape():
    rows = pa.table(
        {
            "data": [b"x", b"{}", b"y"],
            "shard_id": ["s0", "s0", "s1"],
            "sequence_number": ["1", "2", "3"],
            KIND: [INVALID, "valid", INVALID],
            REASON: ["payload is not a JSON object: 'x'", None, "event_type is missing"],
        }
    )
    now = datetime(2026, 1, 2, tzinfo=UTC)
    table = quarantine_arrow(rows, 4, now)
    assert table.column_names == list(QUARANTINE_COLUMNS)
    assert table.to_pylist() == [
        {
            "data": b"x",
            "shard_id": "s0",
            "sequence_number": "1",
            "reason": "payload is not a JSON object: 'x'",
            "quarantined_at": now,
            "batch_id": 4,
        },
        {
            "data": b"y",
            "shard_id": "s1",
            "sequence_number": "3",
            "reason": "event_type is missing",
            "quarantined_at": now,
            "batch_id": 4,
        },
    ]
    assert count_kinds(rows[KIND].to_pylist()) == {"valid": 1, "other": 0, "invalid": 2}
    assert quarantine_table("s3://lake/", "sales") == "s3://lake/sales_quarantine"
