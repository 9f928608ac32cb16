"""The spec: what to measure, as written by the user in ``specs/*.spec.yaml``.

Every section and field of the seed result's ``spec`` block, with the seed's values as defaults.
Validation checks meaning, not only type: rates are positive, ``growth`` exceeds 1, ``backoff``
lies in (0, 1), a power source has the fields it needs, secrets are named by environment
variable and never written.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from tokenwatt.bounded import json_values_only
from tokenwatt.schema.base import (
    EnvVarName,
    KvDtype,
    Num,
    PowerKind,
    PowerSourceName,
    StrictInputModel,
    StrictModel,
    WeightDtype,
)
from tokenwatt.schema.launch import refuse_secrets

__all__ = [
    "BUILTIN_WORKLOADS",
    "AccuracySpec",
    "ArrivalSpec",
    "EngineSpec",
    "ExponentialSeconds",
    "FirstToken",
    "FixedTokens",
    "GeometryOverrides",
    "HardwareSpec",
    "LoadClusterSpec",
    "LoadSpec",
    "LoadedSpec",
    "LognormalTokens",
    "MeasurementSpec",
    "ModelSpec",
    "PowerNodeSpec",
    "PowerSourceSpec",
    "PowerSpec",
    "PrefixSpec",
    "SessionSpec",
    "SimSpec",
    "SloSpec",
    "Spec",
    "SweepSpec",
    "ThinkTime",
    "TokenCount",
    "UniformSeconds",
    "UniformTokens",
    "WorkloadSpec",
]

# Upper bounds that no real measurement reaches: they turn typos such as 1e30 into clear errors.
_MAX_RPS = 1_000_000.0
_MAX_SECONDS = 7 * 24 * 3600.0
_MAX_TOKENS = 10_000_000

_HTTP_URL = re.compile(r"https?://[^\s/]+(/\S*)?")


def _without_credentials(url: str, *, secret_field: str) -> str:
    """Refuse a URL with a user name or password in it: it would be written into every file.

    A run records its spec, a result its runs, and the page and search index show both; a
    password in ``http://user:pass@host`` would be published with them.
    """
    authority = url.split("://", 1)[1].split("/", 1)[0]
    if "@" in authority:
        raise ValueError(
            "must not carry a user name or password (user:password@host): the URL is written"
            f" into the run, the result and the page; give the secret through {secret_field}"
            " (the name of an environment variable) instead"
        )
    return url


Seconds = Annotated[Num, Field(ge=0, le=_MAX_SECONDS)]
PositiveSeconds = Annotated[Num, Field(gt=0, le=_MAX_SECONDS)]
Rate = Annotated[Num, Field(gt=0, le=_MAX_RPS)]
Tokens = Annotated[int, Field(ge=1, le=_MAX_TOKENS)]


class HardwareSpec(StrictInputModel):
    """The box under test. Most of it is read from the machine; what is set here wins."""

    adapter: Literal["nvidia", "amd", "none"] = Field(
        default="nvidia", description="Accelerator vendor, which picks the inventory reader"
    )
    rated_bw_tbs_per_gpu: Annotated[float, Field(gt=0, le=100)] | None = Field(
        default=None,
        description="Rated memory bandwidth per GPU in TB/s; null = from the GPU-name table",
    )
    gpus: list[Annotated[int, Field(ge=0, le=1023)]] | None = Field(
        default=None,
        description="Indices (NVML order) of the GPUs in use; null = all visible, which must"
        " then be model.tensor_parallel x model.replicas GPUs",
    )
    host: str | None = Field(default=None, description="Free-text name of the host or provider")

    @field_validator("gpus")
    @classmethod
    def _unique_gpus(cls, value: list[int] | None) -> list[int] | None:
        if value is not None:
            if not value:
                raise ValueError("must list at least one GPU index, or be null for all GPUs")
            if len(set(value)) != len(value):
                raise ValueError("lists a GPU index twice")
        return value


class SimSpec(StrictInputModel):
    """Settings of the embedded simulator, used when ``engine.endpoint`` is ``sim``."""

    gpu: str = Field(default="h100-sxm", description="GPU preset to simulate (see tokenwatt sim)")
    max_num_seqs: Annotated[int, Field(ge=1, le=65536)] | None = Field(
        default=None, description="Most sequences running at once; null = simulator default"
    )
    max_num_batched_tokens: Annotated[int, Field(ge=1, le=_MAX_TOKENS)] | None = Field(
        default=None, description="Token budget per step (chunked prefill); null = default"
    )
    step_overhead_ms: Annotated[float, Field(ge=0, le=1000)] | None = Field(
        default=None, description="Fixed time added to every engine step, ms; null = default"
    )
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None, description="Fraction of GPU memory the engine may use; null = default"
    )
    power_limit_w: Annotated[float, Field(gt=0, le=10_000)] | None = Field(
        default=None, description="Board power limit in W; null = the preset's"
    )
    bandwidth_efficiency: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None,
        description="Fraction of rated memory bandwidth the kernels reach; null = calibrated",
    )
    compute_efficiency: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None,
        description="Fraction of peak dense FLOP/s the kernels reach; null = calibrated default",
    )
    max_model_len: Annotated[int, Field(ge=16, le=_MAX_TOKENS)] | None = Field(
        default=None, description="Longest prompt + output; null = the model's max positions"
    )
    enable_prefix_caching: bool = Field(
        default=True,
        description="Reuse the KV blocks of identical token-id prompt prefixes (vLLM's default)",
    )
    block_size: Annotated[int, Field(ge=1, le=4096)] = Field(
        default=16, description="Tokens per KV-cache block, the prefix cache's unit (vLLM: 16)"
    )
    reasoning_fraction: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.0,
        description="Chat streams as a reasoning model's: this share of each answer's tokens"
        " (of max_tokens, rounded) comes first as reasoning_content, counted in"
        " usage.completion_tokens_details.reasoning_tokens; 0 = none",
    )


class EngineSpec(StrictInputModel):
    """The OpenAI-compatible server under test."""

    endpoint: str = Field(
        default="http://127.0.0.1:8000/v1",
        description="Base URL of the OpenAI API (ending in /v1), or 'sim' (embedded simulator)",
    )
    name: str = Field(default="vLLM", min_length=1, description="Engine name, e.g. vLLM, SGLang")
    version: str | None = Field(
        default=None, description="Expected engine version; checked against the server's own"
    )
    kernels: str | None = Field(default=None, description="Free text: image, kernel configs")
    launch: str | None = Field(
        default=None,
        description="The server's command line as launched, verbatim (shown per config on the"
        " page; secrets refused: use environment variable references)",
    )
    api: Literal["completions", "chat"] = Field(
        default="completions", description="Which API the load uses"
    )
    model: str = Field(min_length=1, description="Model name as the server serves it")
    ignore_eos: bool = Field(
        default=True, description="Ask for exactly max_tokens output tokens (ignore end of text)"
    )
    api_key_env: EnvVarName | None = Field(
        default=None, description="Name of the environment variable that holds the API key"
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="Extra JSON fields merged into every request body"
    )
    sim: SimSpec | None = Field(
        default=None, description="Simulator settings when endpoint is 'sim' (defaults if absent)"
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        if value == "sim":
            return value
        if not _HTTP_URL.fullmatch(value):
            raise ValueError(
                "must be an http(s) URL such as http://127.0.0.1:8000/v1, or 'sim' for the"
                " embedded simulator"
            )
        return _without_credentials(value, secret_field="engine.api_key_env").rstrip("/")

    @field_validator("extra_body")
    @classmethod
    def _json_extra_body(cls, value: dict[str, Any]) -> dict[str, Any]:
        problem = json_values_only(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _launch_without_secrets(self) -> EngineSpec:
        # A model-level check, so that the validation error's input is the whole section and
        # the message that names the field never repeats the secret's value.
        if self.launch is not None:
            try:
                refuse_secrets(self.launch)
            except ValueError as exc:
                raise ValueError(f"engine.launch {exc}") from None
        return self

    @model_validator(mode="after")
    def _sim_only_for_sim(self) -> EngineSpec:
        if self.sim is not None and self.endpoint != "sim":
            raise ValueError("'sim' settings are only used when endpoint is 'sim'")
        return self


class GeometryOverrides(StrictInputModel):
    """Model-geometry values that replace those read from ``config.json`` (all optional)."""

    num_hidden_layers: Annotated[int, Field(ge=1)] | None = None
    hidden_size: Annotated[int, Field(ge=1)] | None = None
    intermediate_size: Annotated[int, Field(ge=1)] | None = None
    num_attention_heads: Annotated[int, Field(ge=1)] | None = None
    num_key_value_heads: Annotated[int, Field(ge=1)] | None = None
    head_dim: Annotated[int, Field(ge=1)] | None = None
    vocab_size: Annotated[int, Field(ge=1)] | None = None
    num_experts: Annotated[int, Field(ge=0)] | None = None
    num_experts_per_tok: Annotated[int, Field(ge=0)] | None = None
    num_shared_experts: Annotated[int, Field(ge=0)] | None = None
    moe_intermediate_size: Annotated[int, Field(ge=1)] | None = None
    first_k_dense_replace: Annotated[int, Field(ge=0)] | None = None
    kv_lora_rank: Annotated[int, Field(ge=1)] | None = None
    qk_rope_head_dim: Annotated[int, Field(ge=0)] | None = None
    sliding_window: Annotated[int, Field(ge=1)] | None = None
    max_position_embeddings: Annotated[int, Field(ge=1)] | None = None
    tie_word_embeddings: bool | None = None


class ModelSpec(StrictInputModel):
    """The model being served and how it is stored."""

    name: str = Field(min_length=1, description="Display name of the model")
    config: str | None = Field(
        default=None,
        description="Path to the model's HF config.json (relative paths: from the spec's folder,"
        " then the current folder); null = geometry from 'geometry' only",
    )
    weight_dtype: WeightDtype = Field(default="bf16", description="Storage type of the weights")
    kv_dtype: KvDtype = Field(default="bf16", description="Storage type of the KV cache")
    quantization: str = Field(default="", description="Free text about the quantization scheme")
    replicas: Annotated[int, Field(ge=1, le=4096)] = Field(
        default=1, description="Data-parallel replicas"
    )
    tensor_parallel: Annotated[int, Field(ge=1, le=1024)] = Field(
        default=1, description="Tensor-parallel degree"
    )
    vocab_size: Annotated[int, Field(ge=2, le=_MAX_TOKENS)] = Field(
        description="Vocabulary size: random token-id prompts are drawn from [0, vocab_size)"
    )
    geometry: GeometryOverrides = Field(
        default_factory=GeometryOverrides, description="Values that override config.json"
    )

    def storage_types_set(self) -> tuple[WeightDtype | None, KvDtype | None]:
        """``weight_dtype`` and ``kv_dtype`` where the spec sets them, None where it does not.

        A storage type the spec leaves out is the model's own, read from its config.json (the
        ``quantization_config``, else ``torch_dtype``), as vLLM reads the checkpoint; the field
        defaults are only what a spec file written out shows.
        """
        return (
            self.weight_dtype if "weight_dtype" in self.model_fields_set else None,
            self.kv_dtype if "kv_dtype" in self.model_fields_set else None,
        )


FirstToken = Literal["ttft", "ttfat"]
"""Which first-token time the SLO bounds: of any token (TTFT), or of the first answer token."""


class SloSpec(StrictInputModel):
    """The latency objective a probe must meet, over its window requests.

    The first-token bound is on TTFT (``ttft_p99_ms``, the first token of any kind, reasoning
    included) or, for a reasoning model, on the time to first answer token (``ttfat_p99_ms``,
    methodology "Request timings"): one or the other, never both.
    """

    ttft_p99_ms: Annotated[float, Field(gt=0, le=_MAX_SECONDS * 1000)] = Field(
        default=2000.0,
        description="Bound on p99 time to first token, ms (not judged when ttfat_p99_ms is set)",
    )
    ttfat_p99_ms: Annotated[float, Field(gt=0, le=_MAX_SECONDS * 1000)] | None = Field(
        default=None,
        description="Bound on p99 time to first answer token (after any reasoning), ms, in"
        " place of ttft_p99_ms; null = the first-token bound is on TTFT",
    )
    tpot_p99_ms: Annotated[float, Field(gt=0, le=_MAX_SECONDS * 1000)] = Field(
        default=50.0, description="Bound on p99 time per output token, ms"
    )

    @model_validator(mode="after")
    def _one_first_token_bound(self) -> SloSpec:
        if self.ttfat_p99_ms is not None and "ttft_p99_ms" in self.model_fields_set:
            raise ValueError(
                "names both ttft_p99_ms and ttfat_p99_ms: the first-token bound is on one of"
                " them (ttfat_p99_ms, for a reasoning model, bounds the first answer token;"
                " ttft_p99_ms the first token of any kind); remove one"
            )
        return self

    @model_serializer(mode="wrap")
    def _one_first_token_bound_written(self, handler: SerializerFunctionWrapHandler) -> Any:
        # The bound not judged is left out of a dump, so that it reads back (above) and a spec
        # without ttfat_p99_ms is written as it always was.
        data = handler(self)
        if isinstance(data, dict):
            data.pop("ttft_p99_ms" if self.ttfat_p99_ms is not None else "ttfat_p99_ms", None)
        return data

    @property
    def first_token(self) -> FirstToken:
        """The first-token time the SLO bounds."""
        return "ttfat" if self.ttfat_p99_ms is not None else "ttft"

    @property
    def first_token_column(self) -> Literal["ttft_ms", "ttfat_ms"]:
        """Its column in a probe's request table."""
        return "ttfat_ms" if self.ttfat_p99_ms is not None else "ttft_ms"

    @property
    def first_token_p99_ms(self) -> float:
        """The bound on it, ms."""
        return self.ttfat_p99_ms if self.ttfat_p99_ms is not None else self.ttft_p99_ms


