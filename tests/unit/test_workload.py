import json
import math
import statistics

import numpy as np
import pytest

from tests import factories
from tests.measure_cli import write_spec
from tokenwatt import store
from tokenwatt.client.openai import request_body
from tokenwatt.errors import SpecError
from tokenwatt.load import workload as wl
from tokenwatt.load.workload import build_workload

AZURE = "data/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
MOONCAKE = "data/traces/mooncake_fast25/conversation_trace.jsonl"


def spec(**workload):
    return factories.spec(workload={"trace": "chat-mix-v1", **workload})


def test_lognormal_fit_hand_worked():
    mu, sigma = wl.lognormal_params(1024, 4096)
    assert mu == pytest.approx(6.931471805599453)  # ln 1024
    assert sigma == pytest.approx(1.0817312)  # ln 4 / 1.2815515655446004
    # the fit reproduces both quantiles exactly
    assert math.exp(mu) == pytest.approx(1024)
    assert math.exp(mu + sigma * wl.Z90) == pytest.approx(4096)
    with pytest.raises(ValueError, match="median < p90"):
        wl.lognormal_params(10, 5)


def test_chat_mix_v1_matches_its_quantiles():
    work = build_workload(spec(seed=5), context_tokens=1_000_000)
    lengths = np.array([work.lengths(i) for i in range(6000)])
    n_in, n_out = lengths[:, 0], lengths[:, 1]
    assert np.median(n_in) == pytest.approx(1024, rel=0.06)
    assert np.percentile(n_in, 90) == pytest.approx(4096, rel=0.08)
    assert np.median(n_out) == pytest.approx(256, rel=0.06)
    assert np.percentile(n_out, 90) == pytest.approx(1024, rel=0.08)


def test_clipped_to_the_context():
    work = build_workload(spec(), context_tokens=4096)
    pairs = [work.lengths(i) for i in range(3000)]
    assert max(i for i, _ in pairs) == 4095  # log-normal tail clipped
    assert all(1 <= i <= 4095 and o >= 1 and i + o <= 4096 for i, o in pairs)


def test_same_seed_same_bytes_other_seed_or_stream_differs():
    s = spec(seed=42)
    a = build_workload(s, context_tokens=4096)
    b = build_workload(s, context_tokens=4096)
    bodies_a = [request_body(s.engine, a.request(i, stream=3)) for i in range(40)]
    bodies_b = [request_body(s.engine, b.request(i, stream=3)) for i in reversed(range(40))]
    assert bodies_a == list(reversed(bodies_b))  # any order, any process: same bytes
    other_seed = build_workload(spec(seed=43), context_tokens=4096)
    assert request_body(s.engine, other_seed.request(0, stream=3)) != bodies_a[0]
    assert request_body(s.engine, a.request(0, stream=4)) != bodies_a[0]
    body = json.loads(bodies_a[0])
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True
    assert len(body["prompt"]) == a.lengths(0, stream=3)[0]
    assert body["max_tokens"] == a.lengths(0, stream=3)[1]


def test_token_ids_avoid_the_edges_of_the_vocabulary():
    assert wl.token_id_range(32000) == (320, 30400)
    assert wl.token_id_range(151936) == (1519, 144340)  # below Qwen3's last real token 151668
    work = build_workload(spec(input_tokens=4000, output_tokens=1), context_tokens=None)
    ids = [t for i in range(20) for t in work.request(i).prompt_ids or ()]
    assert min(ids) >= 320
    assert max(ids) < 30400
    assert min(ids) < 400
    assert max(ids) > 30300


def test_explicit_distributions():
    fixed = build_workload(spec(input_tokens=64, output_tokens={"dist": "fixed", "value": 32}))
    assert {fixed.lengths(i) for i in range(50)} == {(64, 32)}
    uniform = build_workload(
        spec(input_tokens={"dist": "uniform", "min": 10, "max": 12}, output_tokens=5)
    )
    assert {uniform.lengths(i)[0] for i in range(200)} == {10, 11, 12}
    lognormal = build_workload(
        spec(
            input_tokens={"dist": "lognormal", "median": 100, "p90": 400, "min": 50, "max": 300},
            output_tokens=1,
        )
    )
    values = [lognormal.lengths(i)[0] for i in range(2000)]
    assert min(values) == 50
    assert max(values) == 300
    assert statistics.median(values) == pytest.approx(100, rel=0.1)


def test_requests_are_clipped_to_the_context_given():
    s = factories.spec(workload={"input_tokens": 1000, "output_tokens": 1000})
    work = build_workload(s, context_tokens=512)
    assert work.context_tokens == 512
    assert work.lengths(0) == (511, 1)
    assert build_workload(s, context_tokens=300).lengths(0) == (299, 1)


def test_chat_api_gets_text_prompts():
    s = factories.spec(
        engine={"endpoint": "http://127.0.0.1:1/v1", "model": "tiny", "api": "chat"},
        workload={"input_tokens": 50, "output_tokens": 7},
    )
    work = build_workload(s, context_tokens=4096)
    request = work.request(0)
    assert request.prompt_ids is None
    assert request.prompt_text is not None
    assert len(request.prompt_text.split()) == 50
    body = json.loads(request_body(s.engine, request))
    assert body["messages"] == [{"role": "user", "content": request.prompt_text}]
    assert body["max_tokens"] == 7


