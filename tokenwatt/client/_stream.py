"""One streamed OpenAI-compatible response turned into a per-request record (pure, no I/O).

:class:`StreamState` is fed the response head and body bytes as they arrive (with their arrival
time on the monotonic clock) by either transport, and produces one :class:`RequestResult`. It
copes with what real servers do differently: ``usage`` in a separate last chunk (vLLM, nginx-sse)
or on the chunk with ``finish_reason`` (llama-server, transformers serve), no ``[DONE]`` at all
(transformers serve), several tokens in one event (event count != token count), error events
(``event: error``, ``{"error": ...}`` or ``{"object": "error"}``), and streams cut short.

Reasoning models stream their thinking as chat deltas named ``reasoning_content`` (vLLM,
SGLang, DeepSeek) or ``reasoning`` (vLLM's newer name, OpenRouter, gpt-oss servers) before the
answer's ``content``. A chunk carrying either is output (TTFT counts it); the first chunk
carrying ``content`` (or a completion's ``text``) is the first *answer* token (TTFAT). Reasoning
tokens come from ``usage.completion_tokens_details.reasoning_tokens`` where the server gives it,
else from the count of reasoning chunks, marked approximate.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import msgspec

from tokenwatt.client.sse import SSEDecoder, SSEError, simple_payloads

__all__ = ["FAILURE_CAUSES", "FailureCause", "RequestResult", "StreamState"]

FailureCause = Literal[
    "http_error",
    "connection_error",
    "malformed_stream",
    "server_error",
    "short_output",
    "timeout",
    "client_error",
    "cancelled",
]
"""Why a request failed (methodology page, "Request timings, failed requests and the SLO"):

- ``http_error``: the server answered with a status other than 200.
- ``connection_error``: refused, reset, or closed before the response was complete.
- ``malformed_stream``: not HTTP, not an event stream, an event that is not JSON, or a stream
  that ended without ``[DONE]`` or a ``finish_reason``.
- ``server_error``: an error event inside a 200 stream.
- ``short_output``: fewer output tokens than ``max_tokens`` although ``ignore_eos`` was asked.
- ``timeout``: not complete within ``request_timeout_s``.
- ``client_error``: the client ran out of a local resource (file descriptors, ports); such a
  failure makes the probe client-bound.
