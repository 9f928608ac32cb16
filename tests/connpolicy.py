"""Raw-socket streaming clients that differ only in how they reuse HTTP/1.1 connections.

Three policies, as independent load generators have them: ``fresh`` (a new connection per
request, closed after its response), ``fifo`` (keep-alive, reuse the connection idle the
longest) and ``lifo`` (keep-alive, reuse the connection released last: tokenwatt's own pool, a
stack). A fresh connection is opened ahead of its request, so that the server's accepting it
(a few event-loop turns in asyncio servers) is not counted as the request's TTFT: what differs
between the policies is only whether the connection carried a request before. A server that treats a request the same whichever connection it comes on gives the same
TTFT distribution to all three; one that does not (Nagle's algorithm holding a response's first
chunk on a kept-alive connection, say) shows it in the keep-alive clients' tails.

Deliberately minimal: asyncio streams, no HTTP library, a response read to the end of its
chunked body before its connection is reused or closed. TTFT is the time from writing the
request (a fresh connection is open by then) to reading the first ``data: {`` event.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Policy = Literal["fresh", "fifo", "lifo"]
POLICIES: tuple[Policy, ...] = ("fresh", "fifo", "lifo")

_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@dataclass
class Sample:
    """One request as a client saw it."""

    policy: Policy
    reused: bool = False
    ttft_s: float | None = None
    tokens: int = 0
    error: str = ""


_SPARES = 4
"""Unused connections the fresh client keeps open, so its requests rarely wait for a connect."""


class _Pool:
    def __init__(self, host: str, port: int, policy: Policy) -> None:
        self.host, self.port, self.policy = host, port, policy
        self.idle: deque[_Conn] = deque()
        self.opening: set[asyncio.Task[_Conn]] = set()

    def refill(self) -> None:
        """``fresh``: open connections for the next requests, ahead of them."""
        while self.policy == "fresh" and len(self.idle) + len(self.opening) < _SPARES:
            task = asyncio.create_task(asyncio.open_connection(self.host, self.port))
            task.add_done_callback(self._opened)
            self.opening.add(task)

    def _opened(self, task: asyncio.Task[_Conn]) -> None:
        self.opening.discard(task)
        if not task.cancelled() and task.exception() is None:
            self.idle.append(task.result())

    def take_idle(self) -> _Conn | None:
        while self.idle:
            conn = self.idle.popleft() if self.policy != "lifo" else self.idle.pop()
            reader, writer = conn
            if not writer.is_closing() and not reader.at_eof():
                return conn
            writer.close()
        return None

    def put(self, conn: _Conn) -> None:
        if self.policy == "fresh":
            conn[1].close()
            # Not when a request is written: the server's accepting a connection would then
            # always fall inside a fresh request's TTFT, never inside the other clients'.
            self.refill()
        else:
            self.idle.append(conn)

    def close(self) -> None:
        for task in self.opening:
            task.cancel()
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()


async def _one(pool: _Pool, request: bytes, sample: Sample) -> None:
    conn = pool.take_idle()
    sample.reused = conn is not None and pool.policy != "fresh"
    if conn is None:  # no idle one left (or the fresh spare is not open yet)
        try:
            conn = await asyncio.open_connection(pool.host, pool.port)
        except OSError as exc:
            sample.error = f"connect: {exc}"
            return
    conn[1].write(request)
    await _exchange(pool, conn, request, sample, time.monotonic())


async def _exchange(pool: _Pool, conn: _Conn, request: bytes, sample: Sample, t0: float) -> None:
    """Read the response to ``request`` (already written on ``conn`` at ``t0``) to its end."""
    reader, writer = conn
    try:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if not (sample.reused and not exc.partial):
                raise
            # The server closed the idle connection as the request went out (its keep-alive
            # timeout; vLLM's is 5 s): nothing was processed, send it again on a new one.
            writer.close()
            reader, writer = await asyncio.open_connection(pool.host, pool.port)
            sample.reused = False
            t0 = time.monotonic()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200") or b"chunked" not in head.lower():
            sample.error = head.split(b"\r\n", 1)[0].decode("latin-1")
            writer.close()
            return
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # no trailers: the empty line ends the body
                break
            chunk = await reader.readexactly(size + 2)
            events = chunk.count(b"data: {")
            if events and sample.ttft_s is None:
                sample.ttft_s = time.monotonic() - t0
            sample.tokens += events
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
        sample.error = f"{type(exc).__name__}: {exc}"
        writer.close()
        return
    pool.put((reader, writer))


def completion_request(
    host_header: str, *, model: str, prompt: Sequence[int] | str, max_tokens: int
) -> bytes:
    """A streamed ``POST /v1/completions`` with ``ignore_eos``, head and body."""
    body = json.dumps(
        {
            "model": model,
            "prompt": prompt if isinstance(prompt, str) else list(prompt),
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host_header}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


async def run_side_by_side(
    host: str,
    port: int,
    requests: Sequence[bytes],
    *,
    rate_rps: float,
    policies: Sequence[Policy] = POLICIES,
    seed: int = 0,
    timeout_s: float = 120.0,
) -> dict[Policy, list[Sample]]:
    """One client per policy, taking turns on one seeded Poisson schedule at ``rate_rps``.

    Arrival i sends ``requests[i]`` from the client ``policies[i % len(policies)]``: the
    clients' requests interleave, so all of them sample the same server moments (a stall of the
    server, or of this shared box, hits each alike), and their distributions differ only by what
    the connection policy changes, and by chance.
    """
    rng = random.Random(seed)
    pools = {policy: _Pool(host, port, policy) for policy in policies}
    samples: dict[Policy, list[Sample]] = {policy: [] for policy in policies}
    tasks: list[asyncio.Task[None]] = []
    t = 0.0
    try:
        for pool in pools.values():
            pool.refill()
        t0 = time.monotonic() + 0.05
        for i, request in enumerate(requests):
            t += rng.expovariate(rate_rps)
            delay = t0 + t - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            pool = pools[policies[i % len(policies)]]
            sample = Sample(pool.policy)
            samples[pool.policy].append(sample)
            tasks.append(asyncio.create_task(_one(pool, request, sample)))
        async with asyncio.timeout(timeout_s):
            await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        for pool in pools.values():
            pool.close()
    return samples
