"""Does a tokenwatt probe measure what `vllm bench serve` measures? Side by side, one run.

Against real vLLM (CPU build, tiny model, prefix caching off), the same load from both clients,
alternating (A B A B ...) so drift hits both: Poisson arrivals at a fixed rate, 64 prompt tokens,
32 output tokens, ignore_eos. Prints p50 (and mean, p99) TTFT and TPOT of each round and the
ratio tokenwatt / vllm bench. Done-when of the load-generator issue: p50 TTFT and TPOT within
10 %.

    .venv/bin/python benchmarks/loadgen_vs_vllm_bench.py                  # ~4 min
    .venv/bin/python benchmarks/loadgen_vs_vllm_bench.py --rate 8 --rounds 3 --requests 240
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
from pathlib import Path

from loadgen_common import conditions, start_vllm, vllm_bench

from tests import factories
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import build_workload


async def ours(base_url: str, *, rate: float, window_s: float, warmup_s: float, index: int):
    spec = factories.spec(
        engine={"endpoint": f"{base_url}/v1", "model": "tiny"},
        workload={"input_tokens": 64, "output_tokens": 32, "seed": 1},
        slo={"ttft_p99_ms": 60_000, "tpot_p99_ms": 60_000},
    )
    work = build_workload(spec, context_tokens=4096)
    # One worker, fixed: on this 2-core box more processes only add contention.
    async with LoadGenerator(
        spec.engine, work, metrics_url=f"{base_url}/metrics", request_timeout_s=120, workers=1
    ) as gen:
        return await gen.probe(
            index=index,
            phase="rates",
            rate_rps=rate,
            warmup_s=warmup_s,
            window_s=window_s,
            slo=spec.slo,
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=4.0, help="arrival rate, req/s")
    parser.add_argument("--requests", type=int, default=120, help="requests per vllm bench run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=3.0, help="tokenwatt warm-up, s")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    window_s = args.requests / args.rate

    print(f"conditions at start: {conditions()}")
    server = start_vllm()
    rows = []
    try:
        base = server.base_url
        # one throw-away run of each so neither pays the first-request costs
        asyncio.run(ours(base, rate=args.rate, window_s=3, warmup_s=0, index=1000))
        with tempfile.TemporaryDirectory(prefix="tw-vs-vllm-") as tmp:
            for rnd in range(args.rounds):
                theirs = vllm_bench(
                    base,
                    Path(tmp),
                    num_prompts=args.requests,
                    input_len=64,
                    output_len=32,
                    request_rate=args.rate,
                    backend="vllm",
                    model="tiny",
                    seed=rnd,
                )
                record = asyncio.run(
                    ours(base, rate=args.rate, window_s=window_s, warmup_s=args.warmup, index=rnd)
                )
                row = {
                    "round": rnd,
                    "vllm_bench": {
                        "completed": theirs["completed"],
                        "failed": theirs.get("failed", 0),
                        "ttft_p50_ms": theirs["median_ttft_ms"],
                        "ttft_mean_ms": theirs["mean_ttft_ms"],
                        "ttft_p99_ms": theirs["p99_ttft_ms"],
                        "tpot_p50_ms": theirs["median_tpot_ms"],
                        "tpot_mean_ms": theirs["mean_tpot_ms"],
                        "tpot_p99_ms": theirs["p99_tpot_ms"],
                        "request_throughput": theirs["request_throughput"],
                    },
                    "tokenwatt": {
                        "completed": record.ok,
                        "failed": record.failed,
                        "ttft_p50_ms": record.ttft_ms.p50,
                        "ttft_mean_ms": record.ttft_ms.mean,
                        "ttft_p99_ms": record.ttft_ms.p99,
                        "tpot_p50_ms": record.tpot_ms.p50,
                        "tpot_mean_ms": record.tpot_ms.mean,
                        "tpot_p99_ms": record.tpot_ms.p99,
                        "send_lag_p99_ms": record.send_lag_p99_ms,
                        "client_bound": record.client_bound,
                        "running_batch_mean": record.running_batch_mean,
                        "batch_source": record.batch_source,
                    },
                }
                rows.append(row)
                v, t = row["vllm_bench"], row["tokenwatt"]
                print(
                    f"round {rnd}: p50 TTFT vllm bench {v['ttft_p50_ms']:.1f} ms, tokenwatt"
                    f" {t['ttft_p50_ms']:.1f} ms ({t['ttft_p50_ms'] / v['ttft_p50_ms']:.3f});"
                    f" p50 TPOT {v['tpot_p50_ms']:.2f} vs {t['tpot_p50_ms']:.2f} ms"
                    f" ({t['tpot_p50_ms'] / v['tpot_p50_ms']:.3f}); completed"
                    f" {v['completed']} / {t['completed']}, failed {v['failed']} / {t['failed']};"
                    f" tokenwatt send lag p99 {t['send_lag_p99_ms']:.2f} ms, batch"
                    f" {t['running_batch_mean']:.2f} ({t['batch_source']})",
                    flush=True,
                )
    finally:
        server.stop()
    end = conditions()

    def pooled(client: str, key: str) -> float:
        return statistics.median(r[client][key] for r in rows)

    print("\nmedian over rounds       vllm bench   tokenwatt   ratio")
    verdict = True
    for key in ("ttft_p50_ms", "tpot_p50_ms", "ttft_mean_ms", "tpot_mean_ms", "ttft_p99_ms"):
        v, t = pooled("vllm_bench", key), pooled("tokenwatt", key)
        ratio = t / v
        if key in ("ttft_p50_ms", "tpot_p50_ms"):
            verdict = verdict and abs(ratio - 1) <= 0.10
        print(f"  {key:20s} {v:11.2f} {t:11.2f} {ratio:7.3f}")
    print(f"p50 TTFT and TPOT within 10 %: {'yes' if verdict else 'NO'}")
    print(f"conditions at end: {end}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "conditions_end": end}, indent=1))


if __name__ == "__main__":
    main()
