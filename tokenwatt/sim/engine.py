"""The simulated inference engine: continuous batching, chunked prefill, KV cache, roofline steps.

Scheduling follows vLLM's V1 scheduler in outline. Every step has a token budget
(``max_num_batched_tokens``). Running sequences come first, in admission order, each asking for
the tokens it has not computed yet (1 for a decoding sequence, the rest of its prompt, chunked to
the budget, for one still in prefill). Then, if nothing was preempted, waiting requests are
admitted first-come first-served while there is budget, a free sequence slot
(``max_num_seqs``) and KV blocks for their first chunk. The KV cache holds
``gpu_memory_utilization × memory − weights − reserve`` bytes in blocks of ``block_size``
tokens; when a running sequence needs a block and none is free, the most recently admitted
sequence is preempted: its blocks are freed and it waits at the head of the queue to be
recomputed (prompt plus the tokens it already produced). With prefix caching on (vLLM's default,
``engine.sim.enable_prefix_caching``), a request whose prompt came as token ids starts with
the leading blocks the cache already holds, computes only the rest, and blocks nobody holds stay
cached until a newer request needs the space (:mod:`tokenwatt.sim.prefix_cache`).

Step time is a roofline: ``max(bytes ÷ (bandwidth × η_bw), FLOPs ÷ (peak × η_flop))``, stretched
when the power model caps the clocks, plus a fixed per-step overhead (scheduling, launches,
sampling). Bytes come from :mod:`tokenwatt.geometry` (dense weights, distinct routed experts the
step's tokens touch, KV of each scheduled sequence's context, KV written); FLOPs are ``2 ×`` the
active linear parameters per token, attention scores over each context, and the output head for
each sampled token.

:class:`EngineCore` is clock-free (it is told when steps start and end), so tests and the
offline driver run it in virtual time; :class:`EngineLoop` drives it in real
time inside the HTTP server's event loop and reports how late it wakes (scheduling lag).
:mod:`tokenwatt.sim.offline` runs it in virtual time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tokenwatt.errors import InputError
from tokenwatt.geometry import ModelGeometry
from tokenwatt.gpus import GpuPreset
from tokenwatt.schema.spec import SimSpec
from tokenwatt.sim.metrics import Histogram
from tokenwatt.sim.power import (
    CLOCKS_EVENT_SW_POWER_CAP,
    PowerMeter,
    PowerModel,
)
from tokenwatt.sim.prefix_cache import PrefixCache

__all__ = [
    "EngineConfig",
    "EngineCore",
    "EngineLoop",
    "EngineStats",
    "Listener",
    "SimRequest",
    "StepPlan",
]

logger = logging.getLogger(__name__)

GB = 1e9
GIB = 2**30

# Calibrated defaults (site/simulator.md explains how): fractions of datasheet bandwidth and
# FLOP/s that serving kernels reach, the fixed cost of a step, and the power terms as fractions
# of the board limit.
DEFAULT_BANDWIDTH_EFFICIENCY = 0.70
DEFAULT_COMPUTE_EFFICIENCY = 0.45
DEFAULT_STEP_OVERHEAD_MS = 2.0
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vLLM 0.32's default
DEFAULT_RESERVE_GB = 4.0  # activations, CUDA graphs, workspaces: not KV cache
BUSY_POWER_FRACTION = 0.35
MEMORY_POWER_FRACTION = 0.65
COMPUTE_POWER_FRACTION = 0.80
# The context length served when neither the spec nor the model's config.json states one.
DEFAULT_MAX_MODEL_LEN = 4096

_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
_ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)  # fmt: skip
_E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
_LAG_BUCKETS = (
    0.0002, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.2,
    0.5, 1.0,
)  # fmt: skip


@dataclass(frozen=True)
class EngineConfig:
    """Everything that fixes the simulated engine's behaviour."""

    geometry: ModelGeometry
    gpu: GpuPreset
    tensor_parallel: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    block_size: int
    gpu_memory_utilization: float
    reserve_bytes_per_gpu: float
    bandwidth_efficiency: float
    compute_efficiency: float
    step_overhead_s: float
    power: PowerModel
    enable_prefix_caching: bool = True
    reasoning_fraction: float = 0.0
    """Chat streams: the share of ``max_tokens`` sent first as reasoning (the API's concern:
    reasoning tokens cost the engine what answer tokens do)."""

    def reasoning_tokens(self, max_tokens: int) -> int:
        """How many of a chat answer's first tokens are reasoning."""
        return round(self.reasoning_fraction * max_tokens)

    @classmethod
    def build(
        cls,
        *,
        geometry: ModelGeometry,
        gpu: GpuPreset,
        sim: SimSpec | None = None,
        tensor_parallel: int = 1,
        max_model_len: int | None = None,
    ) -> EngineConfig:
        """Defaults as vLLM 0.32 picks them for this GPU, overridden by the spec's ``sim``.

        Raises:
            InputError: when the weights do not fit, or the KV cache cannot hold one sequence
                of ``max_model_len`` tokens (vLLM refuses to start in both cases).
        """
        sim = sim or SimSpec()
        mem_gib = gpu.memory_gb
        # vLLM's EngineArgs defaults for the OpenAI server by device memory (arg_utils.py).
        if mem_gib >= 160:
            seqs, batched = 1024, 16384
        elif mem_gib >= 70 and "a100" not in gpu.key:
            seqs, batched = 1024, 8192
        else:
            seqs, batched = 256, 2048
        limit_w = sim.power_limit_w or gpu.power_limit_w
        try:
            power = PowerModel(
                idle_w=gpu.idle_power_w,
                limit_w=limit_w,
                busy_w=BUSY_POWER_FRACTION * gpu.power_limit_w,
                memory_w=MEMORY_POWER_FRACTION * gpu.power_limit_w,
                compute_w=COMPUTE_POWER_FRACTION * gpu.power_limit_w,
            )
        except ValueError as exc:
            raise InputError(f"engine.sim.power_limit_w: {exc}") from None
        config = cls(
            geometry=geometry,
            gpu=gpu,
            tensor_parallel=tensor_parallel,
            max_num_seqs=sim.max_num_seqs or seqs,
            max_num_batched_tokens=sim.max_num_batched_tokens or batched,
            max_model_len=(
                max_model_len
                or sim.max_model_len
                or geometry.max_position_embeddings
                or DEFAULT_MAX_MODEL_LEN
            ),
            block_size=sim.block_size,
            gpu_memory_utilization=sim.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION,
            reserve_bytes_per_gpu=DEFAULT_RESERVE_GB * GB,
            bandwidth_efficiency=sim.bandwidth_efficiency or DEFAULT_BANDWIDTH_EFFICIENCY,
            compute_efficiency=sim.compute_efficiency or DEFAULT_COMPUTE_EFFICIENCY,
            step_overhead_s=(
                sim.step_overhead_ms
                if sim.step_overhead_ms is not None
                else DEFAULT_STEP_OVERHEAD_MS
            )
            / 1000.0,
            power=power,
            enable_prefix_caching=sim.enable_prefix_caching,
            reasoning_fraction=sim.reasoning_fraction,
        )
        config.check()
        return config

    @property
    def kv_capacity_bytes(self) -> float:
        """Bytes left for the KV cache on all GPUs."""
        # HBM capacities on datasheets are binary: an "80GB" H100 has 80 GiB (NVML: 81,559 MiB).
        usable = self.gpu.memory_gb * GIB * self.gpu_memory_utilization
        free = (usable - self.reserve_bytes_per_gpu) * self.tensor_parallel
        return free - self.geometry.weight_bytes

    @property
    def block_bytes(self) -> float:
        """KV bytes of one block (all layers, every sliding window still open)."""
        return self.block_size * self.geometry.kv_bytes_per_token

    @property
    def num_blocks(self) -> int:
        """KV-cache blocks."""
        return max(0, int(self.kv_capacity_bytes // self.block_bytes))

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens the KV cache holds."""
        return self.num_blocks * self.block_size

    @property
    def peak_flops(self) -> float:
        """Peak dense FLOP/s of all GPUs for the weights' type (FP8 math for FP8/FP4 weights)."""
        per_gpu = self.gpu.bf16_tflops
        if self.geometry.weight_dtype in ("fp8", "fp4", "nvfp4") and self.gpu.fp8_tflops:
            per_gpu = self.gpu.fp8_tflops
        return per_gpu * 1e12 * self.tensor_parallel

    @property
    def rated_bandwidth(self) -> float:
        """Datasheet bandwidth of all GPUs, bytes/s."""
        return self.gpu.mem_bw_tbs * 1e12 * self.tensor_parallel

    def check(self) -> None:
        """Refuse configurations a real engine would refuse to start with."""
        g = self.geometry
        usable = self.gpu.memory_gb * self.gpu_memory_utilization * self.tensor_parallel
        if self.kv_capacity_bytes <= 0:
            raise InputError(
                f"{g.name}: weights ({g.weight_bytes / GB:.1f} GB, {g.weight_dtype}) do not fit"
                f" {self.tensor_parallel} x {self.gpu.name} ({usable:.0f} GB usable); use more"
                " GPUs (tensor parallel) or smaller weights"
            )
        if self.kv_capacity_tokens < self.max_model_len:
            raise InputError(
                f"{g.name}: the KV cache holds {self.kv_capacity_tokens} tokens, fewer than one"
                f" sequence of max_model_len {self.max_model_len}; lower the max model length"
                " or use more GPUs"
            )

    def describe(self) -> str:
        """One line for logs."""
        return (
            f"{self.tensor_parallel} x {self.gpu.name}: KV cache {self.kv_capacity_bytes / GB:.1f}"
            f" GB = {self.kv_capacity_tokens} tokens, max_num_seqs {self.max_num_seqs},"
            f" max_num_batched_tokens {self.max_num_batched_tokens}, overhead"
            f" {self.step_overhead_s * 1000:.1f} ms, eta_bw {self.bandwidth_efficiency:.2f},"
            f" eta_flop {self.compute_efficiency:.2f}, {self.block_size}-token blocks, prefix"
            f" caching {'on' if self.enable_prefix_caching else 'off'}"
            + (
                f", chat answers {self.reasoning_fraction:.0%} reasoning"
                if self.reasoning_fraction
                else ""
            )
        )


class Listener(Protocol):
    """Receives a request's tokens as the engine produces them."""

    def notify(self, req: SimRequest, t_s: float) -> None:
        """``req`` produced a token at ``t_s`` (``req.done`` once it finished)."""


class SimRequest:
    """One sequence inside the engine."""

    __slots__ = (
        "aborted",
        "arrival_s",
        "block_hashes",
        "blocks",
        "computed",
        "done",
        "finish_reason",
        "first_scheduled_s",
        "first_token_s",
        "generated",
        "held",
        "last_token_s",
        "listener",
        "max_tokens",
        "preemptions",
        "prompt_tokens",
        "registered",
        "rid",
        "target_tokens",
    )

    def __init__(
        self,
        rid: int,
        *,
        prompt_tokens: int,
        max_tokens: int,
        target_tokens: int | None = None,
        arrival_s: float = 0.0,
        listener: Listener | None = None,
        block_hashes: Sequence[int] | None = None,
    ) -> None:
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.target_tokens = min(max_tokens, target_tokens or max_tokens)
        self.arrival_s = arrival_s
        self.listener = listener
        self.computed = 0
        self.generated = 0
        self.blocks = 0
        """KV blocks the request holds alone (not through the prefix cache)."""
        self.block_hashes = block_hashes
        """Hashes of the prompt's full blocks (token-id prompts); None = nothing to share."""
        self.held: list[int] = []
        """Hashes of the cached blocks the request holds."""
        self.registered = 0
        """Leading prompt blocks already looked up or put in the cache."""
        self.first_scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.last_token_s: float | None = None
        self.finish_reason: str | None = None
        self.preemptions = 0
        self.done = False
        self.aborted = False


@dataclass
class StepPlan:
    """One scheduled engine step."""

    start_s: float
    duration_s: float
    entries: list[tuple[SimRequest, int]]
    tokens: int
    decode_seqs: int
    running: int
    weight_bytes: float
    kv_read_bytes: float
    kv_write_bytes: float
    flops: float
    power_w: float
    stretch: float

    @property
    def read_bytes(self) -> float:
        """Bytes the step reads."""
        return self.weight_bytes + self.kv_read_bytes

    @property
    def end_s(self) -> float:
        """When the step ends."""
        return self.start_s + self.duration_s


@dataclass
class EngineStats:
    """Ground-truth counters and the vLLM-style histograms."""

    steps: int = 0
    busy_s: float = 0.0
    weight_read_bytes: float = 0.0
    kv_read_bytes: float = 0.0
    kv_write_bytes: float = 0.0
    flops: float = 0.0
    running_seq_s: float = 0.0
    """Integral of the running count over time (mean batch = difference / elapsed)."""
    decode_seq_s: float = 0.0
    """Integral of the decoding count (sequences that emit a token in a step) over time."""
    decode_tokens: int = 0
    throttled_s: float = 0.0
    throttled_steps: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    prefix_queried_tokens: int = 0
    """Prompt tokens looked up in the prefix cache at admission (vLLM's queries)."""
    prefix_hit_tokens: int = 0
    """Prompt tokens found there (vLLM's hits)."""
    finished: dict[str, int] = field(
        default_factory=lambda: {"stop": 0, "length": 0, "abort": 0, "error": 0}
    )
    ttft: Histogram = field(default_factory=lambda: Histogram(_TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(_ITL_BUCKETS))
    tpot: Histogram = field(default_factory=lambda: Histogram(_ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(_E2E_BUCKETS))
    queue: Histogram = field(default_factory=lambda: Histogram(_E2E_BUCKETS))
    iteration_tokens: Histogram = field(default_factory=lambda: Histogram(_TOKEN_BUCKETS))
    lag: Histogram = field(default_factory=lambda: Histogram(_LAG_BUCKETS))
    lag_max_s: float = 0.0
    lost_s: float = 0.0
    """Time the real-time loop skipped because it fell too far behind."""
    stream_lag: Histogram = field(default_factory=lambda: Histogram(_LAG_BUCKETS))

    @property
    def read_bytes(self) -> float:
        """Every byte the steps read."""
        return self.weight_read_bytes + self.kv_read_bytes


class EngineCore:
    """The scheduler and cost model, in whatever time the caller supplies."""

    def __init__(self, config: EngineConfig, *, t0_s: float = 0.0) -> None:
        self.config = config
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.free_blocks = config.num_blocks
        """KV blocks neither held by a request nor cached."""
        self.cache = PrefixCache()
        self.stats = EngineStats()
        self.meter = PowerMeter(idle_w=config.power.idle_w, t0_s=t0_s)
        g = config.geometry
        self._kv_linear = not g.sliding_windows
        self._kv_per_token = g.kv_bytes_per_token
        self._bw = config.rated_bandwidth * config.bandwidth_efficiency
        self._flops = config.peak_flops * config.compute_efficiency

    # ------------------------------------------------------------------------------------------
    # Requests

    def add(self, req: SimRequest) -> None:
        """Queue a request."""
        self.waiting.append(req)

    def abort(self, req: SimRequest, *, reason: str = "abort") -> None:
        """Drop a request: the client went away (``abort``) or a stop string ended it (``stop``).

        Its KV blocks are freed at once.
        """
        if req.done:
            return
        req.aborted = True
        req.done = True
        req.finish_reason = reason
        self.stats.finished[reason] = self.stats.finished.get(reason, 0) + 1
        if reason != "abort":
            self.stats.e2e.observe(max(0.0, (req.last_token_s or req.arrival_s) - req.arrival_s))
        self._release(req)
        if req in self.running:
            self.running.remove(req)
        else:
            with contextlib.suppress(ValueError):
                self.waiting.remove(req)

    def fail_all(self) -> None:
        """End every request with finish reason ``error`` (the engine cannot go on)."""
        for req in [*self.running, *self.waiting]:
            if req.done:
                continue
            req.done = True
            req.finish_reason = "error"
            self.stats.finished["error"] += 1
            if req.listener is not None:
                req.listener.notify(req, req.last_token_s or req.arrival_s)
        self.running = []
        self.waiting.clear()
        self.free_blocks = self.config.num_blocks
        self.cache = PrefixCache()

    def rebase(self, shift_s: float) -> None:
        """Move the clock's origin ``shift_s`` later: every time held becomes ``shift_s`` less.

        Virtual time runs each probe from 0; a probe that starts on the previous one's requests
        (``sweep.ramp``) takes over its engine between two steps and rebases it. The power meter
        restarts at the new origin (virtual probes measure no power).
        """
        for req in (*self.running, *self.waiting):
            req.arrival_s -= shift_s
            if req.first_scheduled_s is not None:
                req.first_scheduled_s -= shift_s
            if req.first_token_s is not None:
                req.first_token_s -= shift_s
            if req.last_token_s is not None:
                req.last_token_s -= shift_s
        self.meter = PowerMeter(idle_w=self.config.power.idle_w, t0_s=0.0)

    @property
    def has_work(self) -> bool:
        """Whether any request is running or waiting."""
        return bool(self.running or self.waiting)

    @property
    def kv_usage(self) -> float:
        """Fraction of KV blocks held by requests (cached blocks nobody holds count as free)."""
        total = self.config.num_blocks
        return (total - self.available_blocks) / total if total else 0.0

    @property
    def available_blocks(self) -> int:
        """KV blocks a request could take: the free ones and the evictable cached ones."""
        return self.free_blocks + self.cache.evictable

    # ------------------------------------------------------------------------------------------
    # Blocks

    def _take(self, need: int) -> None:
        """Take ``need`` blocks (at most :attr:`available_blocks`), evicting cached ones first."""
        while self.free_blocks < need and self.cache.evict():
            self.free_blocks += 1
        self.free_blocks -= need

    def _release(self, req: SimRequest) -> None:
        """Let go of every block ``req`` holds: its own are freed, cached ones stay cached."""
        self.free_blocks += req.blocks
        req.blocks = 0
        if req.held:
            self.cache.release(req.held)
            req.held = []
        req.registered = 0

    def _lookup(self, req: SimRequest) -> tuple[int, int]:
        """(cached leading blocks of a waiting request, how many of them are evictable)."""
        hashes = req.block_hashes
        if not self.config.enable_prefix_caching or req.computed or not hashes:
            return 0, 0
        # vLLM computes the last token again (its logits are needed): whole blocks before it.
        limit = (req.prompt_tokens + req.generated - 1) // self.config.block_size
        return self.cache.lookup(hashes, limit)

    def _register(self, req: SimRequest, upto_tokens: int) -> None:
        """Put the prompt blocks that ``upto_tokens`` fills into the cache (in order)."""
        hashes = req.block_hashes
        if hashes is None or not self.config.enable_prefix_caching:
            return
        full = min(len(hashes), upto_tokens // self.config.block_size)
        cache = self.cache
        while req.registered < full:
            h = hashes[req.registered]
            req.registered += 1
            if cache.insert(h):  # the request's own block becomes the cached copy
                req.blocks -= 1
                req.held.append(h)

    # ------------------------------------------------------------------------------------------
    # Scheduling

    def _preempt(self, victim: SimRequest) -> None:
        self._release(victim)
        victim.computed = 0
        victim.preemptions += 1
        self.stats.preemptions += 1
        self.waiting.appendleft(victim)

    def schedule(self, start_s: float) -> StepPlan | None:
        """Choose the next step's batch, reserve its KV blocks and cost it."""
        cfg = self.config
        bs = cfg.block_size
        budget = cfg.max_num_batched_tokens
        entries: list[tuple[SimRequest, int]] = []
        preempted = False
        running = self.running
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            n = min(req.prompt_tokens + req.generated - req.computed, budget)
            need = -(-(req.computed + n) // bs) - req.blocks - len(req.held)
            self_preempted = False
            while need > self.available_blocks:
                victim = running.pop()
                self._preempt(victim)
                preempted = True
                if victim is req:
                    self_preempted = True
                    break
            if self_preempted:
                break
            self._take(need)
            req.blocks += need
            self._register(req, req.computed + n)
            entries.append((req, n))
            budget -= n
            i += 1
        if not preempted:
            while self.waiting and len(running) < cfg.max_num_seqs and budget > 0:
                req = self.waiting[0]
                hit, idle = self._lookup(req)
                start = req.computed + hit * bs
                n = min(req.prompt_tokens + req.generated - start, budget)
                need = -(-(start + n) // bs) - hit - req.blocks
                if need > self.available_blocks - idle:
                    break
                self.waiting.popleft()
                running.append(req)
                if cfg.enable_prefix_caching:
                    self.stats.prefix_queried_tokens += req.prompt_tokens + req.generated
                    self.stats.prefix_hit_tokens += hit * bs
                if hit:
                    assert req.block_hashes is not None
                    req.held = list(req.block_hashes[:hit])
                    self.cache.acquire(req.held)
                    req.registered = hit
                    req.computed = start
                self._take(need)
                req.blocks += need
                self._register(req, start + n)
                if req.first_scheduled_s is None:
                    req.first_scheduled_s = start_s
                    self.stats.queue.observe(start_s - req.arrival_s)
                entries.append((req, n))
                budget -= n
        if not entries:
            return None
        plan = self._cost(start_s, entries)
        # The power of the step is known now: record it at once, so a power reading taken
        # while the step runs sees it (as NVML would), not idle.
        gpu_end = plan.end_s - cfg.step_overhead_s
        reasons = CLOCKS_EVENT_SW_POWER_CAP if plan.stretch > 1.0 else 0
        self.meter.add(start_s, gpu_end, plan.power_w, reasons)
        self.meter.add(gpu_end, plan.end_s, cfg.power.idle_w + cfg.power.busy_w, 0)
        return plan

    def _cost(self, start_s: float, entries: list[tuple[SimRequest, int]]) -> StepPlan:
        cfg = self.config
        g = cfg.geometry
        tokens = 0
        decode = 0
        attn_flops = 0.0
        kv_read = 0.0
        kv_write = 0.0
        linear_ctx = 0
        for req, n in entries:
            c = req.computed
            tokens += n
            if c + n == req.prompt_tokens + req.generated:
                decode += 1  # this sequence samples a token at the end of the step
            attn_flops += g.attention_flops(start=c, count=n)
            if self._kv_linear:
                linear_ctx += c + n
            else:
                after = g.kv_bytes(c + n)
                kv_read += after
                kv_write += after - g.kv_bytes(c)
        if self._kv_linear:
            kv_read = linear_ctx * self._kv_per_token
            kv_write = tokens * self._kv_per_token
        dense, experts = g.weight_read_bytes(tokens)
        weight_bytes = dense + experts
        flops = g.linear_flops_per_token * tokens + g.head_flops_per_token * decode + attn_flops
        traffic = weight_bytes + kv_read + kv_write
        t_gpu = max(traffic / self._bw, flops / self._flops)
        bw_util = traffic / t_gpu / cfg.rated_bandwidth
        fl_util = flops / t_gpu / cfg.peak_flops
        power = cfg.power.step(bandwidth_util=bw_util, compute_util=fl_util)
        t_gpu *= power.stretch
        return StepPlan(
            start_s=start_s,
            duration_s=t_gpu + cfg.step_overhead_s,
            entries=entries,
            tokens=tokens,
            decode_seqs=decode,
            running=len(self.running),
            weight_bytes=weight_bytes,
            kv_read_bytes=kv_read,
            kv_write_bytes=kv_write,
            flops=flops,
            power_w=power.power_w,
            stretch=power.stretch,
        )

    # ------------------------------------------------------------------------------------------
    # Completion

    def finish(self, plan: StepPlan, end_s: float) -> None:
        """Apply a step that ended at ``end_s``: emit tokens, finish requests, count."""
        cfg = self.config
        st = self.stats
        duration = end_s - plan.start_s
        st.steps += 1
        st.busy_s += duration
        st.weight_read_bytes += plan.weight_bytes
        st.kv_read_bytes += plan.kv_read_bytes
        st.kv_write_bytes += plan.kv_write_bytes
        st.flops += plan.flops
        st.running_seq_s += plan.running * duration
        st.decode_seq_s += plan.decode_seqs * duration
        st.iteration_tokens.observe(plan.tokens)
        if plan.stretch > 1.0:
            st.throttled_s += max(0.0, duration - cfg.step_overhead_s)
            st.throttled_steps += 1

        any_done = False
        for req, n in plan.entries:
            if req.aborted:
                continue
            req.computed += n
            if req.computed < req.prompt_tokens + req.generated:
                continue  # still in prefill
            req.generated += 1
            st.generation_tokens += 1
            if req.generated == 1:
                if req.first_token_s is None:
                    req.first_token_s = end_s
                    st.ttft.observe(end_s - req.arrival_s)
                    st.prompt_tokens += req.prompt_tokens
            else:
                st.decode_tokens += 1
                if req.last_token_s is not None:
                    st.itl.observe(end_s - req.last_token_s)
            req.last_token_s = end_s
            if req.generated >= req.target_tokens:
                req.done = True
                any_done = True
                req.finish_reason = "length" if req.generated >= req.max_tokens else "stop"
                st.finished[req.finish_reason] += 1
                self._release(req)
                st.e2e.observe(end_s - req.arrival_s)
                if req.generated > 1 and req.first_token_s is not None:
                    st.tpot.observe((end_s - req.first_token_s) / (req.generated - 1))
            if req.listener is not None:
                req.listener.notify(req, end_s)
        if any_done:
            self.running = [r for r in self.running if not r.done]


class EngineLoop:
    """Runs an :class:`EngineCore` against the real clock inside an asyncio event loop.

    Steps follow each other back to back on a virtual timeline that starts at the wall clock
    when work arrives; the loop sleeps until each step's end and then applies it. How late it
    wakes is the scheduling lag: small lag means the simulator keeps real time. If it falls more
    than ``max_catchup_s`` behind, the timeline is moved forward: the skipped time counts as
    lag, and as lost time (``EngineStats.lost_s``).
    """

    def __init__(
        self,
        core: EngineCore,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_catchup_s: float = 0.25,
    ) -> None:
        self.core = core
        self.clock = clock
        self.max_catchup_s = max_catchup_s
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.current: StepPlan | None = None
        self.failure: str | None = None

    def submit(self, req: SimRequest) -> None:
        """Queue a request and wake the loop."""
        self.core.add(req)
        self._wake.set()

    def abort(self, req: SimRequest) -> None:
        """Drop a request."""
        self.core.abort(req)

    def start(self) -> None:
        """Start the loop as a task of the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self.run(), name="tokenwatt-sim")
        self._task.add_done_callback(self._on_done)

    def _on_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            # A bug, not a load condition: say so loudly, end every request (their clients see
            # an error finish instead of hanging), and let /health report the failure.
            self.failure = f"{type(exc).__name__}: {exc}"
            logger.error("the simulated engine stopped: %s", self.failure, exc_info=exc)
            self.core.fail_all()

    @property
    def alive(self) -> bool:
        """Whether the loop task is running."""
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        """Cancel the loop task."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run(self) -> None:
        """Step while there is work; sleep until a request arrives otherwise."""
        core = self.core
        stats = core.stats
        t_next: float | None = None
        while True:
            if not core.has_work:
                self._wake.clear()
                t_next = None
                await self._wake.wait()
                continue
            now = self.clock()
            start = now if t_next is None else t_next
            behind = now - start
            if behind > self.max_catchup_s:
                # Too far behind to catch up by running steps back to back: move the timeline.
                # The skipped time is lag, and lost (the simulated GPU idled through it).
                stats.lag.observe(behind)
                stats.lag_max_s = max(stats.lag_max_s, behind)
                stats.lost_s += behind - self.max_catchup_s
                start = now - self.max_catchup_s
            plan = core.schedule(start)
            if plan is None:
                # Work that cannot be scheduled yet (should not happen: admission checks sizes).
                self._wake.clear()
                t_next = None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=0.05)
                continue
            self.current = plan
            end = plan.end_s
            delay = end - self.clock()
            await asyncio.sleep(delay if delay > 0 else 0)
            lag = self.clock() - end
            if lag > 0:
                stats.lag.observe(lag)
                stats.lag_max_s = max(stats.lag_max_s, lag)
            else:
                stats.lag.observe(0.0)
            core.finish(plan, end)
            self.current = None
            t_next = end
