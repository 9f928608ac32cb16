"""Multi-turn sessions against real vLLM: each turn's prompt is the history by vLLM's count.

vLLM streams each chunk's token ids when asked (``return_token_ids``), so a completions session
resends exactly the ids the model produced; its usage then counts turn k's prompt as turn k - 1's
prompt, its reply and the new message.
"""

from collections import defaultdict

import pytest

from tests import factories
from tokenwatt.client.openai import OpenAIClient
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.session import Conversation
from tokenwatt.load.workload import build_workload
from tokenwatt.sweep import ProbePlan

pytestmark = [pytest.mark.anyio, pytest.mark.peer, pytest.mark.slow]

NEW_TOKENS = 16


async def test_turn_k_prompt_tokens_are_the_history_by_vllms_count(vllm_server):
    spec = factories.spec(
        engine={"endpoint": f"{vllm_server.base_url}/v1", "model": "tiny"},
        workload={
            "input_tokens": 48,
            "output_tokens": {"dist": "uniform", "min": 4, "max": 12},
            "seed": 5,
            "sessions": {"turns": 3, "think_time_s": 0.05, "new_tokens": NEW_TOKENS},
        },
        slo={"ttft_p99_ms": 60_000, "tpot_p99_ms": 60_000},
    )
    work = build_workload(spec, context_tokens=4096)
    conv = Conversation(work, 0, stream=99)
    async with OpenAIClient(spec.engine, base_url=f"{vllm_server.base_url}/v1") as client:
        answer = await client.generate(conv.first())
    assert answer.ok, answer.error
    assert answer.reply_token_ids is not None  # vLLM returned the reply's ids
    assert len(answer.reply_token_ids) == answer.output_tokens
    async with LoadGenerator(spec.engine, work, workers=1) as gen:
        record = await gen.probe(
            ProbePlan(phase="search", rate_rps=2.0, warmup_s=0.5, window_s=3.0),
            index=0,
            slo=spec.slo,
        )
    assert record.failed == 0, record.failure_examples
    assert record.sessions is not None
    assert record.sessions.cut == 0, record.sessions.cut_causes  # no reply lacked its ids
    table = record.requests
    assert table is not None
    assert table.session is not None
    assert table.turn is not None
    rows: dict[int, dict[int, int]] = defaultdict(dict)
    for row, (session, turn) in enumerate(zip(table.session, table.turn, strict=True)):
        rows[session][turn] = row
    pairs = 0
    for turns in rows.values():
        for k, row in turns.items():
            before = turns.get(k - 1)
            if before is not None:
                history = table.input_tokens[before] + table.output_tokens[before]
                assert table.input_tokens[row] == history + NEW_TOKENS
                pairs += 1
    assert pairs >= 3
