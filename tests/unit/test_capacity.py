"""SLO capacity: counts, the logistic fit, Fieller's interval, the relative fit (hand-worked)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import pytest

from tests import factories
from tokenwatt import capacity
from tokenwatt.capacity import (
    MAX_STREAM_CORRELATION,
    ProbeCounts,
    estimate_capacity,
    fit_constraint,
    pct_of_log_ratio,
    probe_counts,
    relative_capacity,
    stream_correlation,
)
from tokenwatt.schema.run import EarlyStop, RequestTable
from tokenwatt.schema.spec import SloSpec

SLO = SloSpec(ttft_p99_ms=1000.0, tpot_p99_ms=40.0)
LOGIT_01 = math.log(0.01 / 0.99)


def table(tpot: Sequence[float | None], *, status: list[str] | None = None, ttft: float = 100.0):
    return factories.request_table(tpot, status=status, ttft_ms=ttft)


def probe_with(index: int, rate: float, tab: RequestTable, **kw):
    return factories.probe_with_requests(index, rate, tab, **kw)


def test_counts_follow_the_nearest_rank_rule():
    # 200 requests: 2 over the TPOT bound and 1 failed (over every bound): k = 3. Nearest rank
    # allows 200 - ceil(0.99 * 200) = 2 over, so the probe fails the TPOT bound. A successful
    # one-token answer (TPOT None) is left out: n = 199 counted.
    tpot = [30.0] * 195 + [41.0, 45.0, None, 30.0, 30.0]
    status = ["ok"] * 199 + ["timeout"]
    p = probe_with(0, 10.0, table(tpot, status=status), passed=False)
    counts = probe_counts([p], SLO)
    (tp,) = counts["tpot"]
    assert (tp.requests, tp.exceeding, tp.passed) == (199, 3, False)
    (tt,) = counts["ttft"]
    assert (tt.requests, tt.exceeding, tt.passed) == (200, 1, True)


def test_an_slo_on_ttfat_counts_the_first_answer_token():
    # 100 requests with TTFT 100 ms: 97 answer at 200 ms, one at 600 ms, one reasoned and never
    # answered (+inf TTFAT), one failed. Against a 500 ms TTFAT bound 3 are over (k = 3 > 1
    # allowed): the TTFAT bound fails where a TTFT bound of 500 ms would pass with 1 over.
    tab = table([30.0] * 100, status=["ok"] * 99 + ["timeout"])
    tab = tab.model_copy(update={"ttfat_ms": [200.0] * 97 + [600.0, None, None]})
    p = probe_with(0, 10.0, tab, passed=False)
    on_ttfat = SloSpec(ttfat_p99_ms=500.0, tpot_p99_ms=40.0)
    counts = probe_counts([p], on_ttfat)
    assert set(counts) == {"ttfat", "tpot"}
    (first,) = counts["ttfat"]
    assert (first.requests, first.exceeding, first.passed) == (100, 3, False)
    (on_ttft,) = probe_counts([p], SloSpec(ttft_p99_ms=500.0, tpot_p99_ms=40.0))["ttft"]
    assert (on_ttft.requests, on_ttft.exceeding, on_ttft.passed) == (100, 1, True)
    assert capacity.slo_bounds(on_ttfat) == {"ttfat": 500.0, "tpot": 40.0}


def test_client_bound_probes_are_left_out():
    p = probe_with(0, 10.0, table([30.0] * 100), client_bound=True, passed=False)
    assert probe_counts([p], SLO) == {"ttft": [], "tpot": []}


def test_a_probe_stopped_on_a_fail_counts_only_for_the_bound_that_proved_it():
    tab = table([50.0] * 5 + [30.0] * 5 + [None] * 10, status=["ok"] * 10 + ["cancelled"] * 10)
    stop = EarlyStop(
        stopped_ns=5,
        planned_window_requests=400,
        exceeding_needed=5,
        ttft_exceeding=0,
        tpot_exceeding=5,
        cut_window_requests=10,
        unsent_window_requests=380,
    )
    p = probe_with(0, 20.0, tab, early_stop=stop, passed=False)
    counts = probe_counts([p], SLO)
    assert counts["ttft"] == []  # stopped by TPOT: the TTFT verdict is unknown
    (tp,) = counts["tpot"]
    # The cut requests are left out of the counts: 5 of the 10 that finished were over.
    assert (tp.requests, tp.exceeding, tp.complete, tp.passed) == (10, 5, False, False)


def test_fieller_interval_by_hand():
    # a - L = -2, b = 4: x = 0.5. Var(a) = 0.04, Var(b) = 0.01, Cov = 0, t^2 = 4.
    # (b^2 - t^2 Vbb) x^2 + 2 ((a - L) b - t^2 Vab) x + ((a - L)^2 - t^2 Vaa) <= 0
    # 15.96 x^2 - 16 x + 3.84 <= 0: x = (16 -+ sqrt(256 - 245.1456)) / 31.92
    import numpy as np

    interval = capacity._fieller(LOGIT_01 - 2.0, 4.0, np.array([[0.04, 0.0], [0.0, 0.01]]), 4.0)
    assert interval is not None
    low, high = interval
    root = math.sqrt(256.0 - 4 * 15.96 * 3.84)
    assert low == pytest.approx((16.0 - root) / 31.92, rel=1e-12)
    assert high == pytest.approx((16.0 + root) / 31.92, rel=1e-12)
    assert low == pytest.approx(0.398039, abs=1e-6)
    assert high == pytest.approx(0.604467, abs=1e-6)
    # A slope not clearly positive (b^2 <= t^2 Vbb): unbounded.
    assert capacity._fieller(LOGIT_01, 0.1, np.array([[0.04, 0.0], [0.0, 0.01]]), 4.0) is None


def _exact(rate: float, *, b: float = 10.0, capacity_rps: float = 10.0, n: int = 1_000_000):
    # logit q = L + b ln(r / capacity): q = 1 % exactly at the capacity.
    q = 1.0 / (1.0 + math.exp(-(LOGIT_01 + b * math.log(rate / capacity_rps))))
    k = round(q * n)
    return ProbeCounts(index=0, rate_rps=rate, requests=n, exceeding=k, complete=True,
                       passed=k <= n - math.ceil(0.99 * n))  # fmt: skip


def test_exact_logistic_counts_give_back_the_capacity_and_slope():
    counts = [_exact(r) for r in (8.0, 9.0, 10.0, 11.0, 12.5)]
    fit = fit_constraint("tpot", counts)
    assert fit.method == "logistic"
    assert fit.capacity_rps == pytest.approx(10.0, rel=1e-4)
    assert fit.slope == pytest.approx(10.0, rel=1e-3)
    # Counts that follow the model exactly have no extra scatter: phi is its floor, 1.
    assert fit.dispersion == pytest.approx(1.0)
    assert fit.ci_rps is not None
    assert fit.ci_rps[0] < 10.0 < fit.ci_rps[1]
    assert fit.ci_rps[1] / fit.ci_rps[0] < 1.01  # a million requests per probe: narrow
    assert fit.fraction_at(10.0) == pytest.approx(0.01, rel=1e-3)


def test_overdispersed_counts_widen_the_interval():
    exact = [_exact(r, n=20_000) for r in (8.0, 9.0, 10.0, 11.0, 12.5)]
    # The same probes with their counts scattered (as tail episodes scatter them).
    noisy = [
        ProbeCounts(c.index, c.rate_rps, c.requests, max(0, round(c.exceeding * f)), True, c.passed)
        for c, f in zip(exact, (1.8, 0.4, 1.6, 0.5, 1.3), strict=True)
    ]
    a = fit_constraint("tpot", exact)
    b = fit_constraint("tpot", noisy)
    assert b.dispersion is not None
    assert b.dispersion > 10
    assert a.ci_rps is not None
    width_a = math.log(a.ci_rps[1] / a.ci_rps[0])
    width_b = math.log(b.ci_rps[1] / b.ci_rps[0]) if b.ci_rps else math.inf
    assert width_b > 3 * width_a


def test_shared_stream_correlation_by_hand():
    import numpy as np

    # Two streams, each sent at ln r = -0.1 and +0.1 (centred); 10 expected over the bound of
    # 1,000 requests each, so w = 10 x 0.99 = 9.9. Counts 13, 13 (stream 7) and 7, 10 (stream
    # 8): residuals (3, 3, -3, 0) / sqrt(9.9). rho = (9 + 0) / 9.9 / 2 pairs / phi.
    x = np.array([-0.1, 0.1, -0.1, 0.1])
    k = np.array([13.0, 13.0, 7.0, 10.0])
    n = np.full(4, 1000.0)
    expected = np.full(4, 10.0)
    rho, shared = capacity._stream_sharing(x, k, n, expected, [7, 7, 8, 8], 2.0)
    assert rho == pytest.approx(9.0 / 9.9 / 2.0 / 2.0, rel=1e-9)  # 0.22727
    # B: per pair sqrt(w_i w_j) (X_i X_j' + X_j X_i'), X = (1, x): 9.9 [[2, 0], [0, -0.02]].
    assert shared == pytest.approx(np.array([[39.6, 0.0], [0.0, -0.396]]), rel=1e-9)
    # Capped: counts that move together more than MAX_STREAM_CORRELATION allows.
    rho, _ = capacity._stream_sharing(x, k, n, expected, [7, 7, 8, 8], 0.1)
    assert rho == MAX_STREAM_CORRELATION
    # Negative products are no evidence of independence beyond it: floored at 0.
    rho, _ = capacity._stream_sharing(x, np.array([13.0, 7.0, 7.0, 13.0]), n, expected,
                                      [7, 7, 8, 8], 1.0)  # fmt: skip
    assert rho == 0.0
    # Every stream sent once: nothing shared.
    rho, shared = capacity._stream_sharing(x, k, n, expected, [1, 2, 3, 4], 1.0)
    assert rho == 0.0
    assert not shared.any()


def test_probes_of_one_stream_widen_the_interval_and_count_once():
    exact = [_exact(r, n=3_000) for r in (9.0, 9.5, 10.0, 10.5, 11.0, 11.5, 12.0, 12.5)]
    # Tail episodes that a stream's two probes share: each pair's counts scaled alike.
    factors = (1.3, 1.25, 0.8, 0.75, 1.2, 1.15, 0.8, 0.85)
    paired = [
        dataclasses.replace(c, index=i, exceeding=round(c.exceeding * f), stream=i // 2)
        for i, (c, f) in enumerate(zip(exact, factors, strict=True))
    ]
    alone = [dataclasses.replace(c, stream=None) for c in paired]
    a = fit_constraint("tpot", alone)
    b = fit_constraint("tpot", paired)
    # The same estimate and dispersion: sharing a stream changes how sure it is, not where.
    assert b.capacity_rps == pytest.approx(a.capacity_rps, rel=1e-12)
    assert b.dispersion == pytest.approx(a.dispersion, rel=1e-12)
    assert a.shared_stream_correlation == 0.0
    assert b.shared_stream_correlation is not None
    assert b.shared_stream_correlation > 0.3
    # Eight probes, four streams: the t has 4 - 2 degrees of freedom, not 8 - 2.
    assert (a.dof, b.dof) == (6, 2)
    assert b.log_se is not None
    assert a.log_se is not None
    assert b.log_se > 1.2 * a.log_se
    assert a.ci_rps is not None
    assert b.ci_rps is not None  # bounded, only wider: (9.42, 10.24) against (8.36, 10.55)
    assert b.ci_rps[0] < a.ci_rps[0] < a.ci_rps[1] < b.ci_rps[1]
    assert math.log(b.ci_rps[1] / b.ci_rps[0]) > 2 * math.log(a.ci_rps[1] / a.ci_rps[0])


def test_no_crossing_reports_a_bound_only():
    passing = [ProbeCounts(i, r, 1000, 0, True, True) for i, r in enumerate((5.0, 8.0, 12.0))]
    fit = fit_constraint("ttft", passing)
    assert (fit.method, fit.capacity_rps, fit.lower_bound_rps) == ("above_all", None, 12.0)
    failing = [ProbeCounts(i, r, 1000, 900, True, False) for i, r in enumerate((5.0, 8.0))]
    fit = fit_constraint("ttft", failing)
    assert (fit.method, fit.capacity_rps, fit.upper_bound_rps) == ("below_all", None, 5.0)


def test_estimate_takes_the_lower_bound_as_binding():
    probes = []
    for i, (rate, over) in enumerate(((8.0, 0), (10.0, 2), (11.0, 8), (12.0, 30), (14.0, 200))):
        tpot = [45.0] * over + [30.0] * (1000 - over)
        probes.append(probe_with(i, rate, table(tpot), passed=over <= 10))
    est = estimate_capacity(probes, SLO)
    assert est.binding_slo == "tpot"
    assert est.fits["ttft"].method == "above_all"
    assert est.capacity_rps is not None
    assert 10.0 < est.capacity_rps < 12.0
    assert est.bracket_rps == (11.0, 12.0)


def _steady(shortfall_pct: float):
    """Probe audits whose steady-state audit found ``shortfall_pct`` over the window (1 % is
    the limit; at its opening, twice that)."""
    from tokenwatt.schema.run import ProbeAudits, SteadyStateAudit

    audit = SteadyStateAudit(
        requests=100,
        mean_time_in_system_s=20.0,
        longest_time_in_system_s=600.0,
        warmup_s=45.0,
        shortfall_pct=2 * shortfall_pct,
        window_shortfall_pct=shortfall_pct,
        steady_warmup_s=300.0,
        holds=abs(2 * shortfall_pct) <= 1.0,
    )
    return ProbeAudits(steady_state=audit)


def test_a_pass_short_of_steady_state_and_a_fail_over_it_are_not_counted():
    # 1,000 requests a probe. The pass at 12 req/s (none over) ran 8 % short of steady state
    # over its window: left out. The fail at 10 (50 over) ran 5 % short: counted (more load only
    # adds to a fail). Two probes are too few for the fit, so the capacity is the bracket's geometric
    # middle: sqrt(9 x 10) = 9.487. Counted as before, the short pass would make the "bracket"
    # 10 (fail) to 12 (pass) and the capacity sqrt(10 x 12) = 10.954, above a measured fail.
    rows = ((9.0, 0, 0.5), (10.0, 50, 5.0), (12.0, 0, 8.0))  # rate, over the bound, shortfall %
    probes = [
        probe_with(
            i,
            rate,
            table([45.0] * over + [30.0] * (1000 - over)),
            passed=over <= 10,
            audits=_steady(short),
        )
        for i, (rate, over, short) in enumerate(rows)
    ]
    tpot = probe_counts(probes, SLO)["tpot"]
    assert [(c.rate_rps, c.passed) for c in tpot] == [(9.0, True), (10.0, False)]
    est = estimate_capacity(probes, SLO)
    fit = est.fits["tpot"]
    assert (fit.method, fit.lower_bound_rps, fit.upper_bound_rps) == ("bracket", 9.0, 10.0)
    assert fit.short_of_steady == 1
    assert est.capacity_rps == pytest.approx(math.sqrt(90.0))
    # TTFT never fails here: its passes at 10 and 12 ran short of steady state.
    assert est.fits["ttft"].short_of_steady == 2
    plain = [p.model_copy(update={"audits": None}) for p in probes]  # an old run file
    before = estimate_capacity(plain, SLO)
    assert before.fits["tpot"].short_of_steady == 0
    assert before.capacity_rps == pytest.approx(math.sqrt(120.0))
    # A fail of a window that ran 3 % over steady state (a ramp from a faster probe) is left
    # out; its pass would count. A pass 1 % short is steady enough (the audit's limit).
    over = probe_with(3, 8.5, table([45.0] * 30 + [30.0] * 970), passed=False, audits=_steady(-3.0))
    assert capacity.short_of_steady(over, passed=False)
    assert not capacity.short_of_steady(over, passed=True)
    assert probe_counts([over], SLO)["tpot"] == []
    edge = probe_with(4, 9.0, table([30.0] * 1000), audits=_steady(1.0))
    assert not capacity.short_of_steady(edge, passed=True)
    assert capacity.short_of_steady(edge.model_copy(update={"audits": _steady(1.01)}), True)


def test_no_pass_in_steady_state_is_a_bound_with_its_reason():
    probes = [
        probe_with(0, 8.0, table([30.0] * 1000), passed=True, audits=_steady(9.0)),
        probe_with(1, 10.0, table([45.0] * 40 + [30.0] * 960), passed=False, audits=_steady(4.0)),
    ]
    fit = estimate_capacity(probes, SLO).fits["tpot"]
    assert (fit.method, fit.capacity_rps, fit.upper_bound_rps) == ("below_all", None, 10.0)
    assert fit.short_of_steady == 1


def test_relative_capacity_by_hand():
    # ln(p99 / S) = alpha_k + 0.5 ln r, config B's curve 10 % further right in rate:
    # alpha_B = alpha_A - 0.5 ln 1.1, so ln(c_B / c_A) = (alpha_A - alpha_B) / 0.5 = ln 1.1.
    def run(alpha: float, rates: tuple[float, ...], noise: tuple[float, ...]):
        out = []
        for i, (r, e) in enumerate(zip(rates, noise, strict=True)):
            p99 = 40.0 * math.exp(alpha + 0.5 * math.log(r) + e)
            out.append(factories.probe(i, rate=r, window_requests=500, ok=500,
                                       tpot_ms=factories.stats(p99, 500)))  # fmt: skip
        return out

    alpha_a = -0.5 * math.log(10.0)  # crosses S at 10 req/s
    alpha_b = alpha_a - 0.5 * math.log(1.1)
    zero = (0.0, 0.0, 0.0, 0.0)
    a = run(alpha_a, (9.0, 9.5, 10.5, 11.0), zero)
    b = run(alpha_b, (10.0, 10.5, 11.5, 12.0), zero)
    rel = relative_capacity([a, b], SLO, binding="tpot", centres_rps=[10.0, 11.0])
    assert rel is not None
    assert rel.slope == pytest.approx(0.5, rel=1e-9)
    assert rel.change_pct(1) == pytest.approx(10.0, rel=1e-9)
    # With scatter the interval has width and still holds the change.
    noise = (0.01, -0.01, -0.01, 0.01)
    rel = relative_capacity(
        [
            run(alpha_a, (9.0, 9.5, 10.5, 11.0), noise),
            run(alpha_b, (10.0, 10.5, 11.5, 12.0), noise),
        ],
        SLO,
        binding="tpot",
        centres_rps=[10.0, 11.0],
    )
    assert rel is not None
    ci = rel.ci_pct(1)
    assert ci is not None
    assert ci[0] < 10.0 < ci[1]
    assert ci[1] - ci[0] > 0.5
    assert rel.dof == 8 - 3


def test_stream_correlation_by_hand():
    # Streams 0, 1, 2 in both configurations; residuals (1, 1), (-2, -1), (1, 0):
    # sum r_i r_j = 1 + 2 + 0 = 3, sum (r_i^2 + r_j^2) / 2 = 1 + 2.5 + 0.5 = 4: rho = 0.75.
    streams, configs = [0, 1, 2, 0, 1, 2], [0, 0, 0, 1, 1, 1]
    assert stream_correlation([1, -2, 1, 1, -1, 0], streams, configs) == pytest.approx(0.75)
    # Opposite residuals: no positive correlation, so none is used.
    assert stream_correlation([1, -2, 1, -1, 2, -1], streams, configs) == 0.0
    # Identical residuals: capped.
    assert stream_correlation([1, -2, 1, 1, -2, 1], streams, configs) == MAX_STREAM_CORRELATION
    # A stream probed by one configuration only does not count: stream 1's residual 5 would
    # pull rho down from (1 x 1) / 1 = 1 (capped) if it did.
    assert stream_correlation([1, 5, 1], [0, 1, 0], [0, 0, 1]) == MAX_STREAM_CORRELATION
    assert stream_correlation([1, 5], [0, 1], [0, 1]) == 0.0  # nothing shared


def _stream_runs(noise_a, noise_b, *, streams_b_from: int = 0):
    # ln(p99 / S) = 0.5 ln(r / c_k) + u_s + e: stream s (probe index s, the same requests in
    # both configurations) moves both curves by u_s; B crosses 10 % further right.
    u = (0.03, -0.02, 0.01, -0.015, 0.02, -0.025)
    rates_a = (9.0, 9.5, 10.5, 11.0, 10.0, 10.2)
    rates_b = (11.5, 10.5, 12.0, 11.2, 10.8, 11.6)

    def run(capacity_rps, rates, noise, first):
        out = []
        for s, (r, e) in enumerate(zip(rates, noise, strict=True)):
            p99 = 40.0 * math.exp(0.5 * math.log(r / capacity_rps) + u[s] + e)
            out.append(factories.probe(first + s, rate=r, window_requests=500, ok=500,
                                       tpot_ms=factories.stats(p99, 500)))  # fmt: skip
        return out

    return run(10.0, rates_a, noise_a, 0), run(11.0, rates_b, noise_b, streams_b_from)


NOISE_A = (0.002, -0.001, 0.0015, -0.002, 0.0005, 0.001)
NOISE_B = (-0.001, 0.002, -0.0015, 0.001, -0.0005, 0.0015)


def test_paired_fit_weighs_what_a_stream_does_to_both_configurations():
    a, b = _stream_runs(NOISE_A, NOISE_B)
    unpaired = relative_capacity([a, b], SLO, binding="tpot", centres_rps=[10.0, 11.0])
    paired = relative_capacity([a, b], SLO, binding="tpot", centres_rps=[10.0, 11.0], paired=True)
    assert unpaired is not None
    assert paired is not None
    assert unpaired.stream_correlation is None
    assert paired.paired_streams == 6
    assert paired.stream_correlation is not None
    assert 0.5 < paired.stream_correlation <= MAX_STREAM_CORRELATION
    assert paired.dof == unpaired.dof - 1 == 12 - 3 - 1
    ci = paired.ci_pct(1)
    assert ci is not None
    assert ci[0] < 10.0 < ci[1]
    assert abs(paired.change_pct(1) - 10.0) < abs(unpaired.change_pct(1) - 10.0)
    assert paired.log_se[1] is not None
    assert unpaired.log_se[1] is not None
    assert paired.log_se[1] < unpaired.log_se[1] / 2


def test_paired_fit_falls_back_when_nothing_is_shared():
    a, b = _stream_runs(NOISE_A, NOISE_B, streams_b_from=10)  # other streams: nothing to pair
    unpaired = relative_capacity([a, b], SLO, binding="tpot", centres_rps=[10.0, 11.0])
    paired = relative_capacity([a, b], SLO, binding="tpot", centres_rps=[10.0, 11.0], paired=True)
    assert unpaired is not None
    assert paired is not None
    assert paired.log_ratio == unpaired.log_ratio
    assert paired.dof == unpaired.dof
    assert paired.paired_streams == 0
    # Two shared streams are too few to estimate the correlation from (MIN_PAIRED_STREAMS).
    a, b = _stream_runs(NOISE_A, NOISE_B)
    few = relative_capacity([a, b[:2]], SLO, binding="tpot", centres_rps=[10.0, 11.0], paired=True)
    alone = relative_capacity([a, b[:2]], SLO, binding="tpot", centres_rps=[10.0, 11.0])
    assert capacity.MIN_PAIRED_STREAMS == 3
    assert few is not None
    assert alone is not None
    assert few.stream_correlation is None
    assert few.log_ratio == alone.log_ratio


def test_relative_capacity_needs_two_usable_probes_each():
    a = [factories.probe(0, rate=10.0, window_requests=500, ok=500)]
    b = [factories.probe(0, rate=10.0, window_requests=500, ok=500)] * 2
    assert relative_capacity([a, b], SLO, binding="tpot", centres_rps=[None, None]) is None


def test_a_log_ratio_in_percent_by_hand():
    # ln(1.1) is +10 %, ln(0.5) is -50 %, ln(2) is +100 %: not the log ratio itself times 100
    assert pct_of_log_ratio(math.log(1.1)) == pytest.approx(10.0)
    assert pct_of_log_ratio(math.log(0.5)) == pytest.approx(-50.0)
    assert pct_of_log_ratio(math.log(2.0)) == pytest.approx(100.0)
    assert pct_of_log_ratio(0.0) == 0.0


def _pair_runs(noise: dict[tuple[int, int, int], float]):
    """Two configurations measured the adaptive sweep's way: streams 1000-1002 each at two rates
    in each configuration (a stream pair), stream 2000 once each (a confirmation).

    ln(p99 / S) = 0.4 ln(r / c_k) + u_s (+ noise): the stream moves every probe of it alike, by
    far more than the noise; B crosses 8 % further right (c = 10 and 10.8).
    """
    u = {1000: 0.04, 1001: -0.05, 1002: 0.02, 2000: -0.03}
    rates = {0: (10.5, 9.5, 10.8, 9.7, 10.4, 9.4), 1: (11.4, 10.3, 11.6, 10.2, 11.1, 10.1)}
    confirm = {0: 9.8, 1: 10.6}

    def run(k, capacity_rps):
        out = []
        plan = [(1000 + i // 2, i % 2, r) for i, r in enumerate(rates[k])] + [(2000, 0, confirm[k])]
        for index, (s, v, r) in enumerate(plan):
            e = noise.get((k, s, v), 0.0)
            p99 = 40.0 * math.exp(0.4 * math.log(r / capacity_rps) + u[s] + e)
            out.append(factories.probe(index, rate=r, window_requests=300, ok=300, stream=s,
                                       variant=v, tpot_ms=factories.stats(p99, 300)))  # fmt: skip
        return out

    return run(0, 10.0), run(1, 10.8)


def test_stream_effects_recover_the_change_exactly_without_noise():
    # y = u_s + 0.4 (x - ln c_k) is the model itself: the fit holds every stream fixed and
    # reads the slope from each stream's two rates, so ln(10.8 / 10) comes out exactly.
    a, b = _pair_runs({})
    rel = relative_capacity([a, b], SLO, binding="tpot", centres_rps=[10.0, 10.8], paired=True)
    assert rel is not None
    assert rel.stream_effects == 4
    assert rel.slope_streams == 3
    assert rel.paired_streams == 4
    assert rel.stream_correlation is None
    assert rel.slope == pytest.approx(0.4, rel=1e-9)
    assert rel.change_pct(1) == pytest.approx(8.0, abs=1e-7)
    # 14 probes, 6 parameters (delta, kappa, 4 streams).
    assert rel.dof == 8


def test_stream_effects_interval_holds_the_change_and_beats_the_correlation():
    noise = {(0, 1000, 0): 0.004, (0, 1001, 1): -0.003, (0, 1002, 0): 0.002, (0, 2000, 0): -0.002,
             (1, 1000, 1): -0.003, (1, 1001, 0): 0.004, (1, 1002, 1): -0.002, (1, 2000, 0): 0.003}  # fmt: skip
    a, b = _pair_runs(noise)
    rel = relative_capacity([a, b], SLO, binding="tpot", centres_rps=[10.0, 10.8], paired=True)
    assert rel is not None
    assert rel.stream_effects == 4
    # By hand, the same model by ordinary least squares (equal weights: 300 requests each).
    rows = []
    for k, run in enumerate((a, b)):
        for p in run:
            rows.append((k, p.stream, math.log(p.rate_rps), math.log(p.tpot_ms.p99 / 40.0)))
    ids = sorted({r[1] for r in rows})
    x = [[float(k), xr] + [1.0 if s == i else 0.0 for i in ids] for k, s, xr, _ in rows]
    import numpy as np

    coef, *_ = np.linalg.lstsq(np.array(x), np.array([r[3] for r in rows]), rcond=None)
    assert rel.change_pct(1) == pytest.approx(pct_of_log_ratio(-coef[0] / coef[1]), rel=1e-9)
    ci = rel.ci_pct(1)
    assert ci is not None
    assert ci[0] < 8.0 < ci[1]
    assert ci[0] > 0  # the 8 % change is seen
    # Without pairing, the streams' own effects (5 % either way) swamp it.
    unpaired = relative_capacity([a, b], SLO, binding="tpot", centres_rps=[10.0, 10.8])
    assert unpaired is not None
    assert rel.log_se[1] is not None
    assert unpaired.log_se[1] is not None
    assert rel.log_se[1] < unpaired.log_se[1] / 5


def test_stream_effects_need_a_stream_sent_at_two_rates():
    # Every stream once per configuration (bisection's way): no slope within a stream, so the
    # fit keeps to the correlation between the configurations' probes of a stream.
    a, b = _stream_runs(NOISE_A, NOISE_B)
    rel = relative_capacity([a, b], SLO, binding="tpot", centres_rps=[10.0, 11.0], paired=True)
    assert rel is not None
    assert rel.stream_effects == 0
    assert rel.stream_correlation is not None


def test_the_correlation_fit_stays_proper_with_streams_sent_twice():
    # A sends stream 1000 twice, B once, both send 1001 and 2000: too few degrees of freedom for
    # stream effects (7 probes, 5 parameters), so the fit pairs by correlation. It treats every
    # two probes of a stream alike, so its covariance stays positive definite with a stream sent
    # three times (with rho only between configurations it was indefinite for rho > 0.71, and
    # the interval collapsed to a point).
    a, b = _pair_runs({(0, 1000, 0): 0.004, (1, 1001, 0): -0.003, (0, 2000, 0): 0.002})
    a2 = [p for p in a if p.stream in (1000, 2000)] + [a[2]]
    b2 = [b[0], b[2], b[-1]]
    assert [p.stream for p in a2] == [1000, 1000, 2000, 1001]
    assert [p.stream for p in b2] == [1000, 1001, 2000]
    rel = relative_capacity([a2, b2], SLO, binding="tpot", centres_rps=[10.0, 10.8], paired=True)
    assert rel is not None
    assert rel.stream_effects == 0
    assert rel.stream_correlation == MAX_STREAM_CORRELATION
    assert rel.log_se[1] is not None
    assert rel.log_se[1] > 1e-4
    ci = rel.ci_pct(1)
    assert ci is None or ci[1] - ci[0] > 1.0


# One run's refinement probes (rate, requests, over the bound) from `tokenwatt plan` on the demo
# scenario at 4,800 probe-seconds, workload seed 102: episodes make the counts so scattered that
# the slope is barely clearly positive, and Fieller's lower end rounds to 0 req/s (with these
# rates to four decimals, as in the run).
_SCATTERED = [
    (11.4385, 352, 6),
    (11.5136, 349, 0),
    (11.3297, 353, 2),
    (11.2508, 373, 7),
    (11.6593, 414, 60),
    (11.6616, 351, 6),
    (11.1564, 344, 3),
    (11.1283, 327, 0),
    (11.7930, 350, 5),
    (11.8209, 347, 0),
    (11.8675, 358, 22),
    (11.8782, 360, 7),
    (11.8964, 350, 1),
    (11.9147, 341, 0),
    (11.9226, 346, 11),
    (11.9584, 372, 20),
    (10.8957, 311, 6),
    (12.0416, 336, 15),
    (10.8432, 293, 2),
    (10.8204, 337, 17),
    (10.7880, 304, 0),
    (10.7809, 317, 0),
    (10.7643, 314, 0),
    (10.7382, 320, 0),
    (10.7029, 353, 0),
    (10.6960, 314, 0),
    (10.6707, 322, 1),
    (12.3176, 352, 2),
    (12.3740, 377, 2),
    (12.3909, 334, 3),
    (12.3981, 368, 3),
    (12.4116, 363, 0),
    (10.5519, 318, 2),
    (10.5498, 364, 14),
    (12.4143, 349, 1),
    (12.5213, 385, 17),
    (10.4180, 336, 0),
    (10.3500, 328, 3),
    (10.0947, 319, 0),
    (10.0693, 294, 0),
    (9.1968, 264, 0),
    (9.1947, 259, 0),
    (9.1847, 274, 0),
    (9.1794, 244, 0),
    (9.1669, 274, 0),
    (9.1251, 249, 0),
    (8.8535, 245, 1),
]


def test_an_interval_too_wide_to_write_as_rates_is_unbounded():
    counts = [
        ProbeCounts(i, rate, n, k, True, k <= n - math.ceil(0.99 * n))
        for i, (rate, n, k) in enumerate(_SCATTERED)
    ]
    fit = fit_constraint("tpot", counts)
    assert fit.method == "logistic"
    assert fit.capacity_rps is not None
    assert 10.0 < fit.capacity_rps < 11.5
    assert fit.dispersion is not None
    assert fit.dispersion > 10
    # Not (0.0, 11.46): no lower end is no bound, and an adaptive sweep divided by it.
    assert fit.ci_rps is None


def test_an_interval_reaching_far_outside_the_probed_rates_is_unbounded():
    # One demo run (workload seed 245) after two stream pairs: two streams, one degree of freedom
    # (t = 12.7), and Fieller's interval was (0.0019, 12.85) req/s beside probes at 11.3-14.2:
    # its lower end is the model's, far from where it was fitted, not the data's.
    rows = [
        (0, 8.0, 111, 0, False, 0),
        (1, 12.0, 169, 0, False, 1),
        (2, 18.0, 3, 3, False, 2),
        (3, 14.16020443120844, 423, 164, True, 1000),
        (4, 11.561758503319327, 350, 3, True, 1000),
        (5, 12.509924108952257, 383, 15, True, 1001),
        (6, 11.319447430570161, 343, 1, True, 1001),
    ]
    counts = [
        ProbeCounts(i, rate, n, k, complete, k <= n - math.ceil(0.99 * n), stream)
        for i, rate, n, k, complete, stream in rows
    ]
    fit = fit_constraint("tpot", counts)
    assert fit.method == "logistic"
    assert fit.capacity_rps is not None
    assert 11.5 < fit.capacity_rps < 12.0
    assert fit.dof == 1
    assert fit.ci_rps is None
