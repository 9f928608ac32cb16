"""The rate sweep: grow, bisect, confirm, back off — as decisions over probe outcomes.

Two strategies (``sweep.strategy``): ``bisect``, the seed's protocol, described here, and
``adaptive`` (:mod:`tokenwatt.adaptive`, the next section), which places probes where they
narrow the SLO-capacity interval most. Whichever placed them, the SLO capacity and its interval
are estimated afterwards from every probe (:mod:`tokenwatt.capacity`).

**Common random numbers.** Probe i of a run sends the workload's stream i (the adaptive sweep
numbers its refinement and confirmation streams apart: :mod:`tokenwatt.adaptive`, "Stream
pairs"): its arrival schedule (exponential or gamma gaps drawn for a unit rate, divided by the
probe's rate) and its request lengths depend only on the workload seed and the stream. Every
configuration of a comparison measured with the same spec seed therefore sees the same arrivals
and lengths at the same rate, and time-scaled copies of them at other rates, so the comparison is
between the configurations, not between two draws of the workload; the run file records each
probe's stream. Prompts differ between the probes of a run (a stream sent twice is sent the
second time with other prompt tokens), so a prefix cache never serves one probe from another's
prompts; they are the same for the same probe of another run, so restart the server (or turn its
prefix cache off) between the runs of a comparison, as a change of kernels or settings does
anyway.

**Search.** Search probes use ``search_window_s``. From ``start_rps`` the rate is multiplied by
``growth`` until a probe fails or ``max_rps`` is reached (the last step is cut to ``max_rps``).
Then the rate is bisected (arithmetic midpoint) between the last pass and the first fail
``bisect_steps`` times; the found rate is the highest pass. If the very first probe fails, the
search goes down instead (dividing by ``growth``) until a probe passes, at most
``MAX_DOWN_STEPS`` times, and then bisects between that pass and the fail above it.

**Explicit rates.** ``sweep.rates`` replaces the search: each rate is probed (search windows),
and the highest passing one is the found rate.

**Confirmation.** At the found rate, ``repeats`` full windows (``window_s``). If a repeat fails,
the remaining repeats of that attempt are skipped (they cannot change the outcome), the rate is
multiplied by ``backoff`` and confirmed again, at most ``max_backoffs`` times. The accepted
rate is the first whose repeats all pass; if none does, the run has no confirmed rate.

A client-bound probe never passes (see "Probe"), so the sweep treats it as a fail.

**Probe-seconds.** GPU time is money: the run file records the wall time of every probe
(``outcome.probe_seconds``, of which ``search_probe_seconds`` went to the search), and
``measure`` prints it. A probe costs its warm-up, its window and its drain (arrivals go on until
the last window request has finished). Past the boundary the drain is the expensive part: the
queue built up during the window must empty, at the slow pace of an overloaded server.

**Early stop** (``sweep.early_stop: true``; off by default, so the seed's protocol stays the
default). A probe is stopped the moment it has provably failed. The number N of window requests
is known before the probe starts (the arrival schedule is drawn in advance), and the
nearest-rank p99 of N values exceeds a bound as soon as N - ceil(0.99 N) + 1 of them do,
whatever the others turn out to be (one request for N up to 99, two for N = 100, seven for
N = 600). A window request counts against the TTFT bound when its first token came later than
the bound, when it failed (failures are +inf), or when it is still waiting for its first token
after the bound has passed (with ``ignore_eos``, where every successful request produces text);
against the TPOT bound when it finished over it or failed. Once either count reaches that
number, the load stops: window requests in flight are cancelled and counted as +inf, those not
yet due are never sent, and the probe record says so (``early_stop``: when, N, the count needed
and reached, requests cut and never sent). Such a probe never passes.

The trade-off: the sweep's decisions are the same (a probe is only stopped when its verdict can
no longer change, so a server that behaves the same is probed at the same rates and the same
rate is found), and failing probes cost seconds instead of window plus drain. What is lost is
the failing probe's own latency profile: its percentiles cover the requests sent before the stop
with the cut ones as +inf, so the page's latency-versus-rate curve has no finite point there,
only "over the SLO". Passing probes (every confirmation that is accepted, and so every figure
of the result) are never touched. ``benchmarks/sweep_cost.py`` measures both protocols on the
simulator; the figures are in ``benchmarks/README.md``.

**Ramp** (``sweep.ramp: true``; off by default, so the seed's protocol stays the default). A
probe starts from an idle server, and the load in the system builds up over as long as the
longest requests stay in it (the steady-state audit, :mod:`tokenwatt.audits`): with long answers
a warm-up of a minute leaves the window a fifth short of its steady state. With the ramp, the
requests the previous probe left in flight when its window requests had all finished (those
sent while they drained) are not cancelled: they go on, and the next probe's arrivals start at
once on top of them, so the warm-up only has to settle the difference between the two rates.
With load L(r) = r E[D] at steady state and n requests carried over, the shortfall when the
window opens is (1 - n / L(r)) times the one from idle (negative: the carried load is above the
new rate's, and settles the same way). A probe ramps only from one that left no backlog
(:func:`may_ramp`: not stopped early, not client-bound, its p99 TTFT within the bound, so no
queue built up); otherwise the carried requests are cancelled first and it starts from idle as
before. The record says which (``ramp``: from which probe, how many requests carried). The
carried requests are never measured: a probe's window requests are its own. Since a ramped
probe starts near the steady state of a neighbouring rate, ``sweep.ramp_warmup_s`` may give it a
shorter warm-up than one from idle. On the demo's scenario 10 s instead of 30 s took one run's
median capacity error at 4,800 probe-seconds from 2.01 to 1.69 %; but after 10 s a window ramped
up still reads the share of requests over the TPOT bound a few per cent low and one ramped down
a few per cent high (within the noise of 800 chains), and the demo's comparisons, though more
often decisive, read a large change high: at 1,200 probe-seconds with 20 s the +11.9 % change
read +12.7 % and its interval held it in 87.5 % of 80 trials, against +11.9 % and 91 % with
30 s. The demo's specs keep their 30 s (``benchmarks/README.md``, "A shorter warm-up after a
ramp" and "The comparison at 1,200 probe-seconds"). The short warm-up applies only
where the probe does start on carried requests (:func:`warmup_when`): a probe asked to ramp that
finds nothing left running (a new worker pool, the first probe of a resumed run) warms up as
from idle. The steady-state audit checks every window whatever its warm-up, and the capacity
estimate leaves out the verdicts of windows it finds short (:mod:`tokenwatt.capacity`).

The module decides; it never sends a request. :class:`Sweep` hands out :class:`ProbePlan` s and
is told whether each passed, so the same code drives real measurements, the simulator and tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

from tokenwatt.schema.run import ProbePhase, ProbeRecord
from tokenwatt.schema.spec import MeasurementSpec, SloSpec, SweepSpec, WorkloadSpec

__all__ = [
    "MAX_DOWN_STEPS",
    "RERUN_STREAM_STEP",
    "ProbePlan",
    "Strategy",
    "Sweep",
    "SweepResult",
    "as_ramped",
    "make_strategy",
    "may_ramp",
    "ramp_warmup",
    "ramped",
    "warmup_when",
]

MAX_DOWN_STEPS = 8

RERUN_STREAM_STEP = 1_000_003
"""A probe re-run because it was client-bound sends stream ``s + RERUN_STREAM_STEP`` (fresh
prompts: the first try may have left them in a prefix cache)."""


@dataclass(frozen=True)
class ProbePlan:
    """The next probe to run.

    Raises:
        ValueError: a non-positive rate or window, or a negative warm-up.
    """

    phase: ProbePhase
    rate_rps: float
    warmup_s: float
    window_s: float
    attempt: int = 0
    repeat: int | None = None
    early_stop: bool = False
    """Stop the probe once its window has provably failed the SLO."""
    certify_pass: bool = False
    """Also stop it once its window provably meets the SLO, whatever the rest does."""
    ramp: bool = False
    """Start on the previous probe's requests still in flight (see "Ramp")."""
    ramp_warmup_s: float | None = None
    """The warm-up when the probe does start on carried requests (``sweep.ramp_warmup_s``); a
    probe asked to ramp that finds nothing carried (a new worker pool, a resumed run) warms up
    for ``warmup_s``, as from idle."""
    stream: int | None = None
    """Workload stream of its arrivals and lengths (None: the probe's index; "Common random
    numbers")."""
    variant: int = 0
    """Content variant of the stream: v > 0 for a stream sent again in the same run (other prompt
    tokens, the same arrivals and lengths; :mod:`tokenwatt.load.workload`)."""

    def __post_init__(self) -> None:
        if not self.rate_rps > 0 or not self.window_s > 0 or self.warmup_s < 0:
            raise ValueError("need rate_rps > 0, window_s > 0 and warmup_s >= 0")
        if self.ramp_warmup_s is not None and not 0 <= self.ramp_warmup_s <= self.warmup_s:
            raise ValueError("need 0 <= ramp_warmup_s <= warmup_s")
        if (self.stream is not None and self.stream < 0) or self.variant < 0:
            raise ValueError("need stream >= 0 and variant >= 0")


