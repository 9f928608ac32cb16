"""The run file: one configuration measured by ``tokenwatt measure``, with its raw evidence.

A run file is designed so that every figure of a result can be recomputed from it: each probe
keeps its window requests (one column per quantity), each power sample its monotonic timestamp
(the load generator's clock, so samples can be cut to measurement windows), and accuracy keeps
every completion with its extracted answer.

Latency statistics may be infinite (a failed request counts as +inf latency:
:mod:`tokenwatt.metrics`); JSON has no infinity, so those fields are written as the string
``"Infinity"`` and read back as ``inf``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from tokenwatt.schema.base import Num, PowerKind, PowerSourceName, Role, StrictModel
from tokenwatt.schema.engine import EngineConfig
from tokenwatt.schema.spec import FirstToken, MeasurementSpec, Spec

__all__ = [
    "AccuracyEvidence",
    "AccuracyItem",
    "AccuracySeedScore",
    "CalibrationRung",
    "ClientCalibration",
    "ConservationAudit",
    "EarlyStop",
    "EngineSeries",
    "EngineTelemetry",
    "Environment",
    "GpuInfo",
    "LatencyStats",
    "LittlesLawAudit",
    "LoadActor",
    "LoadCluster",
    "LoadNode",
    "MbuEvidence",
    "NodePowerEvidence",
    "PowerEvidence",
    "PowerGap",
    "PowerSample",
    "PrefixReuse",
    "ProbeAudits",
    "ProbePhase",
    "ProbeRamp",
    "ProbeRecord",
    "RequestTable",
    "ResumeInfo",
    "RunFile",
    "RunOutcome",
    "SteadyStateAudit",
    "TokenAudit",
]

ProbePhase = Literal["search", "bisect", "refine", "confirm", "rates"]
"""Why a probe ran: search, bisection, refinement of the capacity estimate (adaptive sweep),
confirmation at the found rate, or an explicit rate."""

NonNegFloat = Annotated[float, Field(ge=0)]
LatencyMs = Annotated[float, Field(ge=0)]
Pct = Annotated[float, Field(ge=0, le=100)]
Count = Annotated[int, Field(ge=0)]


class LatencyStats(StrictModel):
    """Summary of one latency over a probe's window requests, in ms. Failures count as +inf."""

    model_config = ConfigDict(allow_inf_nan=True, ser_json_inf_nan="strings")

    count: Annotated[int, Field(ge=0)] = Field(description="Requests the statistic covers")
    mean: LatencyMs | None = Field(default=None, description="Mean, ms (inf if any failed)")
    p50: LatencyMs | None = Field(default=None, description="Median, ms")
    p90: LatencyMs | None = Field(default=None, description="90th percentile, ms")
    p95: LatencyMs | None = Field(default=None, description="95th percentile, ms")
    p99: LatencyMs | None = Field(default=None, description="99th percentile, ms")

    @model_validator(mode="after")
    def _no_nan(self) -> LatencyStats:
        for name in ("mean", "p50", "p90", "p95", "p99"):
            value = getattr(self, name)
            if value is not None and value != value:
                raise ValueError(f"{name} is NaN")
        known = [(n, getattr(self, n)) for n in ("p50", "p90", "p95", "p99")]
        known = [(n, v) for n, v in known if v is not None]
        for (low_name, low), (high_name, high) in zip(known, known[1:], strict=False):
            if high < low:
                raise ValueError(f"{high_name} ({high:g}) is below {low_name} ({low:g})")
        return self


class RequestTable(StrictModel):
    """The window requests of one probe, one list per quantity (all lists have equal length).

    ``status`` is ``"ok"`` or the failure cause (``http_error``, ``connection_error``,
    ``malformed_stream``, ``short_output``, ``timeout``, ...). Timing lists hold null for a
    failed request: percentiles treat it as +inf. ``ttfat_ms`` and ``reasoning_tokens`` are
    written only when some window request streamed reasoning; without them TTFAT is TTFT and no
    token was reasoning.
    """

    t_sched_s: list[float] = Field(description="Scheduled send time, s from the window start")
    send_lag_ms: list[float] = Field(description="Actual minus scheduled send time, ms")
    ttft_ms: list[float | None] = Field(description="Time to first token, ms")
    tpot_ms: list[float | None] = Field(description="Time per output token after the first, ms")
    e2e_ms: list[float | None] = Field(description="Send to last byte, ms")
    input_tokens: list[int] = Field(description="Prompt tokens")
    output_tokens: list[int] = Field(description="Output tokens (server usage, else chunks)")
    status: list[str] = Field(description="'ok' or the failure cause")
    ttfat_ms: list[float | None] | None = Field(
        default=None,
        description="Time to first answer token (content after reasoning), ms; null column ="
        " no reasoning in the probe (TTFAT = TTFT)",
    )
    reasoning_tokens: list[int] | None = Field(
        default=None,
        description="Reasoning tokens among the output tokens (server usage, else reasoning"
        " chunks); null column = none",
    )
    session: list[int] | None = Field(
        default=None,
        description="Multi-turn sessions: the session of each turn (its arrival's position in"
        " the probe's stream); null column = no sessions",
    )
    turn: list[int] | None = Field(
        default=None,
        description="Multi-turn sessions: the turn's position in its session, from 0; null"
        " column = no sessions",
    )

    @model_validator(mode="after")
    def _equal_lengths(self) -> RequestTable:
        lengths = {
            name: len(column)
            for name in type(self).model_fields
            if (column := getattr(self, name)) is not None
        }
        if len(set(lengths.values())) > 1:
            raise ValueError(f"columns have different lengths: {lengths}")
        return self


