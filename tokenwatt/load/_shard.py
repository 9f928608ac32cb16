"""One share of a probe's requests on one event loop (worker processes: :mod:`._workers`).

A probe with W workers gives request ``i`` to worker ``i mod W``. Every worker walks the same
seeded schedule (offsets from a common start time on the system-wide monotonic clock) and builds
its own requests, so nothing but the start, a "window done" note and the results cross process
boundaries.

Pacing: asyncio's timers are only as precise as the selector's timeout, and epoll takes whole
milliseconds (asyncio rounds up), so a plain ``sleep`` wakes up to 1 ms late and high rates are
under-delivered without anyone noticing. Worker processes therefore run on
:func:`precise_event_loop`, whose selector waits on the epoll descriptor with ``select()``
(microsecond timeout) before collecting events with a zero-timeout ``epoll_wait``: timers fire
within tens of microseconds, with no busy waiting. On another loop, ``spin_s`` (default 0) makes
the sender wake that much early and yield to the loop until the exact time (busy, but every
response callback keeps running). The request is then written synchronously
(:meth:`OpenAIClient.submit`), so the send lag is the sender's lateness, no more. And when the
loop is busy reading responses as a request falls due, a hook that runs before each network read
sends it there and then, instead of after the whole batch of ready callbacks.

Sessions (``workload.sessions``, :mod:`tokenwatt.load.session`): arrival ``i`` starts session
``i`` (on worker ``i mod W``, with all its turns). When a turn's reply ends, the next turn is
scheduled ``think_time_s`` after the reply's last byte, on a timer; a turn is a window request
when that scheduled send falls inside the window, and it counts as pending from the moment it is
scheduled. As a turn can still be scheduled inside the window until the window ends, the
window is complete only once its end has passed, the arrivals have passed it, and every window
turn has finished.

Early stop (``sweep.early_stop``): with an :class:`EarlyStopRule` in the plan, the shard counts
its window requests known to exceed the TTFT bound (finished over it, failed, or still without a
first token once the bound has passed) and the TPOT bound (finished over it, or failed), and
reports both counts on every change. Whoever sums the shards' counts (:class:`ExceedTally`)
stops the probe once either reaches the number that proves the p99 over its bound.
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import logging
import math
import resource
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from tokenwatt.client.openai import (
    GenerationRequest,
    OpenAIClient,
    PreparedRequest,
    RequestResult,
    Submitted,
)
from tokenwatt.load.precise_loop import precise_event_loop, reduce_timer_slack
from tokenwatt.load.session import Conversation, SessionTally
from tokenwatt.load.workload import Workload
from tokenwatt.schema.spec import SloSpec

__all__ = [
    "EarlyStopRule",
    "ExceedTally",
    "Shard",
    "ShardPlan",
    "ShardResult",
    "precise_event_loop",
    "reduce_timer_slack",
]

logger = logging.getLogger(__name__)

DEFAULT_SPIN_S = 0.0
"""How long before a request is due the sender stops sleeping and starts yielding."""

HARNESS_ERROR = "harness_error"
"""The cut cause of a session whose next turn tokenwatt failed to build."""
_LATE_SENDS_PER_YIELD = 4
_NEVER = 1 << 62


@dataclass(frozen=True, slots=True)
class EarlyStopRule:
    """When a window request counts against the SLO before the probe is over."""

    ttft_ms: float
    """First-token bound: a window request over it (or failed) counts."""
    tpot_ms: float
    """TPOT bound: a finished window request over it (or failed) counts."""
    count_waiting: bool = True
    """A request still without output text once ``ttft_ms`` has passed counts as over the TTFT
    bound. Sound only when every successful request produces text (``ignore_eos``): a request
    that legitimately ends with no text has no TTFT and is left out of the percentile."""
    report_finished: bool = False
    """Report every settled window request too (the pass certification counts them): failed,
    or finished with both a TTFT and a TPOT."""
    first_answer: bool = False
    """The first-token bound is on the first answer token (``slo.ttfat_p99_ms``): a request
    that streamed reasoning and no answer counts as over it."""

    @classmethod
    def for_slo(
        cls, slo: SloSpec, *, count_waiting: bool, report_finished: bool = False
    ) -> EarlyStopRule:
        """The rule of an SLO: its first-token bound (TTFT or TTFAT) and its TPOT bound."""
        return cls(
            ttft_ms=slo.first_token_p99_ms,
            tpot_ms=slo.tpot_p99_ms,
            count_waiting=count_waiting,
            report_finished=report_finished,
            first_answer=slo.first_token == "ttfat",
        )

    def first_token_ms(self, record: RequestResult) -> float | None:
        """The request's time against the first-token bound, ms.

        Its TTFT, or its TTFAT (+inf when it answered nothing after some output, as the
        statistics count it).
        """
        if not self.first_answer:
            return record.ttft_ms
        if record.ttfat_ms is not None:
            return record.ttfat_ms
        return math.inf if record.ttft_ms is not None else None

    def waiting(self, submitted: Submitted) -> bool:
        """Whether the request still has no token the bound counts."""
        first = submitted.t_first_answer_ns if self.first_answer else submitted.t_first_ns
        return first is None


class ExceedTally:
    """Sums the shards' counts of window requests over a bound; says when a verdict is proven.

    Args:
        shards: how many shards report.
        needed: window requests over one bound that prove the p99 over it
            (:func:`tokenwatt.metrics.exceeding_to_fail` of the planned window requests).
        planned: window requests the schedule holds (for the pass certification).
        stop_on_fail: stop once either count reaches ``needed`` (the p99 is over its bound).
        stop_on_pass: stop once the window requests not yet settled, all counted as over, could
            not bring either count to ``needed`` (both p99s are within their bounds). A request
            settles when it fails or finishes with both a TTFT and a TPOT; one that ends with
            no text or a single token stays unsettled, since leaving a percentile out lowers
            the count that would fail it by as much as counting it over would raise it.
    """

    def __init__(
        self,
        shards: int,
        needed: int,
        *,
        planned: int = 0,
        stop_on_fail: bool = True,
        stop_on_pass: bool = False,
    ) -> None:
        if needed < 1:
            raise ValueError("needed must be at least 1")
        self.needed = needed
        self.planned = planned
        self.stop_on_fail = stop_on_fail
        self.stop_on_pass = stop_on_pass
        self._ttft = [0] * shards
        self._tpot = [0] * shards
        self._finished = [0] * shards
        self.stopped_ns: int | None = None
        """Monotonic clock when a verdict was first proven (None if it never was)."""
        self.outcome: Literal["fail", "pass"] = "fail"
        """The verdict proven at ``stopped_ns``."""

    @property
    def ttft_exceeding(self) -> int:
        """Window requests known to exceed the TTFT bound, over all shards."""
        return sum(self._ttft)

    @property
    def tpot_exceeding(self) -> int:
        """Window requests known to exceed the TPOT bound, over all shards."""
        return sum(self._tpot)

    def update(
        self, shard: int, ttft_exceeding: int, tpot_exceeding: int, finished: int = 0
    ) -> bool:
        """Record a shard's counts; True exactly once: when the probe's verdict is first proven."""
        self._ttft[shard] = max(self._ttft[shard], ttft_exceeding)
        self._tpot[shard] = max(self._tpot[shard], tpot_exceeding)
        self._finished[shard] = max(self._finished[shard], finished)
        if self.stopped_ns is not None:
            return False
        worst = max(self.ttft_exceeding, self.tpot_exceeding)
        if self.stop_on_fail and worst >= self.needed:
            self.outcome = "fail"
        elif self.stop_on_pass and worst + (self.planned - sum(self._finished)) < self.needed:
            # Even if every window request still to finish exceeded both bounds, neither p99
            # could exceed its bound: the window has passed.
            self.outcome = "pass"
        else:
            return False
        self.stopped_ns = time.monotonic_ns()
        return True


class _Watched:
    """A window request watched for the early stop."""

    __slots__ = ("submitted", "timer", "ttft_counted")

    def __init__(self) -> None:
        self.submitted: Submitted | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.ttft_counted = False


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """What one shard runs for one probe."""

    rate_rps: float
    warmup_s: float
    window_s: float
    stream: int
    t0_ns: int
    """Probe start on the monotonic clock: arrival offsets count from here."""
    variant: int = 0
    """Content variant of the stream (:mod:`tokenwatt.load.workload`)."""
    shard: int = 0
    shards: int = 1
    max_concurrency: int = 8192
    """This shard's share of the concurrency cap."""
    early_stop: EarlyStopRule | None = None
    """Count window requests over the SLO as they finish (``sweep.early_stop``)."""
    ramp: bool = False
    """Start on the requests the previous probe left in flight (``sweep.ramp``); else they are
    cancelled first."""
    keep_running: bool = False
    """At the end, leave the requests still in flight running (once every window request has
    finished), for a next probe that ramps; else they are cancelled."""


