"""Real vLLM's prefix-cache hit rate, as a probe's engine telemetry reads it: on and off.

Unique random prompts hit nothing; prompts that share a long prefix (``workload.prefix``) hit
almost all of it once it is cached, as the workload's construction expects; prompts shaped by the
Mooncake trace's hash ids hit what the trace's own reuse says (``trace_hit_rate``); with prefix
caching off (the ``vllm_server`` fixture) nothing hits either way.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tests import factories
from tokenwatt.load.prefix import expected_hit_rate, trace_hit_rate
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import Workload, build_workload
from tokenwatt.sweep import ProbePlan

pytestmark = [pytest.mark.anyio, pytest.mark.peer, pytest.mark.slow]

PREFIX_TOKENS = 1024  # 8 of vLLM's 128-token blocks (its CPU build)
OWN_TOKENS = 114  # each request's own part: 1,024 of 1,138 prompt tokens shared, 90 %
VLLM_CPU_BLOCK_TOKENS = 128


RATE_RPS, WARMUP_S = 2.0, 1.0


async def hit_rate_pct(
    base_url: str, workload: Workload, spec, *, window_s: float = 4.0
) -> float | None:
    async with LoadGenerator(
        spec.engine, workload, metrics_url=f"{base_url}/metrics", workers=1
    ) as gen:
        record = await gen.probe(
            ProbePlan(phase="search", rate_rps=RATE_RPS, warmup_s=WARMUP_S, window_s=window_s),
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
        workload={"input_tokens": OWN_TOKENS, "output_tokens": 8, "seed": seed, "prefix": prefix},
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
    # every window request finds the 1,024-token prefix cached (the warm-up sent it): 1024 / 1138
    expected = expected_hit_rate(
        groups=1,
        shared_tokens=PREFIX_TOKENS,
        own_tokens_mean=OWN_TOKENS,
        block_tokens=VLLM_CPU_BLOCK_TOKENS,
    )
    assert expected == pytest.approx(0.90, abs=0.001)
    shared_pct = await hit_rate_pct(url, build_workload(shared, context_tokens=4096), shared)
    assert shared_pct is not None
    assert shared_pct == pytest.approx(100 * expected, abs=5.0)


def _mooncake_spec(base_url: str, trace: Path, *, trace_prefix: bool):
    return factories.spec(
        engine={"endpoint": f"{base_url}/v1", "model": "tiny"},
        workload={
            "trace": str(trace),
            "trace_block_tokens": VLLM_CPU_BLOCK_TOKENS,
            "trace_prefix": trace_prefix,
            "seed": 104,
        },
        slo={"ttft_p99_ms": 60_000, "tpot_p99_ms": 60_000},
    )


async def test_prefix_caching_off_hits_nothing_even_with_a_shared_prefix(
    vllm_server, shared, tmp_path
):
    url = vllm_server.base_url
    synthetic = _spec(url, seed=103, shared=True)
    trace = factories.mooncake_in_miniature(shared, tmp_path / "mooncake-mini.jsonl")
    shaped = _mooncake_spec(url, trace, trace_prefix=True)
    for spec, work in (
        (synthetic, build_workload(synthetic, context_tokens=4096)),
        (shaped, build_workload(shaped, trace_file=trace, context_tokens=4096)),
    ):
        assert work.shares_prefixes
        off_pct = await hit_rate_pct(url, work, spec)
        # vLLM without the cache either counts no lookups (None) or finds nothing
        assert off_pct is None or off_pct < 5.0, spec.workload


async def test_prompts_shaped_by_the_mooncake_trace_hit_what_its_reuse_says(
    vllm_server_prefix_caching, shared, tmp_path
):
    url = vllm_server_prefix_caching.base_url
    trace = factories.mooncake_in_miniature(shared, tmp_path / "mooncake-mini.jsonl")
    window_s = 6.0

    shaped = _mooncake_spec(url, trace, trace_prefix=True)
    work = build_workload(shaped, trace_file=trace, context_tokens=4096)
    assert work.shares_prefixes
    offsets = list(
        itertools.takewhile(lambda t: t < WARMUP_S + window_s, work.arrivals(RATE_RPS, stream=0))
    )
    warmup = sum(t < WARMUP_S for t in offsets)
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    sent = [rows[i % len(rows)] for i in range(len(offsets))]
    expected = trace_hit_rate(
        [r["hash_ids"] for r in sent],
        [r["input_length"] for r in sent],
        trace_block_tokens=VLLM_CPU_BLOCK_TOKENS,
        cache_block_tokens=VLLM_CPU_BLOCK_TOKENS,
        counted_from=warmup,
    )
    assert expected > 0.3  # deep reuse, not just the trace's common first block
    measured = await hit_rate_pct(url, work, shaped, window_s=window_s)
    assert measured is not None
    # The counters cover the requests vLLM scheduled between the window's first and last
    # scrape, not exactly the window's: a few points either way.
    assert measured == pytest.approx(100 * expected, abs=8.0)
    unique = _mooncake_spec(url, trace, trace_prefix=False)
    unique_work = build_workload(unique, trace_file=trace, context_tokens=4096)
    unique_pct = await hit_rate_pct(url, unique_work, unique, window_s=window_s)
    assert unique_pct is not None
    assert unique_pct < 5.0
