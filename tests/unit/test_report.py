"""``report``: run files carrying the seed's figures give back the seed's configs and verdict."""

from __future__ import annotations

import json
import re

import pytest

from tests import factories
from tokenwatt import figures, policy, report, store
from tokenwatt.errors import ResultError
from tokenwatt.report import QUICK_NOTE, LoadedRun, build_result, quote_arg, slugify
from tokenwatt.schema.run import AccuracyItem, PrefixReuse

SEED_FIELDS = (
    "key",
    "label",
    "engine",
    "mbu_pct",
    "node_power_kw",
    "goodput_tok_s",
    "ttft_p99_ms",
    "tpot_p99_ms",
    "slo_pass_count",
    "repeats",
    "throttle_counts",
)
TITLE = "Tuned vs default fused-MoE kernels: Qwen3-30B-A3B FP8 on 1\u00d7 H100 SXM"


def loaded(runs):
    return [LoadedRun(f"runs/{r.label}.json", r) for r in runs]


def make(runs=None, **kw):
    return build_result(
        loaded(runs or factories.seed_runs()),
        title=TITLE,
        report_command=f"tokenwatt report runs/a.json --title {quote_arg(TITLE)}",
        **kw,
    )


def test_seed_configs_band_and_verdict_are_reproduced(seed_path):
    seed = json.loads(seed_path.read_text(encoding="utf-8"))
    result = make(result_id=seed["id"])
    ours = store.dump_result(result)
    for mine, theirs in zip(ours["configs"], seed["configs"], strict=True):
        for field in SEED_FIELDS:
            assert mine[field] == pytest.approx(theirs[field]), field
        for field in ("score", "delta_pts", "spread_pts"):
            assert mine["accuracy"][field] == theirs["accuracy"][field]
    assert ours["variance_band_pct"] == seed["variance_band_pct"] == 0.7
    assert ours["runs"] == seed["runs"]
    assert result.verdict is not None
    assert result.verdict.outcome == "no_difference"
    assert "no measurable difference" in result.summary
    for field in ("slo", "model", "workload", "software", "accuracy"):
        assert ours[field] == seed[field], field
    assert ours["fleet"]["cards"] == seed["fleet"]["cards"] == 64
    assert ours["fleet"]["goodput_delta_tok_s"] == pytest.approx(7.8 * 64)
    assert ours["hardware"] == {**seed["hardware"], "host": "Lambda Cloud instance"}
    assert ours["power"] == seed["power"]
    assert QUICK_NOTE in ours["not_covered"]
    assert ours["not_covered"][:3] == seed["not_covered"]


def test_quick_inputs_are_never_published():
    result = make()
    assert result.status == "draft"
    assert policy.check_result(result)


def test_full_inputs_meeting_the_policy_are_published():
    spec = factories.seed_spec()
    full = spec.measurement.model_copy(update={"window_s": 300, "warmup_s": 60, "repeats": 3})
    runs = []
    for r in factories.seed_runs():
        assert r.accuracy is not None
        assert r.outcome is not None
        acc = r.accuracy.model_copy(update={"limit": 200})
        extra = factories.probe(
            3,
            rate=20.0,
            phase="confirm",
            repeat=2,
            window_s=120.0,
            output_tokens=r.probes[1].output_tokens,
            goodput_tok_s=r.probes[1].goodput_tok_s,
        )
        outcome = r.outcome.model_copy(update={"confirm_probes": [1, 2, 3], "slo_pass_count": 3})
        assert r.power is not None
        assert r.power.node_power_kw is not None
        # Readings over all three windows: a window without any fails the power-coverage rule.
        power = factories._board_power(
            [r.probes[1], r.probes[2], extra], node_power_kw=r.power.node_power_kw, capped=0
        )
        runs.append(
            factories.recomputed(
                r.model_copy(
                    update={
                        "quick": False,
                        "spec": r.spec.model_copy(update={"measurement": full}),
                        "effective": full,
                        "accuracy": acc,
                        "probes": [*r.probes, extra],
                        "outcome": outcome,
                        "power": power,
                    }
                )
            )
        )
    result = make(runs)
    assert policy.check_result(result) == []
    assert result.status == "published"
    assert result.verdict is not None
    assert result.verdict.ci_low_pct is not None  # three repeats: an interval is given


