"""Every figure of one configuration, computed from its run file's evidence (pure).

The one home of a configuration's figures: ``measure`` calls :func:`outcome_figures` to write
the run file's summary, and ``report`` calls :func:`figures_of`, which recomputes everything
from the evidence in the run file (each probe's window requests, the power samples) and refuses
a file whose summary fields say something else. Definitions (methodology page):

- **SLO goodput**: output tokens of the successful window requests of a confirmation repeat ÷
  its window; the configuration's figure is the mean over the accepted confirmation's repeats
  (0 when no rate was confirmed).
- **p99 TTFT / TPOT of a configuration**: nearest rank over the window requests of the accepted
  confirmation's repeats pooled, failures as +inf (:func:`tokenwatt.metrics.pooled_latency_stats`).
- **p99 TTFAT and reasoning share** (reasoning models): the same pooling over the time to first
  answer token, and reasoning tokens as a percentage of the output tokens of the successful
  confirmation-window requests; both null when no confirmation-window request streamed
  reasoning. Measured and reported, not judged: the SLO bounds TTFT and TPOT only.
- **SLO capacity**: :mod:`tokenwatt.capacity`, from every probe.
- **Power and energy**: :mod:`tokenwatt.energy`, over the accepted confirmation's windows.
- **Engine telemetry at the confirmed rate**: over the accepted confirmation's windows
  (:mod:`tokenwatt.telemetry`), the mean of each window's mean running, waiting and KV usage,
  the largest KV usage, the preemptions summed, the mean prefix-cache hit rate and
  speculative-decoding acceptance; the queue is *growing* if it grew in any window.
- **Audits** (:mod:`tokenwatt.audits`): probes whose requests are not all accounted for, over
  every probe; token-accounting counts and the largest Little's-law disagreement over the
  accepted confirmation's windows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from tokenwatt import accuracy, energy
from tokenwatt.capacity import CapacityEstimate, estimate_capacity
from tokenwatt.errors import ResultError
from tokenwatt.metrics import (
    TableColumn,
    client_bound_reasons,
    nearest_rank,
    pooled_latency_stats,
    slo_pass,
)
from tokenwatt.schema.base import SIM_ENGINE
from tokenwatt.schema.limits import max_output_tokens
from tokenwatt.schema.result import (
    ConfigAudits,
    ConfigTelemetry,
    PowerNodeSummary,
    PowerTraceSummary,
    PowerValidity,
    ResultFile,
)
from tokenwatt.schema.run import LatencyStats, ProbeRecord, RunFile
from tokenwatt.schema.spec import FirstToken
from tokenwatt.telemetry import queue_growing

__all__ = [
    "GOODPUT_TOLERANCE",
    "ConfigFigures",
    "OutcomeFigures",
    "accepted_probes",
    "audit_summary",
    "engine_is_simulator",
    "figures_of",
    "outcome_figures",
    "pooled_p99_ms",
    "power_validity",
    "result_is_simulated",
    "run_simulated_because",
    "search_phases",
    "telemetry_at_confirmed",
    "window_power",
]

GOODPUT_TOLERANCE = 1e-6
"""Relative tolerance when a stored figure is compared with the one recomputed from evidence."""

_POWER_TRACE_POINTS = 300

search_phases: tuple[str, ...] = ("search", "bisect", "refine", "rates")
"""Phases whose probes look for the boundary (the rest confirm it)."""


@dataclass(frozen=True)
class OutcomeFigures:
    """The figures of the accepted confirmation (or of the last attempt, with no rate)."""

    confirmed_rate_rps: float | None
    goodput_tok_s: float
    repeat_goodputs_tok_s: list[float]
    ttft_p99_ms: float | None
    """Pooled nearest-rank p99 over the repeats' window requests; None when infinite."""
    tpot_p99_ms: float | None
    slo_pass_count: int
    approximate_output_requests: int
    """Confirmation-window requests whose output tokens were counted from chunks."""
    ttfat_p99_ms: float | None = None
    """Pooled p99 time to first answer token; None without reasoning, or when infinite."""
    reasoning_tokens_pct: float | None = None
    """Reasoning tokens, % of the output tokens of the successful window requests."""
    approximate_reasoning_requests: int = 0
    """Confirmation-window requests whose reasoning tokens were counted from chunks."""


