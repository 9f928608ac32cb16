"""Real vLLM's prefix-cache hit rate, as a probe's engine telemetry reads it: on and off.

Unique random prompts hit nothing; prompts that share a long prefix (``workload.prefix``) hit
almost all of it once it is cached, as the workload's construction expects; with prefix caching
off (the ``vllm_server`` fixture) nothing hits either way.
"""

from __future__ import annotations

import pytest

from tests import factories
from tokenwatt.load.prefix import expected_hit_rate
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import Workload, build_workload
from tokenwatt.sweep import ProbePlan

pytestmark = [pytest.mark.anyio, pytest.mark.peer, pytest.mark.slow]

PREFIX_TOKENS = 1024  # 8 of vLLM's 128-token blocks (its CPU build); 32 own tokens follow
VLLM_CPU_BLOCK_TOKENS = 128


async def hit_rate_pct(base_url: str, workload: Workload, spec) -> float | None:
    async with LoadGenerator(
        spec.engine, workload, metrics_url=f"{base_url}/metrics", workers=1
    ) as gen:
        record = await gen.probe(
            ProbePlan(phase="search", rate_rps=2.0, warmup_s=1.0, window_s=4.0),
            index=0,
            slo=spec.slo,
        )
    assert record.failed == 0, record.failure_examples
    assert record.engine is not None
    return record.engine.prefix_cache_hit_rate_pct


def _spec(base_url: str, seed: int, *, shared: bool = False):
    prefix = {"groups": 1, "shared_tokens": PREFIX_TOKENS} if shared else None
    return factories.spec(
        engine={"endpoint": f"{base_url}/v1", "model": "tiny"},
        workload={"input_tokens": 32, "output_tokens": 8, "seed": seed, "prefix": prefix},
        slo={"ttft_p99_ms": 60_000, "tpot_p99_ms": 60_000},
    )


async def test_prefix_caching_on_hits_a_shared_prefix_and_not_unique_prompts(
    vllm_server_prefix_caching,
):
    url = vllm_server_prefix_caching.base_url
    unique = _spec(url, seed=101)
    unique_pct = await hit_rate_pct(url, build_workload(unique, context_tokens=4096), unique)
    assert unique_pct is not None
    assert unique_pct < 5.0
    shared = _spec(url, seed=102, shared=True)
    # every window request finds the 1,024-token prefix cached (the warm-up sent it): 1024 / 1056
    expected = expected_hit_rate(
        groups=1,
        shared_tokens=PREFIX_TOKENS,
        own_tokens_mean=32,
        block_tokens=VLLM_CPU_BLOCK_TOKENS,
    )
    shared_pct = await hit_rate_pct(url, build_workload(shared, context_tokens=4096), shared)
    assert shared_pct is not None
    assert shared_pct == pytest.approx(100 * expected, abs=5.0)


async def test_prefix_caching_off_hits_nothing_even_with_a_shared_prefix(vllm_server):
    url = vllm_server.base_url
    shared = _spec(url, seed=103, shared=True)
    off_pct = await hit_rate_pct(url, build_workload(shared, context_tokens=4096), shared)
    assert off_pct is None or off_pct < 5.0  # vLLM may not count lookups it never makes