def test_mismatched_runs_are_refused_naming_the_difference():
    runs = factories.seed_runs()
    other_slo = runs[1].spec.model_copy(
        update={"slo": runs[1].spec.slo.model_copy(update={"tpot_p99_ms": 40.0})}
    )
    runs[1] = runs[1].model_copy(update={"spec": other_slo})
    with pytest.raises(ResultError, match="SLO") as info:
        make(runs)
    assert "p99 TPOT 40 ms" in str(info.value)
    assert "--allow-mismatch" in str(info.value)
    result = make(runs, allow_mismatch=True)
    assert result.mismatches is not None
    assert any("p99 TPOT 40 ms" in m for m in result.mismatches)


def test_different_hardware_is_a_mismatch():
    runs = factories.seed_runs()
    env = runs[2].environment.model_copy(
        update={"gpus": [runs[2].environment.gpus[0].model_copy(update={"name": "NVIDIA H200"})]}
    )
    runs[2] = runs[2].model_copy(update={"environment": env})
    with pytest.raises(ResultError, match="hardware"):
        make(runs)


def test_accuracy_gate_two_point_drop_is_not_an_improvement():
    runs = factories.seed_runs()
    assert runs[1].accuracy is not None
    seed = runs[1].accuracy.per_seed[0].model_copy(update={"score": 94.0, "correct": 47})
    acc = runs[1].accuracy.model_copy(update={"score": 94.0, "per_seed": [seed]})
    # 10% more goodput, but two points less accuracy
    probes = [
        p.model_copy(
            update={
                "output_tokens": int(p.output_tokens * 1.1),
                "goodput_tok_s": int(p.output_tokens * 1.1) / p.window_s,
            }
        )
        for p in runs[1].probes
    ]
    runs[1] = factories.recomputed(runs[1].model_copy(update={"accuracy": acc, "probes": probes}))
    result = make(runs)
    tuned = result.configs[1]
    assert tuned.goodput_tok_s > result.configs[0].goodput_tok_s * 1.09
    assert tuned.accuracy.delta_pts == -2.0
    assert tuned.accuracy.gate_pass is False
    assert result.verdict.outcome == "gate_failed"
    assert "better" not in result.verdict.text.lower()
    assert "not an improvement" in result.summary


def test_inconsistent_goodput_is_refused():
    runs = factories.seed_runs()
    bad = runs[0].probes[1].model_copy(update={"goodput_tok_s": 9999.0})
    runs[0] = runs[0].model_copy(update={"probes": [runs[0].probes[0], bad, runs[0].probes[2]]})
    with pytest.raises(ResultError, match="inconsistent"):
        make(runs)


def test_roles_are_checked():
    runs = factories.seed_runs()
    with pytest.raises(ResultError, match="no run has role 'baseline'"):
        make(runs[1:])
    with pytest.raises(ResultError, match="more than one run has role 'baseline'"):
        make([runs[0], runs[0].model_copy(update={"label": "x", "description": "x"})])
    # Several candidates may share role tuned (an N-way report), never a label.
    other_probes = [p.model_copy(update={"rate_rps": p.rate_rps * 1.01}) for p in runs[1].probes]
    two = [runs[0], runs[1], runs[1].model_copy(update={"label": "x", "probes": other_probes})]
    with pytest.raises(ResultError, match="more than one run is labelled 'tuned kernels'"):
        make(two)
    # The same measurement twice is named as such, before its repeated label.
    with pytest.raises(ResultError, match="holds the same measurement as"):
        make([runs[0], runs[1], runs[1].model_copy(update={"label": "x"})])
    # These older run files keep no window requests: no capacity verdicts, so no N-way report.
    two[2] = two[2].model_copy(update={"description": "x"})
    with pytest.raises(ResultError, match="several candidates .* keep their window requests"):
        make(two)


def test_no_confirmed_rate_gives_zero_goodput_and_a_caveat():
    runs = factories.seed_runs()
    assert runs[1].outcome is not None
    outcome = runs[1].outcome.model_copy(update={"confirmed_rate_rps": None, "confirm_probes": [1]})
    failed = runs[1].probes[1].model_copy(update={"slo_pass": False})
    runs[1] = factories.recomputed(
        runs[1].model_copy(
            update={"outcome": outcome, "probes": [runs[1].probes[0], failed, runs[1].probes[2]]}
        )
    )
    result = make(runs)
    assert result.configs[1].goodput_tok_s == 0.0
    assert result.configs[1].slo_pass_count == 0
    assert "Config 'tuned kernels': no arrival rate met the SLO" in result.not_covered
    assert result.verdict.outcome == "worse"


