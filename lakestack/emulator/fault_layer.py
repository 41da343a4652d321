"""A WSGI layer in front of moto's server app that answers some requests the way AWS does when it is busy.

Faults are drawn from one seeded generator, in a fixed order per request, so a spec and a seed give the same
decisions for the same sequence of requests. Every reply has the shape the real service sends, so clients
(botocore, object_store) parse and classify it exactly as they would on AWS:

- PutRecords: failed entries come back inside a 200 reply with ``FailedRecordCount`` and per-entry
  ``ErrorCode``/``ErrorMessage``; only the other entries reach the stream.
- Kinesis errors: JSON 1.1 bodies with ``__type`` and ``message``: ``ProvisionedThroughputExceededException``
  and ``ExpiredIteratorException`` as HTTP 400, ``InternalFailure`` as 500, ``ServiceUnavailable`` as 503.
- S3: HTTP 503 with the ``SlowDown`` XML error document (no body for HEAD).

A fault counts as *survived* once a client repeats the request it hit and the repeat goes through: the same
PutRecords entry (stream, partition key, data) accepted, a GetRecords on the same shard answered, the same
Kinesis operation on the same stream answered, the same S3 method on the same path and query served.
The tally is read and the faults armed through ``/_lakestack/faults`` (GET, POST ``{"spec", "seed"}``,
DELETE to stop injecting); moto never sees those requests.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from typing import Any
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from lakestack.emulator.faults import KINDS, LATENCY_KINDS, FaultSpec, FaultSpecError, parse_fault_spec

CONTROL_PATH = "/_lakestack/faults"
KINESIS_TARGET_PREFIX = "Kinesis_20131202."
# moto's default account: error messages name it where AWS names the caller's account.
ACCOUNT_ID = "123456789012"
THROTTLED = "ProvisionedThroughputExceededException"
EXPIRED = "ExpiredIteratorException"
# Kinesis's documented 5xx errors: (code, HTTP status, message).
KINESIS_5XX = (
    ("InternalFailure", 500, "Internal service failure."),
    ("ServiceUnavailable", 503, "Service is unavailable. Please try again."),
)

Key = Hashable


@dataclass(frozen=True)
class Reply:
    """A complete HTTP reply the layer sends itself."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def send(self, start_response: StartResponse, method: str = "POST") -> list[bytes]:
        body = b"" if method == "HEAD" else self.body
        headers = [*self.headers, ("Content-Length", str(len(body)))]
        start_response(f"{self.status} {HTTPStatus(self.status).phrase}", headers)
        return [body]


def _amz_ids() -> list[tuple[str, str]]:
    request_id = str(uuid.uuid4())
    host_id = base64.b64encode(hashlib.sha256(request_id.encode()).digest()).decode()
    return [("x-amzn-RequestId", request_id), ("x-amz-id-2", host_id)]


def kinesis_json(status: int, payload: dict[str, Any]) -> Reply:
    """A Kinesis reply (JSON 1.1 protocol)."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    return Reply(status, [("Content-Type", "application/x-amz-json-1.1"), *_amz_ids()], body)


def kinesis_error(code: str, status: int, message: str) -> Reply:
    """A Kinesis error reply as AWS sends it: ``{"__type": code, "message": ...}`` with its HTTP status."""
    return kinesis_json(status, {"__type": code, "message": message})


def _java_date(moment: datetime) -> str:
    # Kinesis's messages print times as java.util.Date does.
    return moment.strftime("%a %b %d %H:%M:%S UTC %Y")


def expired_iterator(now: datetime) -> Reply:
    """``ExpiredIteratorException`` (HTTP 400) for an iterator issued a little over 5 minutes ago."""
    created = now - timedelta(minutes=5, seconds=1)
    return kinesis_error(
        EXPIRED,
        400,
        f"Iterator expired. The iterator was created at time {_java_date(created)} while right now it is "
        f"{_java_date(now)} which is further in the future than the tolerated delay of 300000 milliseconds.",
    )


def s3_slow_down(resource: str) -> Reply:
    """S3's ``503 SlowDown`` error document."""
    ids = _amz_ids()
    request_id, host_id = ids[0][1][:16].replace("-", "").upper(), ids[1][1]
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
        f"<Resource>{resource}</Resource><RequestId>{request_id}</RequestId><HostId>{host_id}</HostId></Error>"
    ).encode()
    headers = [("Content-Type", "application/xml"), ("x-amz-request-id", request_id), ("x-amz-id-2", host_id)]
    return Reply(503, headers, body)


