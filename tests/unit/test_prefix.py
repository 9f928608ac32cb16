"""Shared prefixes of a workload: synthetic groups, a trace's hash_ids, the expected hit rate."""

import json
from collections import Counter

import pytest
from pydantic import ValidationError

from tests import factories
from tokenwatt.client.openai import GenerationRequest
from tokenwatt.errors import SpecError
from tokenwatt.load.prefix import expected_hit_rate, trace_hit_rate
from tokenwatt.load.workload import build_workload

S = 40  # shared tokens


def ids(request: GenerationRequest) -> list[int]:
    assert request.prompt_ids is not None
    return list(request.prompt_ids)


def prefixed(groups=3, shared_tokens=S, api="completions", **workload):
    return factories.spec(
        engine={"endpoint": "sim", "model": "m", "api": api},
        workload={
            "trace": "chat-mix-v1",
            "input_tokens": 10,
            "output_tokens": 4,
            "seed": 7,
            "prefix": {"groups": groups, "shared_tokens": shared_tokens},
            **workload,
        },
    )


def test_trace_hit_rate_hand_worked():
    # T = 4, B = 2. [0, 1] x 8 tokens: nothing cached. [0, 2] x 7: id 0 is the first's first 4
    # tokens: 4 hit. [0, 1] x 6: shares min(8, 6) = 6 with the first, but at most 6 - 1 = 5 are
    # served, in whole 2-token blocks: 4 hit.
    ids, lengths = [[0, 1], [0, 2], [0, 1]], [8, 7, 6]
    rate = trace_hit_rate(ids, lengths, trace_block_tokens=4, cache_block_tokens=2)
    assert rate == pytest.approx((0 + 4 + 4) / (8 + 7 + 6))
    warm = trace_hit_rate(ids, lengths, trace_block_tokens=4, cache_block_tokens=2, counted_from=1)
    assert warm == pytest.approx(8 / 13)  # 0.615385
    # a cache block larger than the shared part serves nothing of it: 4 // 8 = 0, 5 // 8 = 0
    assert trace_hit_rate(ids, lengths, trace_block_tokens=4, cache_block_tokens=8) == 0.0
    # unique ids never hit; a prompt that is a prefix of an earlier one is served but its last
    # token: [5] x 3 after [5, 6] x 8 shares 3, serves 2
    assert trace_hit_rate([[1], [2]], [4, 4], trace_block_tokens=4, cache_block_tokens=1) == 0
    short = trace_hit_rate(
        [[5, 6], [5]], [8, 3], trace_block_tokens=4, cache_block_tokens=1, counted_from=1
    )
    assert short == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("ids", "lengths", "kw", "message"),
    [
        ([[0]], [4, 4], {}, "one list of hash ids per request"),
        ([[0]], [4], {"cache_block_tokens": 0}, "block sizes"),
        ([[0]], [4], {"counted_from": 1}, "at least one request"),
    ],
)
def test_trace_hit_rate_refuses_what_it_cannot_count(ids, lengths, kw, message):
    args = {"trace_block_tokens": 4, "cache_block_tokens": 2} | kw
    with pytest.raises(ValueError, match=message):
        trace_hit_rate(ids, lengths, **args)