- ``cancelled``: stopped by the harness (Ctrl-C, or the end of a probe's drain).
"""

FAILURE_CAUSES: tuple[FailureCause, ...] = get_args(FailureCause)
"""Every :data:`FailureCause`, in the order above."""

_ERROR_BODY_BYTES = 16 * 1024
_ERROR_TEXT_CHARS = 500
_NS_PER_MS = 1_000_000.0


@dataclass(slots=True)
class RequestResult:
    """Everything measured about one streamed request. Times are monotonic-clock ns.

    Timing properties follow the definitions of :mod:`tokenwatt.metrics` (methodology page) and
    return the raw measurement even for a failed request (useful for diagnosis); statistics must
    treat failed requests as +inf, which :mod:`tokenwatt.metrics` does from ``status``.
    """

    index: int
    """Position of the request in its workload stream (-1 for an ad-hoc request)."""
    t_send_ns: int
    """Just before the request entered the HTTP client (after any wait for a concurrency slot)."""
    t_end_ns: int
    """Last byte received, or the moment the failure was detected."""
    status: str
    """``"ok"`` or a :data:`FailureCause`."""
    error: str | None = None
    """What went wrong, for a failed request."""
    http_status: int | None = None
    t_first_ns: int | None = None
    """Arrival of the first chunk that carried output text."""
    t_last_ns: int | None = None
    """Arrival of the last chunk that carried output text."""
    t_first_answer_ns: int | None = None
    """Arrival of the first chunk that carried answer text (``content`` or ``text``, not
    reasoning)."""
    reasoning_events: int = 0
    """Chunks that carried reasoning text and no answer text."""
    reasoning_tokens: int = 0
    """Reasoning tokens: the server's ``completion_tokens_details.reasoning_tokens`` when given,
    else :attr:`reasoning_events`; part of ``output_tokens``."""
    reasoning_tokens_approx: bool = False
    """True when ``reasoning_tokens`` was counted from chunks that carried reasoning (the server
    gave no count of its own)."""
    chunk_ns: array[int] = field(default_factory=lambda: array("q"))
    """Arrival time of every content chunk (an event with output text); 8 bytes each, as a
    long window at a high token rate holds millions of them."""
    output_tokens: int = 0
    """Output tokens: the server's usage when given, else the count of content chunks."""
    output_tokens_approx: bool = False
    """True when ``output_tokens`` was counted from chunks (no usage from the server)."""
    usage_output_tokens: int | None = None
    """``usage.completion_tokens`` as the server sent it."""
    input_tokens: int = 0
    """Prompt tokens: the server's usage when given, else what the client sent."""
    input_tokens_sent: int = 0
    max_tokens: int = 0
    ignore_eos: bool = False
    finish_reason: str | None = None
    t_sched_ns: int | None = None
    """Scheduled send time, when the request was part of a probe."""
    slot_wait_ns: int = 0
    """Time the request waited for a concurrency slot before being sent."""
    turn: int | None = None
    """Position in its session (``index`` is the session's); None = not part of a session."""
    reply_text: str | None = None
    """The answer text (``content``/``text``, not reasoning), when the request kept its reply."""
    reply_token_ids: list[int] | None = None
    """The reply's token ids (``choices[].token_ids``, vLLM's ``return_token_ids``), when kept
    and the server sent them for every content chunk; None otherwise."""

    @property
    def ok(self) -> bool:
        """The request succeeded."""
        return self.status == "ok"

    @property
    def content_events(self) -> int:
        """Number of chunks that carried output text."""
        return len(self.chunk_ns)

    @property
    def ttft_ms(self) -> float | None:
        """First content chunk minus t_send, ms (None without output text)."""
        if self.t_first_ns is None:
            return None
        return (self.t_first_ns - self.t_send_ns) / _NS_PER_MS

    @property
    def ttfat_ms(self) -> float | None:
        """First answer chunk minus t_send, ms (None without answer text)."""
        if self.t_first_answer_ns is None:
            return None
        return (self.t_first_answer_ns - self.t_send_ns) / _NS_PER_MS

    @property
    def answer_tokens(self) -> int:
        """Output tokens that were not reasoning."""
        return max(0, self.output_tokens - self.reasoning_tokens)

    @property
    def tpot_ms(self) -> float | None:
        """(t_last_token - t_first_token) / (output_tokens - 1), ms; None below 2 tokens."""
        if self.t_first_ns is None or self.t_last_ns is None or self.output_tokens < 2:
            return None
        return (self.t_last_ns - self.t_first_ns) / (self.output_tokens - 1) / _NS_PER_MS

    @property
    def e2e_ms(self) -> float:
        """Last byte minus t_send, ms."""
        return (self.t_end_ns - self.t_send_ns) / _NS_PER_MS

    @property
    def itl_ms(self) -> list[float]:
        """Gaps between successive content chunks, ms."""
        c = self.chunk_ns
        return [(c[i] - c[i - 1]) / _NS_PER_MS for i in range(1, len(c))]

    @property
    def send_lag_ms(self) -> float | None:
        """Actual minus scheduled send time, ms (None outside a probe)."""
        if self.t_sched_ns is None:
            return None
        return (self.t_send_ns - self.t_sched_ns) / _NS_PER_MS

    @property
    def output_length_violation(self) -> bool:
        """``ignore_eos`` was asked but the output length differs from ``max_tokens``."""
        return (
            self.ignore_eos
            and self.status in ("ok", "short_output")
            and self.output_tokens != self.max_tokens
        )

    @property
    def usage_mismatch(self) -> bool:
        """The server's usage count differs from the number of content chunks.

        Honest servers do it too: a chunk may carry several tokens (speculative decoding, a
        reader that fell behind) or none with text (a token that ends inside a UTF-8
        character); real vLLM shows it on most requests of its tiny random model.
        """
        return (
            self.usage_output_tokens is not None and self.usage_output_tokens != self.content_events
        )

    @property
    def usage_below_chunks(self) -> bool:
        """The server's usage count is below the number of content chunks.

        Impossible when counted honestly: every chunk with text carries at least one token.
        """
        return (
            self.usage_output_tokens is not None and self.usage_output_tokens < self.content_events
        )


def _error_text(obj: Any) -> str:
    """A short message out of an OpenAI-style error object (or anything else)."""
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            message = err.get("message") or err.get("msg") or err.get("detail")
            if message:
                return str(message)[:_ERROR_TEXT_CHARS]
        elif isinstance(err, str):
            return err[:_ERROR_TEXT_CHARS]
        if obj.get("message"):
            return str(obj["message"])[:_ERROR_TEXT_CHARS]
    return json.dumps(obj)[:_ERROR_TEXT_CHARS]


_MODE_SSE, _MODE_ERROR, _MODE_JSON = 0, 1, 2
# Every streamed token's JSON goes through msgspec's decoder (C, straight from bytes: about
# half the CPU of json.loads; benchmarks/README.md, "The floor under a spaced event"). What it
# refuses and JSON as Python reads it accepts (NaN, numbers beyond a double, lone surrogates)
# falls back to the standard library's C scanner, called directly (the json.loads wrapper's
# encoding sniffing and extra calls double its cost), so a stream decodes exactly as json.loads
# would.
_DECODE: Callable[[bytes], Any] = msgspec.json.Decoder().decode
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_WS = " \t\n\r"


class _Choice(msgspec.Struct):
    """The fields of a choice the stream reads; msgspec skips the others unread.

    A missing field is None, as ``dict.get`` would give (:func:`_choice_kind`,
    :meth:`StreamState._keep`).
    """

    text: Any = None
    delta: Any = None
    finish_reason: Any = None
    token_ids: Any = None


class _Chunk(msgspec.Struct):
    """The fields of a chunk the stream reads; a plain chunk decodes straight into this.

    No dict is built for its id, model, logprobs and the rest (the parser's CPU per event 1.33 ->
    0.88 µs batched, 3.0 -> 1.9 µs spaced: benchmarks/README.md, "The parser alone").
    ``error`` stays :data:`msgspec.UNSET` when the key is absent: a chunk with an ``error`` key
    (even null) or ``"object": "error"`` is an error event, read from its whole object instead
    (:func:`_plain_chunk`, :func:`_parse_payloads`).
    """

    choices: list[_Choice] | None = None
    usage: Any = None
    error: Any = msgspec.UNSET
    object: Any = None


_DECODE_CHUNK: Callable[[bytes], _Chunk] = msgspec.json.Decoder(_Chunk).decode
_DECODE_CHUNKS: Callable[[bytes], list[_Chunk]] = msgspec.json.Decoder(list[_Chunk]).decode


_UNSET = msgspec.UNSET


def _any_error(chunks: Sequence[_Chunk]) -> bool:
    """Whether any of ``chunks`` is an error event: an ``error`` key, or ``"object": "error"``."""
    for chunk in chunks:  # noqa: SIM110 - any() over a generator costs 0.1 µs more per event
        if chunk.error is not _UNSET or chunk.object == "error":
            return True
    return False


def _plain_chunk(data: bytes) -> _Chunk | None:
    """One event's payload as a :class:`_Chunk`, or None where it is not a plain chunk.

    None for what is not a JSON object of that shape (choices not a list of objects, say), JSON
    msgspec refuses, or an error event: the caller then reads it as a generic JSON value.
    """
    try:
        chunk = _DECODE_CHUNK(data)
    except msgspec.DecodeError:
        return None
    return None if _any_error((chunk,)) else chunk


def _chunk_of(obj: dict[str, Any]) -> _Chunk:
    """A chunk decoded as a generic object, as a :class:`_Chunk`.

    Choices that are not objects are dropped: they carry nothing the stream reads.
    """
    choices = obj.get("choices")
    return _Chunk(
        choices=(
            [
                _Choice(
                    text=c.get("text"),
                    delta=c.get("delta"),
                    finish_reason=c.get("finish_reason"),
                    token_ids=c.get("token_ids"),
                )
                for c in choices
                if type(c) is dict
            ]
            if type(choices) is list
            else None
        ),
        usage=obj.get("usage"),
    )


def _parse_json(data: bytes) -> Any:
    """Decode one event's JSON payload (as ``json.loads`` would).

    Raises:
        ValueError: invalid UTF-8 or JSON, or trailing data.
    """
    try:
        return _DECODE(data)
    except msgspec.DecodeError:
        pass
    text = data.decode("utf-8")
    start = 0
    while start < len(text) and text[start] in _WS:
        start += 1
    try:
        obj, end = _SCAN(text, start)
    except StopIteration as exc:
        raise ValueError(f"invalid JSON at {exc.value}") from None
    if text[end:].strip(_WS):
        raise ValueError("extra data after the JSON value")
    return obj


_DONE_PAYLOAD = b"[DONE]"
_DONE = object()


def _parse_many(events: Sequence[tuple[str, bytes]]) -> list[Any] | None:
    """Parse the JSON of several plain events in one call (one read often brings dozens).

    Returns None when any event is not a plain message (an ``event:`` type): then each is
    parsed alone, which also pinpoints a bad one.
    """
    payloads: list[bytes] = []
    for kind, payload in events:
        if kind != "message":
            return None
        payloads.append(payload)
    return _parse_payloads(payloads)


def _parse_payloads(payloads: list[bytes]) -> list[Any] | None:
    """Parse event payloads as one JSON array; ``[DONE]`` becomes :data:`_DONE`.

    Plain chunks come back as :class:`_Chunk` (all of them), else as generic JSON values.
    None when that fails or when the array does not have exactly one element per payload (a
    payload such as ``1,2`` would otherwise pass as two): the caller then parses one by one.
    """
    done_at = [i for i, p in enumerate(payloads) if p == _DONE_PAYLOAD]
    if done_at:
        payloads = [p for p in payloads if p != _DONE_PAYLOAD]
    blob = b"[" + b",".join(payloads) + b"]"
    parsed: list[Any] | None
    try:
        parsed = _DECODE_CHUNKS(blob)
    except msgspec.DecodeError:
        parsed = None
    if parsed is not None and _any_error(parsed):
        parsed = None  # an error event: read from its whole object
    if parsed is None:
        # Not all plain chunks: generic JSON values, read one by one (StreamState._take).
        try:
            parsed = _parse_json(blob)
        except ValueError:
            return None
    if type(parsed) is not list or len(parsed) != len(payloads):
        return None
    for position in done_at:
        parsed.insert(position, _DONE)
    return parsed


_ANSWER, _REASONING = 2, 1


def _choice_kind(choice: _Choice) -> int:
    """What a choice carries: :data:`_ANSWER` text, only :data:`_REASONING` text, or 0.

    Reasoning tokens are output tokens too (usage counts them), so both make a content chunk.
    """
    if choice.text:
        return _ANSWER
    delta = choice.delta
    if type(delta) is not dict:
        return 0
    if delta.get("content"):
        return _ANSWER
    if delta.get("reasoning_content") or delta.get("reasoning"):
        return _REASONING
    return 0


def _reasoning_usage(usage: dict[str, Any]) -> int | None:
    """``usage.completion_tokens_details.reasoning_tokens``, if the server gave a count."""
    details = usage.get("completion_tokens_details")
    if type(details) is not dict:
        return None
    value = details.get("reasoning_tokens")
    return value if type(value) is int and value >= 0 else None


class StreamState:
    """Accumulates one streamed response; calls ``on_done`` once with the result.

    Implements the transport's response-sink interface (``on_head``, ``on_body``, ``on_end``,
    ``on_fail``) and :meth:`fail` for the caller's own verdicts (timeout, cancellation).

    Args:
        index: request index in its workload stream.
        t_send_ns: send time (monotonic ns).
        max_tokens: output tokens asked for.
        input_tokens_sent: prompt tokens sent.
        ignore_eos: whether the request asked to ignore end-of-sequence.
        on_done: receives the finished :class:`RequestResult` exactly once.
    """

    __slots__ = (
        "_body",
        "_chunks",
        "_decoder",
        "_done",
        "_finish_reason",
        "_got_done",
        "_mode",
        "_reasoning_events",
        "_reply_ids",
        "_reply_ids_complete",
        "_reply_text",
        "_status",
        "_t_first",
        "_t_first_answer",
        "_usage",
        "ignore_eos",
        "index",
        "input_tokens_sent",
        "max_tokens",
        "on_done",
        "slot_wait_ns",
        "t_sched_ns",
        "t_send_ns",
        "turn",
    )

    def __init__(
        self,
        *,
        index: int,
        t_send_ns: int,
        max_tokens: int,
        input_tokens_sent: int,
        ignore_eos: bool,
        on_done: Callable[[RequestResult], None],
        t_sched_ns: int | None = None,
        slot_wait_ns: int = 0,
        turn: int | None = None,
        keep_reply: bool = False,
    ) -> None:
        self.index = index
        self.turn = turn
        self.t_send_ns = t_send_ns
        self.t_sched_ns = t_sched_ns
        self.slot_wait_ns = slot_wait_ns
        self.max_tokens = max_tokens
        self.input_tokens_sent = input_tokens_sent
        self.ignore_eos = ignore_eos
        self.on_done = on_done
        self._decoder = SSEDecoder()
        self._mode = _MODE_SSE
        self._status: int | None = None
        self._body = bytearray()
        self._chunks: array[int] = array("q")
        self._t_first: int | None = None
        self._t_first_answer: int | None = None
        self._reasoning_events = 0
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._got_done = False
        self._done = False
        # Kept only for a session's turns: the next turn's history needs the reply.
        self._reply_text: list[str] | None = [] if keep_reply else None
        self._reply_ids: list[int] = []
        self._reply_ids_complete = True

    @property
    def finished(self) -> bool:
        """The result has been delivered."""
        return self._done

    @property
    def t_first_ns(self) -> int | None:
        """Arrival of the first chunk with output text so far (None before it)."""
        return self._t_first

    @property
    def t_first_answer_ns(self) -> int | None:
        """Arrival of the first chunk with answer text so far (after any reasoning; None before)."""
        return self._t_first_answer

    # -- transport sink ---------------------------------------------------------------------

    def on_head(self, status: int, reason: str, headers: dict[str, str]) -> None:
        """Record the status; pick how to read the body."""
        self._status = status
        if status != 200:
            self._mode = _MODE_ERROR
        elif headers.get("content-type", "").startswith("application/json"):
            self._mode = _MODE_JSON

    def on_body(self, data: bytes, t_ns: int) -> None:
        """Body bytes that arrived at ``t_ns``."""
        if self._done:
            return
        if self._mode != _MODE_SSE:
            if len(self._body) < _ERROR_BODY_BYTES:
                self._body += data[: _ERROR_BODY_BYTES - len(self._body)]
            return
        if self._decoder.idle:
            payloads = simple_payloads(data)
            if payloads is not None:
                if len(payloads) == 1 and payloads[0] != _DONE_PAYLOAD:  # one event, as spaced
                    chunk = _plain_chunk(payloads[0])
                    if chunk is not None:
                        self._take_chunk(chunk, t_ns)
                        return
                parsed = _parse_payloads(payloads)
                if parsed is not None:
                    self._objects(parsed, t_ns)
                    return
        try:
            events = self._decoder.feed(data)
        except SSEError as exc:
            self.fail("malformed_stream", str(exc), t_ns)
            return
        if not events:
            return
        if len(events) > 1:
            parsed = _parse_many(events)
            if parsed is not None:
                self._objects(parsed, t_ns)
                return
        for kind, payload in events:
            self._event(kind, payload, t_ns)
            if self._done:
                return

    def on_end(self, t_ns: int) -> None:
        """The body is complete: decide the request's fate."""
        if self._done:
            return
        if self._mode == _MODE_ERROR:
            text = bytes(self._body).decode("utf-8", "replace").strip()
            try:
                text = _error_text(json.loads(text))
            except ValueError:
                text = text[:_ERROR_TEXT_CHARS]
            self.fail("http_error", f"HTTP {self._status}: {text}", t_ns)
            return
        if self._mode == _MODE_JSON:
            self._json_body(t_ns)
            return
        leftover = self._decoder.close()
        if leftover is not None:
            self._event(leftover.event, leftover.data, t_ns)
            if self._done:
                return
        if not self._got_done and self._finish_reason is None:
            self.fail(
                "malformed_stream",
                f"the stream ended without [DONE] or a finish_reason"
                f" after {len(self._chunks)} content chunks",
                t_ns,
            )
            return
        self._complete(t_ns)

    def on_fail(self, cause: str, message: str, t_ns: int) -> None:
        """The transport failed."""
        if cause == "connection_error" and self._chunks:
            message = f"{message}, after {len(self._chunks)} content chunks"
        self.fail(cause, message, t_ns)

    # -- verdicts ---------------------------------------------------------------------------

    def fail(self, cause: str, message: str, t_ns: int) -> None:
        """Deliver a failed result (no-op if one was already delivered)."""
        if self._done:
            return
        self._done = True
        self.on_done(self._result(t_ns, cause, message))

    def _complete(self, t_ns: int) -> None:
        result = self._result(t_ns, "ok", None)
        if result.ignore_eos and result.output_tokens < result.max_tokens:
            result.status = "short_output"
            result.error = (
                f"{result.output_tokens} output tokens of the {result.max_tokens} asked with"
                f" ignore_eos (finish_reason {self._finish_reason!r})"
            )
        self._done = True
        self.on_done(result)

    def _result(self, t_ns: int, status: str, error: str | None) -> RequestResult:
        usage = self._usage or {}
        completion = usage.get("completion_tokens")
        prompt = usage.get("prompt_tokens")
        usage_out = completion if isinstance(completion, int) and completion >= 0 else None
        usage_reasoning = _reasoning_usage(usage)
        chunks = self._chunks
        return RequestResult(
            index=self.index,
            t_send_ns=self.t_send_ns,
            t_end_ns=t_ns,
            status=status,
            error=error,
            http_status=self._status,
            t_first_ns=self._t_first,
            t_last_ns=chunks[-1] if chunks else None,
            t_first_answer_ns=self._t_first_answer,
            reasoning_events=self._reasoning_events,
            reasoning_tokens=self._reasoning_events if usage_reasoning is None else usage_reasoning,
            reasoning_tokens_approx=usage_reasoning is None and self._reasoning_events > 0,
            chunk_ns=chunks,
            output_tokens=usage_out if usage_out is not None else len(chunks),
            output_tokens_approx=usage_out is None,
            usage_output_tokens=usage_out,
            input_tokens=prompt
            if isinstance(prompt, int) and prompt >= 0
            else self.input_tokens_sent,
            input_tokens_sent=self.input_tokens_sent,
            max_tokens=self.max_tokens,
            ignore_eos=self.ignore_eos,
            finish_reason=self._finish_reason,
            t_sched_ns=self.t_sched_ns,
            slot_wait_ns=self.slot_wait_ns,
            turn=self.turn,
            reply_text=None if self._reply_text is None else "".join(self._reply_text),
            reply_token_ids=self._reply_ids
            if self._reply_text is not None and self._reply_ids_complete and self._reply_ids
            else None,
        )

    # -- events -----------------------------------------------------------------------------
    #
    # Two ways in, one reading: a read that brings several events has them parsed in one call
    # (:meth:`_objects`, the hot path), any other event is parsed alone (:meth:`_event`); both
    # hand each JSON value to :meth:`_take`, the only place choices, finish_reason and usage
    # are read.

    def _event(self, kind: str, data: bytes, t_ns: int) -> None:
        if data == _DONE_PAYLOAD:
            self._got_done = True
            return
        if kind == "message":
            chunk = _plain_chunk(data)
            if chunk is not None:
                self._take_chunk(chunk, t_ns)
                return
        try:
            obj = _parse_json(data)
        except ValueError:
            self.fail(
                "malformed_stream",
                f"an event is not JSON: {data[:120].decode('utf-8', 'replace')!r}",
                t_ns,
            )
            return
        self._take(obj, kind, t_ns)

    def _objects(self, parsed: list[Any], t_ns: int) -> None:
        """Several plain events that arrived together, already parsed."""
        for obj in parsed:
            if obj is _DONE:
                self._got_done = True
                continue
            if type(obj) is _Chunk:
                self._take_chunk(obj, t_ns)
            else:
                self._take(obj, "message", t_ns)
            if self._done:
                return

    def _take(self, obj: Any, kind: str, t_ns: int) -> None:
        """One event's generic JSON value: an error, or a chunk with choices and perhaps usage."""
        if type(obj) is not dict:
            shown = json.dumps(obj)[:120]
            self.fail("malformed_stream", f"an event is not a JSON object: {shown}", t_ns)
            return
        if kind == "error" or "error" in obj or obj.get("object") == "error":
            self.fail("server_error", f"error event: {_error_text(obj)}", t_ns)
            return
        self._take_chunk(_chunk_of(obj), t_ns)

    def _take_chunk(self, chunk: _Chunk, t_ns: int) -> None:
        """A chunk that is not an error: its choices' text, finish reason and perhaps usage."""
        choices = chunk.choices
        if choices:
            kind_seen = 0
            for choice in choices:
                kind = _ANSWER if choice.text else _choice_kind(choice)
                if kind > kind_seen:
                    kind_seen = kind
                if self._reply_text is not None:
                    self._keep(choice)
                reason = choice.finish_reason
                if reason:
                    self._finish_reason = str(reason)
            if kind_seen:
                if self._t_first is None:
                    self._t_first = t_ns
                self._chunks.append(t_ns)
                if kind_seen == _ANSWER:
                    if self._t_first_answer is None:
                        self._t_first_answer = t_ns
                else:
                    self._reasoning_events += 1
        usage = chunk.usage
        if type(usage) is dict:
            self._usage = usage

    def _keep(self, choice: _Choice) -> None:
        """Add a choice's answer text and token ids to the kept reply."""
        assert self._reply_text is not None
        text = choice.text
        if not isinstance(text, str):
            delta = choice.delta
            text = delta.get("content") if type(delta) is dict else None
        if isinstance(text, str) and text:
            self._reply_text.append(text)
        ids = choice.token_ids
        if type(ids) is list and all(type(t) is int for t in ids):
            self._reply_ids.extend(ids)
        elif text:
            self._reply_ids_complete = False  # text without its ids: the ids cannot be trusted

    def _json_body(self, t_ns: int) -> None:
        """A 200 answer in plain JSON where a stream was asked for."""
        text = bytes(self._body).decode("utf-8", "replace")
        try:
            obj = json.loads(text)
        except ValueError:
            self.fail("malformed_stream", f"expected an event stream, got {text[:120]!r}", t_ns)
            return
        if isinstance(obj, dict) and ("error" in obj or obj.get("object") == "error"):
            self.fail("server_error", _error_text(obj), t_ns)
            return
        self.fail(
            "malformed_stream",
            "the server answered with one JSON body, not an event stream (stream ignored?)",
            t_ns,
        )
