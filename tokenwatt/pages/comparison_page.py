"""A comparison set's page: results of one scenario side by side, with figures against date (pure).

One page per ``comparisons/<id>.yaml`` (:class:`tokenwatt.comparison_set.ComparisonSetFile`):
the table ``tokenwatt compare`` prints, and charts of SLO capacity (with its 95 % interval),
tokens per joule and MBU against the date of each result's measurement, one colour per
configuration label. Every value is the result's own; the page draws no verdict across
results (:mod:`tokenwatt.comparison_set` says why).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import altair as alt
import jinja2
from markupsafe import Markup

from tokenwatt.comparison_set import ComparisonRow, ComparisonSet, ComparisonSetFile
from tokenwatt.pages.charts import Chart, to_svg

__all__ = ["comparison_charts", "comparison_page_uri", "render_comparison"]

_WIDTH = 560
_HEIGHT = 260
_LEGEND = alt.Legend(labelLimit=320, orient="bottom", direction="vertical")


def comparison_page_uri(set_id: str) -> str:
    """Where a comparison set's page lives, as a docs-relative Markdown path."""
    return f"comparisons/{set_id}.md"


def _series(row: ComparisonRow) -> str:
    """The line a row belongs to: its label and role, across results."""
    return f"{row.label} ({row.key})"


def _date_axis() -> alt.X:
    return alt.X(field="date", type="temporal", title="date of the measurement")


def _color() -> alt.Color:
    return alt.Color(field="config", type="nominal", title=None, legend=_LEGEND)


def _spec(chart: alt.TopLevelMixin, rows: list[dict[str, Any]], *, validate: bool) -> Any:
    # Data goes in after altair has built the spec, as on the result pages (pages/charts.py).
    spec: dict[str, Any] = chart.to_dict(validate=validate)
    spec["datasets"] = {"rows": rows}
    return spec


def _capacity_chart(comparison: ComparisonSet, *, validate: bool) -> Chart | None:
    rows = [
        {
            "date": row.date.isoformat(),
            "config": _series(row),
            "result": row.result_id,
            "capacity_rps": row.slo_capacity_rps,
            "low": row.slo_capacity_ci_rps[0] if row.slo_capacity_ci_rps else None,
            "high": row.slo_capacity_ci_rps[1] if row.slo_capacity_ci_rps else None,
        }
        for row in comparison.rows
        if row.slo_capacity_rps is not None and row.date is not None
    ]
    if not rows:
        return None
    y = alt.Y(
        field="capacity_rps",
        type="quantitative",
        title="SLO capacity (req/s)",
        scale=alt.Scale(zero=False),
    )
    data = alt.NamedData(name="rows")
    layers = [
        alt.Chart(data)
        .transform_filter("datum.low != null")
        .mark_rule(size=2)
        .encode(
            x=_date_axis(),
            y=alt.Y(field="low", type="quantitative", title="SLO capacity (req/s)"),
            y2=alt.Y2(field="high"),
            color=_color(),
        ),
        alt.Chart(data)
        .mark_point(filled=True, size=90, opacity=1)
        .encode(x=_date_axis(), y=y, color=_color(), shape=_color()),
    ]
    chart = alt.layer(*layers).properties(width=_WIDTH, height=_HEIGHT)
    return Chart(
        key="capacity",
        title="SLO capacity against date",
        caption="Each configuration's SLO capacity (dots) with its 95 % interval (bars; none"
        " where its probes do not bound it), at the date its result was measured. Results"
        " without an SLO capacity (such as the seed) are left out.",
        spec=_spec(chart, rows, validate=validate),
    )


def _figure_chart(
    comparison: ComparisonSet,
    *,
    key: str,
    title: str,
    axis_title: str,
    value: Callable[[ComparisonRow], float | None],
    validate: bool,
) -> Chart | None:
    rows = [
        {"date": row.date.isoformat(), "config": _series(row), "value": value(row)}
        for row in comparison.rows
        if value(row) is not None and row.date is not None
    ]
    if not rows:
        return None
    chart = (
        alt.Chart(alt.NamedData(name="rows"))
        .mark_point(filled=True, size=90, opacity=1)
        .encode(
            x=_date_axis(),
            y=alt.Y(
                field="value", type="quantitative", title=axis_title, scale=alt.Scale(zero=False)
            ),
            color=_color(),
            shape=_color(),
        )
        .properties(width=_WIDTH, height=_HEIGHT)
    )
    return Chart(
        key=key,
        title=title,
        caption=f"{title}: each configuration at the date its result was measured; results"
        " that do not give it are left out.",
        spec=_spec(chart, rows, validate=validate),
    )


def comparison_charts(comparison: ComparisonSet, *, validate: bool = False) -> list[Chart]:
    """Every chart the set's data supports, in page order."""
    charts = [
        _capacity_chart(comparison, validate=validate),
        _figure_chart(
            comparison,
            key="tokens-per-joule",
            title="Tokens per joule against date",
            axis_title="tokens per joule (tok/J)",
            value=lambda r: r.tokens_per_joule,
            validate=validate,
        ),
        _figure_chart(
            comparison,
            key="mbu",
            title="MBU against date",
            axis_title="memory-bandwidth utilisation (%)",
            value=lambda r: r.mbu_pct,
            validate=validate,
        ),
    ]
    return [c for c in charts if c is not None]


def _draw_svg(chart: Chart, id_prefix: str) -> str:
    return to_svg(chart, id_prefix=id_prefix)


def render_comparison(
    set_id: str,
    wanted: ComparisonSetFile,
    comparison: ComparisonSet,
    *,
    env: jinja2.Environment,
    result_uris: dict[str, str],
    draw: Callable[[Chart, str], str] = _draw_svg,
) -> str:
    """The Markdown of a comparison set's page.

    Args:
        set_id: the set's id (its file name).
        wanted: the set file.
        comparison: its results side by side.
        env: from :func:`tokenwatt.pages.render.make_environment`.
        result_uris: each result id's page, relative to the comparison page.
        draw: draws a chart as SVG (tests pass a stand-in).
    """
    drawn = [
        (chart, Markup(draw(chart, f"tw-cmp-{set_id}-{chart.key}")))
        for chart in comparison_charts(comparison)
    ]
    return env.get_template("comparison.md.j2").render(
        set_id=set_id,
        wanted=wanted,
        c=comparison,
        charts=drawn,
        result_uris=result_uris,
    )
