"""``tokenwatt report`` end to end on run files: the result file, its reproduce block, refusals."""

from __future__ import annotations

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
