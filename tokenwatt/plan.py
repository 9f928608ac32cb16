"""``tokenwatt plan``: a spec's sweep in virtual time, before any GPU is rented.

The spec's sweep (its strategy, durations, budget) runs against the embedded engine in virtual
time (:mod:`tokenwatt.sim.virtual`: the same probe protocol, the same engine, the same record and
capacity code as a measurement), once per *trial*, each trial with its own workload seed. What
comes out is what a rental would buy: the SLO capacity and its interval, the probes and their
probe-seconds (GPU time), and the *minimum detectable effect* of comparing two configurations
measured this way. With the engine's ground truth (:func:`true_capacity`) it also says how far
the estimates fall from the truth and how often their intervals hold it: the same code measures
the estimator for ``benchmarks/README.md``.

**Ground truth** (methodology, "SLO capacity"): the steady-state capacity, found by bisection
on the rate, each rate judged by the p99 TTFT and TPOT of the requests of ``seeds`` windows
taken together (one ``window_s`` window after ``warmup_s`` per workload seed; defaults: 1,200 s
windows, 5 seeds, bisected to 0.2 %): the limit of long windows, as the estimator's fit reads
it. (Until version 3 each rate was judged by the median of the seeds' own p99s: a typical
window, which on a scenario whose tail is rare, large queue episodes sees none and reads the
capacity high, 9.29 against the long run's 8.70 req/s on ``specs/sim-seed-full.spec.yaml``.)
Five seeds know it to about ±2 % on the demo and ±6 % on the seed's full spec, where a queue
episode is rare and large (95 % of five-seed draws from sixty, benchmarks/README.md);
``tokenwatt plan --truth-seeds N`` pools more, and the benchmarks measure against brute-force
crossings of many (``benchmarks/capacity_curve.py``). It costs minutes of CPU, so it is cached
(under ``~/.cache/tokenwatt/truth`` or ``$TOKENWATT_CACHE``) keyed by what decides it: the
engine, model, workload, SLO and those settings.

**Minimum detectable effect.** Trials are paired (trial 2i against trial 2i + 1: the same
configuration, other seeds) and compared with the verdict's own joint fit
(:func:`tokenwatt.capacity.relative_capacity`). Each pair's MDE is
(t(0.975) + t(0.80)) x the standard error of the log ratio; the summary gives the median, and
how often a configuration was called better or worse than itself (should be 5 % or less).
Other seeds share no stream, so this is the unpaired MDE: a comparison of two configurations
with the same workload seed is paired (common random numbers) and resolves smaller changes
(``benchmarks/README.md`` measures both). The *paired* MDE is what such a comparison of this
spec would resolve: each trial is compared with a trial of a candidate whose kernels reach
:data:`PAIRED_CANDIDATE_BANDWIDTH` times the memory bandwidth (the same seed, so the same
streams; in the adaptive sweep's stream pairs, each stream's effect held fixed), and the median
of their MDEs is reported. Its true change is not the point, only how precisely the pair pins
it down; it doubles the plan's CPU time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import Field

from tokenwatt import bounded, store
from tokenwatt.capacity import (
    CapacityEstimate,
    RelativeCapacity,
    estimate_capacity,
    exceedance,
    pct_of_log_ratio,
    relative_capacity,
)
from tokenwatt.errors import InputError
from tokenwatt.figures import search_phases
from tokenwatt.load.workload import build_workload
from tokenwatt.metrics import exceeding_to_fail
from tokenwatt.schema.base import StrictModel
from tokenwatt.schema.result import Verdict
from tokenwatt.schema.run import ProbeRecord
from tokenwatt.schema.spec import LoadedSpec, SloSpec, Spec, SweepStrategy
from tokenwatt.sim.engine import EngineConfig
from tokenwatt.sim.launch import settings_from_spec
from tokenwatt.sim.virtual import VirtualServer
from tokenwatt.sweep import ProbePlan, SweepResult, make_strategy, ramped

__all__ = [
    "PAIRED_CANDIDATE_BANDWIDTH",
    "TRUTH_SEEDS",
    "TRUTH_SEED_BASE",
    "PlanSummary",
    "PlanTrial",
    "TruthResult",
    "TruthWindow",
    "engine_config",
    "plan",
    "pooled_p99_within",
    "run_trial",
    "trial_verdict",
    "true_capacity",
    "truth_window",
    "with_seed",
    "with_spec",
]

logger = logging.getLogger(__name__)

PAIRED_CANDIDATE_BANDWIDTH = 1.05
"""The paired MDE's candidate: this factor on the simulated kernels' bandwidth efficiency."""
TRUTH_WINDOW_S = 1200.0
TRUTH_WARMUP_S = 60.0
TRUTH_SEEDS = 5
TRUTH_TOLERANCE = 0.002
TRUTH_SEED_BASE = 7000
"""The truth's workload seeds are TRUTH_SEED_BASE, TRUTH_SEED_BASE + 1, ...: none a trial uses."""
_TRUTH_VERSION = 3  # 2: the simulated engine has a prefix cache; 3: the seeds' requests pooled