class SessionStats(StrictModel):
    """What happened to a probe's multi-turn sessions (``workload.sessions``).

    Counted over every session the probe started (warm-up, window and drain). A session cut by a
    failed turn sends none of its later turns: the failed turn is a request like any other
    (+inf in the percentiles when it is a window request) and its unsent turns are counted here.
    Sessions still running when the probe ends are neither completed nor cut.
    """

    started: Annotated[int, Field(ge=0)] = Field(description="Sessions whose first turn was sent")
    completed: Annotated[int, Field(ge=0)] = Field(
        description="Sessions whose every turn was answered"
    )
    context_ended: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="Sessions ended early because the next turn no longer fitted the model's"
        " context",
    )
    cut: Annotated[int, Field(ge=0)] = Field(
        description="Sessions cut by a failed turn (or a reply without its token ids)"
    )
    unsent_turns: Annotated[int, Field(ge=0)] = Field(
        description="Turns of cut sessions that were therefore never sent"
    )
    cut_causes: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict,
        description="Cut sessions by the failing turn's status (no_token_ids: a completions"
        " reply without the token ids its next turn needs)",
    )
    mean_turns: Annotated[float, Field(ge=1)] = Field(
        description="Turns per session the workload draws, on average"
    )


class EarlyStop(StrictModel):
    """A probe stopped as soon as its window's verdict was certain.

    With N window requests, the nearest-rank p99 exceeds a bound exactly when more than
    N - ceil(0.99 N) of them exceed it. ``outcome: fail`` (``sweep.early_stop``, and the adaptive
    sweep's search probes): N - ceil(0.99 N) + 1 window requests exceeded a bound (a failed
    request, or one still waiting for its first token longer than the TTFT bound, already does),
    so the p99 is over it whatever the others do. ``outcome: pass`` (the adaptive sweep's search
    probes): so few window requests are left that, even if all of them and every one already
    over exceeded both bounds, neither p99 could exceed it. N is known from the arrival schedule
    before the probe starts. Window requests still in flight at the stop are cancelled (status
    ``cancelled``, +inf like every failure) and those not yet sent are never sent: the probe's
    latency figures cover the requests sent before the stop. A probe stopped on a fail never
    passes; one stopped on a pass does, and is used for the capacity's bracket only.
    """

    outcome: Literal["fail", "pass"] = Field(
        default="fail", description="The verdict that was certain when the probe stopped"
    )
    stopped_ns: int = Field(description="Monotonic clock when the probe was stopped, ns")
    planned_window_requests: Annotated[int, Field(ge=1)] = Field(
        description="N: window requests the schedule held"
    )
    exceeding_needed: Annotated[int, Field(ge=1)] = Field(
        description="N - ceil(0.99 N) + 1: window requests over a bound that prove p99 over it"
    )
    ttft_exceeding: Annotated[int, Field(ge=0)] = Field(
        description="Window requests known to exceed the TTFT bound (or failed) at the stop"
    )
    tpot_exceeding: Annotated[int, Field(ge=0)] = Field(
        description="Window requests known to exceed the TPOT bound (or failed) at the stop"
    )
    cut_window_requests: Annotated[int, Field(ge=0)] = Field(
        description="Window requests in flight at the stop, cancelled"
    )
    unsent_window_requests: Annotated[int, Field(ge=0)] = Field(
        description="Window requests scheduled after the stop, never sent"
    )

    @model_validator(mode="after")
    def _proven(self) -> EarlyStop:
        worst = max(self.ttft_exceeding, self.tpot_exceeding)
        if self.outcome == "fail" and worst < self.exceeding_needed:
            raise ValueError(
                f"neither ttft_exceeding ({self.ttft_exceeding}) nor tpot_exceeding"
                f" ({self.tpot_exceeding}) reaches exceeding_needed ({self.exceeding_needed}):"
                " the probe was not proven to fail"
            )
        left = self.cut_window_requests + self.unsent_window_requests
        if self.outcome == "pass" and worst + left >= self.exceeding_needed:
            raise ValueError(
                f"{worst} window requests over a bound and {left} cut or unsent could reach"
                f" exceeding_needed ({self.exceeding_needed}): the probe was not proven to pass"
            )
        return self


class EngineSeries(StrictModel):
    """The engine's gauges at each scrape inside the window (one list per gauge, equal lengths)."""

    t_s: list[float] = Field(description="When the scrape arrived, s from the window start")
    running: list[NonNegFloat | None] = Field(description="Requests in the engine's batches")
    waiting: list[NonNegFloat | None] = Field(description="Requests queued in the engine")
    kv_cache_usage_pct: list[Pct | None] = Field(description="KV cache in use, %")

    @model_validator(mode="after")
    def _equal_lengths(self) -> EngineSeries:
        lengths = {name: len(getattr(self, name)) for name in type(self).model_fields}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"columns have different lengths: {lengths}")
        return self


