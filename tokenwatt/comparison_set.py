"""Results side by side: one engine across versions, one box across months (``tokenwatt compare``).

A comparison set is several result files of the same hardware, model, SLO and workload
(:mod:`tokenwatt.comparability`), each configuration of each result one row, ordered by the
date of its measurement. Every figure is the result's own, as its page shows it; nothing is
recomputed, and no new verdict is drawn across results: two results were measured on different
days, with no common baseline or repeat to bound the drift between them, so the rows stand side
by side and each keeps the verdict its own report gave (:mod:`tokenwatt.compare`).

Pure: the CLI loads the files and prints; the site renders the same rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from tokenwatt.comparability import result_differences
from tokenwatt.errors import ResultError
from tokenwatt.gate import result_verdicts
from tokenwatt.schema.base import Role, StrictModel
from tokenwatt.schema.result import (
    RESULT_ID_MAX_CHARS,
    RESULT_ID_PATTERN,
    ConfigResult,
    ResultFile,
    VerdictOutcome,
)

__all__ = [
    "ComparedResult",
    "ComparisonRow",
    "ComparisonSet",
    "ComparisonSetFile",
    "LoadedResult",
    "build_comparison_set",
    "result_date",
    "select_results",
]


@dataclass(frozen=True)
class LoadedResult:
    """A result file and the path it was given as."""

    path: str
    result: ResultFile


ResultId = Annotated[str, Field(pattern=RESULT_ID_PATTERN, max_length=RESULT_ID_MAX_CHARS)]


class ComparisonSetFile(StrictModel):
    """A ``comparisons/<id>.yaml`` file: which results one site page puts side by side."""

    title: str = Field(min_length=1, description="Title of the page")
    description: str | None = Field(
        default=None, description="What the set follows, in words (shown under the title)"
    )
    results: list[ResultId] = Field(
        min_length=1,
        description="Result ids (results/<id>.json); the first is the reference the others"
        " are checked against",
    )
    allow_mismatch: bool = Field(
        default=False,
        description="Show results that differ from the first in hardware, model, SLO,"
        " workload or simulation, each marked (as compare --allow-mismatch)",
    )


def select_results(
    wanted: ComparisonSetFile, available: Mapping[str, LoadedResult], *, where: str
) -> list[LoadedResult]:
    """The results a set file names, in its order.

    Raises:
        ResultError: naming the set file and each id no result has.
    """
    missing = [i for i in wanted.results if i not in available]
    if missing:
        raise ResultError(
            f"{where}: results: no result has the id {', '.join(map(repr, missing))}"
            f" (known: {', '.join(sorted(available)) or 'none'})"
        )
    return [available[i] for i in wanted.results]


class ComparedResult(StrictModel):
    """One result of the set."""

    result_file: str = Field(description="The result file, as given")
    result_id: str
    title: str
    date: dt.date | None = Field(
        description="Date of the measurement (published, else the report's creation date)"
    )
    status: str = Field(description="draft or published, as the file says")
    mismatches: list[str] = Field(
        description="How it differs from the set's reference (accepted with --allow-mismatch)"
    )


class ComparisonRow(StrictModel):
    """One configuration of one result, with the figures its result gives."""

    date: dt.date | None = Field(description="Date of the result's measurement")
    result_file: str
    result_id: str
    key: Role = Field(description="The config's role in its result")
    label: str = Field(description="The config's label")
    engine: str = Field(description="Engine, version and KV cache, as the result gives it")
    slo_capacity_rps: Annotated[float, Field(ge=0)] | None = Field(
        description="SLO capacity, req/s; null: the result has none (e.g. the seed)"
    )
    slo_capacity_ci_rps: list[float] | None = Field(
        description="Its 95 % confidence interval [low, high], req/s; null: not bounded"
    )
    goodput_tok_s: Annotated[float, Field(ge=0)] = Field(
        description="SLO goodput at the confirmed rate, tok/s"
    )
    tokens_per_joule: Annotated[float, Field(ge=0)] | None = Field(
        description="Goodput per watt, tok/J; null: not measured"
    )
    mbu_pct: float | None = Field(description="Memory-bandwidth utilisation, % of rated")
    verdict: VerdictOutcome | None = Field(
        description="A candidate's verdict in its own result; null for a baseline or repeat"
    )
    mismatched: list[str] = Field(
        description="Aspects its result differs in from the reference (empty: comparable)"
    )


class ComparisonSet(StrictModel):
    """Results of one scenario side by side, what ``tokenwatt compare --json`` prints."""

    reference: str = Field(description="The result file the others are checked against")
    allow_mismatch: bool = Field(description="Differences were accepted (--allow-mismatch)")
    mismatches: list[str] = Field(description="Every difference from the reference, in words")
    results: list[ComparedResult] = Field(description="The results, by date")
    rows: list[ComparisonRow] = Field(description="One per config of each result, by date")


def result_date(result: ResultFile) -> dt.date | None:
    """When a result was measured: its published date, else the day its report was made."""
    if result.published is not None:
        return result.published
    return result.created_utc.date() if result.created_utc is not None else None


def _verdict(result: ResultFile, config: ConfigResult) -> VerdictOutcome | None:
    """A candidate's own verdict (an N-way report names each candidate)."""
    if config.key != "tuned":
        return None
    for verdict in result_verdicts(result):
        if verdict.candidate is None or verdict.candidate == config.label:
            return verdict.outcome
    return None


