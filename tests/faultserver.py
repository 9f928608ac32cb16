"""A real HTTP server (asyncio, real sockets) that misbehaves on purpose.

For faults no real LLM server produces on demand: a stream cut halfway, garbage bytes, a 500
after the headers, a stall past the client's timeout, a keep-alive connection closed under the
client, bytes written one at a time. Everything well-behaved is tested against real servers
(vLLM, nginx-sse); this server only exists for what they cannot be made to do.

The fault is the first path segment of the base URL: ``http://127.0.0.1:PORT/<fault>/v1``.
Streams follow vLLM's shape (one event per token, a separate usage chunk, ``[DONE]``) unless the
fault says otherwise; ``max_tokens`` of the request sets the token count.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Iterator

FAULTS = (
    "ok",  # a correct vLLM-shaped stream
    "cut",  # headers and half the tokens, then the connection is closed mid-chunk
    "garbage",  # bytes that are not HTTP at all
    "garbage_sse",  # a 200 event stream whose events are not JSON
    "http500",  # status 500 with an OpenAI error body
    "error_after_headers",  # 200 headers and some tokens, then an error event (what a crash sends)
    "error_event_type",  # an "event: error" SSE event
    "stall",  # headers and one token, then nothing
    "stall_head",  # reads the request, never answers
    "no_done",  # finish_reason and usage in the last chunk, no [DONE] (transformers serve)
    "no_finish",  # ends cleanly without [DONE] or finish_reason
    "no_usage",  # no usage at all (llama-cpp-python): token count from chunks
    "usage_on_final",  # usage on the finish_reason chunk (llama-server)
    "short",  # half the tokens asked, finish_reason "stop"
    "long",  # one token more than asked
    "multi_token_events",  # two tokens per event (event count != token count)
    "inflated_usage",  # one token per event, usage claims twice as many (a miscounting server)
    "crlf_bytewise",  # CRLF line endings, written one byte at a time
    "close_delimited",  # HTTP/1.0-style body: no length, no chunking, ends with the close
    "content_length",  # the whole stream with a Content-Length
    "bad_chunk",  # a chunk-size line that is not hex
    "json_body",  # a 200 JSON body where a stream was asked
    "close_on_reuse",  # closes a keep-alive connection when its second request arrives
    "comments",  # SSE comment lines (keep-alive pings) between events
    "reasoning",  # chat deltas: reasoning_content, a pause, then content; usage counts reasoning
    "reasoning_no_details",  # the same with vLLM's newer "reasoning" name and no reasoning count
    "informational",  # a "100 Continue" head before the real one
    "chunk_extensions",  # every chunk-size line carries an extension (";name=value")
    "huge_head",  # a 200 head with 70 KiB of headers
    "trailing_bytes",  # a Content-Length stream, then bytes that are no response, kept alive
    "http10_keep_alive",  # HTTP/1.0 with Content-Length and "Connection: keep-alive"
    "http10",  # HTTP/1.0 with Content-Length and no keep-alive: the connection must not be reused
)

REASONING_PAUSE_S = 0.2
"""The ``reasoning`` faults' pause between the last reasoning delta and the first answer."""


def reasoning_split(n: int) -> int:
    """Reasoning tokens of a ``reasoning`` stream of ``n`` tokens (the rest is the answer)."""
    return max(1, n // 2)


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _token(text: str = " tok", finish: str | None = None) -> dict[str, object]:
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
    }


def _usage(prompt: int, completion: int, reasoning: int | None = None) -> dict[str, object]:
    usage: dict[str, object] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return {"id": "cmpl-1", "object": "text_completion", "choices": [], "usage": usage}


def _delta(field: str, text: str, finish: str | None = None) -> dict[str, object]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {field: text}, "finish_reason": finish}],
    }


def _stream(n: int, prompt: int, *, usage: bool = True, done: bool = True) -> list[bytes]:
    events = [_event(_token(finish="length" if i == n - 1 else None)) for i in range(n)]
    if usage:
        events.append(_event(_usage(prompt, n)))
    if done:
        events.append(b"data: [DONE]\n\n")
    return events


HEAD_CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