class EngineTelemetry(StrictModel):
    """What the engine's ``/metrics`` said during a probe's window (:mod:`tokenwatt.telemetry`).

    null: the engine does not expose that figure ("not measured", never 0).
    """

    dialect: Literal["vllm", "sglang", "llamacpp"] | None = Field(
        default=None, description="Whose metric names the page speaks"
    )
    samples: Count = Field(description="Scrapes read inside the window")
    scrape_errors: Count = Field(default=0, description="Scrapes that failed")
    running_mean: NonNegFloat | None = Field(default=None, description="Mean running requests")
    running_max: NonNegFloat | None = Field(default=None, description="Most running requests")
    waiting_mean: NonNegFloat | None = Field(default=None, description="Mean queued requests")
    waiting_max: NonNegFloat | None = Field(default=None, description="Most queued requests")
    waiting_growth: float | None = Field(
        default=None,
        description="Change of the queue over the window: least-squares slope x window, requests",
    )
    kv_cache_usage_mean_pct: Pct | None = Field(default=None, description="Mean KV usage, %")
    kv_cache_usage_max_pct: Pct | None = Field(default=None, description="Highest KV usage, %")
    preemptions: Count | None = Field(
        default=None, description="Preemption counter, last minus first scrape of the window"
    )
    prefix_cache_hit_rate_pct: Pct | None = Field(
        default=None, description="Prompt tokens found in the prefix cache, % of those looked up"
    )
    spec_decode_acceptance_pct: Pct | None = Field(
        default=None, description="Draft tokens accepted, % of those proposed"
    )
    series: EngineSeries | None = Field(default=None, description="Every scrape's gauges")


class LittlesLawAudit(StrictModel):
    """Little's law: arrival rate x mean time in system against the engine's own count."""

    arrival_rate_rps: NonNegFloat = Field(description="Window requests sent / window, req/s")
    mean_time_in_system_s: NonNegFloat = Field(
        description="Mean send-to-last-byte of the successful window requests, s"
    )
    expected_in_system: NonNegFloat = Field(description="Their product: requests in the system")
    engine_in_system: NonNegFloat = Field(
        description="The engine's mean running + waiting requests over the window"
    )
    disagreement_pct: float = Field(description="(engine - expected) / expected, %")
    agrees: bool = Field(description="Within the stated tolerance (tokenwatt.audits)")


class ConservationAudit(StrictModel):
    """Every window request the schedule held is accounted for, once."""

    scheduled: Count = Field(description="Window requests in the arrival schedule")
    ok: Count
    failed: Count = Field(description="Failed, other than cancelled")
    cancelled: Count = Field(description="Cut by an early stop")
    never_sent: Count = Field(description="Not sent because the probe stopped early")
    holds: bool = Field(description="scheduled = ok + failed + cancelled + never_sent")


class TokenAudit(StrictModel):
    """The server's token counts against what the client saw, over the window requests."""

    requests: Count = Field(description="Window requests checked")
    usage_mismatches: Count = Field(
        description="Requests whose usage.completion_tokens differs from their content chunks"
        " (recorded only: several tokens a chunk is honest)"
    )
    usage_below_chunks: Count = Field(
        default=0,
        description="Requests whose usage.completion_tokens is below their content chunks"
        " (impossible when counted honestly)",
    )
    over_max_tokens: Count = Field(description="Requests with more output tokens than asked")
    short_ignore_eos: Count = Field(
        description="ignore_eos requests that stopped before max_tokens"
    )
    examples: list[str] = Field(default_factory=list, description="A few offending requests")


class SteadyStateAudit(StrictModel):
    """Whether the warm-up brought the load to its steady state before the window opened."""

    requests: Count = Field(description="Window requests whose time in the system is known")
    mean_time_in_system_s: NonNegFloat = Field(description="Send to last byte (or failure), s")
    longest_time_in_system_s: NonNegFloat
    warmup_s: NonNegFloat
    shortfall_pct: float = Field(
        description="Share of the steady-state load not yet in the system when the window"
        " opened, (1 - carried load share) E[(D - warm-up)+] / E[D], %; negative when the load"
        " carried over from a faster probe (sweep.ramp) was above this rate's"
    )
    window_shortfall_pct: float = Field(description="The same, averaged over the window, %")
    steady_warmup_s: NonNegFloat = Field(
        description="The warm-up that would bring the shortfall to the audit's limit, s"
    )
    carried_load_pct: NonNegFloat | None = Field(
        default=None,
        description="sweep.ramp: requests carried over from the previous probe, as a share of"
        " this rate's steady-state load (rate x mean time in system), %; null = from idle",
    )
    holds: bool = Field(description="The shortfall is within the limit (tokenwatt.audits)")


class ProbeAudits(StrictModel):
    """The audits a reviewer would run on one probe (:mod:`tokenwatt.audits`)."""

    littles_law: LittlesLawAudit | None = Field(
        default=None, description="null without engine gauges or successful requests"
    )
    conservation: ConservationAudit | None = None
    tokens: TokenAudit | None = None
    steady_state: SteadyStateAudit | None = Field(
        default=None, description="null in older files, or with no window request"
    )