def may_ramp(previous: ProbeRecord | None, slo: SloSpec) -> bool:
    """Whether the next probe may start on the load ``previous`` left running (see "Ramp").

    Only when it left no backlog: it ran to its end (no early stop), the client kept pace, and
    its window's p99 first-token time (TTFT, or TTFAT where the SLO bounds it) met the bound (a
    queue that built up would carry over instead).
    """
    if previous is None or previous.early_stop is not None or previous.client_bound:
        return False
    first = previous.first_token_ms(slo.first_token).p99
    return first is not None and first <= slo.first_token_p99_ms


def ramped(
    plan: ProbePlan, previous: ProbeRecord | None, sweep: SweepSpec, slo: SloSpec
) -> ProbePlan:
    """``plan`` set to ramp from ``previous`` when the spec asks for it and :func:`may_ramp`.

    With ``sweep.ramp_warmup_s`` its :attr:`ProbePlan.ramp_warmup_s` is that (at most its
    warm-up): what it warms up for if it does start on carried requests.
    """
    if not sweep.ramp or not may_ramp(previous, slo):
        return plan
    return as_ramped(plan, sweep.ramp_warmup_s)


def as_ramped(plan: ProbePlan, ramp_warmup_s: float | None) -> ProbePlan:
    """``plan`` asked to ramp, with its warm-up on carried requests (:func:`warmup_when`).

    That is ``ramp_warmup_s`` (``sweep.ramp_warmup_s``) at most its warm-up; None: its warm-up.
    """
    return replace(plan, ramp=True, ramp_warmup_s=ramp_warmup(plan.warmup_s, ramp_warmup_s))