def throttled_entry(stream: str) -> dict[str, str]:
    """A PutRecords result entry that failed with throttling."""
    return {
        "ErrorCode": THROTTLED,
        "ErrorMessage": f"Rate exceeded for shard in stream {stream} under account {ACCOUNT_ID}.",
    }


@dataclass
class _Fault:
    kind: str
    remaining: int


@dataclass
class FaultTally:
    """Per kind: chances to inject (``seen``), faults injected, faults survived; and the faults still open,
    by the key of the request whose successful repeat closes them."""

    seen: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    survived: Counter[str] = field(default_factory=Counter)
    delay_s: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    _open: dict[Key, list[_Fault]] = field(default_factory=dict)

    def inject(self, kind: str, keys: Iterable[Key]) -> None:
        distinct = set(keys)
        self.injected[kind] += 1
        fault = _Fault(kind, len(distinct))
        for key in distinct:
            self._open.setdefault(key, []).append(fault)

    def resolve(self, keys: Iterable[Key]) -> None:
        for key in keys:
            for fault in self._open.pop(key, ()):
                fault.remaining -= 1
                if fault.remaining == 0:
                    self.survived[fault.kind] += 1

    @property
    def has_open(self) -> bool:
        return bool(self._open)

    def snapshot(self, spec: FaultSpec) -> dict[str, dict[str, Any]]:
        kinds: dict[str, dict[str, Any]] = {}
        for kind in spec.kinds:
            if kind in LATENCY_KINDS:
                kinds[kind] = {
                    "injected": self.injected[kind],
                    "delay_ms": round(spec.value(kind) * 1000, 3),
                    "added_s": round(self.delay_s[kind], 3),
                }
            else:
                kinds[kind] = {
                    "seen": self.seen[kind],
                    "injected": self.injected[kind],
                    "survived": self.survived[kind],
                }
                still_open = self.open_requests(kind)
                if still_open:
                    kinds[kind]["open"] = still_open
        return kinds

    def open_requests(self, kind: str, *, limit: int = 5) -> list[str]:
        """A few requests hit by ``kind`` that no client has repeated with success (yet)."""
        found: list[str] = []
        for key, faults in self._open.items():
            if any(fault.kind == kind for fault in faults):
                found.append(" ".join(str(part) for part in key) if isinstance(key, tuple) else str(key))
                if len(found) >= limit:
                    break
        return found


@dataclass
class _Armed:
    spec: FaultSpec
    seed: int
    rng: random.Random
    armed_at: str
    injecting: bool = True
    tally: FaultTally = field(default_factory=FaultTally)


def _read_body(environ: WSGIEnvironment) -> bytes:
    stream = environ["wsgi.input"]
    if environ.get("wsgi.input_terminated"):
        return bytes(stream.read())
    length = int(environ.get("CONTENT_LENGTH") or 0)
    return bytes(stream.read(length)) if length > 0 else b""


def _with_body(environ: WSGIEnvironment, body: bytes, **headers: str) -> WSGIEnvironment:
    copy = dict(environ)
    copy["wsgi.input"] = io.BytesIO(body)
    copy["CONTENT_LENGTH"] = str(len(body))
    copy.update(headers)
    return copy


def _service(environ: WSGIEnvironment) -> str | None:
    if str(environ.get("HTTP_X_AMZ_TARGET", "")).startswith(KINESIS_TARGET_PREFIX):
        return "kinesis"
    auth = str(environ.get("HTTP_AUTHORIZATION", ""))
    credential = auth or str(environ.get("QUERY_STRING", ""))
    if "/s3/aws4_request" in credential or "%2Fs3%2Faws4_request" in credential:
        return "s3"
    return None


