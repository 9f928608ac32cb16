"""HTTP front of the simulator: OpenAI routes, ``/metrics``, ``/version`` and ``/health``.

Starlette on uvicorn (both already dependencies of tokenwatt for the site preview). The engine
loop runs as a task in uvicorn's event loop, so a token produced at the end of a step is written
to its stream in the same loop turn, with no thread hand-off; streamed responses write one SSE
event per token (several events in one write when the loop is behind), so ITL measurements see
every token.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import uvicorn
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tokenwatt import __version__
from tokenwatt.errors import EndpointError
from tokenwatt.schema.base import SIM_ENGINE
from tokenwatt.sim.api import (
    ApiError,
    ChatRequest,
    CompletionRequest,
    GenerationParams,
    TextSource,
    chat_prompt_tokens,
    error_body,
    text_prompt_tokens,
)
from tokenwatt.sim.engine import EngineConfig, EngineCore, EngineLoop, SimRequest
from tokenwatt.sim.exposition import SIM_VERSION, render_metrics
from tokenwatt.sim.prefix_cache import block_hashes

__all__ = ["SIM_VERSION", "SimApp", "serve"]

logger = logging.getLogger(__name__)

_FINGERPRINT = f"{SIM_ENGINE}-{__version__}"


class _Stream:
    """Collects one request's tokens for its HTTP response."""

    __slots__ = ("done", "produced", "times", "waiter")

    def __init__(self) -> None:
        self.produced = 0
        self.done = False
        self.times: list[float] = []
        self.waiter: asyncio.Future[None] | None = None

    def notify(self, req: SimRequest, t_s: float) -> None:
        self.produced = req.generated
        self.done = req.done
        self.times.append(t_s)
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def wait(self, emitted: int) -> None:
        if self.produced > emitted or self.done:
            return
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None