class FixedTokens(StrictInputModel):
    """Every request has the same token count."""

    dist: Literal["fixed"] = "fixed"
    value: Tokens = Field(description="Token count")


class UniformTokens(StrictInputModel):
    """Token counts drawn uniformly from [min, max]."""

    dist: Literal["uniform"] = "uniform"
    min: Tokens = Field(description="Smallest count")
    max: Tokens = Field(description="Largest count")

    @model_validator(mode="after")
    def _ordered(self) -> UniformTokens:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        return self


class LognormalTokens(StrictInputModel):
    """Token counts from a log-normal fitted to a median and a 90th percentile, clipped."""

    dist: Literal["lognormal"] = "lognormal"
    median: Annotated[float, Field(gt=0, le=_MAX_TOKENS)] = Field(description="Median count")
    p90: Annotated[float, Field(gt=0, le=_MAX_TOKENS)] = Field(description="90th percentile")
    min: Tokens = Field(default=1, description="Counts below are raised to this")
    max: Tokens | None = Field(default=None, description="Counts above are cut to this")

    @model_validator(mode="after")
    def _ordered(self) -> LognormalTokens:
        if self.p90 <= self.median:
            raise ValueError(f"p90 ({self.p90}) must be larger than the median ({self.median})")
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        return self


TokenCount = Annotated[
    Tokens | Annotated[FixedTokens | UniformTokens | LognormalTokens, Field(discriminator="dist")],
    Field(description="A fixed count, or a distribution"),
]