class LoadActor(StrictModel):
    """One load actor of a probe on a Ray cluster: where its shard ran, and its clock audit."""

    shard: Annotated[int, Field(ge=0)] = Field(description="Shard i of the probe's W")
    node_id: str = Field(description="Ray node id")
    node_ip: str
    hostname: str
    pid: Annotated[int, Field(ge=0)]
    same_clock: bool = Field(
        description="On the coordinator's host (same boot): one monotonic clock, offset exactly 0"
    )
    clock_offset_ns: int = Field(
        description="The actor's monotonic clock minus the coordinator's at the probe's start, ns"
    )
    clock_uncertainty_ns: Annotated[int, Field(ge=0)] = Field(
        description="How far the offset may be off: half the shortest of the round trips, ns"
        " (0 with one clock)"
    )
    round_trips: Annotated[int, Field(ge=0)] = Field(description="Round trips timed")
    window_requests: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Window requests this actor sent"
    )
    send_lag_p99_ms: NonNegFloat | None = Field(
        default=None,
        description="p99 of this actor's window send lags, ms (client-bound is judged per actor"
        " as well as for the whole probe)",
    )
    lost: bool = Field(default=False, description="The actor or its node was lost mid-probe")


class LoadNode(StrictModel):
    """A node of the Ray cluster the load generator ran on."""

    node_id: str
    node_ip: str
    cpus: NonNegFloat
    used: bool = Field(description="Load actors were placed on it")
    why_not: str | None = Field(default=None, description="Why no actor was placed on it")


class LoadCluster(StrictModel):
    """The Ray cluster the load generator ran on (``load.cluster``)."""

    address: str = Field(description="As given (load.cluster.address or --ray)")
    ray_version: str
    nodes: list[LoadNode] = Field(default_factory=list, description="Alive when the run began")


class ProbeRamp(StrictModel):
    """A probe that started on the load the previous one left running (``sweep.ramp``)."""

    from_probe: Annotated[int, Field(ge=0)] = Field(description="The probe it followed")
    from_rate_rps: Annotated[float, Field(gt=0)]
    carried_requests: Count = Field(
        description="Requests of earlier probes still in flight when it started (never measured)"
    )


