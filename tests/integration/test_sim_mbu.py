"""MBU estimated from the simulator's /metrics and observed throughput vs its ground truth.

tokenwatt's estimate only sees what it would see on real hardware: the engine's running-batch
gauge (``vllm:num_requests_running``, sampled through the window), its output-token counter
(``vllm:generation_tokens_total``), the requests' lengths and the model's config. The
simulator's own counters say how many bytes its steps really read. (Output tokens are taken
from the engine's counter rather than counted by this test's client, and the responses are not
streamed: on a busy 2-core machine a Python client reading 4,000 events a second falls seconds
behind, which would measure the client, and its load starves the simulator.)
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import httpx
import pytest

from tokenwatt import promtext
from tokenwatt.geometry import load_geometry
from tokenwatt.gpus import rated_bandwidth
from tokenwatt.load.engine_metrics import sample_running_batch
from tokenwatt.mbu import estimate_mbu, step_weighted_context
from tokenwatt.sim.launch import SimSettings, launch

RATE_RPS = 16.0
ARRIVALS_S = 24.0
WINDOW = (8.0, 22.0)
PROMPT, OUTPUT = 1024, 256


MAX_ATTEMPTS = 3
MIN_BATCH_SAMPLES = 5


async def one_request(client: httpx.AsyncClient, url: str, body: bytes) -> int:
    """Send one request; its output token count, from the server's usage."""
    resp = await client.post(url, content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 200, resp.text
    tokens: int = resp.json()["usage"]["completion_tokens"]
    return tokens


async def scrape(client: httpx.AsyncClient, url: str, at: float) -> tuple[float, str]:
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    t = time.monotonic()
    return t, (await client.get(url)).text


def counters(text: str) -> dict[str, float]:
    return {s.name: s.value for s in promtext.parse(text) if not s.labels}


def lag_max_s(before: str, after: str) -> float:
    """Largest scheduling lag between two scrapes (upper bound of the highest bucket used)."""

    def buckets(text: str) -> list[tuple[float, float]]:
        return [
            (float(s.labels["le"]), s.value)
            for s in promtext.parse(text)
            if s.name == "tokenwatt_sim_scheduling_lag_seconds_bucket"
        ]

    worst = 0.0
    prev = 0.0
    for (le, v1), (_, v0) in zip(buckets(after), buckets(before), strict=True):
        if v1 - v0 > prev:
            worst = le
        prev = v1 - v0
    return worst


def observe(
    metrics_url: str, t0: float
) -> tuple[list[float], tuple[float, str], tuple[float, str]]:
    """The window's observations: running-batch samples, and the counters at its two edges.

    They run on an event loop of their own, in their own thread, as the probe's sampler runs
    apart from the load workers (tokenwatt.load.probe): on a busy machine the load driver falls
    behind reading its streams, and a sampler waiting behind it would sample late and skewed.
    """

    async def main() -> tuple[list[float], tuple[float, str], tuple[float, str]]:
        running: list[float] = []
        errors: list[str] = []
        async with httpx.AsyncClient(timeout=120) as client:
            sampling = asyncio.create_task(
                sample_running_batch(
                    metrics_url,
                    int((t0 + WINDOW[0]) * 1e9),
                    int((t0 + WINDOW[1]) * 1e9),
                    running,
                    errors,
                )
            )
            a, b = await asyncio.gather(
                scrape(client, metrics_url, t0 + WINDOW[0]),
                scrape(client, metrics_url, t0 + WINDOW[1]),
            )
            await sampling
        return running, a, b

    return asyncio.run(main())


async def drive(sim_url: str, metrics_url: str, model: str, seed: int):
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=2000)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:
        t0 = time.monotonic()
        observing = asyncio.get_running_loop().run_in_executor(None, observe, metrics_url, t0)
        tasks = []
        send_lag: list[float] = []
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
                    "stream": False,
                }
            ).encode()
            tasks.append(asyncio.create_task(one_request(client, sim_url, body)))
            send_lag.append(time.monotonic() - (t0 + t))
        outputs = await asyncio.gather(*tasks)
        running, (ta, a), (tb, b) = await observing
    batch = sum(running) / len(running) if len(running) >= MIN_BATCH_SAMPLES else None
    send_lag.sort()
    return t0, outputs, (ta, a), (tb, b), batch, send_lag[int(0.99 * (len(send_lag) - 1))]


