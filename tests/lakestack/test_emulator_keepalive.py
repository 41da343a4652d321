"""The emulator's HTTP server keeps connections alive and keeps every request on a connection apart."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from lakestack.emulator import keepalive
from lakestack.emulator.keepalive import make_keepalive_server


def app(environ, start_response):
    """Echoes the method, path and body; ``/length`` answers the CONTENT_LENGTH it was given, ``/skip`` never reads the body, ``/boom`` raises, ``/nolength``
    answers without a Content-Length."""
    path = environ["PATH_INFO"]
    if path == "/boom":
        raise RuntimeError("the application failed")
    if path == "/length":  # what moto sees as the body's length
        reply = f"length {environ.get('CONTENT_LENGTH')}".encode()
        start_response("200 OK", [("Content-Length", str(len(reply)))])
        return [reply]
    body = b"" if path == "/skip" else environ["wsgi.input"].read()
    reply = f"{environ['REQUEST_METHOD']} {path} {len(body)}:".encode() + body
    headers = [("Content-Type", "text/plain")]
    if path != "/nolength":
        headers.append(("Content-Length", str(len(reply))))
    start_response("200 OK", headers)
    return [reply]


@pytest.fixture
def server() -> Iterator[int]:
    httpd = make_keepalive_server("127.0.0.1", 0, app)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=10)


def exchange(
    sock: socket.socket, request: bytes, replies: int = 1
) -> list[tuple[bytes, dict[str, str], bytes]]:
    """Send raw bytes, read ``replies`` complete HTTP replies (by Content-Length) from the same connection."""
    sock.sendall(request)
    stream = sock.makefile("rb")
    found = []
    for _ in range(replies):
        status = stream.readline().rstrip(b"\r\n")
        headers = {}
        while (line := stream.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        body = stream.read(int(headers.get("content-length", "0")))
        found.append((status, headers, body))
    return found


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def test_requests_on_one_connection_are_answered_in_turn(server):
    with connect(server) as sock:
        replies = exchange(
            sock,
            b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
            b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
            replies=2,
        )
        assert [(status, body) for status, _, body in replies] == [
            (b"HTTP/1.1 200 OK", b"POST /a 5:hello"),
            (b"HTTP/1.1 200 OK", b"POST /b 3:abc"),
        ]
        assert "connection" not in replies[0][1]
        # Still open: a third request on the same socket.
        assert exchange(sock, b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n")[0][2] == b"GET /c 0:"


def test_a_body_the_application_did_not_read_does_not_leak_into_the_next_request(server):
    with connect(server) as sock:
        replies = exchange(
            sock,
            b"POST /skip HTTP/1.1\r\nHost: x\r\nContent-Length: 26\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n"
            b"POST /next HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok",
            replies=2,
        )
        assert [body for _, _, body in replies] == [b"POST /skip 0:", b"POST /next 2:ok"]


def test_a_chunked_body_reaches_the_application_whole(server):
    with connect(server) as sock:
        reply = exchange(
            sock,
            b"PUT /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n"
            b"GET /after HTTP/1.1\r\nHost: x\r\n\r\n",
            replies=2,
        )
        assert [body for _, _, body in reply] == [b"PUT /up 9:Wikipedia", b"GET /after 0:"]


def test_replies_without_a_length_get_one_and_head_gets_no_body(server):
    with connect(server) as sock:
        reply = exchange(sock, b"POST /nolength HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nz")[0]
        assert reply[1]["content-length"] == "18"
        assert reply[2] == b"POST /nolength 1:z"
        sock.sendall(b"HEAD /h HTTP/1.1\r\nHost: x\r\n\r\nGET /g HTTP/1.1\r\nHost: x\r\n\r\n")
        stream = sock.makefile("rb")
        lines = []
        while len(lines) < 2 or lines[-1] != b"\r\n":
            lines.append(stream.readline())
        assert lines[0] == b"HTTP/1.1 200 OK\r\n"
        assert b"Content-Length: 10\r\n" in lines  # the length the application gave, and no body after it
        assert stream.readline() == b"HTTP/1.1 200 OK\r\n"  # the GET's reply follows at once


def test_an_application_error_is_a_500_and_the_connection_stays_usable(server):
    with connect(server) as sock:
        replies = exchange(
            sock,
            b"POST /boom HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nlost"
            b"GET /fine HTTP/1.1\r\nHost: x\r\n\r\n",
            replies=2,
        )
        assert replies[0][0] == b"HTTP/1.1 500 INTERNAL SERVER ERROR"
        assert b"Internal Server Error" in replies[0][2]
        assert replies[1][2] == b"GET /fine 0:"


def test_a_client_that_asks_to_close_gets_its_reply_then_the_end(server):
    with connect(server) as sock:
        reply = exchange(sock, b"GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")[0]
        assert reply[1]["connection"] == "close"
        assert reply[2] == b"GET /x 0:"
        assert sock.recv(1) == b""


def test_a_bad_content_length_is_refused_and_the_connection_closed(server):
    with connect(server) as sock:
        reply = exchange(sock, b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n")[0]
        assert reply[0] == b"HTTP/1.1 400 BAD REQUEST"
        assert b"Content-Length" in reply[2]
        assert sock.recv(1) == b""


def test_expect_continue_is_answered_before_the_body_is_read(server):
    with connect(server) as sock:
        sock.sendall(b"PUT /big HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
        assert sock.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
        status, _, body = exchange(sock, b"abc")[0]
        assert (status, body) == (b"HTTP/1.1 200 OK", b"PUT /big 3:abc")  # one 100 Continue, then the reply


def test_two_different_content_lengths_are_refused_and_the_connection_closed(server):
    with connect(server) as sock:
        ((status, headers, _),) = exchange(
            sock, b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 3\r\n\r\nhello"
        )
        assert (status, headers["connection"]) == (b"HTTP/1.1 400 BAD REQUEST", "close")
        assert sock.recv(10) == b""


def test_the_same_content_length_twice_is_accepted(server):
    with connect(server) as sock:
        ((status, _, body),) = exchange(
            sock, b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello"
        )
        assert (status, body) == (b"HTTP/1.1 200 OK", b"POST /a 5:hello")


@pytest.mark.parametrize(
    ("target", "length"),
    [("X-Amz-Target: Kinesis_20131202.PutRecords\r\n", 64 * 2**20 + 1), ("", 2**30 + 1)],
)
def test_a_body_over_the_limit_is_refused_before_it_is_read(server, target, length):
    with connect(server) as sock:
        request = f"POST / HTTP/1.1\r\nHost: x\r\n{target}Content-Length: {length}\r\n\r\n".encode()
        ((status, headers, _),) = exchange(sock, request)
        assert (status, headers["connection"]) == (b"HTTP/1.1 413 REQUEST ENTITY TOO LARGE", "close")


def test_a_chunked_body_over_the_limit_is_refused(monkeypatch, server):
    monkeypatch.setattr(keepalive, "OTHER_BODY_LIMIT", 8)
    with connect(server) as sock:
        ((status, _, _),) = exchange(
            sock,
            b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n123456789\r\n0\r\n\r\n",
        )
        assert status == b"HTTP/1.1 413 REQUEST ENTITY TOO LARGE"


def test_a_chunked_body_is_given_to_the_application_with_its_length(server):
    with connect(server) as sock:
        ((status, _, body),) = exchange(
            sock,
            b"POST /length HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n",
        )
        assert (status, body) == (b"HTTP/1.1 200 OK", b"length 8")


def test_an_idle_connection_is_closed_after_the_timeout(caplog):
    httpd = make_keepalive_server("127.0.0.1", 0, app, idle_timeout=0.5)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        with connect(httpd.server_address[1]) as sock:
            assert exchange(sock, b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n")[0][2] == b"GET /c 0:"
            sock.settimeout(5)
            assert sock.recv(10) == b""  # closed by the server, not by this 5 s timeout (which raises)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
    assert [
        r.getMessage() for r in caplog.records if "timed out" in r.getMessage()
    ] == []  # routine, not an error
