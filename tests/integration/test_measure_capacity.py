"""The sweep finds the true SLO boundary of a simulator with a known capacity.

tests/data/capacity-sim.spec.yaml makes every probe deterministic (constant arrivals, fixed
lengths, at most 4 running sequences of 10 steps each): below capacity TTFT stays at about two
engine steps, above it the queue and TTFT grow for the whole probe. The truth comes from the
simulator's own virtual-time driver (:func:`tokenwatt.sim.offline.simulate`, the same engine the
server runs) on the same request draws the probes send: the p99 TTFT of a probe's window
requests at rate r, and the boundary r* where it crosses the SLO. The search must bracket r*
(its last pass below, first fail above) and confirm a rate within that bracket's width of r*.

Tolerance for real time on a shared 2-core machine: above capacity one req/s adds about 250 ms
to this probe's p99 TTFT, so TOLERANCE_RPS = 0.5 admits +-125 ms of real-time noise in the
measured p99 (scheduling lag of the simulator or the client, HTTP overhead).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests.measure_cli import (
    files_in,
    load_spec_dict,
    load_valid_run,
    measure_argv,
    run_measure,
    write_spec,
)
from tokenwatt.load.workload import build_workload
from tokenwatt.metrics import latency_stats
from tokenwatt.sim.launch import settings_from_spec
from tokenwatt.sim.offline import Arrival, simulate
from tokenwatt.store import load_spec

pytestmark = pytest.mark.slow

SPEC = Path("tests/data/capacity-sim.spec.yaml")
TOLERANCE_RPS = 0.5
CLEAR_MARGIN_MS = 150.0  # probes this far from the bound must agree with the virtual verdict
TAIL_S = 5.0  # arrivals after the window: FCFS admission, they cannot delay window requests


class Truth:
    """Virtual-time ground truth for the spec's probes."""

    def __init__(self, repo: Path) -> None:
        loaded = load_spec(repo / SPEC)
        self.spec = loaded.spec
        self.config = settings_from_spec(loaded).build()
        self.workload = build_workload(self.spec, trace_file=loaded.trace_file, context_tokens=4096)
        self.slo_ms = self.spec.slo.ttft_p99_ms

    def p99_ttft_ms(self, rate_rps: float, *, warmup_s: float, window_s: float, stream: int = 0):
        end_s = warmup_s + window_s
        arrivals = []
        for i, t_s in enumerate(self.workload.arrivals(rate_rps, stream=stream)):
            if t_s >= end_s + TAIL_S:
                break
            n_in, n_out = self.workload.lengths(i, stream=stream)
            arrivals.append(Arrival(t_s, n_in, n_out))
        run = simulate(self.config, arrivals)
        ttft_ms = [
            (times[0] - a.t_s) * 1000.0
            for a, times in run.requests
            if warmup_s <= a.t_s < end_s and times
        ]
        assert ttft_ms
        return latency_stats(ttft_ms).p99

    @functools.cache  # noqa: B019 (one Truth per module)
    def boundary_rps(self, *, warmup_s: float, window_s: float) -> float:
        """r*: the highest rate whose window p99 TTFT meets the SLO (to 0.005 req/s)."""
        grid = [10.0 + 0.25 * k for k in range(41)]  # 10 .. 20 req/s
        p99s = [self.p99_ttft_ms(r, warmup_s=warmup_s, window_s=window_s) for r in grid]
        # bisection is only meaningful if the verdict is monotone in the rate: check it
        verdicts = [p <= self.slo_ms for p in p99s]
        assert verdicts[0]
        assert not verdicts[-1]
        first_fail = verdicts.index(False)
        assert not any(verdicts[first_fail:]), "virtual p99 TTFT is not monotone in the rate"
        lo, hi = grid[first_fail - 1], grid[first_fail]
        while hi - lo > 0.005:
            mid = (lo + hi) / 2
            if self.p99_ttft_ms(mid, warmup_s=warmup_s, window_s=window_s) <= self.slo_ms:
                lo = mid
            else:
                hi = mid
        return lo


@pytest.fixture(scope="module")
def truth(repo: Path) -> Truth:
    return Truth(repo)


