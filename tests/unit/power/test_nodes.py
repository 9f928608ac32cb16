"""A server spanning nodes: the sum over the nodes at each tick, gaps, energy, and the sampler.

The summation rules (tokenwatt.power.nodes) against hand-worked values; the window figures of a
sum (tokenwatt.energy) likewise; then NodesSampler with scripted and slow sources.
"""

from __future__ import annotations

import time

import pytest

from tests import factories
from tokenwatt import energy
from tokenwatt.errors import PowerError
from tokenwatt.power import NodesSampler, Reading, ReplaySource, sampler_for_spec
from tokenwatt.power.base import BuildContext, PowerSource
from tokenwatt.power.nodes import sum_nodes, total_gaps, total_samples
from tokenwatt.schema.run import NodePowerEvidence, PowerGap, PowerSample

S = 1_000_000_000  # ns per second


def sample(t_s: float, watts: float, **kw) -> PowerSample:
    return PowerSample(t_ns=round(t_s * S), watts=watts, **kw)


def node(name: str, samples, *, gaps=(), scope="node", **kw) -> NodePowerEvidence:
    return NodePowerEvidence(
        name=name,
        source="redfish",
        description=f"BMC of {name}",
        scope=scope,
        samples=list(samples),
        gaps=[
            PowerGap(start_ns=round(a * S), end_ns=round(b * S), cause=cause)
            for a, b, cause in gaps
        ],
        **kw,
    )


# -- the total at each tick ---------------------------------------------------------------------


def test_the_total_is_the_sum_only_on_ticks_every_node_read():
    # node a: 300 W on ticks 0, 1, 2; node b: 450 W on ticks 0 and 2 (tick 1 failed)
    a = node("a", [sample(0.01, 300), sample(1.01, 300), sample(2.01, 300)])
    b = node("b", [sample(0.03, 450), sample(2.02, 451)], gaps=[(1.0, 2.02, "down")])
    totals = total_samples([(a, [0, 1, 2]), (b, [0, 2])])
    assert [s.watts for s in totals] == [750.0, 751.0]  # never 300 W alone at tick 1
    # stamped with the latest of the nodes' times
    assert [s.t_ns for s in totals] == [round(0.03 * S), round(2.02 * S)]
    assert all(s.energy_j is None for s in totals)


def test_the_total_joins_gpu_readings_and_throttle_reasons():
    a = node(
        "a",
        [sample(0, 300, gpu_watts=[100, 200], throttle_reasons=["sw_power_cap"])],
        scope="board",
    )
    b = node("b", [sample(0, 50, gpu_watts=[50], throttle_reasons=["hw_slowdown"])], scope="board")
    c = node("c", [sample(0, 10)], scope="board")
    (ab,) = total_samples([(a, [7]), (b, [7])])
    assert ab.gpu_watts == [100.0, 200.0, 50.0]  # node order
    assert ab.throttle_reasons == ["hw_slowdown", "sw_power_cap"]
    (abc,) = total_samples([(a, [7]), (b, [7]), (c, [7])])
    assert abc.watts == 360.0
    assert abc.gpu_watts is None  # c does not read GPU by GPU: no per-GPU list for the sum


def test_a_gap_on_any_node_is_a_gap_on_the_total():
    a = node("a", [], gaps=[(1, 3, "timeout"), (10, 11, "timeout")])
    b = node("b", [], gaps=[(2, 5, "refused"), (7, 8, "refused")])
    gaps = total_gaps([a, b])
    assert [(g.start_ns / S, g.end_ns / S) for g in gaps] == [(1, 5), (7, 8), (10, 11)]
    assert [g.cause for g in gaps] == ["a: timeout; b: refused", "b: refused", "a: timeout"]


def test_the_sum_names_its_nodes_and_adds_their_limits():
    a = node("node-a", [sample(0, 300)], power_limit_w=2800.0, throttle_monitored=True)
    b = node("node-b", [sample(0, 450)], power_limit_w=2000.0)
    evidence = sum_nodes([(a, [0]), (b, [0])], sampling_hz=2)
    assert evidence.source == "nodes"
    assert evidence.description == "Sum over 2 nodes: node-a (redfish), node-b (redfish)"
    assert evidence.scope == "node"
    assert evidence.power_limit_w == 4800.0
    assert evidence.throttle_monitored is False  # b reports no reasons: an empty list is no "none"
    assert evidence.nodes == [a, b]
    unknown = sum_nodes([(a, [0]), (node("c", [sample(0, 1)]), [0])], sampling_hz=2)
    assert unknown.power_limit_w is None
    with pytest.raises(ValueError, match="different things"):
        sum_nodes([(a, [0]), (node("d", [], scope="board"), [])], sampling_hz=2)
    with pytest.raises(ValueError, match="at least two"):
        sum_nodes([(a, [0])], sampling_hz=2)


