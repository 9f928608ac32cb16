"""MBU estimated from the simulator's /metrics and observed throughput vs its ground truth.

tokenwatt's estimate only sees what it would see on real hardware (the engine's running-batch
gauge, the tokens the client received, the requests' lengths, the model's config); the
simulator's own counters say how many bytes its steps really read.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import httpx
import pytest

from tokenwatt.geometry import load_geometry
from tokenwatt.mbu import (
    EngineMetricsSampler,
    estimate_mbu,
    parse_prometheus_text,
    rated_bandwidth,
    step_weighted_context,
)
from tokenwatt.sim.launch import SimSettings, launch

RATE_RPS = 16.0
ARRIVALS_S = 22.0
WINDOW = (8.0, 20.0)
PROMPT, OUTPUT = 1024, 256


async def one_request(client: httpx.AsyncClient, url: str, body: bytes, times: list[float]) -> None:
    async with client.stream(
        "POST", url, content=body, headers={"content-type": "application/json"}
    ) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.startswith('data: {"id"') and '"choices":[{' in line:
                times.append(time.monotonic())


async def scrape(client: httpx.AsyncClient, url: str, at: float) -> tuple[float, dict[str, float]]:
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    t = time.monotonic()
    text = (await client.get(url)).text
    return t, {s.name: s.value for s in parse_prometheus_text(text) if not s.labels}


async def drive(sim_url: str, metrics_url: str, model: str):
    rng = random.Random(7)
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=2000)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:
        sampler = EngineMetricsSampler(metrics_url, interval_s=0.2, client=client)
        sampling = asyncio.create_task(sampler.run())
        t0 = time.monotonic()
        truth = [
            asyncio.create_task(scrape(client, metrics_url, t0 + WINDOW[0])),
            asyncio.create_task(scrape(client, metrics_url, t0 + WINDOW[1])),
        ]
        tasks = []
        token_times: list[list[float]] = []
        t = 0.0
        while True:
            t += rng.expovariate(RATE_RPS)
            if t > ARRIVALS_S:
                break
            await asyncio.sleep(max(0.0, t0 + t - time.monotonic()))
            body = json.dumps(
                {
                    "model": model,
                    "prompt": [rng.randrange(1, 150000) for _ in range(PROMPT)],
                    "max_tokens": OUTPUT,
                    "ignore_eos": True,
                    "stream": True,
                }
            ).encode()
            times: list[float] = []
            token_times.append(times)
            tasks.append(asyncio.create_task(one_request(client, sim_url, body, times)))
        await asyncio.gather(*tasks)
        (ta, a), (tb, b) = await asyncio.gather(*truth)
        sampling.cancel()
        batch = sampler.mean_running(int((t0 + WINDOW[0]) * 1e9), int((t0 + WINDOW[1]) * 1e9))
    return t0, token_times, (ta, a), (tb, b), batch


@pytest.mark.slow
def test_mbu_from_metrics_matches_ground_truth(shared: Path):
    config = shared / "data" / "models" / "Qwen__Qwen3-30B-A3B-FP8" / "config.json"
    settings = SimSettings(gpu="h100-sxm", model_config=config, kv_dtype="bf16")
    with launch(settings) as sim:
        # The sampler reads time.monotonic_ns(); convert our monotonic seconds the same way.
        t0, token_times, (ta, a), (tb, b), batch = asyncio.run(
            drive(sim.base_url + "/completions", sim.metrics_url, settings.model_name)
        )
    assert all(len(times) == OUTPUT for times in token_times)
    w0, w1 = t0 + WINDOW[0], t0 + WINDOW[1]
    tokens = sum(1 for times in token_times for x in times if w0 <= x < w1)
    assert batch is not None
    geometry = load_geometry(config, kv_dtype="bf16")
    bandwidth = rated_bandwidth(gpu_count=1, preset_key="h100-sxm")
    assert bandwidth is not None
    n = len(token_times)
    estimate = estimate_mbu(
        geometry=geometry,
        output_tok_s=tokens / (w1 - w0),
        batch_mean=batch,
        batch_source="metrics",
        mean_context_tokens=step_weighted_context([PROMPT] * n, [OUTPUT] * n),
        bandwidth=bandwidth,
    )
    dt = tb - ta
    true_bytes_s = (b["tokenwatt_sim_read_bytes_total"] - a["tokenwatt_sim_read_bytes_total"]) / dt
    true_steps = b["tokenwatt_sim_steps_total"] - a["tokenwatt_sim_steps_total"]
    true_bytes_per_step = (
        b["tokenwatt_sim_read_bytes_total"] - a["tokenwatt_sim_read_bytes_total"]
    ) / true_steps
    true_batch = (
        b["tokenwatt_sim_running_seconds_total"] - a["tokenwatt_sim_running_seconds_total"]
    ) / dt
    true_mbu = 100 * true_bytes_s / 3.35e12
    report = (
        f"estimate {estimate.mbu_pct:.1f}% (B {batch:.1f}, {estimate.bytes_per_step / 1e9:.2f}"
        f" GB/step, {estimate.steps_per_s:.1f} steps/s); truth {true_mbu:.1f}% (B"
        f" {true_batch:.1f}, {true_bytes_per_step / 1e9:.2f} GB/step, {true_steps / dt:.1f}"
        " steps/s)"
    )
    assert estimate.mbu_pct == pytest.approx(true_mbu, rel=0.05), report
    assert estimate.bytes_per_step == pytest.approx(true_bytes_per_step, rel=0.05), report
    assert batch == pytest.approx(true_batch, rel=0.05), report
    assert 20 < true_mbu < 80
