"""An N-way report: two candidates and the baseline's repeat, measured on the simulator.

The runs are the demo specs' sweeps against the embedded engine in virtual time (the same engine,
probe protocol and records as a measurement; a few seconds of CPU each): the baseline (70 % of
rated bandwidth), candidates at 85 % and 74 %, and a repeat of the baseline at 70.1 %.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import factories
from tokenwatt import gate, store
from tokenwatt.cli import main
from tokenwatt.errors import ResultError
from tokenwatt.multiplicity import holm_adjusted, step_levels
from tokenwatt.pages.render import make_environment, render_result, result_view
from tokenwatt.report import LoadedRun, build_result
from tokenwatt.schema.result import ResultFile, Verdict

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "specs"


@pytest.fixture(scope="module")
def runs():
    demo, tuned = SPECS / "demo-sim.spec.yaml", SPECS / "demo-sim-tuned.spec.yaml"
    return [
        factories.virtual_run(demo, label="default", role="baseline", quick=False),
        factories.virtual_run(tuned, label="bw-85", role="tuned", quick=False),
        factories.virtual_run(
            demo, label="bw-74", role="tuned", bandwidth_efficiency=0.74, quick=False
        ),
        factories.virtual_run(
            demo, label="default-2", role="other", bandwidth_efficiency=0.701, quick=False
        ),
    ]


def _build(runs, **kw):
    loaded = [LoadedRun(f"runs/{r.label}.json", r) for r in runs]
    return build_result(loaded, title="N-way", report_command="tokenwatt report ...", **kw)


def test_one_verdict_per_candidate_with_holm_named(runs):
    result = _build(runs)
    assert result.verdict is None
    assert result.correction is not None
    assert (result.correction.method, result.correction.family_alpha) == ("holm", 0.05)
    assert result.correction.candidates == 2
    assert result.verdicts is not None
    assert [v.candidate for v in result.verdicts] == ["bw-85", "bw-74"]
    p = [v.p_value for v in result.verdicts]
    assert all(x is not None for x in p)
    assert [v.p_value_adjusted for v in result.verdicts] == pytest.approx(holm_adjusted(p))
    # Each interval at its Holm step's level: the smaller p-value at 97.5 %, the other at 95 %.
    levels = step_levels(p, "holm")
    assert [v.confidence_pct for v in result.verdicts] == pytest.approx(
        [100 * (1 - a) for a in levels]
    )
    assert sorted(v.confidence_pct or 0 for v in result.verdicts) == pytest.approx([95.0, 97.5])
    # Both clearly faster on the simulator: called better after the correction too.
    assert [v.outcome for v in result.verdicts] == ["better", "better"]
    for v in result.verdicts:
        assert v.text.startswith(f"'{v.candidate}' against 'default': ")
        assert "higher SLO capacity" in v.text
        assert f"{v.confidence_pct:.3g}% CI" in v.text
        assert "Holm correction over 2 candidates" in (v.test or "")
        assert (v.p_value_adjusted or 1.0) <= 0.05
        assert v.ci_low_pct is not None
        assert v.ci_low_pct > 0
    assert "2 candidates against 'default' (Holm correction" in result.summary
    assert result.fleet is None  # the fleet block projects one candidate
    # It round-trips and validates as a result file.
    assert ResultFile.model_validate(store.dump_result(result)) == result


def test_bonferroni_tests_every_candidate_at_alpha_over_m(runs):
    result = _build(runs, correction="bonferroni")
    assert result.correction is not None
    assert result.correction.method == "bonferroni"
    assert result.verdicts is not None
    assert [v.confidence_pct for v in result.verdicts] == pytest.approx([97.5, 97.5])
    p = [v.p_value or 0.0 for v in result.verdicts]
    assert [v.p_value_adjusted for v in result.verdicts] == pytest.approx(
        [min(1.0, 2 * x) for x in p]
    )


def test_the_page_names_the_correction_and_ranks_the_configs(runs):
    result = _build(runs)
    view = result_view(result, source="results/n-way.json")
    ranking = view.ranking
    assert [(r.rank, r.label) for r in ranking] == [(1, "bw-85"), (2, "bw-74"), (3, "default")]
    changes = [r.change_pct if r.change_pct is not None else float("nan") for r in ranking]
    assert changes[0] > changes[1] > changes[2] == 0.0
    assert "default-2" not in [r.label for r in ranking]  # the repeat bounds drift, no rank
    assert next(r for r in ranking if r.key == "baseline").change_pct == 0.0
    text = render_result(
        view, env=make_environment(REPO / "templates"), draw=lambda c, p: "<svg></svg>"
    )
    assert "**Verdicts.** 2 candidates" in text
    assert "Holm&#39;s step-down correction" in text
    assert "held at 5 %" in text
    assert "| Rank | Config | SLO capacity | Change vs baseline | Interval | Verdict |" in text
    for row in ranking:
        assert f"| {row.rank} | {row.label}" in text
    assert "| 1 | bw-85 |" in text
    for v in result.verdicts or []:
        assert f"- &#39;{v.candidate}&#39; against &#39;default&#39;: " in text
        assert f"adjusted p = {v.p_value_adjusted:.3f}" in text


def test_candidates_need_their_own_labels(runs):
    twin = runs[2].model_copy(update={"label": "bw-85"})
    with pytest.raises(ResultError, match="more than one run is labelled 'bw-85'"):
        _build([runs[0], runs[1], twin, runs[3]])


def test_one_candidate_keeps_the_single_verdict(runs):
    result = _build([runs[0], runs[1], runs[3]])
    assert result.verdict is not None
    assert result.verdicts is None
    assert result.correction is None
    assert "95% " in result.verdict.text


def _verdict(candidate: str, outcome: str) -> Verdict:
    return Verdict.model_validate({"outcome": outcome, "text": "t", "candidate": candidate})


def test_fail_on_reads_every_candidate_the_most_severe_first():
    both = [_verdict("a", "inconclusive"), _verdict("b", "gate_failed"), _verdict("c", "worse")]
    assert gate.failing_verdict(both, "worse") == (gate.EXIT_WORSE, both[2])
    assert gate.failing_verdict(both[:2], "worse") == (gate.EXIT_GATE_FAILED, both[1])
    assert gate.failing_verdict(both[:1], "worse") == (0, None)
    assert gate.failing_verdict(both[:1], "inconclusive") == (gate.EXIT_INCONCLUSIVE, both[0])
    assert gate.failing_verdict([_verdict("a", "better")], "inconclusive") == (0, None)


def test_report_cli_gates_on_every_candidate(runs, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    paths = []
    for run in runs:
        store.save_run(run, tmp_path / f"runs/{run.label}.json")
        paths.append(f"runs/{run.label}.json")
    code = main(["report", *paths, "--title", "n way", "--fail-on", "inconclusive", "--json"])
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    result = store.load_result(tmp_path / "results" / "n-way.json")
    assert result.verdicts is not None
    expected, failing = gate.failing_verdict(result.verdicts, "inconclusive")
    assert code == summary["exit_code"] == expected
    assert [v["candidate"] for v in summary["verdicts"]] == ["bw-85", "bw-74"]
    assert summary["correction"]["method"] == "holm"
    if failing is not None:
        assert f"the verdict for '{failing.candidate}' is {failing.outcome}" in captured.err
    assert "--correction" not in result.reproduce
