"""The simulated engine behind the probe protocol in virtual time: no HTTP, no clock.

:class:`VirtualServer` runs one probe exactly as the load generator does against a real server
(:mod:`tokenwatt.load.probe`): the workload's own arrival schedule and request lengths for the
probe's stream, warm-up then window, arrivals going on until every window request has finished,
a window request failed when it is not complete ``request_timeout_s`` after its send, and the
optional early stop. It drives the same :class:`~tokenwatt.sim.engine.EngineCore` the real-time
simulator runs, step after step with no clock, and hands what it saw to the same
:func:`~tokenwatt.load.record.build_probe_record`, so a virtual probe's record is computed by the
same code as a measured one. A minute of simulated serving costs about a second of CPU.

Differences from a measurement through ``tokenwatt sim``, all in the harness's favour and all
small: requests are "sent" exactly on schedule (no send lag, never client-bound), a token
"arrives" at the end of the step that produced it (no network, no framing), and every probe
starts with an idle engine (as it does in practice: the previous probe's requests are cancelled
when its window requests have finished), unless it ramps (``sweep.ramp``,
:mod:`tokenwatt.sweep`, "Ramp"): then it takes over the previous probe's engine with the
requests still in it, as the load generator leaves them running. The running batch is the
engine's own time average over the window (what ``vllm:num_requests_running`` sampled on
``/metrics`` approximates).

The prefix cache sees what the HTTP simulator would: the block hashes of each request's token
ids when the workload shares prefixes (:mod:`tokenwatt.load.prefix`), else one distinct key per
block (random prompts share nothing, and building them would cost more than the whole step
loop). Its counters at the window's ends become the probe's engine telemetry, so a virtual
probe reports the prefix-cache hit rate as a measured one does.

Without ``ignore_eos`` a simulated answer ends where the simulator's text would end it
(:meth:`~tokenwatt.sim.api.TextSource.natural_length`, seeded by the prompt as the HTTP server
seeds it), so the token counts agree with a real-time run of the same spec.

Multi-turn sessions (``workload.sessions``) are refused: a session's later turns are built from
the replies and sent after think times, which this loop, one request per arrival, does not model.
Measure them against ``tokenwatt sim`` in real time instead.
"""

from __future__ import annotations

import datetime as dt
import heapq
import math
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from tokenwatt.client.openai import GenerationRequest, RequestResult
from tokenwatt.errors import SpecError
from tokenwatt.load._shard import EarlyStopRule, ShardResult, tokens_inside
from tokenwatt.load.engine_metrics import EngineMetrics, EngineReading
from tokenwatt.load.record import StopNote, build_probe_record
from tokenwatt.load.workload import Workload
from tokenwatt.metrics import exceeding_to_fail
from tokenwatt.schema.run import ProbeRamp, ProbeRecord
from tokenwatt.schema.spec import SloSpec
from tokenwatt.sim.api import TextSource
from tokenwatt.sim.engine import EngineConfig, EngineCore, SimRequest
from tokenwatt.sim.prefix_cache import block_hashes
from tokenwatt.sweep import ProbePlan, warmup_when

__all__ = ["VirtualProbe", "VirtualServer"]

_NS = 1e9
_EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
"""Wall-clock origin of virtual time (records carry a start time; a virtual one says so)."""


@dataclass(frozen=True)
class VirtualProbe:
    """One probe run in virtual time."""

    record: ProbeRecord
    seconds: float
    """Virtual seconds the probe took: from its start to its last window request (or its stop)."""


class _Tracked:
    """One request in the engine, as the load generator would see it."""

    __slots__ = (
        "done",
        "in_window",
        "index",
        "input_tokens",
        "max_tokens",
        "rid",
        "sink",
        "status",
        "t_end_s",
        "t_sched_s",
        "times",
        "ttft_counted",
        "carried",
    )

    def __init__(
        self,
        index: int,
        t_sched_s: float,
        input_tokens: int,
        max_tokens: int,
        in_window: bool,
        sink: list[_Tracked],
    ) -> None:
        self.index = index
        self.rid = -1
        self.sink = sink
        self.t_sched_s = t_sched_s
        self.input_tokens = input_tokens
        self.max_tokens = max_tokens
        self.in_window = in_window
        self.times: list[float] = []
        self.done = False
        self.status = "ok"
        self.t_end_s = t_sched_s
        self.ttft_counted = False
        self.carried = False
        """Sent by an earlier probe (``sweep.ramp``): load, never measured here."""

    def notify(self, req: SimRequest, t_s: float) -> None:
        self.times.append(t_s)
        if req.done:
            self.done = True
            self.t_end_s = t_s
            self.sink.append(self)


