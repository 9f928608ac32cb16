"""``tokenwatt run --resume``: a run on the simulator cut by Ctrl-C after three probes, resumed.

The resumed run must measure only the probes the interrupted one had not, and end with the
probes (rates, streams, phases, decisions) of a run made without the interruption.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.measure_cli import (
    error_lines,
    files_in,
    load_spec_dict,
    load_valid_run,
    measure_argv,
    run_measure,
    signal_when,
    write_spec,
)
from tokenwatt.schema.run import RunFile

pytestmark = pytest.mark.slow

RATES = [1.0, 1.5, 2.0, 2.5, 3.0]  # all far below the simulator's capacity: every probe passes


def _spec(repo: Path, tmp_path: Path) -> Path:
    spec = load_spec_dict(repo / "tests/data/tiny-sim.spec.yaml")
    spec["model"]["config"] = str(repo / "specs/models/Qwen__Qwen3-8B/config.json")
    del spec["accuracy"]
    spec["sweep"] = {"rates": RATES}
    return write_spec(tmp_path / "resume.spec.yaml", spec)


def _interrupt_at_probe_3(repo: Path, spec: Path, out: Path) -> str:
    """Start a run, Ctrl-C it as probe 3 starts (three probes finished); return its stderr."""
    returncode, seen = signal_when(
        measure_argv(spec, out, "--no-accuracy"), cwd=repo, pattern=r"probe 3 \(rates\): "
    )
    assert returncode == 130, seen[-3000:]
    return seen


def _decisions(run: RunFile) -> list[tuple[object, ...]]:
    return [
        (p.index, p.phase, p.rate_rps, p.attempt, p.repeat, p.warmup_s, p.window_s, p.slo_pass)
        for p in run.probes
    ]


def test_a_run_cut_after_three_probes_resumes_to_the_uninterrupted_probes(repo, tmp_path):
    spec = _spec(repo, tmp_path)
    whole = tmp_path / "whole.json"
    done = run_measure(measure_argv(spec, whole, "--no-accuracy"), cwd=repo)
    assert done.returncode == 0, done.stderr[-3000:]
    reference = load_valid_run(whole, cwd=repo)

    out = tmp_path / "runs" / "cut.json"
    _interrupt_at_probe_3(repo, spec, out)
    cut = load_valid_run(out, cwd=repo)
    assert cut.complete is False
    assert len(cut.probes) == 3
    assert all(p.probe_s is not None and p.probe_s > 0 for p in cut.probes)

    # Another label: refused at pre-flight (exit 2, the difference named), the file untouched.
    before = out.read_bytes()
    refused = run_measure(
        measure_argv(spec, out, "--no-accuracy", "--resume", str(out), label="b"), cwd=repo
    )
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert error_lines(refused.stderr) == [
        f"RunFileError: {out}: cannot resume: --label is 'a' in the run, 'b' now"
    ]
    assert out.read_bytes() == before

    resumed_cmd = measure_argv(spec, out, "--no-accuracy", "--resume", str(out))
    resumed = run_measure(resumed_cmd, cwd=repo)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    saved_s = sum(p.probe_s or 0.0 for p in cut.probes)
    assert f"3 recorded probe(s) reused, {saved_s:,.0f} probe-seconds saved" in resumed.stdout
    # Only probes 3, 4 (rates) and 5 (confirm) were measured by the resumed process.
    started = re.findall(r"probe (\d+) \((\w+)\): ", resumed.stderr)
    assert started == [("3", "rates"), ("4", "rates"), ("5", "confirm")]
    assert files_in(out.parent) == ["cut.json"]

    final = load_valid_run(out, cwd=repo)
    assert final.complete is True
    assert _decisions(final) == _decisions(reference)
    assert [p.rate_rps for p in final.probes] == [*RATES, 3.0]
    assert final.probes[:3] == cut.probes  # the recorded probes kept as they were
    assert final.outcome is not None
    assert reference.outcome is not None
    assert final.outcome.confirmed_rate_rps == reference.outcome.confirmed_rate_rps == 3.0
    assert final.outcome.confirm_probes == reference.outcome.confirm_probes == [5]
    assert final.outcome.probe_seconds == pytest.approx(sum(p.probe_s or 0.0 for p in final.probes))
    assert [(r.reused_probes, r.reused_accuracy) for r in final.resumed] == [(3, False)]
    assert final.resumed[0].saved_probe_seconds == pytest.approx(saved_s)
    assert final.resumed[0].interrupted_reason == "interrupted by the user (Ctrl-C)"
    assert final.environment.started_utc == cut.environment.started_utc
    assert final.power is not None
    assert final.power.node_power_kw is not None  # the confirm window, sampled after resuming
    assert any("resumption" in g.cause for g in final.power.gaps)

    # Resuming again: the run is complete now, and nothing is measured or written.
    again = run_measure(resumed_cmd, cwd=repo)
    assert again.returncode == 2
    errors = error_lines(again.stderr)
    assert len(errors) == 1, again.stderr[-3000:]
    assert errors[0].endswith("the run is complete; there is nothing left to measure")
