"""The result: one comparison of configurations, as ``tokenwatt report`` writes it.

The schema is the published seed's, exactly: loading the seed and dumping it (``exclude_unset``)
gives the same JSON values. Everything after the seed's fields is an optional addition.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from pydantic import Field, model_validator

from tokenwatt.schema.base import Num, PowerSourceName, Role, StrictModel
from tokenwatt.schema.spec import Spec

__all__ = [
    "RESULT_ID_MAX_CHARS",
    "RESULT_ID_PATTERN",
    "CapacityFitSummary",
    "ConfigAccuracy",
    "ConfigMeasurement",
    "ConfigResult",
    "Fleet",
    "PowerTracePoint",
    "PowerTraceSummary",
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


class ResultHardware(StrictModel):
    """The box the runs were made on."""

    vendor: str = Field(description="Accelerator vendor")
    accelerator: str = Field(description="Accelerator name as the driver reports it")
    count: Annotated[int, Field(ge=0)] = Field(description="Accelerators in use")
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
    """The latency objective."""

    ttft_p99_ms: Annotated[float, Field(gt=0)]
    tpot_p99_ms: Annotated[float, Field(gt=0)]


class ResultWorkload(StrictModel):
    """The workload, in words for the page."""

    trace: str
    input_tokens: str
    output_tokens: str
    arrival: str


class ResultPower(StrictModel):
    """How power was measured."""

    source: str = Field(description="In words, e.g. 'GPU board power sum (NVIDIA)'")
    kind: PowerSourceName
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
    ttft_over_pct: Annotated[float, Field(ge=0, le=100)] | None = Field(
        default=None,
        description="Window requests over the TTFT bound (failed ones included), % of those"
        " counted",
    )
    tpot_over_pct: Annotated[float, Field(ge=0, le=100)] | None = Field(
        default=None, description="Window requests over the TPOT bound, % of those counted"
    )


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


class CapacityFitSummary(StrictModel):
    """The fit behind one bound's capacity (methodology, "SLO capacity"), for the page's chart.

    logit(fraction of requests over the bound) = intercept + slope x ln(rate).
    """

    slo: Literal["ttft", "tpot"]
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
    dof: Annotated[int, Field(ge=1)] | None = None
    probes_used: Annotated[int, Field(ge=0)] = 0
    lower_bound_rps: NonNeg | None = None
    upper_bound_rps: NonNeg | None = None


class ConfigResult(StrictModel):
    """One configuration's figures."""

    key: Role
    label: str
    engine: str
    mbu_pct: NonNeg | None
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
    probes: list[ProbePoint] | None = None
    probe_seconds: NonNeg | None = None
    boundary_gap_pct: NonNeg | None = Field(
        default=None,
        description="Sweep resolution: the lowest failing rate above the confirmed one, % above it",
    )
    measurement: ConfigMeasurement | None = None
    mbu_bytes_per_step: NonNeg | None = None
    mbu_batch_mean: NonNeg | None = None
    approximate_output_requests: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="Confirmation-window requests whose output tokens were counted from chunks"
        " (the server sent no usage): the goodput is then approximate (DESIGN.md)",
    )
    mbu_assumptions: list[str] | None = Field(
        default=None, description="What the MBU estimate assumes (DESIGN.md: stated on the page)"
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
    binding_slo: Literal["ttft", "tpot"] | None = Field(
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

    @model_validator(mode="after")
    def _passes_within_repeats(self) -> ConfigResult:
        if self.slo_pass_count > self.repeats:
            raise ValueError(
                f"slo_pass_count ({self.slo_pass_count}) exceeds repeats ({self.repeats})"
            )
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

    @model_validator(mode="after")
    def _one_baseline(self) -> ResultFile:
        baselines = [c for c in self.configs if c.key == "baseline"]
        if len(baselines) > 1:
            raise ValueError("more than one config has key 'baseline'")
        return self
