"""Client CPU per streamed event and per request of the fast transport (issue 19).

Against nginx-sse (a canned SSE server in C, its own process, so its CPU is not counted), one
``OpenAIClient`` (the fast transport a probe's workers use) runs a closed loop of
``--streams`` concurrent streams in this process, and the process's CPU time
(``time.process_time``, user + system) is divided by what it received:

- **batched**: no server delays, so a read holds many events (nginx does not flush per event);
  streams of 1 and of ``--tokens`` tokens. The difference of the two CPU costs per request over
  the difference of their events gives the CPU per event; the 1-token cost less its events the
  CPU per request beyond its events.
- **spaced**: TTFT 50 ms and one token every 10 ms (``--tokens`` tokens), so each event arrives
  in its own read, as from a real engine: CPU per event including its read.

Events are counted as the SSE ``data:`` events of a response (one per token, plus the usage
chunk and ``[DONE]``). Each figure is the median of ``--rounds`` rounds.

``--peers mlperf`` measures MLPerf's endpoint client (``mlcommons/endpoints``, uvloop + msgspec +
httptools; ``../shared/peers/install-mlperf-endpoints.sh`` installs it) on the same servers in
the same rounds: its ``benchmark_httpclient`` with one worker, closed loop, the same connection
counts, 100-token streams (what it asks; no usage chunk, so 101 events). Its CPU is its process
tree's (``RUSAGE_CHILDREN``), and its start-up (imports) is taken out by running it for
``--peer-seconds`` and for a third of that and dividing the difference of their CPU by the
difference of their responses.

    .venv/bin/python benchmarks/client_cpu.py
    .venv/bin/python benchmarks/client_cpu.py --rounds 5 --requests 4000
    .venv/bin/python benchmarks/client_cpu.py --peers mlperf
    .venv/bin/python benchmarks/client_cpu.py --loop uvloop   # the same client on uvloop
"""

from __future__ import annotations

import argparse
import asyncio
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from loadgen_common import conditions, start_nginx  # noqa: E402

from tests import factories  # noqa: E402
from tokenwatt.client.openai import GenerationRequest, OpenAIClient  # noqa: E402

EXTRA_EVENTS = 2
"""Events of a response besides its tokens: the usage chunk and ``[DONE]``."""
MLPERF_PYTHON = "/tmp/peers/venv-mlperf-endpoints/bin/python"
MLPERF_TOKENS = 100
"""Tokens MLPerf's benchmark asks for (``max_completion_tokens``), streamed by nginx-sse."""


def _mlperf_run(base_url: str, *, streams: int, seconds: float) -> tuple[float, int]:
    """(CPU seconds of its process tree, responses) of one MLPerf closed-loop run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [
            MLPERF_PYTHON,
            "-m",
            "inference_endpoint.utils.benchmark_httpclient",
            "--endpoint",
            f"{base_url}/v1/chat/completions",
            "-w",
            "1",
            "-c",
            str(streams),
            "--max-concurrency",
            str(streams),
            "--stream",
            "-d",
            f"{seconds:g}",
            "--no-pin",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    found = re.search(r"Total Recv:\s+([\d,]+)", done.stdout)
    errors = re.search(r"Errors:\s+([\d,]+)", done.stdout)
    if found is None or errors is None or errors.group(1) != "0":
        raise SystemExit(f"MLPerf's client: unexpected output\n{done.stdout[-1500:]}")
    return cpu_s, int(found.group(1).replace(",", ""))


def mlperf_per_request(base_url: str, *, streams: int, seconds: float) -> float:
    """MLPerf's client CPU seconds per response, its start-up taken out."""
    short_cpu, short_n = _mlperf_run(base_url, streams=streams, seconds=seconds / 3)
    long_cpu, long_n = _mlperf_run(base_url, streams=streams, seconds=seconds)
    return (long_cpu - short_cpu) / (long_n - short_n)


async def closed_loop(base_url: str, *, tokens: int, streams: int, requests: int) -> float:
    """CPU seconds of this process per request over ``requests`` streamed requests."""
    engine = factories.spec(
        engine={"endpoint": f"{base_url}/v1", "model": "sim", "ignore_eos": True}
    ).engine
    async with OpenAIClient(engine, transport="fast", request_timeout_s=60) as client:
        todo = iter(range(requests))
        failed: list[str] = []

        async def stream() -> None:
            for i in todo:
                result = await client.generate(
                    GenerationRequest(
                        index=i, max_tokens=tokens, input_tokens=8, prompt_ids=list(range(8))
                    )
                )
                if not result.ok:
                    failed.append(f"{result.status}: {result.error}")

        await asyncio.gather(*(stream() for _ in range(min(streams, 8))))  # warm connections
        todo = iter(range(requests))
        t0 = time.process_time()
        await asyncio.gather(*(stream() for _ in range(streams)))
        cpu_s = time.process_time() - t0
    if failed:
        raise SystemExit(f"{len(failed)} requests failed, e.g. {failed[0]}")
    return cpu_s / requests