# -- the figures of a sum ----------------------------------------------------------------------


def two_nodes_with_a_gap_on_b():
    """1 Hz readings at t = 0..9 s. a: 300 W throughout. b: 400 W up to 3 s, no readings at 4
    and 5 s (its BMC failed from 3.5 s), 500 W from 6 s."""
    ticks = list(range(10))
    a = node("a", [sample(t, 300) for t in ticks])
    b_ticks = [t for t in ticks if t not in (4, 5)]
    b = node(
        "b",
        [sample(t, 400 if t <= 3 else 500) for t in b_ticks],
        gaps=[(3.5, 6, "cannot reach the BMC")],
    )
    return sum_nodes([(a, ticks), (b, b_ticks)], sampling_hz=1)


def test_energy_of_the_sum_is_the_sum_of_each_nodes_energy():
    evidence = two_nodes_with_a_gap_on_b()
    assert [s.watts for s in evidence.samples] == [700] * 4 + [800] * 4
    assert [(g.start_ns / S, g.end_ns / S) for g in evidence.gaps] == [(3.5, 6)]
    figures = energy.window_figures(evidence, [(0, 10 * S)], output_tokens=15100)
    # a: 300 W x 10 s = 3000 J. b (integral, its gap bridged): 0-3 s 400 W = 1200 J, 3-6 s
    # 400 -> 500 W = 1350 J, 6-9 s 500 W = 1500 J, 9-10 s held at 500 W = 500 J: 4550 J.
    nodes = dict(figures.nodes)
    assert nodes["a"].energy_j == pytest.approx(3000.0)
    assert nodes["b"].energy_j == pytest.approx(4550.0)
    assert figures.energy_j == pytest.approx(7550.0)
    assert figures.energy_method == "integral"
    assert figures.tokens_per_joule == pytest.approx(15100 / 7550)  # 2 tok/J
    # mean power: the 8 total readings (4 x 700 W, 4 x 800 W), never a partial sum
    assert figures.node_power_kw == pytest.approx(0.75)
    assert nodes["a"].node_power_kw == pytest.approx(0.3)
    assert nodes["b"].node_power_kw == pytest.approx((4 * 400 + 4 * 500) / 8 / 1000)
    # coverage of the sum: readings at 3 and 6 s cover 2-4 and 5-7 s; the recorded gap
    # 3.5-6 s is uncovered: 3.5-6 s of 10 s = 25 %
    assert figures.max_gap_fraction == pytest.approx(0.25)
    assert figures.max_gap_s == pytest.approx(3.0)  # no total reading from 3 to 6 s
    assert dict(figures.nodes)["a"].max_gap_fraction == 0.0
    assert "b: power readings have gaps inside the confirmed windows (bridged linearly)" in (
        figures.notes
    )


def test_the_sums_energy_is_unknown_when_a_nodes_is():
    a = node("a", [sample(t, 300) for t in range(10)])
    b = node("b", [sample(t, 400) for t in range(3)], gaps=[(3, 10, "gone")])
    evidence = sum_nodes([(a, range(10)), (b, range(3))], sampling_hz=1)
    figures = energy.window_figures(evidence, [(5 * S, 9 * S)], output_tokens=10)
    assert dict(figures.nodes)["b"].energy_j is None
    assert figures.energy_j is None
    assert figures.tokens_per_joule is None
    assert figures.node_power_kw is None  # no tick on which both read inside the window
    assert "energy of b unknown: the sum's energy not computed" in figures.notes


def test_different_energy_methods_are_said():
    # a has a counter (1 J per 1 s at 1 W... here 300 J/s), b only readings
    a = node("a", [sample(t, 300, energy_j=1000.0 + 300 * t) for t in range(11)])
    b = node("b", [sample(t, 100) for t in range(11)])
    evidence = sum_nodes([(a, range(11)), (b, range(11))], sampling_hz=1)
    figures = energy.window_figures(evidence, [(0, 10 * S)], output_tokens=1)
    # a: counter 4000 - 1000 = 3000 J; b: 100 W x 10 s = 1000 J
    assert figures.energy_j == pytest.approx(4000.0)
    assert figures.energy_method is None
    assert "by different methods (a: counter, b: integral)" in " ".join(figures.notes)


