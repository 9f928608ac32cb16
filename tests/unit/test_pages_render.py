"""The page renderer's pure parts: escaping, number formatting, publishability, index sections."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from markupsafe import Markup

from tests.result_factories import full_mode_data, hostile_data, seed_data
from tokenwatt.pages.render import (
    fmt_number,
    index_sections,
    launch_changes,
    make_environment,
    md_escape,
    render_result,
    result_view,
    spec_changes,
)
from tokenwatt.schema.result import ResultFile
from tokenwatt.schema.spec import Spec

REPO = Path(__file__).resolve().parents[2]


def view_of(data, name="x"):
    return result_view(ResultFile.model_validate(data), source=f"results/{name}.json")


# -- escaping ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("plain text 1.5", "plain text 1.5"),
        ("<script>", "&#60;script&#62;"),
        ("a & b", "a &#38; b"),
        ("[x](javascript:alert(1))", "&#91;x&#93;(javascript:alert(1))"),
        ("a | b", "a &#124; b"),
        ("`code` *em* _u_", "&#96;code&#96; &#42;em&#42; &#95;u&#95;"),
        ("{: onclick=x}", "&#123;: onclick=x&#125;"),
        ("line\n\n# heading", "line &#35; heading"),
        ("- item", "&#45; item"),
        ("12. item", "12&#46; item"),
        ("-5 %", "-5 %"),
        ("580.105.08", "580.105.08"),
        ('it\'s "q"', "it&#39;s &#34;q&#34;"),
        ("back\\slash", "back&#92;slash"),
    ],
)
def test_md_escape(text, escaped):
    assert md_escape(text) == escaped
    assert isinstance(md_escape(text), Markup)


def test_md_escape_keeps_lines_for_code_blocks():
    assert md_escape("a\n<b>\n", inline=False) == "a\n&#60;b&#62;\n"


def test_templates_escape_every_printed_value():
    env = make_environment(REPO / "templates")
    template = env.from_string("{{ value }} {{ number|num('ms') }} {{ missing }}")
    assert template.render(value="<b>*x*</b>", number=1500.0, missing=None) == (
        "&#60;b&#62;&#42;x&#42;&#60;/b&#62; 1,500 ms —"
    )


# -- numbers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "unit", "kw", "text"),
    [
        (4515.0, "tok/s", {}, "4,515 tok/s"),
        (4522.8, "tok/s", {}, "4,522.8 tok/s"),
        (0.623, "kW", {}, "0.623 kW"),
        (2000.0, "ms", {}, "2,000 ms"),
        (45, "s", {}, "45 s"),
        (1234567, "", {}, "1,234,567"),
        (7.247191011235955, "tok/J", {"digits": 3}, "7.247 tok/J"),
        (0.17275747508305648, "%", {"digits": 2, "sign": True}, "+0.17 %"),
        (-2.6, "%", {"sign": True}, "-2.6 %"),
        (0.0, "pts", {"sign": True}, "0 pts"),
        (None, "ms", {}, "—"),
        (1e-7, "J", {}, "0.000000 J"),
    ],
)
def test_fmt_number(value, unit, kw, text):
    assert fmt_number(value, unit, **kw) == text


def test_fmt_number_refuses_non_finite():
    with pytest.raises(ValueError, match="finite"):
        fmt_number(float("inf"), "ms")


# -- publishability and sections -----------------------------------------------------------------


def test_seed_is_recomputed_as_not_publishable_whatever_its_status(seed_path):
    view = view_of(seed_data(seed_path))
    assert view.result.status == "published"
    assert not view.publishable
    assert {v.rule for v in view.violations} == {
        "window_s",
        "warmup_s",
        "repeats",
        "accuracy_questions",
    }
    assert view.section == "unpublished"
    assert not view.simulated


def test_full_mode_result_is_published(seed_path):
    view = view_of(full_mode_data(seed_path))
    assert view.violations == ()
    assert view.section == "published"


def test_publishable_draft_is_not_listed_as_published(seed_path):
    data = full_mode_data(seed_path)
    data["status"] = "draft"
    assert view_of(data).section == "unpublished"


def test_simulated_result_has_its_own_section(seed_path):
    data = full_mode_data(seed_path)
    data["simulated"] = True
    view = view_of(data)
    assert view.simulated
    assert view.section == "simulated"
    assert "simulated" in {v.rule for v in view.violations}


def test_one_simulated_config_makes_the_result_simulated(seed_path):
    data = full_mode_data(seed_path)
    data["simulated"] = None
    data["configs"][1]["measurement"]["simulated"] = True
    view = view_of(data)
    assert view.simulated
    assert view.section == "simulated"


def test_derived_figures_of_the_seed_by_hand(seed_path):
    view = view_of(seed_data(seed_path))
    base, tuned, other = view.configs
    assert base.goodput_delta_pct is None
    # (4522.8 - 4515) / 4515 = 0.172757...%
    assert tuned.goodput_delta_pct == pytest.approx(0.1727574751, rel=1e-9)
    assert tuned.goodput_delta_computed
    # 4515 tok/s / 623 W = 7.24719... tok/J
    assert base.tokens_per_joule == pytest.approx(7.2471910112, rel=1e-9)
    assert base.tokens_per_joule_computed
    # (0.641 - 0.623) / 0.623 = 2.8892...%
    assert tuned.power_delta_pct == pytest.approx(2.8892455859, rel=1e-9)
    assert other.name == "default kernels (repeat) (other)"
    assert view.headline is tuned


def test_file_values_are_not_recomputed(seed_path):
    view = view_of(full_mode_data(seed_path))
    tuned = view.tuned
    assert tuned is not None
    assert tuned.goodput_delta_pct == tuned.config.goodput_delta_pct
    assert not tuned.goodput_delta_computed
    assert tuned.tokens_per_joule == tuned.config.tokens_per_joule
    assert not tuned.tokens_per_joule_computed


def test_headline_without_tuned_is_the_baseline(seed_path):
    data = seed_data(seed_path)
    data["configs"] = [data["configs"][0], data["configs"][2]]
    view = view_of(data)
    assert view.headline.config.key == "baseline"


def test_index_sections_order_and_membership(seed_path):
    seed = view_of(seed_data(seed_path), "seed")
    full = view_of(full_mode_data(seed_path), "full")
    older = copy.deepcopy(full_mode_data(seed_path, result_id="older"))
    older["published"] = "2025-01-01"
    older_view = view_of(older, "older")
    simulated = full_mode_data(seed_path, result_id="sim")
    simulated["simulated"] = True
    sim = view_of(simulated, "sim")
    sections = index_sections([older_view, seed, sim, full])
    assert [s.key for s in sections] == ["published", "unpublished", "simulated"]
    assert [v.source for v in sections[0].views] == ["results/full.json", "results/older.json"]
    assert [v.source for v in sections[1].views] == ["results/seed.json"]
    assert [v.source for v in sections[2].views] == ["results/sim.json"]


def test_hostile_page_has_no_markup_from_the_file(seed_path):
    view = view_of(hostile_data(seed_path))
    text = render_result(
        view, env=make_environment(REPO / "templates"), draw=lambda chart, prefix: "<svg></svg>"
    )
    assert "<script" not in text
    assert "<img" not in text
    assert "](javascript" not in text
    assert "{:" not in text
    assert "&#60;script&#62;alert(&#39;label&#39;)&#60;/script&#62;" in text


def test_spec_changes_name_each_setting_that_differs(seed_path):
    base = Spec.model_validate(seed_data(seed_path)["spec"])
    data = copy.deepcopy(seed_data(seed_path)["spec"])
    data["engine"]["kernels"] = "tuned"
    data["measurement"]["repeats"] = 5
    other = Spec.model_validate(data)
    assert spec_changes(base, base) == ()
    assert spec_changes(base, other) == (
        'engine.kernels: "vllm/vllm-openai:latest" \u2192 "tuned"',
        "measurement.repeats: 2 \u2192 5",
    )


def test_page_shows_each_configs_spec_and_what_tuned_changed(seed_path):
    view = result_view(ResultFile.model_validate(full_mode_data(seed_path)), source="r.json")
    tuned = next(v for v in view.configs if v.config.key == "tuned")
    assert tuned.spec_changes is not None
    assert [c.split(":")[0] for c in tuned.spec_changes] == ["engine.kernels", "engine.launch"]
    assert tuned.launch_changes == (
        "+ VLLM_TUNED_CONFIG_FOLDER=/configs/moe",
        "+ --gpu-memory-utilization 0.95",
    )
    text = render_result(
        view, env=make_environment(Path(__file__).parents[2] / "templates"), draw=lambda c, i: ""
    )
    assert text.count('<details class="tw-spec">') == 3
    assert "specs/h100-tuned.spec.yaml" in text
    assert "b2" * 32 in text


def test_launch_changes_show_the_arguments_dropped_and_added():
    assert launch_changes("vllm serve m --block-size 16", "vllm serve m --block-size 16") == ()
    assert launch_changes(
        "vllm serve m --no-enable-prefix-caching --block-size 16",
        "vllm serve m --block-size 32 --enable-chunked-prefill",
    ) == (
        "- --no-enable-prefix-caching",
        "- 16",
        "+ 32 --enable-chunked-prefill",
    )


def test_shared_prefixes_row_shows_only_when_the_workload_has_them(seed_path):
    env = make_environment(REPO / "templates")
    plain = render_result(view_of(seed_data(seed_path)), env=env, draw=lambda c, p: "<svg></svg>")
    assert "Shared prefixes" not in plain
    data = seed_data(seed_path)
    data["workload"]["prefix"] = "4 × 450 tokens; expected prefix-cache hit rate 87.2 %"
    text = render_result(view_of(data), env=env, draw=lambda c, p: "<svg></svg>")
    assert "| Shared prefixes | 4 × 450 tokens; expected prefix-cache hit rate 87.2 % |" in text


def test_reasoning_figures_are_on_the_page_only_when_measured(seed_path):
    env = make_environment(REPO / "templates")
    plain = render_result(view_of(seed_data(seed_path)), env=env, draw=lambda c, p: "<svg></svg>")
    assert "first answer token" not in plain
    data = seed_data(seed_path)
    first, second = data["configs"][0], data["configs"][1]
    first.update(ttfat_p99_ms=4210.0, reasoning_tokens_pct=62.5, approximate_reasoning_requests=3)
    second.update(ttfat_p99_ms=None, reasoning_tokens_pct=70.0)
    text = render_result(view_of(data), env=env, draw=lambda c, p: "<svg></svg>")
    row = next(line for line in text.splitlines() if "first answer token" in line)
    assert "reported, not judged" in row
    assert "4,210 ms" in row
    assert "unbounded" in row
    assert row.rstrip().endswith("— |")  # the third config streamed no reasoning
    share = next(line for line in text.splitlines() if line.startswith("| Reasoning tokens"))
    assert "62.5 %" in share
    assert "approximate: 3 requests counted from chunks" in share


def test_prefix_hits_per_probe_and_beside_what_the_workload_expects(seed_path):
    env = make_environment(REPO / "templates")
    data = seed_data(seed_path)
    first, second = data["configs"][0], data["configs"][1]
    probe = {
        "phase": "search",
        "rate_rps": 4.0,
        "window_s": 60.0,
        "goodput_tok_s": 100.0,
        "ttft_p99_ms": 900.0,
        "tpot_p99_ms": 30.0,
    }
    first["probes"] = [{**probe, "slo_pass": True, "prefix_cache_hit_rate_pct": 88.24}]
    second["probes"] = [{**probe, "slo_pass": False}]
    first["engine_telemetry"] = {"prefix_cache_hit_rate_pct": 87.5}
    first["prefix_expected_hit_rate_pct"] = 90.0
    second["prefix_expected_hit_rate_pct"] = 90.0
    text = render_result(view_of(data), env=env, draw=lambda c, p: "<svg></svg>")
    lines = text.splitlines()
    head = next(line for line in lines if line.strip().startswith("| Config | Phase"))
    assert head.rstrip().endswith("| Prefix-cache hits |")
    rows = [line for line in lines if "| search |" in line]
    assert rows[0].rstrip().endswith("| 88.2 % |")  # one decimal
    assert rows[1].rstrip().endswith("| not measured |")
    engine = next(line for line in lines if line.startswith("| Engine: prefix-cache hit rate"))
    assert "87.5 % (the workload's construction: 90.0 %)" in engine
    assert "not measured (the workload's construction: 90.0 %)" in engine
    # no probe measured it: no column
    del first["probes"][0]["prefix_cache_hit_rate_pct"]
    plain = render_result(view_of(data), env=env, draw=lambda c, p: "<svg></svg>")
    assert "Prefix-cache hits" not in plain


def test_the_calibration_row_shows_only_when_a_config_was_calibrated(seed_path):
    env = make_environment(REPO / "templates")
    plain = render_result(view_of(seed_data(seed_path)), env=env, draw=lambda c, p: "<svg></svg>")
    assert "calibrated before the run" not in plain
    data = seed_data(seed_path)
    data["configs"][0]["client_calibration"] = "ceiling 80 req/s, 8,000 events/s"
    text = render_result(view_of(data), env=env, draw=lambda c, p: "<svg></svg>")
    row = next(line for line in text.splitlines() if "calibrated before the run" in line)
    assert "ceiling 80 req/s, 8,000 events/s" in row
    assert "not calibrated" in row  # the other configs


# -- capacity with no estimate ---------------------------------------------------------------------


def test_a_capacity_with_no_steady_pass_says_why(seed_path):
    from tests.result_factories import capacity_mode_data

    data = capacity_mode_data(seed_path)
    config = data["configs"][0]
    config.update({"slo_capacity_rps": None, "slo_capacity_ci_rps": None})
    config["capacity_fits"] = [
        {"slo": "ttft", "method": "above_all", "lower_bound_rps": 19.53},
        {"slo": "tpot", "method": "below_all", "upper_bound_rps": 16.2, "short_of_steady": 3},
    ]
    view = view_of(data)
    (first,) = [c for c in view.configs if c.config.key == config["key"]]
    assert first.capacity_bound == (
        "unknown: no probe met the SLO in steady state (3 left out, short of or over it); the"
        " lowest failing rate was 16.20 req/s"
    )
    config["capacity_fits"][1]["short_of_steady"] = 0
    (again,) = [c for c in view_of(data).configs if c.config.key == config["key"]]
    assert again.capacity_bound == "under 16.20 req/s (no probe met the SLO)"
