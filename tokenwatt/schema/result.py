"""The result: one comparison of configurations, as ``tokenwatt report`` writes it.

The schema is the published seed's, exactly: loading the seed and dumping it (``exclude_unset``)
gives the same JSON values. Everything after the seed's fields is an optional addition.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from tokenwatt.schema.base import Num, PowerKind, PowerSourceName, Role, StrictModel
from tokenwatt.schema.engine import EngineConfig
from tokenwatt.schema.limits import impossible_in_result
from tokenwatt.schema.spec import FirstToken, Spec

__all__ = [
    "RESULT_ID_MAX_CHARS",
    "RESULT_ID_PATTERN",
    "CapacityFitSummary",
    "ConfigAccuracy",
    "ConfigAudits",
    "ConfigMeasurement",
    "ConfigResult",
    "ConfigTelemetry",
    "Fleet",
    "MultipleComparison",
    "PowerNodeSummary",
    "PowerTracePoint",
    "PowerTraceSummary",
    "PowerValidity",
    "ProbePoint",
    "ResultAccuracy",
    "ResultFile",
    "ResultHardware",
    "ResultModel",
    "ResultPower",
    "ResultSlo",
    "ResultSoftware",
    "ResultWorkload",
    "Verdict",
    "VerdictOutcome",
]

RESULT_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"
"""A result id: lower-case letters, digits, ``.``, ``_`` and ``-``; it names ``results/<id>.json``
and the page, so it can hold no path."""

RESULT_ID_MAX_CHARS = 200

NonNeg = Annotated[float, Field(ge=0)]
Percent = Annotated[float, Field(gt=0, le=100)]


def _ordered(pairs: list[tuple[str, float | None]]) -> str | None:
    """The first pair of (name, value) out of ascending order, in words; None if all are in it."""
    known = [(n, v) for n, v in pairs if v is not None]
    for (low_name, low), (high_name, high) in zip(known, known[1:], strict=False):
        if high < low:
            return f"{high_name} ({high:g}) is below {low_name} ({low:g})"
    return None


class ResultHardware(StrictModel):
    """The box the runs were made on."""

    vendor: str = Field(description="Accelerator vendor")
    accelerator: str = Field(description="Accelerator name as the driver reports it")
    count: Annotated[int, Field(ge=1)] = Field(description="Accelerators in use")
    rated_bw_tbs_per_gpu: Annotated[float, Field(gt=0)] | None = Field(
        default=None, description="Rated memory bandwidth per GPU, TB/s"
    )
    driver: str | None = Field(default=None, description="Driver version")
    host: str | None = Field(default=None, description="Host or provider")


class ResultSoftware(StrictModel):
    """The serving engine."""

    engine: str
    engine_version: str | None = None
    kernels: str | None = None


class ResultModel(StrictModel):
    """The model served."""

    name: str
    shape: str = Field(description="Dense or MoE")
    quantization: str = Field(description="Weights and KV cache storage")
    parallelism: str = Field(description="Replicas and tensor parallelism")


class ResultSlo(StrictModel):
    """The latency objective: a first-token bound (TTFT, or TTFAT for reasoning) and TPOT."""

    ttft_p99_ms: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="Bound on p99 TTFT, ms; absent when the first-token bound is on TTFAT",
    )
    ttfat_p99_ms: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="Bound on p99 time to first answer token, ms, in place of ttft_p99_ms",
    )
    tpot_p99_ms: Annotated[float, Field(gt=0)]

    @model_validator(mode="after")
    def _one_first_token_bound(self) -> ResultSlo:
        if (self.ttft_p99_ms is None) == (self.ttfat_p99_ms is None):
            raise ValueError("needs exactly one of ttft_p99_ms and ttfat_p99_ms")
        return self

    @model_serializer(mode="wrap")
    def _the_first_token_bound_only(self, handler: SerializerFunctionWrapHandler) -> Any:
        # The seed's SLO has ttft_p99_ms and tpot_p99_ms only, and a result on TTFT is written
        # exactly so; one on TTFAT has ttfat_p99_ms in its place.
        data = handler(self)
        if isinstance(data, dict):
            data.pop("ttft_p99_ms" if self.ttfat_p99_ms is not None else "ttfat_p99_ms", None)
        return data

    @property
    def first_token(self) -> FirstToken:
        """The first-token time bounded."""
        return "ttfat" if self.ttfat_p99_ms is not None else "ttft"

    @property
    def first_token_p99_ms(self) -> float:
        """Its bound, ms."""
        bound = self.ttfat_p99_ms if self.ttfat_p99_ms is not None else self.ttft_p99_ms
        assert bound is not None  # the validator
        return bound


class ResultWorkload(StrictModel):
    """The workload, in words for the page."""

    trace: str
    input_tokens: str
    output_tokens: str
    arrival: str
    prefix: str | None = Field(
        default=None,
        description="Shared prefixes and the prefix-cache hit rate they should give, in words",
    )
    sessions: str | None = Field(
        default=None,
        description="Multi-turn sessions (turns, think time, new messages) in words; rates then"
        " count sessions per second",
    )


class ResultPower(StrictModel):
    """How power was measured."""

    source: str = Field(description="In words, e.g. 'GPU board power sum (NVIDIA)'")
    kind: PowerKind = Field(
        description="The source, or 'nodes': the figures are the sum over each config's power_nodes"
    )
    sampling_hz: Annotated[Num, Field(gt=0)] | None = None
    window: str = Field(description="Which samples count, in words")


class ResultAccuracy(StrictModel):
    """The accuracy suite and gate."""

    suite: str
    threshold_pts: Annotated[float, Field(ge=0)]


class Fleet(StrictModel):
    """A projection of a per-card difference onto a fleet."""

    cards: Annotated[int, Field(ge=1)]
    goodput_delta_tok_s: float | None = Field(default=None, description="tuned - baseline, x cards")
    power_delta_kw: float | None = Field(default=None, description="tuned - baseline, x cards")
    energy_delta_kwh_per_year: float | None = Field(
        default=None, description="power_delta_kw x 8,760 h"
    )


class ConfigAccuracy(StrictModel):
    """Accuracy of one configuration."""

    score: Annotated[float, Field(ge=0, le=100)] | None = Field(description="% correct")
    delta_pts: float | None = Field(description="score - baseline score, points")
    spread_pts: Annotated[float, Field(ge=0, le=100)] | None = Field(
        description="max - min over seeds"
    )
    per_seed: list[float] | None = None
    answered: Annotated[int, Field(ge=0)] | None = None
    failed: Annotated[int, Field(ge=0)] | None = None
    questions: Annotated[int, Field(ge=0)] | None = None
    gate_pass: bool | None = Field(default=None, description="delta_pts >= -max_drop_pts")
    meaningful: bool | None = Field(
        default=None, description="False against the simulator: not a model's answers"
    )

    @model_validator(mode="after")
    def _counts_within_questions(self) -> ConfigAccuracy:
        asked = (self.answered or 0) + (self.failed or 0)
        if self.questions is not None and asked > self.questions:
            raise ValueError(
                f"answered ({self.answered}) + failed ({self.failed}) exceeds questions"
                f" ({self.questions})"
            )
        return self


class ConfigMeasurement(StrictModel):
    """Durations a configuration was actually measured with (the policy checks these)."""

    warmup_s: NonNeg
    window_s: Annotated[float, Field(gt=0)]
    repeats: Annotated[int, Field(ge=1)]
    accuracy_questions: Annotated[int, Field(ge=0)] | None = None
    quick: bool = False
    simulated: bool = False
    complete: bool = True


class ProbePoint(StrictModel):
    """One probe of the sweep, for the latency-versus-rate chart."""

    phase: str
    rate_rps: Annotated[float, Field(gt=0)]
    window_s: Annotated[float, Field(gt=0)]
    ttft_p50_ms: NonNeg | None = None
    ttft_p99_ms: NonNeg | None = Field(default=None, description="null = unbounded (failures)")
    tpot_p50_ms: NonNeg | None = None
    tpot_p99_ms: NonNeg | None = Field(default=None, description="null = unbounded (failures)")
    goodput_tok_s: NonNeg
    failed: Annotated[int, Field(ge=0)] = 0
    slo_pass: bool
    client_bound: bool = False
    send_lag_p99_ms: float | None = None
    stopped_early: bool = Field(
        default=False,
        description="Stopped once its verdict was certain (sweep.early_stop, adaptive search):"
        " its latency figures cover only the requests sent before the stop",
    )
    cut_requests: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="Window requests in flight at the early stop, cancelled (counted in failed)",
    )
    stream: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="Workload stream it sent (the same in every config of the comparison: common"
        " random numbers); null = not recorded (the probe's position in its run)",
    )
    variant: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="> 0: its run had sent this stream before; this time with other prompt tokens",
    )
    ttfat_p99_ms: NonNeg | None = Field(
        default=None,
        description="p99 time to first answer token, ms, where the probe streamed reasoning or"
        " the SLO bounds it; null = unbounded (failures), or not measured",
    )
    ttfat_over_pct: Annotated[float, Field(ge=0, le=100)] | None = Field(
        default=None,
        description="Share of the window requests over the SLO's TTFAT bound (where it has one)",
    )
    carried_requests: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="sweep.ramp: requests of the previous probe still in flight when this one"
        " started (load, never measured); null = it started from an idle server",
    )
    ttft_over_pct: Annotated[float, Field(ge=0, le=100)] | None = Field(
        default=None,
        description="Window requests over the TTFT bound (failed ones included), % of those"
        " counted",
    )
    tpot_over_pct: Annotated[float, Field(ge=0, le=100)] | None = Field(
        default=None, description="Window requests over the TPOT bound, % of those counted"
    )

    running_mean: NonNeg | None = Field(
        default=None, description="Engine's mean running requests over the window"
    )
    waiting_mean: NonNeg | None = Field(
        default=None, description="Engine's mean queued requests over the window"
    )
    kv_cache_usage_mean_pct: Annotated[float, Field(ge=0, le=100)] | None = Field(
        default=None, description="Engine's mean KV-cache usage over the window, %"
    )
    preemptions: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="Engine preemptions during the window"
    )
    prefix_cache_hit_rate_pct: Annotated[float, Field(ge=0, le=100)] | None = Field(
        default=None, description="Engine's prefix-cache hit rate over the window, %"
    )

    @model_validator(mode="after")
    def _percentiles_ordered(self) -> ProbePoint:
        for what in ("ttft", "tpot"):
            wrong = _ordered(
                [
                    (f"{what}_p50_ms", getattr(self, f"{what}_p50_ms")),
                    (f"{what}_p99_ms", getattr(self, f"{what}_p99_ms")),
                ]
            )
            if wrong is not None:
                raise ValueError(wrong)
        return self


class PowerTracePoint(StrictModel):
    """A power reading, seconds from the run's first sample."""

    t_s: NonNeg
    watts: NonNeg


