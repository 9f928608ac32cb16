"""The adaptive sweep: spend probe-seconds where they narrow the SLO-capacity interval most.

``sweep.strategy: adaptive``. The bisection protocol (:mod:`tokenwatt.sweep`) spends most of
its time on probes that only say "pass" or "fail"; this strategy asks, before each probe, what
the capacity estimate (:mod:`tokenwatt.capacity`) still does not know, and places the probe
there. Three phases:

1. **Bracket.** From ``start_rps`` the rate grows by ``growth`` (or falls, if the first probe
   fails) with short windows (``search_window_s``) until one probe passes and one fails.
   These probes stop as soon as they are *certified*: over the SLO once enough window requests
   exceed a bound that the window's p99 must (the early stop of the bisection protocol), or
   within it once even the window requests still to come could no longer push the p99 over.
   Either way the probe's verdict is already certain, and the rest of its window would cost
   GPU time for nothing.
2. **Refine.** Each probe goes where the fraction of requests over the binding bound is
   estimated to cross 1 %, alternately a step above and below it (the fit needs the slope as
   well as the level; the step is a quarter of the interval's width, at least 2 %), with full
   windows (``window_s``) and no early stop, since near the boundary every request counts. The
   sweep stops refining once the 95 % interval's half-width is within ``precision_pct`` of the
   estimate and its dispersion rests on :data:`PRECISION_MIN_DOF` degrees of freedom, or when
   ``budget_s`` (less a reserve for the confirmation) is spent, or, with no budget, after
   :data:`MAX_REFINE` probes. The budget counts every probe; a search that runs out of it
   before bracketing the boundary confirms the highest rate that passed. A probe that will
   ramp (``sweep.ramp``, from a probe that :func:`tokenwatt.sweep.may_ramp` allows) is costed
   with ``sweep.ramp_warmup_s``, the warm-up it will run if it finds requests to carry, and so
   are the confirmation's repeats in the reserve.
3. **Confirm.** Always, even past the budget (the result's goodput is measured here). As the
   bisection protocol does (``repeats`` windows, backing off by
   ``backoff`` after a failed repeat), at the lower end of the interval (the estimate itself
   when the interval is unbounded, backed off once): the rate the result's goodput is measured
   at should pass. Confirmation windows feed the estimate too.

Every probe is kept, and the capacity of the run is estimated from all of them afterwards, so
the strategy only decides where to look; it never decides what the answer is. To decide where to
look it counts every verdict, those of windows short of steady state too (which the reported
estimate leaves out, :mod:`tokenwatt.capacity`): near the boundary they still say roughly where
it is, and leaving them out here made the quick demo's comparisons less often decisive.

**Stream pairs** (``sweep.stream_pairs``, on by default where the workload allows it). Refinement
probes come in pairs: pair m sends workload stream :data:`PAIR_STREAM_BASE` + m, first a step
above the estimate, then a step below it (at least :data:`PAIR_STEP_LN`), the second time as
another content variant (the same arrivals and lengths, other prompt tokens, so a prefix cache
serves nothing of it from the first). Confirmation probes send streams
:data:`CONFIRM_STREAM_BASE` + n, n counting them. These streams depend only on the pair's and
the confirmation's number, so every run of a comparison sends the same ones: a stream's own
effect on the tail (a cluster of long prompts slows every request in flight, for every
configuration alike) is the same in both, and the comparison's fit
(:func:`tokenwatt.capacity.relative_capacity`) holds it fixed, reading the slope of the latency
curve from the two rates of one stream and the difference between configurations from the same
streams (methodology, "Verdict"). The precision target is checked after whole pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tokenwatt.capacity import CapacityEstimate, estimate_capacity
from tokenwatt.schema.run import ProbeRecord
from tokenwatt.schema.spec import MeasurementSpec, SloSpec, SweepSpec
from tokenwatt.sweep import MAX_DOWN_STEPS, ProbePlan, SweepResult, may_ramp, ramp_warmup

__all__ = [
    "CONFIRM_STREAM_BASE",
    "MAX_REFINE",
    "MIN_STEP_LN",
    "PAIR_STEP_LN",
    "PAIR_STREAM_BASE",
    "PRECISION_MIN_DOF",
    "AdaptiveSweep",
]

MAX_REFINE = 60
"""Refinement probes at most when the spec sets no budget (``budget_s: null``): three times
:data:`PRECISION_MIN_DOF`, so that the precision target can end the sweep first (the degrees of
freedom count streams, and a pair's two probes are one stream)."""
PRECISION_MIN_DOF = 20
"""The precision target ends the sweep only once the interval's dispersion rests on this many
degrees of freedom (:class:`tokenwatt.capacity.ConstraintFit`'s ``dof``: the workload streams of
the probes that expect a request over the bound, less 2; probes until 2026-12-04). A half-width
is itself an estimate: stopping at the first that looks narrow stops the runs that have seen
fewest tail episodes, whose estimates read high. On the demo (120 runs, budget 4,800 s,
precision 5 %, benchmarks/README.md, "Stopping on precision"): stopping on the half-width alone
gave a median |error| of 3.08 %, a mean of +2.54 % and intervals holding the truth in 80 %; with
20 degrees of freedom required, 2.62 %, +1.59 % and 86 %, at 2,952 probe-seconds where running
to the budget took 4,631 (2.19 %, +0.85 %, 86 %). Counting streams (benchmarks/README.md,
"Probes that share a stream"; truth 11.036): 88-89 % at 4,190-4,335 probe-seconds; 10 or 15
streams instead of 20 did no better (87-89 %)."""
MIN_STEP_LN = 0.02
"""Smallest step above/below the estimate, in ln r (2 %)."""
PAIR_STEP_LN = 0.08
"""Smallest step of a stream pair above/below the estimate, in ln r (8 %): the pair's two rates
are what the comparison reads the latency curve's slope from, against the noise of two windows.
It was 5 % until 2026-12-05 (the figures above were measured with it). Pairs 5 % apart read the
slope too noisily for the interval: on the demo scenario (benchmarks/README.md, "Wider stream
pairs") one run's bounded intervals held the truth in 86 % (1,200 probe-seconds, 80 runs) and
90 % (2,400, 120 runs) where 95 % is stated, and the comparison's at +11.9 % in 91 %. 8 % apart:
94 %, 97 % and 95 %, with the median error unchanged within the trials' noise; the price is a
wider interval and minimum detectable effect (the comparison's MDE at 1,200 probe-seconds 4.0-4.7
-> 4.4-5.6 %), so a +5 % change is called better in 68 of 80 paired runs instead of 71."""
_MAX_STEP_LN = 0.15
PAIR_STREAM_BASE = 1000
"""Refinement pair m sends workload stream PAIR_STREAM_BASE + m (search probes send their index:
fewer than this)."""
CONFIRM_STREAM_BASE = 2000
"""The n-th confirmation probe (from 0) sends workload stream CONFIRM_STREAM_BASE + n."""
_CONFIRM_RESERVE = 1.0
"""The budget keeps room for this many confirmation windows per repeat."""


@dataclass
class _State:
    lo: float | None = None
    hi: float | None = None
    going_down: bool = False
    down_steps: int = 0
    refines: int = 0
    spent_s: float = 0.0
    phase: str = "search"
    confirm_rate: float | None = None
    attempt: int = 0
    repeat: int = 0
    attempt_probes: list[int] = field(default_factory=list)
    done: bool = False
    side: int = 0
    confirms: int = 0
    pair_low: float | None = None
    """The rate the open stream pair's second probe goes to (set with its first)."""


class AdaptiveSweep:
    """An adaptive sweep in progress: :meth:`next`, run the probe, :meth:`observe` its record."""

    def __init__(
        self,
        sweep: SweepSpec,
        measurement: MeasurementSpec,
        slo: SloSpec,
        *,
        stream_pairs: bool = False,
    ) -> None:
        """Start a sweep.

        Args:
            sweep: the spec's sweep section (``strategy: adaptive``).
            measurement: the durations in force (quick mode shortens them).
            slo: the latency objective the capacity is estimated against.
            stream_pairs: refine in stream pairs and confirm on numbered streams (module
                docstring); the caller checks that the workload has content variants.
        """
        self._pairs = stream_pairs
        self._sweep = sweep
        self._m = measurement
        self._slo = slo
        self._state = _State()
        self._probes: list[ProbeRecord] = []
        self._pending: ProbePlan | None = None
        self._next_rate = float(sweep.start_rps)
        self.result = SweepResult()
        self.estimate: CapacityEstimate | None = None

    @property
    def done(self) -> bool:
        """True once the sweep has nothing more to probe."""
        return self._state.done

    @property
    def spent_s(self) -> float:
        """Probe-seconds so far."""
        return self._state.spent_s

    def _ramp_warmup_s(self) -> float | None:
        """A ramped probe's warm-up (``sweep.ramp_warmup_s``, at most the warm-up), if set."""
        if not self._sweep.ramp:
            return None
        return ramp_warmup(self._m.warmup_s, self._sweep.ramp_warmup_s)

    def _next_warmup_s(self) -> float:
        """The warm-up the next probe is costed with: a ramped one's if it will ramp."""
        short = self._ramp_warmup_s()
        last = self._probes[-1] if self._probes else None
        if short is not None and may_ramp(last, self._slo):
            return short
        return float(self._m.warmup_s)

    def _budget_left_s(self) -> float:
        budget = self._sweep.budget_s
        if budget is None:
            return math.inf
        # A passing confirmation ramps from the probe before it; one that fails goes past the
        # budget anyway (module docstring, "Confirm").
        short = self._ramp_warmup_s()
        warmup_s = float(self._m.warmup_s) if short is None else short
        confirm = self._m.repeats * (warmup_s + self._m.window_s) * _CONFIRM_RESERVE
        return float(budget) - confirm - self._state.spent_s

    def next(self) -> ProbePlan | None:
        """The next probe to run, or None when the sweep is over."""
        if self._pending is not None:
            return self._pending
        st = self._state
        if st.done:
            return None
        rate = self._next_rate
        if st.phase == "confirm":
            plan = ProbePlan(
                phase="confirm",
                rate_rps=rate,
                warmup_s=float(self._m.warmup_s),
                window_s=float(self._m.window_s),
                attempt=st.attempt,
                repeat=st.repeat,
                stream=CONFIRM_STREAM_BASE + st.confirms if self._pairs else None,
            )
        elif st.phase == "refine":
            plan = ProbePlan(
                phase="refine",
                rate_rps=rate,
                warmup_s=float(self._m.warmup_s),
                window_s=float(self._m.window_s),
                stream=PAIR_STREAM_BASE + st.refines // 2 if self._pairs else None,
                variant=st.refines % 2 if self._pairs else 0,
            )
        else:
            plan = ProbePlan(
                phase="search",
                rate_rps=rate,
                warmup_s=float(self._m.warmup_s),
                window_s=float(self._m.search_window_s),
                early_stop=True,
                certify_pass=True,
            )
        self._pending = plan
        return plan

    def observe(self, record: ProbeRecord, seconds: float) -> None:
        """Tell the sweep what the probe handed out by :meth:`next` measured.

        Raises:
            RuntimeError: when no probe is pending.
        """
        plan = self._pending
        if plan is None:
            raise RuntimeError("observe() called with no probe pending; call next() first")
        self._pending = None
        st = self._state
        st.spent_s += seconds
        index = len(self._probes)
        self._probes.append(record)
        passed = record.slo_pass
        if plan.phase == "confirm":
            st.confirms += 1
            self._after_confirm(index, passed)
            return
        if passed:
            st.lo = plan.rate_rps if st.lo is None else max(st.lo, plan.rate_rps)
        else:
            st.hi = plan.rate_rps if st.hi is None else min(st.hi, plan.rate_rps)
        if plan.phase == "search":
            self._after_search(plan.rate_rps, passed)
        else:
            self._after_refine()

    # -- phases ---------------------------------------------------------------------------

    def _after_search(self, rate: float, passed: bool) -> None:
        st = self._state
        growth = float(self._sweep.growth)
        max_rps = float(self._sweep.max_rps)
        if st.lo is not None and st.hi is not None and st.lo < st.hi:
            self._start_refine()
            return
        if self._budget_left_s() < self._next_warmup_s() + self._m.search_window_s:
            # Out of budget before the boundary was bracketed: confirm what passed, if anything.
            if st.lo is not None:
                self._start_confirm(st.lo)
            else:
                self._finish_without_rate()
            return
        if not passed:
            if st.down_steps >= MAX_DOWN_STEPS:
                self._finish_without_rate()
                return
            st.down_steps += 1
            self._next_rate = rate / growth
        elif rate >= max_rps:
            self._start_confirm(rate)
        else:
            self._next_rate = min(rate * growth, max_rps)

    def _placement_estimate(self, *, include_incomplete: bool = False) -> CapacityEstimate:
        """The estimate the sweep places its probes by (never a reported figure).

        Every verdict counts, those of windows short of steady state too (module docstring).
        """
        return estimate_capacity(
            self._probes, self._slo, include_incomplete=include_incomplete, steady_only=False
        )

    def _start_refine(self) -> None:
        st = self._state
        st.phase = "refine"
        self.estimate = self._placement_estimate()
        # The first full window goes to the highest rate a search probe passed at: short windows
        # pass more often than long ones near the boundary (tails come in episodes a short window
        # may miss), so the boundary is at or below it more often than above.
        assert st.lo is not None
        self._next_rate = self._refine_rate(self.estimate) if self._pairs else st.lo

    def _after_refine(self) -> None:
        st = self._state
        st.refines += 1
        estimate = self._placement_estimate()
        self.estimate = estimate
        precise = (
            estimate.half_width_pct is not None
            and estimate.method == "logistic"
            and estimate.half_width_pct <= float(self._sweep.precision_pct)
            and (estimate.dof or 0) >= PRECISION_MIN_DOF
            and not (self._pairs and st.refines % 2)  # a pair's second probe first
        )
        out_of_time = self._budget_left_s() < self._next_warmup_s() + self._m.window_s
        capped = self._sweep.budget_s is None and st.refines >= MAX_REFINE
        if precise or out_of_time or capped:
            self._start_confirm(self._confirm_rate(estimate))
            return
        self._next_rate = self._refine_rate(estimate)

    def _guess(self, estimate: CapacityEstimate) -> float:
        """Where the crossing probably is, for placing the next probe (not a reported figure)."""
        st = self._state
        assert st.lo is not None
        assert st.hi is not None
        low, high = min(st.lo, st.hi), max(st.lo, st.hi)
        if estimate.method == "logistic" and estimate.capacity_rps is not None:
            guess = estimate.capacity_rps
        else:
            # Too few full windows for a fit yet: fit the early-stopped search probes too (their
            # counts are biased by the stop, which only costs efficiency here).
            rough = self._placement_estimate(include_incomplete=True)
            guess = rough.capacity_rps if rough.capacity_rps is not None else math.sqrt(low * high)
        return min(max(guess, low / 2.0), high * 2.0)

    def _refine_rate(self, estimate: CapacityEstimate) -> float:
        st = self._state
        assert st.lo is not None
        assert st.hi is not None
        centre = self._guess(estimate)
        if estimate.method == "logistic" and estimate.ci_rps is not None:
            step = math.log(estimate.ci_rps[1] / estimate.ci_rps[0]) / 4.0
        else:
            step = abs(math.log(st.hi / st.lo)) / 4.0
        if self._pairs:
            # A pair's two rates, above and below one centre (fixed when the pair opens, so the
            # estimate moving between them cannot shrink the pair): the slope of one stream's
            # latency curve.
            if st.refines % 2 == 1 and st.pair_low is not None:
                return st.pair_low
            step = min(max(step, PAIR_STEP_LN), _MAX_STEP_LN)
            st.pair_low = centre * math.exp(-step)
            return min(float(self._sweep.max_rps), centre * math.exp(step))
        step = min(max(step, MIN_STEP_LN), _MAX_STEP_LN)
        # Alternate at, above, below: the level and the slope of the fit both need probes.
        side = (0, 1, -1)[st.side % 3]
        st.side += 1
        return min(float(self._sweep.max_rps), centre * math.exp(side * step))

    def _confirm_rate(self, estimate: CapacityEstimate) -> float:
        st = self._state
        backoff = float(self._sweep.backoff)
        if estimate.method == "logistic" and estimate.capacity_rps is not None:
            floor = estimate.capacity_rps * backoff
            if estimate.ci_rps is not None:
                return max(estimate.ci_rps[0], floor)
            return floor
        assert st.lo is not None
        return self._guess(estimate) * backoff

    def _start_confirm(self, rate: float) -> None:
        st = self._state
        st.phase = "confirm"
        st.confirm_rate = rate
        st.attempt = 0
        st.repeat = 0
        st.attempt_probes = []
        self.result.found_rate_rps = rate
        self._next_rate = rate

    def _finish_without_rate(self) -> None:
        self._state.done = True
        self.estimate = self._placement_estimate()

    def _after_confirm(self, index: int, passed: bool) -> None:
        st = self._state
        st.attempt_probes.append(index)
        self.result.confirm_probes = list(st.attempt_probes)
        if passed:
            st.repeat += 1
            if st.repeat >= self._m.repeats:
                self.result.confirmed_rate_rps = st.confirm_rate
                self._finish()
            return
        if st.attempt >= self._sweep.max_backoffs:
            self._finish()
            return
        assert st.confirm_rate is not None
        st.attempt += 1
        st.repeat = 0
        st.attempt_probes = []
        st.confirm_rate *= float(self._sweep.backoff)
        self._next_rate = st.confirm_rate

    def _finish(self) -> None:
        self._state.done = True
        self.estimate = self._placement_estimate()
