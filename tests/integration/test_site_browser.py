"""The built site in headless Debian Chromium with no network: screenshot, charts, sorting.

Set TOKENWATT_SCREENSHOT_DIR to keep the screenshots (CI artefacts, or to look at them).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from tests.chromium import Chromium
from tests.result_factories import full_mode_data, hostile_data, seed_data
from tests.site_build import build_site, serve

pytestmark = pytest.mark.slow

SEED_URL = "/results/h100-qwen3-30b-a3b-moe-kernel-tuning/"
FULL_URL = "/results/h100-qwen3-30b-a3b-moe-full/"

# Every chart on the page: its size, and how many items its data-mark groups drew.
CHARTS_JS = """
JSON.stringify([...document.querySelectorAll('figure.tw-chart')].map(f => {
  const svg = f.querySelector('svg');
  const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  const marks = svg ? [...svg.querySelectorAll('g.role-mark')] : [];
  return {
    id: f.id,
    width: box.width,
    height: box.height,
    marks: marks.reduce((n, g) => n + g.children.length, 0),
    drawn: marks.flatMap(g => [...g.children]).filter(e => {
      const b = e.getBBox(); return b.width > 0 || b.height > 0; }).length,
  };
}))
"""


@pytest.fixture(scope="module")
def site_url(tmp_path_factory, seed_path):
    site = build_site(
        tmp_path_factory.mktemp("browser-site"),
        {
            "seed.json": seed_data(seed_path),
            "full.json": full_mode_data(seed_path),
            "hostile.json": hostile_data(seed_path),
        },
    )
    with serve(site) as base:
        yield base


@pytest.fixture(scope="module")
def browser():
    with Chromium() as chromium:
        yield chromium


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def keep(path: Path) -> None:
    folder = os.environ.get("TOKENWATT_SCREENSHOT_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(folder) / path.name)


def assert_offline(page, base: str) -> None:
    assert page.requests, "the page made no request at all"
    outside = [u for u in page.requests if not u.startswith((base + "/", "data:", "blob:"))]
    assert outside == [], f"requests that left the machine: {outside}"
    assert page.failed == [], f"failed requests: {page.failed}"
    assert page.console_errors == [], page.console_errors


def test_seed_page_screenshot_with_flag_and_chart(browser, site_url, tmp_path):
    page = browser.open(site_url + SEED_URL)
    assert_offline(page, site_url)
    flag = page.evaluate(
        """(() => { const a = document.querySelector('article .admonition.danger');
        const r = a.getBoundingClientRect();
        return {title: a.querySelector('.admonition-title').textContent.trim(),
                top: r.top, height: r.height,
                color: getComputedStyle(a).borderColor}; })()"""
    )
    assert flag["title"] == "Quick mode — validation only, not for publishing"
    assert 0 < flag["top"] < 300, "the flag must be at the top of the page"
    assert flag["height"] > 100
    charts = json.loads(page.evaluate(CHARTS_JS))
    assert [c["id"] for c in charts] == ["chart-goodput"]
    goodput = charts[0]
    assert goodput["width"] > 300
    assert goodput["height"] > 150
    # band + baseline rule + one dot per config
    assert goodput["marks"] == 5
    assert goodput["drawn"] == 5
    copy_buttons = page.evaluate(
        "document.querySelectorAll('article pre > code').length + ':' +"
        " document.querySelectorAll('article .md-code__button[data-md-type=copy],"
        " article .md-clipboard').length"
    )
    assert copy_buttons == "3:3", "each code block (2 reproduce, 1 spec) needs a copy button"
    shot = page.screenshot(tmp_path / "seed-page.png")
    keep(shot)
    width, height = png_size(shot)
    assert width == 1280
    assert height > 2000
    assert shot.stat().st_size > 50_000


def test_full_page_draws_every_chart(browser, site_url, tmp_path):
    page = browser.open(site_url + FULL_URL)
    assert_offline(page, site_url)
    charts = json.loads(page.evaluate(CHARTS_JS))
    assert [c["id"] for c in charts] == [
        "chart-goodput",
        "chart-ttft",
        "chart-tpot",
        "chart-power",
        "chart-tokens-per-joule",
    ]
    for chart in charts:
        assert chart["width"] > 300, chart
        assert chart["drawn"] >= 3, chart
    assert page.evaluate("document.querySelectorAll('article .admonition.danger').length") == 0
    keep(page.screenshot(tmp_path / "full-page.png"))


def test_index_table_sorts_numbers_as_numbers(browser, site_url, tmp_path):
    page = browser.open(site_url + "/")
    assert_offline(page, site_url)
    first_titles_js = """(() => {
      const table = document.querySelectorAll('.tw-sortable table')[1];
      return [...table.tBodies[0].rows].map(r => r.cells[0].textContent.trim().slice(0, 7));
    })()"""
    click_js = """(() => {
      const table = document.querySelectorAll('.tw-sortable table')[1];
      const th = [...table.tHead.rows[0].cells].find(c => c.textContent.includes('Headline'));
      th.click(); return th.getAttribute('aria-sort'); })()"""
    assert page.evaluate(first_titles_js) == ["Hostile", "Tuned v"]
    # Ascending: 999.5 tok/s before 4,522.8 tok/s (as text, "4" would sort before "9").
    assert page.evaluate(click_js) == "ascending"
    assert page.evaluate(first_titles_js) == ["Hostile", "Tuned v"]
    assert page.evaluate(click_js) == "descending"
    assert page.evaluate(first_titles_js) == ["Tuned v", "Hostile"]
    keep(page.screenshot(tmp_path / "index.png"))


def test_hostile_page_runs_no_script_from_the_result(browser, site_url):
    page = browser.open(site_url + "/results/hostile-labels/")
    assert_offline(page, site_url)
    assert page.evaluate("document.title").startswith("Hostile </title><script>")
    inline = page.evaluate(
        "[...document.scripts].filter(s => s.textContent.includes('alert')).length"
    )
    assert inline == 0
    assert page.evaluate("document.querySelectorAll('article img, article b').length") == 0