class ProbeRecord(StrictModel):
    """One probe: warm-up, measurement window and drain at one arrival rate."""

    index: Annotated[int, Field(ge=0)] = Field(description="Position in the run, from 0")
    phase: ProbePhase = Field(description="Why this probe ran")
    rate_rps: Annotated[float, Field(gt=0)] = Field(description="Target arrival rate, req/s")
    attempt: Annotated[int, Field(ge=0)] = Field(
        default=0, description="confirm: back-off attempt (0 = the found rate)"
    )
    repeat: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="confirm: repeat number at this attempt"
    )
    warmup_s: NonNegFloat = Field(description="Warm-up used, s")
    window_s: Annotated[float, Field(gt=0)] = Field(description="Window used, s")
    started_utc: datetime = Field(description="Wall-clock start (UTC)")
    window_start_ns: int = Field(description="Monotonic clock at the window start, ns")
    window_end_ns: int = Field(description="Monotonic clock at the window end, ns")
    end_ns: int = Field(description="Monotonic clock when the last window request finished, ns")
    window_requests: Annotated[int, Field(ge=0)] = Field(
        description="Requests whose scheduled arrival is inside the window"
    )
    ok: Annotated[int, Field(ge=0)] = Field(description="Window requests that succeeded")
    failed: Annotated[int, Field(ge=0)] = Field(description="Window requests that failed")
    failures_by_cause: dict[str, int] = Field(default_factory=dict, description="Failures by cause")
    failure_examples: dict[str, str] = Field(
        default_factory=dict, description="The error text of one failed request per cause"
    )
    output_tokens: Annotated[int, Field(ge=0)] = Field(
        description="Output tokens of the successful window requests"
    )
    goodput_tok_s: NonNegFloat = Field(description="output_tokens / window_s, tok/s")
    window_emitted_tokens: NonNegFloat | None = Field(
        default=None,
        description="Output tokens that arrived inside the window from any request (warm-up,"
        " window or later; chunk arrival times, scaled by each request's tokens per chunk):"
        " the token rate the MBU estimate divides by the running batch",
    )
    achieved_rate_rps: NonNegFloat = Field(description="Window requests actually sent / window_s")
    offered_rate_rps: NonNegFloat | None = Field(
        default=None,
        description="Window requests the schedule offered / window_s (the 97 % rule's reference)",
    )
    request_throughput_rps: NonNegFloat | None = Field(
        default=None, description="Successful window requests / window_s"
    )
    send_lag_p99_ms: float = Field(description="p99 of actual minus scheduled send time, ms")
    send_lag_max_ms: NonNegFloat | None = Field(
        default=None, description="Largest send lag of a window request, ms"
    )
    slot_wait_s: NonNegFloat = Field(
        default=0.0, description="Total time window requests waited for a concurrency slot, s"
    )
    client_bound: bool = Field(description="The harness, not the server, limited this probe")
    client_bound_reasons: list[str] = Field(default_factory=list, description="Why, if so")
    ttft_ms: LatencyStats = Field(description="Time to first token")
    ttfat_ms: LatencyStats | None = Field(
        default=None,
        description="Time to first answer token (after reasoning); null = no window request"
        " streamed reasoning (TTFAT = TTFT)",
    )
    tpot_ms: LatencyStats = Field(description="Time per output token")
    itl_ms: LatencyStats = Field(description="Gaps between content chunks")
    e2e_ms: LatencyStats = Field(description="End-to-end latency")
    slo_pass: bool = Field(description="p99 TTFT and TPOT within the SLO and not client-bound")
    workers: Annotated[int, Field(ge=1)] = Field(default=1, description="Load-generator processes")
    running_batch_mean: NonNegFloat | None = Field(
        default=None, description="Mean running batch over the window"
    )
    batch_source: Literal["metrics", "littles_law"] | None = Field(
        default=None, description="Where running_batch_mean comes from"
    )
    output_length_violations: Annotated[int, Field(ge=0)] = Field(
        default=0, description="ignore_eos requests whose output differs from max_tokens"
    )
    usage_mismatches: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Requests whose usage count differs from their chunk count"
    )
    approximate_output_tokens: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="Successful window requests whose output tokens were counted from chunks"
        " (the server sent no usage)",
    )
    reasoning_tokens: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="Reasoning tokens of the successful window requests (part of"
        " output_tokens); null = no reasoning streamed",
    )
    approximate_reasoning_tokens: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="Successful window requests whose reasoning tokens were counted from"
        " chunks (the server's usage gave no completion_tokens_details.reasoning_tokens)",
    )
    max_in_flight: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="Most requests in flight at once (sum over workers)"
    )
    client_cpu_s: NonNegFloat | None = Field(
        default=None, description="CPU time the load generator used during the probe, s"
    )
    client_preemptions: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="Times the load generator was preempted (involuntary context switches)",
    )
    requests: RequestTable | None = Field(default=None, description="The window requests")
    engine: EngineTelemetry | None = Field(
        default=None, description="The engine's /metrics during the window; null = not scraped"
    )
    audits: ProbeAudits | None = Field(
        default=None, description="Little's law, conservation, token accounting"
    )
    sessions: SessionStats | None = Field(
        default=None,
        description="Multi-turn sessions: started, completed, cut and their unsent turns; null"
        " = no sessions (rate_rps then counts requests, else sessions per second)",
    )
    early_stop: EarlyStop | None = Field(
        default=None,
        description="Set when the probe was stopped once it had provably failed"
        " (sweep.early_stop); such a probe never passes",
    )
    probe_s: NonNegFloat | None = Field(
        default=None,
        description="Wall time of the probe (warm-up, window, drain), s; null in older files",
    )
    load_actors: list[LoadActor] | None = Field(
        default=None,
        description="Ray: where each shard ran and its clock audit; null = worker processes on"
        " the coordinator's host",
    )
    ramp: ProbeRamp | None = Field(
        default=None,
        description="sweep.ramp: the probe started on the previous probe's requests still in"
        " flight; null = it started from an idle server",
    )
    stream: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="Workload stream of its arrival schedule and request lengths, the same in"
        " every run of a comparison (common random numbers); null = the probe's index (run"
        " files written before 2026-12-03)",
    )
    variant: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="Content variant of its stream: > 0 when the run sent this stream before"
        " (the same arrivals and lengths, other prompt tokens, so no prefix cache serves it)",
    )

    @property
    def stream_id(self) -> int:
        """The workload stream its requests came from (its index in files that do not say)."""
        return self.index if self.stream is None else self.stream

    def first_token_ms(self, first_token: FirstToken) -> LatencyStats:
        """The statistics of the first-token time an SLO bounds.

        TTFT, or TTFAT (which is the TTFT when the probe streamed no reasoning).
        """
        if first_token == "ttfat" and self.ttfat_ms is not None:
            return self.ttfat_ms
        return self.ttft_ms

    @model_validator(mode="after")
    def _consistent(self) -> ProbeRecord:
        stop = self.early_stop
        # A certain pass of the SLO is still no pass when the client, not the server, was the
        # limit: that is known only once the probe's send lags are in.
        if stop is not None and self.slo_pass != (stop.outcome == "pass" and not self.client_bound):
            raise ValueError(
                f"a probe stopped early on a certain {stop.outcome} (early_stop.outcome),"
                f" {'' if self.client_bound else 'not '}client-bound, has slo_pass {self.slo_pass}"
            )
        if self.ok + self.failed != self.window_requests:
            raise ValueError(
                f"ok ({self.ok}) + failed ({self.failed}) != window_requests"
                f" ({self.window_requests})"
            )
        if not self.window_start_ns <= self.window_end_ns <= self.end_ns:
            raise ValueError("window_start_ns <= window_end_ns <= end_ns does not hold")
        if self.requests is not None and len(self.requests.status) != self.window_requests:
            raise ValueError("requests does not hold exactly the window requests")
        return self


class RunOutcome(StrictModel):
    """What the sweep found, derived from the probes by the code (recomputable)."""

    confirmed_rate_rps: Annotated[float, Field(gt=0)] | None = Field(
        description="Rate whose confirmation was accepted; null = none passed"
    )
    confirm_probes: list[int] = Field(
        default_factory=list, description="Indices of the probes of the accepted confirmation"
    )
    slo_pass_count: Annotated[int, Field(ge=0)] = Field(description="Repeats that passed")
    goodput_tok_s: NonNegFloat = Field(description="Mean goodput over the repeats, tok/s")
    repeat_goodputs_tok_s: list[NonNegFloat] = Field(
        default_factory=list, description="Goodput of each repeat, tok/s"
    )
    ttft_p99_ms: LatencyMs | None = Field(
        default=None, description="p99 TTFT over the repeats' window requests pooled, ms"
    )
    tpot_p99_ms: LatencyMs | None = Field(
        default=None, description="p99 TPOT over the repeats' window requests pooled, ms"
    )
    ttfat_p99_ms: LatencyMs | None = Field(
        default=None,
        description="p99 time to first answer token over the repeats' window requests pooled,"
        " ms; null = no reasoning streamed (it equals ttft_p99_ms) or unbounded",
    )
    probe_seconds: NonNegFloat = Field(description="Wall time of all probes, s")
    search_probe_seconds: NonNegFloat = Field(description="Wall time of search probes, s")