class PowerTraceSummary(StrictModel):
    """The power trace, reduced for the page."""

    samples: Annotated[int, Field(ge=0)]
    min_w: NonNeg | None = None
    mean_w: NonNeg | None = None
    max_w: NonNeg | None = None
    gaps: Annotated[int, Field(ge=0)] = 0
    max_gap_fraction: NonNeg | None = None
    points: list[PowerTracePoint] = Field(default_factory=list)

    @model_validator(mode="after")
    def _min_mean_max(self) -> PowerTraceSummary:
        wrong = _ordered([("min_w", self.min_w), ("mean_w", self.mean_w), ("max_w", self.max_w)])
        if wrong is not None:
            raise ValueError(wrong)
        return self


class PowerNodeSummary(StrictModel):
    """One node of a server spanning nodes, over the confirmed windows.

    The config's power figures are the sum over its nodes.
    """

    name: str = Field(min_length=1)
    source: PowerSourceName
    description: str = Field(description="The node's source in words")
    node_power_kw: NonNeg | None = Field(description="Mean power in the confirmed windows, kW")
    energy_j: NonNeg | None = Field(description="Energy in the confirmed windows, J")
    energy_method: Literal["counter", "integral"] | None = None
    samples: Annotated[int, Field(ge=0)] = Field(description="Readings in the confirmed windows")
    gaps: Annotated[int, Field(ge=0)] = Field(
        description="Stretches without readings (failed reads) touching the confirmed windows"
    )
    max_gap_fraction: NonNeg | None = Field(
        default=None, description="Largest share of a confirmed window without readings"
    )


