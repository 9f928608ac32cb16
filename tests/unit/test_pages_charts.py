"""Chart specs (pure) and their drawing by vl-convert as SVG."""

from __future__ import annotations

import re

import pytest

from tests.html_dom import Node, parse
from tests.result_factories import full_mode_data, hostile_data, seed_data
from tokenwatt.pages.charts import Chart, chart_names, charts_for, to_svg
from tokenwatt.schema.result import ResultFile


def result_of(data):
    return ResultFile.model_validate(data)


def marks(svg: str, role: str | None = None) -> list[Node]:
    """Drawn items of the SVG's mark groups (``role-mark`` is how Vega tags data marks)."""
    doc = parse(svg)
    groups = [g for g in doc.find_all("g") if "role-mark" in g.classes()]
    if role is not None:
        groups = [g for g in groups if f"mark-{role}" in g.classes()]
    return [child for g in groups for child in g.children if not isinstance(child, str)]


def test_seed_has_only_the_goodput_chart_with_its_band(seed_path):
    charts = charts_for(result_of(seed_data(seed_path)), validate=True)
    assert [c.key for c in charts] == ["goodput"]
    band = charts[0].spec["datasets"]["band"][0]
    # 4515 tok/s +- 0.7 %
    assert band["low"] == pytest.approx(4483.395)
    assert band["high"] == pytest.approx(4546.605)
    assert [row["goodput_tok_s"] for row in charts[0].spec["datasets"]["configs"]] == [
        4515.0,
        4522.8,
        4516.4,
    ]
    assert "variance band (0.7 %)" in charts[0].caption


def test_full_result_has_every_chart_and_valid_specs(seed_path):
    charts = charts_for(result_of(full_mode_data(seed_path)), validate=True)
    assert [c.key for c in charts] == ["goodput", "ttft", "tpot", "power", "tokens-per-joule"]
    by_key = {c.key: c for c in charts}
    assert by_key["ttft"].spec["datasets"]["slo"] == [{"slo_ms": 2000.0}]
    assert by_key["tpot"].spec["datasets"]["slo"] == [{"slo_ms": 50.0}]
    assert len(by_key["goodput"].spec["datasets"]["repeats"]) == 9
    # 61 points per config's trace, three configs
    assert len(by_key["power"].spec["datasets"]["trace"]) == 183


def test_unbounded_probes_are_counted_not_drawn(seed_path):
    data = full_mode_data(seed_path)
    probes = [p for c in data["configs"] for p in c["probes"] if p["ttft_p99_ms"] is None]
    assert probes, "the factory's sweep should overload the server at its last search rate"
    chart = next(c for c in charts_for(result_of(data)) if c.key == "ttft")
    drawn = len(chart.spec["datasets"]["probes"])
    total = sum(len(c["probes"]) for c in data["configs"])
    assert drawn == total - len(probes)
    assert f"{len(probes)} probe(s) with unbounded p99" in chart.caption


def test_chart_names_are_unique(seed_path):
    config = result_of(seed_data(seed_path)).configs[0]
    configs = [
        config.model_copy(update={"key": key, "label": "x"})
        for key in ("tuned", "tuned", "baseline")
    ]
    names = chart_names(configs)
    assert names == ["x (tuned)", "x (tuned) #2", "x (baseline)"]


def test_svg_draws_every_config_and_the_slo_line(seed_path):
    charts = {c.key: c for c in charts_for(result_of(full_mode_data(seed_path)))}
    goodput = to_svg(charts["goodput"], id_prefix="g")
    assert goodput.startswith("<svg")
    assert len(marks(goodput, "symbol")) == 3
    # Vega draws ticks as rects: the band plus one tick per repeat (3 configs x 3 repeats).
    assert len(marks(goodput, "rect")) == 1 + 9
    ttft = to_svg(charts["ttft"], id_prefix="t")
    assert len(marks(ttft, "rule")) == 1
    assert "SLO p99 TTFT 2,000 ms" in parse(ttft).words()
    assert len(marks(ttft, "line")) == 3


def clipped_chart(key: str) -> Chart:
    # A clipped mark makes Vega write a <clipPath id="clipN">, numbered from 1 in every drawing.
    spec = {
        "data": {"values": [{"x": 1, "y": 2}, {"x": 2, "y": 5}]},
        "mark": {"type": "line", "clip": True},
        "encoding": {
            "x": {"field": "x", "type": "quantitative", "scale": {"domain": [0, 1.5]}},
            "y": {"field": "y", "type": "quantitative"},
        },
    }
    return Chart(key=key, title=key, caption="", spec=spec)


def test_svg_ids_are_prefixed_so_charts_can_share_a_page():
    svgs = [to_svg(clipped_chart(f"c{i}"), id_prefix=f"p{i}") for i in range(2)]
    ids = [i for svg in svgs for i in re.findall(r'\bid="([^"]+)"', svg)]
    assert len(ids) == 2, "each drawing should carry one clip-path id"
    assert len(set(ids)) == 2
    for i, svg in enumerate(svgs):
        refs = re.findall(r"url\(#([^)]+)\)", svg)
        assert refs
        assert all(ref.startswith(f"p{i}-") for ref in refs)


def test_svg_escapes_labels(seed_path):
    chart = charts_for(result_of(hostile_data(seed_path)))[0]
    svg = to_svg(chart, id_prefix="h")
    assert "<script" not in svg
    assert "&lt;script&gt;" in svg
