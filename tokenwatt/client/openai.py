"""Streaming client of an OpenAI-compatible server (``/v1/completions``, ``/v1/chat/completions``).

Two transports carry the streamed load, both feeding the same parser (:mod:`._stream`):

- ``fast`` (default): :mod:`._http1`, a lean HTTP/1.1 client on asyncio protocols. Bytes are
  timestamped in the protocol callback the moment they arrive, and a request on an idle
  keep-alive connection is written synchronously by :meth:`OpenAIClient.submit`, so its send time
  is exact. It has no connection cap of its own: the probe runner caps concurrency and records
  any wait, so nothing is throttled silently (httpx's default pool stops at 100 connections).
- ``httpx``: an ``httpx.AsyncClient`` with explicit limits; slower per request (measured in
  ``benchmarks/README.md``) and kept as a reference to cross-check the fast transport.

Everything else (``/v1/models``, version discovery, the non-streamed ``complete_text`` used by the
accuracy check) goes through httpx.

Timing definitions are :mod:`tokenwatt.metrics`'s. ``t_send`` is taken immediately before the
request enters the HTTP client, after any wait for a concurrency slot: connection set-up (rare
with keep-alive) is part of TTFT, because a user would wait for it too; the slot wait is
recorded separately (it makes a probe client-bound) and shows in the send lag.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

import httpx
import msgspec

from tokenwatt.client._http1 import HTTP1Pool, InFlightHTTP, Target, message
from tokenwatt.client._stream import FAILURE_CAUSES, FailureCause, RequestResult, StreamState
from tokenwatt.errors import EndpointError
from tokenwatt.schema.spec import EngineSpec

__all__ = [
    "FAILURE_CAUSES",
    "FailureCause",
    "GenerationRequest",
    "OpenAIClient",
    "PreparedRequest",
    "RequestResult",
    "Submitted",
    "TextCompletion",
    "TransportName",
    "request_body",
    "root_url",
]

logger = logging.getLogger(__name__)

TransportName = Literal["fast", "httpx"]

_VERSION_ROUTES: tuple[tuple[str, str], ...] = (
    ("/version", "version"),  # vLLM, the tokenwatt simulator
    ("/get_server_info", "version"),  # SGLang
    ("/server_info", "version"),  # SGLang (newer)
    ("/info", "version"),  # Hugging Face TGI
    ("/props", "build_info"),  # llama.cpp llama-server
)


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One request of a workload, before it is encoded for an API.

    ``prompt_ids`` (completions API: exact input length, no tokenizer needed) or ``prompt_text``
    (chat API, or a server that takes no token ids: the length is approximate, the server's usage
    tells the real count).
    """

    index: int
    max_tokens: int
    input_tokens: int
    prompt_ids: Sequence[int] | None = None
    prompt_text: str | None = None
    messages: Sequence[tuple[str, str]] | None = None
    """Chat API: the whole conversation as (role, text) pairs, sent instead of one user message
    of ``prompt_text`` (a session's history)."""
    turn: int | None = None
    """Position of the request in its session (``index`` is then the session's); None = not
    part of a session."""
    keep_reply: bool = False
    """Keep the reply's text and token ids in the result (a session builds its next turn from
    them); the completions API then asks for the ids (vLLM's ``return_token_ids``)."""


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A request encoded once, ready to be sent at its scheduled time."""

    index: int
    max_tokens: int
    input_tokens: int
    body: bytes
    wire: bytes
    """Request head and body as written by the fast transport (empty for httpx)."""
    turn: int | None = None
    keep_reply: bool = False


@dataclass(frozen=True, slots=True)
class TextCompletion:
    """Answer to one non-streamed text completion (the accuracy check)."""

    text: str | None
    status: str
    """``"ok"`` or a failure cause (see :data:`FailureCause`)."""
    error: str | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None

    @property
    def ok(self) -> bool:
        """The request succeeded."""
        return self.status == "ok"


def root_url(base_url: str) -> str:
    """The server root of an API base URL (``http://h:8000/v1`` -> ``http://h:8000``)."""
    base = base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


_ENCODE: Callable[[Any], bytes] = msgspec.json.Encoder().encode
"""Compact JSON (msgspec, C): 10x faster than ``json.dumps`` for a token-id prompt (0.9 against
8.9 µs at 64 ids, 2.5 against 33 µs at 512; benchmarks/README.md, "Ceiling against nginx-sse"), and
the same bytes wherever both are ASCII. Text outside ASCII (msgspec writes UTF-8, the body has
always escaped it) and what msgspec refuses go through ``json.dumps``, so a body is byte for byte
what it always was."""


def _plain_json(value: object) -> bool:
    """Whether both JSON encoders write ``value`` alike.

    True for strings, numbers, booleans, None, lists and string-keyed objects; msgspec writes
    dates as strings where ``json.dumps`` refuses them. (Non-finite floats, which msgspec would
    write as null, never get here: the spec refuses them, and dates, in ``engine.extra_body``.)
    """
    if value is None or isinstance(value, (str, int, float)):
        return True
    if isinstance(value, dict):
        return all(type(k) is str and _plain_json(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_plain_json(v) for v in value)
    return False


def request_body(
    engine: EngineSpec, request: GenerationRequest, *, plain_extra: bool | None = None
) -> bytes:
    """The JSON body of a streamed request, byte for byte the same for the same inputs.

    Completions API: ``prompt`` is the token-id list (or the text), plus ``return_token_ids``
    when the reply is kept (a session's turn). Chat API: the request's messages, else one user
    message holding the text. ``stream_options.include_usage`` asks for the token counts,
    ``ignore_eos`` is sent only when the spec asks for it (some servers reject the field), and
    ``engine.extra_body`` is merged last, so it can override any field. ``plain_extra``: whether
    msgspec may encode it (:func:`_plain_json`), known to a client once for all its requests;
    None works it out here.

    Raises:
        ValueError: a chat request without text, or a request with no prompt.
    """
    body: dict[str, Any] = {"model": engine.model}
    if engine.api == "chat":
        if request.messages is not None:
            body["messages"] = [{"role": role, "content": text} for role, text in request.messages]
        elif request.prompt_text is None:
            raise ValueError("the chat API needs a text prompt (token ids cannot be sent)")
        else:
            body["messages"] = [{"role": "user", "content": request.prompt_text}]
    elif request.prompt_ids is not None:
        body["prompt"] = list(request.prompt_ids)
    elif request.prompt_text is not None:
        body["prompt"] = request.prompt_text
    else:
        raise ValueError(f"request {request.index} has no prompt")
    body["max_tokens"] = request.max_tokens
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    if engine.ignore_eos:
        body["ignore_eos"] = True
    if request.keep_reply and engine.api == "completions":
        body["return_token_ids"] = True
    body.update(engine.extra_body)
    if plain_extra is None:
        plain_extra = _plain_json(engine.extra_body)
    if plain_extra:
        try:
            wire = _ENCODE(body)
        except (msgspec.EncodeError, TypeError, OverflowError):
            pass
        else:
            if wire.isascii():
                return wire
    return json.dumps(body, separators=(",", ":"), ensure_ascii=True).encode("ascii")


class Submitted:
    """A request in flight. :meth:`cancel` stops it and delivers a ``cancelled`` result."""

    __slots__ = ("_handle", "_state", "_task", "_timer")

    def __init__(self, state: StreamState) -> None:
        self._state = state
        self._handle: InFlightHTTP | None = None
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def done(self) -> bool:
        """The result has been delivered."""
        return self._state.finished

    @property
    def t_first_ns(self) -> int | None:
        """Arrival of the first chunk with output text so far (None while waiting for it)."""
        return self._state.t_first_ns

    @property
    def t_first_answer_ns(self) -> int | None:
        """Arrival of the first chunk with answer text so far (None while waiting for it)."""
        return self._state.t_first_answer_ns

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._handle is not None:
            self._handle.abort()
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def cancel(self, reason: str = "cancelled by the harness") -> None:
        """Abort the request now (no-op if it already finished)."""
        if self._state.finished:
            return
        self._stop()
        self._state.fail("cancelled", reason, time.monotonic_ns())

    def _expire(self, timeout_s: float) -> None:
        if self._state.finished:
            return
        self._stop()
        self._state.fail(
            "timeout",
            f"not complete within request_timeout_s = {timeout_s:g} s",
            time.monotonic_ns(),
        )


class OpenAIClient:
    """Client of the server under test, built from the spec's ``engine`` section.

    Use as an async context manager::

        async with OpenAIClient(spec.engine, request_timeout_s=300) as client:
            result = await client.generate(request)

    Args:
        engine: the spec's engine section (model name, API, ignore_eos, extra_body, key).
        base_url: replaces ``engine.endpoint`` (required when the endpoint is ``sim``: pass the
            simulator's URL, ending in ``/v1``).
        env: where the API key variable is looked up (default ``os.environ``).
        request_timeout_s: a request not complete after this long has failed (``timeout``).
        transport: ``fast`` (default) or ``httpx`` for the streamed requests.
        max_connections: connection limit of the httpx client (set explicitly: httpx's default
            of 100 would cap concurrency silently).
        headers: extra HTTP headers sent with every request.

    Raises:
        EndpointError: no usable URL, or the API key variable is not set.
    """

    def __init__(
        self,
        engine: EngineSpec,
        *,
        base_url: str | None = None,
        env: Mapping[str, str] | None = None,
        request_timeout_s: float = 300.0,
        transport: TransportName = "fast",
        max_connections: int = 8192,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        url = base_url or engine.endpoint
        if url == "sim":
            raise EndpointError(
                "engine.endpoint is 'sim': pass the simulator's URL as base_url"
                " (start it with 'tokenwatt sim')"
            )
        if not url.startswith(("http://", "https://")):
            raise EndpointError(f"engine endpoint {url!r} is not an http(s) URL")
        if request_timeout_s <= 0:
            raise ValueError("request_timeout_s must be positive")
        self.engine = engine
        self.base_url = url.rstrip("/")
        self.root_url = root_url(self.base_url)
        self.request_timeout_s = float(request_timeout_s)
        self.transport: TransportName = transport
        self._headers: dict[str, str] = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "User-Agent": "tokenwatt",
        }
        key = self._api_key(engine, os.environ if env is None else env)
        if key is not None:
            self._headers["Authorization"] = f"Bearer {key}"
        self._headers.update(headers or {})
        self._path = "/chat/completions" if engine.api == "chat" else "/completions"
        self._post_head: bytes | None = None  # the streamed POST's head up to Content-Length
        self._plain_extra = _plain_json(engine.extra_body)  # see request_body
        self._target = Target(self.base_url)
        self._max_connections = max_connections
        self._http: httpx.AsyncClient | None = None
        self._pool: HTTP1Pool | None = None
        self._in_flight: set[Submitted] = set()
        self._io_hook: Callable[[], None] | None = None

    @staticmethod
    def _api_key(engine: EngineSpec, env: Mapping[str, str]) -> str | None:
        name = engine.api_key_env
        if name is None:
            return None
        value = env.get(name)
        if not value:
            raise EndpointError(
                f"engine.api_key_env names {name}, which is not set or empty in the environment:"
                f" export {name} with the API key"
            )
        return value

    # -- lifetime ---------------------------------------------------------------------------

    async def __aenter__(self) -> OpenAIClient:
        self._open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _open(self) -> httpx.AsyncClient:
        if self._http is None:
            limits = httpx.Limits(
                max_connections=self._max_connections,
                max_keepalive_connections=self._max_connections,
            )
            # trust_env=False: a proxy picked up from the environment would sit between the
            # harness and the server and distort every timing.
            self._http = httpx.AsyncClient(
                limits=limits,
                timeout=httpx.Timeout(self.request_timeout_s),
                headers=self._headers,
                trust_env=False,
            )
        if self._pool is None and self.transport == "fast":
            self._pool = HTTP1Pool(self.base_url)
            self._pool.io_hook = self._io_hook
        return self._http

    def cancel_all(self, reason: str = "cancelled by the harness") -> int:
        """Cancel every request in flight (each gets a ``cancelled`` result); return how many."""
        pending = list(self._in_flight)
        for submitted in pending:
            submitted.cancel(reason)
        self._in_flight.clear()
        return len(pending)

    async def aclose(self) -> None:
        """Cancel requests in flight and close every connection."""
        self.cancel_all("the client was closed")
        if self._pool is not None:
            await self._pool.aclose()
            self._pool = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def set_io_hook(self, hook: Callable[[], None] | None) -> None:
        """Call ``hook`` before each network read of the fast transport is processed (or stop).

        The probe runner uses it to send a request that falls due while the event loop is busy
        with responses. The hook must be cheap and must not raise.
        """
        self._io_hook = hook
        if self._pool is not None:
            self._pool.io_hook = hook

    @property
    def in_flight(self) -> int:
        """Requests submitted and not finished."""
        return len(self._in_flight)

    # -- discovery --------------------------------------------------------------------------

    async def _get_json(self, url: str) -> Any:
        response = await self._open().get(url, headers={"Accept": "application/json"})
        response.raise_for_status()
        return response.json()

    async def models(self) -> list[str]:
        """Ids of the models the server serves (``GET /v1/models``).

        Raises:
            EndpointError: the server cannot be reached or does not answer the OpenAI way.
        """
        data = await self._models_json()
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]

    async def _models_json(self) -> list[Any]:
        url = f"{self.base_url}/models"
        try:
            payload = await self._get_json(url)
        except httpx.HTTPStatusError as exc:
            raise EndpointError(
                f"GET {url} answered HTTP {exc.response.status_code}: is engine.endpoint the"
                " server's OpenAI base URL (ending in /v1)?"
            ) from exc
        except httpx.HTTPError as exc:
            raise EndpointError(f"GET {url} failed: {exc!r}; is the server running?") from exc
        except ValueError as exc:
            raise EndpointError(f"GET {url} did not return JSON: {exc}") from exc
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list):
            raise EndpointError(f"GET {url} returned no 'data' list: {str(payload)[:200]}")
        return data

    async def max_model_len(self, model: str | None = None) -> int | None:
        """The context length the server allows for ``model`` (vLLM's ``max_model_len``), if told.

        Raises:
            EndpointError: as :meth:`models`.
        """
        name = model or self.engine.model
        for entry in await self._models_json():
            if isinstance(entry, dict) and entry.get("id") == name:
                value = entry.get("max_model_len")
                return value if isinstance(value, int) and value > 0 else None
        return None

    async def server_version(self) -> tuple[str | None, str]:
        """The server's own version string and how it was read.

        Tries, in order: ``GET /version`` (vLLM, the tokenwatt simulator),
        ``GET /get_server_info`` and ``/server_info`` (SGLang), ``GET /info`` (TGI),
        ``GET /props`` (llama.cpp's ``build_info``).

        Returns:
            (version, source), e.g. ``("0.32.0", "GET /version")``; version None when no route
            answered with one, and source then says what was tried.
        """
        for path, key in _VERSION_ROUTES:
            payload = await self._root_json(path)
            value = payload.get(key) if isinstance(payload, dict) else None
            if isinstance(value, str | int | float) and str(value):
                return str(value), f"GET {path}"
        tried = ", ".join(p for p, _ in _VERSION_ROUTES)
        return None, f"not reported (tried GET {tried})"

    async def says_simulated(self) -> bool:
        """Whether the server says, on ``GET /version``, that it is a simulator.

        tokenwatt's simulator answers ``"simulated": true`` there, whether it was
        started by ``tokenwatt run`` (``engine.endpoint: sim``) or on its own (``tokenwatt
        sim``) and reached through a URL; a run against it must be marked simulated either way.
        """
        payload = await self._root_json("/version")
        return isinstance(payload, dict) and payload.get("simulated") is True

    async def metrics_text(self) -> tuple[str | None, str]:
        """The engine's Prometheus page (``GET /metrics``) and how it was read.

        Returns:
            (text, source): text None when the route did not answer 200, and source then says
            why (the server may not expose metrics; nothing is an error here).
        """
        url = f"{self.root_url}/metrics"
        try:
            response = await self._open().get(url, timeout=10.0)
        except httpx.HTTPError as exc:
            logger.debug("GET %s failed: %r", url, exc)
            return None, f"not reported (GET /metrics failed: {type(exc).__name__})"
        if response.status_code != 200:
            return None, f"not reported (GET /metrics answered HTTP {response.status_code})"
        return response.text, "GET /metrics"

    async def _root_json(self, path: str) -> Any:
        """The JSON a server-root route answers with, or None (no answer, not 200, not JSON)."""
        try:
            response = await self._open().get(
                f"{self.root_url}{path}", headers={"Accept": "application/json"}, timeout=10.0
            )
            return response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            logger.debug("GET %s%s failed: %r", self.root_url, path, exc)
            return None

    # -- streamed generation ----------------------------------------------------------------

    def prepare(self, request: GenerationRequest) -> PreparedRequest:
        """Encode a request once (body, and the wire bytes for the fast transport)."""
        body = request_body(self.engine, request, plain_extra=self._plain_extra)
        wire = b""
        if self.transport == "fast":
            if self._post_head is None:
                self._post_head = self._target.head_prefix(
                    "POST", self._path, headers=self._headers
                )
            wire = message(self._post_head, body)
        return PreparedRequest(
            index=request.index,
            max_tokens=request.max_tokens,
            input_tokens=request.input_tokens,
            body=body,
            wire=wire,
            turn=request.turn,
            keep_reply=request.keep_reply,
        )

    def submit(
        self,
        request: PreparedRequest,
        on_done: Callable[[RequestResult], None],
        *,
        t_sched_ns: int | None = None,
        slot_wait_ns: int = 0,
    ) -> Submitted:
        """Send a prepared request now; ``on_done`` receives its :class:`RequestResult` once.

        With the fast transport and an idle keep-alive connection the request is written before
        this returns. Must be called from a running event loop, inside the context manager.
        """
        self._open()
        loop = asyncio.get_running_loop()
        submitted: Submitted

        def finished(result: RequestResult) -> None:
            if submitted._timer is not None:
                submitted._timer.cancel()
            self._in_flight.discard(submitted)
            on_done(result)

        state = StreamState(
            index=request.index,
            t_send_ns=time.monotonic_ns(),
            max_tokens=request.max_tokens,
            input_tokens_sent=request.input_tokens,
            ignore_eos=self.engine.ignore_eos,
            on_done=finished,
            t_sched_ns=t_sched_ns,
            slot_wait_ns=slot_wait_ns,
            turn=request.turn,
            keep_reply=request.keep_reply,
        )
        submitted = Submitted(state)
        self._in_flight.add(submitted)
        submitted._timer = loop.call_at(
            loop.time() + self.request_timeout_s, submitted._expire, self.request_timeout_s
        )
        if self._pool is not None:
            submitted._handle = self._pool.submit(request.wire, state)
        else:
            submitted._task = loop.create_task(self._stream_httpx(request, state))
        return submitted

    async def generate(
        self, request: GenerationRequest | PreparedRequest, *, t_sched_ns: int | None = None
    ) -> RequestResult:
        """Send one streamed request and wait for its record.

        Never raises for a failed request: the failure is in ``status`` and ``error``.
        """
        prepared = request if isinstance(request, PreparedRequest) else self.prepare(request)
        future: asyncio.Future[RequestResult] = asyncio.get_running_loop().create_future()

        def done(result: RequestResult) -> None:
            if not future.done():
                future.set_result(result)

        submitted = self.submit(prepared, done, t_sched_ns=t_sched_ns)
        try:
            return await future
        except asyncio.CancelledError:
            submitted.cancel()
            raise

    async def _stream_httpx(self, request: PreparedRequest, state: StreamState) -> None:
        client = self._open()
        url = f"{self.base_url}{self._path}"
        try:
            async with client.stream("POST", url, content=request.body) as response:
                state.on_head(
                    response.status_code,
                    response.reason_phrase,
                    {k.lower(): v for k, v in response.headers.items()},
                )
                async for chunk in response.aiter_bytes():
                    state.on_body(chunk, time.monotonic_ns())
            state.on_end(time.monotonic_ns())
        except httpx.TimeoutException as exc:
            state.fail("timeout", f"httpx timeout: {exc!r}", time.monotonic_ns())
        except httpx.HTTPError as exc:
            state.on_fail("connection_error", f"{type(exc).__name__}: {exc}", time.monotonic_ns())
        except OSError as exc:
            state.on_fail("client_error", f"{type(exc).__name__}: {exc}", time.monotonic_ns())

    # -- plain text completion (accuracy) ---------------------------------------------------

    async def complete_text(
        self,
        prompt: str,
        *,
        max_tokens: int,
        stop: list[str],
        temperature: float = 0.0,
    ) -> TextCompletion:
        """One non-streamed ``/v1/completions`` request with a text prompt (gsm8k accuracy).

        ``engine.extra_body`` is merged into the request first, so that the check's own fields
        (model, prompt, ``max_tokens``, ``stop``, ``temperature``: the accuracy check is
        greedy) are never overridden by what the spec sets for the load; ``ignore_eos`` is
        not sent (answers must be allowed to stop). Never raises for a failed request: see
        ``status``.
        """
        body: dict[str, Any] = dict(self.engine.extra_body)
        body.update(
            model=self.engine.model,
            prompt=prompt,
            max_tokens=max_tokens,
            stop=stop,
            temperature=temperature,
            stream=False,
        )
        url = f"{self.base_url}/completions"
        try:
            response = await self._open().post(
                url, content=json.dumps(body).encode(), headers={"Accept": "application/json"}
            )
        except httpx.TimeoutException as exc:
            return TextCompletion(None, "timeout", f"httpx timeout: {exc!r}")
        except httpx.HTTPError as exc:
            return TextCompletion(None, "connection_error", f"{type(exc).__name__}: {exc}")
        if response.status_code != 200:
            return TextCompletion(
                None, "http_error", f"HTTP {response.status_code}: {response.text[:500]}"
            )
        try:
            payload = response.json()
            choice = payload["choices"][0]
            text = choice["text"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            return TextCompletion(
                None, "malformed_stream", f"unexpected answer ({exc!r}): {response.text[:300]}"
            )
        if not isinstance(text, str):
            return TextCompletion(None, "malformed_stream", "choices[0].text is not a string")
        usage = payload.get("usage") if isinstance(payload, dict) else None
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        return TextCompletion(
            text=text,
            status="ok",
            output_tokens=tokens if isinstance(tokens, int) else None,
            finish_reason=choice.get("finish_reason"),
        )