class ArrivalSpec(StrictInputModel):
    """How request arrival times are drawn at a target rate."""

    process: Literal["poisson", "gamma", "constant", "trace"] = Field(
        default="poisson", description="Arrival process"
    )
    burstiness: Annotated[float, Field(gt=0, le=1000)] = Field(
        default=1.0,
        description="Gamma shape factor: 1 = Poisson, < 1 burstier, > 1 smoother (gamma only)",
    )
    rescale: bool = Field(
        default=True,
        description="trace only: rescale the trace's own timestamps to the probe's rate",
    )

    @model_validator(mode="after")
    def _burstiness_only_for_gamma(self) -> ArrivalSpec:
        if self.process != "gamma" and self.burstiness != 1.0:
            raise ValueError("burstiness is only used with process 'gamma'")
        return self


class PrefixSpec(StrictInputModel):
    """Synthetic shared prefixes: ``groups`` "system prompts" of ``shared_tokens`` tokens each.

    Every request draws one group uniformly and sends that group's prefix, then its own
    ``input_tokens`` (which count the request's own part only). Methodology, "Shared prefixes".
    """

    groups: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        description="Distinct shared prefixes; each request draws one, uniformly"
    )
    shared_tokens: Tokens = Field(
        description="Tokens of each shared prefix; the request's own input tokens follow it"
    )


