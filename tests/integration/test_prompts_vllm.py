"""Real ShareGPT prompts against real vLLM: each request's input length is vLLM's own count.

tokenwatt sends the prompts as text and cannot count their tokens (it has no tokenizer, and a
chat request adds the model's template); the length it records must be the server's
(``usage.prompt_tokens``), here checked against vLLM's ``/tokenize`` of the same prompt, and its
own estimate kept apart. (The same against the simulator, whose counting rule is known:
tests/integration/test_prompts_sim.py.)
"""

from __future__ import annotations

import httpx
import pytest

from tests import factories
from tokenwatt.client.openai import OpenAIClient
from tokenwatt.load.workload import build_workload

pytestmark = [pytest.mark.anyio, pytest.mark.peer, pytest.mark.slow]


@pytest.mark.parametrize("api", ["completions", "chat"])
async def test_real_prompts_are_counted_by_vllm(vllm_server, shared, api):
    url = vllm_server.base_url
    spec = factories.spec(
        engine={"endpoint": f"{url}/v1", "model": "tiny", "api": api, "ignore_eos": True},
        workload={
            "prompts": str(shared / "data" / "sharegpt" / "ShareGPT_V3_filtered_500.json"),
            "output_tokens": 4,
            "seed": 3,
        },
        slo={"ttft_p99_ms": 60_000, "tpot_p99_ms": 60_000},
    )
    work = build_workload(spec, context_tokens=2048)
    requests = [work.request(i, stream=0) for i in range(4)]
    async with OpenAIClient(spec.engine) as client:
        results = [await client.generate(r) for r in requests]
    async with httpx.AsyncClient(base_url=url, timeout=60, trust_env=False) as http:
        for request, result in zip(requests, results, strict=True):
            assert result.ok, result.error
            text = request.prompt_text
            assert text is not None
            body: dict[str, object] = {"model": "tiny"}
            if api == "chat":
                body["messages"] = [{"role": "user", "content": text}]
            else:
                body["prompt"] = text
            answer = await http.post("/tokenize", json=body)
            answer.raise_for_status()
            assert result.input_tokens == answer.json()["count"], (api, text[:80])
            assert result.input_tokens_sent == request.input_tokens  # the estimate, kept apart
    assert len({r.input_tokens for r in results}) > 1  # real prompts differ in length