def pooled_p99_ms(probes: Sequence[ProbeRecord], column: TableColumn) -> float | None:
    """Nearest-rank p99 over the probes' window requests pooled (failures +inf); None if inf.

    A probe without its request table (an old run file) bounds the pooled p99 from above by
    its own p99: the worst repeat's p99 stands in.
    """
    tables = [p.requests for p in probes if p.requests is not None]
    if probes and len(tables) == len(probes):
        value = pooled_latency_stats(tables, column).p99
    else:
        # A probe without TTFAT figures streamed no reasoning: its TTFAT is its TTFT.
        stats: list[LatencyStats] = [
            (p.ttfat_ms or p.ttft_ms) if column == "ttfat_ms" else getattr(p, column)
            for p in probes
        ]
        known = [v for v in (s.p99 for s in stats) if v is not None]
        value = max(known) if known else None
    return None if value is None or math.isinf(value) else value


def outcome_figures(
    probes: Sequence[ProbeRecord],
    confirm: Sequence[int],
    confirmed_rate_rps: float | None,
    *,
    first_token: FirstToken = "ttft",
) -> OutcomeFigures:
    """The confirmation's figures from its probes (``confirm``: their indices in ``probes``).

    The p99 TTFAT is there when a probe streamed reasoning, or when the SLO bounds it
    (``first_token``; with no reasoning it is the TTFT).
    """
    chosen = [probes[i] for i in confirm if i < len(probes)]
    reasoned = any(p.reasoning_tokens is not None for p in chosen)
    goodputs = [p.goodput_tok_s for p in chosen] if confirmed_rate_rps is not None else []
    return OutcomeFigures(
        confirmed_rate_rps=confirmed_rate_rps,
        goodput_tok_s=math.fsum(goodputs) / len(goodputs) if goodputs else 0.0,
        repeat_goodputs_tok_s=goodputs,
        ttft_p99_ms=pooled_p99_ms(chosen, "ttft_ms"),
        tpot_p99_ms=pooled_p99_ms(chosen, "tpot_ms"),
        slo_pass_count=sum(1 for p in chosen if p.slo_pass),
        approximate_output_requests=sum(p.approximate_output_tokens for p in chosen),
        ttfat_p99_ms=pooled_p99_ms(chosen, "ttfat_ms")
        if reasoned or first_token == "ttfat"
        else None,
        reasoning_tokens_pct=_reasoning_pct(chosen) if reasoned else None,
        approximate_reasoning_requests=sum(p.approximate_reasoning_tokens for p in chosen),
    )


def _reasoning_pct(probes: Sequence[ProbeRecord]) -> float | None:
    output = sum(p.output_tokens for p in probes)
    reasoning = sum(p.reasoning_tokens or 0 for p in probes)
    return reasoning / output * 100.0 if output else None


@dataclass(frozen=True)
class ConfigFigures:
    """Everything ``report`` shows of one configuration, recomputed from its run file."""

    outcome: OutcomeFigures
    capacity: CapacityEstimate
    power: energy.WindowFigures | None
    """None when the run has no power evidence."""
    power_trace: PowerTraceSummary | None
    probe_seconds: float | None
    boundary_gap_pct: float | None
    """How far above the confirmed rate the lowest failing probe ran, %."""
    sweep_strategy: Literal["bisect", "adaptive", "rates"]
    telemetry: ConfigTelemetry | None = None
    audits: ConfigAudits | None = None
    power_validity: PowerValidity | None = None
    power_nodes: list[PowerNodeSummary] | None = None
    """Each node's figures, where the server spans nodes (``power`` is then their sum)."""


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return math.fsum(known) / len(known) if known else None


def telemetry_at_confirmed(accepted: Sequence[ProbeRecord]) -> ConfigTelemetry | None:
    """The engine's telemetry over the accepted confirmation's windows (None: not scraped)."""
    seen = [p.engine for p in accepted if p.engine is not None]
    if not seen:
        return None
    preemptions = [t.preemptions for t in seen]
    kv_max = [t.kv_cache_usage_max_pct for t in seen if t.kv_cache_usage_max_pct is not None]
    return ConfigTelemetry(
        dialect=next((t.dialect for t in seen if t.dialect is not None), None),
        running_mean=_mean([t.running_mean for t in seen]),
        waiting_mean=_mean([t.waiting_mean for t in seen]),
        kv_cache_usage_mean_pct=_mean([t.kv_cache_usage_mean_pct for t in seen]),
        kv_cache_usage_max_pct=max(kv_max) if kv_max else None,
        preemptions=(
            sum(p for p in preemptions if p is not None)
            if all(p is not None for p in preemptions)
            else None
        ),
        prefix_cache_hit_rate_pct=_mean([t.prefix_cache_hit_rate_pct for t in seen]),
        spec_decode_acceptance_pct=_mean([t.spec_decode_acceptance_pct for t in seen]),
        queue_growing=any(queue_growing(t) for t in seen),
    )


