"""tokenwatt.energy against hand-worked values (each expected figure is worked out in a comment)."""

from __future__ import annotations

import math

import pytest

from tokenwatt import energy
from tokenwatt.schema.run import PowerEvidence, PowerGap, PowerSample

S = 1_000_000_000  # ns per second


def sample(t_s: float, watts: float, energy_j: float | None = None, reasons=()) -> PowerSample:
    return PowerSample(
        t_ns=round(t_s * S), watts=watts, energy_j=energy_j, throttle_reasons=list(reasons)
    )


def evidence(samples, *, gaps=(), hz=1, monitored=False, source="board") -> PowerEvidence:
    return PowerEvidence(
        source=source,
        description="test",
        scope="none" if source == "none" else "board",
        sampling_hz=hz,
        samples=list(samples),
        gaps=[PowerGap(start_ns=round(a * S), end_ns=round(b * S), cause="x") for a, b in gaps],
        throttle_monitored=monitored,
    )


def win(a_s: float, b_s: float) -> tuple[int, int]:
    return (round(a_s * S), round(b_s * S))


STEPS = [sample(0, 100), sample(1, 200), sample(2, 200), sample(3, 100), sample(4, 100)]


def test_integral_clips_to_the_window_and_interpolates_the_edges():
    # P(0.5) = 150, P(3.5) = 100; trapezoids: 0.5*(150+200)/2 = 87.5, 1*(200+200)/2 = 200,
    # 1*(200+100)/2 = 150, 0.5*(100+100)/2 = 50  ->  487.5 J
    assert energy.integral_energy_j(STEPS, win(0.5, 3.5)) == pytest.approx(487.5)


def test_integral_of_a_window_without_readings_is_none():
    assert energy.integral_energy_j(STEPS, win(10, 20)) is None


def test_integral_holds_the_first_reading_before_it():
    # window [-1, 0.5): no reading before 0 -> P = 100 held on [-1, 0], then 100 -> 150:
    # 1*100 + 0.5*(100+150)/2 = 162.5 J
    assert energy.integral_energy_j(STEPS, win(-1, 0.5)) == pytest.approx(162.5)


def test_mean_power_uses_only_samples_inside_half_open_windows():
    # inside [0.5, 3.5): t = 1, 2, 3 -> (200 + 200 + 100) / 3
    assert energy.mean_power_w(STEPS, [win(0.5, 3.5)]) == pytest.approx(500 / 3)
    # [1, 3) holds t = 1 and 2, not 3
    assert energy.mean_power_w(STEPS, [win(1, 3)]) == pytest.approx(200.0)
    # two windows pool their samples: t = 0 (100) and t = 4 (100), t = 2 (200)
    assert energy.mean_power_w(STEPS, [win(0, 1), win(2, 2.5), win(4, 5)]) == pytest.approx(400 / 3)


COUNTER = [
    sample(0, 100, 1000),
    sample(1, 200, 1150),
    sample(2, 200, 1350),
    sample(3, 100, 1500),
    sample(4, 100, 1600),
]


def test_counter_difference_interpolates_at_the_edges():
    # C(0.5) = 1000 + 0.5*150 = 1075; C(3.5) = 1500 + 0.5*100 = 1550  ->  475 J
    assert energy.counter_energy_j(COUNTER, win(0.5, 3.5)) == pytest.approx(475.0)


def test_window_figures_prefer_the_counter_and_compute_tokens_per_joule():
    figures = energy.window_figures(evidence(COUNTER), [win(0.5, 3.5)], output_tokens=950)
    assert figures.energy_method == "counter"
    assert figures.energy_j == pytest.approx(475.0)
    assert figures.tokens_per_joule == pytest.approx(2.0)  # 950 / 475
    assert figures.node_power_kw == pytest.approx(500 / 3 / 1000)
    assert figures.samples_in_windows == 3


def test_without_a_counter_energy_is_the_integral():
    figures = energy.window_figures(evidence(STEPS), [win(0.5, 3.5)], output_tokens=975)
    assert figures.energy_method == "integral"
    assert figures.energy_j == pytest.approx(487.5)
    assert figures.tokens_per_joule == pytest.approx(2.0)  # 975 / 487.5


