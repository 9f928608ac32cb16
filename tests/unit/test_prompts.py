"""Real prompts (workload.prompts): the ShareGPT file read, validated and walked per stream."""

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests import factories
from tokenwatt.errors import SpecError
from tokenwatt.load.workload import build_workload, read_prompts
from tokenwatt.schema.spec import Spec
from tokenwatt.sim.api import text_prompt_tokens


@pytest.fixture(scope="module")
def sharegpt(shared: Path) -> Path:
    return shared / "data" / "sharegpt" / "ShareGPT_V3_filtered_500.json"


def workload(path: Path, *, api="chat", context_tokens=4096, **work):
    spec = factories.spec(
        engine={"endpoint": "http://127.0.0.1:1/v1", "model": "m", "api": api},
        workload={"prompts": str(path), "output_tokens": 16, **work},
    )
    return build_workload(spec, context_tokens=context_tokens)


def test_the_sharegpt_file_gives_its_first_human_turns(sharegpt):
    prompts = read_prompts(sharegpt)
    assert len(prompts) == 500
    assert prompts[0] == "How to stop automatic updates from the WSUS Server to a target machine"
    assert prompts[3] == "Suggest subchapters for chapter 5"


def test_each_stream_walks_every_prompt_once_before_repeating(sharegpt):
    work = workload(sharegpt)
    prompts = read_prompts(sharegpt)
    first = [work.request(i, stream=0).prompt_text for i in range(500)]
    assert sorted(first) == sorted(prompts)
    assert work.request(500, stream=0).prompt_text == first[0]
    other = [work.request(i, stream=1).prompt_text for i in range(500)]
    assert other != first  # its own order
    # same seed, same requests: a fresh workload (another configuration) sends the same
    again = workload(sharegpt)
    assert [again.request(i, stream=0).prompt_text for i in range(20)] == first[:20]


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_requests_carry_the_text_and_the_estimate(sharegpt, api):
    work = workload(sharegpt, api=api)
    request = work.request(7, stream=2)
    assert request.prompt_ids is None
    assert request.prompt_text is not None
    # the estimate clips outputs; the run records the server's count
    assert request.input_tokens == text_prompt_tokens(request.prompt_text)
    assert request.max_tokens == 16
    assert work.lengths(7, stream=2) == (request.input_tokens, 16)


def test_prompts_too_long_for_the_context_are_left_out(sharegpt, caplog):
    prompts = read_prompts(sharegpt)
    room = 200 - 32  # the chat template's margin
    fits = [p for p in prompts if text_prompt_tokens(p) <= room - 1]
    assert 0 < len(fits) < len(prompts)
    work = workload(sharegpt, context_tokens=200)
    assert work.prompts == fits
    assert f"{len(prompts) - len(fits)} of 500 prompts are too long" in caplog.text
    with pytest.raises(SpecError, match="no prompt fits the model's context of 5 tokens"):
        workload(sharegpt, context_tokens=5)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not JSON"),
        ("[]", "expected a ShareGPT JSON array"),
        ('{"conversations": []}', "expected a ShareGPT JSON array"),
        ('[{"id": "x"}]', "entry 0: not a ShareGPT entry"),
        ('[{"conversations": [{"from": "gpt", "value": "hi"}]}]', "entry 0: no turn 'from'"),
        (
            '[{"conversations": [{"from": "human", "value": "a"}]}, {"conversations": [{"from":'
            ' "human", "value": " "}]}]',
            "entry 1: its first human turn has no text",
        ),
    ],
)
def test_a_bad_prompts_file_is_named_with_the_problem(tmp_path, content, needle):
    path = tmp_path / "prompts.json"
    path.write_text(content)
    with pytest.raises(SpecError) as info:
        read_prompts(path)
    assert f"workload.prompts: {path}" in str(info.value)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("work", "needle"),
    [
        ({"input_tokens": 64}, "input_tokens and prompts both set the input"),
        ({"prefix": {"groups": 2, "shared_tokens": 10}}, "prefix and prompts both shape"),
    ],
)
def test_prompts_refuse_what_contradicts_them(work, needle):
    data = factories.spec_dict(workload={"prompts": "p.json", **work})
    with pytest.raises(ValidationError, match=needle):
        Spec.model_validate(data)


def test_a_trace_with_hash_ids_needs_trace_prefix_false(sharegpt, tmp_path):
    trace = tmp_path / "t.jsonl"
    rows = [{"input_length": 600, "output_length": 5, "hash_ids": [1, 2]}]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(SpecError, match="trace_prefix: false"):
        workload(sharegpt, trace=str(trace), output_tokens=None)
    work = workload(sharegpt, trace=str(trace), output_tokens=None, trace_prefix=False)
    assert work.request(0).max_tokens == 5  # the trace's output length


def test_a_missing_prompts_file_is_named_when_the_spec_loads(tmp_path):
    from tokenwatt.store import load_spec

    data = factories.spec_dict(workload={"prompts": "nowhere.json", "output_tokens": 8})
    path = tmp_path / "s.spec.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError, match=r"workload.prompts: file not found: .*nowhere.json"):
        load_spec(path)
    (tmp_path / "nowhere.json").write_text("[]")
    assert load_spec(path).prompts_file == tmp_path / "nowhere.json"
