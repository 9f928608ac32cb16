"""``tokenwatt report`` end to end on run files: the result file, its reproduce block, refusals."""

from __future__ import annotations

import json

import pytest

from tests import factories
from tokenwatt import store
from tokenwatt.cli import main

TITLE = "Tuned vs default fused-MoE kernels: Qwen3-30B-A3B FP8 on 1\u00d7 H100 SXM"


def write_runs(tmp_path, runs):
    paths = []
    (tmp_path / "runs").mkdir()
    for run in runs:
        rel = f"runs/{run.label}.json"
        store.save_run(run, tmp_path / rel)
        paths.append(rel)
    return paths


def test_report_writes_a_result_with_the_exact_reproduce_lines(
    tmp_path, monkeypatch, capsys, seed_path
):
    monkeypatch.chdir(tmp_path)
    paths = write_runs(tmp_path, factories.seed_runs())
    assert main(["report", *paths, "--title", TITLE]) == 0
    out = capsys.readouterr().out
    target = (
        tmp_path
        / "results"
        / "tuned-vs-default-fused-moe-kernels-qwen3-30b-a3b-fp8-on-1-h100-sxm.json"
    )
    assert target.is_file()
    assert "status: draft" in out
    result = store.load_result(target)
    assert result.reproduce == (
        "tokenwatt run --spec lambda-qwen3-30b-a3b-fp8-tp1-dp1.spec.yaml --label 'moe-default' --role baseline --out runs/moe-default.json\n"
        "tokenwatt run --spec lambda-qwen3-30b-a3b-fp8-tp1-dp1.spec.yaml --label 'moe-tuned' --role tuned --out runs/moe-tuned.json\n"
        "tokenwatt run --spec lambda-qwen3-30b-a3b-fp8-tp1-dp1.spec.yaml --label 'moe-default-2' --role other --out runs/moe-default-2.json\n"
        "\n"
        "tokenwatt report runs/moe-default.json runs/moe-tuned.json runs/moe-default-2.json --title 'Tuned vs default fused-MoE kernels: Qwen3-30B-A3B FP8 on 1\u00d7 H100 SXM'"
    )
    # the seed's reproduce block has exactly this form
    assert result.reproduce == store.load_result(seed_path).reproduce
    # a second report does not overwrite silently
    assert main(["report", *paths, "--title", TITLE]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["report", *paths, "--title", TITLE, "--force"]) == 0


def test_mismatched_runs_exit_2_and_write_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    runs = factories.seed_runs()
    spec = runs[1].spec.model_copy(
        update={"workload": runs[1].spec.workload.model_copy(update={"seed": 7})}
    )
    runs[1] = runs[1].model_copy(update={"spec": spec})
    paths = write_runs(tmp_path, runs)
    assert main(["report", *paths, "--title", "x"]) == 2
    err = capsys.readouterr().err
    assert "workload" in err
    assert not (tmp_path / "results").exists()
    assert main(["report", *paths, "--title", "x", "--allow-mismatch"]) == 0
    result = store.load_result(tmp_path / "results" / "x.json")
    assert result.mismatches
    assert "--allow-mismatch" in result.reproduce


def test_a_missing_run_file_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["report", "runs/nope.json", "--title", "x"]) == 2
    assert "runs/nope.json: file not found" in capsys.readouterr().err


# -- the CI gate: --fail-on and --json ----------------------------------------------------------


def scaled_tuned(factor):
    """The seed's runs with the tuned run's output tokens (so its goodput) scaled by ``factor``."""
    runs = factories.seed_runs()
    probes = [
        p.model_copy(
            update={
                "output_tokens": round(p.output_tokens * factor),
                "goodput_tok_s": round(p.output_tokens * factor) / p.window_s,
            }
        )
        for p in runs[1].probes
    ]
    runs[1] = factories.recomputed(runs[1].model_copy(update={"probes": probes}))
    return runs


def inconclusive_runs():
    """A baseline and a candidate of one passing probe each: no capacity comparison possible."""
    runs = []
    for role, tpot_ms in (("baseline", 30.0), ("tuned", 31.0)):
        table = factories.request_table([tpot_ms] * 200)
        probe = factories.probe_with_requests(0, 20.0, table, phase="confirm", repeat=0)
        base = factories.run().outcome
        assert base is not None
        outcome = base.model_copy(
            update={
                "confirmed_rate_rps": 20.0,
                "goodput_tok_s": probe.goodput_tok_s,
                "repeat_goodputs_tok_s": [probe.goodput_tok_s],
            }
        )
        runs.append(factories.run(label=role, role=role, probes=[probe], outcome=outcome))
    return runs