class CapacityFitSummary(StrictModel):
    """The fit behind one bound's capacity (methodology, "SLO capacity"), for the page's chart.

    logit(fraction of requests over the bound) = intercept + slope x ln(rate).
    """

    slo: Literal["ttft", "ttfat", "tpot"]
    method: Literal["logistic", "bracket", "above_all", "below_all"] = Field(
        description="logistic: the fit; bracket: no fit, the measured bracket; above_all / below"
        "_all: no probe was over / within the bound"
    )
    capacity_rps: NonNeg | None = None
    ci_rps: list[NonNeg] | None = Field(default=None, description="[low, high], 95 %")
    intercept: float | None = None
    slope: float | None = None
    dispersion: NonNeg | None = Field(
        default=None, description="phi: variance of the counts over the binomial's"
    )
    dof: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="Degrees of freedom of the interval's t (workload streams; probes in files"
        " written before 2026-12-04)",
    )
    shared_stream_correlation: Annotated[float, Field(ge=0, le=1)] | None = Field(
        default=None,
        description="rho: correlation of the counts of two probes of one workload stream (0: no"
        " stream sent twice among the probes fitted; null: not recorded)",
    )
    probes_used: Annotated[int, Field(ge=0)] = 0
    lower_bound_rps: NonNeg | None = None
    upper_bound_rps: NonNeg | None = None
    short_of_steady: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="Probes whose verdict on this bound was left out: a pass of a window whose"
        " load ran short of steady state, or a fail of one whose load ran over it (averaged over"
        " the window, beyond the steady-state audit's limit)",
    )


