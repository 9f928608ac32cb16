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

What it implements: one request per connection at a time, keep-alive reuse, ``Content-Length``,
chunked and close-delimited bodies, ``Connection: close``, TLS through asyncio, one transparent
retry when a *reused* connection turns out to be closed before any response byte arrived (the
race every keep-alive client has with servers that close idle connections, e.g. llama-server).
Not implemented: redirects, proxies, compression (none is requested), HTTP/2, 1xx responses
other than being skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Protocol
from urllib.parse import urlsplit

__all__ = ["HTTP1Pool", "InFlightHTTP", "ResponseSink", "Target"]

logger = logging.getLogger(__name__)

_MAX_HEAD_BYTES = 64 * 1024
_MAX_CHUNK_LINE_BYTES = 4096
_CLIENT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.EADDRNOTAVAIL, errno.ENOBUFS})

# Body framing
_LENGTH, _CHUNKED, _UNTIL_CLOSE = 0, 1, 2
# Chunked-decoder states
_C_SIZE, _C_DATA, _C_DATA_END, _C_TRAILER = 0, 1, 2, 3


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

    def head(
        self, method: str, path: str, *, headers: Mapping[str, str], content_length: int
    ) -> bytes:
        """Request line and headers for ``path`` (relative to the base URL's prefix)."""
        lines = [
            f"{method} {self.path_prefix}{path} HTTP/1.1",
            f"Host: {self.host_header}",
            *(f"{k}: {v}" for k, v in headers.items()),
            f"Content-Length: {content_length}",
            "",
            "",
        ]
        return "\r\n".join(lines).encode("latin-1")


class _Exchange:
    """Parses one response on one connection and feeds the sink."""

    __slots__ = (
        "_body_left",
        "_chunk_left",
        "_cstate",
        "_framing",
        "_head",
        "_in_body",
        "_line",
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
        self._head = b""
        self._in_body = False
        self._framing = _UNTIL_CLOSE
        self._body_left = 0
        self._cstate = _C_SIZE
        self._chunk_left = 0
        self._line = b""

    # -- incoming bytes -------------------------------------------------------------------

    def feed(self, data: bytes, t_ns: int) -> None:
        self.got_bytes = True
        if self._in_body:
            self._body(data, t_ns)
            return
        head = self._head + data
        end = head.find(b"\r\n\r\n")
        if end < 0:
            if len(head) > _MAX_HEAD_BYTES:
                self._fail("malformed_stream", "response head larger than 64 KiB", t_ns)
            else:
                self._head = head
            return
        self._head = b""
        rest = head[end + 4 :]
        if not self._parse_head(head[:end], t_ns):
            return
        if self.done:
            return
        if rest or self._framing == _LENGTH and self._body_left == 0:
            self._body(rest, t_ns)

    def _parse_head(self, raw: bytes, t_ns: int) -> bool:
        lines = raw.split(b"\r\n")
        status_line = lines[0].decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            self._fail("malformed_stream", f"not an HTTP/1.x response: {status_line[:120]!r}", t_ns)
            return False
        status = int(parts[1])
        if 100 <= status < 200:  # informational: skip it, the real head follows
            return True
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                self._fail("malformed_stream", f"bad header line {line[:80]!r}", t_ns)
                return False
            key = name.strip().lower().decode("latin-1")
            text = value.strip().decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        connection = headers.get("connection", "").lower()
        self.keep_alive = (
            "close" not in connection if parts[0] == "HTTP/1.1" else "keep-alive" in connection
        )
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._framing = _CHUNKED
        elif "content-length" in headers:
            try:
                self._body_left = int(headers["content-length"])
            except ValueError:
                self._fail("malformed_stream", "bad Content-Length", t_ns)
                return False
            self._framing = _LENGTH
        else:
            self._framing = _UNTIL_CLOSE
            self.keep_alive = False
        self._in_body = True
        self.sink.on_head(status, parts[2] if len(parts) > 2 else "", headers)
        return True

    def _body(self, data: bytes, t_ns: int) -> None:
        if self._framing == _CHUNKED:
            self._dechunk(data, t_ns)
        elif self._framing == _LENGTH:
            take = data[: self._body_left]
            self._body_left -= len(take)
            if take:
                self.sink.on_body(take, t_ns)
            if self._body_left == 0:
                if len(data) > len(take):
                    self.keep_alive = False  # bytes beyond the body: do not trust the connection
                self._finish(t_ns)
        elif data:
            self.sink.on_body(data, t_ns)

    def _dechunk(self, data: bytes, t_ns: int) -> None:
        # Hot path (one call per network read, often dozens of chunks per read): state lives in
        # locals and is written back once.
        out: list[bytes] = []
        pos, n = 0, len(data)
        state, left = self._cstate, self._chunk_left
        error: str | None = None
        finished = False
        while pos < n:
            if state == _C_SIZE and not self._line:
                # Fast path: a whole "SIZE\r\nDATA\r\n" chunk inside this read. Anything
                # unusual (extensions, bad sizes, a chunk cut by the read) takes the general path.
                eol = data.find(b"\n", pos)
                if eol >= 0:
                    head = data[pos:eol]
                    try:
                        size = 0 if b";" in head else int(head, 16)  # int() ignores the \r
                    except ValueError:
                        size = 0
                    end = eol + 1 + size
                    if size > 0 and end + 2 <= n and data[end : end + 2] == b"\r\n":
                        out.append(data[eol + 1 : end])
                        pos = end + 2
                        continue
            if state == _C_DATA:
                end = pos + left
                if end > n:
                    out.append(data[pos:])
                    left -= n - pos
                    pos = n
                    break
                out.append(data[pos:end])
                pos, left, state = end, 0, _C_DATA_END
                if data[pos : pos + 2] == b"\r\n":
                    pos += 2
                    state = _C_SIZE
                continue
            eol = data.find(b"\n", pos)
            if eol < 0:
                self._line += data[pos:]
                if len(self._line) > _MAX_CHUNK_LINE_BYTES:
                    error = "chunk-size line too long"
                break
            if self._line:
                line = (self._line + data[pos:eol]).rstrip(b"\r")
                self._line = b""
            else:
                line = data[pos:eol].rstrip(b"\r")
            pos = eol + 1
            if state == _C_SIZE:
                if b";" in line:
                    line = line.split(b";", 1)[0]
                try:
                    size = int(line, 16)
                except ValueError:
                    error = f"bad chunk size {line[:40]!r}"
                    break
                if size < 0:
                    error = "negative chunk size"
                    break
                if size == 0:
                    state = _C_TRAILER
                else:
                    state, left = _C_DATA, size
            elif state == _C_DATA_END:
                if line:
                    error = "chunk data longer than its size"
                    break
                state = _C_SIZE
            elif not line:  # empty line after the last chunk's trailers: body complete
                finished = True
                break
        self._cstate, self._chunk_left = state, left
        if out and not self.done:
            self.sink.on_body(out[0] if len(out) == 1 else b"".join(out), t_ns)
        if error is not None:
            self._fail("malformed_stream", error, t_ns)
        elif finished:
            if pos < n:
                self.keep_alive = False  # bytes after the body: do not trust the connection
            self._finish(t_ns)

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
        if self._in_body and self._framing == _UNTIL_CLOSE and exc is None:
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
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

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