class VirtualServer:
    """Runs probes of one workload against one simulated engine configuration, in virtual time.

    Args:
        config: the simulated engine (:meth:`tokenwatt.sim.launch.SimSettings.build`).
        workload: the request stream (:func:`tokenwatt.load.workload.build_workload`).
        request_timeout_s: a request not complete this long after its send has failed.
        ignore_eos: every answer runs to its ``max_tokens`` (else to the simulated text's end).
    """

    def __init__(
        self,
        config: EngineConfig,
        workload: Workload,
        *,
        request_timeout_s: float,
        ignore_eos: bool = True,
    ) -> None:
        if workload.sessions is not None:
            raise SpecError(
                "workload.sessions: virtual time ('tokenwatt plan', the capacity truth) does not"
                " simulate multi-turn sessions; measure them against the simulator in real time"
                " ('tokenwatt run' with engine.endpoint 'sim'), or remove workload.sessions to"
                " plan"
            )
        self.config = config
        self.workload = workload
        self.request_timeout_s = request_timeout_s
        self.ignore_eos = ignore_eos
        self._clock_ns = 0
        """Virtual monotonic clock: probes are laid end to end, as in a run."""
        self._carry: _Carry | None = None
        """What the last probe left in the engine, for a probe that ramps from it."""
        self._key_base = 0
        """Requests admitted by earlier probes: unique prompts' cache keys never repeat."""

    def _target_tokens(self, request: GenerationRequest | None, max_tokens: int) -> int:
        if request is None:
            return max_tokens  # ignore_eos: every answer runs to max_tokens
        if request.prompt_ids is not None:
            seed_text = ",".join(map(str, request.prompt_ids[:64]))
        else:
            seed_text = request.prompt_text or ""
        return max(1, min(max_tokens, TextSource(seed_text).natural_length()))

    def _admission(
        self, index: int, stream: int, rid: int, input_tokens: int, max_tokens: int, variant: int
    ) -> tuple[int, Sequence[int] | None]:
        """(tokens the answer will have, the prompt's block hashes) of request ``index``."""
        cfg = self.config
        caching = cfg.enable_prefix_caching and self.workload.api == "completions"
        shared = caching and self.workload.shares_prefixes
        request = None
        if not self.ignore_eos or shared:
            request = self.workload.request(index, stream=stream, variant=variant)
        hashes: Sequence[int] | None = None
        if shared:
            assert request is not None
            assert request.prompt_ids is not None
            hashes = block_hashes(request.prompt_ids, cfg.block_size)
        elif caching:
            full = input_tokens // cfg.block_size
            key = self._key_base + rid
            hashes = range(key << 32, (key << 32) + full)
        return self._target_tokens(None if self.ignore_eos else request, max_tokens), hashes

    def probe(
        self,
        plan: ProbePlan,
        *,
        index: int,
        slo: SloSpec,
    ) -> VirtualProbe:
        """Run one probe and return its record (see the module docstring).

        Args:
            plan: what to run, as :meth:`tokenwatt.load.probe.LoadGenerator.probe` takes it
                (its workload stream and content variant included; no stream: ``index``).
            index: position of the probe in the run.
            slo: the latency objective.
        """
        phase, rate_rps, warmup_s, window_s = (
            plan.phase,
            plan.rate_rps,
            plan.warmup_s,
            plan.window_s,
        )
        attempt, repeat = plan.attempt, plan.repeat
        early_stop, certify_pass = plan.early_stop, plan.certify_pass
        if plan.variant and not self.workload.varies_content:
            raise ValueError("this workload has no content variants (real prompts or sessions)")
        stream = index if plan.stream is None else plan.stream
        carry, self._carry = (self._carry if plan.ramp else None), None
        warmup_s = warmup_when(plan, carried=carry is not None)
        w0 = round(warmup_s * _NS) / _NS
        w1 = (round(warmup_s * _NS) + round(window_s * _NS)) / _NS
        rule: EarlyStopRule | None = None
        needed = 0
        planned = 0
        if early_stop or certify_pass:
            planned = self._window_count(rate_rps, w0, w1, stream)
            if planned > 0:
                needed = exceeding_to_fail(planned)
                rule = EarlyStopRule.for_slo(slo, count_waiting=self.ignore_eos)
        t0_ns = self._clock_ns
        run = _ProbeRun(
            self,
            rate_rps,
            w0,
            w1,
            stream,
            rule,
            needed,
            variant=plan.variant,
            planned=planned,
            stop_on_fail=early_stop,
            stop_on_pass=certify_pass,
            carry=carry,
        )
        end_s = run.run()
        self._clock_ns = t0_ns + round(end_s * _NS) + 1
        self._key_base += len(run.tracked)
        if run.stopped_s is None:  # an early stop cancels every request in flight
            self._carry = _Carry(run.core, (round(end_s * _NS) + 1) / _NS, index, rate_rps)
        shard = run.shard_result(t0_ns)
        stop: StopNote | None = None
        if run.stopped_s is not None:
            stop = StopNote(
                stopped_ns=t0_ns + round(run.stopped_s * _NS),
                planned_window_requests=planned,
                exceeding_needed=needed,
                ttft_exceeding=run.ttft_exceeding,
                tpot_exceeding=run.tpot_exceeding,
                outcome=run.stop_outcome,
            )
        record = build_probe_record(
            index=index,
            phase=phase,
            rate_rps=rate_rps,
            attempt=attempt,
            repeat=repeat,
            warmup_s=warmup_s,
            window_s=window_s,
            started_utc=_EPOCH + dt.timedelta(microseconds=t0_ns // 1000),
            t0_ns=t0_ns,
            shards=[shard],
            slo=slo,
            max_concurrency=1 << 30,
            running_samples=[run.running_mean] if run.running_mean is not None else None,
            stop=stop,
            engine_readings=run.engine_readings(t0_ns),
            ramp=(
                ProbeRamp(
                    from_probe=carry.index,
                    from_rate_rps=carry.rate_rps,
                    carried_requests=run.carried,
                )
                if carry is not None
                else None
            ),
            stream=stream,
            variant=plan.variant,
        )
        return VirtualProbe(record=record, seconds=end_s)

    def _window_count(self, rate_rps: float, w0: float, w1: float, stream: int) -> int:
        count = 0
        for offset in self.workload.arrivals(rate_rps, stream=stream):
            t = round(offset * _NS) / _NS
            if t >= w1:
                return count
            if t >= w0:
                count += 1
        return count  # pragma: no cover - arrival schedules never end


@dataclass(frozen=True)
class _Carry:
    """The engine a probe left, with its requests still in flight (``sweep.ramp``)."""

    core: EngineCore
    shift_s: float
    """The next probe's start on the old probe's clock."""
    index: int
    rate_rps: float


class _ProbeRun:
    """The state of one virtual probe."""

    def __init__(
        self,
        server: VirtualServer,
        rate_rps: float,
        w0: float,
        w1: float,
        stream: int,
        rule: EarlyStopRule | None,
        needed: int,
        *,
        variant: int = 0,
        planned: int = 0,
        stop_on_fail: bool = False,
        stop_on_pass: bool = False,
        carry: _Carry | None = None,
    ) -> None:
        self.server = server
        self.planned = planned
        self.stop_on_fail = stop_on_fail
        self.stop_on_pass = stop_on_pass
        self.window_finished = 0
        self.stop_outcome: Literal["fail", "pass"] = "fail"
        self.core = EngineCore(server.config) if carry is None else carry.core
        self.rate_rps = rate_rps
        self.w0 = w0
        self.w1 = w1
        self.stream = stream
        self.variant = variant
        self.rule = rule
        self.needed = needed
        self.tracked: list[_Tracked] = []
        self._sim: dict[int, SimRequest] = {}
        self.window_pending = 0
        self.all_window_scheduled = False
        self.ttft_exceeding = 0
        self.tpot_exceeding = 0
        self.stopped_s: float | None = None
        self.running_mean: float | None = None
        self.marks: list[tuple[float, float, int, int]] = []
        """(time, running_seq_s, prefix queried, prefix hit tokens) at the window's ends."""
        self.prefix_end = (0.0, 0, 0)
        """(time, prefix queried, prefix hit tokens) when the probe ended."""
        self.window_cut = 0
        self._deadlines: list[tuple[float, int]] = []
        self._ttft_due: list[tuple[float, int]] = []
        self._just_finished: list[_Tracked] = []
        self.carried = 0
        if carry is not None:
            self._take_over(carry)

    def _take_over(self, carry: _Carry) -> None:
        """Adopt the requests the previous probe left in the engine, on this probe's clock."""
        shift = carry.shift_s
        self.core.rebase(shift)
        for req in (*self.core.running, *self.core.waiting):
            old = req.listener
            assert isinstance(old, _Tracked)
            rec = _Tracked(
                old.index,
                old.t_sched_s - shift,
                old.input_tokens,
                old.max_tokens,
                False,
                self._just_finished,
            )
            rec.carried = True
            rec.times = [t - shift for t in old.times]
            rid = len(self.tracked)
            rec.rid = rid
            self.tracked.append(rec)
            self._sim[rid] = req
            req.listener = rec
            heapq.heappush(self._deadlines, (rec.t_sched_s + self.server.request_timeout_s, rid))
        self.carried = len(self.tracked)

    # -- driving ---------------------------------------------------------------------------

    def _arrivals(self) -> Iterator[tuple[int, float]]:
        offsets = self.server.workload.arrivals(self.rate_rps, stream=self.stream)
        for i, offset in enumerate(offsets):
            yield i, round(offset * _NS) / _NS

    def _admit(self, i: int, t_s: float) -> None:
        workload = self.server.workload
        n_in, n_out = workload.lengths(i, stream=self.stream)
        in_window = self.w0 <= t_s < self.w1
        rec = _Tracked(i, t_s, n_in, n_out, in_window, self._just_finished)
        rid = len(self.tracked)
        rec.rid = rid
        self.tracked.append(rec)
        target, hashes = self.server._admission(i, self.stream, rid, n_in, n_out, self.variant)
        req = SimRequest(
            rid,
            prompt_tokens=n_in,
            max_tokens=n_out,
            target_tokens=target,
            arrival_s=t_s,
            listener=rec,
            block_hashes=hashes,
        )
        self._sim[rid] = req
        self.core.add(req)
        heapq.heappush(self._deadlines, (t_s + self.server.request_timeout_s, rid))
        if in_window:
            self.window_pending += 1
            if self.rule is not None and self.rule.count_waiting:
                heapq.heappush(self._ttft_due, (t_s + self.rule.ttft_ms / 1000.0, rid))

    def run(self) -> float:
        """Simulate until every window request has finished (or the early stop); return its end."""
        core = self.core
        arrivals = self._arrivals()
        nxt: tuple[int, float] | None = next(arrivals)
        t = 0.0
        marks = self.marks
        st = core.stats
        while True:
            while nxt is not None and nxt[1] <= t:
                if nxt[1] >= self.w1:
                    self.all_window_scheduled = True
                self._admit(*nxt)
                nxt = next(arrivals)
            if nxt is not None and nxt[1] >= self.w1:
                self.all_window_scheduled = True
            self._expire(t)
            self._collect(t)
            if len(marks) < 2 and t >= (self.w0, self.w1)[len(marks)]:
                marks.append((t, st.running_seq_s, st.prefix_queried_tokens, st.prefix_hit_tokens))
            if self.stopped_s is not None or (
                self.all_window_scheduled and self.window_pending == 0
            ):
                break
            plan = core.schedule(t) if core.has_work else None
            if plan is None:
                # Idle: jump to the next event (an arrival, or a deadline of a queued request).
                events = [nxt[1]] if nxt is not None else []
                if self._deadlines:
                    events.append(self._deadlines[0][0])
                t = max(t, min(events))
                continue
            core.finish(plan, plan.end_s)
            t = plan.end_s
        end = t if self.stopped_s is None else self.stopped_s
        self.prefix_end = (t, st.prefix_queried_tokens, st.prefix_hit_tokens)
        if len(marks) == 2 and marks[1][0] > marks[0][0]:
            # The engine's own time average of the running count over the window, between the
            # step boundaries nearest its ends (what the running-request gauge approximates).
            (ta, ra, _, _), (tb, rb, _, _) = marks
            self.running_mean = max(0.0, (rb - ra) / (tb - ta))
        self._cut(end)
        return end

    def _expire(self, t: float) -> None:
        """Requests not complete ``request_timeout_s`` after their send have failed."""
        while self._deadlines and self._deadlines[0][0] <= t:
            deadline, rid = heapq.heappop(self._deadlines)
            rec = self.tracked[rid]
            if rec.done:
                continue
            rec.done = True
            rec.status = "timeout"
            rec.t_end_s = deadline
            self.core.abort(self._sim.pop(rid))
            self._finished(rec)

    def _collect(self, t: float) -> None:
        """Count window requests that finished, or passed the TTFT bound without a token."""
        finished, self._just_finished[:] = list(self._just_finished), []
        timeout = self.server.request_timeout_s
        for rec in finished:
            del self._sim[rec.rid]
            if rec.t_end_s - rec.t_sched_s > timeout:
                # It finished inside the step that crossed its deadline: the client gave up.
                rec.status = "timeout"
                rec.t_end_s = rec.t_sched_s + timeout
            self._finished(rec)
        rule = self.rule
        while rule is not None and self._ttft_due and self._ttft_due[0][0] <= t:
            due, rid = heapq.heappop(self._ttft_due)
            rec = self.tracked[rid]
            if not rec.done and len(rec.times) <= self._first_index(rec) and self.stopped_s is None:
                rec.ttft_counted = True
                self.ttft_exceeding += 1
                self._check_stop(due)

    def _finished(self, rec: _Tracked) -> None:
        if not rec.in_window:
            return
        self.window_pending -= 1
        rule = self.rule
        if rule is None or self.stopped_s is not None:
            return
        ttft, tpot = _ttft_tpot_ms(rec, first=self._first_index(rec))
        ok = rec.status == "ok"
        if not ok or (ttft is not None and tpot is not None):
            # Settled in both percentiles (see _shard.Shard._count_exceeding): only such
            # requests shrink what the pass certification must allow for.
            self.window_finished += 1
        if (not ok or (ttft is not None and ttft > rule.ttft_ms)) and not rec.ttft_counted:
            self.ttft_exceeding += 1
        if not ok or (tpot is not None and tpot > rule.tpot_ms):
            self.tpot_exceeding += 1
        self._check_stop(rec.t_end_s)

    def _first_index(self, rec: _Tracked) -> int:
        """Which of a request's tokens the first-token bound times.

        Its first, or its first answer token (after the reasoning a chat answer streams first)
        when the SLO bounds TTFAT.
        """
        rule = self.rule
        if rule is None or not rule.first_answer or self.server.workload.api != "chat":
            return 0
        return self.server.config.reasoning_tokens(rec.max_tokens)

    def _check_stop(self, t: float) -> None:
        if self.stopped_s is not None:
            return
        worst = max(self.ttft_exceeding, self.tpot_exceeding)
        if self.stop_on_fail and worst >= self.needed:
            self.stopped_s = t
            self.stop_outcome = "fail"
        elif self.stop_on_pass and worst + (self.planned - self.window_finished) < self.needed:
            # Even if every window request still to finish exceeded both bounds, neither p99
            # could pass its bound: the window has passed.
            self.stopped_s = t
            self.stop_outcome = "pass"

    def _cut(self, end: float) -> None:
        """At the end, window requests still in flight were cancelled; later ones never sent."""
        for rec in self.tracked:
            if rec.done or rec.t_sched_s > end:
                continue
            rec.done = True
            rec.status = "cancelled"
            rec.t_end_s = end
            if rec.in_window:
                self.window_cut += 1

    # -- results ---------------------------------------------------------------------------

    def engine_readings(self, t0_ns: int) -> list[EngineReading] | None:
        """The prefix-cache counters at the window's ends, as two scrapes of ``/metrics``.

        The window's end is the probe's when every window request finished before it (no request
        after the window was admitted by then). None when the cache counts nothing (prefix
        caching off) or the window was not reached: then a probe's record has no engine
        telemetry, as before the cache existed.
        """
        if not self.marks or not self.server.config.enable_prefix_caching:
            return None
        ends = [(t, q, h) for t, _, q, h in self.marks]
        if len(ends) == 1:
            ends.append(self.prefix_end)
        return [
            EngineReading(
                t_ns=t0_ns + round(t * _NS),
                metrics=EngineMetrics(
                    running=self.running_mean,
                    waiting=None,
                    kv_cache_usage=None,
                    kv_cache_memory_bytes=None,
                    prompt_tokens_total=None,
                    generation_tokens_total=None,
                    dialect="vllm",
                    prefix_cache_hits_total=float(hits),
                    prefix_cache_queries_total=float(queried),
                ),
            )
            for t, queried, hits in ends
        ]

    def shard_result(self, t0_ns: int) -> ShardResult:
        """What a shard would have measured."""
        result = ShardResult()
        w_start = t0_ns + round(self.w0 * _NS)
        w_end = t0_ns + round(self.w1 * _NS)
        end = self.stopped_s
        chat = self.server.workload.api == "chat"
        config = self.server.config
        for rec in self.tracked:
            if end is not None and rec.t_sched_s > end:
                continue  # never sent: the probe had stopped
            reasoning = config.reasoning_tokens(rec.max_tokens) if chat else 0
            record = _request_result(rec, t0_ns, reasoning=reasoning)
            if rec.carried:
                result.carried += 1
            else:
                result.sent += 1
            first, last = record.t_first_ns, record.t_last_ns
            if first is not None and last is not None and last > first:
                result.decode_intervals.append((first, last))
            result.window_emitted_tokens += tokens_inside(record, w_start, w_end)
            if rec.in_window:
                result.window.append(record)
        result.window_cut = self.window_cut
        result.ttft_exceeding = self.ttft_exceeding
        result.tpot_exceeding = self.tpot_exceeding
        result.max_in_flight = len(self.tracked)
        return result


def _ttft_tpot_ms(rec: _Tracked, *, first: int = 0) -> tuple[float | None, float | None]:
    """(time to token ``first`` (+inf when the answer never got that far), TPOT), ms."""
    times = rec.times
    if not times:
        return None, None
    ttft = (times[first] - rec.t_sched_s) * 1000.0 if len(times) > first else math.inf
    tpot = (times[-1] - times[0]) / (len(times) - 1) * 1000.0 if len(times) > 1 else None
    return ttft, tpot


def _request_result(rec: _Tracked, t0_ns: int, *, reasoning: int = 0) -> RequestResult:
    """``reasoning``: the first tokens the server streams as reasoning (a reasoning model)."""
    sched = t0_ns + round(rec.t_sched_s * _NS)
    chunks = array("q", (t0_ns + round(t * _NS) for t in rec.times))
    status = rec.status
    if status == "ok" and len(rec.times) == 0:
        status = "malformed_stream"  # pragma: no cover - a finished request always has a token
    return RequestResult(
        index=rec.index,
        t_send_ns=sched,
        t_end_ns=max(sched, t0_ns + round(rec.t_end_s * _NS)),
        status=status,
        error=None if status == "ok" else f"{status} (virtual time)",
        http_status=200,
        t_first_ns=chunks[0] if chunks else None,
        t_last_ns=chunks[-1] if chunks else None,
        t_first_answer_ns=chunks[reasoning] if len(chunks) > reasoning else None,
        reasoning_events=min(reasoning, len(chunks)),
        reasoning_tokens=min(reasoning, len(chunks)),
        chunk_ns=chunks,
        output_tokens=len(rec.times),
        usage_output_tokens=len(rec.times) if status == "ok" else None,
        input_tokens=rec.input_tokens,
        input_tokens_sent=rec.input_tokens,
        max_tokens=rec.max_tokens,
        finish_reason="length" if status == "ok" else None,
        t_sched_ns=sched,
    )
