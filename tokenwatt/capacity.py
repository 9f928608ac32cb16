"""SLO capacity: the highest Poisson rate that meets the SLO, from every probe of a run (pure).

**What is estimated.** A probe at rate r meets the SLO when its p99 TTFT and p99 TPOT are within
the bounds (methodology, "SLO pass"). The *SLO capacity* is the highest rate at which the
steady-state p99 (the limit of long windows) meets them. For one latency with bound S, the
nearest-rank p99 of n requests is at most S exactly when at most n - ceil(0.99 n) of them
exceed S, so in steady state "p99 <= S" is "the fraction of requests over S is at most 1 %".
That fraction, q(r), rises with the rate; the capacity for that latency is the rate where q(r)
crosses 1 %, and the SLO capacity is the lower of the two (the *binding* SLO).

**Why exceedances, not each probe's p99.** A probe's p99 over a short window is a biased
estimate of the steady-state p99: latency tails come in episodes (a burst of arrivals slows every
request in flight), a short window often holds none, and then its p99 reads low. On the demo's
scenario the median p99 TPOT of 15 s windows is 4 % under the 1,200 s value, which at its flat
latency-versus-rate curve moves the boundary by more than 10 %. The count of requests over the
bound is a sum: its expectation is n q(r) whatever the window's length, so probes of any length
pool without bias.

**The fit.** Each probe i gives n_i requests (failed ones count as over every bound, as +inf)
and k_i of them over the bound. Across probes, q is modelled as logistic in the log of the rate,
logit q(r) = a + b ln r with b > 0, fitted by Firth's bias-reduced maximum likelihood to the
probes near the crossing (within :data:`NEIGHBOURHOOD_LN` in ln r of it, at least
:data:`MIN_PROBES` of them; the model need only hold locally). The episodes make the counts
*overdispersed*: requests in one probe are not independent, so the binomial variance is too
small by a factor phi, estimated from the probes' Pearson residuals (phi = chi^2 / (m - 2),
at least 1). The capacity is the rate where the fit crosses 1 %, ln r* = (logit 0.01 - a) / b.

**The interval.** Fieller's interval for the ratio (logit 0.01 - a) / b with the covariance of
(a, b) scaled by phi and Student's t (degrees of freedom: below): the set of rates at which the
fitted logit is not distinguishable from logit 0.01. With few probes or a flat curve it is wide,
and when the slope is not clearly positive it is unbounded; then the capacity falls back to the
measured bracket (below). An interval with an end further than :data:`NEIGHBOURHOOD_LN` in ln r
outside the fitted probes' rates is reported as unbounded too: the model was only asked to hold
near them, and such an end (a lower end of 0.002 req/s beside probes at 11-14 req/s, seen on
the demo with two streams) is the model's, not the data's. The interval's coverage is measured
against the simulator's ground truth (``benchmarks/README.md``, "SLO capacity"), never assumed.

**Probes that share a stream.** A probe's requests (their lengths and arrival schedule, scaled
in time by its rate) are its workload stream, and the adaptive sweep sends each refinement
stream twice, at two rates (:mod:`tokenwatt.adaptive`, "Stream pairs"). The two windows hold the
same requests, so a run of long prompts that brings a tail episode in one brings one in the
other: on the demo scenario the Pearson residuals of a stream's two probes correlate 0.70 (120
sweeps, 4,031 pairs; probes of different streams: 0.00). Counted as independent, such probes
made the interval too narrow (it held the truth in 86 % of runs where 95 % was stated). The
estimate stays the one above (it is unbiased whatever the correlation); its covariance becomes
phi I^-1 (I + rho B) I^-1, I the fit's information and B the cross terms of the probes of one
stream (generalised estimating equations with an exchangeable correlation within a stream,
Liang and Zeger 1986, Biometrika 73:13), rho the moment estimate from the Pearson residuals of
every pair of probes of one stream, capped to [0, :data:`MAX_STREAM_CORRELATION`]. The t's
degrees of freedom count streams, not probes, since a stream is the independent unit: the
streams of the probes that expect at least one request over the bound (the others say almost
nothing about phi), less 2. A run whose streams were each sent once (bisection) has rho = 0
and the interval above.

**The bracket** (highest passing probe, lowest failing probe above it) stands beside the
estimate: it is what was measured, the estimate is what the measurements imply. When the fit
cannot be made (too few probes with requests over the bound, a slope that is not positive, or a
crossing outside the probed rates), the capacity is the bracket's geometric middle with no
interval. When no probe
exceeds a bound, or none meets it, there is no crossing to fit: the capacity is reported as at
least the highest passing rate (or under the lowest failing one) with no interval.

Probes used: every probe that is not client-bound (the harness, not the server, limited it) and
has window requests. A probe stopped early (it had provably failed) is used for the bracket
only: its counts stop exactly when they reach the proof, which would bias the fit.

**Probes short of steady state.** A window whose load had not built up to the rate's steady
state (the steady-state audit, :mod:`tokenwatt.audits`: more than ``STEADY_STATE_SHORTFALL_PCT``
% of it missing, averaged over the window, which is what sets the window's counts) saw less
load than the rate brings, so its latencies read low: its *pass* says nothing about the steady
state and is not counted, for the fit or the bracket. Its fail is counted (more load would only
have added to it). Symmetrically, a ramped window that held more than the steady state
(carried over from a faster probe) has its fail left out and its pass counted. On the seed's
full workload (outputs up to 18,589 tokens, in the system up to 15 minutes) short search windows
from idle pass well above the capacity, and counting their passes read it about 10 % high
(``benchmarks/README.md``). Each fit says how many probes it left out this way
(``short_of_steady``); a run whose every pass was left out has no capacity, and its page says
the capacity is unknown (the lowest rate that failed is one window's verdict, no bound). The
adaptive sweep still counts every verdict to decide where to probe next
(:mod:`tokenwatt.adaptive`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from tokenwatt.audits import STEADY_STATE_SHORTFALL_PCT
from tokenwatt.metrics import TableColumn, exceeding_to_fail, table_column
from tokenwatt.schema.run import ProbeRecord, RequestTable
from tokenwatt.schema.spec import SloSpec

__all__ = [
    "CONFIDENCE",
    "MAX_STREAM_CORRELATION",
    "MIN_PAIRED_DOF",
    "MIN_PAIRED_STREAMS",
    "MIN_PROBES",
    "MIN_WINDOW_REQUESTS",
    "NEIGHBOURHOOD_LN",
    "TARGET_FRACTION",
    "CapacityEstimate",
    "ConstraintFit",
    "ProbeCounts",
    "RelativeCapacity",
    "SloName",
    "estimate_capacity",
    "exceedance",
    "fit_constraint",
    "pct_of_log_ratio",
    "probe_counts",
    "relative_capacity",
    "short_of_steady",
    "slo_bounds",
    "stream_correlation",
]

SloName = Literal["ttft", "ttfat", "tpot"]
"""A bound of the SLO: the first-token one (``ttft``, or ``ttfat`` when the SLO names it) and
``tpot``."""


def slo_bounds(slo: SloSpec) -> dict[SloName, float]:
    """The SLO's two bounds by name: its first-token bound (TTFT or TTFAT) and TPOT, ms."""
    return {slo.first_token: slo.first_token_p99_ms, "tpot": slo.tpot_p99_ms}