def test_result_validates_and_round_trips(tmp_path):
    result = make()
    path = tmp_path / "r.json"
    store.save_result(result, path)
    assert store.load_result(path) == result


def test_slug_and_quote():
    assert slugify(TITLE) == "tuned-vs-default-fused-moe-kernels-qwen3-30b-a3b-fp8-on-1-h100-sxm"
    assert quote_arg("it's") == "'it'\"'\"'s'"


def test_sweep_resolution_is_stated_when_wider_than_the_band():
    runs = factories.seed_runs()
    fail = factories.probe(
        3, rate=24.0, passed=False, window_s=60.0, output_tokens=60_000, goodput_tok_s=1000.0
    )
    runs[1] = runs[1].model_copy(update={"probes": [*runs[1].probes, fail]})
    result = make(runs)
    tuned = result.configs[1]
    assert tuned.boundary_gap_pct == 20.0  # (24 - 20) / 20
    assert result.configs[0].boundary_gap_pct is None  # nothing failed above 20 req/s
    assert any(
        n.startswith("Sweep resolution: config 'tuned kernels' passed at 20 req/s and failed 20.0%")
        for n in result.not_covered
    )


def test_an_early_stopped_probe_is_marked_in_the_probe_history():
    from tokenwatt.schema.run import EarlyStop, LatencyStats

    runs = factories.seed_runs()
    inf = float("inf")
    unbounded = LatencyStats(count=700, mean=inf, p50=100.0, p90=inf, p95=inf, p99=inf)
    n = len(runs[0].probes)
    stopped = factories.probe(
        n,
        rate=12.0,
        passed=False,
        phase="search",
        window_s=60.0,
        window_requests=700,
        ok=40,
        failed=660,
        output_tokens=40 * 250,
        goodput_tok_s=40 * 250 / 60.0,
        ttft_ms=unbounded,
        early_stop=EarlyStop(
            stopped_ns=1,
            planned_window_requests=720,
            exceeding_needed=8,
            ttft_exceeding=8,
            tpot_exceeding=0,
            cut_window_requests=660,
            unsent_window_requests=20,
        ),
    )
    runs[0] = runs[0].model_copy(update={"probes": [*runs[0].probes, stopped]})
    points = make(runs).configs[0].probes
    assert points is not None
    marked = [(p.rate_rps, p.stopped_early, p.cut_requests, p.failed) for p in points]
    assert marked[n] == (12.0, True, 660, 660)
    assert all(not p.stopped_early and p.cut_requests == 0 for p in points[:n])
    assert points[n].ttft_p99_ms is None  # unbounded, shown as such


def test_goodput_counted_from_chunks_is_carried_as_approximate():
    runs = factories.seed_runs()
    first = runs[0]
    assert first.outcome is not None
    probes = list(first.probes)
    for i in first.outcome.confirm_probes:
        probes[i] = probes[i].model_copy(update={"approximate_output_tokens": 2})
    runs[0] = first.model_copy(update={"probes": probes})
    result = make(runs)
    counts = [c.approximate_output_requests for c in result.configs]
    assert counts[0] == 2 * len(first.outcome.confirm_probes)
    assert counts[1:] == [0] * (len(counts) - 1)


# -- a run file's summary fields are checked against its evidence ------------------------------


def _evidence_run(**probe_kw):
    """A run whose probe keeps its window requests (TPOT 30 ms, the SLO's bound 50 ms)."""
    table = factories.request_table([30.0] * 200, **probe_kw.pop("table", {}))
    probe = factories.probe_with_requests(0, 20.0, table, phase="confirm", repeat=0, **probe_kw)
    base = factories.run().outcome
    assert base is not None
    outcome = base.model_copy(
        update={
            "confirmed_rate_rps": 20.0,
            "confirm_probes": [0],
            "goodput_tok_s": probe.goodput_tok_s,
            "repeat_goodputs_tok_s": [probe.goodput_tok_s],
        }
    )
    return factories.run(probes=[probe], outcome=outcome)


def _report(run):
    from tokenwatt.figures import figures_of

    return figures_of(run, path="runs/x.json")


def test_a_consistent_evidence_run_reports():
    got = _report(_evidence_run(slo_pass=True))
    assert got.outcome.slo_pass_count == 1
    assert got.capacity.fits["tpot"].method == "above_all"


