"""``tokenwatt demo`` end to end with short settings: three runs, a report, the site."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import anyio
import yaml

from tokenwatt import policy, store
from tokenwatt.cli import main
from tokenwatt.demo import DemoPaths, DemoRun, build_site, run_demo

TINY: dict[str, Any] = {
    "hardware": {"adapter": "none", "host": "test"},
    "engine": {
        "endpoint": "sim",
        "name": "tokenwatt-sim",
        "model": "Qwen/Qwen3-8B",
        "sim": {"gpu": "l40s"},
    },
    "model": {
        "name": "Qwen3-8B",
        "config": "models/Qwen__Qwen3-8B/config.json",
        "weight_dtype": "bf16",
        "kv_dtype": "bf16",
        "vocab_size": 151936,
    },
    "slo": {"ttft_p99_ms": 1000.0, "tpot_p99_ms": 36.0},
    "workload": {"input_tokens": 64, "output_tokens": 16, "seed": 0},
    "measurement": {
        "warmup_s": 1,
        "window_s": 2,
        "search_window_s": 2,
        "repeats": 1,
        "request_timeout_s": 30,
        "max_concurrency": 256,
    },
    "sweep": {"rates": [3]},
    "accuracy": {"suite": "suites/gsm8k-200.jsonl", "limit": 2, "max_tokens": 16},
    "power": {"source": "prometheus", "sampling_hz": 4},
}


class Quiet:
    def __init__(self):
        self.phases: list[str] = []

    def phase(self, name, detail=""):
        self.phases.append(name)

    def accuracy(self, done, total):
        pass

    def probe_started(self, plan, index, workers):
        pass

    def probe_finished(self, record):
        pass


def make_checkout(repo: Path, root: Path) -> None:
    for name in ("mkdocs.yml", "site", "templates"):
        src = repo / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    (root / "results").mkdir()
    shutil.copytree(repo / "specs" / "models", root / "specs" / "models")
    shutil.copytree(repo / "specs" / "suites", root / "specs" / "suites")
    base = {"name": "tiny-demo", **TINY}
    tuned = {
        **base,
        "name": "tiny-demo-tuned",
        "engine": {**TINY["engine"], "sim": {"gpu": "l40s", "bandwidth_efficiency": 0.9}},
    }
    for name, data in (("tiny-demo", base), ("tiny-demo-tuned", tuned)):
        (root / "specs" / f"{name}.spec.yaml").write_text(yaml.safe_dump(data))


def test_demo_end_to_end_short(tmp_path, repo):
    make_checkout(repo, tmp_path)
    runs = (
        DemoRun("specs/tiny-demo.spec.yaml", "d-default", "baseline", "default kernels"),
        DemoRun("specs/tiny-demo-tuned.spec.yaml", "d-tuned", "tuned", "tuned kernels"),
        DemoRun("specs/tiny-demo.spec.yaml", "d-default-2", "other", "default kernels (repeat)"),
    )
    paths = DemoPaths(root=tmp_path, result_id="tiny-demo")
    progress = Quiet()
    result, target = anyio.run(lambda: run_demo(paths, progress, runs=runs))
    assert target == tmp_path / "results" / "tiny-demo.json"
    assert store.load_result(target) == result
    for run in runs:
        assert store.load_run(tmp_path / "runs" / "demo" / f"{run.label}.json").quick
    assert [c.key for c in result.configs] == ["baseline", "tuned", "other"]
    assert result.simulated is True
    assert result.status == "draft"
    assert {v.rule for v in policy.check_result(result)} >= {"quick", "simulated"}
    assert result.verdict is not None
    lines = result.reproduce.splitlines()
    assert lines[0] == (
        "tokenwatt run --spec specs/tiny-demo.spec.yaml --label 'd-default' --role baseline"
        " --out runs/demo/d-default.json --description 'default kernels' --quick"
    )
    assert lines[-1].startswith("tokenwatt report runs/demo/d-default.json")
    assert progress.phases.count("sweep") == 3
    index = build_site(paths)
    page = tmp_path / "public" / "results" / "tiny-demo" / "index.html"
    assert index.is_file()
    html = page.read_text(encoding="utf-8")
    assert "Quick mode" in html
    assert "Simulated" in html


def test_demo_outside_a_checkout_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["demo"]) == 2
    err = capsys.readouterr().err
    assert "not a tokenwatt checkout" in err
    assert "run 'tokenwatt demo' from the repository root" in " ".join(err.split())
    assert list(tmp_path.iterdir()) == []


def test_the_demo_compares_two_runs_and_repeats_the_baseline_on_request():
    from tokenwatt.demo import DEMO_REPEAT, DEMO_RUNS, demo_runs

    assert [r.role for r in demo_runs(repeat=False)] == ["baseline", "tuned"]
    assert demo_runs(repeat=False) == DEMO_RUNS
    repeated = demo_runs(repeat=True)
    assert [r.role for r in repeated] == ["baseline", "tuned", "other"]
    assert repeated[-1] == DEMO_REPEAT
    # The repeat is the baseline's own spec: the same configuration, measured again.
    assert DEMO_REPEAT.spec == DEMO_RUNS[0].spec
    assert DEMO_REPEAT.label != DEMO_RUNS[0].label
