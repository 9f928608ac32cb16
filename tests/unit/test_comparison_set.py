"""``tokenwatt compare``: results of one scenario side by side, mismatches named or marked."""

from __future__ import annotations

import copy
import json

import pytest

from tests import factories
from tests.result_factories import capacity_mode_data, over_time_data
from tokenwatt import store
from tokenwatt.cli import main
from tokenwatt.comparison_set import ComparisonSet, LoadedResult, build_comparison_set
from tokenwatt.errors import ResultError
from tokenwatt.schema.result import ResultFile


@pytest.fixture
def three(tmp_path, seed_path):
    """The seed, November and December (a looser TPOT bound: the one mismatch)."""
    paths = {}
    for name, data in over_time_data(seed_path).items():
        path = tmp_path / f"{name}.json"
        store.save_result(ResultFile.model_validate(data), path)
        paths[name] = path
    return paths


def _loaded(paths, *names):
    return [LoadedResult(str(paths[n]), store.load_result(paths[n])) for n in names]


def test_a_mismatch_is_refused_naming_the_file_and_the_difference(three, capsys):
    args = ["compare", str(three["november"]), str(three["seed"]), str(three["december"])]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = " ".join(captured.err.split())
    assert "not comparable" in err
    assert "--allow-mismatch" in err
    assert f"SLO: {three['november']} has p99 TTFT 2000 ms, p99 TPOT 50 ms" in err
    assert f"{three['december']} has p99 TTFT 2000 ms, p99 TPOT 60 ms" in err
    assert str(three["seed"]) not in err  # the seed matches the reference


def test_allow_mismatch_accepts_and_marks_the_mismatching_rows(three):
    comparison = build_comparison_set(
        _loaded(three, "november", "seed", "december"), allow_mismatch=True
    )
    assert [r.result_id for r in comparison.results] == [
        "h100-qwen3-30b-a3b-moe-kernel-tuning",
        "h100-november",
        "h100-december",
    ]
    assert comparison.reference == str(three["november"])
    assert len(comparison.mismatches) == 1
    for row in comparison.rows:
        assert row.mismatched == (["SLO"] if row.result_id == "h100-december" else [])
    assert [r.mismatches != [] for r in comparison.results] == [False, False, True]


def test_rows_are_by_date_and_hold_the_results_own_figures(three):
    loaded = _loaded(three, "november", "seed", "december")
    comparison = build_comparison_set(loaded, allow_mismatch=True)
    by_id = {x.result.id: x.result for x in loaded}
    dates = [row.date.isoformat() if row.date else "" for row in comparison.rows]
    assert dates == sorted(dates)
    assert "" not in dates
    assert len(comparison.rows) == 9  # three configs each
    for row in comparison.rows:
        result = by_id[row.result_id]
        config = next(c for c in result.configs if c.label == row.label)
        assert row.date == result.published
        assert row.engine == config.engine
        assert row.slo_capacity_rps == config.slo_capacity_rps
        assert row.slo_capacity_ci_rps == config.slo_capacity_ci_rps
        assert row.goodput_tok_s == config.goodput_tok_s
        assert row.tokens_per_joule == config.tokens_per_joule
        assert row.mbu_pct == config.mbu_pct
        want = result.verdict.outcome if config.key == "tuned" and result.verdict else None
        assert row.verdict == want
    seed_rows = [r for r in comparison.rows if r.result_id.startswith("h100-qwen3")]
    assert all(r.slo_capacity_rps is None for r in seed_rows)
    december = [r for r in comparison.rows if r.result_id == "h100-december"]
    assert [r.slo_capacity_rps for r in december] == [17.6, 19.9, 17.5]
    assert december[1].slo_capacity_ci_rps == [19.2, 20.5]
    assert december[1].verdict == "better"


def test_the_table_shows_the_figures_with_units_and_marks(three, capsys):
    args = [str(three["seed"]), str(three["november"]), str(three["december"])]
    assert main(["compare", *args, "--allow-mismatch"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    for header in ("req/s", "tok/s", "tokens/J", "MBU, %", "verdict", "differs from"):
        assert header in out
    assert "19.90 (19.20\u201320.50)" in out  # December's candidate: capacity and its CI
    assert "4,515.0" in out  # the seed's baseline goodput
    assert "\u2260 SLO" in out
    assert "vLLM 0.33.0" in out
    assert out.index("2026-10-08") < out.index("2026-11-02") < out.index("2026-12-01")
    assert "mismatch accepted" in captured.err


def test_json_is_one_object_that_round_trips(three, capsys):
    args = [str(three["november"]), str(three["seed"]), str(three["december"])]
    assert main(["compare", *args, "--allow-mismatch", "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    parsed = ComparisonSet.model_validate_json(out)
    assert parsed == build_comparison_set(
        _loaded(three, "november", "seed", "december"), allow_mismatch=True
    )
    assert json.loads(out)["rows"][0]["goodput_tok_s"] == 4515.0


def test_comparable_results_need_no_flag(three, capsys):
    assert main(["compare", str(three["seed"]), str(three["november"])]) == 0
    out = capsys.readouterr().out
    assert "differs from" not in out


def test_an_n_way_result_gives_each_candidate_its_own_verdict(seed_path, tmp_path):
    data = capacity_mode_data(seed_path)
    second = copy.deepcopy(next(c for c in data["configs"] if c["key"] == "tuned"))
    second["label"] = "tuned kernels v2"
    data["configs"].insert(2, second)
    base = {"text": "x", "basis": "slo_capacity"}
    data["verdict"] = None
    data["verdicts"] = [
        {**base, "outcome": "better", "candidate": "tuned kernels"},
        {**base, "outcome": "inconclusive", "candidate": "tuned kernels v2"},
    ]
    data["correction"] = {"method": "holm", "family_alpha": 0.05, "candidates": 2}
    result = ResultFile.model_validate(data)
    comparison = build_comparison_set([LoadedResult("n.json", result)])
    assert [r.verdict for r in comparison.rows] == [None, "better", "inconclusive", None]


# -- bad inputs ---------------------------------------------------------------------------------


def test_a_run_file_is_refused_in_one_line(tmp_path, three, capsys):
    run = tmp_path / "run.json"
    store.save_run(factories.seed_runs()[0], run)
    assert main(["compare", str(three["seed"]), str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert f"{run}: is a run file, not a result" in " ".join(err.split())


def test_a_spec_is_refused_in_one_line(repo, three, capsys):
    spec = repo / "tests" / "data" / "tiny-sim.spec.yaml"
    assert main(["compare", str(three["seed"]), str(spec)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{spec}: is a spec file, not a result" in err


def test_a_missing_file_is_named(tmp_path, three, capsys):
    missing = tmp_path / "nope.json"
    assert main(["compare", str(three["seed"]), str(missing)]) == 2
    err = capsys.readouterr().err.strip()
    assert str(missing) in " ".join(err.split())
    assert err.count("\n") == 0


def test_a_result_given_twice_is_refused(three, capsys):
    assert main(["compare", str(three["seed"]), str(three["seed"])]) == 2
    assert "each result may be given once" in " ".join(capsys.readouterr().err.split())


def test_no_results_is_refused():
    with pytest.raises(ResultError, match="no result files"):
        build_comparison_set([])
