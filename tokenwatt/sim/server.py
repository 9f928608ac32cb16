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
from typing import Any

import uvicorn
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tokenwatt import __version__
from tokenwatt.errors import EndpointError
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
from tokenwatt.sim.metrics import MetricsWriter

__all__ = ["SIM_VERSION", "SimApp", "serve"]

logger = logging.getLogger(__name__)

SIM_VERSION = f"tokenwatt-sim {__version__}"
"""What ``/version`` reports: never a real engine's version."""

_FINGERPRINT = f"tokenwatt-sim-{__version__}"


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
                "engine": "tokenwatt-sim",
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
            if isinstance(req.prompt, str):
                prompt_tokens = text_prompt_tokens(req.prompt)
                seed_text = req.prompt
            else:
                prompt_tokens = len(req.prompt)
                if any(not isinstance(t, int) or t < 0 for t in req.prompt):
                    raise ApiError("token ids must be non-negative integers", param="prompt")
                seed_text = ",".join(map(str, req.prompt[:64]))
            params = req.params()
            # Only the counts go on: the prompt (up to tens of thousands of ints) is dropped
            # now, not kept alive for the request's lifetime, which keeps garbage-collection
            # pauses short.
            del req, body
            return await self._generate(params, prompt_tokens, seed_text, chat=False)
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
                            out.append(head + mid + piece_json + last % (finish, stop_reason))
                            break
                    emitted += 1
                    if emitted == produced and stream.done:
                        finish = sim_req.finish_reason or "length"
                        out.append(head + mid + piece_json + last % (finish, stop_reason))
                    else:
                        out.append(head + mid + piece_json + tail)
                if out:
                    yield "".join(out)
                elif stream.done:
                    finish = sim_req.finish_reason or "abort"
            if req.include_usage:
                total = sim_req.prompt_tokens + emitted
                yield (
                    f'{head}"choices":[],"usage":{{"prompt_tokens":{sim_req.prompt_tokens},'
                    f'"total_tokens":{total},"completion_tokens":{emitted}}},'
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
        cfg = self.config
        core = self.core
        st = core.stats
        g = cfg.geometry
        w = MetricsWriter()
        labels = {"engine": "0", "model_name": self.served_model_name}

        # -- vLLM (names, types and labels as vLLM 0.32 writes them) --
        w.simple(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            len(core.running),
            labels,
        )
        w.simple(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            len(core.waiting),
            labels,
        )
        w.simple(
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            core.kv_usage,
            labels,
        )
        w.simple(
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemption from the engine.",
            st.preemptions,
            labels,
        )
        w.simple(
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            st.prompt_tokens,
            labels,
        )
        w.simple(
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            st.generation_tokens,
            labels,
        )
        w.labelled(
            "vllm:request_success_total",
            "counter",
            "Count of successfully processed requests.",
            (
                ({**labels, "finished_reason": reason}, float(st.finished.get(reason, 0)))
                for reason in ("stop", "length", "abort", "error")
            ),
        )
        tok = 1.0 / cfg.tensor_parallel
        w.simple(
            "vllm:estimated_flops_per_gpu_total",
            "counter",
            "Estimated number of floating point operations per GPU (for Model Flops Utilization"
            " calculations).",
            st.flops * tok,
            labels,
        )
        w.simple(
            "vllm:estimated_read_bytes_per_gpu_total",
            "counter",
            "Estimated number of bytes read from memory per GPU (for Model Flops Utilization"
            " calculations).",
            st.read_bytes * tok,
            labels,
        )
        w.simple(
            "vllm:estimated_write_bytes_per_gpu_total",
            "counter",
            "Estimated number of bytes written to memory per GPU (for Model Flops Utilization"
            " calculations).",
            st.kv_write_bytes * tok,
            labels,
        )
        w.histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            st.iteration_tokens,
            labels,
        )
        w.histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            st.ttft,
            labels,
        )
        w.histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            st.itl,
            labels,
        )
        w.histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            st.tpot,
            labels,
        )
        w.histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            st.e2e,
            labels,
        )
        w.histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            st.queue,
            labels,
        )
        w.simple(
            "vllm:cache_config_info",
            "gauge",
            "Information of the LLMEngine CacheConfig",
            1.0,
            {
                "block_size": str(cfg.block_size),
                "cache_dtype": g.kv_dtype,
                "enable_prefix_caching": "False",
                "engine": "0",
                "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
                "kv_cache_memory_bytes": str(int(cfg.kv_capacity_bytes)),
                "kv_cache_size_tokens": str(cfg.kv_capacity_tokens),
                "num_gpu_blocks": str(cfg.num_blocks),
            },
        )

        # -- dcgm-exporter (field names, units and label names as dcgm-exporter writes them) --
        meter = core.meter
        power_w = meter.mean_power_w(now_s)
        energy_mj = meter.energy_j(now_s) * 1000.0
        reasons = meter.reasons(now_s)
        w.labelled(
            "DCGM_FI_DEV_POWER_USAGE",
            "gauge",
            "Power draw (in W).",
            ((lab, power_w) for lab in self._gpu_labels),
        )
        w.labelled(
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "counter",
            "Total energy consumption since boot (in mJ).",
            ((lab, energy_mj) for lab in self._gpu_labels),
        )
        w.labelled(
            "DCGM_FI_DEV_POWER_MGMT_LIMIT",
            "gauge",
            "Power management limit (in W).",
            ((lab, cfg.power.limit_w) for lab in self._gpu_labels),
        )
        w.labelled(
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
            "gauge",
            "Current clock event reasons (bitmask of NVML clocks event reasons).",
            ((lab, float(reasons)) for lab in self._gpu_labels),
        )

        # -- ground truth of the simulator --
        gpus = float(cfg.tensor_parallel)
        w.simple(
            "tokenwatt_sim_info",
            "gauge",
            "The simulated engine (always 1).",
            1.0,
            {
                "version": SIM_VERSION,
                "gpu": cfg.gpu.key,
                "gpus": str(cfg.tensor_parallel),
                "model": g.name,
                "weight_dtype": g.weight_dtype,
                "kv_dtype": g.kv_dtype,
            },
        )
        truth = (
            ("tokenwatt_sim_steps_total", "Engine steps run.", st.steps),
            ("tokenwatt_sim_busy_seconds_total", "Time spent in steps, s.", st.busy_s),
            ("tokenwatt_sim_read_bytes_total", "Bytes read by all steps, all GPUs.", st.read_bytes),
            (
                "tokenwatt_sim_weight_read_bytes_total",
                "Weight bytes read (dense + touched experts), all GPUs.",
                st.weight_read_bytes,
            ),
            ("tokenwatt_sim_kv_read_bytes_total", "KV-cache bytes read.", st.kv_read_bytes),
            ("tokenwatt_sim_kv_write_bytes_total", "KV-cache bytes written.", st.kv_write_bytes),
            ("tokenwatt_sim_flops_total", "Floating-point operations, all GPUs.", st.flops),
            (
                "tokenwatt_sim_running_seconds_total",
                "Integral of the running-request count over time (mean batch = delta / seconds).",
                st.running_seq_s,
            ),
            (
                "tokenwatt_sim_decode_seconds_total",
                "Integral of the count of sequences emitting a token each step, over time.",
                st.decode_seq_s,
            ),
            ("tokenwatt_sim_decode_tokens_total", "Tokens from decode steps.", st.decode_tokens),
            (
                "tokenwatt_sim_energy_joules_total",
                "Energy drawn by all simulated GPUs, J.",
                meter.energy_j(now_s) * gpus,
            ),
            (
                "tokenwatt_sim_throttled_seconds_total",
                "Step time spent at the power cap, s.",
                st.throttled_s,
            ),
        )
        for name, help_text, value in truth:
            w.simple(name, "counter", help_text, float(value))
        w.histogram(
            "tokenwatt_sim_scheduling_lag_seconds",
            "How late the engine loop woke after each step's end, s.",
            st.lag,
            {},
        )
        w.simple(
            "tokenwatt_sim_lost_seconds_total",
            "counter",
            "Time the engine timeline skipped because the process fell behind real time, s.",
            st.lost_s,
        )
        w.simple(
            "tokenwatt_sim_scheduling_lag_max_seconds",
            "gauge",
            "Largest scheduling lag since start, s.",
            st.lag_max_s,
        )
        w.histogram(
            "tokenwatt_sim_stream_lag_seconds",
            "Delay from a token's production to its write on the stream, s.",
            st.stream_lag,
            {},
        )
        w.simple(
            "tokenwatt_sim_kv_capacity_tokens",
            "gauge",
            "Tokens the simulated KV cache holds.",
            float(cfg.kv_capacity_tokens),
        )
        w.simple(
            "tokenwatt_sim_rated_bandwidth_bytes_per_second",
            "gauge",
            "Datasheet memory bandwidth of all simulated GPUs.",
            cfg.rated_bandwidth,
        )
        return w.text()


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
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
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
