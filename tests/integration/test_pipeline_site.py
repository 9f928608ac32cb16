"""A result made by the project's own pipeline (measure twice, report; not quick mode),
rendered by the real site build: every figure on the page traces back to the run files."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.html_dom import parse
from tests.measure_cli import measure_argv, run_measure
from tests.site_build import build_site
from tokenwatt import store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, repo):
    tmp = tmp_path_factory.mktemp("pipeline")
    spec = repo / "tests" / "data" / "tiny-sim.spec.yaml"
    runs = []
    for label, role in (("tiny-a", "baseline"), ("tiny-b", "tuned")):
        out = tmp / f"{label}.json"
        done = run_measure(measure_argv(spec, out, label=label, role=role), cwd=repo, timeout_s=300)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(out)
    result_path = tmp / "result.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tokenwatt",
            "report",
            *map(str, runs),
            "--title",
            "Pipeline <b>made</b> result",
            "--id",
            "pipeline",
            "--out",
            str(result_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = store.load_result(result_path)
    site = build_site(tmp / "site", {"pipeline.json": store.dump_result(result)})
    html = parse((site / "results" / "pipeline" / "index.html").read_text(encoding="utf-8"))
    return [store.load_run(r) for r in runs], result, html.find("article")


def test_pipeline_result_is_not_quick_but_simulated(pipeline):
    runs, result, _ = pipeline
    assert not any(r.quick for r in runs)
    assert all(r.simulated and r.complete for r in runs)
    assert result.simulated is True
    assert all(c.measurement is not None and not c.measurement.quick for c in result.configs)


def test_page_draws_every_chart_from_the_runs(pipeline):
    _, result, doc = pipeline
    figures = [f.attrs["id"] for f in doc.find_all("figure", cls="tw-chart")]
    assert figures == [
        "chart-goodput",
        "chart-ttft",
        "chart-tpot",
        "chart-engine",
        "chart-power",
        "chart-tokens-per-joule",
    ]
    for figure in doc.find_all("figure", cls="tw-chart"):
        svg = figure.find("svg")
        assert svg.find_all("path") or svg.find_all("rect") or svg.find_all("circle")
    assert all(c.probes and c.power_trace and c.power_trace.points for c in result.configs)


def test_page_figures_trace_back_to_the_run_files(pipeline):
    runs, result, doc = pipeline
    text = doc.words()
    for run, config in zip(runs, result.configs, strict=True):
        assert run.outcome is not None
        assert config.goodput_tok_s == round(run.outcome.goodput_tok_s, 1)
        assert f"{config.goodput_tok_s:,.1f} tok/s" in text
        assert config.confirmed_rate_rps == run.outcome.confirmed_rate_rps
        assert run.power is not None
        assert config.node_power_kw == round(run.power.node_power_kw, 3)
        assert config.mbu_pct is not None
        assert run.mbu is not None
        assert config.mbu_pct == round(run.mbu.mbu_pct, 1)
        # DESIGN.md: the estimate's assumptions are stated on the page
        assert config.mbu_assumptions == run.mbu.assumptions
        assert any(a.startswith("Rated bandwidth: ") for a in run.mbu.assumptions)
        for assumption in run.mbu.assumptions:
            assert " ".join(assumption.split()) in text
    assert "Pipeline <b>made</b> result" in text  # markup shows as text
    assert "Simulated" in text
    assert result.verdict is not None
    assert result.verdict.text in text
    for line in result.reproduce.splitlines():
        if line:
            assert line in doc.text()