def audit_summary(run: RunFile, accepted: Sequence[ProbeRecord]) -> ConfigAudits:
    """The run's probe audits, summed (see the module docstring)."""
    conservation = [p.audits.conservation for p in run.probes if p.audits is not None]
    tokens = [p.audits.tokens for p in accepted if p.audits is not None and p.audits.tokens]
    littles = [p.audits.littles_law for p in accepted if p.audits is not None]
    audited = [a for a in littles if a is not None]
    worst = max(audited, key=lambda a: abs(a.disagreement_pct)) if audited else None
    examples = [e for t in tokens if t is not None for e in t.examples]
    return ConfigAudits(
        probes=sum(1 for p in run.probes if p.audits is not None),
        conservation_failures=sum(1 for c in conservation if c is not None and not c.holds),
        usage_mismatches=sum(t.usage_mismatches for t in tokens if t is not None),
        usage_below_chunks=sum(t.usage_below_chunks for t in tokens if t is not None),
        over_max_tokens=sum(t.over_max_tokens for t in tokens if t is not None),
        short_ignore_eos=sum(t.short_ignore_eos for t in tokens if t is not None),
        token_examples=examples[:3],
        littles_law_worst_pct=worst.disagreement_pct if worst is not None else None,
        littles_law_agrees=all(a.agrees for a in audited) if audited else None,
    )


def accepted_probes(run: RunFile) -> list[ProbeRecord]:
    """The probes of the accepted confirmation (none when no rate was confirmed)."""
    outcome = run.outcome
    if outcome is None or outcome.confirmed_rate_rps is None:
        return []
    return [run.probes[i] for i in outcome.confirm_probes if i < len(run.probes)]


def window_power(run: RunFile, accepted: Sequence[ProbeRecord]) -> energy.WindowFigures | None:
    """The power figures over the accepted probes' windows (None: no power evidence)."""
    if run.power is None:
        return None
    windows, tokens = energy.confirmed_windows(accepted)
    return energy.window_figures(run.power, windows, output_tokens=tokens)


def power_validity(run: RunFile, power: energy.WindowFigures | None) -> PowerValidity | None:
    """Coverage, longest gap and GPUs of the power readings over the confirmed windows."""
    if power is None or power.max_gap_fraction is None:
        return None
    return PowerValidity(
        coverage_pct=round((1.0 - power.max_gap_fraction) * 100.0, 3),
        max_gap_s=round(power.max_gap_s, 3) if power.max_gap_s is not None else None,
        gpus_seen=list(power.gpu_counts),
        gpus_expected=len(run.environment.gpus) or None,
    )


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=GOODPUT_TOLERANCE, abs_tol=1e-9)


def _check_client_bound(where: str, probe: ProbeRecord) -> None:
    """A probe's client-bound verdict must follow from its requests' send lags and rates."""
    table = probe.requests
    if table is None or probe.early_stop is not None or not table.status:
        return
    lags = np.sort(np.asarray(table.send_lag_ms, dtype=np.float64))
    lag_p99 = nearest_rank(lags, 99.0)
    if not math.isclose(lag_p99, probe.send_lag_p99_ms, rel_tol=1e-6, abs_tol=1e-6):
        raise ResultError(
            f"{where}.send_lag_p99_ms is {probe.send_lag_p99_ms}, but its window requests' send"
            f" lags give {lag_p99}; the run file is inconsistent"
        )
    n = len(table.status)
    last_send_s = max(
        t + lag / 1000.0 for t, lag in zip(table.t_sched_s, table.send_lag_ms, strict=True)
    )
    achieved = n / max(probe.window_s, last_send_s)
    reasons = client_bound_reasons(
        offered_rate_rps=n / probe.window_s,
        achieved_rate_rps=achieved,
        send_lag_p99_ms=lag_p99,
        slot_waits=1 if probe.slot_wait_s > 0 else 0,
        client_errors=sum(1 for s in table.status if s == "client_error"),
    )
    if bool(reasons) and not probe.client_bound:
        raise ResultError(
            f"{where}.client_bound is false, but its window requests say the load generator"
            f" was the limit ({'; '.join(reasons)}); the run file is inconsistent"
        )


