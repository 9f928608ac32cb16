"""Multi-turn sessions against the simulator over HTTP: histories, think times, cut sessions.

The simulator answers ``return_token_ids`` on streamed completions as vLLM does, counts token-id
prompts exactly and refuses a prompt that does not fit its ``max_model_len`` with HTTP 400: a
session whose history outgrows it fails mid-session, as it would against vLLM.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.measure_cli import (
    load_valid_run,
    measure_argv,
    run_measure,
    tiny_sim_spec_data,
    write_spec,
)
from tests.sessions_checks import (
    assert_refused_third_turns_cut_their_sessions,
    by_session,
    think_time_gaps,
)
from tokenwatt.client.openai import OpenAIClient
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.session import Conversation
from tokenwatt.load.workload import build_workload
from tokenwatt.plan import with_spec
from tokenwatt.schema.run import ProbeRecord
from tokenwatt.schema.spec import SessionSpec, UniformTokens
from tokenwatt.sim.api import TOKEN_ID_BASE, ChatMessage, chat_prompt_tokens
from tokenwatt.sim.launch import launch, settings_from_spec
from tokenwatt.store import load_spec
from tokenwatt.sweep import ProbePlan

pytestmark = pytest.mark.anyio

NEW_TOKENS = 24


def loaded_with_sessions(repo: Path, *, api: str = "completions", max_model_len=None, **session):
    loaded = load_spec(repo / "tests/data/tiny-sim.spec.yaml")
    spec = loaded.spec
    assert spec.engine.sim is not None
    sim = spec.engine.sim.model_copy(update={"max_model_len": max_model_len})
    engine = spec.engine.model_copy(update={"api": api, "sim": sim})
    sessions = SessionSpec.model_validate({"turns": 3, "new_tokens": NEW_TOKENS, **session})
    workload = spec.workload.model_copy(
        update={"sessions": sessions, "output_tokens": UniformTokens(min=8, max=24)}
    )
    return with_spec(loaded, spec.model_copy(update={"engine": engine, "workload": workload}))


async def probe(loaded, *, context_tokens: int | None, rate_rps: float = 4.0) -> ProbeRecord:
    spec = loaded.spec
    work = build_workload(spec, context_tokens=context_tokens)
    with launch(settings_from_spec(loaded)) as sim:
        async with LoadGenerator(spec.engine, work, base_url=sim.base_url, workers=1) as gen:
            plan = ProbePlan(phase="search", rate_rps=rate_rps, warmup_s=0.5, window_s=2.0)
            return await gen.probe(plan, index=0, slo=spec.slo)


async def test_turn_k_prompt_tokens_are_the_history_by_the_servers_count(repo):
    record = await probe(loaded_with_sessions(repo, think_time_s=0.05), context_tokens=4096)
    assert record.failed == 0, record.failure_examples
    table = record.requests
    assert table is not None
    pairs = 0
    for turns in by_session(table).values():
        for k, row in turns.items():
            before = turns.get(k - 1)
            if before is None:
                continue
            history = table.input_tokens[before] + table.output_tokens[before]
            assert table.input_tokens[row] == history + NEW_TOKENS
            pairs += 1
    assert pairs >= 5
    assert len(set(table.output_tokens)) > 1  # replies differ in length: the history is theirs
    sessions = record.sessions
    assert sessions is not None
    assert sessions.started >= 8
    assert sessions.completed >= 3
    assert sessions.cut == 0
    assert sessions.mean_turns == 3.0


async def test_each_turn_waits_its_think_time_after_the_previous_reply(repo):
    loaded = loaded_with_sessions(
        repo, turns=4, think_time_s={"dist": "uniform", "min": 0.1, "max": 0.4}
    )
    record = await probe(loaded, context_tokens=4096)
    table = record.requests
    assert table is not None
    work = build_workload(loaded.spec, context_tokens=4096)
    assert think_time_gaps(table, work) >= 5
    # The window holds the turns scheduled inside it, whichever session they belong to: later
    # turns of sessions that started in the warm-up are in, turns due after the window out.
    assert all(0.0 <= t < 2.0 for t in table.t_sched_s)
    assert any(0 not in turns for turns in by_session(table).values())
    assert record.sessions is not None
    assert record.sessions.started > sum(0 in t for t in by_session(table).values())


async def test_a_failed_turn_cuts_its_session_and_its_later_turns_are_counted_unsent(repo):
    # 64-token first prompts, 8-24 token replies, 24-token new messages: the third turn's
    # history (about 150 tokens) no longer fits a 130-token model, and the server refuses it.
    loaded = loaded_with_sessions(repo, turns=4, max_model_len=130)
    record = await probe(loaded, context_tokens=None)  # the harness does not know the context
    assert_refused_third_turns_cut_their_sessions(record)


async def test_a_session_the_context_cannot_hold_ends_there_without_a_failure(repo):
    loaded = loaded_with_sessions(repo, turns=4, max_model_len=130)
    record = await probe(loaded, context_tokens=130)
    table = record.requests
    assert table is not None
    assert table.turn is not None
    assert record.failed == 0, record.failure_examples
    assert max(table.turn) <= 2
    sessions = record.sessions
    assert sessions is not None
    assert sessions.cut == 0
    assert sessions.context_ended >= 3


@pytest.mark.parametrize("api", ["completions", "chat"])
async def test_the_history_holds_the_servers_own_reply(repo, api):
    loaded = loaded_with_sessions(repo, api=api)
    spec = loaded.spec
    work = build_workload(spec, context_tokens=4096)
    conv = Conversation(work, 0, stream=0)
    with launch(settings_from_spec(loaded)) as sim:
        async with OpenAIClient(spec.engine, base_url=sim.base_url) as client:
            first = conv.first()
            answer = await client.generate(first)
            assert answer.ok, answer.error
            second = conv.after(answer)
            assert not isinstance(second, str)
            again = await client.generate(second)
    assert again.ok, again.error
    assert answer.reply_text
    assert len(answer.reply_text.split()) == answer.output_tokens
    if api == "completions":
        ids = answer.reply_token_ids
        assert ids is not None
        assert len(ids) == answer.output_tokens
        assert all(i >= TOKEN_ID_BASE for i in ids)  # the simulator's reply ids, not ours
        sent = list(second.prompt_ids or [])
        assert sent[: len(first.prompt_ids or []) + len(ids)] == [*(first.prompt_ids or []), *ids]
        assert again.input_tokens == answer.input_tokens + answer.output_tokens + NEW_TOKENS
    else:
        assert second.messages is not None
        assert second.messages[1] == ("assistant", answer.reply_text)
        messages = [ChatMessage(role=r, content=t) for r, t in second.messages]
        assert again.input_tokens == chat_prompt_tokens(messages)[0]


def test_a_run_of_sessions_end_to_end_counts_sessions_per_second(repo: Path, tmp_path: Path):
    data = tiny_sim_spec_data(repo)
    data["workload"]["sessions"] = {
        "turns": 3,
        "think_time_s": {"dist": "exponential", "mean": 0.1},
    }
    data["sweep"] = {"rates": [3]}
    spec = write_spec(tmp_path / "spec.yaml", data)
    out = tmp_path / "sessions.json"
    done = run_measure(measure_argv(spec, out), cwd=repo)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "3.000 sessions/s" in done.stdout + done.stderr
    run = load_valid_run(out, cwd=repo)
    assert run.spec.workload.sessions is not None
    for record in run.probes:
        assert record.sessions is not None
        assert record.sessions.started > 0
        assert record.requests is not None
        assert record.requests.turn is not None
        assert max(record.requests.turn) == 2


async def test_a_turn_tokenwatt_fails_to_build_cuts_its_session_and_the_probe_still_ends(
    repo, monkeypatch, caplog
):
    # A bug building a next turn used to escape into the transport's callback: the window
    # never completed and the probe waited for it forever. In process, so the bug can be planted.
    real_after = Conversation.after

    def after(self, reply):
        if self.index == 1:
            raise RuntimeError("planted bug")
        return real_after(self, reply)

    monkeypatch.setattr(Conversation, "after", after)
    loaded = loaded_with_sessions(repo, think_time_s=0.05)
    spec = loaded.spec
    work = build_workload(spec, context_tokens=4096)
    with launch(settings_from_spec(loaded)) as sim:
        async with LoadGenerator(spec.engine, work, base_url=sim.base_url, in_process=True) as gen:
            plan = ProbePlan(phase="search", rate_rps=4.0, warmup_s=0.0, window_s=2.0)
            with anyio.fail_after(60):
                record = await gen.probe(plan, index=0, slo=spec.slo)
    assert record.sessions is not None
    assert record.sessions.cut_causes == {"harness_error": 1}, record.sessions
    assert record.sessions.unsent_turns == 2  # turns 1 and 2 of the 3
    assert record.client_bound
    assert any("error in tokenwatt itself" in r for r in record.client_bound_reasons)
    assert not record.slo_pass
    assert "session 1: tokenwatt failed to build turn 1" in caplog.text
    assert "planted bug" in caplog.text  # the traceback is logged
