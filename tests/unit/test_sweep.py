"""The sweep's decisions, traced by hand against servers of known capacity."""

from __future__ import annotations

import pytest

from tokenwatt.schema.spec import MeasurementSpec, SweepSpec
from tokenwatt.sweep import MAX_DOWN_STEPS, ProbePlan, Sweep

M = MeasurementSpec(warmup_s=45, window_s=120, search_window_s=60, repeats=2)


def drive(sweep: Sweep, passes, limit: int = 200):
    """Run the sweep with a pass/fail function of the plan; return the plans in order."""
    plans = []
    while (plan := sweep.next()) is not None:
        plans.append(plan)
        sweep.record(passes(plan))
        assert len(plans) < limit
    return plans


def test_seed_protocol_by_hand_capacity_20():
    sweep = Sweep(SweepSpec(), M)
    plans = drive(sweep, lambda p: p.rate_rps <= 20.0)
    rates = [round(p.rate_rps, 6) for p in plans]
    # grow x1.25 from 8: 8, 10, 12.5, 15.625, 19.53125 pass; 24.4140625 fails
    # bisect 3x: 21.97265625 F, 20.751953125 F, 20.1416015625 F -> found 19.53125
    assert rates == [
        8,
        10,
        12.5,
        15.625,
        19.53125,
        24.414062,
        21.972656,
        20.751953,
        20.141602,
        19.53125,
        19.53125,
    ]
    assert [p.phase for p in plans] == ["search"] * 6 + ["bisect"] * 3 + ["confirm"] * 2
    assert {p.window_s for p in plans[:9]} == {60.0}
    assert {p.window_s for p in plans[9:]} == {120.0}
    assert [p.repeat for p in plans[9:]] == [0, 1]
    assert sweep.result.found_rate_rps == 19.53125
    assert sweep.result.confirmed_rate_rps == 19.53125
    assert sweep.result.confirm_probes == [9, 10]


def test_found_rate_is_within_bisection_resolution_of_the_boundary():
    for capacity in (9.3, 17.0, 33.3, 101.0, 555.0):
        sweep = Sweep(SweepSpec(bisect_steps=5), M)
        drive(sweep, lambda p, c=capacity: p.rate_rps <= c)
        found = sweep.result.confirmed_rate_rps
        assert found is not None
        assert found <= capacity
        # the first fail is at most growth x the last pass; 5 halvings of that gap
        assert capacity - found <= found * 0.25 / 2**5 + 1e-9


def test_backoff_when_a_repeat_fails():
    sweep = Sweep(SweepSpec(), M)
    # search sees capacity 18, confirmation only 16.5 (drift)
    plans = drive(sweep, lambda p: p.rate_rps <= (16.5 if p.phase == "confirm" else 18.0))
    confirms = [p for p in plans if p.phase == "confirm"]
    # found 17.578125; attempt 0 fails at once (repeat 1 skipped); x0.9 -> 15.8203125 passes twice
    assert [(round(p.rate_rps, 7), p.attempt, p.repeat) for p in confirms] == [
        (17.578125, 0, 0),
        (15.8203125, 1, 0),
        (15.8203125, 1, 1),
    ]
    assert sweep.result.confirmed_rate_rps == pytest.approx(15.8203125)
    assert sweep.result.confirm_probes == [len(plans) - 2, len(plans) - 1]


def test_backoffs_are_limited():
    sweep = Sweep(SweepSpec(max_backoffs=2), M)
    plans = drive(sweep, lambda p: p.phase != "confirm" and p.rate_rps <= 10)
    confirms = [p for p in plans if p.phase == "confirm"]
    assert [p.attempt for p in confirms] == [0, 1, 2]
    assert sweep.result.confirmed_rate_rps is None
    assert sweep.result.confirm_probes == [len(plans) - 1]


def test_max_rps_caps_the_growth_and_passing_it_skips_bisection():
    sweep = Sweep(SweepSpec(start_rps=8, growth=2, max_rps=20), M)
    plans = drive(sweep, lambda p: True)
    assert [p.rate_rps for p in plans] == [8, 16, 20, 20, 20]
    assert sweep.result.confirmed_rate_rps == 20


def test_first_probe_failing_searches_down():
    sweep = Sweep(SweepSpec(start_rps=8, growth=2, bisect_steps=1), M)
    plans = drive(sweep, lambda p: p.rate_rps <= 3)
    # 8 F, 4 F, 2 P -> bisect (2+4)/2 = 3 P -> found 3
    assert [p.rate_rps for p in plans[:4]] == [8, 4, 2, 3]
    assert sweep.result.found_rate_rps == 3


def test_nothing_passes():
    sweep = Sweep(SweepSpec(start_rps=8, growth=2), M)
    plans = drive(sweep, lambda p: False)
    assert len(plans) == 1 + MAX_DOWN_STEPS
    assert sweep.result.found_rate_rps is None
    assert sweep.result.confirmed_rate_rps is None