def _check_probe(path: str, run: RunFile, probe: ProbeRecord) -> None:
    """A probe's summary fields must be what its window requests say."""
    where = f"{path}: probes[{probe.index}]"
    expected = probe.output_tokens / probe.window_s
    if not _close(probe.goodput_tok_s, expected):
        raise ResultError(
            f"{where}.goodput_tok_s is {probe.goodput_tok_s}, but output_tokens / window_s ="
            f" {expected}; the run file is inconsistent"
        )
    table = probe.requests
    if table is None:
        return
    ok_tokens = sum(n for n, s in zip(table.output_tokens, table.status, strict=True) if s == "ok")
    if ok_tokens != probe.output_tokens:
        raise ResultError(
            f"{where}.output_tokens is {probe.output_tokens}, but its successful requests"
            f" carry {ok_tokens}; the run file is inconsistent"
        )
    most = max_output_tokens(run.spec.workload)
    if most is not None and max(table.output_tokens, default=0) > most:
        raise ResultError(
            f"{where}: a window request carries {max(table.output_tokens)} output tokens, more"
            f" than the spec's workload asks any request for ({most}); the run file is"
            " inconsistent"
        )
    ok = sum(1 for s in table.status if s == "ok")
    if ok != probe.ok or len(table.status) != probe.window_requests:
        raise ResultError(
            f"{where}: ok {probe.ok} of window_requests {probe.window_requests}, but its request"
            f" table holds {ok} successful of {len(table.status)}; the run file is inconsistent"
        )
    _check_client_bound(where, probe)
    if probe.early_stop is None:
        # The verdict is recomputed from the requests, never taken from the file.
        passed = slo_pass(
            first_token_ms=pooled_latency_stats([table], run.spec.slo.first_token_column),
            tpot_ms=pooled_latency_stats([table], "tpot_ms"),
            slo=run.spec.slo,
            client_bound=probe.client_bound,
        )
        if passed != probe.slo_pass:
            raise ResultError(
                f"{where}.slo_pass is {probe.slo_pass}, but its window requests' p99"
                f" {run.spec.slo.first_token.upper()} and TPOT against the spec's SLO say"
                f" {passed}; the run file is inconsistent"
            )


def _check_outcome(path: str, run: RunFile, figures: OutcomeFigures) -> None:
    outcome = run.outcome
    assert outcome is not None
    if figures.confirmed_rate_rps is not None and figures.slo_pass_count != len(
        [i for i in outcome.confirm_probes if i < len(run.probes)]
    ):
        raise ResultError(
            f"{path}: outcome.confirmed_rate_rps is set but a confirmation repeat failed"
        )
    if not _close(outcome.goodput_tok_s, figures.goodput_tok_s):
        raise ResultError(
            f"{path}: outcome.goodput_tok_s is {outcome.goodput_tok_s}, but its confirmation"
            f" repeats give {figures.goodput_tok_s}; the run file is inconsistent"
        )


def _power(path: str, run: RunFile, accepted: Sequence[ProbeRecord]) -> energy.WindowFigures | None:
    evidence = run.power
    figures = window_power(run, accepted)
    if evidence is None or figures is None:
        return None
    stored = {
        "node_power_kw": evidence.node_power_kw,
        "energy_j": evidence.energy_j,
        "tokens_per_joule": evidence.tokens_per_joule,
    }
    for name, value in stored.items():
        if not _close(value, getattr(figures, name)):
            raise ResultError(
                f"{path}: power.{name} is {value}, but the run's power samples over the"
                f" confirmed windows give {getattr(figures, name)}; the run file is inconsistent"
            )
    by_name = dict(figures.nodes)
    for i, node in enumerate(evidence.nodes or ()):
        for name in ("node_power_kw", "energy_j"):
            value, recomputed = getattr(node, name), getattr(by_name[node.name], name)
            if not _close(value, recomputed):
                raise ResultError(
                    f"{path}: power.nodes[{i}].{name} ({node.name}) is {value}, but that node's"
                    f" samples over the confirmed windows give {recomputed}; the run file is"
                    " inconsistent"
                )
    return figures