def test_expected_hit_rate_hand_worked():
    # 1000 shared tokens are 62 whole 16-token blocks = 992 tokens (the 63rd block holds own
    # tokens too); a prompt is 1000 + 200 tokens.
    steady = expected_hit_rate(groups=4, shared_tokens=1000, own_tokens_mean=200, block_tokens=16)
    assert steady == pytest.approx(992 / 1200)  # 0.826667
    # 8 window requests right at the start (M = 0): q = 0.75, expected first uses of a group
    # F = 4 * (1 - 0.75**8) = 4 * 0.8998870849609375 = 3.59954833984375, so
    # 992 * (1 - 3.59954833984375 / 8) / 1200 = 545.656005859375 / 1200
    cold = expected_hit_rate(
        groups=4,
        shared_tokens=1000,
        own_tokens_mean=200,
        block_tokens=16,
        warmup_requests=0,
        window_requests=8,
    )
    assert cold == pytest.approx(0.4547133382161458, rel=1e-12)
    # a long warm-up has seen every group: back to the steady state
    warm = expected_hit_rate(
        groups=4,
        shared_tokens=1000,
        own_tokens_mean=200,
        block_tokens=16,
        warmup_requests=200,
        window_requests=8,
    )
    assert warm == pytest.approx(steady, rel=1e-12)
    # a prefix shorter than a block is never reused
    assert expected_hit_rate(groups=1, shared_tokens=15, own_tokens_mean=1, block_tokens=16) == 0
    with pytest.raises(ValueError, match="window_requests"):
        expected_hit_rate(
            groups=4, shared_tokens=16, own_tokens_mean=1, block_tokens=16, warmup_requests=3
        )
    with pytest.raises(ValueError, match="at least 1"):
        expected_hit_rate(groups=0, shared_tokens=16, own_tokens_mean=1, block_tokens=16)


def test_requests_share_their_groups_prefix_within_a_stream_only():
    work = build_workload(prefixed(), context_tokens=4096)
    requests = [work.request(i, stream=0) for i in range(30)]
    assert {r.input_tokens for r in requests} == {S + 10}  # input_tokens counts the own part
    assert all(work.lengths(i, stream=0) == (S + 10, 4) for i in range(30))
    heads = Counter(tuple(ids(r)[:S]) for r in requests)
    assert len(heads) == 3  # three groups, each drawn by several requests
    assert min(heads.values()) >= 2
    assert len({tuple(ids(r)[S:]) for r in requests}) == 30  # own parts are unique
    # another probe (stream) has its own prefixes: it never starts warm from the one before
    other = {tuple(ids(work.request(i, stream=1))[:S]) for i in range(30)}
    assert not other & heads.keys()
    # and the same request, made again, is the same bytes
    assert work.request(5, stream=0) == requests[5]


def test_groups_are_drawn_uniformly():
    work = build_workload(prefixed(groups=4, shared_tokens=16), context_tokens=4096)
    counts = Counter(tuple(ids(work.request(i))[:16]) for i in range(4000))
    assert len(counts) == 4
    # 1000 expected each; binomial sd = sqrt(4000 * 0.25 * 0.75) = 27.4, so 5 sd is 137
    assert all(abs(c - 1000) < 137 for c in counts.values())


def test_the_context_clips_the_own_part_and_refuses_a_prefix_that_leaves_no_room():
    work = build_workload(prefixed(input_tokens=100), context_tokens=64)
    r = work.request(0)
    assert r.input_tokens == 63  # 40 shared + 23 own, one token left for the answer
    assert r.max_tokens == 1
    with pytest.raises(SpecError, match=r"workload.prefix.shared_tokens \(63\) leaves no room"):
        build_workload(prefixed(shared_tokens=63), context_tokens=64)
    build_workload(prefixed(shared_tokens=62), context_tokens=64)  # one own token, one output


def test_chat_prompts_repeat_their_prefix_as_words():
    work = build_workload(prefixed(groups=1, api="chat"), context_tokens=4096)
    a, b = (work.request(i).prompt_text for i in range(2))
    assert a is not None
    assert b is not None
    assert a.split()[:S] == b.split()[:S]
    assert a.split()[S:] != b.split()[S:]
    assert len(a.split()) == S + 10


def test_prefix_settings_are_checked():
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        prefixed(groups=0)
    with pytest.raises(ValidationError, match="Input should be a valid integer"):
        prefixed(shared_tokens="100")
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        factories.spec(workload={"prefix": {"groups": 1, "shared_tokens": 8, "share": 0.9}})
    with pytest.raises(ValidationError, match="trace_block_tokens is only used with a trace file"):
        factories.spec(workload={"trace": "chat-mix-v1", "trace_block_tokens": 16})


