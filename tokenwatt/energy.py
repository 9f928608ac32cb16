"""Power and energy figures over the confirmed measurement windows (pure; no I/O).

The sampler records the whole run; only the samples inside the confirmed windows count. A
window is ``[start_ns, end_ns)`` on the load generator's monotonic clock.

- **node_power_kw**: the mean of the source's readings whose time lies inside a confirmed
  window (board: the sum over the GPUs in use; BMC: the whole node), ÷ 1000.
- **energy_j, method `counter`**: where the readings carry an energy counter (NVML total
  energy, DCGM `TOTAL_ENERGY_CONSUMPTION`), the counter at each window's end minus at its
  start, summed over the windows. The counter at a window edge is interpolated linearly
  between the readings around it; only readings where the counter changed are used (an
  exporter that refreshes every 30 s repeats stale values). A counter that goes down was
  reset: its new value counts as energy since the reset (the rule of Prometheus' `increase()`).
- **energy_j, method `integral`**: otherwise, the trapezoid integral of the readings over
  each window, the power at a window edge interpolated between the readings around it. A gap
  is bridged by a straight line and shows in `max_gap_fraction`.
- **tokens_per_joule**: output tokens of the successful window requests ÷ `energy_j`, which
  is SLO goodput ÷ the windows' average watts.
- **throttle_counts[reason]**: readings inside the windows in which that clock-event reason
  was active on any GPU in use. When the source reports reasons, `sw_power_cap`,
  `hw_slowdown`, `sw_thermal`, `hw_thermal` and `hw_power_brake` are always listed, so a 0 is
  a measured zero.
- **max_gap_fraction**: per window, the share of its time not covered by readings (each
  reading covers one sampling period either side of it; a recorded gap, where the source
  failed, is uncovered from the failed read to the next good one); the largest share over
  the windows. Above 10 % the page flags it.
- **max_gap_s**: the longest stretch of a confirmed window without a reading (window edges
  count as its ends), s. With **coverage** = 100 % - max_gap_fraction and the GPUs each reading
  covers, it is what the publishing policy checks a power window by.

A counter reading that does not advance while power is drawn, or windows not bracketed by
counter readings, fall back to the integral (said in ``notes``).

**A server spanning nodes** (``power.nodes``; section "Power from several nodes"): the readings
above are the total readings, the sum over the nodes at each tick on which every node read, and
the gaps are every node's gaps. ``node_power_kw``, ``throttle_counts``, ``max_gap_fraction`` and
``max_gap_s`` are computed from them as for one source; ``energy_j`` is the sum of the nodes'
energies, each node's computed from its own readings by the rules above (its method named when
all nodes share one), and unknown if any node's is. Each node's mean power and energy over the
windows are kept beside the sum.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from tokenwatt.schema.result import PowerNodeSummary, PowerTracePoint, PowerTraceSummary
from tokenwatt.schema.run import (
    NodePowerEvidence,
    PowerEvidence,
    PowerGap,
    PowerSample,
    ProbeRecord,
)

__all__ = [
    "GAP_FLAG_FRACTION",
    "HEADLINE_THROTTLE_REASONS",
    "METHODOLOGY",
    "EnergyMethod",
    "Window",
    "WindowFigures",
    "apply_window_figures",
    "confirmed_windows",
    "counter_energy_j",
    "gap_flag",
    "gap_fraction",
    "integral_energy_j",
    "max_gap_s",
    "mean_power_w",
    "methodology_markdown",
    "node_evidence",
    "power_node_summaries",
    "power_trace_summary",
    "samples_in_windows",
    "throttle_counts",
    "window_figures",
]

Window = tuple[int, int]
"""A confirmed measurement window, ``(start_ns, end_ns)`` on the monotonic clock."""

EnergyMethod = Literal["counter", "integral"]

GAP_FLAG_FRACTION = 0.10
"""A window with more than this share of its time without readings is flagged on the page."""

HEADLINE_THROTTLE_REASONS: tuple[str, ...] = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal",
    "hw_thermal",
    "hw_power_brake",
)
"""Reasons always listed (with 0 when never active) for a source that reports reasons."""

METHODOLOGY: tuple[tuple[str, str], ...] = (
    (
        "node_power_kw",
        "Mean of the source's readings inside the confirmed windows (board: sum over the GPUs in"
        " use; BMC: whole node; a server spanning nodes: the sum over its nodes), in kW.",
    ),
    (
        "energy_j (counter)",
        "Where every reading carries an energy counter (NVML total energy, DCGM total energy):"
        " counter at each window's end minus at its start, interpolated between the readings"
        " where the counter changed; a counter that goes down was reset and its new value counts"
        " as energy since the reset.",
    ),
    (
        "energy_j (integral)",
        "Otherwise: trapezoid integral of the readings over each window, edges interpolated;"
        " gaps are bridged by a straight line and reported as the gap fraction.",
    ),
    (
        "tokens_per_joule",
        "Output tokens of the successful window requests / energy_j, i.e. SLO goodput / the"
        " windows' average watts.",
    ),
    (
        "throttle_counts",
        "Readings inside the windows in which each clock-event reason (sw_power_cap,"
        " hw_slowdown, sw_thermal, hw_thermal, ...) was active on any GPU in use.",
    ),
    (
        "max_gap_fraction",
        "Largest share of a confirmed window without readings (each reading covers one"
        " sampling period either side; a failed source is a recorded gap). Above"
        f" {GAP_FLAG_FRACTION:.0%} the window is flagged.",
    ),
)
"""The table above as rows of (figure, definition), for the methodology page."""


@dataclass(frozen=True)
class WindowFigures:
    """The power figures over the confirmed windows (all None when nothing was measured)."""

    node_power_kw: float | None
    energy_j: float | None
    energy_method: EnergyMethod | None
    tokens_per_joule: float | None
    throttle_counts: dict[str, int]
    max_gap_fraction: float | None
    gap_fractions: tuple[float, ...]
    """Per window, in the order given."""
    samples_in_windows: int
    notes: tuple[str, ...] = field(default=())
    max_gap_s: float | None = None
    """Longest stretch of a confirmed window without a reading, s."""
    gpu_counts: tuple[int, ...] = ()
    """The distinct numbers of GPUs the readings inside the windows cover (board sources)."""
    nodes: tuple[tuple[str, WindowFigures], ...] = ()
    """Each node's own figures, by name, where the server spans nodes (the above are the sum)."""