def test_extra_body_is_merged_last():
    s = factories.spec(
        engine={
            "endpoint": "http://127.0.0.1:1/v1",
            "model": "tiny",
            "ignore_eos": False,
            "extra_body": {"temperature": 0.5, "max_tokens": 3},
        },
        workload={"input_tokens": 2, "output_tokens": 9},
    )
    body = json.loads(request_body(s.engine, build_workload(s).request(0)))
    assert body["temperature"] == 0.5
    assert body["max_tokens"] == 3
    assert "ignore_eos" not in body


def test_azure_trace(shared):
    rows = wl.read_trace(shared / AZURE)
    assert len(rows) == 19366
    assert rows[0] == wl.TraceRow(t_s=0.0, input_tokens=374, output_tokens=44)
    assert rows[1].t_s == pytest.approx(4.314579)  # 18:15:50.9951690 - 18:15:46.6805900
    assert rows[-1].t_s == pytest.approx(3501.7, abs=0.1)
    s = factories.spec(workload={"trace": str(shared / AZURE), "arrival": {"process": "trace"}})
    work = build_workload(s, context_tokens=100_000)
    assert work.lengths(1) == (396, 109)
    assert work.lengths(19366 + 1) == (396, 109)  # rows repeat
    offsets = work.arrivals(11.0)
    first = [next(offsets) for _ in range(1000)]
    assert first[0] == 0.0
    assert 999 / first[-1] == pytest.approx(11.0, rel=0.3)  # rescaled to ~11 req/s


def test_trace_lengths_overridden_by_the_spec(shared):
    s = factories.spec(workload={"trace": str(shared / AZURE), "output_tokens": 16})
    work = build_workload(s, context_tokens=100_000)
    assert work.lengths(1) == (396, 16)


def test_mooncake_jsonl(shared):
    rows = wl.read_trace(shared / MOONCAKE)
    assert len(rows) == 12031
    assert rows[0] == wl.TraceRow(
        t_s=0.0, input_tokens=6758, output_tokens=500, hash_ids=tuple(range(14))
    )
    assert rows[-1].t_s == pytest.approx(3536.999, abs=0.001)  # milliseconds -> s