CONFIDENCE = 0.95
TARGET_FRACTION = 0.01
"""p99: at most 1 % of requests over the bound."""
NEIGHBOURHOOD_LN = 0.35
"""Probes within this distance of the crossing in ln r (rates from 0.70 to 1.42 times it) enter
the fit."""
MIN_PAIRED_DOF = 3
"""The paired fit of :func:`relative_capacity` is used only if it keeps this many degrees of
freedom..."""
MIN_PAIRED_STREAMS = 3
"""...and has this many streams that two configurations probed, to estimate their correlation."""
MAX_STREAM_CORRELATION = 0.8
"""The estimated correlation is capped here: a handful of pairs can make it look like 1. On the
demo scenario (120 paired trials, benchmarks/README.md) a cap of 0.9 left the 95 % intervals
holding the true change in 91 % of trials, 0.8 in 93 %; the estimates there sit near 0.8. The
same cap holds the correlation of the counts of one run's probes of one stream ("Probes that
share a stream"; 0.70 pooled on the demo, a run's own estimate under 0.81 in nine runs of ten)."""
MIN_PROBES = 3
"""The fit needs at least this many probes (two parameters and one for the dispersion)."""
_MAX_ITER = 200
_MAX_STEP = 5.0
_EXTRAPOLATION = 1.05
"""A crossing more than this factor outside the fitted probes' rates is not reported."""
_LOGIT_TARGET = math.log(TARGET_FRACTION / (1.0 - TARGET_FRACTION))
_LN_LARGEST = math.log(1e300)


def pct_of_log_ratio(log_ratio: float) -> float:
    """A change given as ln(new / old), in percent: ``(exp(log_ratio) - 1) * 100``."""
    return (math.exp(log_ratio) - 1.0) * 100.0


@dataclass(frozen=True)
class ProbeCounts:
    """One probe's requests over one bound."""

    index: int
    rate_rps: float
    requests: int
    """Requests counted: window requests, less successful ones with no value (TPOT of a
    one-token answer)."""
    exceeding: int
    """Requests over the bound, failed ones included."""
    complete: bool
    """Not stopped early."""
    passed: bool
    """This bound's nearest-rank p99 is within it over the probe's window."""
    stream: int | None = None
    """Workload stream whose arrival schedule and request lengths it sent (None: its own).
    Probes of one stream share their requests, so their counts go up and down together."""


@dataclass(frozen=True)
class ConstraintFit:
    """The capacity for one latency bound."""

    slo: SloName
    capacity_rps: float | None
    """Point estimate (None: no crossing found; see ``lower_bound_rps`` / ``upper_bound_rps``)."""
    ci_rps: tuple[float, float] | None
    """95 % interval, when the fit gives a bounded one."""
    method: Literal["logistic", "bracket", "above_all", "below_all"]
    """``logistic``: the fit; ``bracket``: the fit failed, the bracket's geometric middle;
    ``above_all``: no probe exceeded the bound; ``below_all``: no probe met it."""
    lower_bound_rps: float | None = None
    """Highest rate at which this bound was met."""
    upper_bound_rps: float | None = None
    """Lowest rate above it at which it was not."""
    probes_used: int = 0
    short_of_steady: int = 0
    """Probes whose verdict on this bound was left out: a pass of a window whose load ran short
    of steady state, or a fail of one whose load ran over it (module docstring)."""
    dispersion: float | None = None
    """phi: how much more the counts vary than independent requests would."""
    dof: int | None = None
    """Degrees of freedom of the interval's t (module docstring, "Probes that share a stream")."""
    shared_stream_correlation: float | None = None
    """rho: how alike the counts of two probes of one workload stream are (0: no stream sent
    twice among the probes fitted)."""
    log_se: float | None = None
    """Standard error of ln(capacity) (delta method, dispersion and shared streams included)."""
    intercept: float | None = None
    slope: float | None = None
    """b of logit q = a + b ln r."""

    def fraction_at(self, rate_rps: float) -> float | None:
        """The fitted fraction of requests over the bound at a rate (None without a fit)."""
        if self.intercept is None or self.slope is None:
            return None
        return _expit(self.intercept + self.slope * math.log(rate_rps))


