"""Charts of a result: altair builds Vega-Lite specs (pure); vl-convert draws them as SVG.

Pages must work with no network, so every chart is drawn at build time and inlined as SVG: no
JavaScript, no CDN. :func:`charts_for` decides which charts a result has (only those its data
supports) and :func:`to_svg` draws one. The two are separate so that the page renderer can be
tested without drawing anything, and the chart specs without a page.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import altair as alt

from tokenwatt.schema.result import ConfigResult, ResultFile

__all__ = ["Chart", "chart_names", "charts_for", "to_svg"]

_WIDTH = 560
_HEIGHT = 260
_BAND_COLOR = "#9e9e9e"
_SLO_COLOR = "#c62828"
_LEGEND = alt.Legend(labelLimit=320, orient="bottom", direction="vertical")


@dataclass(frozen=True)
class Chart:
    """One chart of a result page."""

    key: str
    """Stable name, used in element ids (``goodput``, ``ttft``, ``tpot``, ``power``, ...)."""
    title: str
    """Heading shown above the chart."""
    caption: str
    """What the chart shows, including what it leaves out (plain text, escaped on the page)."""
    spec: dict[str, Any]
    """The Vega-Lite specification."""


def chart_names(configs: Sequence[ConfigResult]) -> list[str]:
    """One unique display name per config: its label, then its role, numbered if repeated."""
    names: list[str] = []
    for config in configs:
        name = f"{config.label} ({config.key})"
        if name in names:
            name = f"{name} #{sum(1 for n in names if n.startswith(name)) + 1}"
        names.append(name)
    return names


def _q(name: str, **kw: Any) -> dict[str, Any]:
    return {"field": name, "type": "quantitative", **kw}


def _n(name: str, **kw: Any) -> dict[str, Any]:
    return {"field": name, "type": "nominal", **kw}


def _spec(
    chart: alt.TopLevelMixin, datasets: dict[str, list[dict[str, Any]]], *, validate: bool
) -> dict[str, Any]:
    """The chart's Vega-Lite JSON, with its data as top-level named datasets.

    Data goes in after altair has built the spec: altair walks every row of inline data and
    infers types from shorthand strings, which cost ten times the drawing itself.
    """
    spec: dict[str, Any] = chart.to_dict(validate=validate)
    spec["datasets"] = datasets
    return spec


def _data(name: str) -> alt.NamedData:
    return alt.NamedData(name=name)


def _config_axis(names: list[str]) -> alt.X:
    return alt.X(
        **_n("config", title=None, sort=names, axis=alt.Axis(labelAngle=0, labelLimit=180))
    )


def _goodput_chart(result: ResultFile, names: list[str], *, validate: bool) -> Chart:
    datasets: dict[str, list[dict[str, Any]]] = {
        "configs": [
            {"config": name, "goodput_tok_s": c.goodput_tok_s}
            for name, c in zip(names, result.configs, strict=True)
        ]
    }
    repeat_rows = [
        {"config": name, "goodput_tok_s": g}
        for name, c in zip(names, result.configs, strict=True)
        for g in c.repeat_goodputs_tok_s or []
    ]
    y_title = "SLO goodput (tok/s)"
    layers: list[alt.Chart] = []
    caption = ["Mean SLO goodput of each config's confirmation repeats (filled dots)."]
    baseline = next((c for c in result.configs if c.key == "baseline"), None)
    band = result.variance_band_pct
    if baseline is not None and band is not None:
        datasets["band"] = [
            {
                "low": baseline.goodput_tok_s * (1 - band / 100),
                "high": baseline.goodput_tok_s * (1 + band / 100),
                "goodput_tok_s": baseline.goodput_tok_s,
            }
        ]
        layers.append(
            alt.Chart(_data("band"))
            .mark_rect(color=_BAND_COLOR, opacity=0.25)
            .encode(y=alt.Y(**_q("low", title=y_title)), y2=alt.Y2(field="high"))
        )
        layers.append(
            alt.Chart(_data("band"))
            .mark_rule(color=_BAND_COLOR, strokeDash=[4, 3])
            .encode(y=alt.Y(**_q("goodput_tok_s")))
        )
        caption.append(
            f"Grey band: baseline goodput ± the variance band ({band:g} %): differences inside"
            " it are not measurable."
        )
    if repeat_rows:
        datasets["repeats"] = repeat_rows
        layers.append(
            alt.Chart(_data("repeats"))
            .mark_tick(color="#555555", thickness=1, size=18)
            .encode(x=_config_axis(names), y=alt.Y(**_q("goodput_tok_s", title=y_title)))
        )
        caption.append("Ticks: the goodput of each repeat.")
    layers.append(
        alt.Chart(_data("configs"))
        .mark_point(filled=True, size=90, color="#1565c0", opacity=1)
        .encode(
            x=_config_axis(names),
            y=alt.Y(**_q("goodput_tok_s", title=y_title, scale=alt.Scale(zero=False, nice=True))),
        )
    )
    chart = alt.layer(*layers).properties(width=_WIDTH, height=_HEIGHT)
    return Chart(
        key="goodput",
        title="SLO goodput per config",
        caption=" ".join(caption),
        spec=_spec(chart, datasets, validate=validate),
    )


def _latency_chart(
    result: ResultFile,
    names: list[str],
    *,
    which: Literal["ttft", "tpot"],
    slo_ms: float,
    validate: bool,
) -> Chart | None:
    field = f"{which}_p99_ms"
    rows: list[dict[str, Any]] = []
    unbounded = 0
    for name, config in zip(names, result.configs, strict=True):
        for probe in config.probes or []:
            value = getattr(probe, field)
            if value is None or value <= 0:
                # null p99: failed requests count as infinite latency; a log scale has no 0.
                unbounded += value is None
                continue
            rows.append(
                {
                    "config": name,
                    "rate_rps": probe.rate_rps,
                    "p99_ms": value,
                    "probe": "passed SLO" if probe.slo_pass else "failed SLO",
                }
            )
    if not rows:
        return None
    metric = which.upper()
    color = alt.Color(**_n("config", title="config", sort=names, legend=_LEGEND))
    x = alt.X(**_q("rate_rps", title="arrival rate (req/s)", scale=alt.Scale(zero=False)))
    y = alt.Y(**_q("p99_ms", title=f"p99 {metric} (ms)", scale=alt.Scale(type="log")))
    points = (
        alt.Chart(_data("probes"))
        .mark_point(size=60, filled=True)
        .encode(
            x=x,
            y=y,
            color=color,
            shape=alt.Shape(
                **_n(
                    "probe",
                    title="probe",
                    scale=alt.Scale(domain=["passed SLO", "failed SLO"], range=["circle", "cross"]),
                )
            ),
        )
    )
    lines = (
        alt.Chart(_data("probes"))
        .mark_line(opacity=0.5)
        .encode(x=x, y=y, color=color, order=alt.Order(**_q("rate_rps")))
    )
    slo_y = alt.Y(**_q("slo_ms"))
    slo = (
        alt.Chart(_data("slo"))
        .mark_rule(color=_SLO_COLOR, strokeDash=[6, 4], size=2)
        .encode(y=slo_y)
    )
    slo_label = (
        alt.Chart(_data("slo"))
        .mark_text(
            color=_SLO_COLOR,
            align="left",
            x=0,
            dx=4,
            dy=-7,
            text=f"SLO p99 {metric} {slo_ms:,g} ms",
        )
        .encode(y=slo_y)
    )
    chart = alt.layer(lines, points, slo, slo_label).properties(width=_WIDTH, height=_HEIGHT)
    caption = (
        f"p99 {metric} of every probe of the sweep against its arrival rate (log scale), with the"
        f" SLO line at {slo_ms:,g} ms; crosses failed the SLO."
    )
    if unbounded:
        caption += (
            f" {unbounded} probe(s) with unbounded p99 (failed requests count as infinite"
            " latency) are not drawn."
        )
    return Chart(
        key=which,
        title=f"p99 {metric} against arrival rate",
        caption=caption,
        spec=_spec(chart, {"probes": rows, "slo": [{"slo_ms": slo_ms}]}, validate=validate),
    )


def _power_chart(result: ResultFile, names: list[str], *, validate: bool) -> Chart | None:
    rows = [
        {"config": name, "t_s": point.t_s, "watts": point.watts}
        for name, config in zip(names, result.configs, strict=True)
        if config.power_trace is not None
        for point in config.power_trace.points
    ]
    if not rows:
        return None
    chart = (
        alt.Chart(_data("trace"))
        .mark_line(strokeWidth=1.5)
        .encode(
            x=alt.X(**_q("t_s", title="time since the run's first sample (s)")),
            y=alt.Y(**_q("watts", title="power (W)", scale=alt.Scale(zero=False))),
            color=alt.Color(**_n("config", title="config", sort=names, legend=_LEGEND)),
        )
        .properties(width=_WIDTH, height=_HEIGHT)
    )
    return Chart(
        key="power",
        title="Power over time",
        caption=(
            f"Power readings ({result.power.source}) of each config's run, as recorded in its"
            " power trace."
        ),
        spec=_spec(chart, {"trace": rows}, validate=validate),
    )


def _tokens_per_joule_chart(
    result: ResultFile, names: list[str], *, validate: bool
) -> Chart | None:
    rows = [
        {"config": name, "tokens_per_joule": c.tokens_per_joule}
        for name, c in zip(names, result.configs, strict=True)
        if c.tokens_per_joule is not None
    ]
    if not rows:
        return None
    chart = (
        alt.Chart(_data("tpj"))
        .mark_bar(color="#2e7d32", size=36)
        .encode(
            x=_config_axis(names),
            y=alt.Y(**_q("tokens_per_joule", title="tokens per joule (tok/J)")),
        )
        .properties(width=_WIDTH, height=_HEIGHT)
    )
    return Chart(
        key="tokens-per-joule",
        title="Tokens per joule",
        caption="SLO goodput divided by mean power, for each config whose result gives both.",
        spec=_spec(chart, {"tpj": rows}, validate=validate),
    )


def charts_for(result: ResultFile, *, validate: bool = False) -> list[Chart]:
    """Every chart the result's data supports, in page order.

    Args:
        result: the result.
        validate: check each spec against the Vega-Lite schema (slow; the tests do it).
    """
    names = chart_names(result.configs)
    slo = result.slo
    charts: list[Chart | None] = [
        _goodput_chart(result, names, validate=validate),
        _latency_chart(result, names, which="ttft", slo_ms=slo.ttft_p99_ms, validate=validate),
        _latency_chart(result, names, which="tpot", slo_ms=slo.tpot_p99_ms, validate=validate),
        _power_chart(result, names, validate=validate),
        _tokens_per_joule_chart(result, names, validate=validate),
    ]
    return [c for c in charts if c is not None]


_ID = re.compile(r'\bid="([^"]+)"')


def to_svg(chart: Chart, *, id_prefix: str) -> str:
    """Draw a chart as an SVG document to inline in a page.

    SVG ids (clip paths, gradients) are document-wide, and every chart vl-convert draws numbers
    them from 1: two charts on one page would clip each other. Each id is therefore prefixed.
    """
    import vl_convert

    svg: str = vl_convert.vegalite_to_svg(chart.spec)
    ids = set(_ID.findall(svg))
    if ids:
        pattern = re.compile(
            r'(\bid="|url\(#|href="#)(' + "|".join(re.escape(i) for i in ids) + r')(["\)])'
        )
        svg = pattern.sub(lambda m: f"{m.group(1)}{id_prefix}-{m.group(2)}{m.group(3)}", svg)
    # The XML declaration, if any, is not allowed inside an HTML document.
    return svg.removeprefix('<?xml version="1.0" encoding="UTF-8"?>').strip()
