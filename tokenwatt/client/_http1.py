"""A lean HTTP/1.1 client transport for streamed responses, on asyncio protocols.

Why not httpx for the load itself: measured on the 2-core test box against the nginx SSE server
(32-token streams, 64 connections), one ``httpx.AsyncClient`` spent about 5 ms of CPU per request
(its pool rescans every connection on each request event, httpx #3215) and plain httpcore about
0.9 ms; a generator meant to be "never the bottleneck" cannot afford either. Here each response
is parsed in the protocol's ``data_received`` callback, stamped with the monotonic clock at the
moment the bytes arrive, and handed to a :class:`ResponseSink`; no coroutine runs per chunk, a
request on an idle keep-alive connection is written synchronously by the caller (so the send
time is exact), and the idle pool is a stack (O(1) per request, no scans, no silent cap on the
number of connections: callers cap concurrency themselves and record the wait).

The response framing (status line, headers, ``Content-Length``, chunked and close-delimited
bodies, keep-alive rules of HTTP/1.0 and 1.1) is parsed by httptools, the binding of llhttp
(Node's parser, the one under uvicorn); this module keeps the connection logic: one request per
connection at a time, keep-alive reuse, TLS through asyncio, the send stamps, and one
transparent retry when a *reused* connection turns out to be closed before any response byte
arrived (the race every keep-alive client has with servers that close idle connections, e.g.
llama-server). A connection that carried bytes beyond its response is not reused. Not
implemented: redirects, proxies, compression (none is requested), HTTP/2, 1xx responses other
than being skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Protocol, cast
from urllib.parse import urlsplit

import httptools

__all__ = ["HTTP1Pool", "InFlightHTTP", "ResponseSink", "Target"]

logger = logging.getLogger(__name__)

_MAX_HEAD_BYTES = 64 * 1024
_CLIENT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.EADDRNOTAVAIL, errno.ENOBUFS})


class ResponseSink(Protocol):
    """Receives one response. Exactly one of :meth:`on_end` and :meth:`on_fail` is called."""

    def on_head(self, status: int, reason: str, headers: dict[str, str]) -> None:
        """Status line and headers (names in lower case) have arrived."""

    def on_body(self, data: bytes, t_ns: int) -> None:
        """Decoded body bytes (framing removed) that arrived at ``t_ns`` (monotonic clock)."""

    def on_end(self, t_ns: int) -> None:
        """The body is complete; ``t_ns`` is when its last byte arrived."""

    def on_fail(self, cause: str, message: str, t_ns: int) -> None:
        """The exchange failed (``connection_error``, ``malformed_stream``, ``client_error``)."""


class Target:
    """Where requests go: scheme, host, port and the path prefix of a base URL."""

    __slots__ = ("host", "host_header", "path_prefix", "port", "tls")

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        default_port = 443 if self.tls else 80
        self.port = parts.port or default_port
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if self.port == default_port else f"{host}:{self.port}"
        self.path_prefix = parts.path.rstrip("/")

    def head_prefix(self, method: str, path: str, *, headers: Mapping[str, str]) -> bytes:
        """Request line and headers for ``path``, up to the ``Content-Length``.

        ``path`` is relative to the base URL's prefix; :func:`message` adds the length and the
        body, so a client encodes this part once for all its requests.
        """
        lines = [
            f"{method} {self.path_prefix}{path} HTTP/1.1",
            f"Host: {self.host_header}",
            *(f"{k}: {v}" for k, v in headers.items()),
            "",
        ]
        return "\r\n".join(lines).encode("latin-1")


def message(head_prefix: bytes, body: bytes) -> bytes:
    """A whole request: a :meth:`Target.head_prefix`, the body's ``Content-Length``, the body."""
    return b"%sContent-Length: %d\r\n\r\n%s" % (head_prefix, len(body), body)


