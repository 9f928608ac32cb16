"""How fast can the load generator go before it, not the server, is the limit?

Against nginx-sse (a canned SSE server in C: 32-token streams, no delays), for 1 and N worker
processes: probes at rising arrival rates until the probe is client-bound (DESIGN.md: achieved
rate under 97 % of offered, or p99 send lag over 10 ms). Reports the highest rate that stayed
not client-bound, its p99 send lag, the highest rate with p99 send lag <= 1 ms, and the streamed
event rate. Then the closed-loop ceiling at 64 concurrent streams (how the peer clients were
measured), the same load from `vllm bench serve` (and aiperf/guidellm with --peers), the ratios,
and a run with up to 8,192 streams open at once.

    .venv/bin/python benchmarks/loadgen_throughput.py                 # everything, ~6 min
    .venv/bin/python benchmarks/loadgen_throughput.py --skip-streams --peers vllm-bench
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

from loadgen_common import conditions, pin, run_client, start_nginx, vllm_bench

from tests import factories
from tokenwatt.client.openai import OpenAIClient
from tokenwatt.load.probe import LoadGenerator, available_cpus
from tokenwatt.load.workload import build_workload
from tokenwatt.schema.spec import SloSpec
from tokenwatt.sweep import ProbePlan

SLO = SloSpec(ttft_p99_ms=60_000, tpot_p99_ms=60_000)
RATES = [250, 500, 750, 1000, 1250, 1500, 1750, 2000, 2250, 2500, 3000, 3500, 4000, 5000, 6000]


def setup(base_url: str, tokens: int):
    spec = factories.spec(
        engine={"endpoint": f"{base_url}/v1", "model": "sim"},
        workload={"input_tokens": 64, "output_tokens": tokens},
    )
    return spec, build_workload(spec, context_tokens=1_000_000)


async def ladder(base_url: str, *, workers: int, tokens: int, warmup_s: float, window_s: float):
    spec, work = setup(base_url, tokens)
    rows = []
    misses = 0
    async with LoadGenerator(spec.engine, work, workers=workers, request_timeout_s=30) as gen:
        for index, rate in enumerate(RATES):
            r = await gen.probe(
                ProbePlan(phase="rates", rate_rps=rate, warmup_s=warmup_s, window_s=window_s),
                index=index,
                slo=SLO,
            )
            lags = sorted(r.requests.send_lag_ms)
            row = {
                "rate": rate,
                "achieved": r.achieved_rate_rps,
                "lag_p50": lags[len(lags) // 2],
                "lag_p99": r.send_lag_p99_ms,
                "events_s": r.output_tokens / window_s,
                "failed": r.failed,
                "client_bound": r.client_bound,
                "max_in_flight": r.max_in_flight,
                "cpu_util": (r.client_cpu_s or 0) / (warmup_s + window_s),
                "preemptions": r.client_preemptions,
            }
            rows.append(row)
            print(
                f"  W={workers} {rate:5d} req/s: achieved {row['achieved']:7.1f}, send lag p50"
                f" {row['lag_p50']:.3f} p99 {row['lag_p99']:.3f} ms,"
                f" {row['events_s']:8.0f} events/s,"
                f" failed {r.failed}, in flight <= {r.max_in_flight},"
                f" CPU {row['cpu_util']:.0%}, preempted {r.client_preemptions}x"
                f"{'  CLIENT-BOUND' if r.client_bound else ''}",
                flush=True,
            )
            misses = misses + 1 if r.client_bound else 0
            if misses >= 2:
                break
    return rows


async def closed_loop(base_url: str, *, concurrency: int, tokens: int, requests: int) -> float:
    spec, work = setup(base_url, tokens)
    async with OpenAIClient(spec.engine) as client:
        prepared = [client.prepare(work.request(i)) for i in range(requests)]
        queue = list(reversed(prepared))

        async def worker() -> None:
            while queue:
                result = await client.generate(queue.pop())
                assert result.ok, result.error

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return requests / (time.perf_counter() - start)


async def open_streams(base_url: str, *, streams: int, workers: int) -> dict[str, object]:
    # 16 tokens, one per second after a 1 s TTFT: each stream stays open ~16 s, so by Little's
    # law `streams` are open on average at streams / 16 req/s (Poisson: sometimes more).
    spec, work = setup(base_url, 16)
    headers = {"X-Sim-TTFT-Ms": "1000", "X-Sim-ITL-Ms": "1000"}
    rate = streams / 16.0
    async with LoadGenerator(
        spec.engine,
        work,
        workers=workers,
        headers=headers,
        request_timeout_s=120,
        max_concurrency=2 * streams,
    ) as gen:
        r = await gen.probe(
            ProbePlan(phase="rates", rate_rps=rate, warmup_s=17, window_s=5), index=99, slo=SLO
        )
    return {
        "rate": rate,
        "max_in_flight": r.max_in_flight,
        "mean_open_streams": r.running_batch_mean,
        "lag_p99": r.send_lag_p99_ms,
        "failed": r.failed,
        "client_bound": r.client_bound,
        "reasons": r.client_bound_reasons,
        "ttft_p50": r.ttft_ms.p50,
        "tpot_p50": r.tpot_ms.p50,
    }


async def spaced(
    base_url: str,
    *,
    rate: float,
    tokens: int,
    ttft_ms: float,
    itl_ms: float,
    workers: int,
    warmup_s: float,
    window_s: float,
) -> dict[str, object]:
    """Open loop with the server's delays: every event in its own read, as from an engine."""
    spec, work = setup(base_url, tokens)
    headers = {"X-Sim-TTFT-Ms": f"{ttft_ms:g}", "X-Sim-ITL-Ms": f"{itl_ms:g}"}
    async with LoadGenerator(
        spec.engine, work, workers=workers, headers=headers, request_timeout_s=120
    ) as gen:
        r = await gen.probe(
            ProbePlan(phase="rates", rate_rps=rate, warmup_s=warmup_s, window_s=window_s),
            index=0,
            slo=SLO,
        )
    lags = sorted(r.requests.send_lag_ms)
    return {
        "rate": rate,
        "achieved": r.achieved_rate_rps,
        "streams_mean": r.running_batch_mean,
        "max_in_flight": r.max_in_flight,
        "events_s": r.output_tokens / window_s,
        "lag_p50": lags[len(lags) // 2],
        "lag_p99": r.send_lag_p99_ms,
        "ttft_p50_err_ms": r.ttft_ms.p50 - ttft_ms,
        "ttft_p99_err_ms": r.ttft_ms.p99 - ttft_ms,
        "itl_p50_err_ms": r.itl_ms.p50 - itl_ms,
        "tpot_p50_err_ms": r.tpot_ms.p50 - itl_ms,
        "cpu_util": (r.client_cpu_s or 0) / (warmup_s + window_s),
        "preemptions": r.client_preemptions,
        "failed": r.failed,
        "client_bound": r.client_bound,
        "reasons": r.client_bound_reasons,
    }


def best(rows, *, lag_ms: float | None = None) -> dict | None:
    ok = [r for r in rows if not r["client_bound"] and r["failed"] == 0]
    if lag_ms is not None:
        ok = [r for r in ok if r["lag_p99"] <= lag_ms]
    return max(ok, key=lambda r: r["rate"]) if ok else None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", default=f"1,{max(2, available_cpus())}")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--window", type=float, default=4.0)
    parser.add_argument(
        "--peers", default="vllm-bench", help="comma list: vllm-bench,aiperf,guidellm or none"
    )
    parser.add_argument("--streams", type=int, default=8192)
    parser.add_argument(
        "--nginx-workers",
        type=int,
        default=1,
        help="nginx worker processes (each holds up to the hard open-file limit's connections)",
    )
    parser.add_argument("--skip-streams", action="store_true")
    parser.add_argument("--only-streams", action="store_true")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument(
        "--spaced",
        type=float,
        metavar="RATE",
        help="only: one open-loop probe at RATE req/s with the server's delays (--ttft-ms,"
        " --itl-ms), every event in its own read; the TTFT/ITL errors against them",
    )
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument(
        "--pin",
        action="store_true",
        help="nginx on CPU 0, this process and its load workers on CPU 1",
    )
    args = parser.parse_args()

    print(f"conditions at start: {conditions()}")
    nginx = start_nginx(workers=args.nginx_workers)
    out: dict[str, object] = {"conditions_start": conditions()}
    if args.pin:
        print(f"pinned: nginx {pin(nginx.pid, {0})} on CPU 0, the generator on CPU 1")
        os.sched_setaffinity(0, {1})
    try:
        base = nginx.base_url
        if args.spaced is not None:
            w = max(int(x) for x in args.workers.split(","))
            print(
                f"{args.spaced:g} req/s of {args.tokens}-token streams, TTFT {args.ttft_ms:g} ms,"
                f" ITL {args.itl_ms:g} ms, {w} worker(s):"
            )
            row = asyncio.run(
                spaced(
                    base,
                    rate=args.spaced,
                    tokens=args.tokens,
                    ttft_ms=args.ttft_ms,
                    itl_ms=args.itl_ms,
                    workers=w,
                    warmup_s=args.warmup,
                    window_s=args.window,
                )
            )
            print(f"  {json.dumps(row)}")
            print(f"conditions at end: {conditions()}")
            return
        ladders = {}
        peers: dict[str, float | None] = {}
        ours_closed = 0.0
        if args.only_streams:
            w = max(int(x) for x in args.workers.split(","))
            print(f"{args.streams} open streams, {w} workers (16 tokens at 1 s intervals):")
            print(
                f"  {json.dumps(asyncio.run(open_streams(base, streams=args.streams, workers=w)))}"
            )
            print(f"conditions at end: {conditions()}")
            return
        for w in [int(x) for x in args.workers.split(",")]:
            print(f"open-loop ladder, {w} worker process(es), {args.tokens}-token streams:")
            rows = asyncio.run(
                ladder(
                    base, workers=w, tokens=args.tokens, warmup_s=args.warmup, window_s=args.window
                )
            )
            ladders[w] = rows
        out["ladders"] = ladders
        print("closed loop, concurrency 64 (how the peers' ceilings were measured):")
        ours_closed = asyncio.run(
            closed_loop(base, concurrency=64, tokens=args.tokens, requests=6000)
        )
        print(f"  tokenwatt (1 process): {ours_closed:.0f} req/s")
        out["closed_loop_64_rps"] = ours_closed
        with tempfile.TemporaryDirectory(prefix="tw-bench-") as tmp:
            for peer in [p for p in args.peers.split(",") if p and p != "none"]:
                if peer == "vllm-bench":
                    res = vllm_bench(
                        base,
                        Path(tmp) / "vllm",
                        num_prompts=3000,
                        input_len=64,
                        output_len=args.tokens,
                        max_concurrency=64,
                    )
                    peers[peer] = float(res["request_throughput"])
                else:
                    peers[peer] = run_client(peer, base, Path(tmp) / peer, conc=64, n=1000)
                print(f"  {peer}: {peers[peer]} req/s")
        out["peers_closed_loop_64_rps"] = peers
        if not args.skip_streams:
            w = max(ladders)
            print(f"{args.streams} open streams, {w} workers (16 tokens at 1 s intervals):")
            streams = asyncio.run(open_streams(base, streams=args.streams, workers=w))
            print(f"  {json.dumps(streams)}")
            out["open_streams"] = streams
        out["conditions_end"] = conditions()
    finally:
        nginx.stop()

    print("\nsummary")
    best_peer = max((v for v in peers.values() if v), default=None)
    for w, rows in ladders.items():
        top, top1 = best(rows), best(rows, lag_ms=1.0)
        if top is None:
            print(f"  {w} worker(s): no rate stayed not client-bound")
            continue
        ratio = f", {top['rate'] / best_peer:.2f}x the best peer" if best_peer else ""
        print(
            f"  {w} worker(s): highest not client-bound {top['rate']} req/s"
            f" (achieved {top['achieved']:.0f},"
            f" p99 send lag {top['lag_p99']:.2f} ms, {top['events_s']:.0f} events/s){ratio};"
            f" with p99 lag <= 1 ms: {top1['rate'] if top1 else 'none'} req/s"
        )
    print(
        f"  closed loop at 64 streams: tokenwatt {ours_closed:.0f} req/s; "
        + ", ".join(
            f"{k} {v:.0f} req/s (ratio {ours_closed / v:.2f})" for k, v in peers.items() if v
        )
    )
    print(f"conditions at end: {out['conditions_end']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
