"""A reasoning model's stream over real sockets (tests/faultserver.py ``reasoning`` faults).

The fault server sends a role-only chunk, ``reasoning_split(n)`` reasoning deltas, pauses
``REASONING_PAUSE_S``, then the answer's ``content`` deltas and usage: TTFT is the first
reasoning chunk, TTFAT the first content chunk, and the token split is the server's or, without
its count, the reasoning chunks (approximate).
"""

import pytest

from tests import factories
from tests.faultserver import REASONING_PAUSE_S, reasoning_split
from tokenwatt.client.openai import GenerationRequest, OpenAIClient

pytestmark = pytest.mark.anyio

MAX_TOKENS = 7
REQUEST = GenerationRequest(index=0, max_tokens=MAX_TOKENS, input_tokens=3, prompt_text="why?")


async def one(url, transport):
    engine = factories.spec(
        engine={"endpoint": "http://127.0.0.1:1/v1", "model": "m", "api": "chat"}
    ).engine
    async with OpenAIClient(engine, base_url=url, transport=transport) as client:
        return await client.generate(REQUEST)


@pytest.mark.parametrize("transport", ["fast", "httpx"])
@pytest.mark.parametrize(
    ("fault", "approx"), [("reasoning", False), ("reasoning_no_details", True)]
)
async def test_reasoning_stream_ttft_ttfat_and_token_split(fault_server, transport, fault, approx):
    result = await one(fault_server.base_url(fault), transport)
    assert result.status == "ok", result.error
    think = reasoning_split(MAX_TOKENS)
    assert think == 3
    # Every reasoning and answer delta is a content chunk; the role-only chunk is not.
    assert result.content_events == MAX_TOKENS
    chunks = list(result.chunk_ns)
    assert result.t_first_ns == chunks[0]
    assert result.t_first_answer_ns == chunks[think]
    assert result.ttft_ms == (chunks[0] - result.t_send_ns) / 1e6
    assert result.ttfat_ms == (chunks[think] - result.t_send_ns) / 1e6
    # The pause sits between the last reasoning chunk and the first answer chunk.
    assert chunks[think] - chunks[think - 1] >= REASONING_PAUSE_S * 1e9
    assert result.ttfat_ms - result.ttft_ms >= REASONING_PAUSE_S * 1000
    assert result.reasoning_events == think
    assert (result.output_tokens, result.output_tokens_approx) == (MAX_TOKENS, False)
    assert (result.reasoning_tokens, result.reasoning_tokens_approx) == (think, approx)
    assert result.answer_tokens == MAX_TOKENS - think


async def test_a_stream_without_reasoning_has_ttfat_equal_to_ttft(fault_server):
    result = await one(fault_server.base_url("ok"), "fast")
    assert result.ok
    assert result.ttfat_ms == result.ttft_ms
    assert (result.reasoning_tokens, result.reasoning_tokens_approx) == (0, False)
    assert result.answer_tokens == result.output_tokens == MAX_TOKENS
