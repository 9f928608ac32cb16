"""TTFT does not depend on how a client reuses its connections: the simulator, and real vLLM.

Three raw-socket clients (``tests/connpolicy.py``) take turns on one Poisson schedule: a fresh
connection per request, keep-alive reusing the connection idle the longest (FIFO), and
keep-alive reusing the one released last (LIFO, tokenwatt's own pool). A server that serves a
request on a just-released keep-alive connection as promptly as on a new one gives all three
the same TTFT distribution. The simulator once did not: its connections kept Nagle's algorithm,
so on a reused connection a response's first token chunk waited in the kernel for the client's
delayed ACK of the response head, +25-30 ms on most LIFO requests (p90 20 -> 45 ms).

Two checks, both on distributions measured in the same run:

- Rank: the share of a keep-alive client's requests slower than the fresh client's p90. For
  one distribution it is about 11 % (the fresh p90 is itself an estimate), whatever the
  distribution's shape, so it holds on a noisy box too; with the Nagle stall it was 55-62 % for
  the LIFO client.
- p90 at most 3 ms above the fresh client's (the issue's criterion; 10 % of it on a box so busy
  that the fresh p90 is over 30 ms), on the simulator only: its TTFT is narrow around the
  p90 (one engine step is ~9 ms), so 100 requests give a p90 good to about 1 ms (the keep-alive
  clients' p90s were within 0.8 ms of the fresh client's in every run). Real vLLM's CPU build
  on this shared 2-core box has a tail from CPU contention (p50 10-14 ms, p90 18-50 ms in the
  runs that wrote this) in which the p90 of 100 requests moved by up to 5.6 ms between the
  three clients: a 3 ms bound there would test the box, not the server.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.connpolicy import POLICIES, Policy, Sample, completion_request, run_side_by_side
from tokenwatt.metrics import latency_stats
from tokenwatt.schema.spec import SimSpec
from tokenwatt.sim.launch import SimProcess, SimSettings, launch

PROMPT_TOKENS = 64
MAX_SLOWER_THAN_FRESH_P90 = 0.25
"""Over ~3.2 standard deviations above the ~11 % expected when the distributions agree."""


@pytest.fixture(scope="module")
def sim(repo: Path) -> Iterator[SimProcess]:
    settings = SimSettings(
        sim=SimSpec(gpu="h100-sxm"),
        config_file=repo / "specs" / "models" / "Qwen__Qwen3-8B" / "config.json",
        served_model_name="qwen3-8b",
    )
    with launch(settings) as proc:
        yield proc


def side_by_side(
    port: int, *, model: str, rate_rps: float, per_client: int, max_tokens: int
) -> dict[Policy, list[Sample]]:
    rng = random.Random(7)
    requests = [
        completion_request(
            f"127.0.0.1:{port}",
            model=model,
            prompt=[rng.randrange(32000) for _ in range(PROMPT_TOKENS)],
            max_tokens=max_tokens,
        )
        for _ in range(per_client * len(POLICIES))
    ]
    return asyncio.run(run_side_by_side("127.0.0.1", port, requests, rate_rps=rate_rps))


def ttfts_ms(samples: list[Sample], *, max_tokens: int) -> list[float]:
    errors = [s.error for s in samples if s.error]
    assert not errors, errors[:3]
    # vLLM may put several tokens in one event; the simulator sends one event per token.
    assert all(s.ttft_s is not None and 1 <= s.tokens <= max_tokens for s in samples)
    return [1000 * s.ttft_s for s in samples if s.ttft_s is not None]


def check_rank(results: dict[Policy, list[Sample]], *, max_tokens: int) -> dict[Policy, float]:
    """Assert the keep-alive clients reused connections and agree with the fresh one; p90s."""
    ttft = {policy: ttfts_ms(results[policy], max_tokens=max_tokens) for policy in POLICIES}
    p90 = {policy: latency_stats(values).p90 or 0.0 for policy, values in ttft.items()}
    summary = {policy: f"p90 {p90[policy]:.1f} ms" for policy in POLICIES}
    for policy in ("fifo", "lifo"):
        samples = results[policy]
        # Otherwise the client did not test connection reuse (the server closed them, say).
        assert sum(s.reused for s in samples) >= 0.8 * len(samples), policy
        slower = sum(v > p90["fresh"] for v in ttft[policy]) / len(ttft[policy])
        assert slower <= MAX_SLOWER_THAN_FRESH_P90, (
            f"{policy}: {slower:.0%} of requests slower than the fresh client's p90; {summary}"
        )
    return p90


def test_sim_ttft_same_on_fresh_and_reused_connections(sim: SimProcess):
    assert sim.port is not None
    # 60 req/s of 16-token answers (~0.15 s each): a few streams in flight per client, so the
    # LIFO client almost always reuses a connection whose response ended moments ago.
    results = side_by_side(sim.port, model="qwen3-8b", rate_rps=60, per_client=100, max_tokens=16)
    p90 = check_rank(results, max_tokens=16)
    # One-sided: the stall this guards against makes reused connections slower. On a busy box
    # the whole distribution widens (fresh 45.7 ms, keep-alive 37.7 and 39.2 ms in one run
    # beside a starting vLLM), hence the allowance of 10 % of the fresh p90 when that is more.
    allowed_ms = max(3.0, 0.1 * p90["fresh"])
    for policy in ("fifo", "lifo"):
        assert p90[policy] - p90["fresh"] <= allowed_ms, p90


@pytest.mark.peer
@pytest.mark.slow
def test_vllm_ttft_same_on_fresh_and_reused_connections(vllm_server):
    # The real server the simulator stands in for: the same clients at 12 req/s (its CPU
    # build serves that on this box with room to spare), 8-token answers; ~25 s.
    results = side_by_side(
        vllm_server.port, model="tiny", rate_rps=12, per_client=100, max_tokens=8
    )
    check_rank(results, max_tokens=8)
