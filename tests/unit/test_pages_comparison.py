"""A comparison set's page: the table by date, the charts against date, text escaped."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.result_factories import over_time_data
from tokenwatt import store
from tokenwatt.comparison_set import (
    ComparisonSetFile,
    LoadedResult,
    build_comparison_set,
    select_results,
)
from tokenwatt.errors import ResultError
from tokenwatt.pages.comparison_page import comparison_charts, render_comparison
from tokenwatt.pages.render import make_environment, render_index
from tokenwatt.schema.result import ResultFile

REPO = Path(__file__).resolve().parents[2]


def _available(seed_path, *, mismatch=False):
    return {
        data["id"]: LoadedResult(f"results/{name}.json", ResultFile.model_validate(data))
        for name, data in over_time_data(seed_path, mismatch=mismatch).items()
    }


def _page(seed_path, *, mismatch=False, **changes):
    available = _available(seed_path, mismatch=mismatch)
    wanted = ComparisonSetFile.model_validate(
        {"title": "H100 over time", "results": list(available), **changes}
    )
    comparison = build_comparison_set(
        select_results(wanted, available, where="comparisons/h100.yaml"),
        allow_mismatch=wanted.allow_mismatch,
    )
    uris = {i: f"../results/{i}.md" for i in available}
    text = render_comparison(
        "h100",
        wanted,
        comparison,
        env=make_environment(REPO / "templates"),
        result_uris=uris,
        draw=lambda chart, prefix: f"<svg id='{prefix}'></svg>",
    )
    return text, comparison


def test_the_page_has_one_row_per_config_by_date_with_units(seed_path):
    text, comparison = _page(seed_path)
    assert text.startswith("# H100 over time\n")
    rows = [line for line in text.splitlines() if line.startswith("| 2026-")]
    assert len(rows) == 9
    assert [r[2:12] for r in rows] == ["2026-10-08"] * 3 + ["2026-11-02"] * 3 + ["2026-12-01"] * 3
    assert "19.90 req/s (19.20–20.50)" in rows[7]
    assert "better" in rows[7]
    assert "(baseline)" in rows[6]
    assert rows[0].count("—") >= 2  # the seed: no capacity, no tokens per joule
    assert "4,515.0 tok/s" in rows[0]
    assert "56.3 %" in rows[0]
    assert "[h100-december](../results/h100-december.md)" in rows[8]
    assert "Differs from" not in text


def test_charts_against_date_validate_and_leave_out_what_is_missing(seed_path):
    _, comparison = _page(seed_path)
    charts = comparison_charts(comparison, validate=True)
    assert [c.key for c in charts] == ["capacity", "tokens-per-joule", "mbu"]
    capacity = charts[0].spec["datasets"]["rows"]
    assert {r["result"] for r in capacity} == {"h100-december"}  # only it has capacity
    assert capacity[1] == {
        "date": "2026-12-01",
        "config": "tuned kernels (tuned)",
        "result": "h100-december",
        "capacity_rps": 19.9,
        "low": 19.2,
        "high": 20.5,
    }
    tpj_dates = {r["date"] for r in charts[1].spec["datasets"]["rows"]}
    assert tpj_dates == {"2026-11-02", "2026-12-01"}  # the seed gives no tokens per joule


def test_an_accepted_mismatch_is_named_and_its_rows_marked(seed_path):
    text, _ = _page(seed_path, mismatch=True, allow_mismatch=True)
    assert "Not all of one scenario" in text
    assert "p99 TPOT 60 ms" in text
    rows = [line for line in text.splitlines() if line.startswith("| 2026-")]
    assert [("≠ SLO" in r) for r in rows] == [False] * 6 + [True] * 3


def test_a_mismatch_without_allow_mismatch_is_refused(seed_path):
    with pytest.raises(ResultError, match="not comparable"):
        _page(seed_path, mismatch=True)


def test_an_unknown_id_is_named(seed_path):
    wanted = ComparisonSetFile(title="t", results=["h100-november", "nope"])
    with pytest.raises(ResultError, match=r"comparisons/x.yaml: results: .*'nope'"):
        select_results(wanted, _available(seed_path), where="comparisons/x.yaml")


def test_markup_in_a_title_shows_as_text(seed_path):
    text, _ = _page(seed_path, description="<script>alert(1)</script> *x*")
    assert "<script>" not in text
    assert "&#60;script&#62;" in text


def test_a_bad_set_file_is_named_with_its_field(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("title: t\nresults: []\ncolour: red\n", encoding="utf-8")
    with pytest.raises(ResultError) as info:
        store.load_comparison_set(path)
    message = str(info.value)
    assert message.startswith(f"{path}: invalid comparison set")
    assert "results" in message
    assert "colour: unknown field" in message
    assert "tokenwatt schema comparison" in message


def test_the_index_links_each_comparison_page_only_when_there_is_one():
    env = make_environment(REPO / "templates")
    assert "Results over time" not in render_index([], env=env)
    text = render_index([], env=env, comparisons=[("H100 | over time", "comparisons/h100.md")])
    assert "- [H100 &#124; over time](comparisons/h100.md)" in text