def test_counter_reset_counts_the_new_value_as_energy_since_the_reset():
    readings = [
        sample(0, 150, 1000),
        sample(1, 150, 1150),
        sample(2, 100, 100),  # driver reloaded: counter restarted from 0, now 100
        sample(3, 150, 250),
        sample(4, 100, 350),
    ]
    # increments 150, 100 (reset: the new value), 150, 100  ->  500 J over [0, 4]
    figures = energy.window_figures(evidence(readings), [win(0, 4)], output_tokens=1000)
    assert figures.energy_method == "counter"
    assert figures.energy_j == pytest.approx(500.0)
    assert any("reset 1 time" in n for n in figures.notes)


def test_stale_counter_values_are_not_anchors():
    # an exporter refreshing every 3 s, scraped every 1 s, 100 W throughout: the counter reads
    # 0, 0, 0, 300, 300, 300, 600, 600. Anchors (0, 0), (3, 300), (6, 600):
    # C(1) = 100, C(5) = 500  ->  400 J (= 100 W x 4 s). Using stale values would give 300.
    values = [0, 0, 0, 300, 300, 300, 600, 600]
    readings = [sample(t, 100, e) for t, e in enumerate(values)]
    assert energy.counter_energy_j(readings, win(1, 5)) == pytest.approx(400.0)


def test_counter_not_bracketing_a_window_falls_back_to_the_integral():
    figures = energy.window_figures(evidence(COUNTER), [win(3.5, 4.5)], output_tokens=10)
    # the counter ends at t = 4 < 4.5: integral of 100 W over 1 s
    assert figures.energy_method == "integral"
    assert figures.energy_j == pytest.approx(100.0)
    assert any("do not bracket" in n for n in figures.notes)


def test_a_frozen_counter_falls_back_to_the_integral():
    # the counter never changes while 200 W are drawn: its only anchor is t = 0, so it cannot
    # bracket [1, 3); never report 0 J
    frozen = [sample(t, 200, 5000) for t in range(5)]
    figures = energy.window_figures(evidence(frozen), [win(1, 3)], output_tokens=10)
    assert figures.energy_method == "integral"
    assert figures.energy_j == pytest.approx(400.0)  # 200 W x 2 s
    assert any("do not bracket" in n for n in figures.notes)


def test_throttle_counts_count_samples_in_windows_with_each_reason():
    readings = [
        sample(0, 700, reasons=["sw_power_cap"]),
        sample(1, 700, reasons=["sw_power_cap", "hw_slowdown"]),
        sample(2, 650, reasons=[]),
        sample(3, 700, reasons=["sw_power_cap"]),
        sample(4, 700, reasons=["sw_thermal"]),  # outside [0, 4)
    ]
    counts = energy.throttle_counts(readings, [win(0, 4)], monitored=True)
    assert counts == {
        "hw_power_brake": 0,
        "hw_slowdown": 1,
        "hw_thermal": 0,
        "sw_power_cap": 3,
        "sw_thermal": 0,
    }
    # a source that does not report reasons lists only what was seen
    assert energy.throttle_counts(readings, [win(0, 4)], monitored=False) == {
        "hw_slowdown": 1,
        "sw_power_cap": 3,
    }


def test_gap_fraction_counts_recorded_gaps_and_silent_stretches():
    # 1 Hz; readings at 0..3, the source failed at 4 and answered again at 8; readings 8..10.
    readings = [sample(t, 100) for t in (0, 1, 2, 3, 8, 9, 10)]
    gaps = [PowerGap(start_ns=4 * S, end_ns=8 * S, cause="BMC gone")]
    # covered by readings (+-1 s): [0, 4] and [7, 10]; the recorded gap [4, 8] is uncovered,
    # so missing = [4, 8] = 4 s of 10 s
    assert energy.gap_fraction(readings, gaps, win(0, 10), sampling_hz=1) == pytest.approx(0.4)
    # readings at 0, 1, 5, 6 with no recorded gap: covered [0, 2] and [4, 6]: 2 s of 6 s
    silent = [sample(t, 100) for t in (0, 1, 5, 6)]
    assert energy.gap_fraction(silent, [], win(0, 6), sampling_hz=1) == pytest.approx(1 / 3)
    # fully covered
    assert energy.gap_fraction(STEPS, [], win(0, 4), sampling_hz=1) == 0.0
    # nothing at all
    assert energy.gap_fraction([], [], win(0, 4), sampling_hz=1) == 1.0