def _row(loaded: LoadedResult, config: ConfigResult, mismatched: list[str]) -> ComparisonRow:
    result = loaded.result
    return ComparisonRow(
        date=result_date(result),
        result_file=loaded.path,
        result_id=result.id,
        key=config.key,
        label=config.label,
        engine=config.engine,
        slo_capacity_rps=config.slo_capacity_rps,
        slo_capacity_ci_rps=config.slo_capacity_ci_rps,
        goodput_tok_s=config.goodput_tok_s,
        tokens_per_joule=config.tokens_per_joule,
        mbu_pct=config.mbu_pct,
        verdict=_verdict(result, config),
        mismatched=mismatched,
    )


def build_comparison_set(
    results: Sequence[LoadedResult], *, allow_mismatch: bool = False
) -> ComparisonSet:
    """Put results side by side, refusing those that measured something else.

    Args:
        results: the result files, in the order given; the first is the reference.
        allow_mismatch: accept results that differ from the reference, marking their rows.

    Raises:
        ResultError: no results, one given twice, or (without ``allow_mismatch``) results that
            differ in hardware, model, SLO, workload or simulation, each difference named.
    """
    if not results:
        raise ResultError("no result files given")
    seen: dict[str, str] = {}
    for loaded in results:
        result_id = loaded.result.id
        if result_id in seen:
            raise ResultError(
                f"{loaded.path}: result {result_id!r} is also {seen[result_id]}; each result may"
                " be given once"
            )
        seen[result_id] = loaded.path
    diffs = result_differences([(r.path, r.result) for r in results])
    if diffs and not allow_mismatch:
        raise ResultError(
            "results are not comparable (use --allow-mismatch to show them anyway, each"
            " mismatching row marked):\n  " + "\n  ".join(d.text for d in diffs)
        )
    by_file: dict[str, list[str]] = {}
    for d in diffs:
        aspects = by_file.setdefault(d.other, [])
        if d.aspect not in aspects:
            aspects.append(d.aspect)
    # By date; results of one day (or with none, last) keep the order they were given in.
    order = sorted(
        range(len(results)),
        key=lambda i: (result_date(results[i].result) or dt.date.max, i),
    )
    ordered = [results[i] for i in order]
    return ComparisonSet(
        reference=results[0].path,
        allow_mismatch=allow_mismatch,
        mismatches=[d.text for d in diffs],
        results=[
            ComparedResult(
                result_file=r.path,
                result_id=r.result.id,
                title=r.result.title,
                date=result_date(r.result),
                status=r.result.status,
                mismatches=[d.text for d in diffs if d.other == r.path],
            )
            for r in ordered
        ],
        rows=[
            _row(r, config, by_file.get(r.path, [])) for r in ordered for config in r.result.configs
        ],
    )
