"""bench/bench_emulator.py fails its run on a thread's error and on what each shard read back being wrong."""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "bench_emulator", Path(__file__).resolve().parents[2] / "bench" / "bench_emulator.py"
)
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
sys.modules["bench_emulator"] = bench  # its dataclass looks its module up there
_SPEC.loader.exec_module(bench)


class Refusing(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b'{"__type": "InternalFailure"}'
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def test_a_producer_thread_that_fails_is_reported(refusing_port):
    errors: list[str] = []
    bodies = [b'{"Records": [], "StreamName": "s"}']
    bench.timed_run(refusing_port, os.getpid(), bodies, batch_size=1, producers=2, seconds=0.1, errors=errors)
    assert sorted(errors) == [
        'producer 0: PutRecords: HTTP 500: b\'{"__type": "InternalFailure"}\'',
        'producer 1: PutRecords: HTTP 500: b\'{"__type": "InternalFailure"}\'',
    ]


def test_what_each_shard_read_back_is_checked_against_what_was_acknowledged():
    acked = [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3)]
    assert bench.check_read_back(acked, {"a": [1, 2, 3], "b": [1, 2]}) == []
    assert bench.check_read_back(acked, {"a": [1, 3, 2], "b": [1, 2]}) == [
        "a: read 3 after 1 (expected 2)",
        "a: 3 acknowledged, 3 read back (0 acknowledged not read, 0 read not acknowledged)",
    ]
    assert bench.check_read_back(acked, {"a": [1, 2], "b": [1, 2, 3]}) == [
        "a: 3 acknowledged, 2 read back (1 acknowledged not read, 0 read not acknowledged)",
        "b: 2 acknowledged, 3 read back (0 acknowledged not read, 1 read not acknowledged)",
    ]
    assert bench.check_read_back(acked, {"a": [1, 1, 2, 3], "b": [1, 2]}) == [
        "a: read 1 after 1 (expected 2)",
        "a: 3 acknowledged, 4 read back (0 acknowledged not read, 0 read not acknowledged)",
    ]