def _boundary_gap_pct(run: RunFile, confirmed: float | None) -> float | None:
    if confirmed is None:
        return None
    above = [p.rate_rps for p in run.probes if not p.slo_pass and p.rate_rps > confirmed]
    return (min(above) - confirmed) / confirmed * 100.0 if above else None


def engine_is_simulator(version: str | None) -> bool:
    """Whether an engine's self-reported version names tokenwatt's simulator."""
    return version is not None and version.startswith(SIM_ENGINE)


def run_simulated_because(run: RunFile) -> str | None:
    """Why a run's own evidence says it was made against the simulator, whatever its flag says.

    The spec's ``engine.endpoint`` is ``sim``, or the engine named itself the simulator (its
    version, from ``/version``), or the GPUs are simulated ones.
    """
    if run.spec.engine.endpoint == "sim":
        return "the spec's engine.endpoint is 'sim'"
    if engine_is_simulator(run.environment.engine_version):
        return f"the engine identified itself as {run.environment.engine_version!r}"
    if any(g.name.endswith("(simulated)") for g in run.environment.gpus):
        return "its GPUs are simulated ones"
    return None


def result_is_simulated(result: ResultFile) -> bool:
    """A result is simulated if its flag, its spec, its engine or any configuration says so."""
    return (
        bool(result.simulated)
        or result.spec.engine.endpoint == "sim"
        or engine_is_simulator(result.software.engine_version)
        or result.hardware.accelerator.endswith("(simulated)")
        or any(c.measurement is not None and c.measurement.simulated for c in result.configs)
    )


def figures_of(run: RunFile, *, path: str) -> ConfigFigures:
    """Every figure of a run, recomputed from its evidence.

    Raises:
        ResultError: a summary field of the file disagrees with its evidence (named).
    """
    because = run_simulated_because(run)
    if because is not None and not run.simulated:
        raise ResultError(
            f"{path}: simulated is false, but {because}: a run made against the simulator is"
            " always marked simulated"
        )
    if not run.quick and run.effective != run.spec.measurement:
        raise ResultError(
            f"{path}: quick is false, but the durations in force (effective) differ from the"
            " spec's measurement section: only --quick shortens them"
        )
    for probe in run.probes:
        _check_probe(path, run, probe)
    if run.accuracy is not None and (problem := accuracy.check_evidence(run.accuracy)):
        raise ResultError(f"{path}: accuracy.{problem}; the run file is inconsistent")
    strategy: Literal["bisect", "adaptive", "rates"] = (
        "rates" if run.spec.sweep.rates is not None else run.spec.sweep.strategy
    )
    capacity = estimate_capacity(run.probes, run.spec.slo)
    outcome = run.outcome
    if outcome is None:
        empty = OutcomeFigures(None, 0.0, [], None, None, 0, 0)
        return ConfigFigures(empty, capacity, None, None, None, None, strategy)
    figures = outcome_figures(
        run.probes,
        outcome.confirm_probes,
        outcome.confirmed_rate_rps,
        first_token=run.spec.slo.first_token,
    )
    _check_outcome(path, run, figures)
    accepted = accepted_probes(run)
    power = _power(path, run, accepted)
    trace: PowerTraceSummary | None = None
    nodes: list[PowerNodeSummary] | None = None
    if run.power is not None and run.power.source != "none":
        windows, _ = energy.confirmed_windows(accepted)
        trace = energy.power_trace_summary(
            run.power, windows=windows or None, max_points=_POWER_TRACE_POINTS
        )
        if power is not None:
            nodes = energy.power_node_summaries(run.power, power, windows)
    return ConfigFigures(
        outcome=figures,
        capacity=capacity,
        power=power,
        power_trace=trace,
        probe_seconds=outcome.probe_seconds,
        boundary_gap_pct=_boundary_gap_pct(run, figures.confirmed_rate_rps),
        sweep_strategy=strategy,
        telemetry=telemetry_at_confirmed(accepted),
        audits=audit_summary(run, accepted),
        power_validity=power_validity(run, power),
        power_nodes=nodes,
    )
