"""Does a tokenwatt probe measure what `vllm bench serve` measures? Side by side, same time.

Against real vLLM (CPU build, tiny model, prefix caching off), both clients send the same kind
of load *at the same time*, each at half the total rate: Poisson arrivals, N prompt tokens, 32
output tokens, ignore_eos. On this shared 2-core box the server's speed moves as other jobs come
and go; running the clients one after the other compares the box's moods, not the clients.
Running them together, both sample the same server at the same moments.

Where the clients run: by default both are kept off the CPU that vLLM's worker pins itself to,
which leaves them sharing the other CPU with vLLM's API server and EngineCore (whose bursts then
delay the clients' own clocks: tokenwatt flags that as client-bound). ``--confine-server`` puts
every thread of vLLM on the worker's CPU instead, so the clients have a CPU to themselves.

What is sent: tokenwatt sends token-id prompts by default (no tokenization on the server, about
2 ms less TTFT at 64 tokens than the same length as text); ``--text-prompts`` makes it send text
made by vllm bench's own random dataset (another seed), so the server does the same work for both.

Each round: `vllm bench serve` starts (15-20 s of start-up), and when it prints "Starting main
benchmark run" the tokenwatt probe starts (1 s warm-up, then a window as long as the bench's
run). Compared per round: p50 TTFT and TPOT (vllm bench's median_ttft_ms / median_tpot_ms;
tokenwatt's window requests), and the TTFT tail, p90 and p99 (nearest rank over each client's
requests, the same method for both: a p50-only comparison once hid a 25 ms simulator artifact
that only the keep-alive tail showed). Verdict: the median over the rounds tokenwatt did not
flag as client-bound of the per-round ratios, each within 10 % (the load-generator issue's
done-when, for p50; the keep-alive issue's, for p90/p99). Pooled figures are printed too.

``--sim`` runs the same comparison against ``tokenwatt sim`` (H100 SXM, Qwen3-8B) instead of
vLLM: the simulator has to look the same to both clients as vLLM does.

    .venv/bin/python benchmarks/loadgen_vs_vllm_bench.py                      # ~4 min
    .venv/bin/python benchmarks/loadgen_vs_vllm_bench.py --rate 4 --requests 120 --rounds 5 \
        --input-len 512 --text-prompts --confine-server                        # ~8 min
    .venv/bin/python benchmarks/loadgen_vs_vllm_bench.py --sim --rate 16 --requests 400 \
        --output-len 128 --rounds 3                                            # ~4 min
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from loadgen_common import (
    REPO,
    TOKENIZER,
    VLLM_PYTHON,
    conditions,
    start_nginx,
    start_vllm,
    vllm_bench_command,
)

from tests import factories
from tests.peers import Peer
from tokenwatt.client.openai import GenerationRequest
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import Workload, build_workload
from tokenwatt.metrics import latency_stats
from tokenwatt.schema.run import ProbeRecord
from tokenwatt.sim.launch import SimProcess, SimSettings, launch
from tokenwatt.sweep import ProbePlan

MARKER = "Starting main benchmark run"
MODEL = ["tiny"]  # "sim" when the server is nginx-sse (--nginx-ttft-ms) or the simulator (--sim)
SIM_MODEL = REPO / "specs" / "models" / "Qwen__Qwen3-8B" / "config.json"


class TextWorkload(Workload):
    """The same lengths, but text prompts made by vllm bench's own random dataset.

    So the server tokenizes the same kind of text for both clients: tokenizing vllm bench's
    prompts (decoded random token ids) costs the server more than plain words do.
    """

    prompts: list[str] = []

    def request(self, index: int, *, stream: int = 0) -> GenerationRequest:
        ids = super().request(index, stream=stream)
        text = self.prompts[(stream * 7919 + index) % len(self.prompts)]
        return GenerationRequest(
            index=index, max_tokens=ids.max_tokens, input_tokens=ids.input_tokens, prompt_text=text
        )


BENCH_PROMPTS = """
import json, sys
from transformers import AutoTokenizer
from vllm.benchmarks.datasets import RandomDataset
tok = AutoTokenizer.from_pretrained(sys.argv[1])
reqs = RandomDataset(random_seed=int(sys.argv[4])).sample(
    tokenizer=tok, num_requests=int(sys.argv[3]), input_len=int(sys.argv[2]), output_len=32
)
json.dump([r.prompt for r in reqs], sys.stdout)
"""


def bench_prompts(input_len: int, count: int, seed: int) -> list[str]:
    """``count`` prompts from vllm bench's random dataset (its venv, its tokenizer)."""
    out = subprocess.run(
        [VLLM_PYTHON, "-c", BENCH_PROMPTS, TOKENIZER, str(input_len), str(count), str(seed)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
    ).stdout
    return list(json.loads(out))


async def ours(
    base_url: str,
    *,
    rate: float,
    window_s: float,
    warmup_s: float,
    index: int,
    input_len: int,
    prompts: list[str] | None,
    output_len: int = 32,
) -> ProbeRecord:
    spec = factories.spec(
        engine={"endpoint": f"{base_url}/v1", "model": MODEL[0]},
        workload={"input_tokens": input_len, "output_tokens": output_len, "seed": 1},
        slo={"ttft_p99_ms": 60_000, "tpot_p99_ms": 60_000},
    )
    work = build_workload(spec, context_tokens=4096 if MODEL[0] == "tiny" else 40960)
    if prompts is not None:
        work.__class__ = TextWorkload
        work.prompts = prompts  # type: ignore[attr-defined]
    # One worker, fixed: on this 2-core box more processes only add contention. No /metrics
    # scraping: vllm bench does not scrape, and each scrape costs vLLM's API server ~6 ms.
    async with LoadGenerator(spec.engine, work, request_timeout_s=120, workers=1) as gen:
        return await gen.probe(
            ProbePlan(phase="rates", rate_rps=rate, warmup_s=warmup_s, window_s=window_s),
            index=index,
            slo=spec.slo,
        )


def worker_cpus(pgid: int) -> set[int]:
    """The CPUs vLLM's CPU worker (in process group ``pgid``) pins itself to; empty if none."""
    out = subprocess.run(
        ["pgrep", "-g", str(pgid), "-f", "VLLM::Worker"], capture_output=True, text=True
    ).stdout
    cpus: set[int] = set()
    for pid in out.split():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            cpus |= set(os.sched_getaffinity(int(pid)))
    return cpus


def pin_clients_off_vllm_worker(pgid: int) -> set[int]:
    """Keep both clients off the CPU that vLLM's CPU worker pins itself to.

    Inherited by the worker processes and by the ``vllm bench`` subprocess, so both clients run
    under the same conditions.
    """
    cpus = set(os.sched_getaffinity(0))
    busy = worker_cpus(pgid)
    others = cpus - busy
    if others and busy and busy != cpus:
        os.sched_setaffinity(0, others)
    return set(os.sched_getaffinity(0))


def confine_server(pgid: int) -> tuple[set[int], set[int]]:
    """Put every thread of vLLM's process group on the CPU its worker pins itself to.

    The API server and EngineCore then share that CPU with the worker, and both clients get the
    other CPU(s) to themselves: neither client is preempted by the server's processes, so
    their clocks measure the server and their own per-request cost, nothing else. The server
    is slower for it (it has one CPU instead of two) but both clients see the same server.
    Returns (server CPUs, client CPUs).
    """
    cpus = set(os.sched_getaffinity(0))
    server = worker_cpus(pgid)
    if not server:
        raise RuntimeError(f"no VLLM::Worker in process group {pgid}")
    clients = cpus - server
    if not clients:
        raise RuntimeError(f"vLLM's worker is on every CPU ({sorted(server)}): nothing to confine")
    pids = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True).stdout
    for pid in pids.split():
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(ProcessLookupError, FileNotFoundError):
                os.sched_setaffinity(int(task.name), server)
    os.sched_setaffinity(0, clients)
    return server, clients