def tokenwatt_per_request(
    base_url: str, tokens: int, streams: int, requests: int, *, loop: str = "asyncio"
) -> float:
    """:func:`closed_loop` on a fresh event loop (asyncio's, or uvloop's): CPU s per request."""
    work = closed_loop(base_url, tokens=tokens, streams=streams, requests=requests)
    if loop == "uvloop":
        import uvloop  # only for this comparison: `pip install uvloop`

        return uvloop.run(work)
    return asyncio.run(work)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--streams", type=int, default=64, help="batched: concurrent streams")
    parser.add_argument("--spaced-streams", type=int, default=200)
    parser.add_argument("--requests", type=int, default=3000, help="batched, per round")
    parser.add_argument("--spaced-requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peers", default="", help="'mlperf': MLPerf's endpoint client too")
    parser.add_argument("--peer-seconds", type=float, default=12.0)
    parser.add_argument(
        "--loop",
        choices=["asyncio", "uvloop"],
        default="asyncio",
        help="the event loop tokenwatt's client runs on (uvloop: pip install uvloop)",
    )
    args = parser.parse_args()
    peers = [p for p in args.peers.split(",") if p]
    if set(peers) - {"mlperf"}:
        raise SystemExit(f"unknown peers: {args.peers} (known: mlperf)")
    print(conditions())
    batched = start_nginx()
    spaced = start_nginx(ttft_ms=50, itl_ms=10)
    try:
        one, many, each = [], [], []
        peer_batched: list[float] = []
        peer_spaced: list[float] = []
        for _ in range(args.rounds):
            if peers:
                peer_batched.append(
                    mlperf_per_request(
                        batched.base_url, streams=args.streams, seconds=args.peer_seconds
                    )
                )
                peer_spaced.append(
                    mlperf_per_request(
                        spaced.base_url, streams=args.spaced_streams, seconds=args.peer_seconds
                    )
                )
            one.append(
                tokenwatt_per_request(
                    batched.base_url, 1, args.streams, args.requests, loop=args.loop
                )
            )
            many.append(
                tokenwatt_per_request(
                    batched.base_url, args.tokens, args.streams, args.requests, loop=args.loop
                )
            )
            each.append(
                tokenwatt_per_request(
                    spaced.base_url,
                    args.tokens,
                    args.spaced_streams,
                    args.spaced_requests,
                    loop=args.loop,
                )
            )
    finally:
        batched.stop()
        spaced.stop()
    per_event = [(m - o) / (args.tokens - 1) for o, m in zip(one, many, strict=True)]
    beyond = [o - (1 + EXTRA_EVENTS) * e for o, e in zip(one, per_event, strict=True)]
    spaced_event = [s / (args.tokens + EXTRA_EVENTS) for s in each]

    def us(values: list[float]) -> str:
        runs = ", ".join(f"{v * 1e6:.2f}" for v in values)
        return f"{statistics.median(values) * 1e6:.2f} µs ({runs})"

    print(f"batched, CPU per event: {us(per_event)}")
    print(f"batched, CPU per request beyond its events: {us(beyond)}")
    print(f"batched, CPU per {args.tokens}-token request: {us(many)}")
    print(f"spaced, CPU per event (its own read): {us(spaced_event)}")
    if peers:
        events = MLPERF_TOKENS + 1  # no usage chunk: the tokens and [DONE]
        peer_event = [v / events for v in peer_batched]
        peer_spaced_event = [v / events for v in peer_spaced]
        print(f"MLPerf, batched, CPU per {MLPERF_TOKENS}-token request: {us(peer_batched)}")
        print(f"MLPerf, batched, CPU per event (request included): {us(peer_event)}")
        print(f"MLPerf, spaced, CPU per event: {us(peer_spaced_event)}")
        ours = [m / (args.tokens + EXTRA_EVENTS) for m in many]
        print(
            "ratios, MLPerf / tokenwatt, CPU per event (request included): batched"
            f" {statistics.median(peer_event) / statistics.median(ours):.2f}x, spaced"
            f" {statistics.median(peer_spaced_event) / statistics.median(spaced_event):.2f}x"
        )


if __name__ == "__main__":
    main()