def test_a_probe_marked_passing_against_its_requests_is_refused():
    run = _evidence_run(slo_pass=True)
    # Every request over the 50 ms TPOT bound, yet the probe claims to pass.
    bad = factories.probe_with_requests(
        0, 20.0, factories.request_table([60.0] * 200), phase="confirm", repeat=0, slo_pass=True
    )
    run = run.model_copy(update={"probes": [bad]})
    with pytest.raises(ResultError, match=r"probes\[0\]\.slo_pass is True"):
        _report(run)


def test_a_probe_whose_send_lags_say_client_bound_is_refused_when_it_says_not():
    run = _evidence_run(slo_pass=True, table={"send_lag_ms": 25.0})
    with pytest.raises(ResultError, match="client_bound is false.*p99 send lag 25.00 ms"):
        _report(run)


def test_send_lag_summary_must_match_the_requests():
    run = _evidence_run(slo_pass=True)
    forged = run.probes[0].model_copy(update={"send_lag_p99_ms": 0.01, "client_bound": False})
    table = factories.request_table([30.0] * 200, send_lag_ms=3.0)
    forged = forged.model_copy(update={"requests": table})
    run = run.model_copy(update={"probes": [forged]})
    with pytest.raises(ResultError, match="send_lag_p99_ms is 0.01, but"):
        _report(run)


def test_a_sim_run_that_says_it_is_real_is_refused():
    run = _evidence_run(slo_pass=True)
    spec = run.spec.model_copy(
        update={"engine": run.spec.engine.model_copy(update={"endpoint": "sim"})}
    )
    run = run.model_copy(update={"spec": spec, "simulated": False})
    with pytest.raises(ResultError, match="simulated is false, but the spec's engine.endpoint"):
        _report(run)


@pytest.mark.parametrize(
    ("environment", "because"),
    [
        (
            {"engine_version": "tokenwatt-sim 0.1.0"},
            "the engine identified itself as 'tokenwatt-sim 0.1.0'",
        ),
        (
            {"gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3 (simulated)"}]},
            "its GPUs are simulated ones",
        ),
    ],
)
def test_a_run_whose_engine_or_gpus_are_the_simulator_is_simulated(environment, because):
    from tokenwatt.schema.run import Environment

    run = _evidence_run(slo_pass=True)
    env = Environment.model_validate({**run.environment.model_dump(), **environment})
    run = run.model_copy(update={"environment": env, "simulated": False})
    with pytest.raises(ResultError, match="simulated is false, but " + re.escape(because)):
        _report(run)
    assert any(v.rule == "simulated" for v in policy.check_run(run))


def test_a_shortened_run_that_says_it_is_not_quick_is_refused():
    run = _evidence_run(slo_pass=True)
    short = run.effective.model_copy(update={"window_s": 10, "warmup_s": 3})
    run = run.model_copy(update={"effective": short, "quick": False})
    with pytest.raises(ResultError, match="quick is false, but the durations in force"):
        _report(run)


def test_a_result_whose_spec_is_the_simulator_is_simulated_whatever_its_flag(seed_path):
    data = json.loads(seed_path.read_text(encoding="utf-8"))
    data["spec"]["engine"]["endpoint"] = "sim"
    data["simulated"] = False
    from tokenwatt.schema.result import ResultFile

    result = ResultFile.model_validate(data)
    assert figures.result_is_simulated(result)
    assert any(v.rule == "simulated" for v in policy.check_result(result))
    data["spec"]["engine"]["endpoint"] = "http://127.0.0.1:8000/v1"
    data["software"]["engine_version"] = "tokenwatt-sim 0.1.0"
    assert figures.result_is_simulated(ResultFile.model_validate(data))


def test_more_output_tokens_than_the_workload_asks_for_is_refused():
    spec = factories.spec(
        workload={"trace": "chat-mix-v1", "input_tokens": 64, "output_tokens": 16}
    )
    run = _evidence_run(slo_pass=True, table={"output_tokens": 5000}).model_copy(
        update={"spec": spec}
    )
    with pytest.raises(ResultError, match="5000 output tokens, more than the spec's workload"):
        _report(run)


def test_power_other_than_the_samples_is_refused():
    runs = factories.seed_runs()
    assert runs[0].power is not None
    power = runs[0].power.model_copy(update={"node_power_kw": 0.4})
    runs[0] = runs[0].model_copy(update={"power": power})
    with pytest.raises(ResultError, match=r"power.node_power_kw is 0.4, but the run's power"):
        make(runs)