def ramp_warmup(warmup_s: float, ramp_warmup_s: float | None) -> float | None:
    """The warm-up on carried requests: ``ramp_warmup_s`` at most ``warmup_s``; None if unset."""
    return None if ramp_warmup_s is None else min(float(warmup_s), float(ramp_warmup_s))


def warmup_when(plan: ProbePlan, *, carried: bool) -> float:
    """The warm-up ``plan`` runs: its ``ramp_warmup_s`` if it starts on carried requests."""
    if carried and plan.ramp_warmup_s is not None:
        return plan.ramp_warmup_s
    return plan.warmup_s


@dataclass
class SweepResult:
    """What the sweep concluded."""

    found_rate_rps: float | None = None
    """Highest passing search rate (or explicit rate); None if none passed."""
    confirmed_rate_rps: float | None = None
    """Rate whose confirmation repeats all passed; None if none did."""
    confirm_probes: list[int] = field(default_factory=list)
    """Indices (in probe order) of the accepted confirmation's repeats, else of the last
    attempt's (so a run with no confirmed rate still shows what was tried)."""


@dataclass
class _State:
    lo: float | None = None  # highest passing rate so far
    hi: float | None = None  # lowest failing rate so far
    going_down: bool = False
    down_steps: int = 0
    bisects_done: int = 0
    explicit_left: list[float] = field(default_factory=list)
    confirm_rate: float | None = None
    attempt: int = 0
    repeat: int = 0
    attempt_probes: list[int] = field(default_factory=list)
    done: bool = False


