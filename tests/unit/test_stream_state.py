"""The response parser behind both transports, fed bytes as a network would deliver them."""

import json

import pytest

from tokenwatt.client._stream import RequestResult, StreamState


def run(chunks, *, status=200, ctype="text/event-stream", max_tokens=4, ignore_eos=True, end=True):
    results: list[RequestResult] = []
    state = StreamState(
        index=3,
        t_send_ns=1_000,
        max_tokens=max_tokens,
        input_tokens_sent=10,
        ignore_eos=ignore_eos,
        on_done=results.append,
        t_sched_ns=900,
    )
    state.on_head(status, "", {"content-type": ctype})
    t = 1_000
    for chunk in chunks:
        t += 1_000_000
        state.on_body(chunk, t)
    if end:
        state.on_end(t + 1)
    assert len(results) == (1 if end or state.finished else 0)
    return results[0] if results else None


def ev(obj):
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def tok(text=" t", finish=None, **extra):
    return ev({"choices": [{"index": 0, "text": text, "finish_reason": finish}], **extra})


USAGE = ev({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 4}})
DONE = b"data: [DONE]\n\n"


def test_vllm_shape_one_event_per_read():
    r = run([tok(), tok(), tok(), tok(finish="length"), USAGE, DONE])
    assert r.status == "ok", r.error
    assert r.output_tokens == 4
    assert not r.output_tokens_approx
    assert r.input_tokens == 10
    assert list(r.chunk_ns) == [1_001_000, 2_001_000, 3_001_000, 4_001_000]
    assert r.ttft_ms == pytest.approx(1.0)
    assert r.tpot_ms == pytest.approx(1.0)  # 3 ms over 3 gaps
    assert r.itl_ms == pytest.approx([1.0, 1.0, 1.0])
    assert r.e2e_ms == pytest.approx(6.000001)
    assert r.send_lag_ms == pytest.approx(0.0001)
    assert r.finish_reason == "length"
    assert not r.usage_mismatch
    assert not r.output_length_violation


def test_everything_in_one_read_takes_the_batch_path():
    r = run([tok() + tok() + tok() + tok(finish="length") + USAGE + DONE])
    assert r.status == "ok"
    assert r.content_events == 4
    assert r.itl_ms == [0.0, 0.0, 0.0]
    assert r.tpot_ms == 0.0


def test_done_in_the_middle_of_a_batch_is_seen():
    r = run([tok() + tok() + tok() + tok(finish="length") + DONE + USAGE])
    assert r.status == "ok"
    assert r.output_tokens == 4


def test_chat_deltas_role_chunk_is_not_content():
    def chat(delta, finish=None):
        return ev({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    r = run(
        [
            chat({"role": "assistant", "content": ""}),
            chat({"reasoning_content": "hmm"}),
            chat({"content": "a"}),
            chat({"content": "b"}, "length"),
            ev({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}),
            DONE,
        ],
        max_tokens=3,
    )
    assert r.status == "ok"
    assert r.ttft_ms == pytest.approx(2.0)  # the reasoning chunk, not the role chunk
    assert r.content_events == 3
    assert r.input_tokens == 7


def test_no_usage_counts_chunks_and_marks_approximate():
    r = run([tok(), tok(), tok(), tok(finish="length"), DONE])
    assert r.status == "ok"
    assert r.output_tokens == 4
    assert r.output_tokens_approx
    assert r.usage_output_tokens is None
    assert r.input_tokens == 10  # what was sent


def test_usage_and_chunks_disagree():
    usage = ev({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 4}})
    r = run([tok(" ab"), tok(" cd", finish="length"), usage, DONE])
    assert r.status == "ok"
    assert r.output_tokens == 4
    assert r.usage_mismatch


def test_short_output_with_ignore_eos_fails():
    usage = ev({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 2}})
    r = run([tok(), tok(finish="stop"), usage, DONE])
    assert r.status == "short_output"
    assert "2 output tokens of the 4" in r.error
    assert r.output_length_violation


def test_short_output_without_ignore_eos_is_fine():
    r = run([tok(), tok(finish="stop"), DONE], ignore_eos=False)
    assert r.status == "ok"
    assert not r.output_length_violation


def test_longer_output_is_a_violation_not_a_failure():
    usage = ev({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5}})
    r = run([tok()] * 4 + [tok(finish="length"), usage, DONE])
    assert r.status == "ok"
    assert r.output_length_violation


def test_no_done_but_finish_reason_is_complete():
    r = run([tok(), tok(), tok(), tok(finish="length")])
    assert r.status == "ok"


def test_no_done_no_finish_is_malformed():
    r = run([tok(), tok()])
    assert r.status == "malformed_stream"
    assert "without [DONE]" in r.error


def test_last_event_without_blank_line_is_used():
    r = run([tok(), tok(), tok(), b'data: {"choices":[{"text":" x","finish_reason":"length"}]}'])
    assert r.status == "ok"
    assert r.content_events == 4


