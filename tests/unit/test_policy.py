"""The publishing policy, against hand-worked cases."""

from __future__ import annotations

import json

import pytest

from tests import factories
from tokenwatt import policy, store
from tokenwatt.schema.result import ConfigMeasurement, ResultFile
from tokenwatt.schema.spec import MeasurementSpec


def full_measurement() -> dict[str, int]:
    return {"warmup_s": 60, "window_s": 300, "search_window_s": 60, "repeats": 3}


def test_table_holds_the_design_minimums():
    table = {r.name: (r.bound, r.minimum) for r in policy.POLICY}
    assert table == {
        "window_s": ("min", 300),
        "warmup_s": ("min", 60),
        "repeats": ("min", 3),
        "accuracy_questions": ("min", 200),
        # The audits (issue 17): InferenceX's strict power mode, zero-tolerance token checks.
        "token_mismatches": ("max", 0),
        "power_coverage_pct": ("min", 95),
        "power_max_gap_s": ("max", 3),
        "littles_law_disagreement_pct": ("max", 25),
    }


def test_seed_breaks_the_four_minimums_on_every_config(seed_path):
    broken = policy.check_result(store.load_result(seed_path))
    assert [v.rule for v in broken] == ["window_s", "warmup_s", "repeats", "accuracy_questions"]
    assert all(len(v.subjects) == 3 for v in broken)
    assert "120 s" in broken[0].message


def test_status_published_is_not_trusted(seed_path):
    data = json.loads(seed_path.read_text())
    assert data["status"] == "published"
    assert policy.check_result(ResultFile.model_validate(data))


def _seed_meeting_every_minimum(seed_path):
    data = json.loads(seed_path.read_text())
    data["spec"]["measurement"].update(window_s=300, warmup_s=60, repeats=3)
    data["spec"]["accuracy"]["limit"] = 200
    for config in data["configs"]:
        config.update(repeats=3, slo_pass_count=3)
    return data


def test_result_meeting_every_minimum_is_publishable(seed_path):
    data = _seed_meeting_every_minimum(seed_path)
    assert policy.check_result(ResultFile.model_validate(data)) == []


def test_config_measurement_wins_over_the_spec(seed_path):
    data = _seed_meeting_every_minimum(seed_path)
    result = ResultFile.model_validate(data)
    result.configs[1].measurement = ConfigMeasurement(
        warmup_s=5, window_s=20, repeats=1, accuracy_questions=10, quick=True
    )
    rules = {v.rule: v.subjects for v in policy.check_result(result)}
    assert set(rules) == {"window_s", "warmup_s", "repeats", "accuracy_questions", "quick"}
    assert rules["quick"] == ("tuned 'tuned kernels'",)


def test_run_policy_uses_effective_durations_and_flags():
    spec = factories.spec(measurement=full_measurement())
    run = factories.run(spec=spec, quick=True, effective=MeasurementSpec(warmup_s=2, window_s=5))
    rules = {v.rule for v in policy.check_run(run)}
    assert {"quick", "window_s", "warmup_s", "no_accuracy"} <= rules
    assert "simulated" not in rules


def test_spec_policy_flags_the_simulator():
    spec = factories.spec(
        engine={"endpoint": "sim", "model": "m"},
        hardware={"adapter": "none"},
        measurement=full_measurement(),
        accuracy={"suite": "s.jsonl", "limit": 200},
    )
    assert [v.rule for v in policy.check_spec(spec)] == ["simulated"]


def test_describe_lists_every_rule():
    names = [row["rule"] for row in policy.describe()]
    assert names[:4] == ["window_s", "warmup_s", "repeats", "accuracy_questions"]
    assert "quick" in names


def _audited(seed_path, **changes):
    from tests import result_factories
    from tokenwatt.schema.result import ResultFile

    data = result_factories.full_mode_data(seed_path)
    for config in data["configs"]:
        config["audits"] = {"probes": 9, "littles_law_worst_pct": -4.0, "littles_law_agrees": True}
        config["power_validity"] = {
            "coverage_pct": 100.0,
            "max_gap_s": 1.0,
            "gpus_seen": [1],
            "gpus_expected": 1,
        }
    for dotted, value in changes.items():
        section, field = dotted.split(".")
        data["configs"][1][section][field] = value
    return ResultFile.model_validate(data)


def test_audited_full_result_is_publishable(seed_path):
    assert policy.check_result(_audited(seed_path)) == []


@pytest.mark.parametrize(
    ("change", "rule", "words"),
    [
        ({"audits.usage_below_chunks": 2}, "token_mismatches", "is 2, the maximum is 0"),
        ({"audits.short_ignore_eos": 1}, "token_mismatches", "is 1, the maximum is 0"),
        ({"audits.over_max_tokens": 3}, "token_mismatches", "is 3, the maximum is 0"),
        ({"power_validity.coverage_pct": 93.5}, "power_coverage_pct", "is 93.5 %, the minimum"),
        ({"power_validity.max_gap_s": 5.2}, "power_max_gap_s", "is 5.2 s, the maximum is 3 s"),
        ({"power_validity.gpus_seen": [2]}, "power_gpu_count", "cover 2 GPU(s), 1 are in use"),
        ({"audits.littles_law_worst_pct": -40.0}, "littles_law_disagreement_pct", "is 40 %"),
        ({"audits.conservation_failures": 1}, "conservation", "1 probe(s) lost"),
    ],
)
def test_audit_gates_name_the_reason(seed_path, change, rule, words):
    broken = policy.check_result(_audited(seed_path, **change))
    assert [v.rule for v in broken] == [rule]
    assert words in broken[0].message
    assert broken[0].subjects == ("tuned 'tuned kernels'",)


def test_several_tokens_a_chunk_alone_is_publishable(seed_path):
    # usage above the chunks received is what an honest server streaming several tokens a chunk
    # (or tokens with no text of their own) shows: recorded, never a violation
    assert policy.check_result(_audited(seed_path, **{"audits.usage_mismatches": 40})) == []


def test_the_methodology_table_states_the_audit_gates():
    rows = {row["rule"]: row["requirement"] for row in policy.describe()}
    assert rows["power_max_gap_s"].endswith("≤ 3 s")
    assert rows["power_coverage_pct"].endswith("≥ 95 %")
    assert rows["token_mismatches"].endswith("≤ 0")
    assert "power_gpu_count" in rows
