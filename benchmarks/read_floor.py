"""What one spaced SSE event costs a Python reader at the least: the floor under the client.

Against nginx-sse with the server's delays (first token after 50 ms, then one every 10 ms),
so every event arrives in its own read as from a real engine, N connections in a closed loop
(a connection sends its next request when a response ends). Readers, from the bare minimum up:

- ``epoll``: ``select.epoll`` and ``socket.recv`` in a plain loop; a read is counted, its
  events counted with ``bytes.count``; nothing parsed. What Python itself costs per read.
- ``asyncio``: the same counting in an ``asyncio.Protocol`` on asyncio's default loop: what
  the event loop's callback machinery adds.
- ``httptools``: asyncio and the response framed by httptools (llhttp), as tokenwatt's
  transport does, the body only counted.
- ``tokenwatt``: the whole client (``OpenAIClient``: framing, SSE, JSON, per-event stamps).

CPU time of this process, user and kernel apart (``os.times``; nginx runs in its own), over
reads and over events (tokens, the usage chunk and ``[DONE]``). Medians of ``--rounds``.

    .venv/bin/python benchmarks/read_floor.py
    .venv/bin/python benchmarks/read_floor.py --pin    # nginx on CPU 0, the reader on CPU 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import socket
import statistics

import httptools
from loadgen_common import conditions, pin, start_nginx

from tests import factories
from tokenwatt.client.openai import OpenAIClient
from tokenwatt.load.workload import build_workload

DONE = b"0\r\n\r\n"
Cpu = tuple[float, float]
"""User and system CPU seconds."""


def _cpu_since(t0: os.times_result) -> Cpu:
    """User and system CPU seconds of this process since ``t0``."""
    t = os.times()
    return t.user - t0.user, t.system - t0.system


def request_bytes(port: int, tokens: int, ttft_ms: float, itl_ms: float) -> bytes:
    body = json.dumps(
        {
            "model": "sim",
            "prompt": [1] * 64,
            "max_tokens": tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        f"X-Sim-TTFT-Ms: {ttft_ms:g}\r\nX-Sim-ITL-Ms: {itl_ms:g}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def run_epoll(port: int, req: bytes, conns: int, responses: int) -> tuple[Cpu, int, int]:
    ep = select.epoll()
    socks = {}
    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        socks[s.fileno()] = s
        ep.register(s.fileno(), select.EPOLLIN)
    reads = events = done = 0
    sent = conns
    cpu0 = os.times()
    for s in socks.values():
        s.send(req)
    while done < responses:
        for fd, _ev in ep.poll():
            s = socks[fd]
            data = s.recv(65536)
            reads += 1
            events += data.count(b"data:")
            if data.endswith(DONE):
                done += 1
                if sent < responses:
                    s.send(req)
                    sent += 1
    cpu = _cpu_since(cpu0)
    for s in socks.values():
        s.close()
    ep.close()
    return cpu, reads, events


class _Counter(asyncio.Protocol):
    def __init__(self, shared: dict, req: bytes) -> None:
        self.shared = shared
        self.req = req
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        sh = self.shared
        sh["reads"] += 1
        sh["events"] += data.count(b"data:")
        if data.endswith(DONE):
            self.finished()

    def finished(self) -> None:
        sh = self.shared
        sh["done"] += 1
        if sh["sent"] < sh["target"]:
            sh["sent"] += 1
            self.transport.write(self.req)
        elif sh["done"] >= sh["target"]:
            sh["future"].set_result(None)


class _Framed(_Counter):
    """The response framed by httptools, its body only counted."""

    def __init__(self, shared: dict, req: bytes) -> None:
        super().__init__(shared, req)
        self.parser = httptools.HttpResponseParser(self)

    def data_received(self, data: bytes) -> None:
        self.shared["reads"] += 1
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        self.shared["events"] += body.count(b"data:")

    def on_message_complete(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.finished()


async def run_protocol(
    factory: type[_Counter], port: int, req: bytes, conns: int, responses: int
) -> tuple[Cpu, int, int]:
    loop = asyncio.get_running_loop()
    shared = {
        "reads": 0,
        "events": 0,
        "done": 0,
        "sent": conns,
        "target": responses,
        "future": loop.create_future(),
    }
    protos = []
    for _ in range(conns):
        _, p = await loop.create_connection(lambda: factory(shared, req), "127.0.0.1", port)
        protos.append(p)
    cpu0 = os.times()
    for p in protos:
        p.transport.write(req)
    await shared["future"]
    cpu = _cpu_since(cpu0)
    for p in protos:
        p.transport.close()
    return cpu, shared["reads"], shared["events"]


async def run_client(
    base_url: str, tokens: int, ttft_ms: float, itl_ms: float, conns: int, responses: int
) -> tuple[Cpu, int, int]:
    spec = factories.spec(
        engine={"endpoint": f"{base_url}/v1", "model": "sim"},
        workload={"input_tokens": 64, "output_tokens": tokens},
    )
    work = build_workload(spec, context_tokens=1_000_000)
    headers = {"X-Sim-TTFT-Ms": f"{ttft_ms:g}", "X-Sim-ITL-Ms": f"{itl_ms:g}"}
    async with OpenAIClient(spec.engine, headers=headers) as client:
        prepared = [client.prepare(work.request(i)) for i in range(responses)]
        queue = list(reversed(prepared))
        events = 0

        async def worker() -> None:
            nonlocal events
            while queue:
                result = await client.generate(queue.pop())
                assert result.ok, result.error
                events += result.output_tokens + 2  # tokens, usage chunk, [DONE]

        cpu0 = os.times()
        await asyncio.gather(*(worker() for _ in range(conns)))
        cpu = _cpu_since(cpu0)
    return cpu, 0, events


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--responses", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--readers", default="epoll,asyncio,httptools,tokenwatt")
    parser.add_argument("--pin", action="store_true", help="nginx on CPU 0, this on CPU 1")
    args = parser.parse_args()
    print(f"conditions at start: {conditions()}")
    nginx = start_nginx()
    if args.pin:
        print(f"pinned: nginx {pin(nginx.pid, {0})} on CPU 0, the reader on CPU 1")
        os.sched_setaffinity(0, {1})
    readers = args.readers.split(",")
    req = request_bytes(nginx.port, args.tokens, args.ttft_ms, args.itl_ms)
    per_event: dict[str, list[float]] = {r: [] for r in readers}
    per_read: dict[str, list[float]] = {r: [] for r in readers}
    per_sys: dict[str, list[float]] = {r: [] for r in readers}
    try:
        for rnd in range(args.rounds):
            for name in readers if rnd % 2 == 0 else list(reversed(readers)):
                n, c = args.responses, args.connections
                if name == "epoll":
                    cpu, reads, events = run_epoll(nginx.port, req, c, n)
                elif name == "asyncio":
                    cpu, reads, events = asyncio.run(run_protocol(_Counter, nginx.port, req, c, n))
                elif name == "httptools":
                    cpu, reads, events = asyncio.run(run_protocol(_Framed, nginx.port, req, c, n))
                else:
                    cpu, reads, events = asyncio.run(
                        run_client(nginx.base_url, args.tokens, args.ttft_ms, args.itl_ms, c, n)
                    )
                user_s, sys_s = cpu
                cpu = user_s + sys_s
                per_event[name].append(cpu / events * 1e6)
                per_sys[name].append(sys_s / events * 1e6)
                if reads:
                    per_read[name].append(cpu / reads * 1e6)
                print(
                    f"  round {rnd} {name:10s} {cpu:6.3f} s CPU ({sys_s:.3f} in the kernel),"
                    f" {events:7d} events"
                    + (f", {reads:7d} reads ({events / reads:.2f} events a read)" if reads else "")
                    + f": {cpu / events * 1e6:5.2f} µs per event",
                    flush=True,
                )
    finally:
        nginx.stop()
    print("\nmedians (µs of CPU; rounds in brackets)")
    for name in readers:
        ev = per_event[name]
        rounds = ", ".join(f"{x:.2f}" for x in ev)
        line = f"  {name:10s} per event {statistics.median(ev):5.2f} ({rounds})"
        line += f"; in the kernel {statistics.median(per_sys[name]):5.2f}"
        if per_read[name]:
            line += f"; per read {statistics.median(per_read[name]):5.2f}"
        print(line)
    print(f"conditions at end: {conditions()}")


if __name__ == "__main__":
    main()