def _stream_of(params: dict[str, Any]) -> str:
    name = params.get("StreamName")
    if name:
        return str(name)
    arn = str(params.get("StreamARN") or "")
    return arn.rsplit("/", 1)[-1]


def _entry_key(stream: str, entry: dict[str, Any]) -> Key:
    digest = hashlib.sha1(str(entry.get("Data", "")).encode(), usedforsecurity=False).hexdigest()
    return ("entry", stream, str(entry.get("PartitionKey", "")), digest)


def _iterator_position(iterator: str) -> tuple[str, str]:
    """(stream, shard) of a shard iterator moto issued; ("?", "?") for anything else (moto answers that)."""
    # The layer sits in front of moto, so moto's own reading of its iterators is the right one.
    try:
        from moto.kinesis.utils import decompose_shard_iterator

        stream, shard = decompose_shard_iterator(iterator)[:2]
        return stream, shard
    except Exception:  # malformed or foreign: moto itself rejects the call, the key only groups its faults
        return "?", "?"


def _call_keys(operation: str, params: dict[str, Any]) -> list[Key]:
    """What a retry of this Kinesis call repeats (see the module docstring)."""
    stream = _stream_of(params)
    if operation == "PutRecords":
        return [_entry_key(stream, entry) for entry in params.get("Records", [])]
    if operation == "PutRecord":
        return [_entry_key(stream, params)]
    if operation == "GetRecords":
        return [("GetRecords", *_iterator_position(str(params.get("ShardIterator", ""))))]
    return [(operation, stream, str(params.get("ShardId", "")))]


