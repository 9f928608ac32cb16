"""A local streaming server whose answer is known, for the load generator's self-calibration.

``python -m tokenwatt.load.calibration_server --ttft-ms T --itl-ms I`` binds an ephemeral port
on 127.0.0.1, prints it on one line of stdout, and serves until its stdin closes (so a crashed
parent never leaves it behind). ``POST /v1/completions`` (any body asking ``max_tokens`` N, a
stream) answers with N one-token SSE events, vLLM's shape: the first ``T`` ms after the request
was read, then one every ``I`` ms, a usage chunk and ``[DONE]``. It costs next to nothing per
event: one scheduler task on a heap of due streams writes every due event and sleeps until the
next (on :func:`~tokenwatt.load.precise_loop.precise_event_loop`), each event's bytes made once.

Its own stamps are the truth the client is checked against (:mod:`tokenwatt.load.calibrate`):
for every request, keyed by the SHA-1 of its body, the monotonic-clock ns at which the request
was read and at which each token event was written. ``GET /stamps`` returns them as JSON
(``{key: [t_read_ns, t_write_ns, ...]}``) and forgets them. The client and the server share the
host and so ``CLOCK_MONOTONIC``.

**Several processes** (a host whose load generator outruns one Python process):
``--port P --reuse-port`` binds the serving port with ``SO_REUSEPORT``, so that processes
started on the same port share its connections (the kernel spreads them). Each process also
listens on a control port of its own for ``GET /stamps``; the first line on stdout is
``PORT CONTROL_PORT``. A process that falls behind its own schedule (more events due than one
process can write) still reads: it writes for at most :data:`PASS_S` before it lets the loop
accept, read and answer ``/stamps``, and its stamps show how late it was.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import heapq
import json
import os
import sys
import time
from collections.abc import Sequence

import httptools

__all__ = ["PASS_S", "main"]

PASS_S = 0.002
"""Longest stretch of writing events before the loop reads again, s."""

_TOKEN = (
    b'data: {"id":"cmpl-cal","object":"text_completion","choices":'
    b'[{"index":0,"text":" a","finish_reason":null}]}\n\n'
)
_LAST = (
    b'data: {"id":"cmpl-cal","object":"text_completion","choices":'
    b'[{"index":0,"text":" a","finish_reason":"length"}]}\n\n'
)
_DONE = b"data: [DONE]\n\n"
_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
)


_BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


_TOKEN_CHUNK = _chunk(_TOKEN)
_LAST_CHUNK = _chunk(_LAST)


class _Stream:
    __slots__ = ("conn", "key", "left", "prompt", "stamps", "total")

    def __init__(self, conn: _Conn, key: str, total: int, prompt: int, t_read_ns: int) -> None:
        self.conn = conn
        self.key = key
        self.total = total
        self.left = total
        self.prompt = prompt
        self.stamps = [t_read_ns]


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _Server:
    def __init__(self, ttft_ns: int, itl_ns: int) -> None:
        self.ttft_ns = ttft_ns
        self.itl_ns = itl_ns
        self.stamps: dict[str, list[int]] = {}
        self._heap: list[tuple[int, int, _Stream]] = []
        self._seq = 0
        self._waiter: asyncio.Future[None] | None = None
        self._sleep_until_ns = 0

    def add(self, stream: _Stream) -> None:
        due = stream.stamps[0] + self.ttft_ns
        self._push(due, stream)
        if self._waiter is not None and due < self._sleep_until_ns:
            _wake(self._waiter)  # it sleeps past this stream's first event

    def _push(self, due_ns: int, stream: _Stream) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (due_ns, self._seq, stream))

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        heap = self._heap
        pass_ns = round(PASS_S * 1e9)
        while True:
            now = time.monotonic_ns()
            if not heap or heap[0][0] > now:
                self._waiter = waiter = loop.create_future()
                if heap:
                    self._sleep_until_ns = heap[0][0]
                    handle = loop.call_later((heap[0][0] - now) / 1e9, _wake, waiter)
                else:
                    self._sleep_until_ns = 1 << 62
                    handle = None
                await waiter
                self._waiter = None
                if handle is not None:
                    handle.cancel()
                continue
            written = 0
            while heap and heap[0][0] <= now:
                written += 1
                if not written % 64 and time.monotonic_ns() - now > pass_ns:
                    break  # the rest after the loop has read
                due, _, s = heapq.heappop(heap)
                if s.conn.closed:
                    continue
                s.left -= 1
                if s.left > 0:
                    s.conn.write(_TOKEN_CHUNK)
                    s.stamps.append(time.monotonic_ns())
                    self._push(due + self.itl_ns, s)
                    continue
                usage = json.dumps(
                    {
                        "id": "cmpl-cal",
                        "object": "text_completion",
                        "choices": [],
                        "usage": {
                            "prompt_tokens": s.prompt,
                            "completion_tokens": s.total,
                            "total_tokens": s.prompt + s.total,
                        },
                    }
                ).encode()
                s.conn.write(_LAST_CHUNK)
                s.stamps.append(time.monotonic_ns())
                s.conn.write(_chunk(b"data: " + usage + b"\n\n") + _chunk(_DONE) + b"0\r\n\r\n")
                self.stamps[s.key] = s.stamps
                s.conn.busy = False
                s.conn.next_request()
            if heap and heap[0][0] <= time.monotonic_ns():
                # Behind: events fell due while the last ones were written. Let the loop read
                # first (new requests, GET /stamps), or a saturated server reads nothing at all.
                await asyncio.sleep(0)


class _Conn(asyncio.Protocol):
    def __init__(self, server: _Server) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.closed = False
        self.busy = False
        self.queued: list[tuple[bytes, bytes, bytes, int]] = []
        """Requests read and not yet answered: (method, url, body, read at ns)."""

    # -- asyncio.Protocol --
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.write(_BAD_REQUEST)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    # -- httptools callbacks --
    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self.body)
        self.queued.append((self.parser.get_method(), self.url, body, time.monotonic_ns()))
        self.url, self.body = b"", []
        self.next_request()

    # -- helpers --
    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def next_request(self) -> None:
        if self.busy or not self.queued:
            return
        method, url, body, t_read_ns = self.queued.pop(0)
        if method == b"GET" and url.startswith(b"/stamps"):
            payload = json.dumps(self.server.stamps).encode()
            self.server.stamps = {}
            self.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                % len(payload)
                + payload
            )
            self.next_request()
            return
        if method != b"POST" or not url.endswith(b"/completions"):
            self.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            self.next_request()
            return
        try:
            request = json.loads(body)
            tokens = int(request.get("max_tokens") or 16)
            prompt = request.get("prompt")
            prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        except (ValueError, TypeError, AttributeError):
            self.write(_BAD_REQUEST)
            self.close()
            return
        self.busy = True
        self.write(_HEAD)
        self.server.add(_Stream(self, body_key(body), max(1, tokens), prompt_tokens, t_read_ns))


def body_key(body: bytes) -> str:
    """The key the server files a request's stamps under."""
    return hashlib.sha1(body).hexdigest()[:16]


