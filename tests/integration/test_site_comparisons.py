"""The real site with ``comparisons/*.yaml``: one page per set, linked from the index, and a set
that names an unknown result or results of another scenario fails the build, naming its file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.html_dom import parse
from tests.result_factories import over_time_data
from tests.site_build import mkdocs_build, write_config, write_results

pytestmark = pytest.mark.slow

SET = """\
title: Qwen3-30B-A3B FP8 on 1x H100 across vLLM versions
description: One box, one model, one SLO, re-measured as vLLM moves.
results: [h100-qwen3-30b-a3b-moe-kernel-tuning, h100-november, h100-december]
"""


def _build(tmp: Path, seed_path: Path, set_text: str, *, mismatch: bool = False):
    results = write_results(
        tmp / "results",
        {f"{k}.json": v for k, v in over_time_data(seed_path, mismatch=mismatch).items()},
    )
    comparisons = tmp / "comparisons"
    comparisons.mkdir()
    (comparisons / "h100-over-time.yaml").write_text(set_text, encoding="utf-8")
    return mkdocs_build(write_config(tmp, results, comparisons_dir=str(comparisons)))


def test_a_comparison_set_gets_its_page_with_charts(tmp_path, seed_path):
    done = _build(tmp_path, seed_path, SET)
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "public" / "comparisons" / "h100-over-time" / "index.html").read_text(
        encoding="utf-8"
    )
    doc = parse(html)
    article = doc.find("article")
    assert "across vLLM versions" in article.find("h1").text()
    assert len([r for r in article.find_all("tr") if r.find_all("td")]) == 9
    for key in ("capacity", "tokens-per-joule", "mbu"):
        assert article.find("figure", id=f"chart-{key}").find("svg") is not None
    assert 'href="../../results/h100-december/"' in html
    index = (tmp_path / "public" / "index.html").read_text(encoding="utf-8")
    assert 'href="comparisons/h100-over-time/"' in index


def test_an_unknown_id_fails_the_build_naming_the_set(tmp_path, seed_path):
    done = _build(tmp_path, seed_path, SET.replace("h100-november", "h100-nope"))
    assert done.returncode != 0
    assert "comparisons/h100-over-time.yaml: results: no result has the id 'h100-nope'" in (
        " ".join(done.stderr.split())
    )


def test_a_mismatch_fails_the_build_unless_the_set_allows_it(tmp_path, seed_path):
    done = _build(tmp_path / "a", seed_path, SET, mismatch=True)
    assert done.returncode != 0
    assert "h100-over-time.yaml: results are not comparable" in done.stderr
    assert "p99 TPOT 60 ms" in done.stderr
    done = _build(tmp_path / "b", seed_path, SET + "allow_mismatch: true\n", mismatch=True)
    assert done.returncode == 0, done.stderr