class GpuInfo(StrictModel):
    """One GPU in use, as the inventory read it."""

    index: Annotated[int, Field(ge=0)]
    name: str
    uuid: str | None = None
    memory_total_mib: NonNegFloat | None = None
    power_limit_w: NonNegFloat | None = None
    memory_bus_width_bits: Annotated[int, Field(ge=0)] | None = None
    max_memory_clock_mhz: Annotated[int, Field(ge=0)] | None = None


class Environment(StrictModel):
    """Where and with what the run was made."""

    tokenwatt_version: str
    git_commit: str | None = None
    host: str
    platform: str
    python: str
    engine_version: str | None = Field(default=None, description="As the server reported it")
    engine_version_source: str | None = Field(default=None, description="e.g. GET /version")
    engine_config: EngineConfig | None = Field(
        default=None, description="The engine's configuration as the server reported it"
    )
    driver: str | None = None
    gpus: list[GpuInfo] = Field(default_factory=list)
    spec_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    started_utc: datetime
    finished_utc: datetime | None = None
    load_cluster: LoadCluster | None = Field(
        default=None, description="The Ray cluster of the load generator; null = this host"
    )


class PowerSample(StrictModel):
    """One reading of the power source."""

    t_ns: int = Field(description="Monotonic clock, ns (the load generator's clock)")
    watts: NonNegFloat = Field(description="Reading: sum over GPUs in use, or the whole node, W")
    gpu_watts: list[NonNegFloat] | None = Field(default=None, description="Per GPU, W")
    energy_j: NonNegFloat | None = Field(
        default=None, description="Energy counter (sum over GPUs), J, where the source has one"
    )
    throttle_reasons: list[str] = Field(
        default_factory=list, description="Active clock-event reasons on any GPU"
    )


class PowerGap(StrictModel):
    """A stretch with no readings because the source failed."""

    start_ns: int
    end_ns: int
    cause: str


class NodePowerEvidence(StrictModel):
    """One node's readings, where a server spans nodes (``power.nodes``), and its figures.

    The samples are the node's own (stamped on the same clock and tick grid as every node's);
    its gaps are the stretches where this node failed to read.
    """

    name: str = Field(min_length=1, description="The node's name in power.nodes")
    source: PowerSourceName
    description: str = Field(description="e.g. 'Node power from BMC (Redfish ...)'")
    scope: Literal["board", "node"] = Field(description="GPU boards only, or whole node")
    samples: list[PowerSample] = Field(default_factory=list)
    gaps: list[PowerGap] = Field(default_factory=list)
    power_limit_w: NonNegFloat | None = Field(default=None, description="Enforced limit")
    throttle_monitored: bool = Field(
        default=False, description="The node's source reports clock-event (throttle) reasons"
    )
    node_power_kw: NonNegFloat | None = Field(
        default=None, description="This node's mean power inside the confirmed windows, kW"
    )
    energy_j: NonNegFloat | None = Field(
        default=None, description="This node's energy inside the confirmed windows, J"
    )
    energy_method: Literal["counter", "integral"] | None = None
    max_gap_fraction: NonNegFloat | None = Field(
        default=None, description="Largest share of a confirmed window without this node's readings"
    )


class PowerEvidence(StrictModel):
    """Power readings for the whole run and the figures derived over the confirmed windows."""

    source: PowerKind = Field(
        description="The source, or 'nodes': the figures are the sum over the nodes below"
    )
    description: str = Field(description="e.g. 'GPU board power sum (NVIDIA)'")
    scope: Literal["board", "node", "none"] = Field(description="GPU boards only, or whole node")
    sampling_hz: Annotated[Num, Field(gt=0)]
    samples: list[PowerSample] = Field(default_factory=list)
    gaps: list[PowerGap] = Field(default_factory=list)
    power_limit_w: NonNegFloat | None = Field(default=None, description="Enforced limit (sum)")
    node_power_kw: NonNegFloat | None = Field(
        default=None, description="Mean power inside the confirmed windows, kW"
    )
    energy_j: NonNegFloat | None = Field(
        default=None, description="Energy inside the confirmed windows, J"
    )
    energy_method: Literal["counter", "integral"] | None = None
    tokens_per_joule: NonNegFloat | None = None
    throttle_counts: dict[str, int] = Field(
        default_factory=dict, description="Samples in the confirmed windows with each reason"
    )
    max_gap_fraction: NonNegFloat | None = Field(
        default=None, description="Largest share of a confirmed window without readings"
    )
    throttle_monitored: bool = Field(
        default=False,
        description="The source reports clock-event (throttle) reasons: an empty list then"
        " means none active, and zero counts are real zeros",
    )
    notes: list[str] = Field(
        default_factory=list,
        description="How the figures were obtained where it is not the plain method"
        " (counter resets, fallbacks, gaps bridged)",
    )
    nodes: list[NodePowerEvidence] | None = Field(
        default=None,
        description="Where a server spans nodes (source 'nodes'): each node's readings and"
        " figures; the samples, gaps and figures above are their sum",
    )

    @model_validator(mode="after")
    def _nodes_with_their_kind(self) -> PowerEvidence:
        if (self.source == "nodes") != (self.nodes is not None):
            raise ValueError("source 'nodes' and a list of nodes go together")
        if self.nodes is not None:
            names = [n.name for n in self.nodes]
            if len(set(names)) != len(names):
                raise ValueError("nodes: a node name appears twice")
            if any(n.scope != self.scope for n in self.nodes):
                raise ValueError(f"nodes: every node must cover the scope of the sum, {self.scope}")
        return self