class UniformSeconds(StrictInputModel):
    """Durations drawn uniformly from [min, max] seconds."""

    dist: Literal["uniform"] = "uniform"
    min: Seconds = Field(description="Shortest duration, s")
    max: Seconds = Field(description="Longest duration, s")

    @model_validator(mode="after")
    def _ordered(self) -> UniformSeconds:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        return self


class ExponentialSeconds(StrictInputModel):
    """Durations drawn from an exponential distribution (memoryless pauses) of this mean."""

    dist: Literal["exponential"] = "exponential"
    mean: PositiveSeconds = Field(description="Mean duration, s")


ThinkTime = Annotated[
    Seconds | Annotated[UniformSeconds | ExponentialSeconds, Field(discriminator="dist")],
    Field(description="A fixed number of seconds, or a distribution"),
]

_MAX_TURNS = 1000


class SessionSpec(StrictInputModel):
    """Multi-turn sessions: each arrival starts a session of ``turns`` requests.

    Turn 0 is the workload's request; turn k > 0 sends the whole history (every earlier prompt
    and the server's actual reply) and then a new message of ``new_tokens`` tokens,
    ``think_time_s`` after the previous reply's last byte. The arrival rate counts sessions per
    second. Methodology page, "Multi-turn sessions".
    """

    turns: TokenCount = Field(
        description="Turns per session (1 to 1000): a fixed count or a distribution, drawn per"
        " session"
    )
    think_time_s: ThinkTime = Field(
        default=0.0,
        description="Pause between a reply's last byte and the next turn's send, s: fixed or a"
        " distribution, drawn per turn",
    )
    new_tokens: TokenCount | None = Field(
        default=None,
        description="Tokens of each later turn's new message; null = workload.input_tokens"
        " (else the built-in workload's input lengths)",
    )

    @field_validator("turns")
    @classmethod
    def _turns_bounded(cls, value: TokenCount) -> TokenCount:
        top = value if isinstance(value, int) else getattr(value, "max", None)
        if isinstance(value, FixedTokens):
            top = value.value
        if top is None or top > _MAX_TURNS:
            raise ValueError(
                f"turns must stay within {_MAX_TURNS} (a lognormal needs its max set to at most"
                f" {_MAX_TURNS})"
            )
        return value


BUILTIN_WORKLOADS: tuple[str, ...] = ("chat-mix-v1",)
"""Workload names that are built in; any other ``workload.trace`` names a trace file."""


class WorkloadSpec(StrictInputModel):
    """Which requests to send: prompt and output lengths, and arrivals."""

    trace: str = Field(
        default=BUILTIN_WORKLOADS[0],
        min_length=1,
        description="A built-in workload name (chat-mix-v1) or a path to a trace file"
        " (Azure LLM trace CSV or JSONL)",
    )
    input_tokens: TokenCount | None = Field(
        default=None, description="Overrides the trace's prompt lengths; null = the trace's"
    )
    output_tokens: TokenCount | None = Field(
        default=None, description="Overrides the trace's output lengths; null = the trace's"
    )
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = Field(
        default=0, description="Seed of every random draw: same seed, same requests"
    )
    arrival: ArrivalSpec = Field(default_factory=ArrivalSpec, description="Arrival process")
    prefix: PrefixSpec | None = Field(
        default=None,
        description="Synthetic shared prefixes before each request's own input tokens; null = none",
    )
    trace_prefix: bool = Field(
        default=True,
        description="A trace with hash_ids (Mooncake): prompts repeat block for block where its"
        " hash_ids repeat; false = unique prompts of the trace's lengths",
    )
    trace_block_tokens: Tokens = Field(
        default=512, description="Tokens per hash id of the trace (Mooncake: 512)"
    )
    prompts: str | None = Field(
        default=None,
        min_length=1,
        description="Real prompts: a ShareGPT JSON file (relative: from the spec's folder, then"
        " the current folder); each request sends the first human turn of one conversation as"
        " text, and its input length is the server's count (usage.prompt_tokens); null ="
        " synthetic prompts",
    )
    sessions: SessionSpec | None = Field(
        default=None,
        description="Multi-turn sessions: each arrival starts a session whose turns resend the"
        " history with the server's replies; the rate counts sessions per second; null ="
        " single requests",
    )

    @property
    def varies_content(self) -> bool:
        """Whether a stream can be sent again with other prompt tokens and the same lengths.

        Synthetic prompts only: a real prompt's text sets its length, and a session's later
        turns draw their text and lengths together (:attr:`tokenwatt.load.workload.Workload.
        varies_content` holds the built workload to it).
        """
        return self.prompts is None and self.sessions is None

    @model_validator(mode="after")
    def _sessions_build_their_own_prompts(self) -> WorkloadSpec:
        if self.sessions is not None and self.prompts is not None:
            raise ValueError(
                "sessions and prompts: a session's later turns are synthetic messages after the"
                " server's replies, which a file of first human turns cannot continue; remove"
                " one of them"
            )
        return self

    @model_validator(mode="after")
    def _prompts_set_the_input(self) -> WorkloadSpec:
        if self.prompts is not None and self.input_tokens is not None:
            raise ValueError(
                "input_tokens and prompts both set the input: real prompts are sent as written"
                " (their length is the server's count); remove input_tokens"
            )
        if self.prompts is not None and self.prefix is not None:
            raise ValueError(
                "prefix and prompts both shape the prompts: synthetic prefixes are token ids,"
                " real prompts text; use one"
            )
        return self

    @model_validator(mode="after")
    def _trace_options_need_a_trace(self) -> WorkloadSpec:
        # Compared with the defaults, not with what was set: a dump with every field set (a run
        # file's spec) must load again.
        if self.trace in BUILTIN_WORKLOADS:
            defaults = WorkloadSpec.model_fields
            for name in ("trace_prefix", "trace_block_tokens"):
                if getattr(self, name) != defaults[name].default:
                    raise ValueError(
                        f"{name} is only used with a trace file, not the built-in {self.trace}"
                    )
        return self


