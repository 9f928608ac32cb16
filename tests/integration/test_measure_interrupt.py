"""Ctrl-C (SIGINT to the process group) and SIGTERM in the middle of a probe, and a hard crash.

``tokenwatt run`` must stop within a second or two, exit 130, and leave a run file marked
incomplete that validates and holds the probes finished so far; a killed process leaves no
file at all. Never a half-written file: the folder holds the run file and nothing else.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.measure_cli import (
    children,
    error_lines,
    files_in,
    kill_group,
    load_spec_dict,
    load_valid_run,
    measure_argv,
    signal_when,
    wait_gone,
    write_spec,
)

pytestmark = pytest.mark.slow

# Two explicit rates with 1 s warm-up + 2 s windows: probe 0 finishes after about 3.5 s, then
# probe 1 starts and the signal arrives 1.5 s into it (inside its window).
SPEC = "tests/data/tiny-sim.spec.yaml"
STOP_WITHIN_S = 3.0  # "a second or two", plus room for a busy shared 2-core machine


def _start_and_wait_for_probe_1(repo: Path, out: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        measure_argv(SPEC, out, "--no-accuracy"),
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a terminal's foreground job
    )
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
        if re.search(r"probe 1 \(rates\): ", line):
            return proc, seen
    with proc:
        kill_group(proc)
    pytest.fail(f"probe 1 never started:\n{seen[-3000:]}")


@pytest.mark.parametrize(
    ("signum", "to_group", "cause"),
    [
        (signal.SIGINT, True, "interrupted by the user (Ctrl-C)"),
        (signal.SIGTERM, False, "terminated (SIGTERM)"),
    ],
    ids=["ctrl-c", "sigterm"],
)
def test_signal_mid_probe_writes_an_incomplete_run(repo, tmp_path, signum, to_group, cause):
    out = tmp_path / "a.json"
    proc, seen = _start_and_wait_for_probe_1(repo, out)
    with proc:
        try:
            time.sleep(1.5)  # probe 1 is in its window, requests in flight
            kids = children(proc.pid)  # the simulator and the load worker
            assert len(kids) >= 2, kids
            assert not out.exists()
            start = time.monotonic()
            if to_group:
                os.killpg(proc.pid, signum)  # what Ctrl-C in a terminal does
            else:
                os.kill(proc.pid, signum)  # what kill or a service manager does
            proc.wait(timeout=30)
            elapsed = time.monotonic() - start
        finally:
            kill_group(proc)
        assert proc.stderr is not None
        stderr = seen + proc.stderr.read()
    assert proc.returncode == 130, stderr[-3000:]
    assert elapsed < STOP_WITHIN_S, f"took {elapsed:.2f} s to stop"
    errors = error_lines(stderr)
    assert len(errors) == 1, errors
    assert errors[0].startswith("Interrupted: ")
    assert cause in errors[0]
    assert "1 probe(s) and 0 accuracy answer(s) measured" in errors[0]
    assert "Traceback" not in stderr
    assert wait_gone(kids, 2.0) == []  # no simulator or worker left behind
    assert files_in(tmp_path) == ["a.json"]  # no temporary file

    run = load_valid_run(out, cwd=repo)
    assert run.complete is False
    assert run.incomplete_reason == cause
    assert [(p.index, p.phase, p.rate_rps) for p in run.probes] == [(0, "rates", 2.0)]
    finished = run.probes[0]
    assert finished.window_requests > 0
    assert finished.requests is not None
    assert finished.failed == 0
    assert run.outcome is not None
    assert run.outcome.confirmed_rate_rps is None  # never confirmed: the run was cut short
    assert run.outcome.probe_seconds >= finished.warmup_s + finished.window_s
    assert run.power is not None
    assert run.power.samples  # what was sampled before the signal is kept


def test_killed_process_leaves_no_file(repo, tmp_path):
    """SIGKILL (a crash, the OOM killer) gives no chance to write: nothing, not half a file."""
    out = tmp_path / "a.json"
    proc, _ = _start_and_wait_for_probe_1(repo, out)
    with proc:
        try:
            time.sleep(1.0)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            kill_group(proc)
    assert proc.returncode == -signal.SIGKILL
    assert files_in(tmp_path) == []


@pytest.mark.parametrize(
    ("signum", "to_group", "cause"),
    [
        (signal.SIGINT, True, "interrupted by the user (Ctrl-C)"),
        (signal.SIGTERM, False, "terminated (SIGTERM)"),
    ],
    ids=["ctrl-c", "sigterm"],
)
def test_signal_during_the_accuracy_check_keeps_the_answers(
    repo, tmp_path, signum, to_group, cause
):
    """12 questions one at a time (about 0.8 s each on the simulator): cut after the second."""
    spec = load_spec_dict(repo / SPEC)
    spec["model"]["config"] = str(repo / "specs/models/Qwen__Qwen3-8B/config.json")
    spec["accuracy"].update(
        suite=str(repo / "specs/suites/gsm8k-200.jsonl"), limit=12, concurrency=1, max_tokens=384
    )
    spec_path = write_spec(tmp_path / "acc.spec.yaml", spec)
    out = tmp_path / "runs" / "a.json"
    returncode, stderr = signal_when(
        measure_argv(spec_path, out),
        cwd=repo,
        pattern=r"accuracy: [2-9]/12 answers",
        signum=signum,
        to_group=to_group,
    )
    assert returncode == 130, stderr[-3000:]
    errors = error_lines(stderr)
    assert len(errors) == 1, errors
    assert cause in errors[0]
    assert "nothing was written" not in errors[0]
    assert f"{out} written, marked incomplete" in errors[0]
    assert files_in(out.parent) == ["a.json"]
    run = load_valid_run(out, cwd=repo)
    assert run.complete is False
    assert run.probes == []
    assert run.accuracy is not None
    answered = len(run.accuracy.items)
    assert 2 <= answered < 12
    assert f"0 probe(s) and {answered} accuracy answer(s)" in errors[0]
    assert run.accuracy.limit == 12
    assert run.accuracy.per_seed[0].answered + run.accuracy.per_seed[0].failed == answered
