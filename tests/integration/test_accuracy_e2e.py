"""The accuracy runner end to end, through the load generator's client, against real servers.

Real vLLM serves a random-weight model, so its answers are wrong: these tests check the
pipeline (prompts sent, every completion kept and scored, counts that add up, failures counted
as wrong), not the score.
"""

from __future__ import annotations

import anyio
import pytest

from tokenwatt.accuracy import load_suite, run_accuracy
from tokenwatt.client.openai import OpenAIClient
from tokenwatt.schema.spec import AccuracySpec, EngineSpec
from tokenwatt.sim.launch import SimSettings, launch

pytestmark = pytest.mark.peer


def accuracy_spec(**kw) -> AccuracySpec:
    base = {
        "suite": "specs/suites/gsm8k-200.jsonl",
        "limit": 4,
        "seeds": 2,
        "shots": 2,
        "max_tokens": 16,
        "concurrency": 4,
    }
    base.update(kw)
    return AccuracySpec.model_validate(base)


def run(engine: EngineSpec, spec: AccuracySpec, repo, *, meaningful: bool, base_url=None):
    suite = load_suite(repo / spec.suite)
    seen: list[tuple[int, int]] = []

    async def go():
        async with OpenAIClient(engine, base_url=base_url, request_timeout_s=60) as client:
            return await run_accuracy(
                client,
                spec,
                suite,
                suite_path=spec.suite,
                meaningful=meaningful,
                progress=lambda done, total: seen.append((done, total)),
            )

    return anyio.run(go), seen


def check_audit_trail(evidence, spec, repo):
    suite = [i for i in load_suite(repo / spec.suite) if i.split == "test"][: spec.limit]
    assert len(evidence.items) == spec.limit * spec.seeds
    assert [s.seed for s in evidence.per_seed] == list(range(spec.seeds))
    for seed_score in evidence.per_seed:
        items = [i for i in evidence.items if i.seed == seed_score.seed]
        assert [i.id for i in items] == [q.id for q in suite]
        assert [i.gold for i in items] == [q.answer for q in suite]
        assert seed_score.answered + seed_score.failed == spec.limit
        assert seed_score.correct == sum(i.correct for i in items)
        assert seed_score.score == pytest.approx(seed_score.correct / spec.limit * 100)
    for item in evidence.items:
        if item.error is None:
            assert item.completion is not None
        else:
            assert item.correct is False
    scores = [s.score for s in evidence.per_seed]
    assert evidence.score == pytest.approx(sum(scores) / len(scores))
    assert evidence.spread_pts == pytest.approx(max(scores) - min(scores))


def test_against_real_vllm(vllm_server, repo):
    engine = EngineSpec(endpoint=f"{vllm_server.base_url}/v1", model="tiny")
    spec = accuracy_spec()
    evidence, progress = run(engine, spec, repo, meaningful=True)
    check_audit_trail(evidence, spec, repo)
    # every question got a completion back from the real server
    assert all(s.failed == 0 for s in evidence.per_seed)
    assert all(i.completion for i in evidence.items)
    assert evidence.meaningful is True
    assert progress[-1] == (8, 8)


def test_a_wrong_model_name_fails_every_question_and_scores_zero(vllm_server, repo):
    engine = EngineSpec(endpoint=f"{vllm_server.base_url}/v1", model="no-such-model")
    spec = accuracy_spec(seeds=1, limit=2)
    evidence, _ = run(engine, spec, repo, meaningful=True)
    check_audit_trail(evidence, spec, repo)
    assert evidence.per_seed[0].failed == 2
    assert evidence.score == 0.0
    assert all((i.error or "").startswith("HTTP 404") for i in evidence.items)


def test_against_the_simulator_is_marked_not_meaningful(repo):
    settings = SimSettings(
        config_file=repo / "specs/models/Qwen__Qwen3-8B/config.json",
        served_model_name="Qwen/Qwen3-8B",
    )
    with launch(settings) as sim:
        engine = EngineSpec(endpoint="sim", model="Qwen/Qwen3-8B")
        spec = accuracy_spec(limit=3, seeds=1, shots=5, max_tokens=64)
        evidence, _ = run(engine, spec, repo, meaningful=False, base_url=sim.base_url)
    check_audit_trail(evidence, spec, repo)
    assert evidence.meaningful is False
    assert evidence.per_seed[0].failed == 0
