"""Entry point of the embedded emulator process: moto's server app behind the fault layer, with its Kinesis
shard writes made safe and its hot Kinesis path made cheaper, served with kept-alive connections.

`python -m lakestack.emulator.server -H 127.0.0.1 -p PORT` serves what `moto_server` serves; faults are off
until armed through the control path (see :mod:`lakestack.emulator.fault_layer`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import sys
import threading
from base64 import b64decode, b64encode
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from lakestack.emulator.fault_layer import KINESIS_TARGET_PREFIX

_SHARD_LOCK = threading.Lock()
_patched = False
_JSON_1_1 = "application/x-amz-json-1.1"
_EPOCH = datetime(1970, 1, 1)


def patch_kinesis() -> None:
    """Make moto's Kinesis shards safe for concurrent producers and readers (and O(1) per record).

    moto gives a record the shard's highest sequence number plus one without a lock, so two PutRecords calls
    running at once on one shard can both be acknowledged with the same sequence number while the second
    record overwrites the first: an acknowledged record lost, which real Kinesis never does and which the
    demo's reconciliation would (rightly) report. moto also finds that highest number by listing every key,
    which makes filling a shard quadratic.

    GetRecords iterates the shard's records while PutRecords may add to them in another request thread:
    "OrderedDict mutated during iteration", an HTTP 500 (measured: 85 of them in 30 s at 6,000 events/s,
    enough to fail the ingest query after its retries). It also walks the shard from its first record on
    every call, so a read costs the shard's whole length. Reads take the same lock and start at the first
    wanted sequence number: moto numbers a shard's records 1, 2, 3, ... (the highest plus one, as above).
    """
    global _patched
    from moto.kinesis import models, responses

    if _patched:
        return
    original = models.Shard.put_record

    def put_record(self: Any, partition_key: str, data: str, explicit_hash_key: str) -> str:
        with _SHARD_LOCK:
            return original(self, partition_key, data, explicit_hash_key)

    def max_sequence_number(self: Any) -> int:
        return next(reversed(self.records)) if self.records else 0

    def min_sequence_number(self: Any) -> int:
        return next(iter(self.records)) if self.records else 0

    # setattr: replacing methods of a class we do not own is the point here.
    setattr(models.Shard, "put_record", put_record)  # noqa: B010
    setattr(models.Shard, "get_records", _get_records)  # noqa: B010
    setattr(models.Shard, "get_max_sequence_number", max_sequence_number)  # noqa: B010
    setattr(models.Shard, "get_min_sequence_number", min_sequence_number)  # noqa: B010
    setattr(models.Record, "__init__", _record_init)  # noqa: B010
    setattr(models.Stream, "get_shard_for_key", _shard_for_key(models.Stream.get_shard_for_key))  # noqa: B010
    checked_put_record = _checked_put_record(responses.KinesisResponse.put_record)
    setattr(responses.KinesisResponse, "put_record", checked_put_record)  # noqa: B010
    setattr(responses.KinesisResponse, "put_records", _put_records_reply)  # noqa: B010
    setattr(responses.KinesisResponse, "get_records", _get_records_reply)  # noqa: B010
    _patched = True


def _get_records(self: Any, last_sequence_id: str, limit: int | None) -> tuple[list[Any], int, int]:
    # The same answer as moto's Shard.get_records: records after last_sequence_id in order, up to limit,
    # the last one returned, and how far the last returned record is behind the newest.
    last = int(last_sequence_id)
    with _SHARD_LOCK:
        records = self.records
        if not records:
            return [], last, 0
        newest = records[next(reversed(records))]
        found: list[Any] = []
        for sequence in range(max(last + 1, next(iter(records))), newest.sequence_number + 1):
            record = records.get(sequence)
            if record is None:
                continue
            found.append(record)
            if len(found) == limit:
                break
    if not found:
        return [], last, 0
    return found, found[-1].sequence_number, int((newest.created_at - found[-1].created_at) * 1000)


# PutRecords and GetRecords are the emulator's load, and moto's generic reply serializer (walking botocore's
# shape model per member, per record) was ~60% of its CPU under the demo's load. These two write the same JSON
# moto would (key order, base64 data, arrival time in epoch seconds truncated to milliseconds), with moto's own
# backend doing the work, so routing, sequence numbers, validation and errors stay moto's. Returning bytes also
# skips moto's search for an XML <RequestId> in every reply body. tests/lakestack/test_emulator_replies.py
# compares them with moto's own server byte for byte.


_HASH_KEY_PATTERN = re.compile(r"0|([1-9]\d{0,38})", re.ASCII)  # ASCII: "1\u0663" is not a hash key


def _check_put_records(records: Any) -> None:
    """Refuse a PutRecords call whose entries moto would refuse only after storing the ones before them.

    moto stores a batch's entries one by one and checks an entry's partition key and explicit hash key as it
    comes to it: entry k refused means entries 0..k-1 stored, and the whole call answered with an error, so
    the producer retries records that were already stored (duplicates). An entry without ``Data`` was stored
    as None (and GetRecords failed on that shard for good); invalid base64 was a 500. Every entry is checked
    here first, with moto's error where moto checks (partition key, hash key range, count and sizes, which
    moto checks before storing and are left to it) and real Kinesis's otherwise.

    Raises:
        JsonRESTError: the error the whole call is refused with; nothing has been stored.
    """
    from moto.core.exceptions import JsonRESTError

    if records is None:
        raise JsonRESTError(
            "ValidationException",
            "1 validation error detected: Value null at 'records' failed to satisfy constraint: "
            "Member must not be null",
        )
    if not isinstance(records, list) or not records:
        raise JsonRESTError(
            "ValidationException",
            "1 validation error detected: Value '[]' at 'records' failed to satisfy constraint: "
            "Member must have length greater than or equal to 1",
        )
    if len(records) > 500:
        return  # moto refuses it (TooManyRecords) before storing anything
    for position, record in enumerate(records, start=1):
        _check_entry(f"records.{position}.member", record if isinstance(record, dict) else {})


def _shard_for_key(original: Any) -> Any:
    """moto's shard lookup, with a shard's EndingHashKey inside its range, as DescribeStream reports it.

    moto matches ``starting <= key < ending`` although its ``ending_hash`` is the inclusive EndingHashKey, so a
    key equal to a shard's EndingHashKey matched no shard: moto then failed with a 500 after storing the batch's
    entries before it (stored, never acknowledged: duplicates on the producer's retry).
    """

    def get_shard_for_key(self: Any, partition_key: str, explicit_hash_key: str) -> Any:
        shard = original(self, partition_key, explicit_hash_key)  # moto's checks and its match first
        if shard is not None:
            return shard
        key = (
            int(explicit_hash_key)
            if explicit_hash_key
            else int(hashlib.md5(partition_key.encode()).hexdigest(), 16)
        )
        return next((s for s in self.shards.values() if s.starting_hash <= key <= s.ending_hash), None)

    return get_shard_for_key


def _checked_put_record(original: Any) -> Any:
    """moto's PutRecord, after the same checks as a PutRecords entry (moto stored a record without Data as
    None, which broke GetRecords on that shard for good, and invalid base64 was a 500 after storing)."""

    def put_record(self: Any) -> Any:
        _check_entry(
            "",
            {
                "Data": self._get_param("Data"),
                "PartitionKey": self._get_param("PartitionKey"),
                "ExplicitHashKey": self._get_param("ExplicitHashKey"),
            },
        )
        return original(self)

    return put_record


def _check_entry(where: str, record: dict[str, Any]) -> None:
    # One entry, ``where`` naming it as Kinesis's errors do (records.N.member, N from 1; "" for PutRecord).
    from moto.core.exceptions import JsonRESTError
    from moto.kinesis.exceptions import InvalidArgumentError, ValidationException

    where = f"{where}." if where else ""
    data = record.get("Data")
    if data is None:
        raise JsonRESTError(
            "ValidationException",
            f"1 validation error detected: Value null at '{where}data' failed to satisfy constraint: "
            "Member must not be null",
        )
    try:
        b64decode(data, validate=True)
    except (TypeError, ValueError):
        raise JsonRESTError(
            "SerializationException", f"Base64 decoding of '{where}data' failed: not valid base64"
        ) from None
    key = record.get("PartitionKey")
    if not isinstance(key, str) or len(key) > 256:
        raise InvalidArgumentError("partition_key")  # moto's own refusal
    if not key:
        raise JsonRESTError(
            "ValidationException",
            f"1 validation error detected: Value '' at '{where}partitionKey' failed to satisfy "
            "constraint: Member must have length greater than or equal to 1",
        )
    hash_key = record.get("ExplicitHashKey")
    if hash_key is None:
        return
    if not isinstance(hash_key, str):
        raise InvalidArgumentError("explicit_hash_key")  # moto's own refusal
    if not _HASH_KEY_PATTERN.fullmatch(hash_key):
        raise ValidationException(hash_key, f"{where}explicitHashKey", _HASH_KEY_PATTERN.pattern)
    if int(hash_key) >= 2**128:
        raise InvalidArgumentError("explicit_hash_key")  # moto's own refusal


def _put_records_reply(self: Any) -> tuple[bytes, dict[str, str]]:
    records = self._get_param("Records")
    _check_put_records(records)
    reply = self.kinesis_backend.put_records(
        self._get_param("StreamARN"), self._get_param("StreamName"), records
    )
    return json.dumps(reply).encode(), {"Content-Type": _JSON_1_1}


def _get_records_reply(self: Any) -> tuple[bytes, dict[str, str]]:
    iterator, records, millis_behind = self.kinesis_backend.get_records(
        self._get_param("StreamARN"), self._get_param("ShardIterator"), self._get_param("Limit")
    )
    reply = {
        "Records": [
            {
                "SequenceNumber": str(record.sequence_number),
                "ApproximateArrivalTimestamp": _epoch_millis(record.created_at_datetime),
                "Data": b64encode(b64decode(record.data)).decode(),
                "PartitionKey": record.partition_key,
            }
            for record in records
        ],
        "NextShardIterator": iterator,
        "MillisBehindLatest": millis_behind,
    }
    return json.dumps(reply).encode(), {"Content-Type": _JSON_1_1}


def _epoch_millis(moment: datetime) -> float | int:
    # moto's timestamp rule for JSON replies: epoch seconds of a naive UTC datetime, truncated to milliseconds,
    # an integer when there are no microseconds at all. Whole seconds by subtraction: exact, and cheaper than
    # calendar.timegm(moment.timetuple()), which gives the same number.
    delta = moment - _EPOCH
    seconds = delta.days * 86_400 + delta.seconds
    return seconds + (moment.microsecond // 1000) / 1000.0 if moment.microsecond else seconds


def _record_init(
    self: Any, partition_key: str, data: str, sequence_number: int, explicit_hash_key: str
) -> None:
    # moto's Record.__init__, the same values by the same arithmetic, without moto's utcnow() importing
    # datetime.UTC on every call and unix_time() building the epoch anew for every record (~15% of the
    # emulator's CPU once the replies were cheap).
    self.partition_key = partition_key
    self.data = data
    self.sequence_number = sequence_number
    self.explicit_hash_key = explicit_hash_key
    now = datetime.now(UTC).replace(tzinfo=None)
    self.created_at_datetime = now
    delta = now - _EPOCH
    self.created_at = (delta.days * 86400) + (delta.seconds + (delta.microseconds / 1e6))


class KinesisDispatch:
    """WSGI: Kinesis calls straight to moto's Kinesis app; every other request through moto's dispatcher.

    moto's ``DomainDispatcherApplication`` works out each request's service anew (path, then the signature's
    credential scope, then the target header), under one lock shared by every request thread: ~8% of the
    emulator's CPU under the demo's load, for an answer that never changes for a Kinesis call
    (``X-Amz-Target: Kinesis_20131202.*`` on ``/``). The first such call that moto resolves to its Kinesis app
    keeps that app for the rest; calls resolved to anything else are just passed on.
    """

    def __init__(self, dispatcher: Any) -> None:
        self._dispatcher = dispatcher
        self._kinesis: Any = None

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") == "/" and str(environ.get("HTTP_X_AMZ_TARGET", "")).startswith(
            KINESIS_TARGET_PREFIX
        ):
            app = self._kinesis
            if app is None:
                app = self._dispatcher.get_application(environ)
                # Keep it only if moto really resolved Kinesis (create_backend_app sets ``service``): an
                # unsigned or odd first call can resolve to another service's app (S3), and keeping that
                # would answer every later Kinesis call with that service's XML and a 200.
                if getattr(app, "service", None) == "kinesis":
                    self._kinesis = app
            return app(environ, start_response)
        return self._dispatcher(environ, start_response)


def main(argv: Sequence[str] | None = None) -> None:
    """Serve moto on ``-H HOST -p PORT``, as ``moto_server`` does, with the fault layer in front."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    from lakestack.emulator.fault_layer import FaultLayer
    from lakestack.emulator.keepalive import make_keepalive_server

    parser = argparse.ArgumentParser(prog="python -m lakestack.emulator.server")
    parser.add_argument("-H", "--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    parser.add_argument("-p", "--port", type=int, default=5000, help="port (default: %(default)s)")
    parser.add_argument(
        "--log-requests", action="store_true", help="log one line per request (off: it costs CPU under load)"
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    # moto builds some URLs (e.g. SQS queue URLs) from this, as moto_server sets it.
    os.environ.setdefault("MOTO_PORT", str(args.port))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    patch_kinesis()
    app = FaultLayer(KinesisDispatch(DomainDispatcherApplication(create_backend_app)))
    server = make_keepalive_server(args.host, args.port, app, log_requests=args.log_requests)
    print(f"lakestack emulator (moto) on http://{args.host}:{server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