def test_plain_jsonl_relative_to_the_spec(tmp_path, monkeypatch):
    lines = [
        {"t_s": 0.0, "input_tokens": 10, "output_tokens": 0},
        {"t_s": 0.5, "input_tokens": 20, "output_tokens": 2},
    ]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    spec_path = write_spec(
        tmp_path / "a.spec.yaml",
        factories.spec_dict(
            workload={"trace": "t.jsonl", "arrival": {"process": "trace", "rescale": False}}
        ),
    )
    monkeypatch.chdir(tmp_path.parent)  # found beside the spec, not in the current folder
    loaded = store.load_spec(spec_path)
    assert loaded.trace_file == tmp_path / "t.jsonl"
    assert loaded.spec.workload.trace == "t.jsonl"  # as written
    work = build_workload(loaded.spec, trace_file=loaded.trace_file)
    assert [work.lengths(i) for i in range(2)] == [(10, 1), (20, 2)]  # 0 tokens -> 1
    offsets = work.arrivals(1.0)
    assert [next(offsets) for _ in range(3)] == [0.0, 0.5, 1.0]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("a.csv", "when,in,out\n1,2,3\n", "not an Azure LLM trace CSV"),
        (
            "b.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-01-01 00:00:00,x,3\n",
            "b.csv:2: ContextTokens is not an integer",
        ),
        (
            "c.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,3\n",
            "c.csv:2: TIMESTAMP is not a date-time",
        ),
        ("d.jsonl", '{"input_tokens": 1, "output_tokens": 2}\n{oops\n', "d.jsonl:2: not JSON"),
        ("e.jsonl", '{"prompt": "hi"}\n', "e.jsonl:1: missing 'input_tokens'"),
        (
            "f.jsonl",
            '{"input_tokens": 1, "output_tokens": -2}\n',
            "f.jsonl:1: output_tokens is negative",
        ),
        ("g.txt", "1,2,3\n", "unknown trace format '.txt'"),
        ("h.jsonl", "\n", "holds no requests"),
        (
            "i.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\nnan,1,3\n",
            "i.csv:2: TIMESTAMP is not a finite number: 'nan'",
        ),
        (
            "j.csv",
            'TIMESTAMP,ContextTokens,GeneratedTokens\n1,1,"' + "x" * 200_000 + '"\n',
            "j.csv: not a readable CSV trace: field larger than field limit",
        ),
        ("k.jsonl", '{"t_s": NaN, "input_tokens": 1, "output_tokens": 2}\n', "k.jsonl:1: not JSON"),
        (
            "l.jsonl",
            '{"input_tokens": 1' + "0" * 200 + ', "output_tokens": 2}\n',
            "l.jsonl:1: not JSON: an integer of 201 digits",
        ),
    ],
)
def test_bad_traces_name_file_line_and_field(tmp_path, name, content, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(SpecError, match=message):
        wl.read_trace(tmp_path / name)


def test_bad_workload_names_fail_when_the_spec_loads(tmp_path):
    spec_path = tmp_path / "s.spec.yaml"
    write_spec(spec_path, factories.spec_dict(workload={"trace": "chat-mix-v2"}))
    with pytest.raises(SpecError, match=r"workload.trace: 'chat-mix-v2' is neither a built-in"):
        store.load_spec(spec_path)
    write_spec(spec_path, factories.spec_dict(workload={"trace": "missing.csv"}))
    with pytest.raises(SpecError, match="workload.trace: file not found: .*missing.csv"):
        store.load_spec(spec_path)


def test_traces_that_cannot_give_trace_arrivals(tmp_path):
    with pytest.raises(SpecError, match="file not found"):
        build_workload(factories.spec(workload={"trace": str(tmp_path / "missing.csv")}))
    (tmp_path / "t.jsonl").write_text('{"input_tokens": 1, "output_tokens": 2}\n')
    with pytest.raises(SpecError, match="no timestamps"):
        build_workload(
            factories.spec(workload={"trace": "t.jsonl", "arrival": {"process": "trace"}}),
            trace_file=tmp_path / "t.jsonl",
        )
    with pytest.raises(SpecError, match="no timestamps"):
        build_workload(factories.spec(workload={"arrival": {"process": "trace"}}))
    (tmp_path / "one.jsonl").write_text('{"t_s": 1, "input_tokens": 1, "output_tokens": 2}\n')
    with pytest.raises(SpecError, match="at least two timestamps"):
        build_workload(
            factories.spec(workload={"trace": "one.jsonl", "arrival": {"process": "trace"}}),
            trace_file=tmp_path / "one.jsonl",
        )


def test_a_content_variant_keeps_the_shape_and_changes_every_token():
    s = factories.spec(
        workload={
            "trace": "chat-mix-v1",
            "prefix": {"groups": 2, "shared_tokens": 32},
            "input_tokens": {"dist": "uniform", "min": 8, "max": 64},
            "output_tokens": 16,
            "seed": 7,
        }
    )
    work = build_workload(s, context_tokens=4096)
    assert work.varies_content
    low, high = wl.token_id_range(work.vocab_size)
    first = [work.request(i, stream=5) for i in range(30)]
    again = [work.request(i, stream=5, variant=1) for i in range(30)]
    assert [work.request(i, stream=5, variant=0) for i in range(30)] == first
    for a, b in zip(first, again, strict=True):
        assert (a.input_tokens, a.max_tokens) == (b.input_tokens, b.max_tokens)
        assert a.prompt_ids is not None
        assert b.prompt_ids is not None
        assert len(a.prompt_ids) == len(b.prompt_ids)
        # Every token differs, so no cache block of the first sending serves the second.
        assert all(x != y for x, y in zip(a.prompt_ids, b.prompt_ids, strict=True))
        assert all(low <= y < high for y in b.prompt_ids)
    # Within the variant, the shared prefixes are still shared: two groups, 32 tokens each.
    heads = {tuple(r.prompt_ids[:32]) for r in again if r.prompt_ids is not None}
    assert len(heads) == 2
    assert heads.isdisjoint({tuple(r.prompt_ids[:32]) for r in first if r.prompt_ids})
    # Another variant is another content again.
    third = work.request(0, stream=5, variant=2)
    assert third.prompt_ids != first[0].prompt_ids
    assert third.prompt_ids != again[0].prompt_ids


def test_a_chat_variant_changes_every_word_and_keeps_the_count():
    s = factories.spec(
        engine={"endpoint": "http://127.0.0.1:1/v1", "model": "tiny", "api": "chat"},
        workload={"input_tokens": 50, "output_tokens": 7},
    )
    work = build_workload(s, context_tokens=4096)
    a, b = work.request(3, stream=1), work.request(3, stream=1, variant=1)
    assert a.prompt_text is not None
    assert b.prompt_text is not None
    words_a, words_b = a.prompt_text.split(), b.prompt_text.split()
    assert len(words_a) == len(words_b) == 50
    assert all(x != y for x, y in zip(words_a, words_b, strict=True))


def test_real_prompts_have_no_content_variants(tmp_path):
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hi there"}]}]))
    work = wl.Workload(
        name="t",
        api="completions",
        vocab_size=1000,
        seed=0,
        arrival=factories.spec().workload.arrival,
        input_dist=None,
        output_dist=wl.CHAT_MIX_V1[1],
        rows=None,
        context_tokens=None,
        prompts=["hi there"],
    )
    assert not work.varies_content
    assert work.request(0, variant=0).prompt_text == "hi there"
    with pytest.raises(ValueError, match="no content variants"):
        work.request(0, variant=1)
    with pytest.raises(ValueError, match="non-negative"):
        work.request(0, variant=-1)