def test_applied_figures_fill_each_node():
    evidence = energy.apply_window_figures(
        two_nodes_with_a_gap_on_b(), [(0, 10 * S)], output_tokens=1
    )
    assert evidence.energy_j == pytest.approx(7550.0)
    assert evidence.nodes is not None
    a, b = evidence.nodes
    assert a.node_power_kw == pytest.approx(0.3)
    assert a.energy_j == pytest.approx(3000.0)
    assert a.energy_method == "integral"
    assert b.energy_j == pytest.approx(4550.0)
    assert b.max_gap_fraction == pytest.approx(0.25)
    summaries = energy.power_node_summaries(
        evidence, energy.window_figures(evidence, [(0, 10 * S)], output_tokens=1), [(0, 10 * S)]
    )
    assert summaries is not None
    assert [(n.name, n.samples, n.gaps) for n in summaries] == [("a", 10, 0), ("b", 8, 1)]


# -- the sampler --------------------------------------------------------------------------------


class SlowSource(PowerSource):
    """Answers every read after ``delay_s``."""

    def __init__(self, watts: float, delay_s: float) -> None:
        super().__init__()
        self.scope = "node"
        self.description = f"slow, {delay_s} s a read"
        self._watts, self._delay_s = watts, delay_s

    @classmethod
    def from_spec(cls, spec, context: BuildContext) -> SlowSource:
        raise NotImplementedError

    def read(self) -> Reading:
        time.sleep(self._delay_s)
        return Reading(self._watts)


def test_a_slow_node_does_not_slow_the_others():
    fast = ReplaySource([Reading(300.0)], scope="node", replays="redfish")
    sampler = NodesSampler([("fast", fast), ("slow", SlowSource(450.0, 0.3))], sampling_hz=20)
    sampler.start()
    time.sleep(1.0)
    evidence = sampler.stop()
    assert evidence.nodes is not None
    fast_ev, slow_ev = evidence.nodes
    # 20 Hz for 1 s: about 20 fast readings (machine noise allowed), a read every 0.3 s when slow
    assert len(fast_ev.samples) >= 10
    assert 2 <= len(slow_ev.samples) <= 5
    assert fast_ev.gaps == slow_ev.gaps == []  # slow is not failed
    # the total only where both read on the same tick: at most the slow node's readings
    assert 1 <= len(evidence.samples) <= len(slow_ev.samples)
    assert {s.watts for s in evidence.samples} == {750.0}
    assert sampler.sample_count == len(evidence.samples)


def test_a_failing_node_is_a_gap_on_it_and_on_the_total_while_the_other_reads_on():
    good = ReplaySource([Reading(300.0)], scope="node", replays="redfish")
    items = [Reading(450.0)] * 3 + [PowerError("BMC refused the connection")] * 5
    flaky = ReplaySource([*items, Reading(460.0)], scope="node", replays="redfish")
    sampler = NodesSampler([("a", good), ("b", flaky)], sampling_hz=50)
    sampler.start()
    time.sleep(0.5)
    evidence = sampler.stop()
    assert evidence.nodes is not None
    a, b = evidence.nodes
    (b_gap,) = b.gaps
    assert b_gap.cause == "BMC refused the connection (5 failed reads)"
    assert a.gaps == []
    assert [s for s in a.samples if b_gap.start_ns <= s.t_ns < b_gap.end_ns]  # a read on
    (gap,) = evidence.gaps
    assert (gap.start_ns, gap.end_ns) == (b_gap.start_ns, b_gap.end_ns)
    assert gap.cause == "b: BMC refused the connection (5 failed reads)"
    assert not [s for s in evidence.samples if gap.start_ns <= s.t_ns < gap.end_ns]
    watts = [s.watts for s in evidence.samples]
    assert watts[:3] == [750.0] * 3
    assert set(watts[3:]) == {760.0}
    assert 300.0 not in watts  # no partial sum


class SlowToOpen(ReplaySource):
    def open(self) -> None:
        time.sleep(0.125)  # two and a half periods at 20 Hz


