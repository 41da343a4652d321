"""A null Kinesis endpoint: acknowledges every PutRecords entry at once and keeps nothing.

For measuring a producer (the Locust Kinesis user, a bare boto3 loop) without measuring an emulator: it
answers with the shapes boto3 parses (``FailedRecordCount``, per entry ``ShardId`` and a distinct
``SequenceNumber``) and ``DescribeStreamSummary`` for the producer's start-up check. It runs in its own process
(:func:`start_null_kinesis`) so its CPU is never counted as the producer's, and binds 127.0.0.1 only.

    python -m lakestack.emulator.null_kinesis -p PORT
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from lakestack.errors import EmulatorError

SHARDS = 4
_TARGET_PREFIX = "Kinesis_20131202."
_sequence = itertools.count(1)


def put_records_reply(body: bytes) -> bytes:
    """The reply to one PutRecords request body: every entry acknowledged, the shards taken in turn.

    The body is not parsed: each entry has exactly one ``"PartitionKey"`` member, and a JSON string cannot
    hold that text unescaped (base64 data cannot at all), so counting it counts the entries. Parsing 500
    entries would make this endpoint, not the producer, what a benchmark measures.
    """
    count = body.count(b'"PartitionKey"')
    first = next(_sequence)
    for _ in range(count - 1):
        next(_sequence)
    entries = ",".join(
        f'{{"ShardId":"shardId-{(first + i) % SHARDS:012d}","SequenceNumber":"{first + i}"}}'
        for i in range(count)
    )
    return b'{"FailedRecordCount":0,"Records":[' + entries.encode() + b"]}"


def _summary(body: dict[str, Any]) -> dict[str, Any]:
    name = str(body.get("StreamName", "null-stream"))
    return {
        "StreamDescriptionSummary": {
            "StreamName": name,
            "StreamARN": f"arn:aws:kinesis:us-east-1:000000000000:stream/{name}",
            "StreamStatus": "ACTIVE",
            "StreamModeDetails": {"StreamMode": "ON_DEMAND"},
            "RetentionPeriodHours": 24,
            "StreamCreationTimestamp": 0,
            "EnhancedMonitoring": [],
            "OpenShardCount": SHARDS,
        }
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as botocore's connection pool expects
    # The reply goes out as two writes (headers, then body); with Nagle's algorithm on, the body waits for the
    # client's delayed ACK of the headers: ~40 ms per request on a kept-alive connection (measured: 44 ms
    # median, so a sequential client could not pass ~2,300 entries/s at batch 100).
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        target = self.headers.get("X-Amz-Target", "")
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        action = target.removeprefix(_TARGET_PREFIX)
        if action == "PutRecords":
            self._reply(200, put_records_reply(body))
        elif action == "DescribeStreamSummary":
            self._reply(200, json.dumps(_summary(json.loads(body or b"{}"))).encode())
        else:
            message = {"__type": "UnknownOperationException", "message": f"not served here: {target}"}
            self._reply(400, json.dumps(message).encode())

    def _reply(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return None


def start_null_kinesis(port: int, *, log_path: Path, timeout_s: float = 30.0) -> subprocess.Popen[bytes]:
    """Start the null endpoint on 127.0.0.1:``port`` in its own process and wait until it answers.

    Raises:
        EmulatorError: it did not answer within ``timeout_s``.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "lakestack.emulator.null_kinesis", "-p", str(port)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout_s
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/",
        data=b'{"StreamName": "probe"}',
        headers={"X-Amz-Target": _TARGET_PREFIX + "DescribeStreamSummary"},
    )
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EmulatorError(f"the null Kinesis endpoint exited with {process.returncode}; see {log_path}")
        try:
            with urllib.request.urlopen(request, timeout=1):
                return process
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    process.terminate()
    raise EmulatorError(f"the null Kinesis endpoint did not answer on port {port} within {timeout_s:.0f}s")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lakestack.emulator.null_kinesis")
    parser.add_argument("-p", "--port", type=int, required=True, help="port on 127.0.0.1")
    args = parser.parse_args(list(argv) if argv is not None else None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server = ThreadingHTTPServer(("127.0.0.1", args.port), _Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