class MeasurementSpec(StrictInputModel):
    """Durations and limits of each probe."""

    warmup_s: Seconds = Field(default=45, description="Warm-up before each window, s")
    window_s: PositiveSeconds = Field(
        default=120,
        description="Confirmation window, and each refinement window of the adaptive sweep, s"
        " (longer windows make one run's capacity more precise per probe-second; more, shorter"
        " ones give a comparison more stream pairs: benchmarks/README.md)",
    )
    search_window_s: PositiveSeconds = Field(default=60, description="Search-probe window, s")
    repeats: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=2, description="Confirmation windows at the found rate"
    )
    request_timeout_s: PositiveSeconds = Field(
        default=300, description="A request not finished after this long has failed, s"
    )
    max_concurrency: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        default=8192,
        description="Most requests in flight; waiting for a slot makes a probe client-bound",
    )


SweepStrategy = Literal["bisect", "adaptive"]
"""``bisect``: the seed's grow-bisect-confirm protocol; ``adaptive``: probes placed where they
narrow the SLO-capacity interval most (methodology, "Sweep")."""


class SweepSpec(StrictInputModel):
    """How the request rate is searched for the SLO boundary (methodology, "Sweep")."""

    strategy: SweepStrategy = Field(
        default="bisect",
        description="bisect: the seed's protocol; adaptive: probes where they narrow the"
        " capacity interval most, until precision_pct or budget_s",
    )
    precision_pct: Annotated[float, Field(gt=0, le=100)] = Field(
        default=5.0,
        description="adaptive: stop refining once the 95 % interval's half-width is within"
        " this percentage of the capacity estimate and its dispersion rests on enough degrees"
        " of freedom (tokenwatt.adaptive.PRECISION_MIN_DOF: a narrow interval from few probes is"
        " often luck)",
    )
    budget_s: PositiveSeconds | None = Field(
        default=None,
        description="adaptive: probe-seconds the sweep may spend, confirmation included;"
        " null = no limit (precision_pct, or tokenwatt.adaptive.MAX_REFINE refinement probes,"
        " ends it)",
    )
    rates: list[Rate] | None = Field(
        default=None, description="Explicit rates in req/s, replacing the search; null = search"
    )
    start_rps: Rate = Field(default=8.0, description="First search rate, req/s")
    growth: Annotated[float, Field(gt=1, le=100)] = Field(
        default=1.25, description="Factor between successive search rates (> 1)"
    )
    max_rps: Rate = Field(default=2000, description="Highest rate the search tries, req/s")
    bisect_steps: Annotated[int, Field(ge=0, le=50)] = Field(
        default=3, description="Bisections between the last pass and the first fail"
    )
    backoff: Annotated[float, Field(gt=0, lt=1)] = Field(
        default=0.9, description="Factor applied to the rate when a confirmation fails (0 < x < 1)"
    )
    max_backoffs: Annotated[int, Field(ge=0, le=100)] = Field(
        default=4, description="Most back-offs before giving up"
    )
    early_stop: bool = Field(
        default=False,
        description="Stop a probe as soon as it has provably failed the SLO (fewer"
        " probe-seconds, same decisions; such a probe's latency figures stay partial)",
    )
    ramp: bool = Field(
        default=False,
        description="Start each probe on the load the previous one left running (its requests"
        " still in flight go on) instead of an idle server, when that probe ended with no"
        " backlog, so only the difference between two rates has to settle in the warm-up",
    )
    ramp_warmup_s: Seconds | None = Field(
        default=None,
        description="Warm-up of a probe that starts on the requests the previous one left running"
        " (sweep.ramp), s, at most measurement.warmup_s; null: measurement.warmup_s. A probe"
        " that starts from idle keeps the full warm-up; the steady-state audit still checks"
        " every window. Shorter warm-ups buy windows; measure what they cost the comparison"
        " (benchmarks/README.md, 'A shorter warm-up after a ramp')",
    )
    stream_pairs: bool = Field(
        default=True,
        description="adaptive: refine in pairs of probes that send one workload stream at two"
        " rates (the second with other prompt tokens), and confirm on streams of their own, the"
        " same in every run of a comparison, so a comparison's fit can hold each stream's"
        " effect fixed; not with real prompts (workload.prompts), whose text sets the lengths",
    )

    @field_validator("rates")
    @classmethod
    def _rates(cls, value: list[Num] | None) -> list[Num] | None:
        if value is not None:
            if not value:
                raise ValueError("must list at least one rate, or be null to search")
            if len(set(value)) != len(value):
                raise ValueError("lists a rate twice")
        return value

    @model_validator(mode="after")
    def _range(self) -> SweepSpec:
        if self.max_rps < self.start_rps:
            raise ValueError(f"max_rps ({self.max_rps}) is below start_rps ({self.start_rps})")
        return self