class _Exchange:
    """Parses one response on one connection (httptools, i.e. llhttp) and feeds the sink.

    The parser's callbacks only collect; :meth:`feed` hands the sink what one network read
    completed, in order: the head, the body bytes of every chunk of the read joined (one
    ``on_body`` call per read, however many events it holds), then the end.
    """

    __slots__ = (
        "_complete",
        "_head_bytes",
        "_head_reported",
        "_headers",
        "_in_body",
        "_informational",
        "_parser",
        "_parts",
        "_prefix",
        "_reason",
        "_status",
        "_until_close",
        "conn",
        "done",
        "got_bytes",
        "handle",
        "keep_alive",
        "request",
        "retry_allowed",
        "sink",
    )

    def __init__(
        self,
        conn: _Connection,
        handle: InFlightHTTP,
        request: bytes,
        sink: ResponseSink,
        *,
        retry_allowed: bool,
    ) -> None:
        self.conn = conn
        self.handle = handle
        handle._exchange = self
        self.request = request
        self.sink = sink
        self.retry_allowed = retry_allowed
        self.got_bytes = False
        self.done = False
        self.keep_alive = True
        self._parser = httptools.HttpResponseParser(self)
        self._prefix = b""
        self._head_bytes = 0
        self._reason = b""
        self._headers: dict[str, str] = {}
        self._status = 0
        self._informational = False
        self._head_reported = True  # nothing to report yet
        self._in_body = False
        self._until_close = False
        self._complete = False
        self._parts: list[bytes] = []

    # -- parser callbacks (httptools): collect only ----------------------------------------

    def on_message_begin(self) -> None:
        if self._complete:
            self.keep_alive = False  # bytes after the body: do not trust the connection

    def on_status(self, reason: bytes) -> None:
        self._reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1").strip()
        headers = self._headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # informational: skip it, the real head follows
            self._informational = True
            self._headers = {}
            self._reason = b""
            return
        headers = self._headers
        self._status = status
        self.keep_alive = self._parser.should_keep_alive()
        self._until_close = (
            "content-length" not in headers
            and "chunked" not in headers.get("transfer-encoding", "").lower()
        )
        self._in_body = True
        self._head_reported = False

    def on_body(self, body: bytes) -> None:
        self._parts.append(body)

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        self._complete = True

    # -- incoming bytes -------------------------------------------------------------------

    def feed(self, data: bytes, t_ns: int) -> None:
        if not self.got_bytes:
            self.got_bytes = True
            self._prefix = data[:120]
        error: str | None = None
        if not self._complete:
            try:
                self._parser.feed_data(data)
            except httptools.HttpParserError as exc:
                if self._complete:
                    self.keep_alive = False  # bytes after the body that are not a response
                else:
                    error = self._malformed(str(exc))
        else:
            self.keep_alive = False  # bytes after the body
        if not self._in_body:
            self._head_bytes += len(data)
            if error is None and self._head_bytes > _MAX_HEAD_BYTES:
                error = "response head larger than 64 KiB"
        if not self._head_reported:
            self._head_reported = True
            reason = self._reason.decode("latin-1")
            self.sink.on_head(self._status, reason, self._headers)
        if self._parts and not self.done:
            parts, self._parts = self._parts, []
            self.sink.on_body(parts[0] if len(parts) == 1 else b"".join(parts), t_ns)
        if error is not None:
            self._fail("malformed_stream", error, t_ns)
        elif self._complete:
            self._finish(t_ns)

    def _malformed(self, why: str) -> str:
        if not self._in_body and not self._reason and not self._headers:
            first = self._prefix.split(b"\r\n", 1)[0].decode("latin-1")
            return f"not an HTTP/1.x response: {first[:120]!r} (llhttp: {why})"
        if "chunk" in why.lower():
            return f"bad chunk size (llhttp: {why})"
        return f"malformed HTTP response (llhttp: {why})"

    # -- endings ----------------------------------------------------------------------------

    def _finish(self, t_ns: int) -> None:
        if self.done:
            return
        self.done = True
        self.conn.exchange_finished(self, reusable=self.keep_alive)
        self.sink.on_end(t_ns)

    def _fail(self, cause: str, message: str, t_ns: int) -> None:
        if self.done:
            return
        self.done = True
        self.conn.exchange_finished(self, reusable=False)
        self.sink.on_fail(cause, message, t_ns)

    def lost(self, exc: BaseException | None, t_ns: int) -> None:
        """The connection closed (``exc`` None: the peer closed it cleanly)."""
        if self.done:
            return
        if self._in_body and self._until_close and exc is None:
            self._finish(t_ns)
            return
        self.done = True
        if not self.got_bytes and self.retry_allowed:
            # A reused keep-alive connection the server had already closed: nothing was
            # processed, so sending again on a fresh connection is safe and invisible.
            self.conn.pool.resend(self.handle, self.request, self.sink)
            return
        why = f" ({exc})" if exc is not None else ""
        if not self.got_bytes:
            message = f"connection closed before any response{why}"
        elif not self._in_body:
            message = f"connection closed inside the response head{why}"
        else:
            message = f"connection closed mid-response{why}"
        self.sink.on_fail("connection_error", message, t_ns)


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection; at most one exchange at a time."""

    def __init__(self, pool: HTTP1Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.closed = False
        self.served = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (create_connection makes one); uvloop's do not subclass
        # asyncio.Transport, so no isinstance check.
        self.transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        hook = self.pool.io_hook
        if hook is not None:
            hook()
        exchange = self.exchange
        if exchange is None:  # bytes on an idle connection: it is out of step, drop it
            self.abort()
            return
        exchange.feed(data, time.monotonic_ns())

    def eof_received(self) -> bool | None:
        return None  # let the transport close; connection_lost reports it

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        exchange = self.exchange
        if exchange is not None:
            self.exchange = None
            exchange.lost(exc, time.monotonic_ns())

    def start(self, exchange: _Exchange) -> None:
        assert self.transport is not None
        self.exchange = exchange
        self.served += 1
        self.transport.write(exchange.request)

    def exchange_finished(self, exchange: _Exchange, *, reusable: bool) -> None:
        if self.exchange is not exchange:
            return
        self.exchange = None
        if reusable and not self.closed:
            self.pool.release(self)
        else:
            self.close()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()

    def abort(self) -> None:
        self.exchange = None
        if self.transport is not None and not self.closed:
            self.transport.abort()

    @property
    def usable(self) -> bool:
        return (
            not self.closed
            and self.exchange is None
            and self.transport is not None
            and not self.transport.is_closing()
        )


class InFlightHTTP:
    """Handle of one submitted request: lets the caller abort it (timeout, cancellation)."""

    __slots__ = ("_exchange", "_pool", "_task", "aborted")

    def __init__(self, pool: HTTP1Pool) -> None:
        self._pool = pool
        self._exchange: _Exchange | None = None
        self._task: asyncio.Task[None] | None = None
        self.aborted = False

    def abort(self) -> None:
        """Stop the exchange now: close its connection (or cancel its connect). No sink call."""
        self.aborted = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
        exchange = self._exchange
        if exchange is not None and not exchange.done:
            exchange.done = True
            exchange.conn.abort()


class HTTP1Pool:
    """Keep-alive connections to one origin, with O(1) reuse and no cap of its own.

    Args:
        base_url: ``http(s)://host:port/prefix``.
        ssl_context: TLS settings for https (default: verified, system CAs).
        connect_timeout_s: bound on one connection attempt (the request deadline also applies).
    """

    def __init__(
        self,
        base_url: str,
        *,
        ssl_context: ssl.SSLContext | None = None,
        connect_timeout_s: float = 30.0,
    ) -> None:
        self.target = Target(base_url)
        self._ssl = (ssl_context or ssl.create_default_context()) if self.target.tls else None
        self._connect_timeout_s = connect_timeout_s
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.io_hook: Callable[[], None] | None = None
        """Called before each network read is processed (see OpenAIClient.set_io_hook)."""

    @property
    def open_connections(self) -> int:
        """Connections currently open (idle or busy)."""
        return len(self._all)

    def submit(self, request: bytes, sink: ResponseSink) -> InFlightHTTP:
        """Send ``request`` (head and body bytes) and report to ``sink``.

        On an idle keep-alive connection the bytes are written before this returns; otherwise a
        task connects first. The sink hears about the response, or about the failure.
        """
        handle = InFlightHTTP(self)
        if self._closed:
            sink.on_fail("client_error", "the client is closed", time.monotonic_ns())
            return handle
        idle = self._idle
        while idle:
            conn = idle.pop()
            if conn.usable:
                conn.start(_Exchange(conn, handle, request, sink, retry_allowed=True))
                return handle
        task = asyncio.get_running_loop().create_task(self._connect_and_send(handle, request, sink))
        handle._task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return handle

    def resend(self, handle: InFlightHTTP, request: bytes, sink: ResponseSink) -> None:
        """Send again on a fresh connection (after a stale keep-alive connection)."""
        task = asyncio.get_running_loop().create_task(
            self._connect_and_send(handle, request, sink, retry_allowed=False)
        )
        handle._task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect_and_send(
        self,
        handle: InFlightHTTP,
        request: bytes,
        sink: ResponseSink,
        *,
        retry_allowed: bool = False,
    ) -> None:
        loop = asyncio.get_running_loop()
        target = self.target
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: _Connection(self),
                    target.host,
                    target.port,
                    ssl=self._ssl,
                    server_hostname=target.host if self._ssl is not None else None,
                )
        except TimeoutError:
            sink.on_fail(
                "connection_error",
                f"connect to {target.host_header} timed out after {self._connect_timeout_s:g} s",
                time.monotonic_ns(),
            )
            return
        except OSError as exc:
            cause = "client_error" if exc.errno in _CLIENT_ERRNOS else "connection_error"
            sink.on_fail(
                cause, f"connect to {target.host_header} failed: {exc}", time.monotonic_ns()
            )
            return
        if handle.aborted or self._closed:
            conn.abort()
            return
        self._all.add(conn)
        # A just-connected socket may already be closed by the peer (connection_lost ran):
        # starting on it then reports the failure through the exchange.
        exchange = _Exchange(conn, handle, request, sink, retry_allowed=retry_allowed)
        if conn.closed:
            exchange.lost(None, time.monotonic_ns())
            return
        conn.start(exchange)

    def release(self, conn: _Connection) -> None:
        """An exchange finished cleanly: keep the connection for the next request."""
        if self._closed:
            conn.close()
        else:
            self._idle.append(conn)

    def forget(self, conn: _Connection) -> None:
        """The connection closed."""
        self._all.discard(conn)
        # Closed idle connections are skipped lazily by submit(); removing them here would
        # cost a scan of the idle stack on every close.

    async def aclose(self) -> None:
        """Close every connection and cancel pending connects."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for conn in list(self._all):
            conn.abort()
        self._idle.clear()
        self._all.clear()
