"""The emulator's HTTP server: werkzeug's threaded server and moto's request handling, with kept-alive connections.

werkzeug's development server closes every connection after one reply ("Connection: close"), because it cannot
tell where an unread request body ends. So every client call (botocore's pool, the Spark source's GetRecords,
Locust's PutRecords) paid for a new TCP connection and the server for a new thread, and it logged each request
line. This handler reads each request's whole body before the application runs (Content-Length bytes, or the
dechunked stream), so the next request on the connection always starts where it should, and keeps the
connection open as HTTP/1.1 allows. Replies get a Content-Length when the application gives none (except where
HTTP forbids a body), and go out with Nagle's algorithm off: a reply's body must not wait for the client's
delayed ACK of its headers (~40 ms per request on a kept-alive connection).

Environ, header handling and error pages stay werkzeug's and moto's (``MotoRequestHandler.make_environ``,
werkzeug's ``InternalServerError`` page for an application that raises).
"""

from __future__ import annotations

import io
import traceback
from collections.abc import Iterable
from typing import Any

from moto.moto_server.werkzeug_app import MotoRequestHandler
from werkzeug.exceptions import BadRequest, InternalServerError
from werkzeug.serving import BaseWSGIServer, make_server

_NO_BODY_STATUSES = frozenset({204, 304})


class KeepAliveRequestHandler(MotoRequestHandler):
    """One request at a time per connection, the connection kept open between them."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    log_requests = False  # one log line per request cost the emulator ~4% of its CPU under load

    def run_wsgi(self) -> None:
        # "Expect: 100-continue" was answered by http.server's parse_request (HTTP/1.1): not again here.
        environ = self.make_environ()
        try:
            body = self._read_body(environ)
        except ValueError as error:
            self.close_connection = True
            self._send(environ, *_collect(BadRequest(str(error)), environ))
            return
        if body is None:  # the client went away mid-body: nothing to answer
            self.close_connection = True
            return
        environ["wsgi.input"] = io.BytesIO(body)
        try:
            status, headers, chunks = _collect(self.server.app, environ)
        except Exception:
            self.server.log("error", f"Error on request:\n{traceback.format_exc()}")
            status, headers, chunks = _collect(InternalServerError(), environ)
        self._send(environ, status, headers, chunks)

    def _read_body(self, environ: dict[str, Any]) -> bytes | None:
        """The whole request body; None if the connection ended before it did.

        Raises:
            ValueError: Content-Length is not a non-negative integer, or the chunked encoding is broken.
        """
        if environ.get("wsgi.input_terminated"):  # chunked: werkzeug's DechunkedInput reads to the last chunk
            try:
                return bytes(environ["wsgi.input"].read())
            except OSError as error:
                raise ValueError(f"a chunked request body that could not be read: {error}") from None
        text = str(environ.get("CONTENT_LENGTH") or "0").strip()
        if not text.isdigit():
            raise ValueError(f"expected Content-Length to be a number of bytes, found {text!r}")
        length = int(text)
        body = self.rfile.read(length) if length else b""
        return body if len(body) == length else None

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


def _collect(app: Any, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], list[bytes]]:
    """Run a WSGI application to the end: (status, headers, body chunks)."""
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


def make_keepalive_server(host: str, port: int, app: Any, *, log_requests: bool = False) -> BaseWSGIServer:
    """A threaded WSGI server on ``host:port`` (a thread per connection) with :class:`KeepAliveRequestHandler`."""
    handler = type("Handler", (KeepAliveRequestHandler,), {"log_requests": log_requests})
    return make_server(host, port, app, threaded=True, request_handler=handler)
