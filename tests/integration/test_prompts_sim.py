"""Real ShareGPT prompts against the simulator over HTTP: lengths are the server's count.

The simulator counts a chat request as its template overhead plus 4 characters a token of each
message (``tokenwatt.sim.api.chat_prompt_tokens``), a completion's text prompt as 4 characters
a token; tokenwatt's own estimate ignores the template, so the recorded input tokens must be
the server's, not the estimate.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenwatt.client.openai import OpenAIClient
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import build_workload
from tokenwatt.plan import with_spec
from tokenwatt.sim.api import ChatMessage, chat_prompt_tokens, text_prompt_tokens
from tokenwatt.sim.launch import launch, settings_from_spec
from tokenwatt.store import load_spec
from tokenwatt.sweep import ProbePlan

pytestmark = pytest.mark.anyio


def loaded_with_prompts(repo: Path, shared: Path, api: str):
    loaded = load_spec(repo / "tests/data/tiny-sim.spec.yaml")
    spec = loaded.spec
    prompts = shared / "data" / "sharegpt" / "ShareGPT_V3_filtered_500.json"
    engine = spec.engine.model_copy(update={"api": api})
    workload = spec.workload.model_copy(update={"input_tokens": None, "prompts": str(prompts)})
    return with_spec(loaded, spec.model_copy(update={"engine": engine, "workload": workload}))


def server_count(api: str, text: str) -> int:
    if api == "chat":
        return chat_prompt_tokens([ChatMessage(role="user", content=text)])[0]
    return text_prompt_tokens(text)


@pytest.mark.parametrize("api", ["chat", "completions"])
async def test_input_tokens_are_the_servers_count(repo, shared, api):
    loaded = loaded_with_prompts(repo, shared, api)
    work = build_workload(loaded.spec, context_tokens=4096)
    requests = [work.request(i, stream=0) for i in range(6)]
    with launch(settings_from_spec(loaded)) as sim:
        async with OpenAIClient(loaded.spec.engine, base_url=sim.base_url) as client:
            results = [await client.generate(r) for r in requests]
    for request, result in zip(requests, results, strict=True):
        assert result.ok, result.error
        assert request.prompt_text is not None
        assert result.input_tokens == server_count(api, request.prompt_text)
        assert result.input_tokens_sent == request.input_tokens  # the estimate, kept apart
    if api == "chat":  # the template's tokens: the server counts more than the estimate
        assert all(r.input_tokens > q.input_tokens for r, q in zip(results, requests, strict=True))


async def test_a_probe_of_real_prompts_records_the_servers_lengths(repo, shared):
    loaded = loaded_with_prompts(repo, shared, "chat")
    spec = loaded.spec
    work = build_workload(spec, context_tokens=4096)
    with launch(settings_from_spec(loaded)) as sim:
        async with LoadGenerator(spec.engine, work, base_url=sim.base_url, workers=1) as gen:
            plan = ProbePlan(phase="search", rate_rps=8.0, warmup_s=0.5, window_s=2.0)
            record = await gen.probe(plan, index=0, slo=spec.slo)
    assert record.window_requests > 5
    assert record.failed == 0, record.failure_examples
    table = record.requests
    assert table is not None
    counts = {server_count("chat", p) for p in work.prompts or []}
    assert set(table.input_tokens) <= counts
    assert len(set(table.input_tokens)) > 1  # real prompts differ in length