def test_the_nodes_read_on_one_grid():
    # b starts 125 ms after a: on its own grid it would read 25 ms off a's ticks
    a = ReplaySource([Reading(1.0)], scope="node")
    b = SlowToOpen([Reading(2.0)], scope="node")
    sampler = NodesSampler([("a", a), ("b", b)], sampling_hz=20)
    sampler.start()
    time.sleep(0.5)
    evidence = sampler.stop()
    assert evidence.nodes is not None
    a_times, b_times = (
        dict(zip(s.ticks, (x.t_ns for x in n.samples), strict=True))
        for s, n in zip(sampler.samplers.values(), evidence.nodes, strict=True)
    )
    common = sorted(set(a_times) & set(b_times))
    assert len(common) >= 5
    # read on the same tick of the same grid: within a few ms of each other (the period is 50)
    apart_ms = sorted(abs(a_times[t] - b_times[t]) / 1e6 for t in common)
    assert apart_ms[len(apart_ms) // 2] < 10


def test_a_node_that_cannot_open_is_named_and_nothing_is_left_running():
    class Unreachable(SlowSource):
        def open(self) -> None:
            raise PowerError("cannot reach the BMC at https://10.0.0.2")

    first = ReplaySource([Reading(1.0)], scope="node")
    sampler = NodesSampler([("a", first), ("b", Unreachable(1.0, 0))], sampling_hz=20)
    with pytest.raises(PowerError, match="power node 'b': cannot reach the BMC"):
        sampler.start()
    reads = first.reads
    time.sleep(0.2)
    assert first.reads == reads  # a's thread was stopped


def test_nodes_must_cover_the_same_thing():
    with pytest.raises(ValueError, match="different things"):
        NodesSampler(
            [
                ("a", ReplaySource([Reading(1.0)], scope="node")),
                ("b", ReplaySource([Reading(1.0)])),
            ],
            sampling_hz=1,
        )


def test_sampler_for_spec_reads_every_node():
    spec = factories.spec(
        power={
            "sampling_hz": 20,
            "nodes": [
                {"name": "a", "source": "command", "command": "echo 300"},
                {"name": "b", "source": "command", "command": "echo 450"},
            ],
        }
    )
    sampler = sampler_for_spec(spec)
    assert isinstance(sampler, NodesSampler)
    sampler.start()
    time.sleep(0.5)
    evidence = sampler.stop()
    assert evidence.source == "nodes"
    assert evidence.nodes is not None
    assert [(n.name, n.source, {s.watts for s in n.samples}) for n in evidence.nodes] == [
        ("a", "command", {300.0}),
        ("b", "command", {450.0}),
    ]
    assert evidence.samples
    assert {s.watts for s in evidence.samples} == {750.0}


def test_a_node_that_cannot_be_built_is_named():
    spec = factories.spec(
        power={
            "nodes": [
                {"name": "a", "source": "command", "command": "echo 1"},
                {
                    "name": "b",
                    "source": "redfish",
                    "url": "https://bmc-b",
                    "username": "root",
                    "password_env": "TW_UNSET_BMC_B",
                },
            ]
        }
    )
    with pytest.raises(PowerError, match=r"power.nodes\[1\] \(b\): .*TW_UNSET_BMC_B"):
        sampler_for_spec(spec, env={})


# -- resuming an interrupted run ----------------------------------------------------------------


def two_node_evidence(*t_s: int, b_name: str = "b"):
    a = node("a", [sample(t, 300) for t in t_s])
    b = node(b_name, [sample(t, 450) for t in t_s])
    return sum_nodes([(a, t_s), (b, t_s)], sampling_hz=1)


def test_a_resumed_run_joins_each_node_and_the_total():
    from tokenwatt.resume import merge_power

    merged = merge_power(two_node_evidence(1, 2), two_node_evidence(10, 11))
    assert [s.t_ns / S for s in merged.samples] == [1, 2, 10, 11]
    assert [(g.start_ns / S, g.end_ns / S) for g in merged.gaps] == [(2, 10)]
    assert merged.nodes is not None
    for joined in merged.nodes:
        assert [s.t_ns / S for s in joined.samples] == [1, 2, 10, 11]
        assert [(g.start_ns / S, g.end_ns / S) for g in joined.gaps] == [(2, 10)]
        assert "resumption" in joined.gaps[0].cause
    # other nodes than the interrupted run's: its samples are dropped, with a note
    other = merge_power(two_node_evidence(1, 2), two_node_evidence(10, 11, b_name="c"))
    assert [s.t_ns / S for s in other.samples] == [10, 11]
    assert any("dropped" in n for n in other.notes)