def test_runs_share_streams_only_with_the_same_workload_and_seed():
    from tokenwatt.report import share_streams

    base = factories.run()
    same = factories.run()
    spec = base.spec
    reseeded = base.model_copy(
        update={
            "spec": spec.model_copy(
                update={
                    "workload": spec.workload.model_copy(update={"seed": spec.workload.seed + 1})
                }
            )
        }
    )
    assert share_streams([base, same])
    assert not share_streams([base, same, reseeded])


def test_each_config_carries_its_own_spec_and_its_hash():
    runs = factories.seed_runs()
    tuned = runs[1]
    engine = tuned.spec.engine.model_copy(update={"kernels": "tuned fused-MoE configs"})
    runs[1] = tuned.model_copy(
        update={
            "spec": tuned.spec.model_copy(update={"engine": engine}),
            "spec_path": "specs/tuned.spec.yaml",
            "environment": tuned.environment.model_copy(update={"spec_sha256": "c3" * 32}),
        }
    )
    result = make(runs)
    by_key = {c.key: c for c in result.configs}
    assert by_key["tuned"].spec is not None
    assert by_key["tuned"].spec.engine.kernels == "tuned fused-MoE configs"
    assert by_key["tuned"].spec_sha256 == "c3" * 32
    assert by_key["tuned"].spec_path == "specs/tuned.spec.yaml"
    assert by_key["baseline"].spec == result.spec
    assert by_key["baseline"].spec_sha256 == runs[0].environment.spec_sha256


def test_an_accuracy_score_its_answers_do_not_give_is_refused():
    runs = factories.seed_runs()
    acc = runs[1].accuracy
    assert acc is not None
    # The score alone raised: its one seed still says 48 of 50.
    forged = runs[1].model_copy(update={"accuracy": acc.model_copy(update={"score": 99.0})})
    with pytest.raises(ResultError, match=r"accuracy\.score is 99\.0, its seeds' scores give 96"):
        make([runs[0], forged, runs[2]])
    # An answer marked correct that its completion does not support.
    item = AccuracyItem(
        seed=0, index=0, gold="18", completion="... #### 17", extracted="17", correct=True
    )
    seed = acc.per_seed[0].model_copy(update={"answered": 1, "correct": 1, "score": 100.0})
    forged_items = acc.model_copy(
        update={"items": [item], "per_seed": [seed], "score": 100.0, "limit": 1}
    )
    forged = runs[1].model_copy(update={"accuracy": forged_items})
    with pytest.raises(ResultError, match=r"accuracy\.items\[0\]\.correct is True, scoring"):
        make([runs[0], forged, runs[2]])
    # The same answer scored honestly is accepted as far as accuracy goes.
    honest = forged_items.model_copy(
        update={
            "items": [item.model_copy(update={"correct": False})],
            "per_seed": [seed.model_copy(update={"correct": 0, "score": 0.0})],
            "score": 0.0,
        }
    )
    from tokenwatt.accuracy import check_evidence

    assert check_evidence(honest) is None


def test_preemptions_at_the_confirmed_rate_are_flagged_and_shown_on_the_page(repo):
    from tokenwatt.pages.render import make_environment, render_result, result_view
    from tokenwatt.schema.run import EngineTelemetry

    runs = factories.seed_runs()
    assert not [n for n in make(runs).not_covered if "preempted" in n]
    base = runs[0]
    assert base.outcome is not None
    confirm = set(base.outcome.confirm_probes)
    probes = [
        p.model_copy(update={"engine": EngineTelemetry(samples=4, preemptions=3)})
        if p.index in confirm
        else p
        for p in base.probes
    ]
    runs[0] = base.model_copy(update={"probes": probes})
    result = make(runs)
    config = next(c for c in result.configs if c.key == "baseline")
    assert config.engine_telemetry is not None
    assert config.engine_telemetry.preemptions == 3 * len(confirm)  # summed over the windows
    flags = [n for n in result.not_covered if "preempted" in n]
    assert flags == [
        f"Config '{config.label}': the engine preempted {3 * len(confirm)} request(s) at the"
        f" confirmed rate {config.confirmed_rate_rps:g} req/s (KV cache full: recomputed or"
        " swapped work)"
    ]
    page = render_result(
        result_view(result, source="results/r.json"),
        env=make_environment(repo / "templates"),
        draw=lambda chart, prefix: "",
    )
    said = flags[0].split("': ", 1)[1]  # the page escapes the quotes around the label
    assert said in page


