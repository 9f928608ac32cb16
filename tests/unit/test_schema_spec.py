"""The spec model: defaults, meaning checks and the repository's spec files."""

from __future__ import annotations

import datetime

import pytest
from pydantic import ValidationError

from tests import factories
from tokenwatt import store
from tokenwatt.schema.spec import LognormalTokens, Spec


def test_defaults_are_the_seeds(seed_path):
    seed_spec = store.load_result(seed_path).spec
    default = factories.spec()
    for section in ("measurement", "sweep"):
        assert getattr(default, section) == getattr(seed_spec, section)
    assert default.slo == seed_spec.slo
    assert default.workload.trace == seed_spec.workload.trace == "chat-mix-v1"


def test_repo_spec_of_the_seed_matches_the_seeds_spec_but_for_paths(seed_path, repo):
    from_repo = store.load_spec(repo / "specs" / "lambda-qwen3-30b-a3b-fp8-tp1-dp1.spec.yaml").spec
    seed_spec = store.load_result(seed_path).spec
    a = from_repo.model_dump()
    b = seed_spec.model_dump()
    assert a["model"].pop("config").endswith("Qwen__Qwen3-30B-A3B-FP8/config.json")
    assert b["model"].pop("config").endswith("Qwen__Qwen3-30B-A3B-FP8/config.json")
    assert a["accuracy"].pop("suite") == "suites/gsm8k-200.jsonl"
    assert b["accuracy"].pop("suite").endswith("/gsm8k-200.jsonl")
    assert a == b


def test_sim_seed_full_spec_keeps_the_seeds_protocol(repo):
    seed = store.load_spec(repo / "specs" / "lambda-qwen3-30b-a3b-fp8-tp1-dp1.spec.yaml").spec
    sim = store.load_spec(repo / "specs" / "sim-seed-full.spec.yaml").spec
    for section in ("slo", "workload", "measurement", "sweep", "accuracy"):
        assert getattr(sim, section) == getattr(seed, section), section
    assert (sim.model.name, sim.model.weight_dtype, sim.model.kv_dtype) == (
        seed.model.name,
        seed.model.weight_dtype,
        seed.model.kv_dtype,
    )
    assert sim.engine.endpoint == "sim"
    assert sim.engine.model == seed.engine.model


def test_all_repo_specs_load(repo):
    paths = sorted((repo / "specs").glob("*.yaml"))
    assert len(paths) >= 2
    for path in paths:
        assert isinstance(store.load_spec(path).spec, Spec)


@pytest.mark.parametrize(
    ("section", "value", "needle"),
    [
        ("sweep", {"growth": 1.0}, "greater than 1"),
        ("sweep", {"backoff": 1.0}, "less than 1"),
        ("sweep", {"backoff": 0}, "greater than 0"),
        ("sweep", {"start_rps": 0}, "greater than 0"),
        ("sweep", {"start_rps": 10, "max_rps": 5}, "below start_rps"),
        ("sweep", {"rates": []}, "at least one rate"),
        ("sweep", {"rates": [1, 1]}, "twice"),
        ("measurement", {"repeats": 0}, "greater than or equal to 1"),
        ("power", {"source": "redfish"}, "needs 'url'"),
        ("power", {"source": "ipmi"}, "needs 'host'"),
        ("power", {"source": "command"}, "needs 'command'"),
        ("power", {"source": "prometheus"}, "needs power.url"),
        ("power", {"source": "none", "url": "http://x/metrics"}, "only used by"),
        ("power", {"source": "redfish", "url": "https://bmc", "username": "root"}, "password_env"),
        ("power", {"source": "redfish", "url": "https://bmc", "password_env": "hunter2"}, "name"),
        ("engine", {"endpoint": "localhost:8000", "model": "m"}, "http(s) URL"),
        ("engine", {"model": "m", "api_key_env": "sk-live-abc123"}, "environment variable"),
        ("hardware", {"gpus": [0, 0]}, "twice"),
        ("workload", {"input_tokens": {"dist": "lognormal", "median": 5, "p90": 4}}, "p90"),
        ("workload", {"output_tokens": {"dist": "uniform", "min": 9, "max": 3}}, "larger than max"),
        ("workload", {"arrival": {"process": "poisson", "burstiness": 2}}, "only used with"),
    ],
)
def test_meaning_is_checked(section, value, needle):
    base = factories.spec_dict()
    merged = {**base.get(section, {}), **value} if section != "engine" else value
    with pytest.raises(ValidationError, match=None) as info:
        Spec.model_validate({**base, section: merged})
    assert needle in str(info.value)