def engine_config(loaded: LoadedSpec) -> EngineConfig:
    """The simulated engine a spec describes (``engine.sim``, its model and parallelism).

    Raises:
        InputError: the spec names no simulated engine (``engine.endpoint: sim`` or an
            ``engine.sim`` section), or one that cannot hold the model.
    """
    spec = loaded.spec
    if spec.engine.endpoint != "sim" and spec.engine.sim is None:
        raise InputError(
            f"{loaded.path}: engine.sim is not set: tokenwatt plan needs to know which GPU and"
            " engine settings to simulate (add an engine.sim section, e.g. gpu: h100-sxm)"
        )
    return settings_from_spec(loaded).build()


def with_spec(loaded: LoadedSpec, spec: Spec) -> LoadedSpec:
    """The loaded spec with its spec replaced (its files stay as they were resolved)."""
    return loaded.model_copy(update={"spec": spec})


def with_sweep(loaded: LoadedSpec, **fields: object) -> LoadedSpec:
    """The loaded spec with these fields of its sweep section replaced (none: unchanged)."""
    if not fields:
        return loaded
    spec = loaded.spec
    return with_spec(
        loaded, spec.model_copy(update={"sweep": spec.sweep.model_copy(update=fields)})
    )


def with_seed(loaded: LoadedSpec, seed: int) -> LoadedSpec:
    """The loaded spec with another workload seed."""
    spec = loaded.spec
    return with_spec(
        loaded,
        spec.model_copy(update={"workload": spec.workload.model_copy(update={"seed": seed})}),
    )


def _server(loaded: LoadedSpec, config: EngineConfig, request_timeout_s: float) -> VirtualServer:
    spec = loaded.spec
    workload = build_workload(
        spec,
        trace_file=loaded.trace_file,
        prompts_file=loaded.prompts_file,
        context_tokens=config.max_model_len,
    )
    return VirtualServer(
        config, workload, request_timeout_s=request_timeout_s, ignore_eos=spec.engine.ignore_eos
    )


@dataclass(frozen=True)
class PlanTrial:
    """One virtual run of the spec's sweep."""

    seed: int
    probes: list[ProbeRecord]
    probe_seconds: list[float]
    result: SweepResult
    estimate: CapacityEstimate

    @property
    def total_seconds(self) -> float:
        """Probe-seconds of the whole sweep."""
        return math.fsum(self.probe_seconds)

    @property
    def search_seconds(self) -> float:
        """Probe-seconds spent searching (not confirming)."""
        return math.fsum(
            s
            for s, p in zip(self.probe_seconds, self.probes, strict=True)
            if p.phase in search_phases
        )


def run_trial(
    loaded: LoadedSpec, config: EngineConfig, *, seed: int, quick: bool = False
) -> PlanTrial:
    """Run the spec's sweep once in virtual time, with workload seed ``seed``."""
    from tokenwatt.measure import effective_settings  # measure imports the load generator

    seeded = with_seed(loaded, seed)
    spec = seeded.spec
    measurement, sweep, _ = effective_settings(spec, quick=quick)
    server = _server(seeded, config, float(measurement.request_timeout_s))
    strategy = make_strategy(sweep, measurement, spec.slo, workload=spec.workload)
    probes: list[ProbeRecord] = []
    seconds: list[float] = []
    while (p := strategy.next()) is not None:
        p = ramped(p, probes[-1] if probes else None, sweep, spec.slo)
        probe = server.probe(p, index=len(probes), slo=spec.slo)
        probes.append(probe.record)
        seconds.append(probe.seconds)
        strategy.observe(probe.record, probe.seconds)
    return PlanTrial(
        seed=seed,
        probes=probes,
        probe_seconds=seconds,
        result=strategy.result,
        estimate=estimate_capacity(probes, spec.slo),
    )