class FaultLayer:
    """WSGI middleware: ``FaultLayer(moto_app)``. Unarmed, it passes every request straight through."""

    def __init__(self, app: WSGIApplication) -> None:
        self._app = app
        self._lock = threading.Lock()
        self._armed: _Armed | None = None

    # -- control ------------------------------------------------------------------------------------------

    def arm(self, spec: FaultSpec, seed: int | None = None) -> dict[str, Any]:
        """Start injecting ``spec`` with a fresh tally; a None seed is drawn (and reported)."""
        chosen = random.SystemRandom().randrange(2**31) if seed is None else seed
        with self._lock:
            self._armed = _Armed(
                spec, chosen, random.Random(chosen), datetime.now(UTC).isoformat(timespec="seconds")
            )
        return self.snapshot()

    def stop(self) -> dict[str, Any]:
        """Stop injecting; the tally stays readable (and survivals are still counted)."""
        with self._lock:
            if self._armed is not None:
                self._armed.injecting = False
        return self.snapshot()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            armed = self._armed
            if armed is None:
                return {"armed": False, "spec": "", "seed": None, "armed_at": None, "kinds": {}}
            return {
                "armed": armed.injecting,
                "spec": armed.spec.to_text(),
                "seed": armed.seed,
                "armed_at": armed.armed_at,
                "kinds": armed.tally.snapshot(armed.spec),
            }

    def _control(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        if method == "GET":
            return _json_reply(200, self.snapshot()).send(start_response)
        if method == "DELETE":
            return _json_reply(200, self.stop()).send(start_response)
        if method != "POST":
            return _json_reply(405, {"error": f"expected GET, POST or DELETE, found {method}"}).send(
                start_response
            )
        try:
            request = json.loads(_read_body(environ) or b"{}")
            seed = request.get("seed")
            if seed is not None and not isinstance(seed, int):
                raise FaultSpecError(f"expected an integer seed, found {seed!r}")
            return _json_reply(200, self.arm(parse_fault_spec(str(request.get("spec", ""))), seed)).send(
                start_response
            )
        except (ValueError, AttributeError, FaultSpecError) as error:
            return _json_reply(400, {"error": str(error)}).send(start_response)

    # -- requests -----------------------------------------------------------------------------------------

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if str(environ.get("PATH_INFO", "")).startswith(CONTROL_PATH):
            return self._control(environ, start_response)
        armed = self._armed
        if armed is None:
            return self._app(environ, start_response)
        service = _service(environ)
        if service == "kinesis" and (armed.spec.kinesis or armed.tally.has_open):
            return self._kinesis(armed, environ, start_response)
        if service == "s3" and (armed.spec.s3 or armed.tally.has_open):
            return self._s3(armed, environ, start_response)
        return self._app(environ, start_response)

    def _delay(self, armed: _Armed, kind: str) -> None:
        seconds = armed.spec.value(kind)
        if seconds <= 0 or not armed.injecting:
            return
        with self._lock:
            armed.tally.injected[kind] += 1
            armed.tally.delay_s[kind] += seconds
        time.sleep(seconds)

    def _draw(self, armed: _Armed, kind: str) -> bool:
        """One decision for ``kind`` (caller holds the lock); kinds that are off draw nothing."""
        share = armed.spec.value(kind)
        if share <= 0 or not armed.injecting:
            return False
        armed.tally.seen[kind] += 1
        return armed.rng.random() < share

    def _pass(
        self,
        armed: _Armed,
        environ: WSGIEnvironment,
        start_response: StartResponse,
        keys: list[Key],
        *,
        served_below: int,
    ) -> Iterable[bytes]:
        """Hand the request to moto; a reply below ``served_below`` closes the faults open on ``keys``."""
        if not keys:
            return self._app(environ, start_response)

        def observe(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            if int(status.split(None, 1)[0]) < served_below:
                with self._lock:
                    armed.tally.resolve(keys)
            return start_response(status, headers, exc_info)

        return self._app(environ, observe)

    def _kinesis(
        self, armed: _Armed, environ: WSGIEnvironment, start_response: StartResponse
    ) -> Iterable[bytes]:
        operation = str(environ["HTTP_X_AMZ_TARGET"])[len(KINESIS_TARGET_PREFIX) :]
        body = _read_body(environ)
        forward = _with_body(environ, body)
        try:
            params = json.loads(body) if body else {}
        except ValueError:
            return self._app(forward, start_response)  # not JSON 1.1: moto answers it as it is
        if not isinstance(params, dict):
            return self._app(forward, start_response)
        self._delay(armed, "kinesis-latency")
        keys = _call_keys(operation, params)
        reply = self._kinesis_fault(armed, operation, params, keys)
        if reply is not None:
            return reply.send(start_response)
        if operation == "PutRecords" and armed.spec.put_throttle > 0 and armed.injecting:
            return self._put_records(armed, forward, params, keys, start_response)
        return self._pass(armed, forward, start_response, keys, served_below=300)

    def _kinesis_fault(
        self, armed: _Armed, operation: str, params: dict[str, Any], keys: list[Key]
    ) -> Reply | None:
        """A call-level fault for this call, or None; the order of draws is fixed."""
        with self._lock:
            if self._draw(armed, "kinesis-5xx"):
                code, status, message = KINESIS_5XX[armed.rng.randrange(len(KINESIS_5XX))]
                armed.tally.inject("kinesis-5xx", keys)
                return kinesis_error(code, status, message)
            if operation == "GetRecords":
                if self._draw(armed, "get-throttle"):
                    armed.tally.inject("get-throttle", keys)
                    on_stream, shard = _iterator_position(str(params.get("ShardIterator", "")))
                    return kinesis_error(
                        THROTTLED, 400, f"Rate exceeded for Shard - {ACCOUNT_ID}/{on_stream}/{shard}"
                    )
                if self._draw(armed, "iterator-expiry"):
                    armed.tally.inject("iterator-expiry", keys)
                    return expired_iterator(datetime.now(UTC))
            if operation == "PutRecord" and self._draw(armed, "put-throttle"):
                armed.tally.inject("put-throttle", keys)
                message = throttled_entry(_stream_of(params))["ErrorMessage"]
                return kinesis_error(THROTTLED, 400, message)
        return None

    def _put_records(
        self,
        armed: _Armed,
        environ: WSGIEnvironment,
        params: dict[str, Any],
        keys: list[Key],
        start_response: StartResponse,
    ) -> Iterable[bytes]:
        """Fail a share of the entries inside a 200 reply; only the others are handed to moto."""
        records: list[dict[str, Any]] = list(params.get("Records", []))
        with self._lock:
            failing = [self._draw(armed, "put-throttle") for _ in records]
        if not any(failing):
            return self._pass(armed, environ, start_response, keys, served_below=300)
        stream = _stream_of(params)
        kept = [record for record, fails in zip(records, failing, strict=True) if not fails]
        if kept:
            body = json.dumps({**params, "Records": kept}).encode()
            inner = self._call_app(_with_body(environ, body))
        else:
            # Every entry fails: ask moto whether the stream exists, as Kinesis checks that first.
            inner = self._call_app(
                _with_body(
                    environ,
                    json.dumps({k: v for k, v in params.items() if k != "Records"}).encode(),
                    HTTP_X_AMZ_TARGET=f"{KINESIS_TARGET_PREFIX}DescribeStreamSummary",
                )
            )
        if inner.status != 200:
            return inner.send(start_response)
        accepted: Iterator[dict[str, Any]] = iter(json.loads(inner.body).get("Records", []) if kept else [])
        results: list[dict[str, Any]] = []
        with self._lock:
            for key, fails in zip(keys, failing, strict=True):
                if fails:
                    armed.tally.inject("put-throttle", [key])
                    results.append(throttled_entry(stream))
                    continue
                result = next(accepted)
                results.append(result)
                if "ErrorCode" not in result:
                    armed.tally.resolve([key])
        failed = sum(1 for result in results if "ErrorCode" in result)
        reply = json.loads(inner.body) if kept else {}
        reply.update({"FailedRecordCount": failed, "Records": results})
        return kinesis_json(200, reply).send(start_response)

    def _call_app(self, environ: WSGIEnvironment) -> Reply:
        status, all_headers, chunks = run_wsgi_app(self._app, environ)
        headers = [(k, v) for k, v in all_headers if k.lower() != "content-length"]
        return Reply(int(status.split(None, 1)[0]), headers, b"".join(chunks))

    def _s3(self, armed: _Armed, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method = str(environ.get("REQUEST_METHOD", "GET"))
        path = str(environ.get("PATH_INFO", ""))
        keys: list[Key] = [("s3", method, path, str(environ.get("QUERY_STRING", "")))]
        self._delay(armed, "s3-latency")
        with self._lock:
            slow_down = self._draw(armed, "s3-503")
            if slow_down:
                armed.tally.inject("s3-503", keys)
        if slow_down:
            # Read the body the client sends: closing on unread data resets the connection, and the client
            # would see a broken pipe instead of S3's reply.
            _read_body(environ)
            return s3_slow_down(path).send(start_response, method)
        # Any reply moto gives (404 and 412 included) means the request was served; 5xx would not be.
        return self._pass(armed, environ, start_response, keys, served_below=500)


def _json_reply(status: int, payload: dict[str, Any]) -> Reply:
    return Reply(status, [("Content-Type", "application/json")], json.dumps(payload).encode())


__all__ = [
    "CONTROL_PATH",
    "KINDS",
    "FaultLayer",
    "FaultTally",
    "Reply",
    "expired_iterator",
    "kinesis_error",
    "s3_slow_down",
    "throttled_entry",
]


def run_wsgi_app(app: Any, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], list[bytes]]:
    """Run a WSGI application to the end: (status, headers, body chunks); its result is closed either way."""
    started: list[Any] = []
    chunks: list[bytes] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started[:] = [status, headers]
        return chunks.append

    result: Iterable[bytes] = app(environ, start_response)
    try:
        chunks.extend(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    if not started:
        raise RuntimeError("the application returned without calling start_response")
    return str(started[0]), list(started[1]), chunks