class SimApp:
    """The simulator's ASGI application and the engine behind it."""

    def __init__(
        self,
        config: EngineConfig,
        *,
        served_model_name: str,
        model_root: str,
        hostname: str | None = None,
    ) -> None:
        self.config = config
        self.served_model_name = served_model_name
        self.model_root = model_root
        self.created = int(time.time())
        self.core = EngineCore(config, t0_s=time.monotonic())
        self.loop = EngineLoop(self.core)
        self.hostname = hostname or socket.gethostname()
        self._next_id = 0
        self._gpu_labels = [
            {
                "gpu": str(i),
                "UUID": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{self.hostname}/gpu{i}')}",
                "device": f"nvidia{i}",
                "modelName": config.gpu.name,
                "Hostname": self.hostname,
            }
            for i in range(config.tensor_parallel)
        ]
        self.app = Starlette(
            routes=[
                Route("/health", self.health, methods=["GET"]),
                Route("/version", self.version, methods=["GET"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/metrics", self.metrics, methods=["GET"]),
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
            ],
            lifespan=self._lifespan,
        )

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.loop.start()
        logger.info("simulated engine: %s", self.config.describe())
        logger.info("simulated model: %s", self.config.geometry.describe())
        try:
            yield
        finally:
            await self.loop.stop()

    # ------------------------------------------------------------------------------------------
    # Simple routes

    async def health(self, request: Request) -> Response:
        """Empty 200 like vLLM; 503 with the reason if the engine loop has died."""
        if self.loop.failure is not None:
            return JSONResponse(
                error_body(
                    ApiError(
                        f"engine failed: {self.loop.failure}",
                        status=503,
                        kind="ServiceUnavailableError",
                    )
                ),
                status_code=503,
            )
        return Response(status_code=200)

    async def version(self, request: Request) -> Response:
        """Says, unmistakably, that this is a simulator."""
        g = self.config.geometry
        return JSONResponse(
            {
                "version": SIM_VERSION,
                "simulated": True,
                "engine": SIM_ENGINE,
                "gpu": self.config.gpu.name,
                "gpus": self.config.tensor_parallel,
                "model": g.name,
                "weight_dtype": g.weight_dtype,
                "kv_dtype": g.kv_dtype,
            }
        )

    async def models(self, request: Request) -> Response:
        """The served model, with vLLM's fields."""
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.served_model_name,
                        "object": "model",
                        "created": self.created,
                        "owned_by": "tokenwatt-sim",
                        "root": self.model_root,
                        "parent": None,
                        "max_model_len": self.config.max_model_len,
                        "permission": [
                            {
                                "id": f"modelperm-{uuid.uuid4().hex[:16]}",
                                "object": "model_permission",
                                "created": self.created,
                                "allow_create_engine": False,
                                "allow_sampling": True,
                                "allow_logprobs": True,
                                "allow_search_indices": False,
                                "allow_view": True,
                                "allow_fine_tuning": False,
                                "organization": "*",
                                "group": None,
                                "is_blocking": False,
                            }
                        ],
                    }
                ],
            }
        )

    # ------------------------------------------------------------------------------------------
    # Generation

    async def completions(self, request: Request) -> Response:
        """``POST /v1/completions``."""
        try:
            body = await self._json(request)
            req = CompletionRequest.model_validate(body)
            self._check_model(req.model)
            hashes: list[int] | None = None
            if isinstance(req.prompt, str):
                prompt_tokens = text_prompt_tokens(req.prompt)
                seed_text = req.prompt
            else:
                prompt_tokens = len(req.prompt)
                if any(not isinstance(t, int) or t < 0 for t in req.prompt):
                    raise ApiError("token ids must be non-negative integers", param="prompt")
                seed_text = ",".join(map(str, req.prompt[:64]))
                if self.config.enable_prefix_caching:
                    ids = cast("list[int]", req.prompt)  # _one_prompt: a str, or token ids
                    hashes = block_hashes(ids, self.config.block_size)
            params = req.params()
            # Only the counts (and block hashes) go on: the prompt (up to tens of thousands of
            # ints) is dropped now, not kept alive for the request's lifetime, which keeps
            # garbage-collection pauses short.
            del req, body
            return await self._generate(
                params, prompt_tokens, seed_text, chat=False, block_hashes=hashes
            )
        except ApiError as err:
            return JSONResponse(error_body(err), status_code=err.status)
        except ValidationError as exc:
            return self._invalid(exc)

    async def chat(self, request: Request) -> Response:
        """``POST /v1/chat/completions``."""
        try:
            body = await self._json(request)
            req = ChatRequest.model_validate(body)
            self._check_model(req.model)
            prompt_tokens, seed_text = chat_prompt_tokens(req.messages)
            params = req.params(max_tokens=req.max_tokens or req.max_completion_tokens)
            del req, body
            return await self._generate(params, prompt_tokens, seed_text, chat=True)
        except ApiError as err:
            return JSONResponse(error_body(err), status_code=err.status)
        except ValidationError as exc:
            return self._invalid(exc)

    @staticmethod
    async def _json(request: Request) -> Any:
        try:
            return json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(f"request body is not valid JSON: {exc}") from None
        except ClientDisconnect:
            raise ApiError("client disconnected", status=499) from None

    @staticmethod
    def _invalid(exc: ValidationError) -> Response:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        err = ApiError(f"{where}: {first['msg']}", param=where or None)
        return JSONResponse(error_body(err), status_code=400)

    def _check_model(self, name: str | None) -> None:
        if name is not None and name != self.served_model_name:
            raise ApiError(
                f"The model `{name}` does not exist. Valid aliases: {self.served_model_name}.",
                status=404,
                param="model",
            )

    async def _generate(
        self,
        req: GenerationParams,
        prompt_tokens: int,
        seed_text: str,
        *,
        chat: bool,
        block_hashes: list[int] | None = None,
    ) -> Response:
        max_len = self.config.max_model_len
        if req.n != 1:
            raise ApiError("the simulator serves n = 1 only", param="n")
        if prompt_tokens >= max_len:
            raise ApiError(
                f"This model's maximum context length is {max_len} tokens. However, your request"
                f" has {prompt_tokens} input tokens. Please reduce the length of the input"
                " messages.",
                param="input_tokens",
            )
        max_tokens = req.max_tokens if req.max_tokens is not None else max_len - prompt_tokens
        if max_tokens > max_len:
            raise ApiError(
                f"max_tokens={max_tokens} cannot be greater than max_model_len={max_len}. Please"
                f" request fewer output tokens. (parameter=max_tokens, value={max_tokens})",
                param="max_tokens",
            )
        if prompt_tokens + max_tokens > max_len:
            raise ApiError(
                f"This model's maximum context length is {max_len} tokens. However, you requested"
                f" {max_tokens} output tokens and your prompt contains {prompt_tokens} input"
                f" tokens, for a total of {prompt_tokens + max_tokens} tokens.",
                param="max_tokens",
            )
        text = TextSource(seed_text)
        target = max_tokens if req.ignore_eos else max(req.min_tokens, text.natural_length())
        stream = _Stream()
        self._next_id += 1
        sim_req = SimRequest(
            self._next_id,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            target_tokens=max(1, min(target, max_tokens)),
            arrival_s=time.monotonic(),
            listener=stream,
            block_hashes=block_hashes,
        )
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:16]
        self.loop.submit(sim_req)
        if req.stream:
            return StreamingResponse(
                self._sse(sim_req, stream, text, req, rid, chat=chat),
                media_type="text/event-stream",
            )
        return await self._whole(sim_req, stream, text, req, rid, chat=chat)

    def _stop_check(
        self, text_so_far: str, stops: tuple[str, ...], new_start: int
    ) -> tuple[int, str] | None:
        """Where the first stop string ends the text, looking only at the new part's reach."""
        for s in stops:
            at = text_so_far.find(s, max(0, new_start - len(s) + 1))
            if at >= 0:
                return at, s
        return None

    async def _whole(
        self,
        sim_req: SimRequest,
        stream: _Stream,
        text: TextSource,
        req: GenerationParams,
        rid: str,
        *,
        chat: bool,
    ) -> Response:
        stops = req.stops
        parts: list[str] = []
        length = 0
        emitted = 0
        stop_reason: str | None = None
        try:
            while True:
                await stream.wait(emitted)
                while emitted < stream.produced:
                    parts.append(text.word(emitted))
                    emitted += 1
                    if stops:
                        joined = "".join(parts)
                        hit = self._stop_check(joined, stops, length)
                        length = len(joined)
                        if hit is not None:
                            parts = [joined[: hit[0]]]
                            stop_reason = hit[1]
                            self.core.abort(sim_req, reason="stop")
                            break
                if stop_reason is not None or stream.done:
                    break
        finally:
            if not sim_req.done:
                self.core.abort(sim_req)
        finish = "stop" if stop_reason is not None else (sim_req.finish_reason or "length")
        usage = {
            "prompt_tokens": sim_req.prompt_tokens,
            "total_tokens": sim_req.prompt_tokens + emitted,
            "completion_tokens": emitted,
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        }
        created = int(time.time())
        content = "".join(parts)
        if chat:
            body: dict[str, Any] = {
                "id": rid,
                "object": "chat.completion",
                "created": created,
                "model": self.served_model_name,
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": content,
                            "refusal": None,
                            "annotations": None,
                            "audio": None,
                            "function_call": None,
                            "reasoning": None,
                        },
                        "logprobs": None,
                        "finish_reason": finish,
                        "stop_reason": stop_reason,
                        "token_ids": None,
                        "routed_experts": None,
                    }
                ],
                "service_tier": None,
                "system_fingerprint": _FINGERPRINT,
                "usage": usage,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "prompt_text": None,
                "kv_transfer_params": None,
                "ec_transfer_params": None,
                "metrics": None,
            }
        else:
            body = {
                "id": rid,
                "object": "text_completion",
                "created": created,
                "model": self.served_model_name,
                "choices": [
                    {
                        "index": 0,
                        "text": content,
                        "logprobs": None,
                        "finish_reason": finish,
                        "stop_reason": stop_reason,
                        "token_ids": None,
                        "prompt_logprobs": None,
                        "prompt_token_ids": None,
                        "routed_experts": None,
                    }
                ],
                "service_tier": None,
                "system_fingerprint": _FINGERPRINT,
                "usage": usage,
                "kv_transfer_params": None,
                "ec_transfer_params": None,
                "metrics": None,
            }
        return JSONResponse(body)

    async def _sse(
        self,
        sim_req: SimRequest,
        stream: _Stream,
        text: TextSource,
        req: GenerationParams,
        rid: str,
        *,
        chat: bool,
    ) -> AsyncIterator[str]:
        created = int(time.time())
        model = json.dumps(self.served_model_name)
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = f'data: {{"id":"{rid}","object":"{obj}","created":{created},"model":{model},'
        reasoning = self.config.reasoning_tokens(sim_req.max_tokens) if chat else 0
        think = '"choices":[{"index":0,"delta":{"reasoning_content":'
        if chat:
            mid = '"choices":[{"index":0,"delta":{"content":'
            tail = '},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
            last = '},"logprobs":null,"finish_reason":"%s","stop_reason":%s,"token_ids":null}]}\n\n'
        else:
            mid = '"choices":[{"index":0,"text":'
            tail = (
                ',"logprobs":null,"finish_reason":null,"stop_reason":null,'
                '"prompt_token_ids":null,"token_ids":null}]}\n\n'
            )
            last = (
                ',"logprobs":null,"finish_reason":"%s","stop_reason":%s,'
                '"prompt_token_ids":null,"token_ids":null}]}\n\n'
            )
        ids = req.return_token_ids and not chat
        if ids:  # vLLM's return_token_ids: each chunk carries its token's id
            tail = tail.replace('"token_ids":null', '"token_ids":[%d]')
            last = last.replace('"token_ids":null', '"token_ids":[%d]')
        stops = req.stops
        stats = self.core.stats
        emitted = 0
        text_so_far = ""
        finish: str | None = None
        stop_reason = "null"
        try:
            if chat:
                yield (
                    head + '"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
                    '"logprobs":null,"finish_reason":null}],"prompt_token_ids":null,'
                    '"prompt_text":null}\n\n'
                )
            while finish is None:
                await stream.wait(emitted)
                produced = stream.produced
                if produced > emitted:
                    stats.stream_lag.observe(max(0.0, time.monotonic() - stream.times[emitted]))
                out: list[str] = []
                while emitted < produced:
                    piece_json = text.word_json(emitted)
                    part = think if emitted < reasoning else mid
                    if stops:
                        before = len(text_so_far)
                        text_so_far += text.word(emitted)
                        hit = self._stop_check(text_so_far, stops, before)
                        if hit is not None:
                            emitted += 1
                            piece_json = json.dumps(text_so_far[before : hit[0]])
                            finish = "stop"
                            stop_reason = json.dumps(hit[1])
                            self.core.abort(sim_req, reason="stop")
                            end: tuple[str | int, ...] = (finish, stop_reason)
                            if ids:
                                end = (finish, stop_reason, text.token_id(emitted - 1))
                            out.append(head + part + piece_json + last % end)
                            break
                    emitted += 1
                    if emitted == produced and stream.done:
                        finish = sim_req.finish_reason or "length"
                        end = (finish, stop_reason)
                        if ids:
                            end = (finish, stop_reason, text.token_id(emitted - 1))
                        out.append(head + part + piece_json + last % end)
                    elif ids:
                        out.append(head + part + piece_json + tail % text.token_id(emitted - 1))
                    else:
                        out.append(head + part + piece_json + tail)
                if out:
                    yield "".join(out)
                elif stream.done:
                    finish = sim_req.finish_reason or "abort"
            if req.include_usage:
                total = sim_req.prompt_tokens + emitted
                details = (
                    f',"completion_tokens_details":{{"reasoning_tokens":{min(reasoning, emitted)}}}'
                    if reasoning
                    else ""
                )
                yield (
                    f'{head}"choices":[],"usage":{{"prompt_tokens":{sim_req.prompt_tokens},'
                    f'"total_tokens":{total},"completion_tokens":{emitted}{details}}},'
                    f'"system_fingerprint":"{_FINGERPRINT}"}}\n\n'
                )
            yield "data: [DONE]\n\n"
        finally:
            if not sim_req.done:
                self.core.abort(sim_req)

    # ------------------------------------------------------------------------------------------
    # Metrics

    async def metrics(self, request: Request) -> Response:
        """Engine metrics (vLLM names), dcgm-exporter power lines and the ground truth."""
        return Response(
            self.render_metrics(time.monotonic()),
            media_type="text/plain; version=0.0.4; charset=utf-8",
        )

    def render_metrics(self, now_s: float) -> str:
        """The whole exposition at monotonic time ``now_s``."""
        return render_metrics(
            self.core,
            served_model_name=self.served_model_name,
            gpu_labels=self._gpu_labels,
            now_s=now_s,
        )