class AccuracySpec(StrictInputModel):
    """The accuracy gate (methodology page, "Accuracy gate")."""

    suite: str = Field(
        min_length=1,
        description="JSONL suite of questions (relative: from the spec's folder, then the"
        " current folder)",
    )
    name: str = Field(default="gsm8k-5shot", min_length=1, description="Display name")
    scorer: Literal["numeric"] = Field(default="numeric", description="How answers are scored")
    max_drop_pts: Annotated[float, Field(ge=0, le=100)] = Field(
        default=1.0, description="Largest score drop vs the baseline that still passes, points"
    )
    seeds: Annotated[int, Field(ge=1, le=100)] = Field(
        default=1, description="Exemplar draws; spread_pts = max - min over them"
    )
    shots: Annotated[int, Field(ge=0, le=64)] = Field(
        default=5, description="Few-shot exemplars per prompt"
    )
    max_tokens: Annotated[int, Field(ge=1, le=_MAX_TOKENS)] = Field(
        default=384, description="Most tokens per answer"
    )
    stop: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=lambda: ["\n\nQuestion:"], description="Stop strings"
    )
    concurrency: Annotated[int, Field(ge=1, le=100_000)] = Field(
        default=32, description="Questions in flight"
    )
    limit: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        default=50, description="Questions asked (the first N of the suite)"
    )


class _PowerSourceField(StrictInputModel):
    """The ``source`` field, first in every power section (see :class:`PowerSpec`)."""

    source: PowerSourceName = Field(default="board", description="Power source")


class PowerSourceSpec(_PowerSourceField):
    """One power meter: its source and the fields that source needs.

    A whole ``power`` section names one (:class:`PowerSpec`); a server spanning nodes names one
    per node (:class:`PowerNodeSpec`). The sources are built from this (``build_source``).
    """

    url: str | None = Field(
        default=None, description="redfish: BMC base URL; prometheus: the /metrics URL"
    )
    username: str | None = Field(default=None, description="redfish/ipmi: user name")
    password_env: EnvVarName | None = Field(
        default=None, description="redfish/ipmi: name of the environment variable with the password"
    )
    verify_tls: bool = Field(default=False, description="redfish: check the BMC's certificate")
    chassis: str | None = Field(default=None, description="redfish: chassis id; null = discover")
    auth: Literal["basic", "session"] | None = Field(
        default=None,
        description="redfish: 'basic' (user and password on every request) or 'session' (one"
        " login, then an X-Auth-Token); null = a session if the BMC hands out a token, else basic",
    )
    scope: Literal["board", "node"] | None = Field(
        default=None,
        description="command: what the command's watts cover, the GPU boards or the whole node;"
        " null = node",
    )
    host: str | None = Field(default=None, description="ipmi: BMC host[:port]")
    command: str | None = Field(
        default=None, description="command: a command that prints watts (a number or JSON)"
    )
    field: str | None = Field(
        default=None,
        description="command: JSON key path (a.b.0.c) or a regex whose first group is the watts",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not _HTTP_URL.fullmatch(value):
            raise ValueError("must be an http(s) URL")
        return _without_credentials(value, secret_field="power.username and power.password_env")

    @model_validator(mode="after")
    def _fields_for_source(self) -> PowerSourceSpec:
        self._check_fields()
        return self

    def _check_fields(self) -> None:
        """The fields this meter's source needs are given, and no field another source uses."""
        needs: dict[str, tuple[str, ...]] = {
            "board": (),
            "none": (),
            "redfish": ("url",),
            "prometheus": (),  # url checked in Spec: against the simulator it may be omitted
            "ipmi": ("host",),
            "command": ("command",),
        }
        used_by: dict[str, tuple[str, ...]] = {
            "url": ("redfish", "prometheus"),
            "username": ("redfish", "ipmi"),
            "password_env": ("redfish", "ipmi"),
            "chassis": ("redfish",),
            "auth": ("redfish",),
            "scope": ("command",),
            "host": ("ipmi",),
            "command": ("command",),
            "field": ("command",),
        }
        for name in needs[self.source]:
            if getattr(self, name) in (None, ""):
                raise ValueError(f"power source '{self.source}' needs '{name}'")
        for name, sources in used_by.items():
            if getattr(self, name) is not None and self.source not in sources:
                raise ValueError(
                    f"'{name}' is only used by power source {' or '.join(sources)},"
                    f" not '{self.source}'"
                )
        if self.username is not None and self.password_env is None:
            raise ValueError("'username' is set but 'password_env' does not name the password")

    @property
    def reading_scope(self) -> Literal["board", "node", "none"]:
        """What this meter's readings cover: the GPU boards in use, the whole node, or nothing.

        The sources say the same (``PowerSource.scope``); the spec needs it before any source
        is built, to refuse nodes that cover different things.
        """
        if self.source in ("board", "prometheus"):
            return "board"
        if self.source == "command":
            return self.scope or "node"
        return "none" if self.source == "none" else "node"


class _PowerSampling(_PowerSourceField):
    sampling_hz: Annotated[Num, Field(gt=0, le=1000)] = Field(
        default=1, description="Samples per second"
    )


class PowerNodeSpec(PowerSourceSpec):
    """One node of a server that spans nodes: its name and its own meter."""

    source: PowerSourceName = Field(description="Power source of this node")
    name: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Name of the node (letters, digits, . _ -), unique within power.nodes",
    )
    ray_node: str | None = Field(
        default=None,
        min_length=1,
        description="Read this meter in a Ray actor on the node of the load generator's Ray"
        " cluster with this IP address or node id (needs load.cluster or --ray); its password"
        " variable is then read there. null = read from this machine",
    )


