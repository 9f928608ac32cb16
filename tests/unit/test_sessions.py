"""Multi-turn sessions: the spec's checks and a conversation's history (pure; HTTP elsewhere)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

from tests import factories
from tokenwatt import store
from tokenwatt.client.openai import RequestResult
from tokenwatt.errors import SpecError
from tokenwatt.load.session import Conversation, draw_seconds
from tokenwatt.load.workload import build_workload
from tokenwatt.schema.spec import ExponentialSeconds, UniformSeconds
from tokenwatt.sim.launch import settings_from_spec
from tokenwatt.sim.virtual import VirtualServer

SESSIONS = {"turns": 3, "think_time_s": 0.5, "new_tokens": 10}


def session_spec(api: str = "completions", **workload):
    work = {"input_tokens": 20, "output_tokens": 5, "sessions": SESSIONS, **workload}
    engine = {"endpoint": "http://127.0.0.1:8000/v1", "model": "tiny", "api": api}
    return factories.spec(workload=work, engine=engine)


def reply(turn: int, *, ids: list[int] | None, text: str = "", prompt: int = 0, out: int = 5):
    return RequestResult(
        index=7,
        t_send_ns=0,
        t_end_ns=1,
        status="ok",
        turn=turn,
        output_tokens=out,
        input_tokens=prompt,
        reply_text=text,
        reply_token_ids=ids,
    )


def test_turn_k_sends_the_history_with_the_servers_reply_ids_then_a_new_message():
    work = build_workload(session_spec(), context_tokens=None)
    conv = Conversation(work, 7, stream=2)
    first = conv.first()
    assert (first.turn, first.keep_reply) == (0, True)
    assert first.prompt_ids == work.request(7, stream=2).prompt_ids  # turn 0: the request
    prompt0 = list(first.prompt_ids or [])
    second = conv.after(reply(0, ids=[11, 12, 13, 14, 15]))
    assert not isinstance(second, str)
    ids = list(second.prompt_ids or [])
    assert ids[:25] == [*prompt0, 11, 12, 13, 14, 15]
    assert len(ids) == second.input_tokens == 20 + 5 + 10
    third = conv.after(reply(1, ids=[21, 22, 23, 24, 25]))
    assert not isinstance(third, str)
    assert list(third.prompt_ids or [])[:40] == [*ids, 21, 22, 23, 24, 25]
    assert conv.after(reply(2, ids=[1])) == "completed"


def test_the_same_seed_makes_the_same_sessions_and_streams_differ():
    work = build_workload(session_spec(), context_tokens=None)

    def turns(stream: int):
        conv = Conversation(work, 3, stream=stream)
        conv.first()
        nxt = conv.after(reply(0, ids=[1, 2, 3, 4, 5]))
        assert not isinstance(nxt, str)
        return list(nxt.prompt_ids or [])

    assert turns(0) == turns(0)
    assert turns(0) != turns(1)


def test_a_completions_reply_without_token_ids_ends_the_session():
    work = build_workload(session_spec(), context_tokens=None)
    conv = Conversation(work, 0, stream=0)
    conv.first()
    assert conv.after(reply(0, ids=None, text=" some text")) == "no_token_ids"


def test_chat_history_holds_the_reply_text_as_an_assistant_message():
    work = build_workload(session_spec(api="chat"), context_tokens=None)
    conv = Conversation(work, 0, stream=0)
    first = conv.first()
    nxt = conv.after(reply(0, ids=None, text=" the reply", prompt=30))
    assert not isinstance(nxt, str)
    assert nxt.messages is not None
    assert len(nxt.messages) == 3
    assert nxt.messages[0] == ("user", first.prompt_text)
    assert nxt.messages[1] == ("assistant", " the reply")
    assert nxt.messages[2][0] == "user"
    assert len(nxt.messages[2][1].split()) == 10


def test_a_turn_that_cannot_fit_the_context_ends_the_session_and_one_that_can_is_shortened():
    work = build_workload(session_spec(), context_tokens=39)
    conv = Conversation(work, 0, stream=0)
    conv.first()
    nxt = conv.after(reply(0, ids=[1] * 5))  # 20 + 5 + 10 = 35 tokens of prompt: 4 left
    assert not isinstance(nxt, str)
    assert nxt.max_tokens == 4
    assert conv.after(reply(1, ids=[1] * 4)) == "context"  # 35 + 4 + 10 > 39


def test_think_times_are_drawn_per_turn_within_their_distribution():
    rng = np.random.default_rng(0)
    draws = [draw_seconds(UniformSeconds(min=0.2, max=0.4), rng) for _ in range(200)]
    assert 0.2 <= min(draws) < 0.22
    assert 0.38 < max(draws) <= 0.4
    mean = np.mean([draw_seconds(ExponentialSeconds(mean=2.0), rng) for _ in range(4000)])
    assert 1.85 < mean < 2.15
    work = build_workload(
        session_spec(
            sessions={**SESSIONS, "think_time_s": {"dist": "uniform", "min": 1, "max": 2}}
        ),
        context_tokens=None,
    )
    conv = Conversation(work, 0, stream=0)
    times = [conv.think_time_s(k) for k in (1, 2)]
    assert times == [conv.think_time_s(k) for k in (1, 2)]
    assert times[0] != times[1]
    assert all(1 <= t <= 2 for t in times)


@pytest.mark.parametrize(
    ("sections", "needle"),
    [
        ({"sweep": {"early_stop": True}}, "sweep.early_stop with workload.sessions"),
        ({"sweep": {"strategy": "adaptive"}}, "sweep.strategy 'adaptive' with workload.sessions"),
        ({"sweep": {"ramp": True}}, "sweep.ramp with workload.sessions"),
    ],
)
def test_the_early_stop_the_adaptive_sweep_and_the_ramp_are_refused_with_sessions(
    tmp_path: Path, sections, needle
):
    data = factories.spec_dict(
        workload={"input_tokens": 20, "output_tokens": 5, "sessions": SESSIONS}, **sections
    )
    path = tmp_path / "s.spec.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=needle):
        store.load_spec(path)


def test_session_fields_are_checked():
    with pytest.raises(ValidationError, match="sessions and prompts"):
        factories.spec(workload={"prompts": "x.json", "sessions": SESSIONS})
    with pytest.raises(ValidationError, match="turns must stay within 1000"):
        factories.spec(
            workload={"sessions": {"turns": {"dist": "lognormal", "median": 3, "p90": 9}}}
        )
    with pytest.raises(ValidationError, match="sessions.think_time_s"):
        factories.spec(workload={"sessions": {"turns": 2, "think_time_s": -1}})
    with pytest.raises(ValidationError, match="extra"):
        factories.spec(workload={"sessions": {"turns": 2, "think": 1}})


def test_virtual_time_refuses_sessions_saying_what_to_do(repo):
    loaded = store.load_spec(repo / "tests/data/tiny-sim.spec.yaml")
    spec = session_spec()
    config = settings_from_spec(loaded).build()
    work = build_workload(spec, context_tokens=None)
    with pytest.raises(SpecError, match="virtual time .* does not simulate multi-turn sessions"):
        VirtualServer(config, work, request_timeout_s=1)