class MbuEvidence(StrictModel):
    """Memory-bandwidth utilisation at the confirmed rate, with every input."""

    mbu_pct: NonNegFloat
    bytes_per_step: NonNegFloat = Field(description="Bytes a decode step reads")
    weight_bytes_per_step: NonNegFloat = Field(description="Dense + touched expert weights")
    kv_bytes_per_step: NonNegFloat = Field(description="KV cache of the running contexts")
    batch_mean: NonNegFloat = Field(description="Mean running batch B")
    batch_source: Literal["metrics", "littles_law"]
    steps_per_s: NonNegFloat = Field(description="output tok/s / B")
    output_tok_s: NonNegFloat
    rated_bw_tbs: Annotated[float, Field(gt=0)] = Field(description="Rated bandwidth, all GPUs")
    rated_bw_source: str = Field(description="spec, NVML clocks, or the GPU-name table")
    assumptions: list[str] = Field(default_factory=list)
    mean_context_tokens: NonNegFloat | None = Field(
        default=None, description="Mean context of a running sequence used for the KV term"
    )
    experts_touched_per_layer: NonNegFloat | None = Field(
        default=None, description="MoE: expected distinct routed experts per layer per step"
    )
    gpus: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="GPUs the rated bandwidth covers (replicas x tensor parallel)"
    )
    geometry: str | None = Field(default=None, description="The model geometry, in one line")


class AccuracyItem(StrictModel):
    """One question asked, for audit."""

    seed: int
    index: Annotated[int, Field(ge=0)] = Field(description="Position in the suite")
    id: str | None = None
    gold: str
    completion: str | None = Field(description="Text returned; null if the request failed")
    extracted: str | None = Field(description="Answer the scorer extracted")
    correct: bool
    error: str | None = None


class AccuracySeedScore(StrictModel):
    """Score of one exemplar draw."""

    seed: int
    score: Annotated[float, Field(ge=0, le=100)]
    correct: Annotated[int, Field(ge=0)]
    answered: Annotated[int, Field(ge=0)]
    failed: Annotated[int, Field(ge=0)]


class AccuracyEvidence(StrictModel):
    """The accuracy check of this configuration."""

    suite: str
    name: str
    scorer: str
    limit: Annotated[int, Field(ge=0)]
    shots: Annotated[int, Field(ge=0)]
    score: Annotated[float, Field(ge=0, le=100)] = Field(description="Mean over seeds, %")
    spread_pts: Annotated[float, Field(ge=0, le=100)] = Field(description="max - min over seeds")
    per_seed: list[AccuracySeedScore]
    items: list[AccuracyItem] = Field(default_factory=list)
    meaningful: bool = Field(
        default=True, description="False against the simulator: its answers are not a model's"
    )


class ResumeInfo(StrictModel):
    """How a run was continued after an interruption (``tokenwatt run --resume``)."""

    resumed_from: str = Field(description="The incomplete run file continued, as given")
    reused_probes: Annotated[int, Field(ge=0)] = Field(
        description="Recorded probes replayed into the sweep, not measured again"
    )
    saved_probe_seconds: NonNegFloat = Field(description="Their wall time: what was not spent")
    reused_accuracy: bool = Field(description="The interrupted run's accuracy check was kept")
    interrupted_reason: str | None = Field(
        default=None, description="Why the interrupted run stopped (its incomplete_reason)"
    )


class CalibrationRung(StrictModel):
    """One short probe of the load generator's self-calibration (tokenwatt.load.calibrate)."""

    rate_rps: Annotated[float, Field(gt=0)] = Field(description="Target arrival rate, req/s")
    events_per_s: NonNegFloat = Field(description="Streamed token events per second it planned")
    workers: Annotated[int, Field(ge=1)] = Field(description="Load-generator processes")
    window_requests: Annotated[int, Field(ge=0)]
    client_bound: bool = Field(description="The generator could not pace it (the probe's rule)")
    client_bound_reasons: list[str] = Field(default_factory=list)
    send_lag_p50_ms: float | None = Field(default=None, description="Pacing error, median")
    send_lag_p99_ms: float | None = Field(default=None, description="Pacing error, p99")
    ttft_error_p50_ms: float | None = Field(
        default=None, description="Client TTFT minus the server's own (read to first write), median"
    )
    ttft_error_p99_ms: float | None = Field(default=None, description="The same, p99")
    tpot_error_p50_ms: float | None = Field(
        default=None, description="Client TPOT minus the server's own (its writes), median"
    )
    tpot_error_p99_ms: float | None = Field(default=None, description="The same, p99")
    matched_requests: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Window requests matched to the server's stamps"
    )
    client_cpu_s: NonNegFloat | None = Field(default=None, description="CPU of the generator")
    server_late_p99_ms: NonNegFloat | None = Field(
        default=None,
        description="How late the calibration server wrote its events against its own schedule,"
        " p99 over every event of the rung, ms",
    )
    server_bound: bool = Field(
        default=False,
        description="The server fell behind its schedule by more than the client may (the"
        " send-lag bound): the rung measured the server too, and the calibration stopped there",
    )