class ConfigTelemetry(StrictModel):
    """What the engine's /metrics said at the confirmed rate, over the confirmation's windows.

    null: not measured (the engine does not expose it, or was not scraped).
    """

    dialect: str | None = None
    running_mean: NonNeg | None = None
    waiting_mean: NonNeg | None = None
    kv_cache_usage_mean_pct: Annotated[float, Field(ge=0, le=100)] | None = None
    kv_cache_usage_max_pct: Annotated[float, Field(ge=0, le=100)] | None = None
    preemptions: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="Sum over the confirmation's windows"
    )
    prefix_cache_hit_rate_pct: Annotated[float, Field(ge=0, le=100)] | None = None
    spec_decode_acceptance_pct: Annotated[float, Field(ge=0, le=100)] | None = None
    queue_growing: bool = Field(
        default=False, description="The waiting queue grew in a confirmation window"
    )


class ConfigAudits(StrictModel):
    """The probe audits of one configuration (tokenwatt.audits), summed for the page."""

    probes: Annotated[int, Field(ge=0)] = Field(description="Probes audited")
    conservation_failures: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Probes whose window requests are not all accounted for"
    )
    usage_mismatches: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="Confirmation-window requests: usage differs from the chunks (recorded only)",
    )
    usage_below_chunks: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Confirmation-window requests: usage below the chunks"
    )
    over_max_tokens: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Confirmation-window requests with more tokens than asked"
    )
    short_ignore_eos: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Confirmation-window ignore_eos requests that stopped short"
    )
    token_examples: list[str] = Field(default_factory=list, description="A few of them")
    littles_law_worst_pct: float | None = Field(
        default=None,
        description="Largest disagreement of the engine's count with arrival rate x time in"
        " system over the confirmation's windows, %; null = not audited",
    )
    littles_law_agrees: bool | None = Field(
        default=None, description="Every confirmation window within the tolerance"
    )


class PowerValidity(StrictModel):
    """How complete the power readings of the confirmation's windows are."""

    coverage_pct: Annotated[float, Field(ge=0, le=100)] | None = Field(
        default=None, description="Least-covered window's share with readings, %"
    )
    max_gap_s: NonNeg | None = Field(
        default=None, description="Longest stretch of a window without a reading, s"
    )
    gpus_seen: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=list, description="GPUs the readings covered (board sources)"
    )
    gpus_expected: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="GPUs in use"
    )


