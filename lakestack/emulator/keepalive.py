"""The emulator's HTTP server: werkzeug's threaded server and moto's request handling, with kept-alive connections.

werkzeug's development server closes every connection after one reply ("Connection: close"), because it cannot
tell where an unread request body ends. So every client call (botocore's pool, the Spark source's GetRecords,
Locust's PutRecords) paid for a new TCP connection and the server for a new thread, and it logged each request
line. This handler reads each request's whole body before the application runs (Content-Length bytes, or the
dechunked stream), so the next request on the connection always starts where it should, and keeps the
connection open as HTTP/1.1 allows. Replies get a Content-Length when the application gives none (except where
HTTP forbids a body), and go out with Nagle's algorithm off: a reply's body must not wait for the client's
delayed ACK of its headers (~40 ms per request on a kept-alive connection). Two different Content-Length
headers are a 400, a body over the limit (64 MiB for Kinesis, 1 GiB otherwise) a 413, both closing the
connection; a connection idle for 120 s is closed.

Environ, header handling and error pages stay werkzeug's and moto's (``MotoRequestHandler.make_environ``,
werkzeug's ``InternalServerError`` page for an application that raises).
"""

from __future__ import annotations

import io
import traceback
from typing import Any

from moto.moto_server.werkzeug_app import MotoRequestHandler
from werkzeug.exceptions import BadRequest, InternalServerError, RequestEntityTooLarge
from werkzeug.serving import BaseWSGIServer, make_server

from lakestack.emulator.fault_layer import run_wsgi_app

_NO_BODY_STATUSES = frozenset({204, 304})
_KINESIS_TARGET = "Kinesis_20131202."
# The largest request bodies read (the handler holds a body in memory before the application runs): a Kinesis
# call is at most 5 MiB of records (PutRecords), ~7 MiB once base64 and JSON: 64 MiB is ample. Anything else
# is S3 (and the other moto services): delta-rs and boto3 switch to multipart uploads well below this, and
# the emulator keeps objects in memory anyway, so 1 GiB is generous for a local demo and still refuses a
# bogus or hostile Content-Length before allocating it.
KINESIS_BODY_LIMIT = 64 * 2**20
OTHER_BODY_LIMIT = 2**30
IDLE_TIMEOUT = 120  # seconds a kept-alive connection may sit idle (or mid-request) before it is closed


class _TooLarge(ValueError):
    """A request body over the limit for its kind of request."""


class KeepAliveRequestHandler(MotoRequestHandler):
    """One request at a time per connection, the connection kept open between them."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    log_requests = False  # one log line per request cost the emulator ~4% of its CPU under load
    # StreamRequestHandler.setup() sets it on the socket: an idle kept-alive connection (or a client stalled
    # mid-request) no longer holds its thread forever; werkzeug's handle() treats the timeout as a dropped
    # connection.
    timeout = IDLE_TIMEOUT

    def log_error(self, format: str, *args: Any) -> None:
        # http.server reports a kept-alive connection closed for idleness as an error; it is routine here.
        if format.startswith("Request timed out"):
            return
        super().log_error(format, *args)

    def run_wsgi(self) -> None:
        # "Expect: 100-continue" was answered by http.server's parse_request (HTTP/1.1): not again here.
        environ = self.make_environ()
        try:
            body = self._read_body(environ)
        except _TooLarge as error:
            self.close_connection = True
            self._send(environ, *run_wsgi_app(RequestEntityTooLarge(str(error)), environ))
            return
        except ValueError as error:
            self.close_connection = True
            self._send(environ, *run_wsgi_app(BadRequest(str(error)), environ))
            return
        if body is None:  # the client went away mid-body: nothing to answer
            self.close_connection = True
            return
        environ["wsgi.input"] = io.BytesIO(body)
        try:
            status, headers, chunks = run_wsgi_app(self.server.app, environ)
        except Exception:
            self.server.log("error", f"Error on request:\n{traceback.format_exc()}")
            status, headers, chunks = run_wsgi_app(InternalServerError(), environ)
        self._send(environ, status, headers, chunks)

    def _read_body(self, environ: dict[str, Any]) -> bytes | None:
        """The whole request body; None if the connection ended before it did.

        Raises:
            _TooLarge: the body is over the limit for its kind of request (nothing of it allocated).
            ValueError: Content-Length is not a non-negative integer or is given twice with different values,
                or the chunked encoding is broken.
        """
        target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
        limit = KINESIS_BODY_LIMIT if target.startswith(_KINESIS_TARGET) else OTHER_BODY_LIMIT
        if environ.get("wsgi.input_terminated"):  # chunked: werkzeug's DechunkedInput reads to the last chunk
            body = self._read_chunked(environ["wsgi.input"], limit)
            environ["CONTENT_LENGTH"] = str(len(body))  # moto reads the body by its Content-Length
            return body
        values = {value.strip() for value in self.headers.get_all("Content-Length") or []}
        if len(values) > 1:
            raise ValueError(f"expected one Content-Length, found {len(values)} different: {sorted(values)}")
        text = str(environ.get("CONTENT_LENGTH") or "0").strip()
        if not text.isdigit():
            raise ValueError(f"expected Content-Length to be a number of bytes, found {text!r}")
        length = int(text)
        if length > limit:
            raise _TooLarge(
                f"a request body of {length} bytes is over this emulator's limit of {limit} bytes"
            )
        body = self.rfile.read(length) if length else b""
        return body if len(body) == length else None

    @staticmethod
    def _read_chunked(stream: Any, limit: int) -> bytes:
        parts: list[bytes] = []
        size = 0
        try:
            while part := stream.read(min(2**20, limit + 1 - size)):
                parts.append(part)
                size += len(part)
                if size > limit:
                    raise _TooLarge(f"a chunked request body over this emulator's limit of {limit} bytes")
        except OSError as error:
            raise ValueError(f"a chunked request body that could not be read: {error}") from None
        return b"".join(parts)

    def _send(
        self, environ: dict[str, Any], status: str, headers: list[tuple[str, str]], chunks: list[bytes]
    ) -> None:
        code_text, _, reason = status.partition(" ")
        code = int(code_text)
        body = b"".join(chunks)
        head = environ["REQUEST_METHOD"] == "HEAD"
        self.send_response(code, reason)
        names = set()
        for name, value in headers:
            self.send_header(name, value)
            names.add(name.lower())
        if "content-length" not in names and not head and code >= 200 and code not in _NO_BODY_STATUSES:
            self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if body and not head:
            self.wfile.write(body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if self.log_requests:
            super().log_request(code, size)


def make_keepalive_server(
    host: str, port: int, app: Any, *, log_requests: bool = False, idle_timeout: float = IDLE_TIMEOUT
) -> BaseWSGIServer:
    """A threaded WSGI server on ``host:port`` (a thread per connection) with :class:`KeepAliveRequestHandler`;
    a connection idle for ``idle_timeout`` seconds is closed."""
    handler = type(
        "Handler", (KeepAliveRequestHandler,), {"log_requests": log_requests, "timeout": idle_timeout}
    )
    return make_server(host, port, app, threaded=True, request_handler=handler)