@dataclass(slots=True)
class ShardResult:
    """What one shard measured."""

    window: list[RequestResult] = field(default_factory=list)
    """The shard's window requests, all finished."""
    decode_intervals: list[tuple[int, int]] = field(default_factory=list)
    """(first token, last token) of every request that produced two chunks or more, ns."""
    sent: int = 0
    """Requests sent in total (warm-up, window and drain)."""
    carried: int = 0
    """``sweep.ramp``: requests of earlier probes still in flight when this one started."""
    slot_waits: int = 0
    """Window requests that waited for a concurrency slot."""
    slot_wait_ns: int = 0
    """Their total wait, ns."""
    max_in_flight: int = 0
    cpu_s: float = 0.0
    """CPU time this shard's process spent during the probe, s."""
    preemptions: int = 0
    """Involuntary context switches of this shard's process during the probe (CPU contention)."""
    ttft_exceeding: int = 0
    """Early stop: window requests known to exceed the TTFT bound (or failed)."""
    tpot_exceeding: int = 0
    """Early stop: window requests known to exceed the TPOT bound (or failed)."""
    window_cut: int = 0
    """Window requests still in flight when the shard was stopped (cancelled)."""
    sessions: SessionTally | None = None
    """Sessions: what happened to them (None without ``workload.sessions``)."""
    harness_errors: int = 0
    """Sessions cut because tokenwatt itself failed to build their next turn (a bug, logged
    with its traceback): the load was not what was planned, so the probe is client-bound."""
    window_emitted_tokens: float = 0.0
    """Output tokens that arrived inside the window, from any request (warm-up, window or
    after): each request's content chunks timed inside ``[window start, window end)``, scaled
    by its tokens per chunk. The engine's token rate over the window, for the MBU estimate."""