def confirmed_windows(probes: Sequence[ProbeRecord]) -> tuple[list[Window], int]:
    """The measurement windows of the given (confirmation) probes and their output tokens.

    Pass the probes of the accepted confirmation (``RunOutcome.confirm_probes``); the tokens
    are those of their successful window requests, as :func:`window_figures` wants them.
    """
    windows = [(p.window_start_ns, p.window_end_ns) for p in probes]
    return windows, sum(p.output_tokens for p in probes)


def methodology_markdown() -> str:
    """:data:`METHODOLOGY` as a Markdown table."""
    rows = ["| figure | how it is computed |", "| --- | --- |"]
    rows += [f"| `{name}` | {text} |" for name, text in METHODOLOGY]
    return "\n".join(rows) + "\n"


def _check_windows(windows: Sequence[Window]) -> list[Window]:
    ordered = sorted(windows)
    for start_ns, end_ns in ordered:
        if end_ns <= start_ns:
            raise ValueError(f"window ({start_ns}, {end_ns}) does not end after it starts")
    for (_, end_a), (start_b, _) in zip(ordered, ordered[1:], strict=False):
        if start_b < end_a:
            raise ValueError("confirmed windows overlap")
    return ordered


def _inside(t_ns: int, windows: Sequence[Window]) -> bool:
    return any(start <= t_ns < end for start, end in windows)


def samples_in_windows(
    samples: Sequence[PowerSample], windows: Sequence[Window]
) -> list[PowerSample]:
    """The samples whose time lies in ``[start_ns, end_ns)`` of a window."""
    wins = _check_windows(windows)
    return [s for s in samples if _inside(s.t_ns, wins)]


def mean_power_w(samples: Sequence[PowerSample], windows: Sequence[Window]) -> float | None:
    """Mean reading inside the windows, W; None without a sample there."""
    inside = samples_in_windows(samples, windows)
    if not inside:
        return None
    return math.fsum(s.watts for s in inside) / len(inside)