class ConfigResult(StrictModel):
    """One configuration's figures."""

    key: Role
    label: str
    engine: str
    mbu_pct: Percent | None = Field(
        description="Memory-bandwidth utilisation, % of rated: in (0, 100]"
    )
    node_power_kw: NonNeg | None
    goodput_tok_s: NonNeg
    ttft_p99_ms: NonNeg | None
    tpot_p99_ms: NonNeg | None
    slo_pass_count: Annotated[int, Field(ge=0)]
    repeats: Annotated[int, Field(ge=0)]
    throttle_counts: dict[str, Annotated[int, Field(ge=0)]]
    accuracy: ConfigAccuracy | None
    # Optional additions (absent in the seed).
    confirmed_rate_rps: NonNeg | None = None
    repeat_goodputs_tok_s: list[NonNeg] | None = None
    goodput_delta_pct: float | None = Field(default=None, description="vs baseline, %")
    tokens_per_joule: NonNeg | None = None
    energy_j: NonNeg | None = None
    energy_method: Literal["counter", "integral"] | None = None
    power_trace: PowerTraceSummary | None = None
    power_nodes: list[PowerNodeSummary] | None = Field(
        default=None,
        description="Where the server spans nodes: each node's figures; node_power_kw, energy_j"
        " and tokens_per_joule above are their sum",
    )
    probes: list[ProbePoint] | None = None
    probe_seconds: NonNeg | None = None
    boundary_gap_pct: NonNeg | None = Field(
        default=None,
        description="Sweep resolution: the lowest failing rate above the confirmed one, % above it",
    )
    measurement: ConfigMeasurement | None = None
    mbu_bytes_per_step: NonNeg | None = None
    mbu_batch_mean: NonNeg | None = None
    ttfat_p99_ms: NonNeg | None = Field(
        default=None,
        description="p99 time to first answer token (after reasoning), confirmation repeats"
        " pooled, ms; null = no reasoning streamed, or unbounded. Reported, not judged",
    )
    reasoning_tokens_pct: Annotated[float, Field(ge=0, le=100)] | None = Field(
        default=None,
        description="Reasoning tokens, % of the confirmation windows' output tokens; null = no"
        " reasoning streamed",
    )
    approximate_reasoning_requests: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="Confirmation-window requests whose reasoning tokens were counted from"
        " chunks (no completion_tokens_details.reasoning_tokens from the server)",
    )
    approximate_output_requests: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="Confirmation-window requests whose output tokens were counted from chunks"
        " (the server sent no usage): the goodput is then approximate (methodology page,"
        ' "Figures of a configuration")',
    )
    mbu_assumptions: list[str] | None = Field(
        default=None, description="What the MBU estimate assumes (stated on the result page)"
    )
    run_file: str | None = Field(default=None, description="The run file this config came from")
    slo_capacity_rps: NonNeg | None = Field(
        default=None,
        description="SLO capacity: the highest Poisson rate whose steady-state p99 TTFT and TPOT"
        " meet the SLO, estimated from every probe (methodology, 'SLO capacity'), req/s",
    )
    slo_capacity_ci_rps: list[NonNeg] | None = Field(
        default=None,
        description="95 % confidence interval of slo_capacity_rps, [low, high]; null when the"
        " probes do not bound it",
    )
    binding_slo: Literal["ttft", "ttfat", "tpot"] | None = Field(
        default=None, description="The bound that sets the capacity"
    )
    capacity_bracket_rps: list[NonNeg | None] | None = Field(
        default=None,
        description="[highest passing probe, lowest failing probe above it], req/s: what was"
        " measured, beside the estimate",
    )
    capacity_fits: list[CapacityFitSummary] | None = Field(
        default=None, description="The fit behind each bound's capacity"
    )
    sweep_strategy: Literal["bisect", "adaptive", "rates"] | None = Field(
        default=None, description="How the probes were placed"
    )
    engine_telemetry: ConfigTelemetry | None = Field(
        default=None, description="The engine's /metrics at the confirmed rate"
    )
    client_calibration: str | None = Field(
        default=None,
        description="The load generator's self-calibration before the run, in words (its"
        " ceiling and its errors against the calibration server); null = not calibrated",
    )
    client_ceiling_rps: NonNeg | None = Field(
        default=None,
        description="The rate above which the calibration found the load generator client-bound"
        " (the run's calibration.ceiling_rps when ceiling_found); a probe above it makes the"
        " result unpublishable; null = no ceiling found, or not calibrated",
    )
    prefix_expected_hit_rate_pct: Annotated[float, Field(ge=0, le=100)] | None = Field(
        default=None,
        description="The prefix-cache hit rate the workload's shared prefixes should give"
        " (the run's prefix_reuse); null = none shared, or not recorded",
    )
    audits: ConfigAudits | None = Field(
        default=None, description="Little's law, conservation and token accounting"
    )
    power_validity: PowerValidity | None = Field(
        default=None, description="Coverage, gaps and GPUs of the confirmation's power readings"
    )
    engine_version: str | None = Field(
        default=None, description="The engine version the server reported (GET /version)"
    )
    engine_config: EngineConfig | None = Field(
        default=None, description="The engine's configuration as the server reported it"
    )
    spec_path: str | None = Field(
        default=None, description="The spec file this config was measured with, as given"
    )
    spec_sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="SHA-256 of that spec file's bytes when it was measured",
    )
    spec: Spec | None = Field(
        default=None,
        description="This config's own spec, as it ran (the result's spec is the baseline's)",
    )

    @model_validator(mode="after")
    def _passes_within_repeats(self) -> ConfigResult:
        if self.slo_pass_count > self.repeats:
            raise ValueError(
                f"slo_pass_count ({self.slo_pass_count}) exceeds repeats ({self.repeats})"
            )
        if self.repeat_goodputs_tok_s is not None and len(self.repeat_goodputs_tok_s) > max(
            self.repeats, 1
        ):
            raise ValueError(
                f"repeat_goodputs_tok_s holds {len(self.repeat_goodputs_tok_s)} goodputs for"
                f" {self.repeats} repeats"
            )
        if self.slo_capacity_rps is not None and self.slo_capacity_ci_rps is not None:
            low, high = (list(self.slo_capacity_ci_rps) + [None, None])[:2]
            wrong = _ordered(
                [
                    ("slo_capacity_ci_rps[0]", low),
                    ("slo_capacity_rps", self.slo_capacity_rps),
                    ("slo_capacity_ci_rps[1]", high),
                ]
            )
            if wrong is not None:
                raise ValueError(f"the capacity lies outside its own interval: {wrong}")
        return self


