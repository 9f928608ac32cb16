"""PowerSampler with a scripted ReplaySource: timing, gaps, recovery, failures."""

from __future__ import annotations

import logging
import time

import pytest

from tokenwatt.errors import PowerError
from tokenwatt.power import NoneSource, PowerSampler, Reading, ReplaySource
from tokenwatt.power.base import BuildContext, PowerSource


def run_for(sampler: PowerSampler, seconds: float):
    sampler.start()
    time.sleep(seconds)
    return sampler.stop()


def test_a_failing_source_leaves_one_gap_and_sampling_resumes(caplog):
    caplog.set_level(logging.INFO, logger="tokenwatt.power.sampler")
    items = [Reading(100.0)] * 3 + [PowerError("BMC gone")] * 3 + [Reading(200.0)]
    source = ReplaySource(items, scope="node", description="scripted")
    t_before = time.monotonic_ns()
    ev = run_for(PowerSampler(source, sampling_hz=50), 0.4)
    t_after = time.monotonic_ns()

    watts = [s.watts for s in ev.samples]
    assert watts[:3] == [100.0] * 3
    assert set(watts[3:]) == {200.0}
    assert len(watts) > 6
    assert 0.0 not in watts  # a failure is never a zero
    assert len(ev.gaps) == 1
    gap = ev.gaps[0]
    assert gap.cause == "BMC gone (3 failed reads)"
    # the gap runs from the first failed read to the first good reading after it
    assert ev.samples[2].t_ns < gap.start_ns < gap.end_ns == ev.samples[3].t_ns
    times = [s.t_ns for s in ev.samples]
    assert times == sorted(times)
    assert len(set(times)) == len(times)
    assert t_before <= times[0]
    assert times[-1] <= t_after
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == 2  # one when readings stop, one when they resume
    assert "stopped" in messages[0]
    assert "resumed" in messages[1]
    assert ev.scope == "node"
    assert ev.description == "scripted"
    assert ev.sampling_hz == 50


def test_ticks_follow_sampling_hz():
    ev = run_for(PowerSampler(ReplaySource([Reading(1.0)]), sampling_hz=20), 0.55)
    # 20 Hz for 0.55 s: ticks at 0, 50, ..., 550 ms -> 11 or 12 readings (machine noise: 8..13)
    assert 8 <= len(ev.samples) <= 13
    gaps_ms = [(b.t_ns - a.t_ns) / 1e6 for a, b in zip(ev.samples, ev.samples[1:], strict=False)]
    assert sorted(gaps_ms)[len(gaps_ms) // 2] == pytest.approx(50, abs=15)


class SlowSource(PowerSource):
    name = "command"

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    @classmethod
    def from_spec(cls, spec, context: BuildContext):  # pragma: no cover - not from a spec
        raise NotImplementedError

    def read(self) -> Reading:
        time.sleep(self.delay_s)
        return Reading(42.0)


def test_a_slow_source_skips_missed_ticks_instead_of_bursting():
    ev = run_for(PowerSampler(SlowSource(0.12), sampling_hz=50), 0.6)
    spacing_ms = [(b.t_ns - a.t_ns) / 1e6 for a, b in zip(ev.samples, ev.samples[1:], strict=False)]
    assert spacing_ms
    assert min(spacing_ms) >= 110
    assert len(ev.samples) <= 6


def test_gap_still_open_at_stop_ends_at_stop():
    source = ReplaySource([Reading(10.0), PowerError("gone for good")], when_exhausted="repeat")
    sampler = PowerSampler(source, sampling_hz=50)
    sampler.start()
    time.sleep(0.15)
    t_stop = time.monotonic_ns()
    ev = sampler.stop()
    assert len(ev.samples) == 1
    assert len(ev.gaps) == 1
    assert ev.gaps[0].end_ns >= t_stop


def test_evidence_can_be_read_while_sampling():
    sampler = PowerSampler(ReplaySource([Reading(5.0)]), sampling_hz=50)
    with sampler:
        time.sleep(0.1)
        first = sampler.evidence()
        time.sleep(0.1)
        second = sampler.evidence()
    assert 0 < len(first.samples) < len(second.samples)


def test_none_source_starts_no_thread_and_records_nothing():
    sampler = PowerSampler(NoneSource(), sampling_hz=1)
    sampler.start()
    assert sampler._thread is None
    ev = sampler.stop()
    assert ev.source == "none"
    assert ev.scope == "none"
    assert ev.description == "power not measured"
    assert ev.samples == []
    assert ev.gaps == []


class BrokenOpen(SlowSource):
    def open(self) -> None:
        raise PowerError("401 from BMC at https://bmc for user 'admin': check $BMC_PASS")


def test_an_open_failure_raises_from_start_and_starts_nothing():
    sampler = PowerSampler(BrokenOpen(0), sampling_hz=10)
    with pytest.raises(PowerError, match="401 from BMC"):
        sampler.start()
    assert sampler._thread is None


class Buggy(SlowSource):
    def read(self) -> Reading:
        raise ZeroDivisionError("bug in a source")


def test_a_bug_in_a_source_is_reraised_by_stop_with_context():
    sampler = PowerSampler(Buggy(0), sampling_hz=20)
    sampler.start()
    time.sleep(0.1)
    with pytest.raises(PowerError, match="ZeroDivisionError: bug in a source"):
        sampler.stop()
    assert sampler.evidence().gaps[0].cause.startswith("sampler crashed")


def test_negative_or_nan_readings_are_failed_reads_not_samples():
    source = ReplaySource([Reading(float("nan")), Reading(-5.0), Reading(7.0)])
    ev = run_for(PowerSampler(source, sampling_hz=50), 0.15)
    assert ev.samples[0].watts == 7.0
    assert len(ev.gaps) == 1
    assert "nan" in ev.gaps[0].cause


def test_sampling_hz_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        PowerSampler(NoneSource(), sampling_hz=0)


def test_sampler_for_spec_uses_the_power_section_and_the_clock():
    from tests import factories
    from tokenwatt.power import CommandSource, sampler_for_spec

    ticks = iter(range(10**9, 10**12, 10**6))
    spec = factories.spec(power={"source": "command", "command": "echo 75", "sampling_hz": 20})
    sampler = sampler_for_spec(spec, clock_ns=lambda: next(ticks))
    assert isinstance(sampler, PowerSampler)
    assert isinstance(sampler.source, CommandSource)
    assert sampler.sampling_hz == 20
    sampler.start()
    time.sleep(0.1)
    ev = sampler.stop()
    assert ev.samples[0].watts == 75.0
    # stamped on the injected clock: midpoints of its 1 ms ticks (the real clock is not)
    assert all(s.t_ns % 500_000 == 0 for s in ev.samples)
    unmeasured = sampler_for_spec(factories.spec())
    assert isinstance(unmeasured, PowerSampler)
    assert unmeasured.source.scope == "none"