class FaultServer:
    """Runs in a thread with its own event loop; ``base_url(fault)`` gives a client URL."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self.port = 0
        self.requests = 0
        self.connections = 0
        self.last_headers: dict[str, str] = {}
        self._writers: set[asyncio.StreamWriter] = set()

    def start(self) -> FaultServer:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        fut.result(10)
        return self

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        async def _stop() -> None:
            assert self._server is not None
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await self._server.wait_closed()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(_stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def base_url(self, fault: str) -> str:
        assert fault in FAULTS, fault
        return f"http://127.0.0.1:{self.port}/{fault}/v1"

    async def _read_request(self, reader: asyncio.StreamReader) -> tuple[str, dict[str, object]]:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1]
        length = 0
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
            if name.strip().lower() == "content-length":
                length = int(value)
        self.last_headers = headers
        body = await reader.readexactly(length) if length else b""
        return path, json.loads(body) if body else {}

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        served = 0
        try:
            while True:
                try:
                    path, body = await self._read_request(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                self.requests += 1
                served += 1
                fault = path.strip("/").split("/")[0]
                try:
                    keep = await self._respond(fault, path, body, served, writer)
                except asyncio.CancelledError:
                    # server shutdown while stalling: end quietly (asyncio would log the
                    # cancelled handler as an error)
                    return
                if not keep:
                    return
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(ConnectionError, RuntimeError):
                writer.close()

    async def _respond(
        self,
        fault: str,
        path: str,
        body: dict[str, object],
        served: int,
        writer: asyncio.StreamWriter,
    ) -> bool:
        """Answer one request; False closes the connection."""
        n = int(body.get("max_tokens", 4))  # type: ignore[call-overload]
        prompt = body.get("prompt", [])
        n_prompt = len(prompt) if isinstance(prompt, list) else 1
        w = writer.write
        if path.endswith("/models"):
            payload = json.dumps({"data": [{"id": "fault", "max_model_len": 2048}]}).encode()
            w(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
            w(f"content-length: {len(payload)}\r\n\r\n".encode() + payload)
            await writer.drain()
            return True
        if fault == "close_on_reuse" and served >= 2:
            return False  # the race every keep-alive client must survive
        if fault in ("ok", "close_on_reuse"):
            w(HEAD_CHUNKED + b"".join(_chunk(e) for e in _stream(n, n_prompt)) + b"0\r\n\r\n")
        elif fault == "cut":
            events = _stream(n, n_prompt)
            w(HEAD_CHUNKED + b"".join(_chunk(e) for e in events[: n // 2]))
            w(f"{len(events[n // 2]):x}\r\n".encode() + events[n // 2][:10])
            await writer.drain()
            return False
        elif fault == "garbage":
            w(b"\x00\xffSSH-2.0-not-http\r\n\r\n\x13\x37 garbage garbage\r\n\r\n")
            await writer.drain()
            return False
        elif fault == "garbage_sse":
            w(HEAD_CHUNKED + _chunk(_event(_token())) + _chunk(b"data: {not json\n\n"))
            w(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        elif fault == "http500":
            payload = json.dumps(
                {"object": "error", "message": "engine crashed", "type": "InternalServerError"}
            ).encode()
            w(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n")
            w(f"content-length: {len(payload)}\r\n\r\n".encode() + payload)
        elif fault == "error_after_headers":
            events = [_event(_token()) for _ in range(2)]
            events.append(
                _event({"error": {"message": "EngineDeadError: engine died", "code": 500}})
            )
            events.append(b"data: [DONE]\n\n")
            w(HEAD_CHUNKED + b"".join(_chunk(e) for e in events) + b"0\r\n\r\n")
        elif fault == "error_event_type":
            events = [_event(_token()), b'event: error\ndata: {"message": "overloaded"}\n\n']
            w(HEAD_CHUNKED + b"".join(_chunk(e) for e in events) + b"0\r\n\r\n")
        elif fault == "stall":
            w(HEAD_CHUNKED + _chunk(_event(_token())))
            await writer.drain()
            await asyncio.sleep(3600)
        elif fault == "stall_head":
            await asyncio.sleep(3600)
        elif fault == "no_done":
            events = [_event(_token()) for _ in range(n - 1)]
            last = _token(finish="length")
            last["usage"] = _usage(n_prompt, n)["usage"]
            events.append(_event(last))
            w(HEAD_CHUNKED + b"".join(_chunk(e) for e in events) + b"0\r\n\r\n")
        elif fault == "no_finish":
            events = [_event(_token()) for _ in range(n)]
            w(HEAD_CHUNKED + b"".join(_chunk(e) for e in events) + b"0\r\n\r\n")
        elif fault == "no_usage":
            w(HEAD_CHUNKED + b"".join(_chunk(e) for e in _stream(n, n_prompt, usage=False)))
            w(b"0\r\n\r\n")
        elif fault == "usage_on_final":
            events = [_event(_token()) for _ in range(n - 1)]
            last = _token(finish="length")
            last["usage"] = _usage(n_prompt, n)["usage"]
            events += [_event(last), b"data: [DONE]\n\n"]
            w(HEAD_CHUNKED + b"".join(_chunk(e) for e in events) + b"0\r\n\r\n")
        elif fault == "short":
            half = max(1, n // 2)
            events = [_event(_token(finish="stop" if i == half - 1 else None)) for i in range(half)]
            events += [_event(_usage(n_prompt, half)), b"data: [DONE]\n\n"]
            w(HEAD_CHUNKED + b"".join(_chunk(e) for e in events) + b"0\r\n\r\n")
        elif fault == "long":
            w(HEAD_CHUNKED + b"".join(_chunk(e) for e in _stream(n + 1, n_prompt)))
            w(b"0\r\n\r\n")
        elif fault == "inflated_usage":
            events = _stream(n, n_prompt, usage=False, done=False)
            events += [_event(_usage(n_prompt, 2 * n)), b"data: [DONE]\n\n"]
            w(HEAD_CHUNKED + b"".join(_chunk(e) for e in events) + b"0\r\n\r\n")
        elif fault == "multi_token_events":
            pairs = (n + 1) // 2
            events = [
                _event(_token(" a b", "length" if i == pairs - 1 else None)) for i in range(pairs)
            ]
            events += [_event(_usage(n_prompt, n)), b"data: [DONE]\n\n"]
            w(HEAD_CHUNKED + b"".join(_chunk(e) for e in events) + b"0\r\n\r\n")
        elif fault == "crlf_bytewise":
            text = b"".join(e.replace(b"\n", b"\r\n") for e in _stream(n, n_prompt))
            payload = HEAD_CHUNKED + _chunk(text) + b"0\r\n\r\n"
            for i in range(len(payload)):
                w(payload[i : i + 1])
                await writer.drain()
                if i % 97 == 0:
                    await asyncio.sleep(0.0005)
        elif fault == "close_delimited":
            w(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
            w(b"".join(_stream(n, n_prompt)))
            await writer.drain()
            return False
        elif fault == "content_length":
            payload = b"".join(_stream(n, n_prompt))
            w(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
            w(f"content-length: {len(payload)}\r\n\r\n".encode() + payload)
        elif fault == "bad_chunk":
            w(HEAD_CHUNKED + _chunk(_event(_token())) + b"zz\r\nxx\r\n")
            await writer.drain()
            return False
        elif fault == "json_body":
            answer = json.dumps(
                {"choices": [{"text": "x" * n, "finish_reason": "length"}]}
            ).encode()
            w(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
            w(f"content-length: {len(answer)}\r\n\r\n".encode() + answer)
        elif fault in ("reasoning", "reasoning_no_details"):
            # vLLM's chat shape: a role-only chunk (no text), the thinking, then the answer.
            field = "reasoning_content" if fault == "reasoning" else "reasoning"
            think = reasoning_split(n)
            role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
            head = [_event(role)] + [_event(_delta(field, " hmm")) for _ in range(think)]
            w(HEAD_CHUNKED + b"".join(_chunk(e) for e in head))
            await writer.drain()
            await asyncio.sleep(REASONING_PAUSE_S)
            answer = n - think
            tail = [
                _event(_delta("content", " ok", "length" if i == answer - 1 else None))
                for i in range(answer)
            ]
            tail.append(_event(_usage(n_prompt, n, think if fault == "reasoning" else None)))
            tail.append(b"data: [DONE]\n\n")
            w(b"".join(_chunk(e) for e in tail) + b"0\r\n\r\n")
        elif fault == "informational":
            w(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()
            w(HEAD_CHUNKED + b"".join(_chunk(e) for e in _stream(n, n_prompt)) + b"0\r\n\r\n")
        elif fault == "chunk_extensions":
            chunks = [f"{len(e):x};tw=1\r\n".encode() + e + b"\r\n" for e in _stream(n, n_prompt)]
            w(HEAD_CHUNKED + b"".join(chunks) + b"0\r\n\r\n")
        elif fault == "huge_head":
            w(
                b"HTTP/1.1 200 OK\r\n"
                + b"".join(b"x-pad: " + b"p" * 1000 + b"\r\n" for _ in range(70))
            )
            await writer.drain()
            await asyncio.sleep(3600)
        elif fault in ("trailing_bytes", "http10_keep_alive", "http10"):
            payload = b"".join(_stream(n, n_prompt))
            version = b"1.1" if fault == "trailing_bytes" else b"1.0"
            keep = b"connection: keep-alive\r\n" if fault == "http10_keep_alive" else b""
            # One write: the trailing bytes arrive in the response's own read.
            trailing = b"XYZ not a response\r\n" if fault == "trailing_bytes" else b""
            w(
                b"HTTP/"
                + version
                + b" 200 OK\r\ncontent-type: text/event-stream\r\n"
                + keep
                + f"content-length: {len(payload)}\r\n\r\n".encode()
                + payload
                + trailing
            )
        elif fault == "comments":
            events = _stream(n, n_prompt)
            mixed = [b": ping\n\n" + e for e in events]
            w(HEAD_CHUNKED + b"".join(_chunk(e) for e in mixed) + b"0\r\n\r\n")
        else:
            w(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        return True


@contextlib.contextmanager
def running() -> Iterator[FaultServer]:
    server = FaultServer().start()
    try:
        yield server
    finally:
        server.stop()