async def _serve(ttft_ms: float, itl_ms: float, port: int, reuse_port: bool) -> None:
    loop = asyncio.get_running_loop()
    server = _Server(round(ttft_ms * 1e6), round(itl_ms * 1e6))
    listener = await loop.create_server(
        lambda: _Conn(server), "127.0.0.1", port, backlog=4096, reuse_port=reuse_port or None
    )
    control = await loop.create_server(lambda: _Conn(server), "127.0.0.1", 0)
    ports = [sock.getsockname()[1] for sock in (*listener.sockets, *control.sockets)]
    sys.stdout.write(f"{ports[0]} {ports[1]}\n")
    sys.stdout.flush()
    done = asyncio.Event()
    loop.add_reader(sys.stdin.fileno(), lambda: None if os.read(0, 4096) else done.set())
    scheduler = asyncio.create_task(server.run())
    await done.wait()
    scheduler.cancel()
    listener.close()
    control.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until stdin closes."""
    from tokenwatt.load.precise_loop import precise_event_loop, reduce_timer_slack

    p = argparse.ArgumentParser(prog="python -m tokenwatt.load.calibration_server")
    p.add_argument("--ttft-ms", type=float, required=True)
    p.add_argument("--itl-ms", type=float, required=True)
    p.add_argument("--port", type=int, default=0, help="serving port (0: any free one)")
    p.add_argument("--reuse-port", action="store_true", help="share the port with other processes")
    args = p.parse_args(argv)
    reduce_timer_slack()
    with asyncio.Runner(loop_factory=precise_event_loop) as runner:
        runner.run(_serve(args.ttft_ms, args.itl_ms, args.port, args.reuse_port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
