"""``tokenwatt run --quick`` against real vLLM (CPU build), and its pre-flight refusals.

vLLM serves the tiny random-weight model on the same two cores as the load generator, so a
probe can be client-bound (the harness, not the server, was the limit). The run must say so
rather than hide it: such a probe never passes, and a run with no passing rate has no confirmed
rate. About 30 s once the server is up (the fixture starts it once per session).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.measure_cli import (
    error_lines,
    files_in,
    load_spec_dict,
    load_valid_run,
    measure_argv,
    run_measure,
    write_spec,
)

pytestmark = [pytest.mark.peer, pytest.mark.slow]

SPEC = Path("tests/data/vllm-tiny.spec.yaml")


def _spec(repo: Path, tmp_path: Path, vllm_server, **engine: object) -> Path:
    data = load_spec_dict(repo / SPEC)
    data["engine"].update(endpoint=f"{vllm_server.base_url}/v1", **engine)
    data["accuracy"]["suite"] = str((repo / SPEC).parent / data["accuracy"]["suite"])
    return write_spec(tmp_path / "spec.yaml", data)


def test_quick_run_end_to_end(repo, tmp_path, vllm_server):
    spec = _spec(repo, tmp_path, vllm_server)
    out = tmp_path / "runs" / "vllm.json"
    done = run_measure(measure_argv(spec, out, "--quick"), cwd=repo)
    assert done.returncode == 0, done.stderr[-3000:]
    assert files_in(out.parent) == ["vllm.json"]
    run = load_valid_run(out, cwd=repo)
    assert run.quick is True
    assert run.simulated is False
    assert run.complete is True
    env = run.environment
    assert env.engine_version is not None
    assert env.engine_version.startswith("0.32")  # vLLM's own GET /version
    assert env.engine_version_source == "GET /version"

    explicit = [p for p in run.probes if p.phase == "rates"]
    assert [p.rate_rps for p in explicit] == [1.0, 2.0]
    for probe in run.probes:
        if probe.window_requests == 0:
            # A client-bound probe is re-run with more workers on a fresh stream of requests,
            # whose few-second window at 1-2 req/s may hold no arrival: such a probe measured
            # nothing, and never passes. A first run's stream (its index) always has some.
            assert probe.workers > 1
            assert not probe.slo_pass
            continue
        assert probe.failed == 0, probe.failure_examples
        assert probe.output_tokens == 16 * probe.ok  # ignore_eos honoured, usage counted
        assert probe.approximate_output_tokens == 0
        # DESIGN.md: B from the engine's own /metrics when it has one (vLLM does)
        assert probe.batch_source == "metrics"
        if probe.client_bound:
            # honest: the reason is recorded and the probe does not pass
            assert probe.client_bound_reasons
            assert not probe.slo_pass
        else:
            assert probe.slo_pass  # the SLO is lenient: only the harness could fail it
    assert any(p.window_requests > 0 for p in run.probes)
    outcome = run.outcome
    assert outcome is not None
    passing = [p.rate_rps for p in explicit if p.slo_pass]
    confirm = [p for p in run.probes if p.phase == "confirm"]
    if passing:
        assert confirm
        assert confirm[0].rate_rps == max(passing)
        if outcome.confirmed_rate_rps is not None:
            assert all(p.slo_pass for p in (run.probes[i] for i in outcome.confirm_probes))
    else:
        assert outcome.confirmed_rate_rps is None
        assert "none (no rate met the SLO)" in done.stdout
    assert outcome.probe_seconds > 0

    accuracy = run.accuracy
    assert accuracy is not None
    assert accuracy.meaningful is True  # a real model: the score counts (random weights: ~0)
    assert len(accuracy.items) == 3
    assert all(item.error is None for item in accuracy.items)
    assert run.power is not None
    assert run.power.source == "none"
    assert run.power.node_power_kw is None


@pytest.mark.parametrize(
    ("engine", "expected"),
    [
        ({"model": "not-tiny"}, "serves 'tiny', not engine.model 'not-tiny'"),
        ({"version": "0.31.0"}, "but the spec says engine.version '0.31.0'"),
    ],
    ids=["wrong-model", "wrong-version"],
)
def test_preflight_refuses(repo, tmp_path, vllm_server, engine, expected):
    spec = _spec(repo, tmp_path, vllm_server, **engine)
    done = run_measure(measure_argv(spec, tmp_path / "a.json"), cwd=repo, timeout_s=60)
    assert done.returncode == 2, done.stderr[-3000:]
    errors = error_lines(done.stderr)
    assert len(errors) == 1, done.stderr[-3000:]
    assert errors[0].startswith("EndpointError: ")
    assert expected in errors[0]
    assert files_in(tmp_path) == ["spec.yaml"]