def test_prefix_text_states_the_expected_hit_rate():
    def text(reuse=None, **workload):
        return report._prefix_text(
            factories.run(spec=factories.spec(workload=workload), prefix_reuse=reuse)
        )

    assert text() is None
    prefix = {"groups": 4, "shared_tokens": 450}
    # 28 whole 16-token blocks = 448 of 450 + 64 = 514 prompt tokens: 87.16 %
    assert text(input_tokens=64, prefix=prefix) == (
        "4 \u00d7 450 tokens before each request's own input tokens; expected prefix-cache hit"
        " rate 87.2 % (16-token blocks, once every prefix is cached)"
    )
    # uniform 16-112: mean 64, the same
    assert "87.2 %" in text(input_tokens={"dist": "uniform", "min": 16, "max": 112}, prefix=prefix)
    trace = text(trace="t.jsonl", prefix=prefix)
    assert (
        trace
        == "4 \u00d7 450 tokens before each request's own input tokens (own lengths from the trace)"
    )
    # a run that recorded its reuse: the engine's own block size, and the trace's hash ids too
    recorded = PrefixReuse(
        expected_hit_rate_pct=77.5, block_tokens=128, block_source="vllm:cache_config_info"
    )
    assert text(recorded, trace="t.jsonl", prefix=prefix) == (
        "4 \u00d7 450 tokens before each request's own input tokens; expected prefix-cache hit"
        " rate 77.5 % (128-token blocks: vllm:cache_config_info; once every prefix is cached)"
    )
    assert text(recorded, trace="t.jsonl") == (
        "the trace's hash_ids as 512-token blocks, identical where the ids are; expected"
        " prefix-cache hit rate 77.5 % (128-token blocks: vllm:cache_config_info; one pass in the"
        " trace's order)"
    )
    assert text(None, trace="t.jsonl") is None  # no reuse recorded: a trace without hash ids


def test_sessions_text_says_what_a_rate_counts():
    def text(sessions=None):
        workload = {"input_tokens": 64, "output_tokens": 16, "sessions": sessions}
        return report._sessions_text(factories.spec(workload=workload))

    assert text() is None
    assert text({"turns": {"dist": "uniform", "min": 2, "max": 4}, "think_time_s": 1.5}) == (
        "turns uniform 2\u20134; think time 1.5 s after each reply; new message 64 (fixed) tokens;"
        " each turn resends the history with the server's replies; rates are sessions per second,"
        " latencies per turn"
    )
    exponential = {"turns": 3, "think_time_s": {"dist": "exponential", "mean": 2}, "new_tokens": 8}
    assert text(exponential).startswith(
        "turns 3 (fixed); think time exponential, mean 2 s after each reply; new message 8 (fixed)"
    )


def test_real_prompts_say_their_lengths_are_the_servers_count():
    spec = factories.spec(
        workload={"prompts": "data/sharegpt/prompts.jsonl", "input_tokens": None, "seed": 1}
    )
    assert report._input_text(spec) == (
        "real prompts from prompts.jsonl: lengths are the server's count (usage.prompt_tokens)"
    )
    assert report._input_text(factories.spec(workload={"input_tokens": 64})) == "64 (fixed)"


def test_an_impossible_mbu_estimate_is_not_stated_and_the_caveat_names_it():
    runs = factories.seed_runs()
    tuned = runs[1]
    assert tuned.mbu is not None
    runs[1] = tuned.model_copy(
        update={"mbu": tuned.mbu.model_copy(update={"mbu_pct": 108.5, "batch_mean": 0.25})}
    )
    result = make(runs)  # the result model refuses an MBU above 100 %: no crash here
    by_key = {c.key: c for c in result.configs}
    assert by_key["tuned"].mbu_pct is None
    assert by_key["baseline"].mbu_pct == 56.3
    assert by_key["tuned"].mbu_batch_mean == 0.25  # the evidence a reviewer checks stays
    (note,) = [n for n in result.not_covered if "MBU" in n]
    assert note.startswith("Run 'moe-tuned': MBU not stated: the estimate is 108.5 %")
    assert "B = 0.25 sequences" in note


@pytest.mark.parametrize(("estimate", "stated"), [(56.34, 56.3), (0.05, 0.1), (0.0437, 0.044)])
def test_an_mbu_is_stated_to_a_tenth_of_a_per_cent_and_never_as_zero(estimate, stated):
    runs = factories.seed_runs()
    base = runs[0]
    assert base.mbu is not None
    runs[0] = base.model_copy(update={"mbu": base.mbu.model_copy(update={"mbu_pct": estimate})})
    (config,) = [c for c in make(runs).configs if c.key == "baseline"]
    assert config.mbu_pct == stated