def confine_sim(pid: int) -> tuple[set[int], set[int]]:
    """The simulator (one thread) on the first CPU, both clients on the others."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise RuntimeError("one CPU: nothing to confine")
    os.sched_setaffinity(pid, {cpus[0]})
    os.sched_setaffinity(0, set(cpus[1:]))
    return {cpus[0]}, set(cpus[1:])


def one_round(
    base: str,
    tmp: Path,
    *,
    rate: float,
    requests: int,
    rnd: int,
    input_len: int,
    prompts: list[str] | None,
    output_len: int = 32,
) -> dict:
    half = rate / 2
    name = f"round-{rnd}.json"
    cmd = vllm_bench_command(
        base,
        tmp,
        name,
        num_prompts=requests,
        input_len=input_len,
        output_len=output_len,
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
                prompts=prompts,
                output_len=output_len,
            )
        )
        proc.wait(600)
        reader.join(10)
    if proc.returncode != 0:
        raise RuntimeError("vllm bench failed:\n" + "".join(lines[-30:]))
    theirs = json.loads((tmp / name).read_text())
    their_ttft = [t * 1000 for t in theirs["ttfts"]]
    our_ttft = [v for v in record.requests.ttft_ms if v is not None]
    # The tail by one method for both clients (nearest rank; vllm bench interpolates).
    their_tail, our_tail = latency_stats(their_ttft), latency_stats(record.requests.ttft_ms)
    return {
        "round": rnd,
        "vllm_bench": {
            "completed": theirs["completed"],
            "failed": theirs.get("failed", 0),
            "ttft_p50_ms": theirs["median_ttft_ms"],
            "tpot_p50_ms": theirs["median_tpot_ms"],
            "ttft_p90_ms": their_tail.p90,
            "ttft_p99_ms": their_tail.p99,
        },
        "tokenwatt": {
            "completed": record.ok,
            "failed": record.failed,
            "ttft_p50_ms": record.ttft_ms.p50,
            "tpot_p50_ms": record.tpot_ms.p50,
            "ttft_p90_ms": our_tail.p90,
            "ttft_p99_ms": our_tail.p99,
            "send_lag_p99_ms": record.send_lag_p99_ms,
            "client_bound": record.client_bound,
            "running_batch_mean": record.running_batch_mean,
        },
        "per_request": {
            "vllm_bench_ttft_ms": their_ttft,
            "vllm_bench_tpot_ms": [
                (lat - ttft) * 1000 / (n - 1)
                for lat, ttft, n in zip(
                    theirs["latencies"], theirs["ttfts"], theirs["output_lens"], strict=True
                )
                if n > 1
            ],
            "tokenwatt_ttft_ms": our_ttft,
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
    parser.add_argument("--output-len", type=int, default=32, help="output tokens")
    parser.add_argument(
        "--sim",
        action="store_true",
        help="use tokenwatt sim (H100 SXM, Qwen3-8B, in its own process) instead of vLLM",
    )
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
    parser.add_argument(
        "--confine-server",
        action="store_true",
        help="put all of vLLM on its worker's CPU (with --sim: the simulator on the first CPU)"
        " so that the clients have the other CPU(s) to themselves (else the clients share a CPU"
        " with vLLM's API server)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    start = conditions()
    print(f"conditions at start: {start}")
    server: Peer | SimProcess
    if args.sim:
        MODEL[0] = "sim"
        settings = SimSettings(gpu="h100-sxm", model_config=SIM_MODEL, served_model_name="sim")
        server = launch(settings)
        print("server: tokenwatt sim, H100 SXM, Qwen3-8B (bf16), in its own process")
        if args.confine_server:
            assert server.pid is not None
            on, off = confine_sim(server.pid)
            print(f"simulator on CPUs {sorted(on)}; clients on CPUs {sorted(off)}")
    elif args.nginx_ttft_ms is not None:
        # Ground truth: nginx-sse waits exactly this long before the first token, then
        # --nginx-itl-ms between tokens; both clients' error is then visible directly.
        MODEL[0] = "sim"
        server = start_nginx(ttft_ms=args.nginx_ttft_ms, itl_ms=args.nginx_itl_ms)
        print(f"server: nginx-sse, TTFT {args.nginx_ttft_ms:g} ms, ITL {args.nginx_itl_ms:g} ms")
    else:
        server = start_vllm()
        if args.confine_server:
            on, off = confine_server(server.pid)
            print(
                f"vLLM (API server, EngineCore, worker) confined to CPUs {sorted(on)};"
                f" clients (tokenwatt and vllm bench) on CPUs {sorted(off)}"
            )
        else:
            print(
                f"clients pinned to CPUs {sorted(pin_clients_off_vllm_worker(server.pid))}"
                " (tokenwatt and vllm bench), with vLLM's API server and EngineCore"
            )
    root_url = server.url if isinstance(server, SimProcess) else server.base_url
    rows = []
    try:
        prompts = None
        if args.text_prompts:
            # A seed vllm bench's rounds (seeds 0, 1, ...) do not use: other prompts, same kind.
            prompts = bench_prompts(args.input_len, 400, seed=10_000)
            print(f"text prompts: {len(prompts)} from vllm bench's random dataset (seed 10000)")
        with tempfile.TemporaryDirectory(prefix="tw-vs-vllm-") as tmp:
            for rnd in range(args.rounds):
                row = one_round(
                    root_url,
                    Path(tmp),
                    rate=args.rate,
                    requests=args.requests,
                    rnd=rnd,
                    input_len=args.input_len,
                    prompts=prompts,
                    output_len=args.output_len,
                )
                rows.append(row)
                v, t = row["vllm_bench"], row["tokenwatt"]
                print(
                    f"round {rnd}: TTFT p50 / p90 / p99 vllm bench {v['ttft_p50_ms']:.1f} /"
                    f" {v['ttft_p90_ms']:.1f} / {v['ttft_p99_ms']:.1f} ms, tokenwatt"
                    f" {t['ttft_p50_ms']:.1f} / {t['ttft_p90_ms']:.1f} / {t['ttft_p99_ms']:.1f}"
                    f" ms; p50 TPOT {v['tpot_p50_ms']:.2f} vs {t['tpot_p50_ms']:.2f} ms;"
                    f" completed {v['completed']} / {t['completed']},"
                    f" failed {v['failed']} / {t['failed']}; tokenwatt send lag p99"
                    f" {t['send_lag_p99_ms']:.2f} ms"
                    f"{' (client-bound)' if t['client_bound'] else ''}",
                    flush=True,
                )
                time.sleep(2)
    finally:
        server.stop()
    end = conditions()
    summarize(rows, args)
    print(f"conditions at end: {end}")
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "conditions_start": start, "conditions_end": end}, indent=1)
        )


RATIOS = ("p50 TTFT", "p50 TPOT", "p90 TTFT", "p99 TTFT")


def ratios(row: dict[str, Any]) -> tuple[float, ...]:
    """tokenwatt / vllm bench, in the order of RATIOS."""
    v, t = row["vllm_bench"], row["tokenwatt"]
    keys = ("ttft_p50_ms", "tpot_p50_ms", "ttft_p90_ms", "ttft_p99_ms")
    return tuple(float(t[k] / v[k]) for k in keys)


def summarize(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    def pooled(key: str, subset: list[dict[str, Any]]) -> float:
        return float(statistics.median(v for r in subset for v in r["per_request"][key]))

    print(
        f"\n{args.rounds} rounds at {args.rate:g} req/s in total, half from each client,"
        f" {args.input_len} prompt / {args.output_len} output tokens,"
        f" tokenwatt sending {'text' if args.text_prompts else 'token-id'} prompts"
    )
    print("  round " + "".join(f"{name + ' ratio':>16}" for name in RATIOS))
    for row in rows:
        flag = "  client-bound" if row["tokenwatt"]["client_bound"] else ""
        print(f"  {row['round']:5d} " + "".join(f"{x:16.3f}" for x in ratios(row)) + flag)
    print("  (tokenwatt / vllm bench, same moments)")
    print("  pooled over every request of every round (mixes the server's states across rounds):")
    for label in ("ttft", "tpot"):
        v = pooled(f"vllm_bench_{label}_ms", rows)
        t = pooled(f"tokenwatt_{label}_ms", rows)
        print(f"    p50 {label.upper()} {v:9.2f} vs {t:9.2f} ms, ratio {t / v:.3f}")
    # The done-when compares a probe with vllm bench's figures for the same load: each round is
    # one such pair, both clients sampling the same server moments. A round tokenwatt flags as
    # client-bound is no valid probe of tokenwatt's, so it cannot count for (or against) it.
    # The two clients' requests also queue behind each other (a prefill in progress delays the
    # other client's first token), which moves one round's ratio either way by chance; the
    # verdict is the median of the per-round ratios, and every round is printed.
    valid = [r for r in rows if not r["tokenwatt"]["client_bound"]]
    verdict = None
    if valid:
        agree = [r for r in valid if all(abs(x - 1) <= 0.10 for x in ratios(r))]
        med = [statistics.median(ratios(r)[i] for r in valid) for i in range(len(RATIOS))]
        verdict = all(abs(m - 1) <= 0.10 for m in med)
        print(
            f"rounds not client-bound: {len(valid)} of {len(rows)}; all four within 10 % in"
            f" {len(agree)} of them; median ratios: "
            + ", ".join(f"{name} {m:.3f}" for name, m in zip(RATIOS, med, strict=True))
        )
    print(
        "median over valid rounds of the p50 TTFT, p50 TPOT, p90 and p99 TTFT ratios within 10 %:"
        f" {'yes' if verdict else 'NO' if verdict is not None else 'no valid round'}"
    )


if __name__ == "__main__":
    main()
