"""Golden tests of the page renderer, without MkDocs: the Markdown of each page, byte for byte.

Charts are drawn by a stand-in (their SVG depends on vl-convert's version and fonts; the chart
tests and the site tests check the real drawing). After an intended change, regenerate with
``TOKENWATT_UPDATE_GOLDEN=1 .venv/bin/pytest tests/golden`` and review the diff.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from tests.result_factories import capacity_mode_data, full_mode_data, hostile_data, seed_data
from tokenwatt.pages import charts
from tokenwatt.pages.render import make_environment, render_index, render_result, result_view
from tokenwatt.schema.result import ResultFile

GOLDEN = Path(__file__).parent
REPO = GOLDEN.parents[1]
UPDATE = os.environ.get("TOKENWATT_UPDATE_GOLDEN") == "1"


def draw_stub(chart: charts.Chart, id_prefix: str) -> str:
    return f'<svg class="tw-stub" data-chart="{chart.key}" data-id="{id_prefix}"></svg>'


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=f"golden/{name}",
                tofile="rendered",
            )
        )
        pytest.fail(f"{name} differs from the golden file:\n{diff}")


@pytest.fixture(scope="module")
def views(seed_path):
    data = {
        "seed": seed_data(seed_path),
        "full": full_mode_data(seed_path),
        "hostile": hostile_data(seed_path),
        "capacity": capacity_mode_data(seed_path),
    }
    return {
        name: result_view(ResultFile.model_validate(d), source=f"results/{name}.json")
        for name, d in data.items()
    }


@pytest.fixture(scope="module")
def env():
    return make_environment(REPO / "templates")


@pytest.mark.parametrize("name", ["seed", "full", "hostile", "capacity"])
def test_result_page_matches_golden(name, views, env):
    check_golden(f"{name}.md", render_result(views[name], env=env, draw=draw_stub))


def test_index_matches_golden(views, env):
    check_golden("index.md", render_index(list(views.values()), env=env))


def test_golden_seed_page_carries_the_quick_mode_flag_first(views, env):
    text = render_result(views["seed"], env=env, draw=draw_stub)
    lines = text.splitlines()
    assert lines[0].startswith("# Tuned vs default fused-MoE kernels")
    assert lines[2] == '!!! danger "Quick mode — validation only, not for publishing"'