def throttle_counts(
    samples: Sequence[PowerSample], windows: Sequence[Window], *, monitored: bool
) -> dict[str, int]:
    """Readings inside the windows with each reason active (on any GPU).

    Args:
        samples: the readings.
        windows: the confirmed windows.
        monitored: the source reports reasons; then the headline reasons are listed even at 0.
    """
    counts: Counter[str] = Counter()
    for sample in samples_in_windows(samples, windows):
        counts.update(set(sample.throttle_reasons))
    result = {name: 0 for name in HEADLINE_THROTTLE_REASONS} if monitored else {}
    result.update(counts)
    return dict(sorted(result.items()))


def _power_at(samples: Sequence[PowerSample], t_ns: float, index: int) -> float:
    """Power at ``t_ns`` by linear interpolation; ``index`` = first sample with t >= t_ns."""
    if index <= 0:
        return samples[0].watts
    if index >= len(samples):
        return samples[-1].watts
    left, right = samples[index - 1], samples[index]
    span = right.t_ns - left.t_ns
    if span <= 0:
        return right.watts
    return left.watts + (right.watts - left.watts) * (t_ns - left.t_ns) / span


def integral_energy_j(samples: Sequence[PowerSample], window: Window) -> float | None:
    """Trapezoid integral of the readings over one window, J.

    The power between two readings is the straight line joining them; at a window edge it is
    interpolated from the readings either side (held flat beyond the first or last reading).
    None when no reading lies inside the window: nothing would be measured, only guessed.
    """
    start_ns, end_ns = window
    ordered = sorted(samples, key=lambda s: s.t_ns)
    times = [s.t_ns for s in ordered]
    first = next((i for i, t in enumerate(times) if t >= start_ns), len(times))
    after = next((i for i, t in enumerate(times) if t >= end_ns), len(times))
    if first >= after:
        return None
    points: list[tuple[float, float]] = [(start_ns, _power_at(ordered, start_ns, first))]
    points += [(s.t_ns, s.watts) for s in ordered[first:after] if s.t_ns > start_ns]
    points.append((end_ns, _power_at(ordered, end_ns, after)))
    joules = math.fsum(
        (t1 - t0) * (w0 + w1) / 2.0 for (t0, w0), (t1, w1) in zip(points, points[1:], strict=False)
    )
    return joules / 1e9


@dataclass(frozen=True)
class _Anchor:
    t_ns: int
    cumulative_j: float


def _counter_anchors(samples: Sequence[PowerSample]) -> tuple[list[_Anchor], int]:
    """Readings where the counter changed, with resets unwrapped; and the number of resets."""
    anchors: list[_Anchor] = []
    resets = 0
    previous: float | None = None
    cumulative = 0.0
    for sample in sorted(samples, key=lambda s: s.t_ns):
        if sample.energy_j is None:
            continue
        value = sample.energy_j
        if previous is None:
            anchors.append(_Anchor(sample.t_ns, 0.0))
        elif value != previous:
            if value < previous:
                resets += 1
                cumulative += value  # restarted from zero: all of it is new energy
            else:
                cumulative += value - previous
            anchors.append(_Anchor(sample.t_ns, cumulative))
        previous = value
    return anchors, resets


def _counter_at(anchors: Sequence[_Anchor], t_ns: int) -> float | None:
    """Counter at ``t_ns``, interpolated between anchors; None outside them."""
    if not anchors or t_ns < anchors[0].t_ns or t_ns > anchors[-1].t_ns:
        return None
    for left, right in zip(anchors, anchors[1:], strict=False):
        if left.t_ns <= t_ns <= right.t_ns:
            span = right.t_ns - left.t_ns
            if span == 0:
                return right.cumulative_j
            fraction = (t_ns - left.t_ns) / span
            return left.cumulative_j + (right.cumulative_j - left.cumulative_j) * fraction
    return anchors[-1].cumulative_j


def counter_energy_j(samples: Sequence[PowerSample], window: Window) -> float | None:
    """Energy over one window from the energy counter, J.

    None unless counter readings bracket the window (one at or before its start and one at or
    after its end).
    """
    anchors, _ = _counter_anchors(samples)
    start = _counter_at(anchors, window[0])
    end = _counter_at(anchors, window[1])
    if start is None or end is None:
        return None
    return end - start


