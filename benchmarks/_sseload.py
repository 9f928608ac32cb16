"""A lean open-loop SSE load driver for the simulator benchmarks (raw asyncio sockets).

Kept deliberately cheap per token (no HTTP library, no JSON parsing of chunks) so the client is
not what limits the measurement on a small machine: it counts ``data: {`` events and records the
arrival time of each.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field


@dataclass
class Result:
    t_sched: float
    t_send: float = 0.0
    times: list[float] = field(default_factory=list)
    ok: bool = False
    error: str = ""


async def _one(host: str, port: int, body: bytes, res: Result) -> None:
    res.t_send = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError as exc:
        res.error = f"connect: {exc}"
        return
    try:
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            res.error = head.split(b"\r\n", 1)[0].decode()
            return
        chunked = b"chunked" in head.lower()
        tail = b""
        while True:
            if chunked:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.strip(), 16)
                if size == 0:
                    break
                data = await reader.readexactly(size + 2)
            else:
                data = await reader.read(65536)
                if not data:
                    break
            now = time.monotonic()
            buf = tail + data
            n = buf.count(b"data: {")
            res.times.extend([now] * n)
            if b"data: [DONE]" in buf:
                res.ok = True
                break
            tail = buf[-16:]
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    finally:
        writer.close()


async def run_open_loop(
    host: str,
    port: int,
    *,
    rate_rps: float,
    duration_s: float,
    prompt_tokens: int,
    output_tokens: int,
    model: str,
    seed: int = 0,
) -> list[Result]:
    """Poisson arrivals at ``rate_rps`` for ``duration_s``; waits for every stream to end."""
    rng = random.Random(seed)
    results: list[Result] = []
    tasks: list[asyncio.Task[None]] = []
    t0 = time.monotonic() + 0.05
    t = 0.0
    while True:
        t += rng.expovariate(rate_rps)
        if t > duration_s:
            break
        prompt = [rng.randrange(32000) for _ in range(prompt_tokens)]
        body = json.dumps(
            {
                "model": model,
                "prompt": prompt,
                "max_tokens": output_tokens,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        ).encode()
        delay = t0 + t - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        res = Result(t_sched=t0 + t)
        results.append(res)
        tasks.append(asyncio.create_task(_one(host, port, body, res)))
    await asyncio.gather(*tasks)
    return results
