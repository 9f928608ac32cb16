"""The chart cache: a chart is drawn once per spec and renderer; a bad entry costs a redraw only."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytest

from tests.result_factories import full_mode_result
from tokenwatt import store
from tokenwatt.pages.chart_cache import ChartCache, chart_cache_dir
from tokenwatt.pages.charts import Chart, charts_for, draw_svg, to_svg


@pytest.fixture(scope="module")
def charts(seed_path) -> list[Chart]:
    return charts_for(full_mode_result(seed_path))


class Counting:
    """vl-convert, counted."""

    def __init__(self) -> None:
        self.drawn: list[str] = []

    def __call__(self, chart: Chart) -> str:
        self.drawn.append(chart.key)
        return draw_svg(chart)


def test_a_chart_is_drawn_once_and_read_back_by_the_next_build(tmp_path, charts):
    chart = charts[0]
    draw = Counting()
    first = ChartCache(tmp_path, draw=draw).svg(chart)
    again = ChartCache(tmp_path, draw=draw)  # the next build: a new cache on the same folder
    assert again.svg(chart) == first
    assert draw.drawn == [chart.key]
    assert (again.hits, again.misses) == (1, 0)
    assert len(list(tmp_path.iterdir())) == 1
    # Through the cache the page gets exactly what drawing gives it.
    assert to_svg(chart, id_prefix="p", draw=again.svg) == to_svg(chart, id_prefix="p")


def test_changed_data_or_a_new_renderer_is_drawn_again(tmp_path, charts):
    chart = charts[0]
    draw = Counting()
    ChartCache(tmp_path, draw=draw).svg(chart)
    spec = copy.deepcopy(chart.spec)
    name, rows = next(iter(spec["datasets"].items()))
    rows[0] = {**rows[0], "changed": 1}
    changed = Chart(key=chart.key, title=chart.title, caption=chart.caption, spec=spec)
    ChartCache(tmp_path, draw=draw).svg(changed)
    ChartCache(tmp_path, draw=draw, renderer="0.0.0-other").svg(chart)
    assert draw.drawn == [chart.key] * 3
    assert len(list(tmp_path.iterdir())) == 3


def _truncate(path):
    path.write_text(path.read_text()[:200])


def _alter(path):
    path.write_text(path.read_text().replace("<svg", "<svg data-x='1'", 1))


def _garbage(path):
    path.write_bytes(b"\xff\xfe\x00not an svg")


def _empty(path):
    path.write_text("")


@pytest.mark.parametrize("damage", [_truncate, _alter, _garbage, _empty])
def test_a_damaged_entry_is_drawn_again_and_replaced(tmp_path, charts, damage, caplog):
    chart = charts[0]
    draw = Counting()
    cache = ChartCache(tmp_path, draw=draw)
    good = cache.svg(chart)
    damage(cache.path(chart))
    with caplog.at_level(logging.INFO):
        assert ChartCache(tmp_path, draw=draw).svg(chart) == good
    assert "drawing it again" in caplog.text
    assert len(draw.drawn) == 2
    # Replaced: the build after reads it without drawing.
    last = ChartCache(tmp_path, draw=draw)
    assert last.svg(chart) == good
    assert (last.hits, len(draw.drawn)) == (1, 2)


def test_an_entry_that_is_a_folder_is_drawn_and_not_fatal(tmp_path, charts, caplog):
    chart = charts[0]
    cache = ChartCache(tmp_path)
    cache.path(chart).mkdir()
    with caplog.at_level(logging.INFO):
        svg = cache.svg(chart)
    assert svg.rstrip().endswith("</svg>")
    assert cache.misses == 1


def test_an_unwritable_cache_warns_once_and_the_charts_are_still_drawn(tmp_path, charts, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    draw = Counting()
    cache = ChartCache(blocker / "charts", draw=draw)
    with caplog.at_level(logging.INFO):
        for chart in charts[:3]:
            assert cache.svg(chart).rstrip().endswith("</svg>")
    assert len(draw.drawn) == 3
    assert caplog.text.count("not kept") == 1


def test_the_cache_lives_in_the_user_cache_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("TOKENWATT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert chart_cache_dir() == tmp_path / "xdg" / "tokenwatt" / "charts"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # the XDG rule: ignored
    assert store.cache_dir() == Path.home() / ".cache" / "tokenwatt"
    monkeypatch.setenv("TOKENWATT_CACHE", str(tmp_path / "mine"))
    assert chart_cache_dir() == tmp_path / "mine" / "charts"
