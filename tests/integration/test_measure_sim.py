"""``tokenwatt run --quick`` end to end against the embedded simulator, through the real CLI.

The spec (tests/data/tiny-sim.spec.yaml) names ``engine.endpoint: sim``: the command starts the
simulator itself, asks it three gsm8k questions, probes two explicit rates and confirms the
higher, reading power from the simulator's own /metrics. About 15 s.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.measure_cli import files_in, load_valid_run, measure_argv, run_measure, tokenwatt_exe
from tokenwatt.schema.run import ProbeRecord

pytestmark = pytest.mark.slow

SPEC = "tests/data/tiny-sim.spec.yaml"


def last_window_end_s(probe: ProbeRecord) -> float:
    """When the probe's last window request finished, in seconds from the probe's start."""
    table = probe.requests
    assert table is not None
    return probe.warmup_s + max(
        t_sched_s + (lag_ms + e2e_ms) / 1000
        for t_sched_s, lag_ms, e2e_ms in zip(
            table.t_sched_s, table.send_lag_ms, table.e2e_ms, strict=True
        )
        if e2e_ms is not None
    )


def test_quick_run_end_to_end(repo: Path, tmp_path: Path):
    out = tmp_path / "runs" / "tiny.json"  # the folder does not exist yet: measure makes it
    typed = (
        f"tokenwatt run --spec {SPEC} --label 'sim-quick' --role baseline"
        f" --out {shlex.quote(str(out))} --quick"
    )
    env_path = f"{tokenwatt_exe().parent}:/usr/bin:/bin"
    done = subprocess.run(
        ["bash", "-c", typed],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard (see tests.measure_cli.run_measure), not a speed limit
        check=False,
        # a bare environment, except for the checkout under test where PYTHONPATH names one
        env={"PATH": env_path, "HOME": str(tmp_path)}
        | {k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"wrote {out}" in done.stdout
    assert "quick mode: validation only, not for publishing" in done.stdout
    assert "probe-seconds" in done.stdout
    # the plain progress log says each step once: tokenwatt's INFO log lines stay out (no -v)
    assert "probe 1: PASS" in done.stderr
    assert " INFO tokenwatt" not in done.stderr
    assert files_in(out.parent) == ["tiny.json"]  # no temporary file left behind

    run = load_valid_run(out, cwd=repo)
    # what it is
    assert run.quick is True
    assert run.simulated is True
    assert run.complete is True
    assert run.incomplete_reason is None
    assert run.command == typed  # the reproduce line is exactly what was typed
    assert run.spec_path == SPEC
    assert run.label == "sim-quick"
    assert run.role == "baseline"
    # where and with what
    env = run.environment
    assert env.engine_version is not None
    assert env.engine_version.startswith("tokenwatt-sim")
    assert env.engine_version_source == "GET /version"
    # the engine's own configuration, read in pre-flight (the simulator copies vLLM's gauge)
    reported = env.engine_config
    assert reported is not None
    assert reported.metrics_source == "GET /metrics"
    assert reported.max_model_len is not None
    assert [g.name for g in reported.info] == ["vllm:cache_config_info"]
    assert reported.info[0].labels["enable_prefix_caching"] == "True"  # on by default, as in vLLM
    assert env.spec_sha256 == hashlib.sha256((repo / SPEC).read_bytes()).hexdigest()
    assert env.gpus
    assert all("(simulated)" in g.name for g in env.gpus)
    assert env.finished_utc is not None
    assert env.started_utc < env.finished_utc
    # quick mode capped what the spec asks for, never raised it
    assert run.effective.repeats == 1
    assert run.effective.window_s <= run.spec.measurement.window_s
    # probes: the two explicit rates, then one confirmation at the higher (both pass easily)
    assert [(p.phase, p.rate_rps) for p in run.probes] == [
        ("rates", 2.0),
        ("rates", 4.0),
        ("confirm", 4.0),
    ]
    for probe in run.probes:
        assert probe.window_requests > 0
        assert probe.requests is not None
        assert len(probe.requests.status) == probe.window_requests
        assert probe.failed == 0, probe.failure_examples
        assert probe.slo_pass, probe.client_bound_reasons
        assert probe.ttft_ms.p99 is not None
        assert 0 < probe.ttft_ms.p99 <= run.spec.slo.ttft_p99_ms
        assert probe.early_stop is None  # the seed's protocol: no early stop by default
    # outcome
    outcome = run.outcome
    assert outcome is not None
    assert outcome.confirmed_rate_rps == 4.0
    assert outcome.confirm_probes == [2]
    assert outcome.slo_pass_count == 1
    assert outcome.goodput_tok_s == pytest.approx(run.probes[2].goodput_tok_s)
    assert outcome.goodput_tok_s > 0
    assert outcome.ttft_p99_ms is not None
    assert outcome.tpot_p99_ms is not None
    assert 0 < outcome.search_probe_seconds < outcome.probe_seconds
    # A probe ends once every window request has been sent and has finished, which can be
    # before warm-up + window when the last one finishes early; never before that last end.
    ends_s = [last_window_end_s(p) for p in run.probes]
    for probe in run.probes:
        assert probe.requests is not None
        assert all(0 <= t_s < probe.window_s for t_s in probe.requests.t_sched_s)
    assert outcome.probe_seconds >= sum(ends_s) - 1e-6
    assert outcome.search_probe_seconds >= sum(ends_s[:2]) - 1e-6
    # power, from the simulator's dcgm-exporter style gauge
    power = run.power
    assert power is not None
    assert power.source == "prometheus"
    assert power.samples
    assert power.node_power_kw is not None
    assert power.node_power_kw > 0
    assert power.energy_j is not None
    assert power.energy_j > 0
    assert power.tokens_per_joule is not None
    assert power.tokens_per_joule > 0
    # MBU at the confirmed rate, batch from the simulator's vLLM-named gauge
    mbu = run.mbu
    assert mbu is not None
    # built from its own inputs (its closeness to the truth is test_sim_mbu's: a quick window
    # holds about eight scrapes of the gauge, and on a loaded machine they can miss half of B)
    assert mbu.mbu_pct > 0
    assert mbu.mbu_pct == pytest.approx(
        100 * mbu.bytes_per_step * mbu.steps_per_s / (mbu.rated_bw_tbs * 1e12)
    )
    assert mbu.steps_per_s == pytest.approx(mbu.output_tok_s / mbu.batch_mean)
    assert mbu.batch_source == "metrics"
    assert mbu.rated_bw_tbs == pytest.approx(3.35)
    # its token rate: the tokens that arrived inside the confirmation window, from any request
    confirm = run.probes[2]
    assert confirm.window_emitted_tokens is not None
    assert confirm.window_emitted_tokens > 0
    assert mbu.output_tok_s == pytest.approx(confirm.window_emitted_tokens / confirm.window_s)
    assert mbu.batch_mean == pytest.approx(confirm.running_batch_mean)
    assert any("scrapes of the gauge" in a for a in mbu.assumptions)
    # accuracy ran, and is marked not meaningful against the simulator
    accuracy = run.accuracy
    assert accuracy is not None
    assert accuracy.meaningful is False
    assert accuracy.limit == 3
    assert len(accuracy.items) == 3
    assert all(item.completion is not None for item in accuracy.items)


def test_json_log_is_one_json_object_per_line(repo: Path, tmp_path: Path):
    out = tmp_path / "tiny.json"
    argv = measure_argv(SPEC, out, "--quick", "--no-accuracy", "--json-log", label="j")
    done = run_measure(argv, cwd=repo)
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stderr.splitlines()]  # fails on any other line
    kinds = [e["event"] for e in events]
    run = load_valid_run(out, cwd=repo)
    assert run.accuracy is None
    # one started and one finished event per probe, saying what the run file says (which
    # probes follow the two explicit rates depends on their verdicts: on a busy machine a probe
    # can come out client-bound, and a confirmation is then backed off)
    assert [(p.phase, p.rate_rps) for p in run.probes[:2]] == [("rates", 2.0), ("rates", 4.0)]
    assert kinds.count("probe_started") == len(run.probes)
    finished = [e for e in events if e["event"] == "probe_finished"]
    assert [(e["phase"], e["rate_rps"], e["slo_pass"]) for e in finished] == [
        (p.phase, p.rate_rps, p.slo_pass) for p in run.probes
    ]
    # progress events carry the time since the start; log records (a warning about a
    # client-bound probe on a busy machine, say) their level, logger and message
    progress = [e for e in events if e["event"] != "log"]
    assert all(e["elapsed_s"] >= 0 for e in progress)
    assert all({"level", "logger", "message"} <= e.keys() for e in events if e["event"] == "log")


def test_a_simulator_behind_a_url_is_marked_simulated(repo: Path, tmp_path: Path):
    """A simulator started on its own (``tokenwatt sim``) and reached through its URL.

    It says so on GET /version; the run must be marked simulated (so no page or result made
    from it can pass as real hardware), its accuracy not meaningful, and no GPU of this host
    listed as the one measured.
    """
    from tests.measure_cli import load_spec_dict, write_spec
    from tokenwatt.sim.launch import SimSettings, launch

    settings = SimSettings(
        config_file=repo / "specs" / "models" / "Qwen__Qwen3-8B" / "config.json",
        served_model_name="Qwen/Qwen3-8B",
    )
    with launch(settings) as sim:
        data = load_spec_dict(repo / SPEC)
        data["engine"]["endpoint"] = sim.base_url
        del data["engine"]["sim"]
        data["model"]["config"] = str(repo / "specs" / "models" / "Qwen__Qwen3-8B" / "config.json")
        data["accuracy"]["suite"] = str(repo / "specs" / "suites" / "gsm8k-200.jsonl")
        data["power"] = {"source": "prometheus", "url": sim.metrics_url, "sampling_hz": 5}
        data["sweep"] = {"rates": [2], "ramp": True}
        spec = write_spec(tmp_path / "spec.yaml", data)
        out = tmp_path / "url-sim.json"
        done = run_measure(measure_argv(spec, out, "--quick"), cwd=repo)
    assert done.returncode == 0, done.stderr[-3000:]
    run = load_valid_run(out, cwd=repo)
    assert run.simulated is True
    assert run.spec.engine.endpoint.startswith("http://127.0.0.1:")
    assert run.environment.gpus == []  # not this host's GPUs
    assert run.accuracy is not None
    assert run.accuracy.meaningful is False
    assert "says it is a simulator" in done.stderr
    # sweep.ramp: the confirmation started on what the rate's probe left running
    assert len(run.probes) >= 2
    assert run.probes[0].ramp is None
    ramp = run.probes[1].ramp
    assert ramp is not None
    assert ramp.from_probe == 0  # (at 2 req/s of short answers, few or none are in flight)
