"""Prometheus text exposition for the simulator: counters, gauges and histograms.

A few dozen lines of the text format (version 0.0.4) instead of a client library: the simulator
writes vLLM's metric names, dcgm-exporter's power lines and its own ground-truth counters, and
nothing else needs a registry.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["Histogram", "MetricsWriter", "format_value"]


def format_value(value: float) -> str:
    """A sample value as Prometheus writes it (``+Inf``, integers without exponent)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    parts = []
    for key, value in labels.items():
        escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
        parts.append(f'{key}="{escaped}"')
    return "{" + ",".join(parts) + "}"


class Histogram:
    """A cumulative histogram with fixed upper bounds (``+Inf`` added)."""

    __slots__ = ("_counts", "bounds", "count", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.total = 0.0

    def observe(self, value: float) -> None:
        """Add one observation."""
        self._counts[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.total += value

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations <= bound) for every bucket, ``+Inf`` last."""
        out: list[tuple[float, int]] = []
        running = 0
        for bound, n in zip((*self.bounds, math.inf), self._counts, strict=True):
            running += n
            out.append((bound, running))
        return out

    def quantile(self, q: float) -> float:
        """Upper bound of the bucket holding quantile ``q`` (``nan`` when empty)."""
        if self.count == 0:
            return math.nan
        rank = q * self.count
        for bound, cum in self.cumulative():
            if cum >= rank:
                return bound
        return math.inf


class MetricsWriter:
    """Builds one Prometheus text exposition."""

    def __init__(self) -> None:
        self._lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        """Start a metric family with its HELP and TYPE lines."""
        self._lines.append(f"# HELP {name} {help_text}")
        self._lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        """One sample line."""
        self._lines.append(f"{name}{_labels(labels or {})} {format_value(value)}")

    def simple(
        self,
        name: str,
        kind: str,
        help_text: str,
        value: float,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """A family with one sample."""
        self.family(name, kind, help_text)
        self.sample(name, value, labels)

    def labelled(
        self,
        name: str,
        kind: str,
        help_text: str,
        samples: Iterable[tuple[Mapping[str, str], float]],
    ) -> None:
        """A family with one sample per label set."""
        self.family(name, kind, help_text)
        for labels, value in samples:
            self.sample(name, value, labels)

    def histogram(
        self, name: str, help_text: str, hist: Histogram, labels: Mapping[str, str]
    ) -> None:
        """A histogram family: buckets, ``_sum`` and ``_count``."""
        self.family(name, "histogram", help_text)
        for bound, cum in hist.cumulative():
            le = "+Inf" if math.isinf(bound) else repr(float(bound))
            self.sample(f"{name}_bucket", cum, {**labels, "le": le})
        self.sample(f"{name}_sum", hist.total, labels)
        self.sample(f"{name}_count", hist.count, labels)

    def text(self) -> str:
        """The exposition, newline-terminated."""
        return "\n".join(self._lines) + "\n"