class Sweep:
    """A sweep in progress: call :meth:`next`, run the probe, then :meth:`record` its outcome."""

    def __init__(self, sweep: SweepSpec, measurement: MeasurementSpec) -> None:
        """Start a sweep.

        Args:
            sweep: the spec's sweep section.
            measurement: the durations in force (quick mode shortens them).
        """
        self._sweep = sweep
        self._m = measurement
        self._state = _State()
        self._pending: ProbePlan | None = None
        self._probes = 0
        self.result = SweepResult()
        if sweep.rates is not None:
            self._state.explicit_left = sorted(float(r) for r in sweep.rates)
            self._phase: str = "rates"
            self._next_rate: float | None = self._state.explicit_left.pop(0)
        else:
            self._phase = "search"
            self._next_rate = float(sweep.start_rps)

    @property
    def done(self) -> bool:
        """True once the sweep has nothing more to probe."""
        return self._state.done

    def _search_plan(self, phase: ProbePhase, rate: float) -> ProbePlan:
        return ProbePlan(
            phase=phase,
            rate_rps=rate,
            warmup_s=float(self._m.warmup_s),
            window_s=float(self._m.search_window_s),
            early_stop=self._sweep.early_stop,
        )

    def next(self) -> ProbePlan | None:
        """The next probe to run, or None when the sweep is over."""
        if self._pending is not None:
            return self._pending
        if self._state.done:
            return None
        rate = self._next_rate
        assert rate is not None
        if self._phase == "confirm":
            plan = ProbePlan(
                phase="confirm",
                rate_rps=rate,
                warmup_s=float(self._m.warmup_s),
                window_s=float(self._m.window_s),
                attempt=self._state.attempt,
                repeat=self._state.repeat,
                early_stop=self._sweep.early_stop,
            )
        elif self._phase == "rates":
            plan = self._search_plan("rates", rate)
        elif self._phase == "bisect":
            plan = self._search_plan("bisect", rate)
        else:
            plan = self._search_plan("search", rate)
        self._pending = plan
        return plan

    def observe(self, record: ProbeRecord, seconds: float) -> None:
        """Tell the sweep what the probe handed out by :meth:`next` measured (its verdict)."""
        del seconds  # the bisection protocol decides on pass/fail alone
        self.record(record.slo_pass)

    def record(self, passed: bool) -> None:
        """Tell the sweep whether the probe handed out by :meth:`next` passed its SLO.

        Raises:
            RuntimeError: when no probe is pending.
        """
        plan = self._pending
        if plan is None:
            raise RuntimeError("record() called with no probe pending; call next() first")
        self._pending = None
        index = self._probes
        self._probes += 1
        st = self._state
        rate = plan.rate_rps
        if plan.phase == "confirm":
            self._after_confirm(index, passed)
            return
        if passed:
            st.lo = rate if st.lo is None else max(st.lo, rate)
        else:
            st.hi = rate if st.hi is None else min(st.hi, rate)
        if plan.phase == "rates":
            if st.explicit_left:
                self._next_rate = st.explicit_left.pop(0)
            else:
                self._start_confirm(st.lo)
        elif plan.phase == "search":
            self._after_search(rate, passed)
        else:
            self._after_bisect()

    # -- phases ---------------------------------------------------------------------------

    def _after_search(self, rate: float, passed: bool) -> None:
        st = self._state
        growth = float(self._sweep.growth)
        max_rps = float(self._sweep.max_rps)
        if st.going_down or (not passed and st.lo is None):
            st.going_down = True
            if passed:
                self._start_bisect()
            elif st.down_steps >= MAX_DOWN_STEPS:
                self._start_confirm(None)
            else:
                st.down_steps += 1
                self._next_rate = rate / growth
            return
        if not passed:
            self._start_bisect()
        elif rate >= max_rps:
            self._start_confirm(rate)
        else:
            self._next_rate = min(rate * growth, max_rps)

    def _start_bisect(self) -> None:
        st = self._state
        if self._sweep.bisect_steps == 0 or st.lo is None or st.hi is None:
            self._start_confirm(st.lo)
            return
        self._phase = "bisect"
        self._next_rate = (st.lo + st.hi) / 2.0

    def _after_bisect(self) -> None:
        st = self._state
        st.bisects_done += 1
        if st.bisects_done >= self._sweep.bisect_steps:
            self._start_confirm(st.lo)
            return
        assert st.lo is not None
        assert st.hi is not None
        self._next_rate = (st.lo + st.hi) / 2.0

    def _start_confirm(self, rate: float | None) -> None:
        self.result.found_rate_rps = rate
        if rate is None:
            self._state.done = True
            return
        self._phase = "confirm"
        st = self._state
        st.confirm_rate = rate
        st.attempt = 0
        st.repeat = 0
        st.attempt_probes = []
        self._next_rate = rate

    def _after_confirm(self, index: int, passed: bool) -> None:
        st = self._state
        st.attempt_probes.append(index)
        self.result.confirm_probes = list(st.attempt_probes)
        if passed:
            st.repeat += 1
            if st.repeat >= self._m.repeats:
                self.result.confirmed_rate_rps = st.confirm_rate
                st.done = True
            return
        if st.attempt >= self._sweep.max_backoffs:
            st.done = True
            return
        assert st.confirm_rate is not None
        st.attempt += 1
        st.repeat = 0
        st.attempt_probes = []
        st.confirm_rate = st.confirm_rate * float(self._sweep.backoff)
        self._next_rate = st.confirm_rate


class Strategy(Protocol):
    """What :func:`tokenwatt.measure.measure` and ``tokenwatt plan`` drive: a sweep in progress."""

    result: SweepResult

    def next(self) -> ProbePlan | None:
        """The next probe to run, or None when the sweep is over."""

    def observe(self, record: ProbeRecord, seconds: float) -> None:
        """What the probe handed out by :meth:`next` measured, and its probe-seconds."""


def make_strategy(
    sweep: SweepSpec,
    measurement: MeasurementSpec,
    slo: SloSpec,
    *,
    workload: WorkloadSpec | None = None,
) -> Strategy:
    """The sweep ``sweep.strategy`` names (explicit ``rates`` always use the listed rates).

    The adaptive sweep refines in stream pairs when ``sweep.stream_pairs`` asks for them and
    ``workload`` (the spec's) can send a stream again with other prompt tokens.
    """
    if sweep.strategy == "adaptive" and sweep.rates is None:
        from tokenwatt.adaptive import AdaptiveSweep  # it builds on this module

        pairs = sweep.stream_pairs and workload is not None and workload.varies_content
        return AdaptiveSweep(sweep, measurement, slo, stream_pairs=pairs)
    return Sweep(sweep, measurement)