VerdictOutcome = Literal[
    "better", "worse", "no_difference", "inconclusive", "gate_failed", "not_compared"
]


class Verdict(StrictModel):
    """The comparison's conclusion, written by the code from the numbers."""

    outcome: VerdictOutcome
    change_pct: float | None = Field(
        default=None,
        description="tuned vs baseline: SLO capacity when basis is slo_capacity, else SLO"
        " goodput, %",
    )
    band_pct: NonNeg | None = None
    text: str
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    ci_method: str | None = None
    p_value: Annotated[float, Field(ge=0, le=1)] | None = None
    test: str | None = None
    basis: Literal["slo_capacity", "goodput"] | None = Field(
        default=None, description="What the verdict compares (absent: goodput, the seed's)"
    )
    mde_pct: NonNeg | None = Field(
        default=None,
        description="Minimum detectable effect: the smallest true change this comparison would"
        " call better or worse 80 % of the time, %",
    )
    drift_pct: float | None = Field(
        default=None,
        description="Baseline repeat (role other) vs baseline SLO capacity, %: the interval is"
        " widened by it",
    )
    candidate: str | None = Field(
        default=None, description="N-way report: the label of the candidate this verdict judges"
    )
    confidence_pct: Annotated[float, Field(gt=0, lt=100)] | None = Field(
        default=None,
        description="N-way report: level of the interval, %, as the multiple-comparison"
        " correction sets it (absent: 95)",
    )
    p_value_adjusted: Annotated[float, Field(ge=0, le=1)] | None = Field(
        default=None, description="N-way report: p_value adjusted by the correction"
    )


