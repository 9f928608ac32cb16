"""Resuming a run: replaying recorded probes into a fresh sweep, and what a resumption refuses."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests import factories as f
from tokenwatt.errors import RunFileError
from tokenwatt.resume import (
    ResumeCheck,
    check_resumable,
    merge_power,
    probe_seconds,
    replay,
    spec_differences,
)
from tokenwatt.schema.run import PowerEvidence, PowerSample, ProbeRecord, RunFile
from tokenwatt.schema.spec import MeasurementSpec, SweepSpec
from tokenwatt.store import filled
from tokenwatt.sweep import ProbePlan, Sweep

M = MeasurementSpec(warmup_s=45, window_s=120, search_window_s=60, repeats=2)
PATH = Path("runs/x.json")
HASH = hashlib.sha256(b"x").hexdigest()  # the factories' run records this spec hash


def _record(plan: ProbePlan, index: int, passed: bool) -> ProbeRecord:
    return f.probe(
        index,
        rate=plan.rate_rps,
        passed=passed,
        phase=plan.phase,
        attempt=plan.attempt,
        repeat=plan.repeat,
        warmup_s=plan.warmup_s,
        window_s=plan.window_s,
        probe_s=plan.warmup_s + plan.window_s + 3.0,
    )


def _drive(sweep: Sweep, capacity_rps: float, done: list[ProbeRecord]) -> list[ProbeRecord]:
    """Continue a sweep against a server of known capacity (a repeat at 19.53 fails once)."""
    records = list(done)
    while (plan := sweep.next()) is not None:
        passed = plan.rate_rps <= capacity_rps and not (plan.repeat == 1 and plan.attempt == 0)
        record = _record(plan, len(records), passed)
        records.append(record)
        sweep.observe(record, probe_seconds(record))
    return records


def test_replaying_any_prefix_continues_to_the_same_probes_and_result():
    full_sweep = Sweep(SweepSpec(), M)
    full = _drive(full_sweep, 20.0, [])
    # 6 search, 3 bisect, 2 repeats (the second fails), back off, 2 repeats: 13 probes
    assert [p.phase for p in full] == ["search"] * 6 + ["bisect"] * 3 + ["confirm"] * 4
    for cut in range(len(full) + 1):
        sweep = Sweep(SweepSpec(), M)
        saved = replay(sweep, full[:cut], PATH)
        assert saved == pytest.approx(sum(p.warmup_s + p.window_s + 3.0 for p in full[:cut]))
        resumed = _drive(sweep, 20.0, full[:cut])
        assert resumed == full, f"cut after {cut} probes"
        assert sweep.result == full_sweep.result
    assert full_sweep.result.confirmed_rate_rps == 19.53125 * 0.9  # the default backoff


def test_a_recorded_probe_the_sweep_would_not_ask_for_is_refused_by_name():
    full = _drive(Sweep(SweepSpec(), M), 20.0, [])
    changed = [*full[:2], full[2].model_copy(update={"rate_rps": 13.0})]
    with pytest.raises(RunFileError, match=r"probe 2 .* rate_rps 12\.5, recorded 13\.0"):
        replay(Sweep(SweepSpec(), M), changed, PATH)
    shorter = MeasurementSpec(warmup_s=45, window_s=120, search_window_s=30, repeats=2)
    with pytest.raises(RunFileError, match=r"probe 0 .* window_s 30\.0, recorded 60\.0"):
        replay(Sweep(SweepSpec(), shorter), full, PATH)


def test_more_recorded_probes_than_the_sweep_makes_are_refused():
    full = _drive(Sweep(SweepSpec(), M), 20.0, [])
    extra = _record(ProbePlan("confirm", 18.0, 45.0, 120.0), len(full), True)
    with pytest.raises(RunFileError, match=f"sweep ends before probe {len(full)}"):
        replay(Sweep(SweepSpec(), M), [*full, extra], PATH)


def test_probe_seconds_without_a_recorded_wall_time():
    # factories.probe: warm-up 1 s, window start 1 s, last request done at 12 s
    assert probe_seconds(f.probe(0)) == 1.0 + 11.0
    assert probe_seconds(f.probe(0, probe_s=12.5)) == 12.5


def _incomplete(**kw: object) -> RunFile:
    return f.run(complete=False, incomplete_reason="interrupted by the user (Ctrl-C)", **kw)


def _want(run: RunFile, **kw: object) -> ResumeCheck:
    fields: dict[str, object] = {
        "spec": filled(run.spec),
        "spec_sha256": HASH,
        "label": run.label,
        "role": run.role,
        "quick": run.quick,
        "effective": run.effective,
        "accuracy": False,
    }
    fields.update(kw)
    return ResumeCheck(**fields)  # type: ignore[arg-type]


def test_a_matching_incomplete_run_is_accepted():
    run = _incomplete()
    check_resumable(run, PATH, _want(run))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"label": "b"}, r"--label is 'unit' in the run, 'b' now"),
        ({"role": "tuned"}, r"--role is 'baseline' in the run, 'tuned' now"),
        ({"quick": True}, r"--quick is False in the run, True now"),
        (
            {"effective": MeasurementSpec(window_s=60)},
            r"durations in force differ: window_s: 120 in the run, 60 now",
        ),
        ({"accuracy": True}, r"skipped the accuracy check; add --no-accuracy"),
    ],
)
def test_each_difference_is_refused_by_name(change, message):
    run = _incomplete()
    with pytest.raises(RunFileError, match=message):
        check_resumable(run, PATH, _want(run, **change))


def test_a_changed_spec_is_refused_naming_the_fields():
    run = _incomplete()
    reseeded = f.spec(workload={"seed": 7})
    with pytest.raises(RunFileError, match=r"spec changed .*workload\.seed: 0 in the run, 7 now"):
        check_resumable(run, PATH, _want(run, spec=filled(reseeded), spec_sha256="ab" * 32))
    with pytest.raises(RunFileError, match="differ only in layout or comments"):
        check_resumable(run, PATH, _want(run, spec_sha256="ab" * 32))


def test_a_complete_run_has_nothing_to_resume():
    run = f.run()
    with pytest.raises(RunFileError, match="the run is complete"):
        check_resumable(run, PATH, _want(run))


def test_spec_differences_are_capped():
    a = f.spec()
    b = f.spec(slo={"ttft_p99_ms": 1.0, "tpot_p99_ms": 2.0}, workload={"seed": 3})
    diffs = spec_differences(filled(a), filled(b), limit=2)
    assert diffs[0] == "slo.tpot_p99_ms: 50.0 in the run, 2.0 now"
    assert diffs[1] == "slo.ttft_p99_ms: 2000.0 in the run, 1.0 now"
    assert diffs[2] == "and 1 more"


def _power(*t_s: float) -> PowerEvidence:
    return PowerEvidence(
        source="prometheus",
        description="sim",
        scope="board",
        sampling_hz=1,
        samples=[PowerSample(t_ns=round(t * 1e9), watts=100.0) for t in t_s],
    )


def test_power_of_the_interrupted_part_goes_in_front_with_a_gap():
    merged = merge_power(_power(1, 2), _power(10, 11))
    assert [s.t_ns for s in merged.samples] == [1e9, 2e9, 10e9, 11e9]
    assert [(g.start_ns, g.end_ns) for g in merged.gaps] == [(2e9, 10e9)]
    assert "resumption" in merged.gaps[0].cause


def test_power_from_another_clock_is_dropped_with_a_note():
    merged = merge_power(_power(50, 60), _power(10, 11))
    assert [s.t_ns for s in merged.samples] == [10e9, 11e9]
    assert merged.gaps == []
    assert any("dropped" in n for n in merged.notes)
    assert merge_power(None, _power(10)) == _power(10)


def test_recorded_probes_that_started_on_carried_requests_replay_with_the_ramp_warmup():
    from tokenwatt.schema.run import ProbeRamp

    full = _drive(Sweep(SweepSpec(), M), 20.0, [])
    # probes 1-3 started on what the probe before left running, warmed up for 10 s
    ramped = [
        p.model_copy(
            update={
                "warmup_s": 10.0,
                "ramp": ProbeRamp(
                    from_probe=p.index - 1,
                    from_rate_rps=full[p.index - 1].rate_rps,
                    carried_requests=30,
                ),
            }
        )
        if 1 <= p.index <= 3
        else p
        for p in full
    ]
    sweep = Sweep(SweepSpec(), M)
    saved = replay(sweep, ramped[:5], PATH, ramp_warmup_s=10.0)
    assert saved == pytest.approx(sum(probe_seconds(p) for p in ramped[:5]))
    assert _drive(sweep, 20.0, ramped[:5])[5:] == full[5:]
    # a spec without sweep.ramp_warmup_s would not have warmed them up for 10 s
    with pytest.raises(RunFileError, match=r"probe 1 .* warmup_s 45\.0, recorded 10\.0"):
        replay(Sweep(SweepSpec(), M), ramped, PATH)
    # nor one with a warm-up of 20 s after a ramp
    with pytest.raises(RunFileError, match=r"probe 1 .* warmup_s 20\.0, recorded 10\.0"):
        replay(Sweep(SweepSpec(), M), ramped, PATH, ramp_warmup_s=20.0)