@pytest.mark.parametrize(
    ("runs", "fail_on", "outcome", "code"),
    [
        (lambda: scaled_tuned(1.1), "worse", "better", 0),
        (lambda: scaled_tuned(1.1), "inconclusive", "better", 0),
        (lambda: scaled_tuned(0.9), "worse", "worse", 3),
        (lambda: scaled_tuned(0.9), "inconclusive", "worse", 3),
        (inconclusive_runs, "worse", "inconclusive", 0),
        (inconclusive_runs, "inconclusive", "inconclusive", 4),
        (factories.seed_runs, "inconclusive", "no_difference", 0),
        (lambda: scaled_tuned(0.9), None, "worse", 0),
    ],
    ids=[
        "better-worse",
        "better-inconclusive",
        "worse-worse",
        "worse-inconclusive",
        "inconclusive-worse",
        "inconclusive-inconclusive",
        "no-difference",
        "worse-without-gate",
    ],
)
def test_fail_on_exit_status_follows_the_verdict(
    tmp_path, monkeypatch, capsys, runs, fail_on, outcome, code
):
    monkeypatch.chdir(tmp_path)
    paths = write_runs(tmp_path, runs())
    gate_args = ["--fail-on", fail_on] if fail_on else []
    assert main(["report", *paths, "--title", "gate", *gate_args]) == code
    captured = capsys.readouterr()
    # The result is written whatever the gate says: CI keeps it as the evidence.
    result = store.load_result(tmp_path / "results" / "gate.json")
    assert result.verdict is not None
    assert result.verdict.outcome == outcome
    if code:
        assert f"the verdict is {outcome} (exit {code})" in captured.err
    else:
        assert "exit" not in captured.err
    # The gate does not enter the reproduce block: it changes no figure.
    assert "--fail-on" not in result.reproduce


def test_accuracy_gate_failure_has_its_own_exit_status(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = scaled_tuned(1.1)
    acc = runs[1].accuracy
    assert acc is not None
    seed = acc.per_seed[0].model_copy(update={"score": 94.0, "correct": 47})
    runs[1] = runs[1].model_copy(
        update={"accuracy": acc.model_copy(update={"score": 94.0, "per_seed": [seed]})}
    )
    paths = write_runs(tmp_path, runs)
    assert main(["report", *paths, "--title", "gate", "--fail-on", "worse"]) == 5
    verdict = store.load_result(tmp_path / "results" / "gate.json").verdict
    assert verdict is not None
    assert verdict.outcome == "gate_failed"


def test_json_prints_one_object_with_the_verdict_and_figures(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    paths = write_runs(tmp_path, scaled_tuned(0.9))
    code = main(["report", *paths, "--title", "gate", "--json", "--fail-on", "worse"])
    captured = capsys.readouterr()
    summary = json.loads(captured.out)  # stdout holds the object and nothing else
    assert code == summary["exit_code"] == 3
    assert summary["fail_on"] == "worse"
    assert summary["verdict"]["outcome"] == "worse"
    # tuned 4,522.8 tok/s x 0.9 (output tokens rounded) against the baseline's 4,515.0
    assert summary["verdict"]["change_pct"] == pytest.approx(
        (4522.8 * 0.9 / 4515.0 - 1) * 100, abs=1e-3
    )
    assert summary["result_file"] == "results/gate.json"
    assert summary["publishable"] is False  # quick mode
    assert summary["policy_violations"]
    assert [c["key"] for c in summary["configs"]] == ["baseline", "tuned", "other"]
    tuned = summary["configs"][1]
    assert tuned["label"] == "tuned kernels"
    assert tuned["goodput_tok_s"] == pytest.approx(4522.8 * 0.9, rel=1e-3)
    assert tuned["node_power_kw"] == pytest.approx(0.641)
    assert tuned["accuracy_delta_pts"] == 0.0
    assert "wrote results/gate.json" in captured.err


def test_fail_on_without_a_candidate_is_refused_before_writing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    paths = write_runs(tmp_path, factories.seed_runs()[:1])
    assert main(["report", *paths, "--title", "gate", "--fail-on", "worse"]) == 2
    assert "no run has role 'tuned'" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()
