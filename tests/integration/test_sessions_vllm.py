"""Multi-turn sessions against real vLLM: each turn's prompt is the history by vLLM's count.

vLLM streams each chunk's token ids when asked (``return_token_ids``), so a completions session
resends exactly the ids the model produced; its usage then counts turn k's prompt as turn k - 1's
prompt, its reply and the new message. A chat session resends the history as messages, each
reply as an assistant message; vLLM's ``/tokenize`` of those messages (its chat template applied)
is the count its usage must give. Each turn waits its think time after the previous reply, and a
turn vLLM refuses (a history past its 4,096-token context) cuts its session, recorded as such.
"""

import httpx
import pytest

from tests import factories
from tests.sessions_checks import (
    assert_refused_third_turns_cut_their_sessions,
    by_session,
    think_time_gaps,
)
from tokenwatt.client.openai import OpenAIClient
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.session import Conversation
from tokenwatt.load.workload import build_workload
from tokenwatt.schema.run import ProbeRecord
from tokenwatt.sweep import ProbePlan

pytestmark = [pytest.mark.anyio, pytest.mark.peer, pytest.mark.slow]

NEW_TOKENS = 16
THINK_S = {"dist": "uniform", "min": 0.05, "max": 0.3}


def sessions_spec(base_url: str, *, api: str = "completions", **sessions):
    return factories.spec(
        engine={"endpoint": f"{base_url}/v1", "model": "tiny", "api": api},
        workload={
            "input_tokens": sessions.pop("input_tokens", 48),
            "output_tokens": {"dist": "uniform", "min": 4, "max": 12},
            "seed": 5,
            "sessions": {"turns": 3, "think_time_s": THINK_S, "new_tokens": NEW_TOKENS} | sessions,
        },
        slo={"ttft_p99_ms": 60_000, "tpot_p99_ms": 60_000},
    )


async def session_probe(spec, work, *, window_s: float = 3.0) -> ProbeRecord:
    async with LoadGenerator(spec.engine, work, workers=1) as gen:
        return await gen.probe(
            ProbePlan(phase="search", rate_rps=2.0, warmup_s=0.5, window_s=window_s),
            index=0,
            slo=spec.slo,
        )


@pytest.mark.parametrize("api", ["completions", "chat"])
async def test_turn_k_prompt_tokens_are_the_history_by_vllms_count(vllm_server, api):
    url = vllm_server.base_url
    spec = sessions_spec(url, api=api)
    work = build_workload(spec, context_tokens=4096)
    conv = Conversation(work, 0, stream=99)
    async with (
        OpenAIClient(spec.engine, base_url=f"{url}/v1") as client,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        first = conv.first()
        answer = await client.generate(first)
        assert answer.ok, answer.error
        second = conv.after(answer)
        assert not isinstance(second, str)
        again = await client.generate(second)
        assert again.ok, again.error
        if api == "completions":
            assert answer.reply_token_ids is not None  # vLLM returned the reply's ids
            assert len(answer.reply_token_ids) == answer.output_tokens
            assert again.input_tokens == answer.input_tokens + answer.output_tokens + NEW_TOKENS
        else:
            assert second.messages is not None
            assert second.messages[1] == ("assistant", answer.reply_text)
            body = {
                "model": "tiny",
                "messages": [{"role": r, "content": t} for r, t in second.messages],
            }
            counted = await http.post("/tokenize", json=body)
            counted.raise_for_status()
            assert again.input_tokens == counted.json()["count"]
            assert again.input_tokens > answer.input_tokens + answer.output_tokens
    record = await session_probe(spec, work)
    assert record.failed == 0, record.failure_examples
    assert record.sessions is not None
    assert record.sessions.cut == 0, record.sessions.cut_causes  # no reply lacked its ids
    table = record.requests
    assert table is not None
    if api == "completions":
        pairs = 0
        for turns in by_session(table).values():
            for k, row in turns.items():
                before = turns.get(k - 1)
                if before is not None:
                    history = table.input_tokens[before] + table.output_tokens[before]
                    assert table.input_tokens[row] == history + NEW_TOKENS
                    pairs += 1
        assert pairs >= 3
    assert think_time_gaps(table, work) >= 3


async def test_a_turn_vllm_refuses_cuts_its_session(vllm_server):
    # 1,800-token first prompts and 1,800-token new messages: the second turn fits vLLM's 4,096
    # tokens, the third (about 5,400 with the replies) does not, and vLLM answers 400. The harness
    # is not told the context (context_tokens None), so it sends the turn and the failure cuts
    # the session: counted as cut, its later turns unsent, the failed window turns +inf.
    spec = sessions_spec(vllm_server.base_url, input_tokens=1800, turns=4, new_tokens=1800)
    work = build_workload(spec, context_tokens=None)
    record = await session_probe(spec, work, window_s=2.0)
    assert_refused_third_turns_cut_their_sessions(record)
