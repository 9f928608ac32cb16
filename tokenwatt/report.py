"""Turning run files into one result: figures recomputed from the evidence, verdict by the code.

Every figure of a config is recomputed from its run file's probes: SLO goodput is the mean of
the accepted confirmation repeats' goodputs (each checked against its own output tokens ÷
window); p99 TTFT and TPOT pool the window requests of those repeats (nearest-rank, failures as
+inf); power, energy and MBU come from the run's evidence blocks. Nothing is copied from a
summary the run file merely asserts.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from tokenwatt import audits, capacity, compare, mbu, policy
from tokenwatt.comparability import run_differences
from tokenwatt.errors import ResultError
from tokenwatt.figures import ConfigFigures, figures_of
from tokenwatt.gpus import preset_for_device_name
from tokenwatt.load.calibrate import calibration_text
from tokenwatt.load.prefix import DEFAULT_CACHE_BLOCK_TOKENS, expected_hit_rate
from tokenwatt.load.workload import CHAT_MIX_V1, mean_tokens
from tokenwatt.metrics import TableColumn
from tokenwatt.multiplicity import Correction
from tokenwatt.schema.result import (
    CapacityFitSummary,
    ConfigAccuracy,
    ConfigMeasurement,
    ConfigResult,
    Fleet,
    MultipleComparison,
    PowerNodeSummary,
    ProbePoint,
    ResultAccuracy,
    ResultFile,
    ResultHardware,
    ResultModel,
    ResultPower,
    ResultSlo,
    ResultSoftware,
    ResultWorkload,
    Verdict,
)
from tokenwatt.schema.run import ProbeRecord, RunFile
from tokenwatt.schema.spec import (
    ExponentialSeconds,
    FixedTokens,
    LognormalTokens,
    SloSpec,
    Spec,
    TokenCount,
    UniformSeconds,
    UniformTokens,
)
from tokenwatt.store import filled

__all__ = [
    "CHAT_MIX_V1_TEXT",
    "QUICK_NOTE",
    "LoadedRun",
    "build_result",
    "comparability",
    "quote_arg",
    "report_command",
    "share_streams",
    "slugify",
    "steady_state_note",
]

logger = logging.getLogger(__name__)

QUICK_NOTE = "Quick mode: short windows, few repeats \u2014 validation only, not for publishing"
"""The caveat a quick-mode result carries (the seed's own words)."""

CHAT_MIX_V1_TEXT = {
    "input_tokens": "median 1,024 \u00b7 p90 4,096",
    "output_tokens": "median 256 \u00b7 p90 1,024",
}
"""How the built-in chat-mix-v1 workload's lengths read on a page."""

_ROLE_ORDER = {"baseline": 0, "tuned": 1, "other": 2}
_TRACE_POINTS_MAX = 300
_GOODPUT_TOLERANCE = 1e-6


@dataclass(frozen=True)
class LoadedRun:
    """A run file and the path it was given as."""

    path: str
    run: RunFile


def slugify(text: str, *, max_length: int = 80) -> str:
    """A result id from a title: lower case, runs of other characters become one dash."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:max_length].rstrip("-") or "result"


def quote_arg(value: str) -> str:
    """Single-quote a free-text argument for a shell, always (the seed's reproduce style)."""
    return "'" + value.replace("'", "'\"'\"'") + "'"


# ---------------------------------------------------------------------------------------------
# Comparability


def comparability(runs: Sequence[LoadedRun]) -> list[str]:
    """Every way the runs differ in hardware, model, SLO, workload or durations.

    The first run is the reference; each difference names the runs and both values
    (:mod:`tokenwatt.comparability` defines each aspect).
    """
    return [d.text for d in run_differences([(r.path, r.run) for r in runs])]


# ---------------------------------------------------------------------------------------------
# Per-config figures


def _round(value: float | None, digits: int) -> float | None:
    """Figures are written to the precision a page shows; the run file keeps them all."""
    return None if value is None else round(value, digits)


def _mbu_pct(run: RunFile) -> float | None:
    """The MBU a result states, or None.

    To 0.1 %, or to two significant digits under 0.05 % (a small model at a light load on a wide
    memory bus), so it never rounds to 0; None without an estimate or when the estimate is
    impossible (:func:`tokenwatt.mbu.impossible_because`).
    """
    if run.mbu is None or mbu.impossible_because(run.mbu) is not None:
        return None
    stated = round(run.mbu.mbu_pct, 1)
    return stated if stated > 0 else float(f"{run.mbu.mbu_pct:.2g}")


def _power_nodes(nodes: list[PowerNodeSummary] | None) -> dict[str, list[PowerNodeSummary]]:
    """A config's ``power_nodes``, to the precision of its own figures; {} for one source."""
    if nodes is None:
        return {}
    rounded = [
        n.model_copy(
            update={
                "node_power_kw": _round(n.node_power_kw, 3),
                "energy_j": _round(n.energy_j, 1),
                "max_gap_fraction": _round(n.max_gap_fraction, 4),
            }
        )
        for n in nodes
    ]
    return {"power_nodes": rounded}


def _result_slo(slo: SloSpec) -> ResultSlo:
    """The result's SLO: the first-token bound the spec judged (TTFT or TTFAT) and TPOT."""
    return ResultSlo(
        ttft_p99_ms=slo.ttft_p99_ms if slo.first_token == "ttft" else None,
        ttfat_p99_ms=slo.ttfat_p99_ms,
        tpot_p99_ms=slo.tpot_p99_ms,
    )


def _finite_or_none(value: float | None) -> float | None:
    return None if value is None or math.isinf(value) else value


def _over_pct(probe: ProbeRecord, column: TableColumn, bound_ms: float) -> float | None:
    if probe.requests is None:
        return None
    n, k = capacity.exceedance(probe.requests, column, bound_ms, skip_cancelled=True)
    return round(k / n * 100.0, 4) if n else None


def _probe_points(run: RunFile) -> list[ProbePoint]:
    slo = run.spec.slo
    return [
        ProbePoint(
            phase=p.phase,
            rate_rps=p.rate_rps,
            window_s=p.window_s,
            ttft_p50_ms=_finite_or_none(p.ttft_ms.p50),
            ttft_p99_ms=_finite_or_none(p.ttft_ms.p99),
            tpot_p50_ms=_finite_or_none(p.tpot_ms.p50),
            tpot_p99_ms=_finite_or_none(p.tpot_ms.p99),
            goodput_tok_s=p.goodput_tok_s,
            failed=p.failed,
            slo_pass=p.slo_pass,
            client_bound=p.client_bound,
            send_lag_p99_ms=p.send_lag_p99_ms,
            stopped_early=p.early_stop is not None,
            cut_requests=p.early_stop.cut_window_requests if p.early_stop is not None else 0,
            **({"stream": p.stream, "variant": p.variant} if p.stream is not None else {}),
            carried_requests=p.ramp.carried_requests if p.ramp is not None else None,
            ttft_over_pct=_over_pct(p, "ttft_ms", slo.ttft_p99_ms)
            if slo.first_token == "ttft"
            else None,
            ttfat_p99_ms=_finite_or_none(p.first_token_ms("ttfat").p99)
            if slo.first_token == "ttfat" or p.ttfat_ms is not None
            else None,
            ttfat_over_pct=_over_pct(p, "ttfat_ms", slo.first_token_p99_ms)
            if slo.first_token == "ttfat"
            else None,
            tpot_over_pct=_over_pct(p, "tpot_ms", slo.tpot_p99_ms),
            running_mean=_round(p.engine.running_mean, 2) if p.engine else None,
            waiting_mean=_round(p.engine.waiting_mean, 2) if p.engine else None,
            kv_cache_usage_mean_pct=_round(p.engine.kv_cache_usage_mean_pct, 2)
            if p.engine
            else None,
            preemptions=p.engine.preemptions if p.engine else None,
            prefix_cache_hit_rate_pct=_round(p.engine.prefix_cache_hit_rate_pct, 2)
            if p.engine
            else None,
        )
        for p in run.probes
    ]


def _engine_text(run: RunFile) -> str:
    """``vLLM 0.31.0 · KV BF16`` (the server's reported version, else the spec's)."""
    version = run.environment.engine_version or run.spec.engine.version
    name = run.spec.engine.name
    engine = name
    if version:
        engine = version if version.lower().startswith(name.lower()) else f"{name} {version}"
    return f"{engine} \u00b7 KV {run.spec.model.kv_dtype.upper()}"


def _capacity_fits(figures: ConfigFigures) -> list[CapacityFitSummary]:
    out: list[CapacityFitSummary] = []
    for fit in figures.capacity.fits.values():
        out.append(
            CapacityFitSummary(
                slo=fit.slo,
                method=fit.method,
                capacity_rps=_round(fit.capacity_rps, 3),
                ci_rps=[round(v, 3) for v in fit.ci_rps] if fit.ci_rps is not None else None,
                intercept=fit.intercept,
                slope=fit.slope,
                dispersion=_round(fit.dispersion, 2),
                dof=fit.dof,
                shared_stream_correlation=_round(fit.shared_stream_correlation, 3),
                probes_used=fit.probes_used,
                lower_bound_rps=_round(fit.lower_bound_rps, 3),
                upper_bound_rps=_round(fit.upper_bound_rps, 3),
                short_of_steady=fit.short_of_steady,
            )
        )
    return out


def _config(
    loaded: LoadedRun,
    figures: ConfigFigures,
    baseline: ConfigFigures | None,
    baseline_run: RunFile | None,
) -> ConfigResult:
    run = loaded.run
    outcome_fig = figures.outcome
    estimate = figures.capacity
    accuracy: ConfigAccuracy | None = None
    if run.accuracy is not None:
        base_score = (
            baseline_run.accuracy.score
            if baseline_run is not None and baseline_run.accuracy is not None
            else None
        )
        delta = run.accuracy.score - base_score if base_score is not None else None
        max_drop = run.spec.accuracy.max_drop_pts if run.spec.accuracy is not None else None
        accuracy = ConfigAccuracy(
            score=run.accuracy.score,
            delta_pts=delta,
            spread_pts=run.accuracy.spread_pts,
            per_seed=[s.score for s in run.accuracy.per_seed],
            answered=sum(s.answered for s in run.accuracy.per_seed),
            failed=sum(s.failed for s in run.accuracy.per_seed),
            questions=run.accuracy.limit,
            gate_pass=None if delta is None or max_drop is None else delta >= -max_drop,
            meaningful=run.accuracy.meaningful,
        )
    power = figures.power
    base_goodput = baseline.outcome.goodput_tok_s if baseline is not None else 0.0
    return ConfigResult(
        key=run.role,
        label=run.description or run.label,
        engine=_engine_text(run),
        mbu_pct=_mbu_pct(run),
        node_power_kw=_round(power.node_power_kw, 3) if power is not None else None,
        goodput_tok_s=_round(outcome_fig.goodput_tok_s, 1) or 0.0,
        ttft_p99_ms=_round(outcome_fig.ttft_p99_ms, 1),
        tpot_p99_ms=_round(outcome_fig.tpot_p99_ms, 1),
        ttfat_p99_ms=_round(outcome_fig.ttfat_p99_ms, 1),
        reasoning_tokens_pct=_round(outcome_fig.reasoning_tokens_pct, 1),
        approximate_reasoning_requests=outcome_fig.approximate_reasoning_requests or None,
        slo_pass_count=outcome_fig.slo_pass_count,
        repeats=run.effective.repeats,
        throttle_counts=dict(power.throttle_counts) if power is not None else {},
        accuracy=accuracy,
        confirmed_rate_rps=_round(outcome_fig.confirmed_rate_rps, 3),
        repeat_goodputs_tok_s=[round(g, 1) for g in outcome_fig.repeat_goodputs_tok_s],
        goodput_delta_pct=(
            _round(compare.change_pct(outcome_fig.goodput_tok_s, base_goodput), 2)
            if baseline is not None and base_goodput > 0
            else None
        ),
        tokens_per_joule=_round(power.tokens_per_joule, 3) if power is not None else None,
        energy_j=_round(power.energy_j, 1) if power is not None else None,
        energy_method=power.energy_method if power is not None else None,
        power_trace=figures.power_trace,
        probes=_probe_points(run),
        probe_seconds=_round(figures.probe_seconds, 1),
        boundary_gap_pct=_round(figures.boundary_gap_pct, 1),
        measurement=ConfigMeasurement(
            warmup_s=run.effective.warmup_s,
            window_s=run.effective.window_s,
            repeats=run.effective.repeats,
            accuracy_questions=run.accuracy.limit if run.accuracy is not None else None,
            quick=run.quick,
            simulated=run.simulated,
            complete=run.complete,
        ),
        mbu_bytes_per_step=_round(run.mbu.bytes_per_step, 0) if run.mbu is not None else None,
        mbu_batch_mean=_round(run.mbu.batch_mean, 2) if run.mbu is not None else None,
        mbu_assumptions=list(run.mbu.assumptions) if run.mbu is not None else None,
        approximate_output_requests=(
            outcome_fig.approximate_output_requests if run.outcome is not None else None
        ),
        run_file=loaded.path,
        slo_capacity_rps=_round(estimate.capacity_rps, 3),
        slo_capacity_ci_rps=(
            [round(v, 3) for v in estimate.ci_rps] if estimate.ci_rps is not None else None
        ),
        binding_slo=estimate.binding_slo,
        capacity_bracket_rps=[_round(v, 3) for v in estimate.bracket_rps],
        capacity_fits=_capacity_fits(figures),
        sweep_strategy=figures.sweep_strategy,
        engine_telemetry=figures.telemetry,
        prefix_expected_hit_rate_pct=(
            run.prefix_reuse.expected_hit_rate_pct if run.prefix_reuse is not None else None
        ),
        client_calibration=(
            calibration_text(run.calibration) if run.calibration is not None else None
        ),
        client_ceiling_rps=(
            (run.calibration.ceiling_rps or 0.0)
            if run.calibration is not None and run.calibration.ceiling_found
            else None
        ),
        audits=figures.audits,
        power_validity=figures.power_validity,
        engine_version=run.environment.engine_version,
        engine_config=run.environment.engine_config,
        spec_path=run.spec_path,
        spec_sha256=run.environment.spec_sha256,
        spec=filled(run.spec),
        # Only where there are nodes: a result of one source is written as it always was.
        **_power_nodes(figures.power_nodes),
    )


# ---------------------------------------------------------------------------------------------
# Result-level text


def _input_text(spec: Spec) -> str:
    prompts = spec.workload.prompts
    if prompts is not None:
        return (
            f"real prompts from {Path(prompts).name}: lengths are the server's count"
            " (usage.prompt_tokens)"
        )
    return _tokens_text(spec.workload.input_tokens, spec.workload.trace, "input_tokens")


def _tokens_text(count: TokenCount | None, trace: str, which: str) -> str:
    if count is None:
        if trace == "chat-mix-v1":
            return CHAT_MIX_V1_TEXT[which]
        return f"from the trace {Path(trace).name}"
    if isinstance(count, int):
        return f"{count:,} (fixed)"
    if isinstance(count, FixedTokens):
        return f"{count.value:,} (fixed)"
    if isinstance(count, UniformTokens):
        return f"uniform {count.min:,}\u2013{count.max:,}"
    assert isinstance(count, LognormalTokens)
    return f"median {count.median:,.0f} \u00b7 p90 {count.p90:,.0f}"


def _prefix_text(run: RunFile) -> str | None:
    """The shared prefixes, with the hit rate they should give.

    The run's ``prefix_reuse`` (the engine's block size where it said it); a run recorded before
    it: 16-token blocks, steady state, ``workload.prefix`` only.
    """
    spec = run.spec
    prefix = spec.workload.prefix
    reuse = run.prefix_reuse
    if prefix is not None:
        text = (
            f"{prefix.groups:,} \u00d7 {prefix.shared_tokens:,} tokens before each request's own"
            " input tokens"
        )
    elif spec.workload.trace_prefix and reuse is not None:
        text = (
            f"the trace's hash_ids as {spec.workload.trace_block_tokens:,}-token blocks, identical"
            " where the ids are"
        )
    else:
        return None
    if reuse is not None:
        when = (
            "once every prefix is cached" if prefix is not None else "one pass in the trace's order"
        )
        return (
            f"{text}; expected prefix-cache hit rate {reuse.expected_hit_rate_pct:.1f} %"
            f" ({reuse.block_tokens}-token blocks: {reuse.block_source}; {when})"
        )
    own = spec.workload.input_tokens
    if own is None and spec.workload.trace == "chat-mix-v1":
        own = CHAT_MIX_V1[0]
    if own is None or prefix is None:
        return f"{text} (own lengths from the trace)"
    rate = expected_hit_rate(
        groups=prefix.groups,
        shared_tokens=prefix.shared_tokens,
        own_tokens_mean=max(1.0, mean_tokens(own)),
        block_tokens=DEFAULT_CACHE_BLOCK_TOKENS,
    )
    return (
        f"{text}; expected prefix-cache hit rate {rate * 100:.1f} % ({DEFAULT_CACHE_BLOCK_TOKENS}"
        "-token blocks, once every prefix is cached)"
    )


def _sessions_text(spec: Spec) -> str | None:
    work = spec.workload
    sessions = work.sessions
    if sessions is None:
        return None
    think = sessions.think_time_s
    if isinstance(think, UniformSeconds):
        think_text = f"uniform {think.min:g}\u2013{think.max:g} s"
    elif isinstance(think, ExponentialSeconds):
        think_text = f"exponential, mean {think.mean:g} s"
    else:
        think_text = f"{think:g} s"
    new = sessions.new_tokens
    new_text = _input_text(spec) if new is None else _tokens_text(new, work.trace, "input_tokens")
    return (
        f"turns {_tokens_text(sessions.turns, work.trace, 'turns')}; think time {think_text}"
        f" after each reply; new message {new_text} tokens; each turn resends the history with"
        " the server's replies; rates are sessions per second, latencies per turn"
    )


def _arrival_text(spec: Spec) -> str:
    a = spec.workload.arrival
    how = {
        "poisson": "Poisson",
        "gamma": f"Gamma (burstiness {a.burstiness:g})",
        "constant": "Constant",
        "trace": "Trace timestamps" + (" rescaled" if a.rescale else ""),
    }[a.process]
    swept = (
        "rates listed in the spec" if spec.sweep.rates is not None else "rate swept to SLO boundary"
    )
    return f"{how}, {swept}"


def _hardware(ref: RunFile) -> ResultHardware:
    gpus = ref.environment.gpus
    name = gpus[0].name if gpus else "unknown accelerator"
    preset = preset_for_device_name(name)
    count = len(gpus) if gpus else ref.spec.model.tensor_parallel * ref.spec.model.replicas
    rated = ref.spec.hardware.rated_bw_tbs_per_gpu
    if rated is None and ref.mbu is not None and count:
        rated = ref.mbu.rated_bw_tbs / count
    if rated is None and preset is not None:
        rated = preset.mem_bw_tbs
    vendor = preset.vendor if preset is not None else ref.spec.hardware.adapter.upper()
    return ResultHardware(
        vendor=vendor,
        accelerator=name,
        count=count,
        rated_bw_tbs_per_gpu=rated,
        driver=ref.environment.driver,
        host=ref.spec.hardware.host or ref.environment.host,
    )


def telemetry_notes(config: ConfigResult) -> list[str]:
    """What the engine said at the confirmed rate that makes it less than a steady state."""
    t = config.engine_telemetry
    rate = config.confirmed_rate_rps
    if t is None or rate is None:
        return []
    notes: list[str] = []
    if t.preemptions:
        notes.append(
            f"Config '{config.label}': the engine preempted {t.preemptions} request(s) at the"
            f" confirmed rate {rate:g} req/s (KV cache full: recomputed or swapped work)"
        )
    if t.queue_growing:
        notes.append(
            f"Config '{config.label}': the engine's waiting queue grew during a confirmation"
            f" window at {rate:g} req/s (not a steady state)"
        )
    return notes


def steady_state_note(run: RunFile) -> str | None:
    """The page's note when a run's windows opened before its load was in steady state.

    From the steady-state audits of its confirmation probes (all its probes if none confirmed),
    client-bound ones left out: the largest shortfall, and the warm-up that would have been
    enough (:mod:`tokenwatt.audits`, "Steady state").
    """
    confirm = set(run.outcome.confirm_probes) if run.outcome is not None else set()
    probes = [p for p in run.probes if p.index in confirm] or list(run.probes)
    found = [
        p.audits.steady_state
        for p in probes
        if not p.client_bound and p.audits is not None and p.audits.steady_state is not None
    ]
    short = [a for a in found if not a.holds]
    if not short:
        return None
    worst = max(short, key=lambda a: abs(a.shortfall_pct))
    needed = max(a.steady_warmup_s for a in found)
    if worst.shortfall_pct < 0:  # sweep.ramp from a faster probe: more load than steady state
        state = (
            f"{-worst.shortfall_pct:.0f} % more requests than a steady state holds were still in"
            " the system, carried over from a faster probe"
        )
        effect = (
            "latencies read high and the confirmed rate may be too low (the SLO capacity"
            " estimate does not count the fail of a window whose load ran over it on average)"
        )
    else:
        state = (
            f"{worst.shortfall_pct:.0f} % of the requests a steady state holds were not yet in"
            " the system"
        )
        effect = (
            "latencies read low and the confirmed rate may be too high (the SLO capacity"
            " estimate does not count the pass of a window whose load ran short of it on average)"
        )
    return (
        f"Run '{run.label}': its windows opened before the load was in steady state (warm-up"
        f" {worst.warmup_s:g} s; {state}, some stay {worst.longest_time_in_system_s:,.0f} s):"
        f" {effect}; a warm-up of about {needed:,.0f} s would"
        f" reach {audits.STEADY_STATE_SHORTFALL_PCT:g} %"
    )


def _not_covered(
    runs: Sequence[LoadedRun], configs: Sequence[ConfigResult], *, band_pct: float | None
) -> list[str]:
    notes: list[str] = []

    def add(note: str) -> None:
        if note not in notes:
            notes.append(note)

    for loaded in runs:
        for note in loaded.run.spec.not_covered:
            add(note)
    any_run = [r.run for r in runs]
    sources = {r.power.source if r.power is not None else "none" for r in any_run}
    sources |= {n.source for r in any_run if r.power is not None for n in r.power.nodes or ()}
    if "none" in sources:
        add("Power not measured (power source 'none')")
    if "board" in sources and not any(n.startswith("Whole-node power") for n in notes):
        add("Whole-node power (GPU board power only)")
    if any(r.accuracy is None for r in any_run):
        add("Accuracy not measured for every configuration")
    if any(r.accuracy is not None and not r.accuracy.meaningful for r in any_run):
        add("Accuracy against the simulator is not meaningful (not a model's answers)")
    if any(r.quick for r in any_run):
        add(QUICK_NOTE)
    if any(r.simulated for r in any_run):
        add("Simulated engine and power model: not a measurement of real hardware")
    for loaded in runs:
        run = loaded.run
        if not run.complete:
            add(f"Run '{run.label}' is incomplete ({run.incomplete_reason or 'interrupted'})")
        bound = sum(1 for p in run.probes if p.client_bound)
        if bound:
            add(
                f"Run '{run.label}': {bound} probe(s) were client-bound (the load generator,"
                " not the server, was the limit)"
            )
        steady = steady_state_note(run)
        if steady is not None:
            add(steady)
        if run.mbu is not None and (why := mbu.impossible_because(run.mbu)) is not None:
            add(f"Run '{run.label}': MBU not stated: {why}")
        if run.power is not None and run.power.max_gap_fraction:
            add(
                f"Run '{run.label}': power readings missing for"
                f" {run.power.max_gap_fraction:.0%} of a confirmed window"
            )
    for config in configs:
        for note in telemetry_notes(config):
            add(note)
        if config.confirmed_rate_rps is None:
            add(f"Config '{config.label}': no arrival rate met the SLO")
        elif (
            band_pct is not None
            and config.boundary_gap_pct is not None
            and config.boundary_gap_pct > band_pct
        ):
            add(
                f"Sweep resolution: config '{config.label}' passed at"
                f" {config.confirmed_rate_rps:g} req/s and failed {config.boundary_gap_pct:.1f}%"
                f" higher; its SLO boundary lies in between (wider than the ±{band_pct:.1f}%"
                " variance band)"
            )
    return notes


def _capacity_inputs(
    ordered: Sequence[LoadedRun],
    figures: dict[int, ConfigFigures],
    configs: Sequence[ConfigResult],
) -> list[tuple[compare.CapacityFigures, Sequence[ProbeRecord]]]:
    """What the capacity verdicts read of each run, baseline first."""
    return [
        (
            compare.CapacityFigures(
                key=c.key,
                label=c.label,
                capacity_rps=figures[id(r)].capacity.capacity_rps,
                binding_slo=figures[id(r)].capacity.binding_slo,
                accuracy_delta_pts=c.accuracy.delta_pts if c.accuracy is not None else None,
                accuracy_meaningful=bool(c.accuracy.meaningful) if c.accuracy is not None else True,
            ),
            r.run.probes,
        )
        for r, c in zip(ordered, configs, strict=True)
    ]


def _capacity_verdict(
    ordered: Sequence[LoadedRun],
    figures: dict[int, ConfigFigures],
    configs: Sequence[ConfigResult],
    max_drop: float | None,
) -> Verdict:
    """The verdict on SLO capacity from every run's probes, baseline first."""
    return compare.verdict_from_probes(
        _capacity_inputs(ordered, figures, configs),
        ordered[0].run.spec.slo,
        max_drop_pts=max_drop,
        paired=share_streams([r.run for r in ordered]),
    )


def _family_verdict(
    verdicts: Sequence[Verdict], multiple: MultipleComparison, *, base_label: str
) -> Verdict:
    """The N-way report's one-sentence summary of its verdicts (for the result's summary)."""
    name = "Holm" if multiple.method == "holm" else "Bonferroni"
    each = "; ".join(f"'{v.candidate}': {v.outcome.replace('_', ' ')}" for v in verdicts)
    return Verdict(
        outcome="not_compared",
        text=f"{len(verdicts)} candidates against '{base_label}' ({name} correction, family-wise"
        f" level {multiple.family_alpha:g}): {each}.",
        basis="slo_capacity",
    )


def share_streams(runs: Sequence[RunFile]) -> bool:
    """Whether probe i of every run sent the same requests on the same schedule.

    So it is when their workload sections are the same, seed included: stream i is then the
    same requests, on an arrival schedule scaled by each probe's rate (common random numbers).
    """
    workload = runs[0].spec.workload
    return all(r.spec.workload == workload for r in runs[1:])


def _summary(
    ref: RunFile, hardware: ResultHardware, runs: Sequence[LoadedRun], verdict_text: str
) -> str:
    date = ref.environment.started_utc.date().isoformat()
    engine = _engine_text(ref).split(" \u00b7 ")[0]
    labels = ", ".join(
        f"{loaded.run.description or loaded.run.label} ({loaded.run.role})" for loaded in runs
    )
    flags = ""
    if any(loaded.run.simulated for loaded in runs):
        flags += " Simulated."
    if any(loaded.run.quick for loaded in runs):
        flags += " Quick mode."
    return (
        f"{hardware.host}, {hardware.count}\u00d7 {hardware.accelerator}, {date}: {engine};"
        f" {labels}.{flags} {verdict_text}"
    )


def build_result(
    runs: Sequence[LoadedRun],
    *,
    title: str,
    report_command: str,
    result_id: str | None = None,
    allow_mismatch: bool = False,
    fleet_cards: int | None = compare.FLEET_CARDS,
    now: dt.datetime | None = None,
    correction: Correction = "holm",
) -> ResultFile:
    """Combine run files into a result in the seed's schema.

    Args:
        runs: the run files, in the order given on the command line.
        title: the result's title.
        report_command: the command that makes this report, for the reproduce block.
        result_id: the id; default: from the title.
        allow_mismatch: combine runs that differ in hardware, model, SLO or workload, recording
            each difference on the result.
        fleet_cards: cards to project the difference onto; None for no fleet block.
        now: the time of the report (tests pin it).
        correction: with several candidates (role ``tuned``), the multiple-comparison
            correction of their verdicts (:mod:`tokenwatt.multiplicity`).

    Raises:
        ResultError: runs that cannot be combined or are inconsistent.
    """
    if not runs:
        raise ResultError("no run files given")
    roles = [r.run.role for r in runs]
    if roles.count("baseline") > 1:
        paths = ", ".join(r.path for r in runs if r.run.role == "baseline")
        raise ResultError(f"more than one run has role 'baseline': {paths}")
    # A copied run file also repeats its label: say what is really wrong first.
    for later, b in enumerate(runs):
        for a in runs[:later]:
            if b.run.probes and b.run.probes == a.run.probes:
                raise ResultError(
                    f"{b.path} holds the same measurement as {a.path} (identical probes): a"
                    " run counted twice would look like two agreeing configurations"
                )
    labels = [r.run.description or r.run.label for r in runs]
    for later, label in enumerate(labels):
        if label in labels[:later]:
            paths = ", ".join(r.path for r, x in zip(runs, labels, strict=True) if x == label)
            raise ResultError(
                f"more than one run is labelled {label!r}: {paths}; each configuration of a"
                " report needs its own label (--label, --description)"
            )
    if "baseline" not in roles:
        raise ResultError("no run has role 'baseline'; the comparison needs one")
    mismatches = comparability(runs)
    if mismatches and not allow_mismatch:
        raise ResultError(
            "runs are not comparable (use --allow-mismatch to combine them anyway,"
            " recording the differences):\n  " + "\n  ".join(mismatches)
        )
    ordered = sorted(runs, key=lambda r: _ROLE_ORDER[r.run.role])
    base = next(r for r in ordered if r.run.role == "baseline")
    ref = base.run
    figures = {id(r): figures_of(r.run, path=r.path) for r in ordered}
    base_fig = figures[id(base)]
    configs = [_config(r, figures[id(r)], base_fig, ref) for r in ordered]

    comp = [
        compare.ConfigFigures(
            key=c.key,
            label=c.label,
            goodput_tok_s=c.goodput_tok_s,
            repeat_goodputs_tok_s=tuple(c.repeat_goodputs_tok_s or ()),
            node_power_kw=c.node_power_kw,
            accuracy_delta_pts=c.accuracy.delta_pts if c.accuracy is not None else None,
            accuracy_meaningful=bool(c.accuracy.meaningful) if c.accuracy is not None else True,
        )
        for c in configs
    ]
    band = compare.variance_band_pct(comp)
    max_drop = ref.spec.accuracy.max_drop_pts if ref.spec.accuracy is not None else None
    on_capacity = all(p.requests is not None for r in ordered for p in r.run.probes)
    n_way = roles.count("tuned") > 1
    verdicts: list[Verdict] | None = None
    multiple: MultipleComparison | None = None
    if n_way and not on_capacity:
        raise ResultError(
            "several candidates (role 'tuned') need run files that keep their window requests"
            " (the capacity verdict); re-measure with this tokenwatt"
        )
    if n_way:
        verdicts, multiple = compare.verdicts_from_probes(
            _capacity_inputs(ordered, figures, configs),
            ref.spec.slo,
            max_drop_pts=max_drop,
            paired=share_streams([r.run for r in ordered]),
            method=correction,
        )
        verdict = _family_verdict(verdicts, multiple, base_label=configs[0].label)
    elif on_capacity:
        verdict = _capacity_verdict(ordered, figures, configs, max_drop)
    else:
        # Run files without their window requests (older ones): the seed's goodput verdict.
        gaps = [c.boundary_gap_pct for c in configs if c.boundary_gap_pct is not None]
        verdict = compare.verdict(
            comp, band_pct=band, max_drop_pts=max_drop, resolution_pct=max(gaps) if gaps else None
        )
    hardware = _hardware(ref)
    fleet: Fleet | None = None
    if fleet_cards is not None and not n_way:  # the fleet block projects one candidate
        fleet = compare.fleet_projection(comp, cards=fleet_cards, gpus_per_config=hardware.count)

    spec = filled(ref.spec)
    power = ref.power
    power_block = ResultPower(
        source=power.description if power is not None else "power not measured",
        kind=ref.spec.power.kind,
        sampling_hz=ref.spec.power.sampling_hz,
        window=f"{ref.effective.window_s:g} s steady state",
    )
    accuracy_block = (
        ResultAccuracy(suite=ref.spec.accuracy.name, threshold_pts=ref.spec.accuracy.max_drop_pts)
        if ref.spec.accuracy is not None
        else None
    )
    model = ref.spec.model
    replicas = f"{model.replicas} replica{'s' if model.replicas != 1 else ''}"
    reproduce = "\n".join(r.run.command for r in runs) + "\n\n" + report_command
    prefix_text = _prefix_text(ref)
    sessions_text = _sessions_text(ref.spec)
    try:
        draft = ResultFile(
            id=result_id or slugify(title),
            status="draft",
            title=title,
            published=min(r.run.environment.started_utc for r in runs).date(),
            summary=_summary(ref, hardware, ordered, verdict.text),
            hardware=hardware,
            software=ResultSoftware(
                engine=ref.spec.engine.name,
                engine_version=ref.environment.engine_version or ref.spec.engine.version,
                kernels=ref.spec.engine.kernels,
            ),
            model=ResultModel(
                name=model.name,
                shape=ref.model_shape or "unknown",
                quantization=f"{model.weight_dtype.upper()} weights,"
                f" {model.kv_dtype.upper()} KV cache",
                parallelism=f"{replicas} \u00d7 TP{model.tensor_parallel}",
            ),
            slo=_result_slo(ref.spec.slo),
            workload=ResultWorkload(
                trace=ref.spec.workload.trace,
                input_tokens=_input_text(ref.spec),
                output_tokens=_tokens_text(
                    ref.spec.workload.output_tokens, ref.spec.workload.trace, "output_tokens"
                ),
                arrival=_arrival_text(ref.spec),
                # only when there are prefixes: a seed-shaped result stays byte for byte the seed's
                **({"prefix": prefix_text} if prefix_text is not None else {}),
                **({"sessions": sessions_text} if sessions_text is not None else {}),
            ),
            power=power_block,
            accuracy=accuracy_block,
            runs=min(r.run.effective.repeats for r in runs),
            variance_band_pct=round(band, 2),
            fleet=fleet,
            configs=configs,
            not_covered=_not_covered(ordered, configs, band_pct=None if on_capacity else band),
            reproduce=reproduce,
            spec=spec,
            schema_version=1,
            simulated=any(r.run.simulated for r in runs),
            verdict=None if n_way else verdict,
            verdicts=verdicts,
            correction=multiple,
            mismatches=mismatches or None,
            tokenwatt_version=ref.environment.tokenwatt_version,
            created_utc=now or dt.datetime.now(dt.UTC),
        )
    except ValidationError as exc:
        problems = "; ".join(
            str(e["msg"]).removeprefix("Value error, ") for e in exc.errors(include_url=False)
        )
        raise ResultError(
            f"the runs give a result no measurement can produce: {problems}"
        ) from None
    # Published only if the policy, recomputed from the numbers, says so.
    if not policy.check_result(draft):
        draft.status = "published"
    return draft


def report_command(
    run_paths: Sequence[str],
    *,
    title: str,
    result_id: str | None,
    out: str | None,
    allow_mismatch: bool,
    fleet_cards: int | None,
    correction: Correction = "holm",
) -> str:
    """The ``tokenwatt report`` command line that makes this result, for the reproduce block."""
    parts = [
        "tokenwatt",
        "report",
        *(shlex.quote(p) for p in run_paths),
        "--title",
        quote_arg(title),
    ]
    if result_id:
        parts += ["--id", shlex.quote(result_id)]
    if out:
        parts += ["--out", shlex.quote(out)]
    if allow_mismatch:
        parts.append("--allow-mismatch")
    if fleet_cards != compare.FLEET_CARDS:
        parts += ["--fleet-cards", "none" if fleet_cards is None else str(fleet_cards)]
    if correction != "holm":
        parts += ["--correction", correction]
    return " ".join(parts)
