"""TTFT percentiles by client on one server: does the load generator, or its pool, change them?

Five clients, each alone at the full rate, one after the other over the same server, in an
order that rotates from round to round: ``vllm bench serve`` (aiohttp's pool), three raw
asyncio clients that differ only in connection reuse (``tests/connpolicy.py``: a new connection
per request, keep-alive reusing the oldest idle connection, keep-alive reusing the one released
last) and tokenwatt (one probe: 1 s warm-up, then its window; its idle pool is a stack). Each
client sends Poisson arrivals of N-token prompts with ``ignore_eos`` and M output tokens,
streamed. Printed per client and round: p50 / p90 / p95 / p99 TTFT by nearest rank over its
requests (the same method for every client), then the median over the rounds, and tokenwatt's
p90 and p99 against vllm bench's and the fresh-connection client's (the keep-alive issue's
done-when: within 10 %).

Server: ``tokenwatt sim`` (H100 SXM, Qwen3-8B, its own process) or real vLLM (CPU build, tiny
model, prefix caching off). ``--confine-server`` puts the server on the first CPU (all of
vLLM on its worker's CPU) and the clients on the others.

    .venv/bin/python benchmarks/ttft_by_client.py --server sim --rate 16 --requests 400
    .venv/bin/python benchmarks/ttft_by_client.py --server vllm --rate 8 --requests 240

The raw clients and tokenwatt send token-id prompts, vllm bench text from its random dataset
(the simulator estimates the text's tokens; vLLM tokenizes it, ~2 ms more TTFT at 64 tokens);
with ``--text-prompts`` every client sends such text.
The raw clients' clock starts when the request is written (a fresh connection is open by then),
vllm bench's before aiohttp takes a connection, tokenwatt's just before the write.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import loadgen_vs_vllm_bench as side
from loadgen_common import conditions, start_vllm, vllm_bench

from tests.connpolicy import Policy, completion_request, run_side_by_side
from tests.peers import Peer
from tokenwatt.metrics import latency_stats
from tokenwatt.schema.run import LatencyStats
from tokenwatt.sim.launch import SimProcess, SimSettings, launch

CLIENTS = ("vllm bench", "fresh", "fifo", "lifo", "tokenwatt")
LABELS = {
    "vllm bench": "vllm bench serve (aiohttp pool)",
    "fresh": "raw asyncio, a new connection per request",
    "fifo": "raw asyncio, keep-alive, oldest idle connection",
    "lifo": "raw asyncio, keep-alive, most recently released",
    "tokenwatt": "tokenwatt (idle pool: a stack)",
}
QUANTILES = ("p50", "p90", "p95", "p99")


def raw(
    port: int,
    policy: Policy,
    *,
    rate: float,
    n: int,
    model: str,
    input_len: int,
    output_len: int,
    prompts: list[str] | None,
) -> list[float | None]:
    rng = random.Random(n)
    requests = [
        completion_request(
            f"127.0.0.1:{port}",
            model=model,
            prompt=(
                prompts[i % len(prompts)]
                if prompts is not None
                else [rng.randrange(32000) for _ in range(input_len)]
            ),
            max_tokens=output_len,
        )
        for i in range(n)
    ]
    results = asyncio.run(
        run_side_by_side("127.0.0.1", port, requests, rate_rps=rate, policies=(policy,))
    )
    # A failed request counts as +inf (None), as in every tokenwatt percentile.
    return [
        1000 * s.ttft_s if s.ttft_s is not None and not s.error else None for s in results[policy]
    ]


def measure(
    client: str,
    root_url: str,
    port: int,
    tmp: Path,
    *,
    rate: float,
    n: int,
    model: str,
    input_len: int,
    output_len: int,
    rnd: int,
    prompts: list[str] | None,
) -> LatencyStats:
    if client == "vllm bench":
        theirs: dict[str, Any] = vllm_bench(
            root_url,
            tmp,
            num_prompts=n,
            input_len=input_len,
            output_len=output_len,
            request_rate=rate,
            backend="vllm" if model == "tiny" else "openai",
            model=model,
            seed=rnd,
        )
        ok = [s == "" for s in theirs.get("errors", [""] * len(theirs["ttfts"]))]
        return latency_stats(
            [1000 * t if good else None for t, good in zip(theirs["ttfts"], ok, strict=True)]
        )
    if client == "tokenwatt":
        record = asyncio.run(
            side.ours(
                root_url,
                rate=rate,
                window_s=n / rate - 1.0,
                warmup_s=1.0,
                index=rnd,
                input_len=input_len,
                prompts=prompts,
                output_len=output_len,
            )
        )
        assert record.requests is not None
        if record.client_bound:
            # Its own verdict: the figures then measure the box as much as the server.
            print(f"  tokenwatt: client-bound (p99 send lag {record.send_lag_p99_ms:.1f} ms)")
        return latency_stats(record.requests.ttft_ms)
    policy: Policy = client  # type: ignore[assignment]
    return latency_stats(
        raw(
            port,
            policy,
            rate=rate,
            n=n,
            model=model,
            input_len=input_len,
            output_len=output_len,
            prompts=prompts,
        )
    )


def fmt(stats: LatencyStats) -> str:
    return " / ".join(f"{getattr(stats, q):.1f}" for q in QUANTILES)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--server", choices=["sim", "vllm"], default="sim")
    parser.add_argument("--rate", type=float, default=16.0, help="arrival rate, req/s")
    parser.add_argument("--requests", type=int, default=400, help="requests per client and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--input-len", type=int, default=64, help="prompt tokens")
    parser.add_argument("--output-len", type=int, default=128, help="output tokens")
    parser.add_argument(
        "--text-prompts",
        action="store_true",
        help="the raw clients and tokenwatt send text from vllm bench's random dataset too",
    )
    parser.add_argument("--clients", default=",".join(CLIENTS), help="which, comma-separated")
    parser.add_argument(
        "--confine-server",
        action="store_true",
        help="the server on the first CPU (vLLM: on its worker's CPU), the clients on the others",
    )
    args = parser.parse_args()
    clients = [c for c in args.clients.split(",") if c]
    unknown = set(clients) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown clients {sorted(unknown)}; choose from {', '.join(CLIENTS)}")

    print(f"conditions at start: {conditions()}")
    server: Peer | SimProcess
    if args.server == "sim":
        side.MODEL[0] = "sim"
        settings = SimSettings(gpu="h100-sxm", model_config=side.SIM_MODEL, served_model_name="sim")
        server = launch(settings)
        assert server.pid is not None
        assert server.port is not None
        root_url, port = server.url, server.port
        print("server: tokenwatt sim, H100 SXM, Qwen3-8B (bf16)")
        if args.confine_server:
            on, off = side.confine_sim(server.pid)
            print(f"simulator on CPUs {sorted(on)}; clients on CPUs {sorted(off)}")
    else:
        side.MODEL[0] = "tiny"
        server = start_vllm()
        root_url, port = server.base_url, server.port
        print("server: vLLM (CPU build), tiny model, prefix caching off")
        if args.confine_server:
            on, off = side.confine_server(server.pid)
            print(f"vLLM on CPUs {sorted(on)}; clients on CPUs {sorted(off)}")
    print(
        f"{args.rate:g} req/s Poisson, {args.input_len}-token prompts, {args.output_len} output"
        f" tokens, ignore_eos, {args.requests} requests per client and round"
    )
    runs: dict[str, list[LatencyStats]] = {c: [] for c in clients}
    try:
        prompts = None
        if args.text_prompts:
            # A seed vllm bench's rounds (seeds 0, 1, ...) do not use: other prompts, same kind.
            prompts = side.bench_prompts(args.input_len, args.requests, seed=10_000)
            print(f"text prompts for every client: {len(prompts)} from vllm bench's dataset")
        with tempfile.TemporaryDirectory(prefix="tw-ttft-by-client-") as tmp:
            for rnd in range(args.rounds):
                order = clients[rnd % len(clients) :] + clients[: rnd % len(clients)]
                for client in order:
                    stats = measure(
                        client,
                        root_url,
                        port,
                        Path(tmp),
                        rate=args.rate,
                        n=args.requests,
                        model=side.MODEL[0],
                        input_len=args.input_len,
                        output_len=args.output_len,
                        rnd=rnd,
                        prompts=prompts,
                    )
                    runs[client].append(stats)
                    print(
                        f"round {rnd} {client:10s} TTFT p50 / p90 / p95 / p99 {fmt(stats)} ms"
                        f" ({stats.count} requests)",
                        flush=True,
                    )
                    time.sleep(2)
    finally:
        server.stop()
    print(f"conditions at end: {conditions()}")

    print("\n| client | TTFT p50 / p90 / p95 / p99 (ms), each round | median over rounds |")
    print("| --- | --- | --- |")
    medians: dict[str, dict[str, float]] = {}
    for client in clients:
        medians[client] = {
            q: statistics.median(getattr(s, q) for s in runs[client]) for q in QUANTILES
        }
        rounds = " and ".join(fmt(s) for s in runs[client])
        median = " / ".join(f"{medians[client][q]:.1f}" for q in QUANTILES)
        print(f"| {LABELS[client]} | {rounds} | {median} |")
    if "tokenwatt" in medians:
        for ref in ("vllm bench", "fresh"):
            if ref not in medians:
                continue
            ratios = {q: medians["tokenwatt"][q] / medians[ref][q] for q in ("p90", "p99")}
            within = all(abs(r - 1) <= 0.10 for r in ratios.values())
            print(
                f"tokenwatt / {ref} (medians over rounds): p90 {ratios['p90']:.3f},"
                f" p99 {ratios['p99']:.3f}: {'within' if within else 'NOT within'} 10 %"
            )


if __name__ == "__main__":
    main()