def test_explicit_rates_take_the_highest_pass_then_confirm():
    sweep = Sweep(SweepSpec(rates=[30, 10, 20]), M)
    plans = drive(sweep, lambda p: p.rate_rps <= 25)
    assert [(p.phase, p.rate_rps) for p in plans] == [
        ("rates", 10),
        ("rates", 20),
        ("rates", 30),
        ("confirm", 20),
        ("confirm", 20),
    ]


def test_record_without_next_is_an_error():
    sweep = Sweep(SweepSpec(), M)
    with pytest.raises(RuntimeError):
        sweep.record(True)


def test_next_is_idempotent_until_recorded():
    sweep = Sweep(SweepSpec(), M)
    assert sweep.next() == sweep.next()


@pytest.mark.parametrize(
    ("rate", "warmup", "window"), [(0.0, 1.0, 5.0), (2.0, -1.0, 5.0), (2.0, 1.0, 0.0)]
)
def test_a_probe_plan_refuses_what_cannot_be_run(rate, warmup, window):
    with pytest.raises(ValueError, match="need rate_rps > 0, window_s > 0 and warmup_s >= 0"):
        ProbePlan(phase="search", rate_rps=rate, warmup_s=warmup, window_s=window)


def _slo():
    from tokenwatt.schema.spec import SloSpec

    return SloSpec(ttft_p99_ms=200.0, tpot_p99_ms=50.0)


def test_a_probe_ramps_only_from_one_that_left_no_backlog():
    from tests import factories
    from tokenwatt.sweep import may_ramp, ramped

    slo = _slo()
    plan = ProbePlan(phase="search", rate_rps=2.0, warmup_s=1.0, window_s=10.0)
    calm = factories.probe(0, ttft_ms=factories.stats(150.0))
    assert may_ramp(calm, slo)
    # a TPOT fail is no backlog; a TTFT fail, a client-bound probe or no probe at all is
    assert may_ramp(factories.probe(0, passed=False, tpot_ms=factories.stats(60.0)), slo)
    assert not may_ramp(factories.probe(0, passed=False, ttft_ms=factories.stats(250.0)), slo)
    bound = factories.probe(0, passed=False, client_bound=True, client_bound_reasons=["lag"])
    assert not may_ramp(bound, slo)
    assert not may_ramp(None, slo)
    assert ramped(plan, calm, SweepSpec(ramp=True), slo).ramp
    assert not ramped(plan, calm, SweepSpec(), slo).ramp  # off unless the spec asks
    assert not ramped(plan, None, SweepSpec(ramp=True), slo).ramp


def test_a_ramped_probe_takes_the_shorter_ramp_warmup_only_when_it_carries_requests():
    from tests import factories
    from tokenwatt.sweep import ramped, warmup_when

    slo = _slo()
    plan = ProbePlan(phase="refine", rate_rps=2.0, warmup_s=30.0, window_s=30.0)
    calm = factories.probe(0, ttft_ms=factories.stats(150.0))
    queued = factories.probe(0, passed=False, ttft_ms=factories.stats(250.0))
    short = SweepSpec(ramp=True, ramp_warmup_s=10)
    asked = ramped(plan, calm, short, slo)
    assert asked.ramp
    assert asked.ramp_warmup_s == 10.0
    assert warmup_when(asked, carried=True) == 10.0
    # asked to ramp, but nothing was carried (a new worker pool, a resumed run): as from idle
    assert warmup_when(asked, carried=False) == 30.0
    assert ramped(plan, queued, short, slo).ramp_warmup_s is None  # from idle: the full warm-up
    assert warmup_when(ramped(plan, calm, SweepSpec(ramp=True), slo), carried=True) == 30.0
    # never longer than the plan's own (quick mode's 3 s stays 3 s)
    quick = ProbePlan(phase="refine", rate_rps=2.0, warmup_s=3.0, window_s=10.0)
    assert warmup_when(ramped(quick, calm, short, slo), carried=True) == 3.0
    with pytest.raises(ValueError, match="ramp_warmup_s <= warmup_s"):
        ProbePlan(phase="refine", rate_rps=2.0, warmup_s=3.0, window_s=10.0, ramp_warmup_s=5.0)


def test_a_ramp_warmup_without_the_ramp_is_refused():
    from pydantic import ValidationError

    from tests import factories

    with pytest.raises(ValidationError, match="sweep.ramp_warmup_s without sweep.ramp"):
        factories.spec(sweep={"ramp_warmup_s": 10})
    assert factories.spec(sweep={"ramp": True, "ramp_warmup_s": 10}).sweep.ramp_warmup_s == 10
    with pytest.raises(ValidationError, match=r"sweep.ramp_warmup_s \(50 s\) is longer than"):
        factories.spec(sweep={"ramp": True, "ramp_warmup_s": 50}, measurement={"warmup_s": 30})