def tokens_inside(record: RequestResult, start_ns: int, end_ns: int) -> float:
    """Output tokens of ``record`` that arrived in ``[start_ns, end_ns)`` (pure).

    Its content chunks timed inside, times its tokens per chunk (the server's usage over the
    chunk count; 1 when it sent no usage, as then tokens were counted from chunks).
    """
    chunks = record.chunk_ns
    if not chunks:
        return 0.0
    inside = bisect.bisect_left(chunks, end_ns) - bisect.bisect_left(chunks, start_ns)
    per_chunk = record.output_tokens / len(chunks) if record.output_tokens else 1.0
    return inside * per_chunk


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Shard:
    """Sends one share of a probe's requests and collects their results.

    Args:
        client: an open client, used by this shard only.
        workload: the request stream.
        spin_s: see :data:`DEFAULT_SPIN_S`.
    """

    def __init__(
        self, client: OpenAIClient, workload: Workload, *, spin_s: float = DEFAULT_SPIN_S
    ) -> None:
        self.client = client
        self.workload = workload
        self._spin_ns = int(spin_s * 1e9)
        self._stopped = False
        self._wake_future: asyncio.Future[None] | None = None
        self._due: tuple[PreparedRequest, int, bool] | None = None
        self._due_ns = _NEVER
        self._queue: deque[tuple[PreparedRequest, int, bool, int]] = deque()
        self._in_flight = 0
        self._cap = 1
        self._window_pending = 0
        self._all_window_scheduled = False
        self._window_done_sent = False
        self._window_ns = (0, 0)
        self._on_window_done: Callable[[], None] = lambda: None
        self._rule: EarlyStopRule | None = None
        self._on_exceed: Callable[[int, int, int], None] = lambda ttft, tpot, done: None
        self._window_finished = 0
        self._watched: set[_Watched] = set()
        self._result = ShardResult()
        self._window_closed = True
        self._t0_ns = 0
        self._window_rel_ns = (0, 0)
        self._conversations: dict[int, Conversation] = {}
        self._turn_timers: dict[int, asyncio.TimerHandle] = {}
        self._tally: SessionTally | None = None

    def stop(self) -> None:
        """Stop sending (every window request of every shard has finished). Idempotent."""
        self._stopped = True
        if self._wake_future is not None:
            _wake(self._wake_future)

    async def run(
        self,
        plan: ShardPlan,
        *,
        on_window_done: Callable[[], None],
        on_exceed: Callable[[int, int, int], None] | None = None,
    ) -> ShardResult:
        """Send this shard's share of the schedule until :meth:`stop`; return what was measured.

        ``on_window_done`` is called once, when every window request of this shard has finished
        (with one shard, it should call :meth:`stop`). With ``plan.early_stop``, ``on_exceed``
        receives this shard's counts of window requests over the TTFT and TPOT bounds, and of
        its finished window requests, each time one of the first two grows (and, with
        ``report_finished``, each time a window request finishes).
        """
        if not plan.ramp and self.client.in_flight:
            self.client.cancel_all("the next probe starts from an idle server")
        self._stopped = False
        self._queue.clear()
        # Requests the previous probe left running (sweep.ramp) hold their slots until they end.
        self._in_flight = self.client.in_flight
        self._cap = max(1, plan.max_concurrency)
        self._window_pending = 0
        self._all_window_scheduled = False
        self._window_done_sent = False
        self._on_window_done = on_window_done
        self._rule = plan.early_stop
        self._on_exceed = on_exceed or (lambda ttft, tpot, done: None)
        self._window_finished = 0
        self._watched.clear()
        self._result = result = ShardResult(carried=self._in_flight)
        warm_ns = round(plan.warmup_s * 1e9)
        end_ns = warm_ns + round(plan.window_s * 1e9)
        self._window_ns = (plan.t0_ns + warm_ns, plan.t0_ns + end_ns)
        self._t0_ns = plan.t0_ns
        self._window_rel_ns = (warm_ns, end_ns)
        sessions = self.workload.sessions is not None
        self._conversations.clear()
        self._turn_timers.clear()
        self._tally = result.sessions = SessionTally() if sessions else None
        self._window_closed = not sessions
        close_timer: asyncio.TimerHandle | None = None
        if sessions:
            loop = asyncio.get_running_loop()
            close_in_s = max(0.0, (plan.t0_ns + end_ns - time.monotonic_ns()) / 1e9)
            close_timer = loop.call_later(close_in_s, self._close_window)
        offsets = self.workload.arrivals(plan.rate_rps, stream=plan.stream)
        self.client.set_io_hook(self._io_hook)
        late = 0
        # A full garbage collection over the records of a long probe stops the loop for tens of
        # milliseconds (send lag); the records hold no reference cycles, so collect afterwards.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        try:
            for i, offset in enumerate(offsets):
                if i % plan.shards != plan.shard:
                    continue
                rel_ns = round(offset * 1e9)
                if rel_ns >= end_ns and not self._all_window_scheduled:
                    self._all_window_scheduled = True
                    self._check_window()
                if self._stopped:
                    break
                prepared = self.client.prepare(self._first_request(i, plan.stream, plan.variant))
                t_sched = plan.t0_ns + rel_ns
                in_window = warm_ns <= rel_ns < end_ns
                if t_sched > time.monotonic_ns():
                    late = 0
                    self._due = (prepared, t_sched, in_window)
                    self._due_ns = t_sched
                    await self._pace(t_sched)
                    if self._stopped:
                        break
                    if self._due is not None:  # the timer won: send now
                        self._fire_due()
                else:
                    # Behind schedule: send at once, but let responses be read now and then.
                    late += 1
                    if late % _LATE_SENDS_PER_YIELD == 0:
                        await asyncio.sleep(0)
                        if self._stopped:
                            break
                    self._launch(prepared, t_sched, in_window)
        finally:
            if gc_was_enabled:
                gc.enable()
            after = resource.getrusage(resource.RUSAGE_SELF)
            result.cpu_s = (after.ru_utime + after.ru_stime) - (usage.ru_utime + usage.ru_stime)
            result.preemptions = after.ru_nivcsw - usage.ru_nivcsw
            self._stopped = True
            self._due = None
            self._due_ns = _NEVER
            if close_timer is not None:
                close_timer.cancel()
            for timer in self._turn_timers.values():
                timer.cancel()
            self._turn_timers.clear()
            self.client.set_io_hook(None)
            self._queue.clear()
            for watched in self._watched:
                if watched.timer is not None:
                    watched.timer.cancel()
            self._watched.clear()
            if self._window_pending or not plan.keep_running:
                self.client.cancel_all(
                    "the probe was stopped before this window request finished"
                    if self._window_pending
                    else "the probe's window requests have all finished"
                )
            # Requests left running report to a result nobody reads, until the next probe's.
            self._result = ShardResult()
        return result

    def _io_hook(self) -> None:
        # Runs before every network read is processed: a request that fell due while the loop
        # was busy with other responses is sent now, not after the whole batch of callbacks.
        if self._due is not None and time.monotonic_ns() >= self._due_ns:
            self._fire_due()

    def _fire_due(self) -> None:
        due = self._due
        if due is None:
            return
        self._due = None
        self._due_ns = _NEVER
        self._launch(*due)
        if self._wake_future is not None:
            _wake(self._wake_future)

    async def _pace(self, t_sched_ns: int) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopped and self._due is not None:
            remaining = t_sched_ns - time.monotonic_ns()
            if remaining <= 0:
                return
            if remaining > self._spin_ns:
                future: asyncio.Future[None] = loop.create_future()
                self._wake_future = future
                handle = loop.call_later((remaining - self._spin_ns) / 1e9, _wake, future)
                try:
                    await future
                finally:
                    handle.cancel()
                    self._wake_future = None
            else:
                await asyncio.sleep(0)

    def _first_request(self, index: int, stream: int, variant: int) -> GenerationRequest:
        if self._tally is None:
            return self.workload.request(index, stream=stream, variant=variant)
        conversation = Conversation(self.workload, index, stream=stream)
        self._conversations[index] = conversation
        self._tally.started += 1
        return conversation.first()

    def _close_window(self) -> None:
        # The window's end has passed: no later turn can be scheduled inside it any more.
        self._window_closed = True
        self._check_window()

    def _end_session(self, index: int, how: str, *, unsent: int = 0) -> None:
        tally = self._tally
        assert tally is not None
        self._conversations.pop(index, None)
        if how == "completed":
            tally.completed += 1
        elif how == "context":
            tally.context_ended += 1
        else:
            tally.cut += 1
            tally.unsent_turns += unsent
            tally.cut_causes[how] += 1

    def _next_turn(self, record: RequestResult) -> None:
        """A session's turn finished: end the session, or schedule its next turn."""
        conversation = self._conversations.get(record.index)
        if conversation is None or self._stopped:
            return  # not a session's turn, or the probe is over (the session stays open)
        unsent = conversation.turns - conversation.turn - 1
        if not record.ok:
            if record.status != "cancelled":  # a harness cancel ends the probe, not the session
                self._end_session(record.index, record.status, unsent=unsent)
            return
        step = conversation.after(record)
        if isinstance(step, str):
            self._end_session(record.index, step, unsent=unsent)
            return
        think_ns = round(conversation.think_time_s(conversation.turn) * 1e9)
        t_sched = record.t_end_ns + think_ns
        warm_ns, end_ns = self._window_rel_ns
        in_window = warm_ns <= t_sched - self._t0_ns < end_ns
        prepared = self.client.prepare(step)  # before counting it: it may raise
        if in_window:
            self._window_pending += 1  # pending from now: the window waits for it
        delay_s = max(0.0, (t_sched - time.monotonic_ns()) / 1e9)
        self._turn_timers[record.index] = asyncio.get_running_loop().call_later(
            delay_s, self._send_turn, prepared, t_sched, in_window
        )

    def _send_turn(self, prepared: PreparedRequest, t_sched: int, in_window: bool) -> None:
        self._turn_timers.pop(prepared.index, None)
        if self._stopped:
            return
        self._launch(prepared, t_sched, in_window, counted=True)

    def _launch(
        self, prepared: PreparedRequest, t_sched: int, in_window: bool, *, counted: bool = False
    ) -> None:
        if in_window and not counted:
            self._window_pending += 1
        if self._in_flight < self._cap:
            self._send(prepared, t_sched, in_window, 0)
        else:
            self._queue.append((prepared, t_sched, in_window, time.monotonic_ns()))

    def _send(self, prepared: PreparedRequest, t_sched: int, in_window: bool, wait_ns: int) -> None:
        self._in_flight += 1
        result = self._result
        result.sent += 1
        if self._in_flight > result.max_in_flight:
            result.max_in_flight = self._in_flight
        if in_window and wait_ns > 0:
            result.slot_waits += 1
            result.slot_wait_ns += wait_ns

        rule = self._rule if in_window else None
        watched = _Watched() if rule is not None else None

        def done(record: RequestResult) -> None:
            self._done(record, in_window, watched)

        submitted = self.client.submit(prepared, done, t_sched_ns=t_sched, slot_wait_ns=wait_ns)
        if rule is not None and watched is not None and rule.count_waiting and not submitted.done:
            watched.submitted = submitted
            watched.timer = asyncio.get_running_loop().call_later(
                rule.ttft_ms / 1000.0, self._ttft_due, watched
            )
            self._watched.add(watched)

    def _ttft_due(self, watched: _Watched) -> None:
        # The TTFT bound has passed since the send: no output text yet means TTFT over it.
        watched.timer = None
        self._watched.discard(watched)
        submitted = watched.submitted
        rule = self._rule
        if self._stopped or submitted is None or submitted.done or rule is None:
            return
        if not rule.waiting(submitted):
            return
        watched.ttft_counted = True
        result = self._result
        result.ttft_exceeding += 1
        self._on_exceed(result.ttft_exceeding, result.tpot_exceeding, self._window_finished)

    def _count_exceeding(self, record: RequestResult, watched: _Watched) -> None:
        rule = self._rule
        if watched.timer is not None:
            watched.timer.cancel()
            watched.timer = None
            self._watched.discard(watched)
        if rule is None or self._stopped:
            return
        result = self._result
        ttft, tpot = rule.first_token_ms(record), record.tpot_ms
        if not record.ok or (ttft is not None and tpot is not None):
            # Settled: it has its value in both percentiles (a failure is +inf in both). A
            # request that ends with no text, or one token, leaves a percentile out, which
            # lowers the count over the bound that would fail it: the pass certification may
            # only count as done the requests that can no longer do that.
            self._window_finished += 1
        ttft_over = not record.ok or (ttft is not None and ttft > rule.ttft_ms)
        tpot_over = not record.ok or (tpot is not None and tpot > rule.tpot_ms)
        grew = False
        if ttft_over and not watched.ttft_counted:
            result.ttft_exceeding += 1
            grew = True
        if tpot_over:
            result.tpot_exceeding += 1
            grew = True
        if grew or rule.report_finished:
            self._on_exceed(result.ttft_exceeding, result.tpot_exceeding, self._window_finished)

    def _done(self, record: RequestResult, in_window: bool, watched: _Watched | None) -> None:
        self._in_flight -= 1
        first, last = record.t_first_ns, record.t_last_ns
        if first is not None and last is not None and last > first:
            self._result.decode_intervals.append((first, last))
        self._result.window_emitted_tokens += tokens_inside(record, *self._window_ns)
        if in_window:
            if watched is not None:
                self._count_exceeding(record, watched)
            if self._stopped and record.status == "cancelled":
                self._result.window_cut += 1
            self._result.window.append(record)
            self._window_pending -= 1
        if record.turn is not None:
            try:
                self._next_turn(record)  # before the window check: the next turn may be inside it
            except Exception:
                # A bug building the next turn must not escape into the transport's callback:
                # the window check and the queue below would never run and the probe would wait
                # for its window forever. The session is cut and the probe is client-bound.
                logger.exception(
                    "session %d: tokenwatt failed to build turn %d; the session is cut",
                    record.index,
                    record.turn + 1,
                )
                self._result.harness_errors += 1
                conversation = self._conversations.get(record.index)
                unsent = conversation.turns - record.turn - 1 if conversation is not None else 0
                self._end_session(record.index, HARNESS_ERROR, unsent=unsent)
        if in_window:
            self._check_window()
        while self._queue and not self._stopped and self._in_flight < self._cap:
            prepared, t_sched, queued_in_window, t_queued = self._queue.popleft()
            self._send(prepared, t_sched, queued_in_window, time.monotonic_ns() - t_queued)

    def _check_window(self) -> None:
        if (
            self._all_window_scheduled
            and self._window_closed
            and self._window_pending == 0
            and not self._window_done_sent
        ):
            self._window_done_sent = True
            self._on_window_done()
