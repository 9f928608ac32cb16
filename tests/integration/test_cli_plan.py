"""``tokenwatt plan --json`` end to end: virtual sweeps of a spec, and what it says of its warm-up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.measure_cli import error_lines, load_spec_dict, write_spec


def _plan(repo: Path, spec: Path) -> dict[str, object]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tokenwatt",
            "plan",
            str(spec),
            "--trials",
            "2",
            "--no-truth",
            "--json",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert isinstance(summary, dict)
    return summary


def test_plan_reports_a_warmup_too_short_for_long_answers(repo, tmp_path):
    data = load_spec_dict(repo / "tests/data/tiny-sim.spec.yaml")
    data["model"]["config"] = str(repo / "specs/models/Qwen__Qwen3-8B/config.json")
    data.pop("accuracy")
    short = _plan(repo, write_spec(tmp_path / "short.spec.yaml", data))
    assert short["trials"] == 2
    assert short["strategy"] == "rates"
    assert short["probes"] == 3  # two rates and the confirmation
    assert short["shortfall_pct"] == 0.0  # 16-token answers are done within the warm-up
    data["workload"]["output_tokens"] = 1500  # about 15 s each on the simulated H100
    long = _plan(repo, write_spec(tmp_path / "long.spec.yaml", data))
    assert isinstance(long["shortfall_pct"], float)
    assert isinstance(long["steady_warmup_s"], float)
    assert long["shortfall_pct"] > 80.0  # 1 s of warm-up for answers that take ~15 s
    assert long["steady_warmup_s"] > 10.0


def test_plan_says_what_a_paired_comparison_resolves(repo):
    # The demo's quick sweeps: each trial against a candidate with 5 % more bandwidth efficiency
    # on the same workload seed (the stream pairs held fixed) resolves a smaller change than two
    # runs with other seeds do.
    done = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "plan", "specs/demo-sim.spec.yaml", "--trials", "4",
         "--quick", "--no-truth", "--json"],
        cwd=repo, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert isinstance(summary["mde_pct"], float)
    assert isinstance(summary["paired_mde_pct"], float)
    assert 0 < summary["paired_mde_pct"] < summary["mde_pct"]


def test_a_truth_of_no_seeds_is_refused_before_any_sweep(repo):
    done = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "plan", "specs/demo-sim.spec.yaml", "--truth-seeds",
         "0", "--json"],
        cwd=repo, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert error_lines(done.stderr) == ["InputError: --truth-seeds must be at least 1"]
    assert done.stdout == ""