def test_board_power_needs_nvidia():
    with pytest.raises(ValidationError, match="adapter 'nvidia'"):
        factories.spec(hardware={"adapter": "none"}, power={"source": "board"})


def test_prometheus_without_url_is_allowed_against_the_simulator():
    spec = factories.spec(engine={"endpoint": "sim", "model": "m"}, power={"source": "prometheus"})
    assert spec.power.url is None


def test_token_counts_take_a_number_or_a_distribution():
    spec = factories.spec(
        workload={
            "input_tokens": 512,
            "output_tokens": {"dist": "lognormal", "median": 256, "p90": 1024},
        }
    )
    assert spec.workload.input_tokens == 512
    assert isinstance(spec.workload.output_tokens, LognormalTokens)


def test_endpoint_trailing_slash_is_dropped():
    spec = factories.spec(engine={"endpoint": "http://h:1/v1/", "model": "m"})
    assert spec.engine.endpoint == "http://h:1/v1"


@pytest.mark.parametrize(
    ("section", "value", "field"),
    [
        ("measurement", {"window_s": True}, "window_s"),
        ("measurement", {"repeats": 3.0}, "repeats"),
        ("measurement", {"warmup_s": "45"}, "warmup_s"),
        ("sweep", {"early_stop": 1}, "early_stop"),
        ("slo", {"ttft_p99_ms": False}, "ttft_p99_ms"),
    ],
)
def test_scalars_are_strict(section, value, field):
    """No coercion: ``window_s: true`` would otherwise be a one-second window."""
    with pytest.raises(ValidationError) as info:
        Spec.model_validate(factories.spec_dict(**{section: value}))
    assert info.value.errors()[0]["loc"][:2] == (section, field)


def test_an_integer_is_a_float_and_extra_body_must_be_finite():
    spec = Spec.model_validate(factories.spec_dict(slo={"ttft_p99_ms": 1000, "tpot_p99_ms": 50}))
    assert spec.slo.ttft_p99_ms == 1000.0
    engine = {"model": "m", "extra_body": {"top_k": [1, float("nan")]}}
    with pytest.raises(ValidationError, match=r"top_k\[1\] is NaN or infinite"):
        Spec.model_validate(factories.spec_dict(engine=engine))
    # What YAML reads as a date is not JSON either (it would fail at the first request).
    engine = {"model": "m", "extra_body": {"meta": {"day": datetime.date(2026, 1, 2)}}}
    with pytest.raises(ValidationError, match=r"meta\.day is a date"):
        Spec.model_validate(factories.spec_dict(engine=engine))


@pytest.mark.parametrize(
    ("section", "value", "pointer"),
    [
        ("engine", {"model": "m", "endpoint": "http://user:pw@host/v1"}, "api_key_env"),
        ("engine", {"model": "m", "endpoint": "https://tok@host:8000/v1"}, "api_key_env"),
        ("power", {"source": "redfish", "url": "https://root:calvin@bmc"}, "password_env"),
        ("power", {"source": "prometheus", "url": "http://a:b@dcgm:9400/metrics"}, "password_env"),
    ],
)
def test_credentials_in_a_url_are_refused(section, value, pointer):
    with pytest.raises(ValidationError, match=f"must not carry a user name or password.*{pointer}"):
        Spec.model_validate(factories.spec_dict(**{section: value}))
    assert "@" in str(value)


def test_an_slo_names_one_first_token_bound():
    base = factories.spec_dict()
    with pytest.raises(ValidationError) as info:
        Spec.model_validate({**base, "slo": {"ttft_p99_ms": 500, "ttfat_p99_ms": 5000}})
    text = str(info.value)
    assert "slo" in text
    assert "names both ttft_p99_ms and ttfat_p99_ms" in text
    assert "remove one" in text
    spec = Spec.model_validate({**base, "slo": {"ttfat_p99_ms": 5000, "tpot_p99_ms": 40}})
    assert spec.slo.first_token == "ttfat"
    assert spec.slo.first_token_p99_ms == 5000
    # written with the bound it judges only, so that it reads back
    dumped = spec.model_dump(mode="json")["slo"]
    assert dumped == {"ttfat_p99_ms": 5000, "tpot_p99_ms": 40}
    assert Spec.model_validate({**base, "slo": dumped}).slo == spec.slo
    # a spec on TTFT is written as it always was
    assert "ttfat_p99_ms" not in Spec.model_validate(base).model_dump(mode="json")["slo"]