@dataclass(frozen=True)
class CapacityEstimate:
    """The SLO capacity of one run."""

    capacity_rps: float | None
    ci_rps: tuple[float, float] | None
    binding_slo: SloName | None
    bracket_rps: tuple[float | None, float | None]
    """(highest passing probe, lowest failing probe above it), req/s."""
    fits: dict[SloName, ConstraintFit] = field(default_factory=dict)
    probes_used: int = 0
    log_se: float | None = None
    dof: int | None = None
    method: str = ""

    @property
    def half_width_pct(self) -> float | None:
        """Half the interval's width relative to the estimate, in percent."""
        if self.capacity_rps is None or self.ci_rps is None:
            return None
        return (self.ci_rps[1] - self.ci_rps[0]) / 2.0 / self.capacity_rps * 100.0


def _expit(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def exceedance(
    table: RequestTable, column: TableColumn, bound_ms: float, *, skip_cancelled: bool = False
) -> tuple[int, int]:
    """(requests counted, requests over ``bound_ms``) of one column of a probe's requests.

    A failed request counts as over; a successful one with no value (TPOT of a one-token
    answer) is left out; cancelled ones (cut by an early stop) are left out on request.
    """
    n = k = 0
    for status, value in zip(table.status, table_column(table, column), strict=True):
        if status == "cancelled" and skip_cancelled:
            continue
        if status != "ok":
            n += 1
            k += 1
        elif value is not None:
            n += 1
            if value > bound_ms:
                k += 1
    return n, k


def probe_counts(probes: Sequence[ProbeRecord], slo: SloSpec) -> dict[SloName, list[ProbeCounts]]:
    """Per bound, the counts of every usable probe (see the module docstring).

    A probe stopped early on a fail counts as failing only the bound that proved it (the other
    bound's verdict is unknown: its cut requests say nothing about it), and its counts leave the
    cut requests out. A pass of a window whose load ran short of steady state, and a fail of one
    whose load ran over it, are left out (:func:`short_of_steady`).
    """
    return _probe_counts(probes, slo)[0]


def short_of_steady(probe: ProbeRecord, passed: bool) -> bool:
    """Whether a probe's verdict on a bound says nothing about the steady state (pure).

    A pass, when the load in the system fell short of the steady state by more than the audit's
    limit averaged over its window (its latencies read low); a fail, when it was over it by as
    much (a ramp from a faster probe: they read high). A probe without the audit (an old run
    file) is taken as steady.
    """
    audit = probe.audits.steady_state if probe.audits is not None else None
    if audit is None or abs(audit.window_shortfall_pct) <= STEADY_STATE_SHORTFALL_PCT:
        return False
    return (audit.window_shortfall_pct > 0) == passed


def _probe_counts(
    probes: Sequence[ProbeRecord], slo: SloSpec, *, steady_only: bool = True
) -> tuple[dict[SloName, list[ProbeCounts]], dict[SloName, int]]:
    """:func:`probe_counts`, and per bound how many verdicts :func:`short_of_steady` left out."""
    bounds = slo_bounds(slo)
    out: dict[SloName, list[ProbeCounts]] = {name: [] for name in bounds}
    left_out: dict[SloName, int] = dict.fromkeys(bounds, 0)
    for p in probes:
        if p.client_bound or p.requests is None or p.window_requests == 0:
            continue
        stop = p.early_stop
        for name, bound in bounds.items():
            column: TableColumn = "tpot_ms" if name == "tpot" else slo.first_token_column
            n, k = exceedance(p.requests, column, bound, skip_cancelled=stop is not None)
            if n == 0:
                continue
            if stop is None:
                passed = k < exceeding_to_fail(n)  # the nearest-rank p99 is within the bound
            elif stop.outcome == "pass":
                passed = True
            else:
                proved = stop.tpot_exceeding if name == "tpot" else stop.ttft_exceeding
                if proved < stop.exceeding_needed:
                    continue  # stopped by the other bound: this one's verdict is unknown
                passed = False
            if steady_only and short_of_steady(p, passed):
                left_out[name] += 1
                continue
            out[name].append(
                ProbeCounts(
                    index=p.index,
                    rate_rps=p.rate_rps,
                    requests=n,
                    exceeding=k,
                    complete=stop is None,
                    passed=passed,
                    stream=p.stream_id,
                )
            )
    return out, left_out


def _binomial_weights(n: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The binomial variance of each probe's count, n q (1 - q): the fit's weight (never 0)."""
    weights: np.ndarray = n * q * (1.0 - q) + 1e-12
    return weights


def _logistic_mle(
    x: np.ndarray, k: np.ndarray, n: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float] | None:
    """(a, b), their covariance and the Pearson chi^2 of logit q = a + b x; None if it fails.

    Firth's bias-reduced estimate (Firth 1993, Biometrika 80:27): the score gains
    h_i (1/2 - q_i) per probe, h the leverages of the weighted fit. With a handful of
    overdispersed probes the plain maximum-likelihood slope comes out too steep (20 against 14
    pooled over 30 demo trials), which puts the crossing too close to the probes above it;
    the correction removes the leading term of that bias and always has a finite solution.
    """
    design = np.column_stack([np.ones_like(x), x])
    pooled = (k.sum() + 0.5) / (n.sum() + 1.0)
    beta = np.array([math.log(pooled / (1.0 - pooled)), 0.0])
    for _ in range(_MAX_ITER):
        eta = np.clip(design @ beta, -30.0, 30.0)
        q = 1.0 / (1.0 + np.exp(-eta))
        w = _binomial_weights(n, q)
        info = (design.T * w) @ design
        try:
            inv = np.linalg.inv(info)
        except np.linalg.LinAlgError:
            return None
        leverage = w * np.einsum("ij,jk,ik->i", design, inv, design)
        step = inv @ (design.T @ (k - n * q + leverage * (0.5 - q)))
        largest = float(np.max(np.abs(step)))
        if not math.isfinite(largest):
            return None
        if largest > _MAX_STEP:
            step *= _MAX_STEP / largest  # damped: far from the solution the step overshoots
        beta = beta + step
        if largest < 1e-10:
            break
    eta = np.clip(design @ beta, -30.0, 30.0)
    q = 1.0 / (1.0 + np.exp(-eta))
    w = _binomial_weights(n, q)
    try:
        cov = np.linalg.inv((design.T * w) @ design)
    except np.linalg.LinAlgError:
        return None
    pearson = float((((k - n * q) ** 2) / w).sum())
    return beta, cov, pearson


def _stream_sharing(
    x: np.ndarray,
    k: np.ndarray,
    n: np.ndarray,
    expected: np.ndarray,
    streams: Sequence[int],
    phi: float,
) -> tuple[float, np.ndarray]:
    """(rho, B): how alike the counts of a stream's probes are, and their cross terms.

    The score's variance is phi (I + rho B), I the fit's information (module docstring, "Probes
    that share a stream"). rho is the moment estimate from the Pearson residuals of every pair
    of probes of one stream (generalised estimating equations, exchangeable within a stream),
    capped to [0, :data:`MAX_STREAM_CORRELATION`]; (0, 0) when no stream was sent twice.
    """
    design = np.column_stack([np.ones_like(x), x])
    w = _binomial_weights(n, expected / n)
    residual = (k - expected) / np.sqrt(w)
    by_stream: dict[int, list[int]] = {}
    for i, stream in enumerate(streams):
        by_stream.setdefault(stream, []).append(i)
    shared = np.zeros((2, 2))
    products = 0.0
    pairs = 0
    for members in by_stream.values():
        for pos, i in enumerate(members):
            for j in members[pos + 1 :]:
                outer = np.outer(design[i], design[j])
                shared += math.sqrt(w[i] * w[j]) * (outer + outer.T)
                products += float(residual[i] * residual[j])
                pairs += 1
    if pairs == 0:
        return 0.0, shared
    rho = min(MAX_STREAM_CORRELATION, max(0.0, products / pairs / phi))
    return rho, shared


def _fieller(a: float, b: float, cov: np.ndarray, t2: float) -> tuple[float, float] | None:
    """Fieller's interval for x = (L - a) / b: {x : (a + b x - L)^2 <= t^2 Var(a + b x)}."""
    c = a - _LOGIT_TARGET
    v_aa, v_ab, v_bb = float(cov[0, 0]), float(cov[0, 1]), float(cov[1, 1])
    qa = b * b - t2 * v_bb
    if qa <= 0:
        return None  # the slope is not clearly positive: the interval is unbounded
    qb = 2.0 * (c * b - t2 * v_ab)
    qc = c * c - t2 * v_aa
    disc = qb * qb - 4.0 * qa * qc
    if disc < 0:
        return None  # pragma: no cover - impossible when qa > 0 (the estimate is inside)
    root = math.sqrt(disc)
    return (-qb - root) / (2.0 * qa), (-qb + root) / (2.0 * qa)


def _rate_interval(
    shift: float, interval: tuple[float, float] | None
) -> tuple[float, float] | None:
    """Fieller's interval in ln r (less ``shift``) as rates; None when it is unbounded.

    A slope barely clearly positive gives a finite interval so wide that a rate at its end
    rounds to 0 or to infinity (seen at 4,800 probe-seconds on the demo): that is no bound.
    """
    if interval is None:
        return None
    ln_low, ln_high = shift + interval[0], shift + interval[1]
    if ln_high > _LN_LARGEST:
        return None
    low = math.exp(ln_low)  # 0.0 when it underflows
    return (low, math.exp(ln_high)) if low > 0.0 else None


def _bracket(counts: Sequence[ProbeCounts]) -> tuple[float | None, float | None]:
    passed = [c.rate_rps for c in counts if c.passed]
    low = max(passed) if passed else None
    above = [c.rate_rps for c in counts if not c.passed and (low is None or c.rate_rps > low)]
    return low, (min(above) if above else None)


def fit_constraint(
    slo: SloName,
    counts: Sequence[ProbeCounts],
    *,
    confidence: float = CONFIDENCE,
    include_incomplete: bool = False,
) -> ConstraintFit:
    """The capacity for one bound from its probes' counts (see the module docstring).

    ``include_incomplete`` fits probes stopped early too, with the counts they had at the stop:
    biased (the stop came exactly when they reached a proof), so only for deciding where to
    probe next, never for a reported figure.
    """
    low, high = _bracket(counts)
    passed = [c.rate_rps for c in counts if c.passed]
    failed = [c.rate_rps for c in counts if not c.passed]
    if not counts:
        return ConstraintFit(slo, None, None, "above_all")  # no window requests: nothing known
    if not passed:
        return ConstraintFit(slo, None, None, "below_all", upper_bound_rps=min(failed))
    if not failed:
        return ConstraintFit(slo, None, None, "above_all", lower_bound_rps=max(passed))
    # Noisy probes may interleave (a pass above a fail): the crossing is somewhere between the
    # lowest fail and the highest pass, whichever comes first.
    edges = sorted((min(failed), max(passed)))
    middle = math.sqrt(edges[0] * edges[1])
    # Without a fit, that middle; no interval: the probes' own verdicts are biased towards
    # passing by short windows (module docstring), so they bracket nothing at 95 %.
    fallback = ConstraintFit(
        slo,
        middle,
        None,
        "bracket",
        lower_bound_rps=low,
        upper_bound_rps=high,
    )
    usable = [c for c in counts if c.complete or include_incomplete]
    centre = math.log(middle)
    best: ConstraintFit | None = None
    for _ in range(5):
        # The model need only hold near the crossing: fit the probes around the current
        # estimate, and move the neighbourhood with it until it settles.
        near = sorted(usable, key=lambda c: abs(math.log(c.rate_rps) - centre))
        chosen = [c for c in near if abs(math.log(c.rate_rps) - centre) <= NEIGHBOURHOOD_LN]
        if len(chosen) < MIN_PROBES:
            chosen = near[:MIN_PROBES]
        fit = _fit(slo, chosen, confidence, low, high)
        if fit is None or fit.capacity_rps is None:
            break
        best = fit
        new_centre = math.log(fit.capacity_rps)
        if abs(new_centre - centre) < 1e-6:
            break
        centre = new_centre
    return best if best is not None else fallback


def _fit(
    slo: SloName,
    chosen: Sequence[ProbeCounts],
    confidence: float,
    low: float | None,
    high: float | None,
) -> ConstraintFit | None:
    """The logistic fit of the chosen probes, or None when it cannot be made."""
    from scipy import stats as scipy_stats  # slow to import: on first use

    m = len(chosen)
    rates = np.array([c.rate_rps for c in chosen])
    if m < MIN_PROBES or np.ptp(np.log(rates)) == 0:
        return None
    k = np.array([c.exceeding for c in chosen], dtype=np.float64)
    n = np.array([c.requests for c in chosen], dtype=np.float64)
    if k.sum() == 0 or (k == n).all():
        return None
    x = np.log(rates)
    shift = float(x.mean())
    mle = _logistic_mle(x - shift, k, n)
    if mle is None:
        return None
    (a, b), cov, pearson = mle
    if not b > 0:
        return None
    streams = [-1 - i if c.stream is None else c.stream for i, c in enumerate(chosen)]
    expected = n * np.array([_expit(float(a + b * xi)) for xi in x - shift])
    # Degrees of freedom of the dispersion: probes far below the crossing expect almost no
    # request over the bound and say almost nothing about phi; count the streams of those that
    # expect one (a stream's probes share their requests: one stream, one independent unit).
    dof = max(1, len({s for s, e in zip(streams, expected, strict=True) if e >= 1.0}) - 2)
    phi = max(1.0, pearson / max(1, m - 2))
    rho, shared = _stream_sharing(x - shift, k, n, expected, streams, phi)
    cov = phi * (cov + rho * cov @ shared @ cov)
    t = float(scipy_stats.t.ppf(0.5 + confidence / 2.0, dof))
    centre = (_LOGIT_TARGET - a) / b
    grad = np.array([-1.0 / b, -centre / b])
    log_se = math.sqrt(max(0.0, float(grad @ cov @ grad)))
    interval = _fieller(float(a), float(b), cov, t * t)
    ci = _rate_interval(shift, interval)
    reach = math.exp(NEIGHBOURHOOD_LN)
    if ci is not None and not (rates.min() / reach <= ci[0] and ci[1] <= rates.max() * reach):
        # An end far outside the fitted probes' rates rests on the model where it was never
        # asked to hold (it need only hold near the crossing): no bound at 95 %.
        ci = None
    capacity = math.exp(shift + centre)
    if not rates.min() / _EXTRAPOLATION <= capacity <= rates.max() * _EXTRAPOLATION:
        return None  # the crossing lies outside the probed rates: an extrapolation, not a fit
    return ConstraintFit(
        slo,
        capacity,
        ci,
        "logistic",
        lower_bound_rps=low,
        upper_bound_rps=high,
        probes_used=m,
        dispersion=phi,
        dof=dof,
        shared_stream_correlation=rho,
        log_se=log_se,
        intercept=float(a) - float(b) * shift,
        slope=float(b),
    )


def estimate_capacity(
    probes: Sequence[ProbeRecord],
    slo: SloSpec,
    *,
    confidence: float = CONFIDENCE,
    include_incomplete: bool = False,
    steady_only: bool = True,
) -> CapacityEstimate:
    """The SLO capacity of a run from all its probes (see the module docstring).

    ``include_incomplete``: see :func:`fit_constraint` (the adaptive sweep's placement only).
    ``steady_only=False`` counts the verdicts of windows short of (or over) steady state too:
    biased, so only for deciding where to probe next, never for a reported figure.
    """
    counts, left_out = _probe_counts(probes, slo, steady_only=steady_only)
    fits = {
        name: dataclasses.replace(
            fit_constraint(
                name, counts[name], confidence=confidence, include_incomplete=include_incomplete
            ),
            short_of_steady=left_out[name],
        )
        for name in counts
    }
    bracket = _run_bracket(probes)
    used = sum(1 for p in probes if not p.client_bound and p.window_requests > 0)
    finite = {name: f for name, f in fits.items() if f.capacity_rps is not None}
    if not finite:
        below = [f for f in fits.values() if f.method == "below_all"]
        return CapacityEstimate(
            capacity_rps=None,
            ci_rps=None,
            binding_slo=below[0].slo if below else None,
            bracket_rps=bracket,
            fits=fits,
            probes_used=used,
            method="no crossing: " + ", ".join(f"{n} {f.method}" for n, f in fits.items()),
        )
    binding = min(finite, key=lambda name: finite[name].capacity_rps or math.inf)
    best = finite[binding]
    ci = best.ci_rps
    other = next((f for name, f in finite.items() if name != binding), None)
    if ci is not None and other is not None and other.ci_rps is not None:
        # The lower of two capacities: where the other bound's interval reaches below this
        # one's, either could bind; the interval of the minimum covers both.
        ci = (min(ci[0], other.ci_rps[0]), min(ci[1], other.ci_rps[1]))
    return CapacityEstimate(
        capacity_rps=best.capacity_rps,
        ci_rps=ci,
        binding_slo=binding,
        bracket_rps=bracket,
        fits=fits,
        probes_used=used,
        log_se=best.log_se,
        dof=best.dof,
        method=best.method,
    )


def _run_bracket(probes: Sequence[ProbeRecord]) -> tuple[float | None, float | None]:
    passed = [p.rate_rps for p in probes if p.slo_pass]
    low = max(passed) if passed else None
    above = [p.rate_rps for p in probes if not p.slo_pass and (low is None or p.rate_rps > low)]
    return low, (min(above) if above else None)


# ---------------------------------------------------------------------------------------------
# Relative capacity: one configuration against another


MIN_WINDOW_REQUESTS = 20
"""A probe enters the relative fit only with at least this many window requests."""


@dataclass(frozen=True)
class RelativeCapacity:
    """Capacity of each configuration relative to the first, from one joint fit.

    ``log_ratio[k]`` is ln(capacity_k / capacity_0) (0 for k = 0), ``ci[k]`` its 95 % interval
    (None when unbounded), ``log_se[k]`` its standard error, all with ``dof`` degrees of
    freedom.
    """

    slo: SloName
    log_ratio: list[float]
    ci: list[tuple[float, float] | None]
    log_se: list[float | None]
    dof: int
    slope: float
    """kappa: d ln p99 / d ln r, shared by every configuration."""
    probes_used: list[int]
    residual_sd: float
    """Scatter of the probes' ln p99 about the fit (weighted by window requests)."""
    paired_streams: int = 0
    """Workload streams the fit paired the configurations on (0: unpaired)."""
    stream_correlation: float | None = None
    """rho: the correlation of two configurations' probes of one stream (None: not fitted)."""
    stream_effects: int = 0
    """Streams whose own effect the fit held fixed (0: no stream effects; see "Stream
    effects")."""
    slope_streams: int = 0
    """Of those, streams one configuration sent at two rates or more (the slope's evidence)."""

    def change_pct(self, k: int) -> float:
        """Configuration k's capacity change against the first, %."""
        return pct_of_log_ratio(self.log_ratio[k])

    def ci_pct(self, k: int) -> tuple[float, float] | None:
        """Its 95 % interval, %."""
        ci = self.ci[k]
        if ci is None:
            return None
        return (pct_of_log_ratio(ci[0]), pct_of_log_ratio(ci[1]))


_Row = tuple[float, float, float, int]
"""(ln rate, ln p99/S, window requests, the probe's workload stream)."""


def _p99_rows(probes: Sequence[ProbeRecord], name: SloName, bound_ms: float) -> list[_Row]:
    rows: list[_Row] = []
    for p in probes:
        if p.client_bound or p.early_stop is not None or p.window_requests < MIN_WINDOW_REQUESTS:
            continue
        p99 = (p.tpot_ms if name == "tpot" else p.first_token_ms(name)).p99
        if p99 is None or not math.isfinite(p99) or p99 <= 0:
            continue
        rows.append(
            (math.log(p.rate_rps), math.log(p99 / bound_ms), float(p.window_requests), p.stream_id)
        )
    return rows


def relative_capacity(
    runs: Sequence[Sequence[ProbeRecord]],
    slo: SloSpec,
    *,
    binding: SloName,
    centres_rps: Sequence[float | None],
    paired: bool = False,
    confidence: float = CONFIDENCE,
) -> RelativeCapacity | None:
    """Capacity of every run relative to the first, from a joint fit of their probes.

    **Method.** For the binding bound S, each probe i of configuration k gives
    y = ln(p99_i / S) at x = ln r_i. Near the boundary, y = alpha_k + kappa x with one slope
    kappa for every configuration (they are the same workload on the same kind of engine; what
    differs is where each curve crosses 0), fitted by least squares weighted by window requests,
    to the probes within :data:`NEIGHBOURHOOD_LN` of each configuration's crossing (at least two
    each). Configuration k's capacity relative to the first is
    ln(c_k / c_0) = (alpha_0 - alpha_k) / kappa, with Fieller's interval from the fit's residual
    scatter and Student's t. A short window's p99 reads low (tail episodes it may miss), but
    equally so for configurations measured with the same windows and workload: the bias that
    keeps this from estimating each capacity cancels in the ratio, and the p99's magnitude
    carries more information than a count of requests over the bound.

    **Pairing (common random numbers).** When every configuration ran the same workload with the
    same seed, probe i of each saw the same requests on the same arrival schedule, only scaled in
    time by its rate (stream i). What that stream holds (a cluster of long requests, a burst)
    moves the p99 of every configuration alike: on the demo scenario, ln p99 TPOT of the same
    stream at each configuration's capacity correlates 0.88 between the two (16 streams, 120 s
    windows). With ``paired``, the two probes of a stream are taken as correlated: rho is
    estimated from the unpaired fit's residuals (:func:`stream_correlation`), and the fit is
    redone by generalised least squares with that correlation between the probes of a stream
    in different configurations, which weighs their difference more than their sum; one degree
    of freedom goes to rho. Needs :data:`MIN_PAIRED_STREAMS` shared streams and
    :data:`MIN_PAIRED_DOF` degrees of freedom left; otherwise (or when rho comes out 0) the
    unpaired fit stands.

    **Stream effects.** When the runs sent some streams at two rates each (the adaptive sweep's
    stream pairs, :mod:`tokenwatt.adaptive`), the fit does better than a correlation: it gives
    every stream its own intercept, y = gamma_s + delta_k + kappa x, so whatever a stream's
    requests do to the tail drops out entirely. The slope kappa then comes from one stream's two
    rates (the same requests, only faster), and delta_k from the streams the configurations
    share; ln(c_k / c_0) = -delta_k / kappa. A stream with a single probe in the fit carries no
    information there and is left out. Used when it has :data:`MIN_PAIRED_STREAMS` shared
    streams, a stream sent at two rates, and :data:`MIN_PAIRED_DOF` degrees of freedom; the
    sweeps that place probes independently (bisection: a stream once per run, at rates a
    near-constant ratio apart in two runs) fall back to the correlation above.

    Args:
        runs: each configuration's probes, the reference first.
        slo: the latency objective.
        binding: the bound to compare on (the reference's binding SLO).
        centres_rps: each configuration's capacity estimate, to centre its neighbourhood
            (None: the geometric mean of its probes' rates).
        paired: the configurations share their workload and seed (stream i is the same
            requests in every one): fit stream intercepts, see above.
        confidence: of the intervals.

    Returns:
        None when the fit is not possible (too few usable probes, or no positive slope).
    """
    from scipy import stats as scipy_stats  # slow to import: on first use

    bound = slo_bounds(slo)[binding]
    k_count = len(runs)
    rows = [_p99_rows(probes, binding, bound) for probes in runs]
    if k_count < 2 or any(len(r) < 2 for r in rows):
        return None
    centres = []
    for r, centre in zip(rows, centres_rps, strict=True):
        centres.append(
            math.log(centre)
            if centre is not None and centre > 0
            else sum(row[0] for row in r) / len(r)
        )
    near = _neighbourhood(rows, centres)
    # Stream effects are fitted around each configuration's own capacity estimate (the unpaired
    # fit's crossings move with what the streams did to it); else the fit by correlation.
    fit = _stream_effects(near, k_count) if paired else None
    if fit is None:
        fit = _correlated_fit(rows, centres, k_count, paired=paired)
    if fit is None:
        return None
    beta, cov, dof = fit.beta, fit.cov, fit.dof
    kappa = float(beta[k_count])
    t = float(scipy_stats.t.ppf(0.5 + confidence / 2.0, dof))
    log_ratio = [0.0]
    cis: list[tuple[float, float] | None] = [(0.0, 0.0)]
    ses: list[float | None] = [0.0]
    for k in range(1, k_count):
        g = np.zeros(k_count + 1)
        g[0], g[k] = 1.0, -1.0
        num = float(g @ beta)
        v_nn = float(g @ cov @ g)
        v_nk = float(g @ cov[:, k_count])
        v_kk = float(cov[k_count, k_count])
        d = num / kappa
        log_ratio.append(d)
        ses.append(math.sqrt(max(0.0, v_nn - 2 * d * v_nk + d * d * v_kk)) / kappa)
        qa = kappa * kappa - t * t * v_kk
        if qa <= 0:
            cis.append(None)
            continue
        qb = -2.0 * (num * kappa - t * t * v_nk)
        qc = num * num - t * t * v_nn
        disc = qb * qb - 4.0 * qa * qc
        if disc <= 0:
            # Only a covariance that is not positive definite gets here (the estimate is
            # inside a proper Fieller set): no interval rather than a point.
            cis.append(None)
            continue
        root = math.sqrt(disc)
        cis.append(((-qb - root) / (2.0 * qa), (-qb + root) / (2.0 * qa)))
    return RelativeCapacity(
        slo=binding,
        log_ratio=log_ratio,
        ci=cis,
        log_se=ses,
        dof=dof,
        slope=kappa,
        probes_used=fit.used,
        residual_sd=math.sqrt(fit.s2),
        paired_streams=fit.paired_streams,
        stream_correlation=fit.rho,
        stream_effects=fit.streams,
        slope_streams=fit.slope_streams,
    )


@dataclass(frozen=True)
class _JointFit:
    """A joint fit of the configurations and how it paired them.

    Coefficients (alpha_0 .. alpha_{K-1}, kappa), their covariance and degrees of freedom.
    """

    beta: np.ndarray
    cov: np.ndarray
    dof: int
    s2: float
    used: list[int]
    """Probes of each configuration in the fit."""
    paired_streams: int = 0
    rho: float | None = None
    streams: int = 0
    """Streams whose effect was held fixed (0: none)."""
    slope_streams: int = 0


def _correlated_fit(
    rows: Sequence[list[_Row]], centres: list[float], k_count: int, *, paired: bool
) -> _JointFit | None:
    """One intercept per configuration, fitted around its crossing until that settles.

    With ``paired``, refitted by generalised least squares with the streams' correlation (see
    :func:`relative_capacity`). None without enough probes or a positive slope.
    """
    fit: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[int]] | None = None
    chosen: list[tuple[int, list[_Row]]] = []
    for _ in range(8):
        chosen = _neighbourhood(rows, centres)
        design, y, w = _relative_design(chosen, k_count)
        if len(y) <= k_count + 1:
            return None
        sw = np.sqrt(w)
        beta, *_ = np.linalg.lstsq(design * sw[:, None], y * sw, rcond=None)
        kappa = float(beta[k_count])
        if not kappa > 0:
            return None
        new = [-float(beta[k]) / kappa for k in range(k_count)]
        fit = (beta, design, y, w, [len(c) for _, c in chosen])
        if max(abs(a - b) for a, b in zip(new, centres, strict=True)) < 1e-6:
            break
        centres = new
    assert fit is not None
    beta, design, y, w, used = fit
    dof = len(y) - design.shape[1]
    resid = y - design @ beta
    s2 = float((w * resid * resid).sum() / dof)
    cov = s2 * np.linalg.inv((design.T * w) @ design)
    streams, configs = _stream_labels(chosen)
    shared = _shared_streams(streams, configs)
    if not (paired and len(shared) >= MIN_PAIRED_STREAMS and dof - 1 >= MIN_PAIRED_DOF):
        return _JointFit(beta, cov, dof, s2, used)
    rho = stream_correlation((resid * np.sqrt(w)).tolist(), streams.tolist(), configs.tolist())
    gls = _gls(design, y, w, streams, rho) if rho > 0 else None
    if gls is None or not float(gls[0][k_count]) > 0:
        return _JointFit(beta, cov, dof, s2, used)
    beta, v_inv, info = gls
    resid = y - design @ beta
    dof -= 1  # rho was estimated from the same probes
    s2 = float(resid @ v_inv @ resid / dof)
    return _JointFit(beta, s2 * np.linalg.inv(info), dof, s2, used, len(shared), rho)


def _neighbourhood(
    rows: Sequence[list[_Row]], centres: Sequence[float]
) -> list[tuple[int, list[_Row]]]:
    """Each configuration's rows within :data:`NEIGHBOURHOOD_LN` of its centre (at least two)."""
    chosen: list[tuple[int, list[_Row]]] = []
    for k, r in enumerate(rows):
        centre_k = centres[k]
        near = sorted(r, key=lambda row: abs(row[0] - centre_k))
        inside = [row for row in near if abs(row[0] - centre_k) <= NEIGHBOURHOOD_LN]
        chosen.append((k, inside if len(inside) >= 2 else near[:2]))
    return chosen


def _stream_labels(chosen: Sequence[tuple[int, Sequence[_Row]]]) -> tuple[np.ndarray, np.ndarray]:
    """(stream, configuration) of every chosen row, in order."""
    streams = np.array([row[3] for _, rows_k in chosen for row in rows_k])
    configs = np.array([k for k, rows_k in chosen for _ in rows_k])
    return streams, configs


def _stream_effects(chosen: Sequence[tuple[int, Sequence[_Row]]], k_count: int) -> _JointFit | None:
    """The fit of y = gamma_s + delta_k + kappa x by weighted least squares ("Stream effects").

    None when the probes do not support it: fewer than :data:`MIN_PAIRED_STREAMS` streams
    shared by two configurations, no stream sent at two rates by one configuration, fewer than
    :data:`MIN_PAIRED_DOF` degrees of freedom, a design that does not determine every
    parameter, or a slope that is not positive.
    """
    streams, configs = _stream_labels(chosen)
    x = np.array([row[0] for _, rows_k in chosen for row in rows_k])
    y = np.array([row[1] for _, rows_k in chosen for row in rows_k])
    w = np.array([row[2] for _, rows_k in chosen for row in rows_k])
    keep = np.array([int((streams == s).sum()) >= 2 for s in streams])
    st, cf, xs, ys, ws = streams[keep], configs[keep], x[keep], y[keep], w[keep]
    if len(_shared_streams(st, cf)) < MIN_PAIRED_STREAMS:
        return None
    slope_streams = sum(
        1
        for s in set(st.tolist())
        if any(len(set(xs[(st == s) & (cf == k)].tolist())) >= 2 for k in range(k_count))
    )
    if slope_streams == 0:
        return None
    ids = sorted(set(st.tolist()))
    design = np.zeros((len(ys), (k_count - 1) + 1 + len(ids)))
    for i, (s, k) in enumerate(zip(st.tolist(), cf.tolist(), strict=True)):
        if k > 0:
            design[i, k - 1] = 1.0
        design[i, k_count - 1] = xs[i]
        design[i, k_count + ids.index(s)] = 1.0
    dof = len(ys) - design.shape[1]
    info = (design.T * ws) @ design
    if dof < MIN_PAIRED_DOF or np.linalg.matrix_rank(info) < design.shape[1]:
        return None
    coef = np.linalg.solve(info, design.T @ (ws * ys))
    if not coef[k_count - 1] > 0:
        return None
    resid = ys - design @ coef
    s2 = float((ws * resid * resid).sum() / dof)
    inner = s2 * np.linalg.inv(info)
    # Back to the joint fit's parameters: alpha_0 = 0 (the streams hold the level),
    # alpha_k = delta_k, kappa.
    beta = np.concatenate([[0.0], coef[:k_count]])
    cov = np.zeros((k_count + 1, k_count + 1))
    cov[1:, 1:] = inner[:k_count, :k_count]
    used = [int((cf == k).sum()) for k in range(k_count)]
    shared = len(_shared_streams(st, cf))
    return _JointFit(beta, cov, dof, s2, used, shared, None, len(ids), slope_streams)


def _gls(
    design: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    streams: np.ndarray,
    rho: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Generalised least squares: (coefficients, V^-1, X' V^-1 X).

    V = W^-1/2 C W^-1/2, with C[i, j] = rho for any two probes of one stream: a random effect
    per stream, so C stays positive definite however often a stream was probed (with rho only
    between configurations, a stream each configuration sent twice made C indefinite for
    rho > 1/2, and the interval collapsed to a point).
    """
    corr = np.eye(len(y))
    same = streams[:, None] == streams[None, :]
    corr[same] = rho
    np.fill_diagonal(corr, 1.0)
    inv_sw = 1.0 / np.sqrt(w)
    v_inv = np.linalg.inv(inv_sw[:, None] * corr * inv_sw[None, :])
    info = design.T @ v_inv @ design
    return np.linalg.solve(info, design.T @ v_inv @ y), v_inv, info


def _shared_streams(streams: np.ndarray, configs: np.ndarray) -> list[int]:
    """The streams probed by two or more configurations."""
    return sorted(
        int(s) for s in set(streams.tolist()) if len(set(configs[streams == s].tolist())) >= 2
    )


def stream_correlation(
    residuals: Sequence[float], streams: Sequence[int], configs: Sequence[int]
) -> float:
    """rho: how alike two configurations' residuals are on the same workload stream.

    Over every pair (i, j) of probes of one stream in different configurations,
    rho = sum(r_i r_j) / sum((r_i^2 + r_j^2) / 2) (the pairwise intraclass correlation), of the
    residuals r (standardised by the weights) of the unpaired fit, clipped to
    [0, :data:`MAX_STREAM_CORRELATION`]. 0 when no stream is shared.
    """
    res = np.asarray(residuals, dtype=float)
    st = np.asarray(streams)
    cf = np.asarray(configs)
    cross = 0.0
    square = 0.0
    for s in _shared_streams(st, cf):
        idx = np.flatnonzero(st == s)
        for a_pos, i in enumerate(idx):
            for j in idx[a_pos + 1 :]:
                if cf[i] != cf[j]:
                    cross += res[i] * res[j]
                    square += (res[i] ** 2 + res[j] ** 2) / 2.0
    if square <= 0:
        return 0.0
    return min(max(cross / square, 0.0), MAX_STREAM_CORRELATION)


def _relative_design(
    chosen: Sequence[tuple[int, Sequence[_Row]]], k_count: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    xs: list[list[float]] = []
    ys: list[float] = []
    ws: list[float] = []
    for k, rows in chosen:
        for x, y, w, _ in rows:
            row = [0.0] * (k_count + 1)
            row[k] = 1.0
            row[k_count] = x
            xs.append(row)
            ys.append(y)
            ws.append(w)
    return np.array(xs), np.array(ys), np.array(ws)
