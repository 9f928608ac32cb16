"""The result schema holds the published seed exactly."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tokenwatt import store
from tokenwatt.schema.result import ResultFile


def typed(value: Any) -> Any:
    """JSON values with their JSON types made explicit (45 and 45.0 differ)."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


def test_seed_round_trips_with_values_types_and_order(seed_path):
    original = json.loads(seed_path.read_text(encoding="utf-8"))
    dumped = store.dump_result(store.load_result(seed_path))
    assert typed(dumped) == typed(original)
    assert list(dumped) == list(original)
    assert list(dumped["spec"]) == list(original["spec"])


def test_seed_figures_are_read_as_numbers(seed_path):
    result = store.load_result(seed_path)
    baseline = result.configs[0]
    assert baseline.key == "baseline"
    assert baseline.goodput_tok_s == 4515.0
    assert baseline.throttle_counts == {"sw_power_cap": 180}
    assert result.spec.measurement.window_s == 120
    assert result.spec.sweep.growth == 1.25
    assert str(result.published) == "2026-10-08"


def test_repo_copy_of_seed_is_identical(seed_path, repo):
    copy = repo / "results" / "h100-qwen3-30b-a3b-moe-kernel-tuning.json"
    assert json.loads(copy.read_text()) == json.loads(seed_path.read_text())
    assert store.load_result(copy).id == copy.stem


def test_optional_additions_round_trip(seed_path):
    data = json.loads(seed_path.read_text(encoding="utf-8"))
    data["configs"][0]["tokens_per_joule"] = 7.25
    data["configs"][0]["repeat_goodputs_tok_s"] = [4510.0, 4520.0]
    data["simulated"] = False
    dumped = store.dump_result(ResultFile.model_validate(data))
    assert dumped == data


@pytest.mark.parametrize("count", [3])
def test_pass_count_cannot_exceed_repeats(seed_path, count):
    data = json.loads(seed_path.read_text(encoding="utf-8"))
    data["configs"][1]["slo_pass_count"] = count
    with pytest.raises(ValueError, match="slo_pass_count"):
        ResultFile.model_validate(data)


def test_json_schema_is_generated_for_every_kind():
    from tokenwatt.cli.schema import MODELS

    for model in MODELS.values():
        schema = model.model_json_schema()
        assert schema["type"] == "object"
        assert schema["properties"]
    assert "configs" in ResultFile.model_json_schema()["required"]