# -- a trace's hash_ids ------------------------------------------------------------------------


def trace(tmp_path, rows, **workload):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return factories.spec(
        engine={"endpoint": "sim", "model": "m"},
        workload={"trace": str(path), "seed": 3, "trace_block_tokens": 4, **workload},
    )


ROWS = [
    {"input_length": 8, "output_length": 2, "hash_ids": [0, 1]},
    {"input_length": 7, "output_length": 2, "hash_ids": [0, 2]},
    {"input_length": 3, "output_length": 2, "hash_ids": [1]},
    {"input_length": 6, "output_length": 2, "hash_ids": [0, 1]},
]


def test_trace_blocks_are_identical_exactly_where_the_hash_ids_are(tmp_path):
    work = build_workload(trace(tmp_path, ROWS), context_tokens=4096)
    p = [ids(work.request(i)) for i in range(4)]
    assert [len(x) for x in p] == [8, 7, 3, 6]
    assert p[0][:4] == p[1][:4] == p[3][:4]  # block 0
    assert p[0][4:] != p[1][4:7]  # blocks 1 and 2 differ
    assert p[2] == p[0][4:7]  # block 1 as its own prompt, cut to 3 tokens
    assert p[3] == p[0][:6]  # blocks 0 and 1, cut to 6
    assert ids(work.request(4)) == p[0]  # rows repeat, as do their prompts
    # another stream (probe): other tokens, the same structure
    q = [ids(work.request(i, stream=9)) for i in range(2)]
    assert q[0][:4] == q[1][:4] != p[0][:4]
    assert "hash_ids as 4-token blocks" in work.describe()


def test_trace_prefix_off_sends_unique_prompts_of_the_trace_lengths(tmp_path):
    work = build_workload(trace(tmp_path, ROWS, trace_prefix=False), context_tokens=4096)
    p = [ids(work.request(i)) for i in range(4)]
    assert [len(x) for x in p] == [8, 7, 3, 6]
    assert p[0][:4] != p[1][:4]
    assert not work.shares_prefixes


def test_mooncake_prompts_follow_its_hash_ids(shared):
    path = shared / "data/traces/mooncake_fast25/conversation_trace.jsonl"
    s = factories.spec(engine={"endpoint": "sim", "model": "m"}, workload={"trace": str(path)})
    work = build_workload(s, context_tokens=200_000)
    first, second = ids(work.request(0)), ids(work.request(1))
    assert len(first) == 6758  # its input_length; hash_ids [0, 1, ..., 13]
    assert len(second) == 7322  # hash_ids [0, 14, 15, ...]: block 0 shared
    assert first[:512] == second[:512]
    assert first[512:1024] != second[512:1024]


@pytest.mark.parametrize(
    ("rows", "workload", "message"),
    [
        (
            [{"input_length": 9, "output_length": 1, "hash_ids": [0, 1]}],
            {},
            "request 1 has 2 hash_ids for 9 input tokens, but workload.trace_block_tokens 4"
            " needs 3",
        ),
        (
            [ROWS[0], {"input_length": 3, "output_length": 1}],
            {},
            "request 2 has no hash_ids while others do",
        ),
        ([ROWS[0]], {"input_tokens": 5}, "workload.input_tokens would replace the lengths"),
        (
            [ROWS[0]],
            {"prefix": {"groups": 1, "shared_tokens": 4}},
            "workload.prefix and the trace's hash_ids both shape the prompts",
        ),
        (
            [{"input_length": 3, "output_length": 1, "hash_ids": [0, -1]}],
            {},
            "t.jsonl:1: hash_ids is not a list of non-negative integers",
        ),
    ],
)
def test_trace_hash_ids_that_do_not_fit_are_refused(tmp_path, rows, workload, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_workload(trace(tmp_path, rows, **workload), context_tokens=4096)