def test_window_figures_report_the_largest_gap_fraction_and_bridge_the_gap():
    readings = [
        sample(t, 100) for t in (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
    ]
    ev = evidence(readings, gaps=[(4, 8)])
    figures = energy.window_figures(ev, [win(0, 10), win(10, 20)], output_tokens=100)
    assert figures.gap_fractions == pytest.approx((0.4, 0.0))
    assert figures.max_gap_fraction == pytest.approx(0.4)
    # bridged linearly at 100 W: 100 W x 20 s
    assert figures.energy_j == pytest.approx(2000.0)
    assert any("gaps inside the confirmed windows" in n for n in figures.notes)
    flagged = ev.model_copy(update={"max_gap_fraction": figures.max_gap_fraction})
    assert "40%" in (energy.gap_flag(flagged) or "")
    assert energy.gap_flag(ev.model_copy(update={"max_gap_fraction": 0.05})) is None


def test_none_source_gives_null_figures():
    figures = energy.window_figures(evidence([], source="none"), [win(0, 10)], output_tokens=5)
    assert figures.node_power_kw is None
    assert figures.energy_j is None
    assert figures.energy_method is None
    assert figures.tokens_per_joule is None
    assert figures.throttle_counts == {}
    assert figures.max_gap_fraction is None


def test_a_window_without_readings_has_no_energy():
    figures = energy.window_figures(evidence(STEPS), [win(0, 2), win(50, 60)], output_tokens=5)
    assert figures.energy_j is None
    assert figures.tokens_per_joule is None
    assert figures.gap_fractions[1] == 1.0
    assert figures.node_power_kw == pytest.approx(150 / 1000)  # t = 0, 1 only


def test_windows_must_not_overlap_or_be_empty():
    with pytest.raises(ValueError, match="overlap"):
        energy.window_figures(evidence(STEPS), [win(0, 2), win(1, 3)], output_tokens=1)
    with pytest.raises(ValueError, match="does not end after"):
        energy.window_figures(evidence(STEPS), [win(2, 2)], output_tokens=1)


def test_apply_window_figures_fills_the_evidence():
    filled = energy.apply_window_figures(evidence(COUNTER), [win(0.5, 3.5)], output_tokens=950)
    assert filled.energy_j == pytest.approx(475.0)
    assert filled.energy_method == "counter"
    assert filled.tokens_per_joule == pytest.approx(2.0)
    assert filled.node_power_kw == pytest.approx(0.5 / 3)
    assert filled.max_gap_fraction == 0.0
    PowerEvidence.model_validate(filled.model_dump())  # still a valid model


def test_trace_summary_reduces_points_and_summarises_windows():
    readings = [sample(t, 100 + 10 * t) for t in range(10)]  # 100..190 W at t = 0..9
    ev = evidence(readings, gaps=[(20, 21)])
    summary = energy.power_trace_summary(ev, windows=[win(2, 6)], max_points=5)
    assert summary.samples == 4  # t = 2..5
    assert (summary.min_w, summary.max_w) == (120, 150)
    assert summary.mean_w == pytest.approx(135.0)
    assert summary.gaps == 0  # the gap is outside the window
    # 9 s in 5 buckets of 1.8 s: {0,1}, {2,3}, {4,5}, {6,7}, {8,9} -> means 105, 125, ...
    assert [p.watts for p in summary.points] == pytest.approx([105, 125, 145, 165, 185])
    assert [p.t_s for p in summary.points] == pytest.approx([0.5, 2.5, 4.5, 6.5, 8.5])
    whole = energy.power_trace_summary(ev)
    assert whole.samples == 10
    assert whole.gaps == 1


def test_methodology_table_names_every_figure():
    table = energy.methodology_markdown()
    for name in (
        "node_power_kw",
        "energy_j (counter)",
        "energy_j (integral)",
        "tokens_per_joule",
        "throttle_counts",
        "max_gap_fraction",
    ):
        assert f"`{name}`" in table
    assert table.count("\n") == len(energy.METHODOLOGY) + 2
    assert math.isclose(energy.GAP_FLAG_FRACTION, 0.10)


def test_confirmed_windows_take_the_probes_windows_and_tokens():
    from tests import factories

    probes = [
        factories.probe(0, window_start_ns=1 * S, window_end_ns=3 * S, end_ns=4 * S),
        factories.probe(1, window_start_ns=5 * S, window_end_ns=7 * S, end_ns=8 * S),
    ]
    windows, tokens = energy.confirmed_windows(probes)
    assert windows == [(1 * S, 3 * S), (5 * S, 7 * S)]
    assert tokens == 640  # 2 x 320 output tokens of successful window requests