def measure_once(sim_url: str, metrics_url: str, model: str, geometry, seed: int):
    """(estimate, truth figures, whether the run was clean) for one loaded window."""
    t0, outputs, (ta, a_text), (tb, b_text), batch, send_lag = asyncio.run(
        drive(sim_url, metrics_url, model, seed)
    )
    assert outputs == [OUTPUT] * len(outputs)
    a, b = counters(a_text), counters(b_text)
    dt = tb - ta
    name = "vllm:generation_tokens_total"
    tokens = [
        sum(s.value for s in promtext.parse(text) if s.name == name) for text in (a_text, b_text)
    ]
    if batch is None:  # the sampler could not scrape often enough: the machine is starved
        reason = f"fewer than {MIN_BATCH_SAMPLES} running-batch samples in the window"
        return None, {"reason": reason}, False
    bandwidth, _ = rated_bandwidth(gpu_count=1, preset_key="h100-sxm")
    assert bandwidth is not None
    n = len(outputs)
    estimate = estimate_mbu(
        geometry=geometry,
        output_tok_s=(tokens[1] - tokens[0]) / dt,
        batch_mean=batch,
        batch_source="metrics",
        mean_context_tokens=step_weighted_context([PROMPT] * n, [OUTPUT] * n),
        bandwidth=bandwidth,
    )
    read = b["tokenwatt_sim_read_bytes_total"] - a["tokenwatt_sim_read_bytes_total"]
    steps = b["tokenwatt_sim_steps_total"] - a["tokenwatt_sim_steps_total"]
    truth = {
        "mbu": 100 * read / dt / 3.35e12,
        "bytes_per_step": read / steps,
        "batch": (
            b["tokenwatt_sim_running_seconds_total"] - a["tokenwatt_sim_running_seconds_total"]
        )
        / dt,
        "steps_per_s": steps / dt,
    }
    # A valid measurement: the simulator kept real time and the client its send schedule (on a
    # shared machine either can be starved for a while; then the simulator skips time, or the
    # arrivals bunch up, and the window is not the steady state the estimate describes).
    # A stall of a few tens of ms is harmless; one of a quarter second moves tokens across the
    # window's edges (and the simulator then skips time: lost > 0).
    lost = b["tokenwatt_sim_lost_seconds_total"] - a["tokenwatt_sim_lost_seconds_total"]
    lag = lag_max_s(a_text, b_text)
    truth.update(lost_s=lost, sim_lag_s=lag, send_lag_s=send_lag)
    clean = lost == 0.0 and lag <= 0.2 and send_lag <= 0.2
    return estimate, truth, clean


@pytest.mark.slow
def test_mbu_from_metrics_matches_ground_truth(shared: Path):
    config = shared / "data" / "models" / "Qwen__Qwen3-30B-A3B-FP8" / "config.json"
    settings = SimSettings(config_file=config, kv_dtype="bf16")
    geometry = load_geometry(config, kv_dtype="bf16")
    reports = []
    with launch(settings) as sim:
        for attempt in range(MAX_ATTEMPTS):
            estimate, truth, clean = measure_once(
                sim.base_url + "/completions",
                sim.metrics_url,
                settings.model_name,
                geometry,
                attempt,
            )
            if estimate is None:
                reports.append(str(truth))
                continue
            report = (
                f"estimate {estimate.mbu_pct:.1f}% (B {estimate.batch_mean:.1f},"
                f" {estimate.bytes_per_step / 1e9:.2f} GB/step, {estimate.steps_per_s:.1f}"
                f" steps/s); truth {truth['mbu']:.1f}% (B {truth['batch']:.1f},"
                f" {truth['bytes_per_step'] / 1e9:.2f} GB/step, {truth['steps_per_s']:.1f}"
                f" steps/s); simulator lag max {truth['sim_lag_s']:.3f} s, lost"
                f" {truth['lost_s']:.3f} s, client send lag p99 {truth['send_lag_s']:.3f} s"
            )
            reports.append(report)
            if clean:
                break
    assert clean, f"no clean window in {MAX_ATTEMPTS} attempts (machine too busy): {reports}"
    assert estimate is not None
    assert estimate.mbu_pct == pytest.approx(truth["mbu"], rel=0.05), report
    assert estimate.bytes_per_step == pytest.approx(truth["bytes_per_step"], rel=0.05), report
    assert estimate.batch_mean == pytest.approx(truth["batch"], rel=0.05), report
    assert 20 < truth["mbu"] < 80
