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

    .venv/bin/python benchmarks/client_cpu.py
    .venv/bin/python benchmarks/client_cpu.py --rounds 5 --requests 4000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--streams", type=int, default=64, help="batched: concurrent streams")
    parser.add_argument("--spaced-streams", type=int, default=200)
    parser.add_argument("--requests", type=int, default=3000, help="batched, per round")
    parser.add_argument("--spaced-requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(conditions())
    batched = start_nginx()
    spaced = start_nginx(ttft_ms=50, itl_ms=10)
    try:
        one, many, each = [], [], []
        for _ in range(args.rounds):
            one.append(
                asyncio.run(
                    closed_loop(
                        batched.base_url, tokens=1, streams=args.streams, requests=args.requests
                    )
                )
            )
            many.append(
                asyncio.run(
                    closed_loop(
                        batched.base_url,
                        tokens=args.tokens,
                        streams=args.streams,
                        requests=args.requests,
                    )
                )
            )
            each.append(
                asyncio.run(
                    closed_loop(
                        spaced.base_url,
                        tokens=args.tokens,
                        streams=args.spaced_streams,
                        requests=args.spaced_requests,
                    )
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


if __name__ == "__main__":
    main()
