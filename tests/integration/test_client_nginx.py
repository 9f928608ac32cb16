"""The streaming client against nginx-sse, a real fast SSE server (tests/conftest.py)."""

import asyncio
import time

import pytest

from tests import factories
from tokenwatt.client.openai import GenerationRequest, OpenAIClient
from tokenwatt.load.engine_metrics import find_running_gauge

pytestmark = [pytest.mark.anyio, pytest.mark.peer]


def engine(**kw):
    return factories.spec(engine={"endpoint": "http://127.0.0.1:1/v1", "model": "sim", **kw}).engine


def request(n_out=32, index=0):
    return GenerationRequest(
        index=index, max_tokens=n_out, input_tokens=64, prompt_ids=list(range(100, 164))
    )


@pytest.mark.parametrize("transport", ["fast", "httpx"])
@pytest.mark.parametrize("api", ["completions", "chat"])
async def test_stream_counts(nginx_sse, transport, api):
    req = request()
    if api == "chat":
        req = GenerationRequest(index=0, max_tokens=32, input_tokens=3, prompt_text="one two three")
    async with OpenAIClient(
        engine(api=api), base_url=f"{nginx_sse.base_url}/v1", transport=transport
    ) as client:
        result = await client.generate(req)
    assert result.status == "ok", result.error
    assert result.output_tokens == 32
    assert not result.output_tokens_approx
    assert result.content_events == 32
    assert result.input_tokens == (64 if api == "completions" else 3)
    assert not result.usage_mismatch
    assert not result.output_length_violation


@pytest.mark.parametrize("transport", ["fast", "httpx"])
async def test_timings_follow_the_server_delays(nginx_sse, transport):
    headers = {"X-Sim-TTFT-Ms": "80", "X-Sim-ITL-Ms": "15"}
    async with OpenAIClient(
        engine(), base_url=f"{nginx_sse.base_url}/v1", transport=transport, headers=headers
    ) as client:
        result = await client.generate(request(n_out=11))
    assert result.ok
    assert result.ttft_ms is not None
    assert result.tpot_ms is not None
    assert 80 <= result.ttft_ms < 200
    # 10 gaps of 15 ms; on a busy 2-core box a late read of the first token shortens the rest
    assert 13.5 <= result.tpot_ms < 40
    assert len(result.itl_ms) == 10
    # one gap can look short when the one before it was read late; their sum cannot
    assert sum(result.itl_ms) >= 135
    assert sorted(result.itl_ms)[5] >= 13.5
    assert result.e2e_ms >= 80 + 150


async def test_no_silent_cap_on_open_streams(nginx_sse):
    # 400 streams of ~1 s each at once: all open together (httpx's default pool would hold
    # 100 and queue the rest, tripling the wall time without a word).
    headers = {"X-Sim-TTFT-Ms": "1000", "X-Sim-ITL-Ms": "0"}
    async with OpenAIClient(
        engine(), base_url=f"{nginx_sse.base_url}/v1", headers=headers
    ) as client:
        start = time.monotonic()
        results = await asyncio.gather(*(client.generate(request(2, i)) for i in range(400)))
        elapsed = time.monotonic() - start
    assert all(r.ok for r in results)
    assert elapsed < 2.5
    assert all(r.ttft_ms is not None and r.ttft_ms >= 1000 for r in results)


async def test_long_output_is_not_throttled(nginx_sse):
    # 20,000 events in one response, split however TCP likes
    async with OpenAIClient(engine(), base_url=f"{nginx_sse.base_url}/v1") as client:
        start = time.monotonic()
        result = await client.generate(request(n_out=20000))
    assert result.ok
    assert result.output_tokens == 20000
    assert result.content_events == 20000
    assert time.monotonic() - start < 5


async def test_no_running_gauge_on_an_empty_metrics_page(nginx_sse):
    # nginx-sse answers /metrics with a comment only: the running batch must come from
    # Little's law, and the reason names the page
    why_not = await find_running_gauge(f"{nginx_sse.base_url}/metrics")
    assert why_not is not None
    assert why_not.startswith("none of vllm:num_requests_running")