def _check_nodes(nodes: list[PowerNodeSpec]) -> None:
    """Refuse nodes that cannot be summed.

    Each is named once and measured, at most one is this machine's NVML, all cover the same
    thing, and no meter is read twice.
    """
    names = [node.name for node in nodes]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"power.nodes names {', '.join(twice)} twice: each name once")
    for node in nodes:
        if node.source == "none":
            raise ValueError(
                f"power node '{node.name}' has source 'none': a sum over nodes needs every"
                " node measured; set power.source 'none' (without nodes) to measure none"
            )
    boards = [node.name for node in nodes if node.source == "board" and node.ray_node is None]
    if len(boards) > 1:
        raise ValueError(
            f"power nodes {', '.join(boards)} all have source 'board', which reads NVML on"
            " this machine: only one node can be this machine; read the other nodes' GPUs"
            " on their own machines (ray_node: the Ray node that runs there), through their"
            " exporters (source 'prometheus') or a command"
        )
    scopes = {node.name: node.reading_scope for node in nodes}
    if len(set(scopes.values())) > 1:
        listed = ", ".join(f"{name}: {scope}" for name, scope in scopes.items())
        raise ValueError(
            f"power nodes cover different things ({listed}): a sum of GPU-board power on"
            " some nodes and whole-node power on others is neither; give every node the"
            " same scope (board or node)"
        )
    meters = [node.model_dump(exclude={"name"}) for node in nodes]
    for i, meter in enumerate(meters):
        if meter in meters[:i]:
            first = nodes[meters.index(meter)].name
            raise ValueError(
                f"power nodes {first} and {nodes[i].name} read the same meter: its"
                " power would be counted twice"
            )


# Every spec, run and result file written so far has sampling_hz second, after source: the bases
# are in this order so that the fields (and so every dump) keep that order.
class PowerSpec(PowerSourceSpec, _PowerSampling):
    """Where power is read from (methodology page, "Power and energy").

    One meter (``source`` and its fields), or ``nodes``: a server that spans nodes, one meter
    per node, whose figures are the sum over the nodes. With ``nodes`` the meter fields are given
    in each node and not here; ``sampling_hz`` is the same for every node (one tick reads all).
    """

    nodes: list[PowerNodeSpec] | None = Field(
        default=None,
        min_length=2,
        description="A server spanning nodes: one meter per node (each a power source with its"
        " fields, plus a unique name); the figures are the sum over the nodes. Then no meter"
        " field (source, url, ...) is given beside it",
    )

    def _check_fields(self) -> None:
        """One meter's fields, or nodes that fit together and no meter field beside them."""
        if self.nodes is None:
            super()._check_fields()
            return
        # Fields as given (an assignment adds its field): a default written out, such as source
        # 'board', is refused like any other value.
        beside = [name for name in PowerSourceSpec.model_fields if name in self.model_fields_set]
        if beside:
            fields = ", ".join(f"'{name}'" for name in beside)
            raise ValueError(
                f"{fields} set beside 'nodes': with nodes, each node names its own source and"
                f" its fields; move {fields} into the nodes (power keeps only sampling_hz)"
            )
        _check_nodes(self.nodes)

    @model_serializer(mode="wrap")
    def _meter_fields_only_without_nodes(self, handler: SerializerFunctionWrapHandler) -> Any:
        # With nodes, the meter fields hold their defaults, which the input may not give (above):
        # a dump leaves them out so that it reads back. Without nodes, it is what it always was.
        data = handler(self)
        if isinstance(data, dict):
            dropped = PowerSourceSpec.model_fields if self.nodes is not None else ("nodes",)
            for name in dropped:
                data.pop(name, None)
        return data

    @property
    def kind(self) -> PowerKind:
        """The source's name, or ``nodes`` for a sum over ``nodes``."""
        return "nodes" if self.nodes is not None else self.source

    @property
    def meters(self) -> tuple[tuple[str, PowerSourceSpec], ...]:
        """Each meter with where it is in the spec: ``power``, or ``power.nodes[i]`` per node."""
        if self.nodes is None:
            return (("power", self),)
        return tuple((f"power.nodes[{i}]", node) for i, node in enumerate(self.nodes))

    @property
    def password_envs(self) -> tuple[str, ...]:
        """The environment variables the spec names for power passwords (every node's)."""
        return tuple(m.password_env for _, m in self.meters if m.password_env is not None)


class LoadClusterSpec(StrictInputModel):
    """The load generator on a Ray cluster (``load.cluster``; README, "More than one host")."""

    address: str = Field(
        default="auto",
        min_length=1,
        description="Ray cluster address as ray.init takes it: 'auto' (the cluster this host"
        " joined with `ray start`), 'HOST:PORT' of its head, or 'ray://HOST:PORT'",
    )
    actors_per_node: Annotated[int, Field(ge=1, le=4096)] | None = Field(
        default=None,
        description="Most load actors on one node; null = the node's CPUs",
    )
    server_nodes: bool = Field(
        default=False,
        description="Place load actors on nodes that run the server under test too (by"
        " default they are left out: load and server would share CPUs)",
    )
    max_clock_uncertainty_ms: Annotated[Num, Field(gt=0, le=1000)] = Field(
        default=1.0,
        description="A probe is refused when an actor's clock offset is known less precisely"
        " than this, ms",
    )


