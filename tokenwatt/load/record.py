"""A probe's record, computed from what its shards measured (pure).

See :mod:`tokenwatt.load.probe` for the definitions it applies (window requests, offered and
achieved rates, client-bound, running batch, early stop).

A probe stopped early covers the window requests sent before the stop; its offered and achieved
rates are taken over the part of the window before the stop (the rest was never offered), while
goodput keeps its definition (output tokens of successful window requests / ``window_s``).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from tokenwatt import audits, metrics
from tokenwatt.client.openai import RequestResult
from tokenwatt.load._shard import ShardResult
from tokenwatt.load.engine_metrics import EngineReading
from tokenwatt.load.session import SessionTally
from tokenwatt.schema.run import (
    EarlyStop,
    EngineTelemetry,
    LatencyStats,
    LoadActor,
    ProbeAudits,
    ProbePhase,
    ProbeRamp,
    ProbeRecord,
    RequestTable,
    SessionStats,
)
from tokenwatt.schema.spec import SloSpec
from tokenwatt.telemetry import engine_telemetry

__all__ = ["StopNote", "build_probe_record", "send_lags_ms"]

_NS = 1e9


@dataclass(frozen=True)
class StopNote:
    """Why and when a probe was stopped early (the load generator's tally at the stop)."""

    stopped_ns: int
    planned_window_requests: int
    exceeding_needed: int
    ttft_exceeding: int
    tpot_exceeding: int
    outcome: Literal["fail", "pass"] = "fail"
    """The window's verdict that was certain at the stop."""


def send_lags_ms(window: Sequence[RequestResult]) -> list[float]:
    """Each request's send lag, ms, as a probe record holds it.

    At least 0 (the pacer's spin may send a hair early); 0 outside a probe (no scheduled time).
    """
    return [max(0.0, r.send_lag_ms or 0.0) for r in window]


def _table(
    window: Sequence[RequestResult], window_start_ns: int, *, sessions: bool = False
) -> RequestTable:
    rows = sorted(window, key=lambda r: (r.t_sched_ns or 0, r.index))
    ok = [r.ok for r in rows]
    reasoning = any(r.reasoning_events or r.reasoning_tokens for r in rows)
    return RequestTable(
        t_sched_s=[((r.t_sched_ns or 0) - window_start_ns) / _NS for r in rows],
        send_lag_ms=send_lags_ms(rows),
        ttft_ms=[r.ttft_ms if good else None for r, good in zip(rows, ok, strict=True)],
        tpot_ms=[r.tpot_ms if good else None for r, good in zip(rows, ok, strict=True)],
        e2e_ms=[r.e2e_ms if good else None for r, good in zip(rows, ok, strict=True)],
        input_tokens=[r.input_tokens for r in rows],
        output_tokens=[r.output_tokens for r in rows],
        status=[r.status for r in rows],
        ttfat_ms=[r.ttfat_ms if good else None for r, good in zip(rows, ok, strict=True)]
        if reasoning
        else None,
        reasoning_tokens=[r.reasoning_tokens for r in rows] if reasoning else None,
        session=[r.index for r in rows] if sessions else None,
        turn=[r.turn or 0 for r in rows] if sessions else None,
    )


def _itl_stats(window: Sequence[RequestResult]) -> LatencyStats:
    """ITL over the window: every gap of every successful request, one +inf per failed one."""
    parts: list[np.ndarray] = []
    failed = 0
    for r in window:
        if not r.ok:
            failed += 1
        elif len(r.chunk_ns) > 1:
            parts.append(np.diff(np.asarray(r.chunk_ns, dtype=np.int64)) / 1e6)
    if failed:
        parts.append(np.full(failed, math.inf))
    if not parts:
        return LatencyStats(count=0)
    return metrics.latency_stats(np.concatenate(parts))


def build_probe_record(
    *,
    index: int,
    phase: ProbePhase,
    rate_rps: float,
    attempt: int,
    repeat: int | None,
    warmup_s: float,
    window_s: float,
    started_utc: dt.datetime,
    t0_ns: int,
    shards: Sequence[ShardResult],
    slo: SloSpec,
    max_concurrency: int,
    running_samples: Sequence[float] | None = None,
    keep_requests: bool = True,
    stop: StopNote | None = None,
    engine_readings: Sequence[EngineReading] | None = None,
    scrape_errors: int = 0,
    scheduled: int | None = None,
    mean_turns: float = 1.0,
    lost_reasons: Sequence[str] = (),
    load_actors: Sequence[LoadActor] | None = None,
    ramp: ProbeRamp | None = None,
    stream: int | None = None,
    variant: int = 0,
) -> ProbeRecord:
    """Compute a probe's record from what its shards measured (pure).

    Args:
        index: position of the probe in the run.
        phase: why it ran.
        rate_rps: target arrival rate.
        attempt: confirm: back-off attempt.
        repeat: confirm: repeat number.
        warmup_s: warm-up length, s.
        window_s: window length, s.
        started_utc: wall-clock start.
        t0_ns: probe start on the monotonic clock (the window starts ``warmup_s`` later).
        shards: what each worker measured.
        slo: the latency objective.
        max_concurrency: the concurrency cap, for messages.
        running_samples: engine gauge samples inside the window; None or empty = Little's law.
        keep_requests: include the window requests table (the run file keeps it).
        stop: set when the probe was stopped early because it had provably failed.
        engine_readings: the engine's scrapes inside the window (:mod:`tokenwatt.telemetry`);
            their running gauge replaces ``running_samples``.
        scrape_errors: scrapes of the engine's page that failed.
        scheduled: window requests the arrival schedule held (the conservation audit).
        mean_turns: sessions: the workload's mean turns per session, for the record.
        lost_reasons: why the probe is client-side failed beyond what its requests show (a
            load actor or node lost mid-probe, :mod:`tokenwatt.load.ray_pool`).
        load_actors: Ray: where each shard ran, with its clock audit.
        ramp: ``sweep.ramp``: the probe started on the previous one's requests still in flight.
        stream: the workload stream its requests came from (None: its index).
        variant: the stream's content variant.
    """
    window_start_ns = t0_ns + round(warmup_s * _NS)
    window_end_ns = window_start_ns + round(window_s * _NS)
    window = [r for shard in shards for r in shard.window]
    session_tallies = [s.sessions for s in shards if s.sessions is not None] or None
    n = len(window)
    early: EarlyStop | None = None
    if stop is not None:
        cut = sum(s.window_cut for s in shards)
        unsent = max(0, stop.planned_window_requests - n)
        if cut or unsent:  # else every window request had finished: a complete probe
            early = EarlyStop(
                outcome=stop.outcome,
                stopped_ns=stop.stopped_ns,
                planned_window_requests=stop.planned_window_requests,
                exceeding_needed=stop.exceeding_needed,
                ttft_exceeding=stop.ttft_exceeding,
                tpot_exceeding=stop.tpot_exceeding,
                cut_window_requests=cut,
                unsent_window_requests=unsent,
            )
    table = _table(window, window_start_ns, sessions=session_tallies is not None)
    ok_rows = [r for r in window if r.ok]
    send_lags = np.sort(np.asarray(table.send_lag_ms, dtype=np.float64))
    send_lag_p99 = metrics.nearest_rank(send_lags, 99.0) if n else 0.0
    last_send_ns = max((r.t_send_ns for r in window), default=window_start_ns)
    offered_s = window_s
    if early is not None:
        # Only the part of the window before the stop was offered.
        offered_s = max(1e-9, (min(early.stopped_ns, window_end_ns) - window_start_ns) / _NS)
    span_s = max(offered_s, (last_send_ns - window_start_ns) / _NS)
    offered = n / offered_s
    achieved = n / span_s
    slot_waits = sum(s.slot_waits for s in shards)
    slot_wait_s = sum(s.slot_wait_ns for s in shards) / _NS
    client_errors = sum(1 for r in window if r.status == "client_error")
    reasons = metrics.client_bound_reasons(
        offered_rate_rps=offered,
        achieved_rate_rps=achieved,
        send_lag_p99_ms=send_lag_p99,
        slot_waits=slot_waits,
        slot_wait_s=slot_wait_s,
        max_concurrency=max_concurrency,
        client_errors=client_errors,
        harness_errors=sum(s.harness_errors for s in shards),
    ) + list(lost_reasons)
    ttft = metrics.table_latency_stats(table, "ttft_ms")
    ttfat = metrics.table_latency_stats(table, "ttfat_ms") if table.ttfat_ms is not None else None
    tpot = metrics.table_latency_stats(table, "tpot_ms")
    e2e = metrics.table_latency_stats(table, "e2e_ms")
    client_bound = bool(reasons)
    telemetry: EngineTelemetry | None = None
    if engine_readings is not None:
        telemetry = engine_telemetry(
            engine_readings,
            window_start_ns=window_start_ns,
            window_s=window_s,
            scrape_errors=scrape_errors,
        )
        running_samples = [
            r.metrics.running for r in engine_readings if r.metrics.running is not None
        ]
    if running_samples:
        batch: float = float(sum(running_samples) / len(running_samples))
        batch_source = "metrics"
    else:
        intervals = [iv for shard in shards for iv in shard.decode_intervals]
        batch = metrics.littles_law_batch(intervals, window_start_ns, window_end_ns)
        batch_source = "littles_law"
    examples: dict[str, str] = {}
    for r in window:
        if not r.ok and r.status not in examples and r.error:
            examples[r.status] = r.error
    probe_audits = _audits(
        window,
        telemetry=telemetry,
        achieved_rate_rps=achieved,
        scheduled=scheduled,
        never_sent=early.unsent_window_requests if early is not None else 0,
        statuses=table.status,
        warmup_s=warmup_s,
        window_s=window_s,
        rate_rps=rate_rps,
        carried_requests=ramp.carried_requests if ramp is not None else None,
    )
    return ProbeRecord(
        index=index,
        phase=phase,
        rate_rps=rate_rps,
        attempt=attempt,
        repeat=repeat,
        warmup_s=warmup_s,
        window_s=window_s,
        started_utc=started_utc,
        window_start_ns=window_start_ns,
        window_end_ns=window_end_ns,
        end_ns=max([window_end_ns, *(r.t_end_ns for r in window)]),
        window_requests=n,
        ok=len(ok_rows),
        failed=n - len(ok_rows),
        failures_by_cause=metrics.failures_by_cause(table.status),
        failure_examples=examples,
        output_tokens=sum(r.output_tokens for r in ok_rows),
        goodput_tok_s=metrics.goodput_tok_s(table, window_s),
        window_emitted_tokens=sum(s.window_emitted_tokens for s in shards),
        request_throughput_rps=metrics.request_throughput_rps(table, window_s),
        offered_rate_rps=offered,
        achieved_rate_rps=achieved,
        send_lag_p99_ms=send_lag_p99,
        send_lag_max_ms=float(send_lags[-1]) if n else 0.0,
        slot_wait_s=slot_wait_s,
        client_bound=client_bound,
        client_bound_reasons=reasons,
        load_actors=list(load_actors) if load_actors is not None else None,
        ramp=ramp,
        stream=stream,
        variant=variant,
        ttft_ms=ttft,
        ttfat_ms=ttfat,
        tpot_ms=tpot,
        itl_ms=_itl_stats(window),
        e2e_ms=e2e,
        slo_pass=(early is None or early.outcome == "pass")
        and metrics.slo_pass(
            first_token_ms=ttft if slo.first_token == "ttft" else (ttfat or ttft),
            tpot_ms=tpot,
            slo=slo,
            client_bound=client_bound,
        ),
        workers=max(1, len(shards)),
        running_batch_mean=batch,
        batch_source=batch_source,
        output_length_violations=sum(1 for r in window if r.output_length_violation),
        usage_mismatches=sum(1 for r in window if r.usage_mismatch),
        approximate_output_tokens=sum(1 for r in ok_rows if r.output_tokens_approx),
        reasoning_tokens=sum(r.reasoning_tokens for r in ok_rows)
        if table.reasoning_tokens is not None
        else None,
        approximate_reasoning_tokens=sum(1 for r in ok_rows if r.reasoning_tokens_approx),
        max_in_flight=sum(s.max_in_flight for s in shards),
        client_cpu_s=sum(s.cpu_s for s in shards),
        client_preemptions=sum(s.preemptions for s in shards),
        requests=table if keep_requests else None,
        engine=telemetry,
        audits=probe_audits,
        early_stop=early,
        sessions=_session_stats(session_tallies, mean_turns) if session_tallies else None,
    )


def _session_stats(tallies: Sequence[SessionTally], mean_turns: float) -> SessionStats:
    total = SessionTally()
    for tally in tallies:
        total.add(tally)
    return SessionStats(
        started=total.started,
        completed=total.completed,
        context_ended=total.context_ended,
        cut=total.cut,
        unsent_turns=total.unsent_turns,
        cut_causes=dict(sorted(total.cut_causes.items())),
        mean_turns=max(1.0, mean_turns),
    )


def _audits(
    window: Sequence[RequestResult],
    *,
    telemetry: EngineTelemetry | None,
    achieved_rate_rps: float,
    scheduled: int | None,
    never_sent: int,
    statuses: Sequence[str],
    warmup_s: float,
    window_s: float,
    rate_rps: float,
    carried_requests: int | None,
) -> ProbeAudits:
    littles = None
    e2e_s = [r.e2e_ms / 1000.0 for r in window if r.ok]
    if (
        telemetry is not None
        and telemetry.running_mean is not None
        and telemetry.waiting_mean is not None
        and e2e_s
    ):
        littles = audits.littles_law(
            arrival_rate_rps=achieved_rate_rps,
            mean_time_in_system_s=math.fsum(e2e_s) / len(e2e_s),
            engine_in_system=telemetry.running_mean + telemetry.waiting_mean,
        )
    return ProbeAudits(
        littles_law=littles,
        conservation=(
            audits.conservation(scheduled=scheduled, statuses=statuses, never_sent=never_sent)
            if scheduled is not None
            else None
        ),
        tokens=audits.token_accounting(window),
        steady_state=audits.steady_state(
            warmup_s=warmup_s,
            window_s=window_s,
            durations_s=[
                (r.t_end_ns - r.t_send_ns) / 1e9 for r in window if r.status != "cancelled"
            ],
            rate_rps=rate_rps,
            carried_requests=carried_requests,
        )
        if window
        else None,
    )