@pytest.mark.parametrize(
    "payload",
    [
        {"error": {"message": "engine dead", "code": 500}},
        {"object": "error", "message": "engine dead"},
    ],
)
def test_error_objects(payload):
    r = run([tok(), ev(payload), DONE])
    assert r.status == "server_error"
    assert "engine dead" in r.error


def test_error_event_type():
    r = run([tok(), b'event: error\ndata: {"message": "overloaded"}\n\n'])
    assert r.status == "server_error"
    assert "overloaded" in r.error


@pytest.mark.parametrize("batch", [False, True])
def test_non_json_event_is_malformed(batch):
    chunks = [tok(), b"data: {nope\n\n", DONE]
    r = run([b"".join(chunks)] if batch else chunks)
    assert r.status == "malformed_stream"
    assert "{nope" in r.error


def test_json_that_is_not_an_object():
    r = run([b"data: [1, 2]\n\n"])
    assert r.status == "malformed_stream"
    r = run([b"data: 1,2\n\ndata: 3\n\n"])  # would fool a naive join into a 3-element array
    assert r.status == "malformed_stream"


def test_http_error_body_is_summarised():
    body = json.dumps({"object": "error", "message": "max_tokens too large"}).encode()
    r = run([body], status=400, ctype="application/json")
    assert r.status == "http_error"
    assert r.http_status == 400
    assert r.error == "HTTP 400: max_tokens too large"


def test_http_error_plain_text():
    r = run([b"Bad Gateway"], status=502, ctype="text/plain")
    assert r.error == "HTTP 502: Bad Gateway"


def test_json_instead_of_stream():
    r = run([b'{"choices": [{"text": "x"}]}'], ctype="application/json")
    assert r.status == "malformed_stream"
    assert "not an event stream" in r.error


def test_transport_failure_after_tokens_mentions_them():
    results: list[RequestResult] = []
    state = StreamState(
        index=0,
        t_send_ns=0,
        max_tokens=4,
        input_tokens_sent=1,
        ignore_eos=True,
        on_done=results.append,
    )
    state.on_head(200, "OK", {"content-type": "text/event-stream"})
    state.on_body(tok(), 5)
    state.on_fail("connection_error", "connection closed mid-response", 9)
    state.on_end(10)  # ignored: already delivered
    assert len(results) == 1
    assert results[0].status == "connection_error"
    assert (results[0].error or "").endswith("after 1 content chunks")
    assert results[0].ttft_ms == pytest.approx(5e-6)


def test_only_one_result_ever():
    results: list[RequestResult] = []
    state = StreamState(
        index=0,
        t_send_ns=0,
        max_tokens=1,
        input_tokens_sent=1,
        ignore_eos=False,
        on_done=results.append,
    )
    state.fail("timeout", "slow", 1)
    state.fail("cancelled", "stop", 2)
    state.on_body(tok(), 3)
    state.on_end(4)
    assert [r.status for r in results] == ["timeout"]


# -- one reading of choices and usage, whichever way the bytes arrive ---------------------------


def chat(delta, finish=None, **extra):
    return ev({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})


STREAMS = {
    "vllm": [tok(), tok(), tok(), tok(finish="length"), USAGE, DONE],
    "usage beside finish_reason": [
        tok(),
        tok(),
        tok(),
        tok(finish="length", usage={"prompt_tokens": 3, "completion_tokens": 4}),
    ],
    "done before usage": [tok(), tok(), tok(), tok(finish="length"), DONE, USAGE],
    "chat deltas": [
        chat({"role": "assistant", "content": ""}),
        chat({"reasoning_content": "hmm"}),
        chat({"reasoning": "so"}),
        chat({"content": "a"}, "length"),
        USAGE,
        DONE,
    ],
    "odd shapes": [
        ev({"choices": "nope"}),
        ev(
            {
                "choices": [
                    1,
                    None,
                    {"text": ""},
                    {"text": " x"},
                    {"text": " y", "finish_reason": "stop"},
                ]
            }
        ),
        ev({"choices": [], "usage": "not a mapping"}),
        ev({"choices": [{"delta": "not a mapping"}]}),
        ev({"choices": [], "usage": {"prompt_tokens": -1, "completion_tokens": 2.5}}),
        DONE,
    ],
    "no done, no finish": [tok(), tok()],
    "error object": [tok(), ev({"error": {"message": "engine dead"}}), tok(), DONE],
    "error by object type": [tok(), ev({"object": "error", "message": "gone"}), DONE],
    "not an object": [tok(), b"data: [1, 2]\n\n", tok(), DONE],
    "not JSON": [tok(), b"data: {nope\n\n", DONE],
    "array-joining trap": [b"data: 1,2\n\n", b"data: 3\n\n"],
}


def feed(chunks, t_ns=5_000, *, keep_reply=False):
    """Feed chunks at one arrival time, so that results differ only by how they were parsed
    (``keep_reply``: as a session's turn, whose reply text and token ids are kept)."""
    results: list[RequestResult] = []
    state = StreamState(
        index=1,
        t_send_ns=1_000,
        max_tokens=4,
        input_tokens_sent=10,
        ignore_eos=True,
        on_done=results.append,
        turn=0 if keep_reply else None,
        keep_reply=keep_reply,
    )
    state.on_head(200, "", {"content-type": "text/event-stream"})
    for chunk in chunks:
        state.on_body(chunk, t_ns)
    state.on_end(t_ns)
    assert len(results) == 1
    return results[0]