def _merge(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for lo, hi in sorted(intervals):
        if hi <= lo:
            continue
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def gap_fraction(
    samples: Sequence[PowerSample],
    gaps: Sequence[PowerGap],
    window: Window,
    *,
    sampling_hz: float,
) -> float:
    """Share of one window's time not covered by readings (0 = fully covered, 1 = none).

    Each reading covers one sampling period either side of its time; a recorded gap is
    uncovered from its start (the failed read) to its end (the next good reading).
    """
    start_ns, end_ns = window
    period_ns = 1e9 / sampling_hz
    covered = _merge(
        [
            (max(s.t_ns - period_ns, start_ns), min(s.t_ns + period_ns, end_ns))
            for s in samples
            if s.t_ns + period_ns > start_ns and s.t_ns - period_ns < end_ns
        ]
    )
    missing: list[tuple[float, float]] = []
    cursor: float = start_ns
    for lo, hi in covered:
        if lo > cursor:
            missing.append((cursor, lo))
        cursor = max(cursor, hi)
    if cursor < end_ns:
        missing.append((cursor, end_ns))
    missing += [(max(g.start_ns, start_ns), min(g.end_ns, end_ns)) for g in gaps]
    uncovered = sum(hi - lo for lo, hi in _merge(missing))
    return min(1.0, uncovered / (end_ns - start_ns))


def max_gap_s(samples: Sequence[PowerSample], windows: Sequence[Window]) -> float | None:
    """Longest stretch of any window without a reading, s (window edges count as ends).

    Example: readings at 0, 1, 2, 8, 9 s of a [0, 10) s window: the longest stretch is 2 to
    8 s, 6 s.
    """
    longest: float | None = None
    for start, end in windows:
        times = sorted(s.t_ns for s in samples if start <= s.t_ns < end)
        edges = [start, *times, end]
        gap = max(b - a for a, b in zip(edges, edges[1:], strict=False)) / 1e9
        longest = gap if longest is None else max(longest, gap)
    return longest


def _energy(
    samples: Sequence[PowerSample], wins: Sequence[Window], mean_w: float | None
) -> tuple[float | None, EnergyMethod | None, list[str]]:
    """Energy over the windows, its method and what to note: the counter, else the integral."""
    energy: float | None = None
    method: EnergyMethod | None = None
    notes: list[str] = []
    has_counter = any(s.energy_j is not None for s in samples)
    if has_counter and wins:
        anchors, resets = _counter_anchors(samples)
        per_window = [
            (_counter_at(anchors, start), _counter_at(anchors, end)) for start, end in wins
        ]
        if all(a is not None and b is not None for a, b in per_window):
            energy = math.fsum(b - a for a, b in per_window if a is not None and b is not None)
            method = "counter"
            if resets:
                notes.append(
                    f"energy counter reset {resets} time(s) during the run; the value after a"
                    " reset was counted as energy since the reset"
                )
            if mean_w is not None and mean_w > 0 and energy <= 0:
                notes.append(
                    "energy counter did not advance inside the windows while power was drawn:"
                    " energy integrated from the power readings instead"
                )
                energy, method = None, None
        else:
            notes.append(
                "energy counter readings do not bracket every window: energy integrated from"
                " the power readings instead"
            )
    if method is None and wins:
        parts = [integral_energy_j(samples, w) for w in wins]
        if all(p is not None for p in parts):
            energy = math.fsum(p for p in parts if p is not None)
            method = "integral"
        else:
            energy = None
            notes.append("a confirmed window holds no power reading: energy not computed")
    return energy, method, notes


def _sum_of_nodes(
    nodes: Sequence[tuple[str, WindowFigures]],
) -> tuple[float | None, EnergyMethod | None, list[str]]:
    """The sum of the nodes' energies, the method they share (None if not one) and the notes."""
    notes = [f"{name}: {note}" for name, figures in nodes for note in figures.notes]
    unknown = [name for name, figures in nodes if figures.energy_j is None]
    if unknown:
        notes.append(f"energy of {', '.join(unknown)} unknown: the sum's energy not computed")
        return None, None, notes
    methods = {figures.energy_method for _, figures in nodes}
    if len(methods) > 1:
        notes.append(
            "energy is the sum of the nodes' energies, by different methods ("
            + ", ".join(f"{name}: {figures.energy_method}" for name, figures in nodes)
            + ")"
        )
    energy = math.fsum(figures.energy_j for _, figures in nodes if figures.energy_j is not None)
    return energy, methods.pop() if len(methods) == 1 else None, notes


def node_evidence(node: NodePowerEvidence, *, sampling_hz: float) -> PowerEvidence:
    """One node's readings as the evidence of a single source, for the figures of that node."""
    return PowerEvidence(
        source=node.source,
        description=node.description,
        scope=node.scope,
        sampling_hz=sampling_hz,
        samples=node.samples,
        gaps=node.gaps,
        power_limit_w=node.power_limit_w,
        throttle_monitored=node.throttle_monitored,
    )


def window_figures(
    evidence: PowerEvidence, windows: Sequence[Window], *, output_tokens: int
) -> WindowFigures:
    """Every power figure over the confirmed windows.

    Args:
        evidence: what the sampler recorded for the whole run.
        windows: the confirmed measurement windows, ``(start_ns, end_ns)``.
        output_tokens: output tokens of the successful window requests, over all the windows.

    Raises:
        ValueError: a window ends before it starts, or windows overlap.
    """
    wins = _check_windows(windows)
    if evidence.source == "none" or evidence.scope == "none":
        return WindowFigures(None, None, None, None, {}, None, (), 0, ("power not measured",))
    samples = sorted(evidence.samples, key=lambda s: s.t_ns)
    notes: list[str] = []
    fractions = tuple(
        gap_fraction(samples, evidence.gaps, w, sampling_hz=float(evidence.sampling_hz))
        for w in windows
    )
    inside = samples_in_windows(samples, wins)
    mean_w = math.fsum(s.watts for s in inside) / len(inside) if inside else None
    counts = throttle_counts(samples, wins, monitored=evidence.throttle_monitored)

    node_figures = tuple(
        (
            node.name,
            window_figures(
                node_evidence(node, sampling_hz=float(evidence.sampling_hz)),
                windows,
                output_tokens=output_tokens,
            ),
        )
        for node in evidence.nodes or ()
    )
    if not node_figures:
        energy, method, energy_notes = _energy(samples, wins, mean_w)
    elif wins:
        energy, method, energy_notes = _sum_of_nodes(node_figures)
    else:
        energy, method, energy_notes = None, None, []
    notes += energy_notes
    if any(g.start_ns < end and g.end_ns > start for g in evidence.gaps for start, end in wins):
        notes.append("power readings have gaps inside the confirmed windows (bridged linearly)")
    tpj = output_tokens / energy if energy is not None and energy > 0 else None
    return WindowFigures(
        node_power_kw=mean_w / 1000.0 if mean_w is not None else None,
        energy_j=energy,
        energy_method=method if energy is not None else None,
        tokens_per_joule=tpj,
        throttle_counts=counts,
        max_gap_fraction=max(fractions) if fractions else None,
        gap_fractions=fractions,
        samples_in_windows=len(inside),
        notes=tuple(notes),
        max_gap_s=max_gap_s(samples, wins) if wins else None,
        gpu_counts=tuple(sorted({len(s.gpu_watts) for s in inside if s.gpu_watts is not None})),
        nodes=node_figures,
    )


def apply_window_figures(
    evidence: PowerEvidence, windows: Sequence[Window], *, output_tokens: int
) -> PowerEvidence:
    """A copy of ``evidence`` with the window figures filled in.

    Sets node_power_kw, energy_j, energy_method, tokens_per_joule, throttle_counts,
    max_gap_fraction and notes from :func:`window_figures` (same arguments), and each node's
    node_power_kw, energy_j, energy_method and max_gap_fraction where the server spans nodes.
    """
    figures = window_figures(evidence, windows, output_tokens=output_tokens)
    by_name = dict(figures.nodes)
    nodes = (
        [
            node.model_copy(
                update={
                    "node_power_kw": by_name[node.name].node_power_kw,
                    "energy_j": by_name[node.name].energy_j,
                    "energy_method": by_name[node.name].energy_method,
                    "max_gap_fraction": by_name[node.name].max_gap_fraction,
                }
            )
            for node in evidence.nodes
        ]
        if evidence.nodes is not None
        else None
    )
    return evidence.model_copy(
        update={
            "nodes": nodes,
            "node_power_kw": figures.node_power_kw,
            "energy_j": figures.energy_j,
            "energy_method": figures.energy_method,
            "tokens_per_joule": figures.tokens_per_joule,
            "throttle_counts": figures.throttle_counts,
            "max_gap_fraction": figures.max_gap_fraction,
            "notes": [*evidence.notes, *(n for n in figures.notes if n not in evidence.notes)],
        }
    )


def gap_flag(evidence: PowerEvidence, *, threshold: float = GAP_FLAG_FRACTION) -> str | None:
    """A sentence for the page when a confirmed window lacks too many readings, else None."""
    fraction = evidence.max_gap_fraction
    if fraction is None or fraction <= threshold:
        return None
    return (
        f"power readings missing for {fraction:.0%} of a confirmed window"
        f" (more than {threshold:.0%}): power and energy figures are less certain"
    )


def power_trace_summary(
    evidence: PowerEvidence,
    *,
    windows: Sequence[Window] | None = None,
    max_points: int = 600,
) -> PowerTraceSummary:
    """The power trace reduced for the page.

    ``samples``, ``min_w``, ``mean_w``, ``max_w`` and ``gaps`` cover the confirmed windows when
    given (the whole run otherwise); ``points`` always cover the whole run, seconds from its
    first reading, averaged into at most ``max_points`` equal time buckets.
    """
    if max_points < 1:
        raise ValueError("max_points must be at least 1")
    samples = sorted(evidence.samples, key=lambda s: s.t_ns)
    if windows is not None:
        wins = _check_windows(windows)
        chosen = [s for s in samples if _inside(s.t_ns, wins)]
        gap_count = sum(
            1 for g in evidence.gaps if any(g.start_ns < e and g.end_ns > s for s, e in wins)
        )
    else:
        chosen, gap_count = samples, len(evidence.gaps)
    watts = [s.watts for s in chosen]
    points: list[PowerTracePoint] = []
    if samples:
        t0 = samples[0].t_ns
        span = samples[-1].t_ns - t0
        width = span / max_points if span > 0 else 1.0
        buckets: dict[int, list[PowerSample]] = {}
        for s in samples:
            buckets.setdefault(min(int((s.t_ns - t0) / width), max_points - 1), []).append(s)
        for key in sorted(buckets):
            group = buckets[key]
            points.append(
                PowerTracePoint(
                    t_s=math.fsum(s.t_ns - t0 for s in group) / len(group) / 1e9,
                    watts=math.fsum(s.watts for s in group) / len(group),
                )
            )
    return PowerTraceSummary(
        samples=len(chosen),
        min_w=min(watts) if watts else None,
        mean_w=math.fsum(watts) / len(watts) if watts else None,
        max_w=max(watts) if watts else None,
        gaps=gap_count,
        max_gap_fraction=evidence.max_gap_fraction,
        points=points,
    )


def power_node_summaries(
    evidence: PowerEvidence, figures: WindowFigures, windows: Sequence[Window]
) -> list[PowerNodeSummary] | None:
    """Each node's figures over the confirmed windows, for the page; None for one source.

    Args:
        evidence: the run's power evidence.
        figures: :func:`window_figures` of that evidence over ``windows``.
        windows: the confirmed windows.
    """
    if evidence.nodes is None:
        return None
    wins = _check_windows(windows)
    by_name = dict(figures.nodes)
    summaries: list[PowerNodeSummary] = []
    for node in evidence.nodes:
        node_figures = by_name[node.name]
        summaries.append(
            PowerNodeSummary(
                name=node.name,
                source=node.source,
                description=node.description,
                node_power_kw=node_figures.node_power_kw,
                energy_j=node_figures.energy_j,
                energy_method=node_figures.energy_method,
                samples=node_figures.samples_in_windows,
                gaps=sum(
                    1 for g in node.gaps if any(g.start_ns < e and g.end_ns > s for s, e in wins)
                ),
                max_gap_fraction=node_figures.max_gap_fraction,
            )
        )
    return summaries
