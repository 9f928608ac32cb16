"""Charts of a result: altair builds Vega-Lite specs (pure); vl-convert draws them as SVG.

Pages must work with no network, so every chart is drawn at build time and inlined as SVG: no
JavaScript, no CDN. :func:`charts_for` decides which charts a result has (only those its data
supports) and :func:`to_svg` draws one. The two are separate so that the page renderer can be
tested without drawing anything, and the chart specs without a page.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import altair as alt

from tokenwatt.schema.result import ConfigResult, ResultFile

__all__ = ["Chart", "chart_names", "charts_for", "draw_svg", "to_svg"]

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
    on_capacity = result.verdict is not None and result.verdict.basis == "slo_capacity"
    if baseline is not None and band is not None and not on_capacity:
        # The band says something only where the verdict rests on goodput (the seed's basis).
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


def _capacity_chart(result: ResultFile, names: list[str], *, validate: bool) -> Chart | None:
    rows: list[dict[str, Any]] = []
    brackets: list[dict[str, Any]] = []
    for name, c in zip(names, result.configs, strict=True):
        if c.slo_capacity_rps is None:
            continue
        ci = c.slo_capacity_ci_rps
        rows.append(
            {
                "config": name,
                "capacity_rps": c.slo_capacity_rps,
                "low": ci[0] if ci else None,
                "high": ci[1] if ci else None,
            }
        )
        bracket = c.capacity_bracket_rps or []
        brackets += [
            {"config": name, "rate_rps": v, "end": end}
            for v, end in zip(bracket, ("highest pass", "lowest fail"), strict=False)
            if v is not None
        ]
    if not rows:
        return None
    x = alt.X(**_q("capacity_rps", title="SLO capacity (req/s)", scale=alt.Scale(zero=False)))
    y = alt.Y(**_n("config", title=None, sort=names, axis=alt.Axis(labelLimit=240)))
    layers: list[alt.Chart] = []
    if any(r["low"] is not None for r in rows):
        layers.append(
            alt.Chart(_data("capacity"))
            .transform_filter("datum.low != null")
            .mark_rule(color="#1565c0", size=3)
            .encode(
                x=alt.X(**_q("low", title="SLO capacity (req/s)")), x2=alt.X2(field="high"), y=y
            )
        )
    if brackets:
        layers.append(
            alt.Chart(_data("brackets"))
            .mark_tick(color="#555555", thickness=2, size=16)
            .encode(x=alt.X(**_q("rate_rps")), y=y)
        )
    layers.append(
        alt.Chart(_data("capacity"))
        .mark_point(filled=True, size=110, color="#1565c0", opacity=1)
        .encode(x=x, y=y)
    )
    chart = alt.layer(*layers).properties(width=_WIDTH, height=max(90, 48 * len(rows)))
    return Chart(
        key="capacity",
        title="SLO capacity per config",
        caption=(
            "The SLO capacity each config's probes imply (dots), with its 95 % interval (bars;"
            " none where the probes do not bound it), and the measured bracket: the highest"
            " passing and the lowest failing probe above it (ticks)."
        ),
        spec=_spec(chart, {"capacity": rows, "brackets": brackets}, validate=validate),
    )


def _exceedance_chart(
    result: ResultFile,
    names: list[str],
    *,
    which: Literal["ttft", "ttfat", "tpot"],
    slo_ms: float,
    validate: bool,
) -> Chart | None:
    points: list[dict[str, Any]] = []
    curves: list[dict[str, Any]] = []
    floor = 0.01  # % shown for probes with none over: a log axis has no 0
    for name, c in zip(names, result.configs, strict=True):
        fit = next((f for f in c.capacity_fits or [] if f.slo == which), None)
        for probe in c.probes or []:
            value = getattr(probe, f"{which}_over_pct")
            if value is None or probe.client_bound:
                continue
            points.append(
                {
                    "config": name,
                    "rate_rps": probe.rate_rps,
                    "over_pct": max(value, floor),
                    "probe": "none over" if value == 0 else "measured",
                }
            )
        if fit is None or fit.method != "logistic" or fit.intercept is None or fit.slope is None:
            continue
        rates = [p["rate_rps"] for p in points if p["config"] == name]
        lo, hi = min(rates) * 0.9, max(rates) * 1.1
        for i in range(41):
            r = lo * (hi / lo) ** (i / 40)
            eta = fit.intercept + fit.slope * math.log(r)
            q = 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, eta))))
            curves.append({"config": name, "rate_rps": r, "over_pct": max(q * 100.0, floor)})
    if not curves:
        return None
    metric = which.upper()
    color = alt.Color(**_n("config", title="config", sort=names, legend=_LEGEND))
    x = alt.X(**_q("rate_rps", title="arrival rate (req/s)", scale=alt.Scale(zero=False)))
    y = alt.Y(
        **_q(
            "over_pct",
            title=f"requests over the {metric} bound (%)",
            scale=alt.Scale(type="log", domain=[floor, 100]),
        )
    )
    line = (
        alt.Chart(_data("curves"))
        .mark_line(strokeWidth=2)
        .encode(x=x, y=y, color=color, order=alt.Order(**_q("rate_rps")))
    )
    dots = (
        alt.Chart(_data("points"))
        .mark_point(size=60, filled=True)
        .encode(
            x=x,
            y=y,
            color=color,
            shape=alt.Shape(
                **_n(
                    "probe",
                    title="probe",
                    scale=alt.Scale(
                        domain=["measured", "none over"], range=["circle", "triangle-down"]
                    ),
                )
            ),
        )
    )
    target = (
        alt.Chart(_data("target"))
        .mark_rule(color=_SLO_COLOR, strokeDash=[6, 4], size=2)
        .encode(y=alt.Y(**_q("over_pct")))
    )
    chart = alt.layer(line, dots, target).properties(width=_WIDTH, height=_HEIGHT)
    return Chart(
        key=f"{which}-fit",
        title=f"Requests over the {metric} bound against arrival rate: the capacity fit",
        caption=(
            f"Share of each probe's window requests over the {slo_ms:,g} ms p99 {metric} bound"
            " (failed ones count as over; log scale; triangles: none over), and the logistic"
            " fit each config's capacity comes from (lines). The SLO is met while at most 1 %"
            " are over (red line): the capacity is where a config's fit crosses it."
        ),
        spec=_spec(
            chart,
            {"points": points, "curves": curves, "target": [{"over_pct": 1.0}]},
            validate=validate,
        ),
    )


def _latency_chart(
    result: ResultFile,
    names: list[str],
    *,
    which: Literal["ttft", "ttfat", "tpot"],
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
    bands: list[dict[str, Any]] = []
    for name, config in zip(names, result.configs, strict=True):
        fit = next((f for f in config.capacity_fits or [] if f.slo == which), None)
        if fit is not None and fit.capacity_rps is not None and fit.ci_rps:
            bands.append(
                {
                    "config": name,
                    "low": fit.ci_rps[0],
                    "high": fit.ci_rps[1],
                    "capacity_rps": fit.capacity_rps,
                }
            )
    layers: list[alt.Chart] = []
    if bands:
        layers.append(
            alt.Chart(_data("bands"))
            .mark_rect(opacity=0.12)
            .encode(x=alt.X(**_q("low")), x2=alt.X2(field="high"), color=color)
        )
        layers.append(
            alt.Chart(_data("bands"))
            .mark_rule(strokeDash=[2, 2])
            .encode(x=alt.X(**_q("capacity_rps")), color=color)
        )
    chart = alt.layer(*layers, lines, points, slo, slo_label).properties(
        width=_WIDTH, height=_HEIGHT
    )
    caption = (
        f"p99 {metric} of every probe of the sweep against its arrival rate (log scale), with the"
        f" SLO line at {slo_ms:,g} ms; crosses failed the SLO."
    )
    if bands:
        caption += (
            " Shaded: each config's 95 % interval of its capacity for this bound (dashed: the"
            " estimate), from the fit below."
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
        spec=_spec(
            chart, {"probes": rows, "slo": [{"slo_ms": slo_ms}], "bands": bands}, validate=validate
        ),
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


def _engine_chart(result: ResultFile, names: list[str], *, validate: bool) -> Chart | None:
    measures = (
        ("running_mean", "running requests"),
        ("waiting_mean", "waiting requests"),
        ("kv_cache_usage_mean_pct", "KV-cache usage (%)"),
    )
    rows = [
        {"config": name, "rate_rps": p.rate_rps, "measure": label, "value": getattr(p, field)}
        for name, config in zip(names, result.configs, strict=True)
        for p in config.probes or []
        for field, label in measures
        if getattr(p, field) is not None
    ]
    if not rows:
        return None
    chart = (
        alt.Chart(_data("engine"))
        .mark_point(filled=True, size=40)
        .encode(
            x=alt.X(**_q("rate_rps", title="arrival rate (req/s)")),
            y=alt.Y(**_q("value", title="engine's mean over the window")),
            color=alt.Color(**_n("config", title="config", sort=names, legend=_LEGEND)),
            shape=alt.Shape(**_n("measure", title="gauge", legend=_LEGEND)),
        )
        .properties(width=_WIDTH, height=_HEIGHT)
    )
    return Chart(
        key="engine",
        title="What the engine reported against the arrival rate",
        caption=(
            "Each probe's mean running and waiting requests and KV-cache usage, from the"
            " engine's own /metrics sampled through the window."
        ),
        spec=_spec(chart, {"engine": rows}, validate=validate),
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
        _capacity_chart(result, names, validate=validate),
        _goodput_chart(result, names, validate=validate),
        _latency_chart(
            result, names, which=slo.first_token, slo_ms=slo.first_token_p99_ms, validate=validate
        ),
        _latency_chart(result, names, which="tpot", slo_ms=slo.tpot_p99_ms, validate=validate),
        _exceedance_chart(
            result, names, which=slo.first_token, slo_ms=slo.first_token_p99_ms, validate=validate
        ),
        _exceedance_chart(result, names, which="tpot", slo_ms=slo.tpot_p99_ms, validate=validate),
        _engine_chart(result, names, validate=validate),
        _power_chart(result, names, validate=validate),
        _tokens_per_joule_chart(result, names, validate=validate),
    ]
    return [c for c in charts if c is not None]


_ID = re.compile(r'\bid="([^"]+)"')


def draw_svg(chart: Chart) -> str:
    """Draw a chart with vl-convert, as the SVG document it gives (ids not yet prefixed)."""
    import vl_convert

    svg: str = vl_convert.vegalite_to_svg(chart.spec)
    return svg


def to_svg(chart: Chart, *, id_prefix: str, draw: Callable[[Chart], str] = draw_svg) -> str:
    """Draw a chart as an SVG document to inline in a page.

    SVG ids (clip paths, gradients) are document-wide, and every chart vl-convert draws numbers
    them from 1: two charts on one page would clip each other. Each id is therefore prefixed.

    Args:
        chart: the chart.
        id_prefix: unique in the page.
        draw: gives the chart's SVG as vl-convert draws it (:func:`draw_svg`, or a cache of it:
            :mod:`tokenwatt.pages.chart_cache`).
    """
    svg = draw(chart)
    ids = set(_ID.findall(svg))
    if ids:
        pattern = re.compile(
            r'(\bid="|url\(#|href="#)(' + "|".join(re.escape(i) for i in ids) + r')(["\)])'
        )
        svg = pattern.sub(lambda m: f"{m.group(1)}{id_prefix}-{m.group(2)}{m.group(3)}", svg)
    # The XML declaration, if any, is not allowed inside an HTML document.
    return svg.removeprefix('<?xml version="1.0" encoding="UTF-8"?>').strip()