def test_virtual_truth_is_what_the_spec_says(truth):
    """The scenario is what the spec's comment claims: capacity ~15 req/s, bound crossed above."""
    m = truth.spec.measurement
    steps_per_request = 10  # 16-token prompt in the first step, then one token a step
    # the virtual engine's own step time, at 4 running sequences
    run = simulate(truth.config, [Arrival(0.0, 16, 10) for _ in range(4)])
    step_s = run.requests[0][1][1] - run.requests[0][1][0]
    capacity_rps = truth.config.max_num_seqs / (steps_per_request * step_s)
    assert 14.0 < capacity_rps < 16.0
    r_star = truth.boundary_rps(warmup_s=float(m.warmup_s), window_s=float(m.search_window_s))
    assert capacity_rps < r_star < capacity_rps * 1.2
    below = truth.p99_ttft_ms(capacity_rps * 0.9, warmup_s=1.0, window_s=3.0)
    assert below < 3 * step_s * 1000  # a couple of steps, no queue


@pytest.mark.parametrize("early_stop", [False, True], ids=["seed-protocol", "early-stop"])
def test_confirmed_rate_is_within_the_bisection_resolution(repo, tmp_path, truth, early_stop):
    data = load_spec_dict(repo / SPEC)
    data["model"]["config"] = str((repo / SPEC).parent / data["model"]["config"])
    data["sweep"]["early_stop"] = early_stop
    spec = write_spec(tmp_path / "spec.yaml", data)
    out = tmp_path / "runs" / "capacity.json"
    done = run_measure(measure_argv(spec, out), cwd=repo)
    assert done.returncode == 0, done.stderr[-3000:]
    assert files_in(out.parent) == ["capacity.json"]
    run = load_valid_run(out, cwd=repo)
    assert run.complete
    assert run.spec.sweep.early_stop is early_stop

    m = run.effective
    r_star = truth.boundary_rps(warmup_s=float(m.warmup_s), window_s=float(m.search_window_s))
    # A client-bound probe (send lag on a busy machine) fails whatever the simulator did, and
    # the sweep follows that verdict: what rests on the simulator's verdicts is asserted when
    # the probes it rests on were not client-bound; the sweep's own arithmetic always.
    verdicts = [(p.phase, p.rate_rps, p.slo_pass, p.client_bound) for p in run.probes]
    growth = [p for p in run.probes if p.phase == "search"]
    bisect = [p for p in run.probes if p.phase == "bisect"]
    search = growth + bisect
    harness_bound = any(p.client_bound for p in search)
    assert growth[0].rate_rps == 15.0
    if not harness_bound:
        assert [p.rate_rps for p in growth] == [15.0, 18.0], verdicts  # growth 1.2, then a fail
    assert len(bisect) == 2, verdicts
    lo = max(p.rate_rps for p in search if p.slo_pass)
    hi = min(p.rate_rps for p in search if not p.slo_pass and p.rate_rps > lo)
    resolution = hi - lo
    # the bracket after two bisections: a quarter of the one the growth steps found
    assert resolution == pytest.approx(abs(growth[-1].rate_rps - growth[-2].rate_rps) / 4)
    # the search bracketed the true boundary (a pass is the simulator's; a fail may be not)
    assert lo - TOLERANCE_RPS <= r_star, (lo, r_star, hi)
    if not harness_bound:
        assert r_star <= hi + TOLERANCE_RPS, (lo, r_star, hi)
    outcome = run.outcome
    assert outcome is not None
    confirmed = outcome.confirmed_rate_rps
    if not any(p.client_bound for p in run.probes):
        assert confirmed is not None, verdicts
        assert abs(confirmed - r_star) <= resolution + TOLERANCE_RPS, (confirmed, r_star)
    if confirmed is not None:
        assert confirmed <= lo  # the found rate, or below it after a back-off

    # every probe clearly on one side of the bound got the virtual engine's verdict
    for probe in run.probes:
        virtual = truth.p99_ttft_ms(
            probe.rate_rps, warmup_s=probe.warmup_s, window_s=probe.window_s, stream=probe.index
        )
        if probe.client_bound or abs(virtual - truth.slo_ms) < CLEAR_MARGIN_MS:
            continue
        assert probe.slo_pass == (virtual <= truth.slo_ms), (probe.index, probe.rate_rps, virtual)
        if early_stop and virtual > truth.slo_ms + CLEAR_MARGIN_MS:
            # clearly over: stopped before its window even ended, so no drain was paid for
            stop = probe.early_stop
            assert stop is not None, probe.index
            assert stop.stopped_ns < probe.window_end_ns
            assert stop.cut_window_requests + stop.unsent_window_requests > 0
            assert probe.ttft_ms.p99 is not None
            assert probe.ttft_ms.p99 > truth.slo_ms
        if not early_stop:
            assert probe.early_stop is None
    if early_stop and not harness_bound:  # the search went past the bound: 18 req/s
        assert any(p.early_stop is not None for p in run.probes)
    assert all(not p.slo_pass for p in run.probes if p.early_stop is not None)
