"""The client against real vLLM (CPU build, tiny random model "tiny": vocab 32000, 4096 context)."""

import asyncio

import pytest

from tests import factories
from tokenwatt.client.openai import GenerationRequest, OpenAIClient
from tokenwatt.load.engine_metrics import find_running_gauge
from tokenwatt.load.workload import build_workload

pytestmark = [pytest.mark.anyio, pytest.mark.peer, pytest.mark.slow]


def engine(**kw):
    return factories.spec(
        engine={"endpoint": "http://127.0.0.1:1/v1", "model": "tiny", **kw}
    ).engine


def request(n_in=64, n_out=32, index=0, seed=0):
    spec = factories.spec(workload={"input_tokens": n_in, "output_tokens": n_out, "seed": seed})
    return build_workload(spec, context_tokens=4096).request(index)


async def test_discovery(vllm_server):
    async with OpenAIClient(engine(), base_url=f"{vllm_server.base_url}/v1") as client:
        assert await client.models() == ["tiny"]
        assert await client.max_model_len() == 4096
        version, source = await client.server_version()
    assert version is not None
    assert version.startswith("0.")
    assert source == "GET /version"


@pytest.mark.parametrize("transport", ["fast", "httpx"])
async def test_streamed_token_ids_with_ignore_eos(vllm_server, transport):
    async with OpenAIClient(
        engine(), base_url=f"{vllm_server.base_url}/v1", transport=transport
    ) as client:
        results = await asyncio.gather(*(client.generate(request(index=i)) for i in range(4)))
    for r in results:
        assert r.status == "ok", r.error
        assert r.output_tokens == 32  # from vLLM's usage chunk
        assert not r.output_tokens_approx
        assert r.input_tokens == 64  # exact: token ids, no tokenizer
        assert r.finish_reason == "length"
        assert 1 <= r.content_events <= 32  # vLLM may merge tokens into one event
        assert r.ttft_ms is not None
        assert r.tpot_ms is not None
        assert r.ttft_ms > 0
        assert r.tpot_ms >= 0
        assert r.e2e_ms >= r.ttft_ms
        assert r.usage_mismatch == (r.content_events != 32)


async def test_chat_api(vllm_server):
    spec = factories.spec(
        engine={"endpoint": f"{vllm_server.base_url}/v1", "model": "tiny", "api": "chat"},
        workload={"input_tokens": 40, "output_tokens": 16},
    )
    req = build_workload(spec, context_tokens=4096).request(0)
    async with OpenAIClient(spec.engine) as client:
        r = await client.generate(req)
    assert r.status == "ok", r.error
    assert r.output_tokens == 16
    assert r.input_tokens > 40  # the server's count includes the chat template


async def test_server_rejection_is_an_http_error(vllm_server):
    too_long = GenerationRequest(index=0, max_tokens=10, input_tokens=5000, prompt_ids=[500] * 5000)
    async with OpenAIClient(engine(), base_url=f"{vllm_server.base_url}/v1") as client:
        r = await client.generate(too_long)
    assert r.status == "http_error"
    assert r.http_status == 400
    assert "4096" in (r.error or "")  # vLLM says what the context length is


async def test_output_cut_by_the_context_is_a_short_output(vllm_server):
    # vLLM 0.32 accepts prompt + max_tokens beyond the context and stops at the context's end:
    # with ignore_eos that is fewer tokens than asked, a failed request (DESIGN.md).
    near_end = GenerationRequest(index=0, max_tokens=50, input_tokens=4076, prompt_ids=[500] * 4076)
    async with OpenAIClient(engine(), base_url=f"{vllm_server.base_url}/v1") as client:
        r = await client.generate(near_end)
    assert r.status == "short_output"
    assert r.output_tokens == 20
    assert r.output_length_violation


async def test_extra_body_reaches_the_server(vllm_server):
    # an unknown sampling value makes vLLM answer 400: proof the field was sent
    async with OpenAIClient(
        engine(extra_body={"temperature": -5}), base_url=f"{vllm_server.base_url}/v1"
    ) as client:
        r = await client.generate(request())
    assert r.status == "http_error"
    assert "temperature" in (r.error or "")


async def test_complete_text_for_accuracy(vllm_server):
    async with OpenAIClient(engine(), base_url=f"{vllm_server.base_url}/v1") as client:
        answer = await client.complete_text(
            "Question: 2 + 2?\nAnswer:", max_tokens=12, stop=["\n\nQuestion:"]
        )
        rejected = await client.complete_text("x " * 5000, max_tokens=10, stop=[])
    assert answer.ok, answer.error
    assert isinstance(answer.text, str)
    assert answer.output_tokens is not None
    assert 1 <= answer.output_tokens <= 12
    assert answer.finish_reason in ("length", "stop")
    assert rejected.status == "http_error"


async def test_accuracy_check_stays_greedy_whatever_extra_body_says(vllm_server):
    # A spec may sample the load (extra_body temperature); the accuracy check is greedy
    # (DESIGN.md). Greedy answers to one prompt are identical; at temperature 2 the random
    # model's 24 tokens over a 32,000-word vocabulary would not be.
    hot = engine(extra_body={"temperature": 2.0, "top_p": 1.0})
    async with OpenAIClient(hot, base_url=f"{vllm_server.base_url}/v1") as client:
        answers = [
            await client.complete_text("Question: 7 * 6?\nAnswer:", max_tokens=24, stop=[])
            for _ in range(3)
        ]
    assert all(a.ok for a in answers), [a.error for a in answers]
    assert answers[0].output_tokens == 24
    assert len({a.text for a in answers}) == 1, [a.text for a in answers]


async def test_running_gauge_found_on_vllm_metrics(vllm_server):
    # tokenwatt measure asks this once before the load: vLLM's page has the gauge
    assert await find_running_gauge(f"{vllm_server.base_url}/metrics") is None
