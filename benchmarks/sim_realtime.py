"""How much load the simulator serves in real time on one core before it lags.

Starts ``tokenwatt sim`` (the seed's H100 SXM + Qwen3-30B-A3B FP8) in its own process pinned to
CPU 0, drives it from this process pinned to CPU 1 with Poisson arrivals of 1,024-token prompts
and 256 streamed output tokens each, and reads back the simulator's own scheduling lag (how late
its engine loop wakes after each step's end) and stream lag (token produced → written) from
/metrics, plus its CPU use.

    .venv/bin/python benchmarks/sim_realtime.py --rates 10,20,30,40 --duration 20
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _sseload import run_open_loop

from tokenwatt import promtext
from tokenwatt.schema.spec import SimSpec
from tokenwatt.sim.launch import SimSettings, launch

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "specs" / "models" / "Qwen__Qwen3-30B-A3B-FP8" / "config.json"


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _hist(samples: list, name: str) -> tuple[list[tuple[float, float]], float, float]:
    buckets = [(float(s.labels["le"]), s.value) for s in samples if s.name == f"{name}_bucket"]
    count = next(s.value for s in samples if s.name == f"{name}_count")
    total = next(s.value for s in samples if s.name == f"{name}_sum")
    return buckets, count, total


def _delta_quantile(before: list, after: list, name: str, q: float) -> float:
    b0, c0, _ = _hist(before, name)
    b1, c1, _ = _hist(after, name)
    n = c1 - c0
    if n <= 0:
        return 0.0
    for (le, v1), (_, v0) in zip(b1, b0, strict=True):
        if v1 - v0 >= q * n:
            return le
    return float("inf")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="10,20,30,40")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--output", type=int, default=256)
    ap.add_argument("--no-pin", action="store_true", help="let the kernel place both processes")
    ap.add_argument("--gpu", default="h100-sxm", help="simulated GPU (b200: more headroom)")
    ap.add_argument("--config", type=Path, default=CONFIG, help="model config.json")
    args = ap.parse_args()
    settings = SimSettings(sim=SimSpec(gpu=args.gpu), config_file=args.config, kv_dtype="bf16")
    with launch(settings) as sim:
        assert sim.pid is not None
        assert sim.port is not None
        if not args.no_pin:
            os.sched_setaffinity(sim.pid, {0})
            os.sched_setaffinity(0, {1})
        print(
            f"{'rate':>6} {'tok/s':>7} {'sim CPU':>8} {'us/token':>8} {'lag p99':>8}"
            f" {'lag max':>8} {'stream p99':>10} {'failed':>6} {'mean batch':>10}"
        )
        for rate in [float(r) for r in args.rates.split(",")]:
            before = promtext.parse(httpx.get(sim.metrics_url).text)
            cpu0 = _cpu_s(sim.pid)
            t0 = time.monotonic()
            results = asyncio.run(
                run_open_loop(
                    "127.0.0.1",
                    sim.port,
                    rate_rps=rate,
                    duration_s=args.duration,
                    prompt_tokens=args.prompt,
                    output_tokens=args.output,
                    model=settings.model_name,
                )
            )
            wall = time.monotonic() - t0
            cpu = _cpu_s(sim.pid) - cpu0
            after = promtext.parse(httpx.get(sim.metrics_url).text)
            tokens = sum(max(0, len(r.times) - 1) for r in results if r.ok)
            failed = sum(1 for r in results if not r.ok)
            lag99 = _delta_quantile(before, after, "tokenwatt_sim_scheduling_lag_seconds", 0.99)
            stream99 = _delta_quantile(before, after, "tokenwatt_sim_stream_lag_seconds", 0.99)
            lag_max = _delta_quantile(before, after, "tokenwatt_sim_scheduling_lag_seconds", 1.0)
            run0 = next(s.value for s in before if s.name == "tokenwatt_sim_running_seconds_total")
            run1 = next(s.value for s in after if s.name == "tokenwatt_sim_running_seconds_total")
            print(
                f"{rate:6.1f} {tokens / wall:7.0f} {100 * cpu / wall:7.0f}%"
                f" {1e6 * cpu / max(tokens, 1):8.0f}"
                f" {lag99 * 1000:6.1f}ms {lag_max * 1000:6.1f}ms {stream99 * 1000:8.1f}ms"
                f" {failed:6d} {(run1 - run0) / wall:10.1f}",
                flush=True,
            )
            time.sleep(2)


if __name__ == "__main__":
    main()