class ClientCalibration(StrictModel):
    """The load generator measured against a local server whose answer is known, before the run.

    Rungs rise by a factor from the sweep's first rate to its highest until one is client-bound;
    the ceiling is the highest rung that was not. ``ceiling_found`` false: every rung passed, so
    the ceiling is at least ``ceiling_rps`` (the sweep's highest rate).
    """

    server: str = Field(description="What it was measured against, in words")
    ttft_ms: Annotated[float, Field(gt=0)] = Field(description="The server's first-token delay")
    itl_ms: Annotated[float, Field(gt=0)] = Field(description="The server's gap between tokens")
    output_tokens: Annotated[int, Field(ge=1)] = Field(description="Tokens per calibration stream")
    rungs: list[CalibrationRung]
    ceiling_rps: NonNegFloat | None = Field(
        description="Highest rate paced without being client-bound, in the sweep's unit (sessions"
        " per second with sessions); null = not even the first rung"
    )
    ceiling_found: bool = Field(description="A rung above the ceiling was client-bound")
    seconds: NonNegFloat = Field(description="Wall time the calibration took")
    server_processes: Annotated[int, Field(ge=1)] = Field(
        default=1, description="Calibration-server processes sharing its port"
    )
    server_bound_rps: NonNegFloat | None = Field(
        default=None,
        description="The rung at which the server fell behind its own schedule, in the sweep's"
        " unit; the client was not measured above it, and the ceiling is at least ceiling_rps",
    )


class PrefixReuse(StrictModel):
    """The prefix-cache hit rate the workload's construction gives (tokenwatt.load.prefix).

    Set when the prompts share prefixes (``workload.prefix``, or a trace's ``hash_ids``); each
    probe's measured rate is its ``engine.prefix_cache_hit_rate_pct``.
    """

    expected_hit_rate_pct: Annotated[float, Field(ge=0, le=100)] = Field(
        description="Fraction of prompt tokens a cache of block_tokens-token blocks serves, %:"
        " steady state for workload.prefix, one cold pass in order for a trace"
    )
    block_tokens: Annotated[int, Field(ge=1)] = Field(description="Cache block size assumed")
    block_source: str = Field(
        description="Where the block size came from (the engine's /metrics, the simulator's"
        " settings, or vLLM's GPU default)"
    )


class RunFile(StrictModel):
    """Everything ``tokenwatt measure`` learned about one configuration."""

    kind: Literal["tokenwatt-run"] = "tokenwatt-run"
    schema_version: Literal[1] = 1
    label: str = Field(min_length=1, description="Name of this configuration (--label)")
    description: str | None = Field(
        default=None, description="Display label on the page (--description); null = label"
    )
    role: Role
    quick: bool = Field(description="Shortened windows for validation: never publishable")
    simulated: bool = Field(description="Measured against the embedded simulator")
    complete: bool = Field(description="False if interrupted or aborted")
    incomplete_reason: str | None = None
    command: str = Field(description="The command line that made this run, shell-quoted")
    spec_path: str = Field(description="The spec path as given on the command line")
    spec: Spec
    effective: MeasurementSpec = Field(description="Durations actually used (quick mode shortens)")
    model_shape: Literal["Dense", "MoE"] | None = Field(
        default=None, description="From the model geometry"
    )
    model_geometry_key: str | None = Field(
        default=None,
        description="Architecture summary (layers, widths, experts) used to tell whether runs"
        " served the same model, whatever its storage type",
    )
    environment: Environment
    probes: list[ProbeRecord] = Field(default_factory=list)
    outcome: RunOutcome | None = None
    power: PowerEvidence | None = None
    mbu: MbuEvidence | None = None
    accuracy: AccuracyEvidence | None = None
    resumed: list[ResumeInfo] = Field(
        default_factory=list,
        description="Each resumption of this run after an interruption, oldest first",
    )
    prefix_reuse: PrefixReuse | None = Field(
        default=None, description="The workload's expected prefix-cache reuse; null = none shared"
    )
    calibration: ClientCalibration | None = Field(
        default=None,
        description="The load generator's self-calibration before the run; null = not run"
        " (load.calibrate false, quick mode, a Ray cluster, or a run file from before it)",
    )

    @model_validator(mode="after")
    def _probe_order(self) -> RunFile:
        for position, probe in enumerate(self.probes):
            if probe.index != position:
                raise ValueError(f"probes[{position}] has index {probe.index}")
        if self.outcome is not None:
            for i in self.outcome.confirm_probes:
                if i >= len(self.probes):
                    raise ValueError(f"outcome.confirm_probes names probe {i}, which is absent")
        return self
