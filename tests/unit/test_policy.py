"""The publishing policy, against hand-worked cases."""

from __future__ import annotations

import json

from tests import factories
from tokenwatt import policy, store
from tokenwatt.schema.result import ConfigMeasurement, ResultFile
from tokenwatt.schema.spec import MeasurementSpec


def full_measurement() -> dict[str, int]:
    return {"warmup_s": 60, "window_s": 300, "search_window_s": 60, "repeats": 3}


def test_table_holds_the_design_minimums():
    table = {r.name: r.minimum for r in policy.POLICY}
    assert table == {"window_s": 300, "warmup_s": 60, "repeats": 3, "accuracy_questions": 200}


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