# ---------------------------------------------------------------------------------------------
# Ground truth


class TruthStep(StrictModel):
    """One rate of the truth's bisection."""

    rate_rps: float
    ttft_over_pct: float = Field(
        description="Share of all the seeds' window requests over the first-token bound (TTFT,"
        " or TTFAT where the SLO bounds it), failed ones included, %: what the verdict reads"
    )
    tpot_over_pct: float = Field(description="The same over the TPOT bound, %")
    ttft_p99_ms: float = Field(
        description="Median over the seeds of one window's p99 first-token time (shown beside"
        " the verdict: the definition before version 3, which read queue-bound scenarios high)"
    )
    tpot_p99_ms: float
    passed: bool = Field(
        description="The p99 of all the seeds' window requests together meets both bounds"
    )


class TruthResult(StrictModel):
    """The engine's steady-state SLO capacity (see the module docstring)."""

    true_capacity_rps: float
    window_s: float
    warmup_s: float
    seeds: int
    tolerance: float
    steps: list[TruthStep]
    key: str


def _truth_key(
    spec: Spec,
    config: EngineConfig,
    window_s: float,
    warmup_s: float,
    seeds: int,
    first_seed: int = TRUTH_SEED_BASE,
) -> str:
    decided_by = {
        "version": _TRUTH_VERSION,
        "engine": config.describe(),
        "geometry": config.geometry.describe(),
        "sim": spec.engine.sim.model_dump(mode="json") if spec.engine.sim else None,
        "ignore_eos": spec.engine.ignore_eos,
        "workload": spec.workload.model_dump(mode="json", exclude={"seed"}),
        "slo": spec.slo.model_dump(mode="json"),
        "timeout": spec.measurement.request_timeout_s,
        "window": window_s,
        "warmup": warmup_s,
        "seeds": seeds,
    }
    if first_seed != TRUTH_SEED_BASE:  # other seeds (the truth's own keep their old keys)
        decided_by["first_seed"] = first_seed
    return hashlib.sha256(json.dumps(decided_by, sort_keys=True).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class TruthWindow:
    """One truth window's figures (one workload seed at one rate)."""

    first_token: tuple[int, int]
    """(requests counted, requests over the first-token bound), as the estimator counts them
    (:func:`tokenwatt.capacity.exceedance`)."""
    tpot: tuple[int, int]
    """The same for the TPOT bound."""
    first_token_p99_ms: float
    """This window's own p99 (+inf: no value, e.g. every request failed)."""
    tpot_p99_ms: float


def truth_window(
    loaded: LoadedSpec,
    config: EngineConfig,
    *,
    rate_rps: float,
    seed: int,
    window_s: float = TRUTH_WINDOW_S,
    warmup_s: float = TRUTH_WARMUP_S,
) -> TruthWindow:
    """One truth window with workload seed ``seed``: what :func:`true_capacity` pools."""
    spec = loaded.spec
    server = _server(with_seed(loaded, seed), config, float(spec.measurement.request_timeout_s))
    record = server.probe(
        ProbePlan(phase="search", rate_rps=rate_rps, warmup_s=warmup_s, window_s=window_s),
        index=0,
        slo=spec.slo,
    ).record
    first = record.first_token_ms(spec.slo.first_token).p99
    tpot = record.tpot_ms.p99
    assert record.requests is not None  # a virtual probe keeps its request table
    return TruthWindow(
        first_token=exceedance(
            record.requests, spec.slo.first_token_column, spec.slo.first_token_p99_ms
        ),
        tpot=exceedance(record.requests, "tpot_ms", spec.slo.tpot_p99_ms),
        first_token_p99_ms=math.inf if first is None else first,
        tpot_p99_ms=math.inf if tpot is None else tpot,
    )


def pooled_p99_within(counts: Sequence[tuple[int, int]]) -> bool:
    """Whether the p99 of several windows' requests taken together is within a bound (pure).

    ``counts``: each window's (requests counted, requests over the bound). The truth's verdict
    on a rate: the long run's p99, not a typical window's, so that a rare, large queue episode
    counts for the requests it holds (median p99s of five windows read the seed's full spec
    5.6 % high, benchmarks/README.md).
    """
    n = sum(c[0] for c in counts)
    k = sum(c[1] for c in counts)
    return n > 0 and k < exceeding_to_fail(n)


def _over_pct(counts: Sequence[tuple[int, int]]) -> float:
    n = sum(c[0] for c in counts)
    return 100.0 * sum(c[1] for c in counts) / n if n else 100.0


def true_capacity(
    loaded: LoadedSpec,
    config: EngineConfig,
    *,
    bracket_rps: tuple[float, float],
    window_s: float = TRUTH_WINDOW_S,
    warmup_s: float = TRUTH_WARMUP_S,
    seeds: int = TRUTH_SEEDS,
    first_seed: int = TRUTH_SEED_BASE,
    tolerance: float = TRUTH_TOLERANCE,
    cache: bool = True,
    progress: Callable[[TruthStep], None] | None = None,
) -> TruthResult:
    """The engine's steady-state SLO capacity by bisection (see the module docstring).

    ``bracket_rps`` is where to start; it is widened until its low end passes and its high end
    fails. ``first_seed``: the workload seeds are ``first_seed`` to ``first_seed + seeds - 1``
    (the truth's own from :data:`TRUTH_SEED_BASE`; one other seed at a time tells how far apart
    the seeds' own boundaries lie).
    """
    spec = loaded.spec
    key = _truth_key(spec, config, window_s, warmup_s, seeds, first_seed)
    path = store.cache_dir() / "truth" / f"{key}.json"
    if cache and path.is_file():
        try:
            return TruthResult.model_validate_json(bounded.read_text(path))
        except (ValueError, InputError):
            logger.warning("ignoring an unreadable truth cache file %s", path)
    steps: list[TruthStep] = []

    def judge(rate: float) -> bool:
        windows = [
            truth_window(
                loaded,
                config,
                rate_rps=rate,
                seed=first_seed + s,
                window_s=window_s,
                warmup_s=warmup_s,
            )
            for s in range(seeds)
        ]
        first = [w.first_token for w in windows]
        per_token = [w.tpot for w in windows]
        step = TruthStep(
            rate_rps=rate,
            ttft_over_pct=_over_pct(first),
            tpot_over_pct=_over_pct(per_token),
            ttft_p99_ms=statistics.median(w.first_token_p99_ms for w in windows),
            tpot_p99_ms=statistics.median(w.tpot_p99_ms for w in windows),
            passed=pooled_p99_within(first) and pooled_p99_within(per_token),
        )
        steps.append(step)
        logger.info(
            "truth: %.4f req/s: %.3f %% of requests over the first-token bound, %.3f %% over"
            " TPOT's: %s",
            rate,
            step.ttft_over_pct,
            step.tpot_over_pct,
            "pass" if step.passed else "fail",
        )
        if progress is not None:
            progress(step)
        return step.passed

    lo, hi = bracket_rps
    lowered = False
    while not judge(lo):
        hi, lo = lo, lo / 1.25
        lowered = True
    while not lowered and judge(hi):  # once lowered, hi is a rate just judged failing
        lo, hi = hi, hi * 1.25
    while hi / lo - 1.0 > tolerance:
        mid = math.sqrt(lo * hi)
        if judge(mid):
            lo = mid
        else:
            hi = mid
    result = TruthResult(
        true_capacity_rps=math.sqrt(lo * hi),
        window_s=window_s,
        warmup_s=warmup_s,
        seeds=seeds,
        tolerance=tolerance,
        steps=steps,
        key=key,
    )
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(result.model_dump_json(indent=1), encoding="utf-8")
        tmp.replace(path)
    return result


# ---------------------------------------------------------------------------------------------
# The summary


class PlanSummary(StrictModel):
    """What ``tokenwatt plan --json`` prints: medians over the trials, and each trial."""

    spec: str
    strategy: SweepStrategy | str
    trials: int
    quick: bool
    true_capacity_rps: float | None = Field(description="The engine's steady-state capacity")
    truth_seeds: int | None = Field(
        default=None,
        description="Workload seeds (1,200 s windows each) the truth pooled; null = no truth",
    )
    capacity_rps: float | None = Field(description="Median estimate")
    capacity_ci_rps: list[float] | None = Field(
        description="Median [low, high] of the trials' 95 % intervals (bounded ones)"
    )
    unbounded_intervals: int = Field(description="Trials whose interval was unbounded")
    probe_seconds: float = Field(description="Median probe-seconds (GPU time) of a sweep")
    search_probe_seconds: float
    probes: float = Field(description="Median probes per sweep")
    mde_pct: float | None = Field(
        description="Median minimum detectable effect of a comparison of two such runs with"
        " other workload seeds (unpaired), %"
    )
    paired_mde_pct: float | None = Field(
        default=None,
        description="Median minimum detectable effect of a comparison of two such runs with the"
        " same workload seed (paired: common random numbers), %; against a candidate with"
        " 5 % more memory bandwidth efficiency",
    )
    self_called_different: int | None = Field(
        default=None, description="Pairs of trials of this one config called better or worse"
    )
    pairs: int = 0
    median_abs_error_pct: float | None = Field(
        default=None, description="Median |estimate - truth| / truth, %"
    )
    coverage: float | None = Field(
        default=None, description="Share of trials whose interval holds the truth"
    )
    shortfall_pct: float | None = Field(
        default=None,
        description="Median over the trials of the largest steady-state shortfall of a probe"
        " when its window opened, % (tokenwatt.audits)",
    )
    steady_warmup_s: float | None = Field(
        default=None,
        description="Median over the trials of the warm-up their probes needed to open within"
        " 1 % of steady state, s",
    )
    per_trial: list[dict[str, float | int | str | None]] = Field(default_factory=list)


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _steady(trial: PlanTrial) -> tuple[float, float] | None:
    """(largest |shortfall| %, largest warm-up needed s) over a trial's server-bound probes."""
    found = [
        p.audits.steady_state
        for p in trial.probes
        if not p.client_bound and p.audits is not None and p.audits.steady_state is not None
    ]
    if not found:
        return None
    return max(abs(a.shortfall_pct) for a in found), max(a.steady_warmup_s for a in found)


def trial_verdict(a: PlanTrial, b: PlanTrial, slo: SloSpec, *, paired: bool) -> Verdict:
    """The verdict on trial ``b`` (the candidate) against trial ``a`` (the baseline).

    As ``tokenwatt report`` would give it for two runs with these probes (no accuracy gate).
    """
    from tokenwatt.compare import CapacityFigures, verdict_from_probes

    figures = [
        (
            CapacityFigures(
                key=key,
                label=key,
                capacity_rps=trial.estimate.capacity_rps,
                binding_slo=trial.estimate.binding_slo,
            ),
            trial.probes,
        )
        for key, trial in (("baseline", a), ("tuned", b))
    ]
    return verdict_from_probes(figures, slo, max_drop_pts=None, paired=paired)


def _relative(a: PlanTrial, b: PlanTrial, spec: Spec, *, paired: bool) -> RelativeCapacity | None:
    return relative_capacity(
        [a.probes, b.probes],
        spec.slo,
        binding=a.estimate.binding_slo or "tpot",
        centres_rps=[a.estimate.capacity_rps, b.estimate.capacity_rps],
        paired=paired,
    )


def _mde_pct(rel: RelativeCapacity) -> float | None:
    """(t(0.975) + t(0.80)) x the standard error of the log ratio, as a change in percent."""
    from scipy import stats as scipy_stats  # slow to import: on first use

    se = rel.log_se[1]
    if se is None:
        return None
    z = float(scipy_stats.t.ppf(0.975, rel.dof) + scipy_stats.t.ppf(0.80, rel.dof))
    return pct_of_log_ratio(z * se)


def plan(
    loaded: LoadedSpec,
    *,
    trials: int,
    strategy: SweepStrategy | None = None,
    quick: bool = False,
    truth: bool = True,
    truth_seeds: int = TRUTH_SEEDS,
    progress: Callable[[PlanTrial], None] | None = None,
    truth_progress: Callable[[TruthStep], None] | None = None,
) -> PlanSummary:
    """Run ``trials`` virtual sweeps of a spec and summarise them (see the module docstring)."""
    if trials < 1:
        raise InputError("--trials must be at least 1")
    if truth_seeds < 1:
        raise InputError("--truth-seeds must be at least 1")
    if strategy is not None:
        loaded = with_sweep(loaded, strategy=strategy)
    spec = loaded.spec
    config = engine_config(loaded)
    runs: list[PlanTrial] = []
    for t in range(trials):
        trial = run_trial(loaded, config, seed=spec.workload.seed + t, quick=quick)
        runs.append(trial)
        if progress is not None:
            progress(trial)
    estimates = [r.estimate.capacity_rps for r in runs if r.estimate.capacity_rps is not None]
    bounded = [r.estimate.ci_rps for r in runs if r.estimate.ci_rps is not None]
    truth_rps: float | None = None
    if truth and estimates:
        centre = statistics.median(estimates)
        truth_rps = true_capacity(
            loaded,
            config,
            bracket_rps=(centre * 0.9, centre * 1.1),
            seeds=truth_seeds,
            progress=truth_progress,
        ).true_capacity_rps
    mdes: list[float] = []
    different = 0
    pairs = 0
    for a, b in zip(runs[0::2], runs[1::2], strict=False):
        rel = _relative(a, b, spec, paired=False)
        pairs += 1
        if rel is None:
            continue
        if (mde := _mde_pct(rel)) is not None:
            mdes.append(mde)
        ci = rel.ci[1]
        if ci is not None and (ci[0] > 0 or ci[1] < 0):
            different += 1
    candidate = dataclasses.replace(
        config,
        bandwidth_efficiency=min(1.0, config.bandwidth_efficiency * PAIRED_CANDIDATE_BANDWIDTH),
    )
    paired_mdes: list[float] = []
    for a in runs:
        b = run_trial(loaded, candidate, seed=a.seed, quick=quick)
        rel = _relative(a, b, spec, paired=True)
        if rel is not None and (mde := _mde_pct(rel)) is not None:
            paired_mdes.append(mde)
    errors: list[float] = []
    covered = 0
    if truth_rps is not None:
        for r in runs:
            est = r.estimate
            if est.capacity_rps is not None:
                errors.append(abs(est.capacity_rps - truth_rps) / truth_rps * 100.0)
            if est.ci_rps is None or est.ci_rps[0] <= truth_rps <= est.ci_rps[1]:
                covered += 1
    lows = [ci[0] for ci in bounded]
    highs = [ci[1] for ci in bounded]
    steady = [s for r in runs if (s := _steady(r)) is not None]
    return PlanSummary(
        spec=str(loaded.path),
        strategy="rates" if spec.sweep.rates is not None else spec.sweep.strategy,
        trials=trials,
        quick=quick,
        true_capacity_rps=truth_rps,
        truth_seeds=truth_seeds if truth_rps is not None else None,
        capacity_rps=_median(estimates),
        capacity_ci_rps=[statistics.median(lows), statistics.median(highs)] if bounded else None,
        unbounded_intervals=sum(1 for r in runs if r.estimate.ci_rps is None),
        probe_seconds=statistics.median(r.total_seconds for r in runs),
        search_probe_seconds=statistics.median(r.search_seconds for r in runs),
        probes=statistics.median(len(r.probes) for r in runs),
        mde_pct=_median(mdes),
        paired_mde_pct=_median(paired_mdes),
        self_called_different=different if pairs else None,
        pairs=pairs,
        median_abs_error_pct=_median(errors),
        coverage=covered / len(runs) if truth_rps is not None else None,
        shortfall_pct=_median([s[0] for s in steady]),
        steady_warmup_s=_median([s[1] for s in steady]),
        per_trial=[
            {
                "seed": r.seed,
                "capacity_rps": r.estimate.capacity_rps,
                "ci_low_rps": r.estimate.ci_rps[0] if r.estimate.ci_rps else None,
                "ci_high_rps": r.estimate.ci_rps[1] if r.estimate.ci_rps else None,
                "binding_slo": r.estimate.binding_slo,
                "confirmed_rate_rps": r.result.confirmed_rate_rps,
                "probes": len(r.probes),
                "probe_seconds": r.total_seconds,
            }
            for r in runs
        ],
    )
