"""The seed's scenario on the simulator, swept to the SLO boundary in virtual time.

H100 SXM, Qwen3-30B-A3B with FP8 weights and BF16 KV cache, chat-mix-v1 lengths (log-normal
fitted to input median 1,024 / p90 4,096 and output median 256 / p90 1,024 tokens, clipped to
the model's 40,960-token context), Poisson arrivals, SLO p99 TTFT 2 s / p99 TPOT 50 ms, and the
seed's sweep protocol from DESIGN.md (start 8 req/s, x1.25 until a probe fails, 3 bisections,
2 confirmation windows of 120 s after 45 s of warm-up, back-off x0.9). The engine core runs in
virtual time, so the whole sweep takes seconds; it is the same engine the real-time server runs.

Prints the probes, then the confirmed figures next to the seed's:

    .venv/bin/python benchmarks/sim_seed.py [--gpu h100-sxm] [--bandwidth-efficiency 0.7 ...]
"""

from __future__ import annotations

import argparse
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenwatt.geometry import load_geometry
from tokenwatt.gpus import preset
from tokenwatt.mbu import RatedBandwidth, estimate_mbu, step_weighted_context
from tokenwatt.metrics import littles_law_batch, nearest_rank
from tokenwatt.schema.spec import SimSpec
from tokenwatt.sim.engine import EngineConfig
from tokenwatt.sim.offline import Arrival, simulate

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "specs" / "models" / "Qwen__Qwen3-30B-A3B-FP8" / "config.json"
Z90 = 1.2815515655446004  # standard normal 90th percentile
CONTEXT = 40960
SLO_TTFT_S, SLO_TPOT_S = 2.0, 0.050
WARMUP_S, SEARCH_S, WINDOW_S, TIMEOUT_S = 45.0, 60.0, 120.0, 300.0
START, GROWTH, MAX_RPS, BISECT, REPEATS, BACKOFF, MAX_BACKOFFS = 8.0, 1.25, 2000.0, 3, 2, 0.9, 4


def lognormal(rng: random.Random, median: float, p90: float) -> float:
    """A draw from the log-normal with this median and 90th percentile."""
    return median * math.exp(math.log(p90 / median) / Z90 * rng.gauss(0.0, 1.0))


