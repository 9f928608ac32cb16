"""Does a tokenwatt probe measure what `vllm bench serve` measures? Side by side, same time.

Against real vLLM (CPU build, tiny model, prefix caching off), both clients send the same kind
of load *at the same time*, each at half the total rate: Poisson arrivals, 64 prompt tokens, 32
output tokens, ignore_eos, both pinned off the CPU vLLM's worker busy-polls. On this shared
2-core box the server alternates between a normal mode (TTFT ~15 ms, TPOT ~4 ms) and a starved
mode (all 32 tokens in one burst ~110 ms after the request) as other jobs come and go; running
the clients one after the other compares the box's moods, not the clients. Running them
together, both sample the same server at the same moments.

Each round: `vllm bench serve` starts (15-20 s of start-up), and when it prints "Starting main
benchmark run" the tokenwatt probe starts (1 s warm-up, then a window as long as the bench's
run). Compared: p50 TTFT and TPOT over all requests of all rounds (vllm bench's per-request
values from --save-detailed, TPOT = (latency - TTFT) / (output tokens - 1) as it computes it;
tokenwatt's window requests). Done-when of the load-generator issue: both within 10 %.

    .venv/bin/python benchmarks/loadgen_vs_vllm_bench.py                      # ~4 min
    .venv/bin/python benchmarks/loadgen_vs_vllm_bench.py --rate 8 --rounds 3 --requests 120
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from loadgen_common import conditions, start_nginx, start_vllm, vllm_bench_command

from tests import factories
from tokenwatt.client.openai import GenerationRequest, OpenAIClient
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import _WORDS, Workload, build_workload
from tokenwatt.schema.run import ProbeRecord

MARKER = "Starting main benchmark run"
MODEL = ["tiny"]  # "sim" when the server is nginx-sse (--nginx-ttft-ms)


class TextWorkload(Workload):
    """The same lengths, but text prompts (as vllm bench sends), so the server tokenizes them.

    ``words_per_token`` is calibrated against the server's own prompt token count.
    """

    words_per_token = 1.0

    def request(self, index: int, *, stream: int = 0) -> GenerationRequest:
        ids = super().request(index, stream=stream)
        pick = random.Random(f"{self.seed}-{stream}-{index}")
        words = round(ids.input_tokens * self.words_per_token)
        text = " ".join(pick.choice(_WORDS) for _ in range(max(words, 1)))
        return GenerationRequest(
            index=index, max_tokens=ids.max_tokens, input_tokens=ids.input_tokens, prompt_text=text
        )


async def calibrate(base_url: str, input_len: int) -> float:
    """Words per server token for TextWorkload's word list (one request, the server's usage)."""
    spec = factories.spec(engine={"endpoint": f"{base_url}/v1", "model": MODEL[0]})
    text = " ".join(random.Random(0).choice(_WORDS) for _ in range(input_len))
    request = GenerationRequest(index=0, max_tokens=2, input_tokens=input_len, prompt_text=text)
    async with OpenAIClient(spec.engine) as client:
        result = await client.generate(request)
    if not result.ok or result.output_tokens_approx:
        raise RuntimeError(f"calibration request failed: {result.error}")
    return input_len / result.input_tokens


async def ours(
    base_url: str,
    *,
    rate: float,
    window_s: float,
    warmup_s: float,
    index: int,
    input_len: int,
    words_per_token: float | None,
) -> ProbeRecord:
    spec = factories.spec(
        engine={"endpoint": f"{base_url}/v1", "model": MODEL[0]},
        workload={"input_tokens": input_len, "output_tokens": 32, "seed": 1},
        slo={"ttft_p99_ms": 60_000, "tpot_p99_ms": 60_000},
    )
    work = build_workload(spec, context_tokens=4096)
    if words_per_token is not None:
        work.__class__ = TextWorkload
        work.words_per_token = words_per_token  # type: ignore[attr-defined]
    # One worker, fixed: on this 2-core box more processes only add contention. No /metrics
    # scraping: vllm bench does not scrape, and each scrape costs vLLM's API server ~6 ms.
    async with LoadGenerator(spec.engine, work, request_timeout_s=120, workers=1) as gen:
        return await gen.probe(
            index=index,
            phase="rates",
            rate_rps=rate,
            warmup_s=warmup_s,
            window_s=window_s,
            slo=spec.slo,
        )


def pin_clients_off_vllm_worker() -> set[int]:
    """Keep both clients off the CPU that vLLM's CPU worker pins itself to and busy-polls.

    Inherited by the worker processes and by the ``vllm bench`` subprocess, so both clients run
    under the same conditions.
    """
    cpus = set(os.sched_getaffinity(0))
    out = subprocess.run(
        ["pgrep", "-f", "VLLM::Worker"], capture_output=True, text=True, check=False
    ).stdout
    busy: set[int] = set()
    for pid in out.split():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            busy |= set(os.sched_getaffinity(int(pid)))
    others = cpus - busy
    if others and busy and busy != cpus:
        os.sched_setaffinity(0, others)
    return set(os.sched_getaffinity(0))


def one_round(
    base: str,
    tmp: Path,
    *,
    rate: float,
    requests: int,
    rnd: int,
    input_len: int,
    words_per_token: float | None,
) -> dict:
    half = rate / 2
    name = f"round-{rnd}.json"
    cmd = vllm_bench_command(
        base,
        tmp,
        name,
        num_prompts=requests,
        input_len=input_len,
        output_len=32,
        request_rate=half,
        backend="vllm" if MODEL[0] == "tiny" else "openai",
        model=MODEL[0],
        seed=rnd,
    )
    started = threading.Event()
    lines: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if MARKER in line:
                    started.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        if not started.wait(300):
            proc.kill()
            raise RuntimeError("vllm bench did not start:\n" + "".join(lines[-30:]))
        record = asyncio.run(
            ours(
                base,
                rate=half,
                window_s=requests / half - 1.0,
                warmup_s=1.0,
                index=rnd,
                input_len=input_len,
                words_per_token=words_per_token,
            )
        )
        proc.wait(600)
        reader.join(10)
    if proc.returncode != 0:
        raise RuntimeError("vllm bench failed:\n" + "".join(lines[-30:]))
    theirs = json.loads((tmp / name).read_text())
    return {
        "round": rnd,
        "vllm_bench": {
            "completed": theirs["completed"],
            "failed": theirs.get("failed", 0),
            "ttft_p50_ms": theirs["median_ttft_ms"],
            "tpot_p50_ms": theirs["median_tpot_ms"],
            "ttft_p99_ms": theirs["p99_ttft_ms"],
        },
        "tokenwatt": {
            "completed": record.ok,
            "failed": record.failed,
            "ttft_p50_ms": record.ttft_ms.p50,
            "tpot_p50_ms": record.tpot_ms.p50,
            "ttft_p99_ms": record.ttft_ms.p99,
            "send_lag_p99_ms": record.send_lag_p99_ms,
            "client_bound": record.client_bound,
            "running_batch_mean": record.running_batch_mean,
        },
        "per_request": {
            "vllm_bench_ttft_ms": [t * 1000 for t in theirs["ttfts"]],
            "vllm_bench_tpot_ms": [
                (lat - ttft) * 1000 / (n - 1)
                for lat, ttft, n in zip(
                    theirs["latencies"], theirs["ttfts"], theirs["output_lens"], strict=True
                )
                if n > 1
            ],
            "tokenwatt_ttft_ms": [v for v in record.requests.ttft_ms if v is not None],
            "tokenwatt_tpot_ms": [v for v in record.requests.tpot_ms if v is not None],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=6.0, help="total arrival rate, req/s")
    parser.add_argument("--requests", type=int, default=90, help="vllm bench requests per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--input-len", type=int, default=64, help="prompt tokens")
    parser.add_argument(
        "--nginx-ttft-ms",
        type=float,
        help="use nginx-sse with this fixed TTFT (and --nginx-itl-ms) instead of vLLM",
    )
    parser.add_argument("--nginx-itl-ms", type=float, default=5.0)
    parser.add_argument(
        "--text-prompts",
        action="store_true",
        help="tokenwatt sends text prompts too (as vllm bench does) instead of token ids",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    start = conditions()
    print(f"conditions at start: {start}")
    if args.nginx_ttft_ms is not None:
        # Ground truth: nginx-sse waits exactly this long before the first token, then
        # --nginx-itl-ms between tokens; both clients' error is then visible directly.
        MODEL[0] = "sim"
        server = start_nginx(ttft_ms=args.nginx_ttft_ms, itl_ms=args.nginx_itl_ms)
        print(f"server: nginx-sse, TTFT {args.nginx_ttft_ms:g} ms, ITL {args.nginx_itl_ms:g} ms")
    else:
        server = start_vllm()
        print(f"clients pinned to CPUs {pin_clients_off_vllm_worker()} (tokenwatt and vllm bench)")
    rows = []
    try:
        words_per_token = None
        if args.text_prompts:
            words_per_token = asyncio.run(calibrate(server.base_url, args.input_len))
            print(f"text prompts: {words_per_token:.3f} words per token")
        with tempfile.TemporaryDirectory(prefix="tw-vs-vllm-") as tmp:
            for rnd in range(args.rounds):
                row = one_round(
                    server.base_url,
                    Path(tmp),
                    rate=args.rate,
                    requests=args.requests,
                    rnd=rnd,
                    input_len=args.input_len,
                    words_per_token=words_per_token,
                )
                rows.append(row)
                v, t = row["vllm_bench"], row["tokenwatt"]
                print(
                    f"round {rnd}: p50 TTFT vllm bench {v['ttft_p50_ms']:.1f} ms, tokenwatt"
                    f" {t['ttft_p50_ms']:.1f} ms; p50 TPOT {v['tpot_p50_ms']:.2f} vs"
                    f" {t['tpot_p50_ms']:.2f} ms; completed {v['completed']} / {t['completed']},"
                    f" failed {v['failed']} / {t['failed']}; tokenwatt send lag p99"
                    f" {t['send_lag_p99_ms']:.2f} ms"
                    f"{' (client-bound)' if t['client_bound'] else ''}",
                    flush=True,
                )
                time.sleep(2)
    finally:
        server.stop()
    end = conditions()

    def pooled(key: str, subset: list[dict]) -> float:
        return statistics.median(v for r in subset for v in r["per_request"][key])

    print(
        f"\n{args.rounds} rounds at {args.rate:g} req/s in total, half from each client,"
        f" {args.input_len} prompt / 32 output tokens,"
        f" tokenwatt sending {'text' if args.text_prompts else 'token-id'} prompts"
    )
    valid = [r for r in rows if not r["tokenwatt"]["client_bound"]]
    verdict = None
    for title, subset in (("all rounds", rows), ("rounds tokenwatt calls valid", valid)):
        verdict = None
        if not subset:
            print(f"  {title}: none")
            continue
        print(f"  {title} ({len(subset)}):            vllm bench   tokenwatt   ratio")
        ok = True
        for label in ("ttft", "tpot"):
            v = pooled(f"vllm_bench_{label}_ms", subset)
            t = pooled(f"tokenwatt_{label}_ms", subset)
            ok = ok and abs(t / v - 1) <= 0.10
            print(f"    p50 {label.upper()} over their requests {v:9.2f} {t:11.2f} {t / v:7.3f}")
        verdict = ok
    print(
        "p50 TTFT and TPOT within 10 % over the rounds tokenwatt did not flag as client-bound:"
        f" {'yes' if verdict else 'NO' if verdict is not None else 'no such round'}"
    )
    print(f"conditions at end: {end}")
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "conditions_start": start, "conditions_end": end}, indent=1)
        )


if __name__ == "__main__":
    main()
