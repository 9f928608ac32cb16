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
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import build_workload
from tokenwatt.schema.spec import SloSpec
from tokenwatt.sweep import ProbePlan

pytestmark = pytest.mark.anyio

MAX_TOKENS = 7
PAUSE_MS = REASONING_PAUSE_S * 1000 - 5
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
    # The pause sits between the last reasoning chunk and the first answer chunk (less a
    # little: the reasoning chunks' arrival may lag their write by up to a scheduler tick).
    assert chunks[think] - chunks[think - 1] >= PAUSE_MS * 1e6
    assert result.ttfat_ms - result.ttft_ms >= PAUSE_MS
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


async def test_a_probe_of_a_reasoning_server_reports_ttfat_and_reasoning_tokens(fault_server):
    spec = factories.spec(
        engine={"endpoint": fault_server.base_url("reasoning"), "model": "m", "api": "chat"},
        workload={"input_tokens": 8, "output_tokens": MAX_TOKENS},
        measurement={"max_concurrency": 1000},
    )
    work = build_workload(spec, context_tokens=4096)
    async with LoadGenerator(spec.engine, work, request_timeout_s=5.0, in_process=True) as gen:
        record = await gen.probe(
            ProbePlan(phase="search", rate_rps=20.0, warmup_s=0.2, window_s=1.0),
            index=0,
            slo=SloSpec(ttft_p99_ms=100_000, tpot_p99_ms=100_000),
        )
    n = record.window_requests
    assert n > 5
    assert record.ok == n
    table = record.requests
    assert table is not None
    assert table.ttfat_ms is not None
    ttfat = record.ttfat_ms
    assert ttfat is not None
    assert ttfat.p50 is not None
    assert record.ttft_ms.p50 is not None
    assert table.reasoning_tokens == [reasoning_split(MAX_TOKENS)] * n
    assert record.reasoning_tokens == n * reasoning_split(MAX_TOKENS)
    assert record.approximate_reasoning_tokens == 0
    for ttft, answer in zip(table.ttft_ms, table.ttfat_ms, strict=True):
        assert ttft is not None
        assert answer is not None
        assert answer - ttft >= PAUSE_MS
    assert ttfat.p50 >= record.ttft_ms.p50 + PAUSE_MS
    assert ttfat.count == n