class LoadSpec(StrictInputModel):
    """Where the load generator runs."""

    cluster: LoadClusterSpec | None = Field(
        default=None, description="Ray cluster for the load workers; null = processes on this host"
    )
    calibrate: bool = Field(
        default=True,
        description="Before the run, measure the load generator against a local server whose"
        " answer is known (a few seconds): its ceiling, its TTFT/TPOT error and its pacing,"
        " recorded in the run file; a run whose rates it cannot pace is refused. Not in quick"
        " mode, not on a Ray cluster",
    )


class Spec(StrictInputModel):
    """A whole spec file: one configuration to measure."""

    name: str = Field(
        min_length=1,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Spec name (letters, digits, . _ -); names the run",
    )
    hardware: HardwareSpec = Field(default_factory=HardwareSpec, description="The box")
    engine: EngineSpec = Field(description="The server under test")
    model: ModelSpec = Field(description="The model")
    slo: SloSpec = Field(default_factory=SloSpec, description="Latency objective")
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec, description="Requests sent")
    measurement: MeasurementSpec = Field(default_factory=MeasurementSpec, description="Durations")
    sweep: SweepSpec = Field(default_factory=SweepSpec, description="Rate search")
    accuracy: AccuracySpec | None = Field(default=None, description="Accuracy gate; null = none")
    power: PowerSpec = Field(default_factory=PowerSpec, description="Power source")
    load: LoadSpec | None = Field(
        default=None, description="Where the load generator runs; null = this host"
    )
    not_covered: list[str] = Field(
        default_factory=list, description="What this measurement does not cover, for the page"
    )

    @model_validator(mode="after")
    def _ramp_warmup_with_ramp(self) -> Spec:
        if self.sweep.ramp_warmup_s is not None and not self.sweep.ramp:
            raise ValueError(
                "sweep.ramp_warmup_s without sweep.ramp: only a probe that ramps uses it;"
                " set sweep.ramp: true or remove sweep.ramp_warmup_s"
            )
        if self.sweep.ramp_warmup_s is not None and (
            self.sweep.ramp_warmup_s > self.measurement.warmup_s
        ):
            raise ValueError(
                f"sweep.ramp_warmup_s ({self.sweep.ramp_warmup_s:g} s) is longer than"
                f" measurement.warmup_s ({self.measurement.warmup_s:g} s): it shortens the"
                " warm-up of a probe that ramps, and cannot lengthen it"
            )
        return self

    @model_validator(mode="after")
    def _sessions_outside_the_early_stop(self) -> Spec:
        if self.workload.sessions is None:
            return self
        # The early stop and the adaptive sweep's certification need the window's request
        # count before the probe starts; with sessions it depends on the replies' lengths.
        if self.sweep.ramp:
            raise ValueError(
                "sweep.ramp with workload.sessions: a ramped probe starts on the previous"
                " probe's requests still in flight, and a session's later turns would go on"
                " being sent into the next probe; remove sweep.ramp"
            )
        if self.sweep.early_stop:
            raise ValueError(
                "sweep.early_stop with workload.sessions: the early stop needs the window's"
                " request count before the probe starts, and a session's later turns are sent"
                " only after the server's replies; remove sweep.early_stop"
            )
        if self.sweep.strategy == "adaptive":
            raise ValueError(
                "sweep.strategy 'adaptive' with workload.sessions: its search probes stop once"
                " their verdict is certain, which needs the window's request count before the"
                " probe starts (unknown with sessions); use strategy 'bisect' or sweep.rates"
            )
        return self

    @model_validator(mode="after")
    def _power_fits_engine(self) -> Spec:
        for where, meter in self.power.meters:
            if meter.source == "board" and self.hardware.adapter != "nvidia":
                raise ValueError(
                    f"{where}.source 'board' reads NVML and needs hardware.adapter 'nvidia'"
                )
            if meter.source == "prometheus" and meter.url is None and self.engine.endpoint != "sim":
                raise ValueError(
                    f"{where}.source 'prometheus' needs {where}.url (only against the simulator"
                    " may it be omitted: then the simulator's own /metrics is read)"
                )
        return self


class LoadedSpec(StrictModel):
    """A spec file as loaded (:func:`tokenwatt.store.load_spec`): the spec and its files.

    ``spec`` is the spec as written, relative paths included (run files record it so); the files
    it names are resolved once, when it is loaded, and checked to exist, so the rest of
    tokenwatt reads only the paths here and never resolves a path written in a spec.
    """

    model_config = ConfigDict(frozen=True)

    spec: Spec = Field(description="The spec as written")
    path: Path = Field(description="The spec file as found")
    sha256: str | None = Field(
        default=None,
        description="SHA-256 of the bytes the spec was parsed from (hex); null = not from a file",
    )
    config_file: Path | None = Field(
        default=None, description="model.config resolved; null = geometry from model.geometry"
    )
    trace_file: Path | None = Field(
        default=None, description="workload.trace resolved; null = a built-in workload"
    )
    prompts_file: Path | None = Field(
        default=None, description="workload.prompts resolved; null = synthetic prompts"
    )
    suite_file: Path | None = Field(
        default=None, description="accuracy.suite resolved; null = no accuracy section"
    )
