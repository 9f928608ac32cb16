"""Real vLLM preempting requests when its KV cache is full, as a probe's telemetry counts it.

The ``vllm_server_prefix_caching`` fixture has a KV cache of 5,120 tokens (40 blocks of 128).
A prompt of 1,024 tokens fills exactly 8 blocks, so five admitted prompts fill the cache and
the first decoded token of any of them needs a block nobody has: vLLM preempts (frees a
request's blocks and recomputes it later). At 3 req/s of such requests (384 output tokens
each) that happens throughout the window, and the probe's engine telemetry must count it from
vLLM's own ``vllm:num_preemptions_total`` between the window's first and last scrape (with
768-token prompts it once preempted only after the last). Short requests at a low rate on the
same server: none. (What the result and its page say about preemptions at the confirmed rate:
tests/unit/test_report.py.)

Probes, not a measure run: the server and the load generator share two cores, so a run this
heavy can be client-bound and confirm no rate; the counter does not depend on that.
"""

from __future__ import annotations

import pytest

from tests import factories
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import build_workload
from tokenwatt.schema.run import EngineTelemetry, ProbeRecord
from tokenwatt.sweep import ProbePlan

pytestmark = [pytest.mark.anyio, pytest.mark.peer, pytest.mark.slow]


async def _probe(
    base_url: str, *, input_tokens: int, output_tokens: int, rate_rps: float, window_s: float
) -> EngineTelemetry:
    spec = factories.spec(
        engine={"endpoint": f"{base_url}/v1", "model": "tiny", "ignore_eos": True},
        workload={"input_tokens": input_tokens, "output_tokens": output_tokens, "seed": 31},
        slo={"ttft_p99_ms": 600_000, "tpot_p99_ms": 60_000},
        measurement={"request_timeout_s": 300},
    )
    work = build_workload(spec, context_tokens=4096)
    async with LoadGenerator(
        spec.engine, work, metrics_url=f"{base_url}/metrics", workers=1
    ) as gen:
        record: ProbeRecord = await gen.probe(
            ProbePlan(phase="search", rate_rps=rate_rps, warmup_s=1.0, window_s=window_s),
            index=0,
            slo=spec.slo,
        )
    assert record.failed == 0, record.failure_examples
    assert record.engine is not None
    return record.engine


async def _probe_with_readings(
    base_url: str, *, input_tokens: int, output_tokens: int, rate_rps: float, window_s: float
) -> EngineTelemetry:
    """A probe whose scrapes caught a first and a last reading, tried up to three times.

    On a loaded two-core box (CI) vLLM's API server once answered no scrape of a 14 s window
    in time; the probe counts those as failed scrapes, and the preemption count needs two.
    """
    tries: list[EngineTelemetry] = []
    for _ in range(3):
        engine = await _probe(
            base_url,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            rate_rps=rate_rps,
            window_s=window_s,
        )
        if engine.samples >= 2:
            return engine
        assert engine.scrape_errors > 0, engine  # never a silent zero
        tries.append(engine)
    raise AssertionError(f"no two scrapes answered in three probes: {tries}")


async def test_a_full_kv_cache_preempts_and_the_probe_counts_it(vllm_server_prefix_caching):
    url = vllm_server_prefix_caching.base_url
    calm = await _probe_with_readings(
        url, input_tokens=32, output_tokens=8, rate_rps=1.0, window_s=4.0
    )
    assert calm.preemptions == 0, calm
    full = await _probe_with_readings(
        url, input_tokens=1024, output_tokens=384, rate_rps=3.0, window_s=14.0
    )
    assert full.preemptions is not None
    assert full.preemptions > 0, full
    assert full.kv_cache_usage_max_pct is not None
    # The gauges, as far as the scrapes caught them: on a loaded box vLLM's API server answers
    # /metrics late and a scrape can fall between bursts, but one that saw requests running
    # must see their blocks.
    assert full.running_max is not None
    if full.running_max > 0:
        assert full.kv_cache_usage_max_pct > 0.0, full
