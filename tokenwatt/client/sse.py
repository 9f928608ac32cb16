"""Incremental parser of a ``text/event-stream`` body (pure: bytes in, events out, no I/O).

It follows the WHATWG "server-sent events" parsing rules that matter for LLM servers: lines end
with LF, CRLF or CR; an empty line dispatches the event; ``data:`` lines are joined with LF;
``event:`` names the event type; lines starting with ``:`` are comments; one leading space after
the colon is dropped. Bytes may be split anywhere between calls to :meth:`SSEDecoder.feed`,
including inside a CRLF pair or a UTF-8 character, and one call may carry many events.

A long event split over many reads costs linear time: partial lines are kept as a list of pieces
and joined once their end arrives (a buffer re-concatenated on every read would be quadratic, the
kind of slowdown that throttles long outputs).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["MAX_EVENT_BYTES", "SSEDecoder", "SSEError", "SSEEvent", "simple_payloads"]

MAX_EVENT_BYTES = 64 * 1024 * 1024
"""Largest event (or unterminated line) accepted before the stream is declared malformed."""


class SSEError(ValueError):
    """The byte stream is not a well-formed event stream (e.g. an event larger than the limit)."""


class SSEEvent(NamedTuple):
    """One dispatched event."""

    event: str
    """Event type (``message`` unless an ``event:`` line named another)."""
    data: bytes
    """The joined ``data:`` lines, UTF-8 bytes as sent (JSON decoders take bytes directly)."""


_SEPARATOR = b"\n\ndata: "


def simple_payloads(chunk: bytes) -> list[bytes] | None:
    """The payloads of a chunk made only of whole ``data: <payload>`` events, else None.

    The usual shape of an LLM stream (one ``data: `` line per event, LF endings), recognised with
    a few whole-chunk operations instead of a parse per line: the chunk must start with
    ``data: ``, end with a blank line, hold no CR, and hold no newline other than the ones that
    end its events. Anything else (comments, ``event:`` lines, multi-line data, a partial event)
    returns None and must go through :class:`SSEDecoder`, which is only correct to skip when it
    holds nothing (see :attr:`SSEDecoder.idle`).
    """
    if chunk[:6] != b"data: " or chunk[-2:] != b"\n\n" or b"\r" in chunk:
        return None
    payloads = chunk[6:-2].split(_SEPARATOR)
    if chunk.count(b"\n") != 2 * len(payloads):
        return None
    return payloads


class SSEDecoder:
    """Turns arbitrarily split chunks of an event stream into events."""

    __slots__ = ("_data", "_event", "_pending", "_pending_len", "_skip_lf")

    def __init__(self) -> None:
        self._pending: list[bytes] = []  # pieces of the current unterminated line
        self._pending_len = 0
        self._skip_lf = False  # the previous chunk ended in CR: a leading LF completes a CRLF
        self._data: list[bytes] = []
        self._event = b""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume the next bytes of the stream and return the events they complete.

        Raises:
            SSEError: if an event or line grows beyond :data:`MAX_EVENT_BYTES`.
        """
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
                if not chunk:
                    return []
        if b"\r" in chunk:
            self._skip_lf = chunk[-1:] == b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        last_lf = chunk.rfind(b"\n")
        if last_lf < 0:
            self._keep(chunk)
            return []
        if self._pending:
            head = b"".join(self._pending)
            self._pending.clear()
            self._pending_len = 0
            complete = head + chunk[: last_lf + 1]
        else:
            complete = chunk[: last_lf + 1]
        rest = chunk[last_lf + 1 :]
        if rest:
            self._keep(rest)
        events: list[SSEEvent] = []
        if self._data or self._event:
            self._lines(complete, events)
            return events
        # Fast path, for the usual shape of one "data: ..." line per event: split on the blank
        # lines that end events; anything else in a block goes through the line parser.
        blocks = complete.split(b"\n\n")
        tail = blocks.pop()  # b"" if complete ended an event, else lines of an unfinished one
        for block in blocks:
            if block[:6] == b"data: " and b"\n" not in block:
                if len(block) - 6 > MAX_EVENT_BYTES:
                    raise SSEError(f"an event is larger than {MAX_EVENT_BYTES} bytes")
                events.append(tuple.__new__(SSEEvent, ("message", block[6:])))
            elif block:
                self._lines(block + b"\n\n", events)
        if tail:
            self._lines(tail, events)
        return events

    def _lines(self, text: bytes, events: list[SSEEvent]) -> None:
        """Parse whole lines (``text`` ends with LF), appending dispatched events."""
        lines = text.split(b"\n")
        lines.pop()  # the empty string after the final LF
        data = self._data
        for line in lines:
            if line[:5] == b"data:":
                value = line[5:]
                data.append(value[1:] if value[:1] == b" " else value)
                if len(data) > 1 and sum(map(len, data)) > MAX_EVENT_BYTES:
                    raise SSEError(f"an event is larger than {MAX_EVENT_BYTES} bytes")
                continue
            if not line:
                if data:
                    events.append(self._dispatch())
                else:
                    self._event = b""
                continue
            if line[0] == 0x3A:  # ':' comment (keep-alive pings)
                continue
            name, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if name == b"data":  # "data" without a colon: an empty data line
                data.append(value)
            elif name == b"event":
                self._event = value
            # 'id' and 'retry' mean nothing to a one-shot LLM stream; unknown fields are ignored
            # as the standard requires.

    def close(self) -> SSEEvent | None:
        """End of stream: return an event left without its terminating empty line, if any.

        The standard discards such an event; callers decide (an LLM stream that ends this way
        was usually cut short). A trailing unterminated line is taken into account first.
        """
        if self._pending:
            self.feed(b"\n")
        if self._data:
            return self._dispatch()
        return None

    @property
    def idle(self) -> bool:
        """Nothing is held: the next chunk starts a fresh line and a fresh event."""
        return not (self._pending or self._data or self._event or self._skip_lf)

    @property
    def buffered_bytes(self) -> int:
        """Bytes held for an unfinished line or event."""
        return self._pending_len + sum(map(len, self._data))

    def _keep(self, piece: bytes) -> None:
        self._pending.append(piece)
        self._pending_len += len(piece)
        if self._pending_len > MAX_EVENT_BYTES:
            raise SSEError(f"a line is longer than {MAX_EVENT_BYTES} bytes without a line break")

    def _dispatch(self) -> SSEEvent:
        data = self._data
        payload = data[0] if len(data) == 1 else b"\n".join(data)
        data.clear()
        event = self._event.decode("utf-8", "replace") if self._event else "message"
        self._event = b""
        # tuple.__new__ skips the NamedTuple's Python-level constructor (one event per token).
        return tuple.__new__(SSEEvent, (event, payload))