@pytest.mark.parametrize("name", list(STREAMS))
def test_batch_and_event_paths_read_the_same(name):
    stream = b"".join(STREAMS[name])
    # One read of whole data: events: simple_payloads, one JSON parse for the batch.
    batch = feed([stream])
    # A comment first: the SSE decoder finds the events, then one JSON parse for them.
    decoded = feed([b": keep-alive\n\n" + stream])
    # One byte a read: every event is completed alone and parsed alone.
    single = feed([stream[i : i + 1] for i in range(len(stream))])
    assert batch == decoded == single
    assert batch.status in ("ok", "short_output", "server_error", "malformed_stream")


@pytest.mark.parametrize(
    "payload",
    [
        b' {"choices": [], "usage": {"completion_tokens": 4}} ',
        b'{"a": 1, "a": 2}',
        b"123456789012345678901234567890",
        # what msgspec refuses and json.loads accepts: the standard library decides
        b'{"x": NaN}',
        b'{"x": Infinity}',
        b"[1e400]",
        b'"\\ud800"',
    ],
)
def test_event_json_decodes_as_json_loads_would(payload):
    from tokenwatt.client._stream import _parse_json

    got, want = _parse_json(payload), json.loads(payload)
    assert json.dumps(got) == json.dumps(want)


@pytest.mark.parametrize("payload", [b'{"a": 1} x', b'{"a": ', b"\xff\xfe", b"", b"{'a': 1}"])
def test_event_json_that_json_loads_refuses_is_refused(payload):
    from tokenwatt.client._stream import _parse_json

    with pytest.raises(ValueError, match=r"."):
        json.loads(payload)
    with pytest.raises(ValueError, match=r"."):
        _parse_json(payload)


def test_nan_in_a_stream_is_read_as_json_would():
    # one read holding both events (the batched path), then each in its own read
    nan = ev({"choices": [{"index": 0, "text": " t"}], "x": float("nan")})
    for chunks in ([tok() + nan, DONE], [tok(), nan, DONE]):
        r = run(chunks, max_tokens=2)
        assert r.status == "ok", r.error
        assert len(r.chunk_ns) == 2


# -- typed chunks (msgspec structs) read exactly as generic JSON values were --------------------

TYPED_EXTRA = {
    "error null": [tok(), ev({"error": None, "choices": [{"text": " x"}]}), DONE],
    "error object with choices": [ev({"object": "error", "choices": [{"text": " x"}]}), DONE],
    "numbers where text goes": [
        ev({"choices": [{"text": 5, "finish_reason": 7}]}),
        ev({"choices": [{"text": 0, "delta": {"content": "a"}}]}),
        DONE,
    ],
    "kept reply with ids": [
        ev({"choices": [{"text": " a", "token_ids": [1, 2]}]}),
        ev({"choices": [{"delta": {"content": "b"}, "token_ids": [3]}]}),
        ev({"choices": [{"text": " c", "token_ids": [4, "x"]}]}),
        ev({"choices": [{"text": " d"}], "id": "c-1", "model": "m", "extra": {"deep": [1, {}]}}),
        DONE,
    ],
    "choices as an object": [ev({"choices": {"text": " x"}}), tok(), DONE],
    "two objects in one event": [b'data: {"choices": []},{"choices": []}\n\n', tok(), DONE],
}


@pytest.mark.parametrize("name", [*STREAMS, *TYPED_EXTRA])
def test_typed_chunks_read_as_generic_json_did(name, monkeypatch):
    import msgspec

    from tokenwatt.client import _stream

    stream = b"".join({**STREAMS, **TYPED_EXTRA}[name])
    ways = ([stream], [stream[i : i + 1] for i in range(len(stream))])
    typed = [feed(chunks, keep_reply=True) for chunks in ways]

    def refuse(data):
        raise msgspec.DecodeError("the generic path, as before typed chunks")

    monkeypatch.setattr(_stream, "_DECODE_CHUNK", refuse)
    monkeypatch.setattr(_stream, "_DECODE_CHUNKS", refuse)
    generic = [feed(chunks, keep_reply=True) for chunks in ways]
    assert typed == generic
    assert typed[0] == typed[1]


def test_a_plain_chunk_decodes_typed_and_an_error_event_does_not():
    from tokenwatt.client._stream import _Chunk, _plain_chunk

    chunk = _plain_chunk(b'{"id": "x", "choices": [{"index": 0, "text": " t"}], "usage": null}')
    assert type(chunk) is _Chunk
    assert chunk.choices is not None
    assert chunk.choices[0].text == " t"
    assert _plain_chunk(b'{"error": null}') is None
    assert _plain_chunk(b'{"object": "error"}') is None
    assert _plain_chunk(b'{"choices": [1]}') is None  # the generic path drops such choices
    assert _plain_chunk(b'{"x": NaN}') is None
