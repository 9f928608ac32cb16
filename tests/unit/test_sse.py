import json

import pytest

from tokenwatt.client import sse
from tokenwatt.client.sse import SSEDecoder, SSEError, SSEEvent


def decode_all(chunks):
    decoder = SSEDecoder()
    events = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    tail = decoder.close()
    return events, tail


STREAM = (
    b'data: {"a": 1}\n\n'
    b": keep-alive ping\n\n"
    b'data: {"b": "x\\ny"}\r\n\r\n'
    b"event: error\ndata: line one\ndata: line two\n\n"
    b"id: 7\nretry: 100\ndata:no-space\n\n"
    b"data\n\n"
    b"data: [DONE]\r\r"
)
EXPECTED = [
    SSEEvent("message", b'{"a": 1}'),
    SSEEvent("message", b'{"b": "x\\ny"}'),
    SSEEvent("error", b"line one\nline two"),
    SSEEvent("message", b"no-space"),
    SSEEvent("message", b""),
    SSEEvent("message", b"[DONE]"),
]


def test_whole_stream():
    events, tail = decode_all([STREAM])
    assert events == EXPECTED
    assert tail is None


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_split_anywhere_gives_the_same_events(cut):
    events, tail = decode_all([STREAM[:cut], STREAM[cut:]])
    assert events == EXPECTED
    assert tail is None


def test_byte_by_byte():
    events, _ = decode_all([STREAM[i : i + 1] for i in range(len(STREAM))])
    assert events == EXPECTED


def test_three_way_splits_around_crlf():
    data = b"data: 1\r\n\r\ndata: 2\r\n\r\n"
    for a in range(1, len(data)):
        for b in range(a, len(data)):
            events, _ = decode_all([data[:a], data[a:b], data[b:]])
            assert [e.data for e in events] == [b"1", b"2"], (a, b)


def test_lone_cr_line_endings():
    events, _ = decode_all([b"data: 1\r\rdata: 2\r", b"\r"])
    assert [e.data for e in events] == [b"1", b"2"]


def test_unterminated_event_is_returned_by_close():
    events, tail = decode_all([b"data: 1\n\ndata: 2"])
    assert [e.data for e in events] == [b"1"]
    assert tail == SSEEvent("message", b"2")


def test_event_type_resets_after_dispatch_and_on_empty_event():
    events, _ = decode_all([b"event: error\n\ndata: 1\n\nevent: x\ndata: 2\n\ndata: 3\n\n"])
    assert events == [
        SSEEvent("message", b"1"),
        SSEEvent("x", b"2"),
        SSEEvent("message", b"3"),
    ]


def test_many_events_in_one_chunk():
    payloads = [json.dumps({"i": i}).encode() for i in range(500)]
    data = b"".join(b"data: " + p + b"\n\n" for p in payloads)
    events, _ = decode_all([data])
    assert [e.data for e in events] == payloads


def test_long_event_over_many_reads_is_linear(monkeypatch):
    # 4 MiB event fed in 1 KiB pieces: kept as pieces, joined once
    payload = b"x" * (4 * 1024 * 1024)
    data = b"data: " + payload + b"\n\n"
    decoder = SSEDecoder()
    events = []
    for i in range(0, len(data), 1024):
        events.extend(decoder.feed(data[i : i + 1024]))
    assert len(events) == 1
    assert events[0].data == payload
    assert decoder.buffered_bytes == 0


def test_oversized_line_is_an_error(monkeypatch):
    monkeypatch.setattr(sse, "MAX_EVENT_BYTES", 1000)
    decoder = SSEDecoder()
    decoder.feed(b"data: " + b"x" * 900)
    with pytest.raises(SSEError, match="longer than"):
        decoder.feed(b"x" * 200)


def test_oversized_multiline_event_is_an_error(monkeypatch):
    monkeypatch.setattr(sse, "MAX_EVENT_BYTES", 1000)
    decoder = SSEDecoder()
    with pytest.raises(SSEError, match="larger than"):
        decoder.feed(b"data: " + b"x" * 600 + b"\ndata: " + b"y" * 600 + b"\n")


def test_empty_feed():
    assert SSEDecoder().feed(b"") == []