class MultipleComparison(StrictModel):
    """How an N-way report holds the family-wise error rate over its candidates."""

    method: Literal["holm", "bonferroni"] = Field(description="The correction applied")
    family_alpha: Annotated[float, Field(gt=0, lt=1)] = Field(
        description="Family-wise error rate held: the chance of any false better/worse call"
    )
    candidates: Annotated[int, Field(ge=2)] = Field(description="Candidates compared (m)")


class ResultFile(StrictModel):
    """A whole result file (results/<id>.json)."""

    id: str = Field(pattern=RESULT_ID_PATTERN, max_length=RESULT_ID_MAX_CHARS)
    status: Literal["draft", "published"]
    title: str = Field(min_length=1)
    published: dt.date | None = Field(description="Date of the measurement (YYYY-MM-DD)")
    summary: str
    hardware: ResultHardware
    software: ResultSoftware
    model: ResultModel
    slo: ResultSlo
    workload: ResultWorkload
    power: ResultPower
    accuracy: ResultAccuracy | None
    runs: Annotated[int, Field(ge=0)] = Field(description="Confirmation repeats per config")
    variance_band_pct: NonNeg | None
    fleet: Fleet | None
    configs: list[ConfigResult] = Field(min_length=1)
    not_covered: list[str]
    reproduce: str
    spec: Spec
    # Optional additions (absent in the seed).
    schema_version: Literal[1] | None = None
    simulated: bool | None = Field(default=None, description="Made against the simulator")
    verdict: Verdict | None = None
    mismatches: list[str] | None = Field(
        default=None, description="Differences accepted with --allow-mismatch"
    )
    tokenwatt_version: str | None = None
    created_utc: dt.datetime | None = None
    verdicts: list[Verdict] | None = Field(
        default=None,
        description="N-way report: one verdict per candidate (role tuned), in config order;"
        " verdict is then absent",
    )
    correction: MultipleComparison | None = Field(
        default=None, description="N-way report: the multiple-comparison correction"
    )

    @model_validator(mode="after")
    def _one_baseline(self) -> ResultFile:
        baselines = [c for c in self.configs if c.key == "baseline"]
        if len(baselines) > 1:
            raise ValueError("more than one config has key 'baseline'")
        return self

    @model_validator(mode="after")
    def _one_verdict_per_candidate(self) -> ResultFile:
        if self.verdicts is None and self.correction is None:
            return self
        if self.verdicts is None or self.correction is None:
            raise ValueError("verdicts and correction go together (an N-way report)")
        candidates = [c.label for c in self.configs if c.key == "tuned"]
        judged = [v.candidate for v in self.verdicts]
        if judged != candidates or self.correction.candidates != len(candidates):
            raise ValueError(
                f"verdicts judge {judged}, but the candidates (key tuned) are {candidates}"
            )
        if self.verdict is not None:
            raise ValueError("an N-way report has verdicts, not one verdict")
        return self

    @model_validator(mode="after")
    def _possible(self) -> ResultFile:
        problems = impossible_in_result(self) + self._verdicts_against_slo()
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _verdicts_against_slo(self) -> list[str]:
        """Probes marked as passing whose own p99 breaks the SLO (or is unbounded)."""
        problems: list[str] = []
        bounds = (
            (f"{self.slo.first_token}_p99_ms", self.slo.first_token_p99_ms),
            ("tpot_p99_ms", self.slo.tpot_p99_ms),
        )
        for i, config in enumerate(self.configs):
            for j, probe in enumerate(config.probes or []):
                if not probe.slo_pass:
                    continue
                for name, bound in bounds:
                    value = getattr(probe, name)
                    if value is None or value > bound:
                        shown = "unbounded" if value is None else f"{value:g} ms"
                        problems.append(
                            f"configs[{i}].probes[{j}].slo_pass: true, but its {name} is"
                            f" {shown}, over the SLO's {bound:g} ms"
                        )
        return problems