def chat_mix(rng: random.Random) -> tuple[int, int]:
    out = max(1, round(lognormal(rng, 256, 1024)))
    inp = max(1, round(lognormal(rng, 1024, 4096)))
    out = min(out, CONTEXT // 2)
    return min(inp, CONTEXT - out), out


def p99(values: list[float]) -> float:
    """tokenwatt's nearest-rank p99 (failures are +inf); +inf when nothing was measured."""
    return nearest_rank(np.sort(np.asarray(values, dtype=np.float64)), 99.0) if values else math.inf


@dataclass
class Probe:
    rate: float
    window_s: float
    passed: bool
    goodput: float
    ttft99: float
    tpot99: float
    requests: int
    failed: int
    mbu_est: float
    mbu_true: float
    batch_est: float
    batch_true: float
    power_w: float
    throttled: float
    wall_s: float


def probe(cfg: EngineConfig, rate: float, window_s: float, seed: int) -> Probe:
    wall0 = time.perf_counter()
    rng = random.Random(seed)
    w0, w1 = WARMUP_S, WARMUP_S + window_s
    horizon = w1 + TIMEOUT_S
    arrivals: list[Arrival] = []
    t = 0.0
    while t < horizon:
        t += rng.expovariate(rate)
        inp, out = chat_mix(rng)
        arrivals.append(Arrival(t, inp, out))
    run = simulate(cfg, arrivals, until_s=horizon, snapshot_at=[w0, w1])
    window = [(a, ts) for a, ts in run.requests if w0 <= a.t_s < w1]
    ttft: list[float] = []
    tpot: list[float] = []
    tokens = 0
    failed = 0
    ins: list[int] = []
    outs: list[int] = []
    for a, ts in window:
        if len(ts) < a.output_tokens or ts[-1] - a.t_s > TIMEOUT_S:
            failed += 1
            ttft.append(math.inf)
            tpot.append(math.inf)
            continue
        tokens += len(ts)
        ttft.append(ts[0] - a.t_s)
        tpot.append((ts[-1] - ts[0]) / (len(ts) - 1) if len(ts) > 1 else 0.0)
        ins.append(a.prompt_tokens)
        outs.append(a.output_tokens)
    s0, s1 = run.snapshots
    dt = s1.t_s - s0.t_s
    g = cfg.geometry
    # As a probe does without /metrics: every request's first-to-last token, clipped to the window.
    decode_ns = [(round(ts[0] * 1e9), round(ts[-1] * 1e9)) for _, ts in run.requests if ts]
    batch_est = littles_law_batch(decode_ns, round(w0 * 1e9), round(w1 * 1e9))
    # As a probe does (window_emitted_tokens): tokens that arrived inside the window, any request.
    emitted = sum(1 for _, ts in run.requests for t_tok in ts if w0 <= t_tok < w1)
    mbu = estimate_mbu(
        geometry=g,
        output_tok_s=emitted / window_s,
        batch_mean=batch_est,
        batch_source="littles_law",
        mean_context_tokens=step_weighted_context(ins, outs),
        bandwidth=RatedBandwidth(cfg.gpu.mem_bw_tbs, cfg.tensor_parallel, cfg.gpu.name),
    )
    t99, p99_tpot = p99(ttft), p99(tpot)
    return Probe(
        rate=rate,
        window_s=window_s,
        passed=t99 <= SLO_TTFT_S and p99_tpot <= SLO_TPOT_S,
        goodput=tokens / window_s,
        ttft99=t99,
        tpot99=p99_tpot,
        requests=len(window),
        failed=failed,
        mbu_est=mbu.mbu_pct,
        mbu_true=100 * (s1.read_bytes - s0.read_bytes) / dt / cfg.rated_bandwidth,
        batch_est=batch_est,
        batch_true=(s1.running_seq_s - s0.running_seq_s) / dt,
        power_w=(s1.energy_j - s0.energy_j) / dt,
        throttled=(s1.throttled_s - s0.throttled_s) / dt,
        wall_s=time.perf_counter() - wall0,
    )


def show(p: Probe, phase: str) -> None:
    print(
        f"| {phase} | {p.rate:.2f} | {'pass' if p.passed else 'FAIL'} | {p.goodput:,.0f} |"
        f" {p.ttft99 * 1000:,.0f} | {p.tpot99 * 1000:.1f} | {p.mbu_est:.1f} / {p.mbu_true:.1f} |"
        f" {p.batch_est:.0f} / {p.batch_true:.0f} | {p.power_w:.0f} | {100 * p.throttled:.0f} |"
        f" {p.failed} |",
        flush=True,
    )


def sweep(cfg: EngineConfig) -> list[Probe]:
    seed = 0
    print(
        "| phase | req/s | SLO | goodput tok/s | p99 TTFT ms | p99 TPOT ms | MBU % est / true |"
        " B est / true | W | % time at cap | failed |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")

    def run(rate: float, window: float, phase: str) -> Probe:
        nonlocal seed
        seed += 1
        p = probe(cfg, rate, window, seed)
        show(p, phase)
        return p

    rate, last_pass, first_fail = START, None, None
    while rate <= MAX_RPS:
        p = run(rate, SEARCH_S, "search")
        if not p.passed:
            first_fail = rate
            break
        last_pass = rate
        rate *= GROWTH
    if last_pass is None:
        return []
    if first_fail is not None:
        lo, hi = last_pass, first_fail
        for _ in range(BISECT):
            mid = (lo + hi) / 2
            if run(mid, SEARCH_S, "bisect").passed:
                lo = mid
            else:
                hi = mid
        last_pass = lo
    rate = last_pass
    for _ in range(MAX_BACKOFFS + 1):
        repeats = [run(rate, WINDOW_S, "confirm") for _ in range(REPEATS)]
        if all(p.passed for p in repeats):
            return repeats
        rate *= BACKOFF
    return []


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", default="h100-sxm")
    ap.add_argument("--bandwidth-efficiency", type=float)
    ap.add_argument("--compute-efficiency", type=float)
    ap.add_argument("--step-overhead-ms", type=float)
    args = ap.parse_args()
    geometry = load_geometry(CONFIG, weight_dtype="fp8", kv_dtype="bf16")
    sim = SimSpec(
        gpu=args.gpu,
        bandwidth_efficiency=args.bandwidth_efficiency,
        compute_efficiency=args.compute_efficiency,
        step_overhead_ms=args.step_overhead_ms,
    )
    cfg = EngineConfig.build(geometry=geometry, gpu=preset(args.gpu), sim=sim)
    print(f"{cfg.describe()}\n{geometry.describe()}\n")
    t0 = time.perf_counter()
    confirmed = sweep(cfg)
    print(f"\nsweep took {time.perf_counter() - t0:.0f} s of CPU for the whole virtual sweep")
    if not confirmed:
        print("no rate passed")
        return
    n = len(confirmed)

    def mean(xs: list[float]) -> float:
        return sum(xs) / n

    print("\n| figure | simulator | seed (H100 SXM, vLLM 0.31) |\n|---|---|---|")
    print(f"| confirmed rate, req/s | {confirmed[0].rate:.2f} | ~9.8 (4,515 / mean output) |")
    print(f"| SLO goodput, tok/s | {mean([p.goodput for p in confirmed]):,.0f} | 4,515 |")
    print(f"| p99 TTFT, ms | {max(p.ttft99 for p in confirmed) * 1000:,.0f} | 338 |")
    print(f"| p99 TPOT, ms | {max(p.tpot99 for p in confirmed) * 1000:.1f} | 44.2 |")
    print(f"| MBU (tokenwatt's estimate), % | {mean([p.mbu_est for p in confirmed]):.1f} | 56.3 |")
    print(f"| MBU (simulator ground truth), % | {mean([p.mbu_true for p in confirmed]):.1f} | — |")
    print(f"| board power, W | {mean([p.power_w for p in confirmed]):.0f} | 623 |")
    print(
        f"| time at the power cap, % | {100 * mean([p.throttled for p in confirmed]):.0f} |"
        " 75 (180 of 240 one-second samples) |"
    )


if __name__ == "__main__":
    main()
