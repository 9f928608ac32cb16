"""The Prometheus text exposition format, read with the official parser.

One reader for every ``/metrics`` page tokenwatt scrapes (dcgm-exporter for power, vLLM and the
simulator for the running batch and token counters), built on
``prometheus_client.parser.text_string_to_metric_families``. What that parser does, and what
callers rely on:

- a sample's labels are a dict, matched by name, never by position (node-exporter's textfile
  collector re-sorts them);
- values may be in exponent form (``1.23456789e+08``), ``NaN`` or ``±Inf``; all come back as
  ``float``; timestamps are dropped;
- names may contain colons (vLLM's ``vllm:num_requests_running``);
- a ``counter`` family's samples are always named ``<family>_total``, even where the page wrote
  them without the suffix (dcgm-exporter's ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``): look a
  counter up by its ``_total`` name, or by both;
- samples keep the page's order.

A page that does not parse is an error (:class:`ValueError` naming the line and what is wrong
with it), never an empty or partial list: the caller turns it into its own error (the power
source's :class:`~tokenwatt.errors.PowerError`), so a broken page cannot read as zero.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_fd_to_metric_families

__all__ = ["Sample", "parse", "series_sum"]

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_NOT_FLOAT = re.compile(r"could not convert string to float: (.*)$")


@dataclass(frozen=True)
class Sample:
    """One sample of a Prometheus page."""

    name: str
    labels: dict[str, str]
    value: float


class _CountedLines(io.StringIO):
    """The page as the parser reads it, counting lines so an error can name its line."""

    lineno = 0

    # typeshed types _IOBase.__next__ as bytes; a StringIO's lines are str.
    def __next__(self) -> str:  # type: ignore[override]
        line = super().__next__()
        self.lineno += 1
        return line


def _what_is_wrong(line: str, error: ValueError | IndexError) -> str:
    """The parser's error about one line, in words (its own messages are terse or empty)."""
    text = line.strip()
    shown = repr(text[:80])
    detail = str(error)
    if text.startswith("#"):
        return f"bad comment line {shown}"
    if text.startswith("{"):
        return f"no metric name in {shown}"
    if _NAME.fullmatch(text):
        return f"no value in {shown}"
    if "{" in text and re.sub(r"\\.", "", text).count('"') % 2:
        return f"unterminated label value in {shown}"
    if detail.startswith("Invalid labels"):
        return f"bad label in {shown}"
    if detail.startswith("invalid metric name"):
        return f"no metric name in {shown}"
    not_float = _NOT_FLOAT.search(detail)
    if not_float and not_float.group(1) == "''":
        return f"no value in {shown}"
    if not_float or detail.startswith("Invalid value"):
        return f"value is not a number in {shown} ({detail})"
    return f"not a sample line {shown} ({detail or type(error).__name__})"


def parse(text: str) -> list[Sample]:
    """Every sample of a Prometheus text-format page, in page order.

    Raises:
        ValueError: the page is not in the format (naming the first line that is not).
    """
    lines = _CountedLines(text)
    samples: list[Sample] = []
    try:
        for family in text_fd_to_metric_families(lines):
            samples.extend(Sample(s.name, dict(s.labels), float(s.value)) for s in family.samples)
    except (ValueError, IndexError) as exc:
        # The parser raises IndexError on a few malformed label sets ('{, =x'), ValueError else.
        bad = text.split("\n")[lines.lineno - 1] if lines.lineno else ""
        raise ValueError(f"line {lines.lineno}: {_what_is_wrong(bad, exc)}") from exc
    return samples


def series_sum(samples: Iterable[Sample], name: str) -> float | None:
    """Sum of the finite values of the samples named ``name``, over their label sets.

    None when the page has no finite sample of that name (absent, or only ``NaN``).
    """
    values = [s.value for s in samples if s.name == name and math.isfinite(s.value)]
    return math.fsum(values) if values else None