async def serve(
    app: SimApp,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    ready_fd: int | None = None,
    on_ready: Callable[[int], None] | None = None,
) -> None:
    """Serve ``app`` with uvicorn until SIGINT/SIGTERM.

    The listening socket is bound here (``port`` 0 = an ephemeral port); once the engine runs,
    the port is written as one line to ``ready_fd`` (if given) and passed to ``on_ready``.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Nagle's algorithm off on every connection, as on vLLM's (uvloop) and on any server asyncio
    # binds itself: asyncio turns it off only on sockets whose proto is IPPROTO_TCP (a socket
    # made with proto 0 passes on 0 to the ones it accepts), and Linux copies the listener's
    # TCP_NODELAY to them. With Nagle on, a response's first token chunk waits in the kernel
    # until the client acknowledges the response head. A new connection's first segments are
    # acknowledged at once (quick-ACK mode); a client that has just sent its next request on a
    # kept-alive connection delays its ACK (interactive mode), and the chunk waits 20-40 ms.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise EndpointError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.setblocking(False)
    bound = int(sock.getsockname()[1])
    config = uvicorn.Config(
        app.app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,
        # uvicorn's 5 s default closes idle keep-alive connections while a load generator's
        # pool may be about to reuse them (a read error on the client); nginx waits 75 s.
        timeout_keep_alive=75,
        backlog=2048,
    )
    server = uvicorn.Server(config)

    async def announce() -> None:
        while not server.started:  # noqa: ASYNC110 (uvicorn offers no event to wait on)
            await asyncio.sleep(0.01)
        # Everything allocated so far (modules, the app) lives as long as the process: keep it
        # out of the collector's full passes, which otherwise stall the engine loop.
        gc.freeze()
        # Few, cheap collections: at thousands of tokens a second, CPython's default thresholds
        # run full collections often enough to stall the loop for tens of ms.
        gc.set_threshold(50_000, 50, 1000)
        logger.info("serving the simulator on http://%s:%d/v1", host, bound)
        if ready_fd is not None:
            os.write(ready_fd, f"{bound}\n".encode())
            os.close(ready_fd)
        if on_ready is not None:
            on_ready(bound)

    watcher = asyncio.create_task(announce())
    try:
        await server.serve(sockets=[sock])
    finally:
        watcher.cancel()
        sock.close()
