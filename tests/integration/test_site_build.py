"""The real site: ``mkdocs build --strict`` with the tokenwatt plugin, and assertions on its HTML."""

from __future__ import annotations

import json
import re
import resource
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.html_dom import Node, parse
from tests.result_factories import full_mode_data, hostile_data, seed_data
from tests.site_build import (
    REPO,
    build_site,
    mkdocs_build,
    session_cache,
    write_config,
    write_results,
)
from tokenwatt.pages.render import fmt_number

SEED_PAGE = "results/h100-qwen3-30b-a3b-moe-kernel-tuning/index.html"
FULL_PAGE = "results/h100-qwen3-30b-a3b-moe-full/index.html"
HOSTILE_PAGE = "results/hostile-labels/index.html"
QUICK_TITLE = "Quick mode — validation only, not for publishing"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory, seed_path) -> Path:
    """The site built from the seed, a full-mode result and a result full of markup."""
    return build_site(
        tmp_path_factory.mktemp("site"),
        {
            "h100-qwen3-30b-a3b-moe-kernel-tuning.json": seed_data(seed_path),
            "full.json": full_mode_data(seed_path),
            "hostile.json": hostile_data(seed_path),
        },
    )


def page(site: Path, path: str) -> Node:
    return parse((site / path).read_text(encoding="utf-8"))


def article(site: Path, path: str) -> Node:
    return page(site, path).find("article")


def section_after(doc: Node, heading_id: str) -> list[Node]:
    """The elements after an h2 up to the next h2."""
    heading = doc.find("h2", id=heading_id)
    out = []
    for node in heading.following():
        if node.tag == "h2":
            break
        out.append(node)
    return out


# -- the seed: flagged, every figure with its unit ------------------------------------------------


def test_seed_page_opens_with_the_quick_mode_flag(site):
    doc = article(site, SEED_PAGE)
    first = [n for n in doc.children if isinstance(n, Node) and n.tag not in ("a",)]
    assert first[0].tag == "h1"
    flag = first[1]
    assert {"admonition", "danger"} <= flag.classes()
    assert flag.find("p", cls="admonition-title").words() == QUICK_TITLE
    rules = [li.words() for li in flag.find_all("li")]
    assert [r.split(":")[0] for r in rules] == [
        "window_s",
        "warmup_s",
        "repeats",
        "accuracy_questions",
    ]
    assert "is 120 s, the minimum is 300 s" in rules[0]
    assert "is 2, the minimum is 3" in rules[2]
    assert "is 50, the minimum is 200" in rules[3]
    assert "whatever its status field says (here: published)" in flag.words()
    assert doc.find("span", cls="tw-badge--bad").words() == "not publishable: breaks the policy"


def test_seed_page_values_have_units(site):
    text = article(site, SEED_PAGE).words()
    for expected in [
        "4,515.0 tok/s",
        "4,522.8 tok/s",
        "4,516.4 tok/s",
        "338 ms",
        "44.2 ms",
        "42.3 ms",
        "56.3 %",
        "0.623 kW",
        "0.641 kW",
        "sw_power_cap: 180 samples",
        "96 %",
        "2 of 2",
        "p99 TTFT ≤ 2,000 ms, p99 TPOT ≤ 50 ms",
        "3.35 TB/s per GPU",
        "1 Hz",
        "Variance band: ± 0.70 %",
        "Fleet of 64 cards",
        "+0.17 % (computed)",
        "7.247 tok/J (computed)",
        "warm-up 45 s, window 120 s, 2 repeat(s) per config",
        "a config may lose at most 1 pts against the baseline",
    ]:
        assert expected in text, expected


def test_every_config_cell_has_a_unit_or_says_why_not(site):
    table = article(site, SEED_PAGE).find("div", cls="tw-configs").find("table")
    rows = {
        tr.find_all("td")[0].words(): [td.words() for td in tr.find_all("td")[1:]]
        for tr in table.find("tbody").find_all("tr")
    }
    units = {
        "SLO goodput": "tok/s",
        "p99 TTFT": "ms",
        "p99 TPOT": "ms",
        "MBU (of rated bandwidth)": "%",
        "Node power": "kW",
        "Tokens per joule": "tok/J",
        "Accuracy score": "%",
        "Accuracy Δ vs baseline": "pts",
        "Accuracy spread over seeds": "pts",
        "Throttling (samples per reason)": "samples",
    }
    for row, unit in units.items():
        assert len(rows[row]) == 3
        for cell in rows[row]:
            assert unit in cell, (row, cell)


def test_seed_caveats_and_reproduce_commands_verbatim(site, seed_path):
    seed = seed_data(seed_path)
    doc = article(site, SEED_PAGE)
    caveats = [li.words() for n in section_after(doc, "not-covered") for li in n.find_all("li")]
    assert caveats == seed["not_covered"]
    blocks = [
        code.text()
        for n in section_after(doc, "reproduce")
        for code in ([n] if n.tag == "pre" else n.find_all("pre"))
    ]
    assert "\n\n".join(blocks) == seed["reproduce"]
    assert len(blocks) == 2  # the three measure lines, then the report line


def test_full_spec_is_in_a_collapsed_block(site, seed_path):
    doc = article(site, SEED_PAGE)
    details = doc.find("details", cls="tw-spec")
    assert "open" not in details.attrs
    assert json.loads(details.find("code").text()) == seed_data(seed_path)["spec"]


def test_seed_page_draws_its_goodput_chart(site):
    figures = article(site, SEED_PAGE).find_all("figure", cls="tw-chart")
    assert [f.attrs["id"] for f in figures] == ["chart-goodput"]
    svg = figures[0].find("svg")
    assert int(svg.attrs["width"]) > 300
    assert "No probe history in this result file" in article(site, SEED_PAGE).words()


# -- the full-mode result: published, every chart ------------------------------------------------


def test_full_result_page(site, seed_path):
    data = full_mode_data(seed_path)
    doc = article(site, FULL_PAGE)
    assert not doc.find_all(cls="danger")
    assert QUICK_TITLE not in doc.words()
    assert doc.find("span", cls="tw-badge--ok").words() == "publishable: meets the policy"
    figures = [f.attrs["id"] for f in doc.find_all("figure", cls="tw-chart")]
    assert figures == [
        "chart-goodput",
        "chart-ttft",
        "chart-tpot",
        "chart-power",
        "chart-tokens-per-joule",
    ]
    text = doc.words()
    assert data["verdict"]["text"] in text
    assert "Confidence interval of the change: +7.60 % to +9.00 % (Welch t interval, 95 %)" in text
    fleet = data["fleet"]
    goodput_delta = fmt_number(fleet["goodput_delta_tok_s"], "tok/s", digits=1, sign=True)
    assert f"Goodput difference {goodput_delta}" in text
    assert "Energy difference +10,092 kWh per year" in text
    assert "576,900 J (0.160 kWh, counter)" in text
    assert "4,880.0 tok/s, 4,890.0 tok/s, 4,900.0 tok/s" in text
    assert (
        "61 samples in the confirmed windows: min 629.0 W, mean 641.0 W, max 653.0 W, 0 gaps"
        in text
    )
    assert "19.6 req/s" in text
    probes = doc.find("details", cls="info")
    assert "open" not in probes.attrs
    rows = [[td.words() for td in tr.find_all("td")] for tr in probes.find_all("tr")[1:]]
    assert len(rows) == sum(len(c["probes"]) for c in data["configs"])
    assert rows[5][4:] == [
        "386.5 ms / unbounded",
        "44.8 ms / 74.7 ms",
        "4,515.0 tok/s",
        "12 (12 cut by the stop)",
        "fail (stopped early)",
        "0.4 ms",
    ]
    # only the stopped probes say so
    stopped = sum(1 for c in data["configs"] for p in c["probes"] if p.get("stopped_early"))
    assert stopped >= 1
    assert sum(1 for row in rows if row[-2] == "fail (stopped early)") == stopped
    assert sum(1 for row in rows if row[-2] == "fail") >= 1


# -- the index -----------------------------------------------------------------------------------


def index_rows(site: Path, heading_id: str) -> list[list[str]]:
    doc = article(site, "index.html")
    rows = []
    for node in section_after(doc, heading_id):
        for tr in node.find_all("tr"):
            cells = tr.find_all("td")
            if cells:
                rows.append([td.words() for td in cells])
    return rows


def test_index_lists_the_seed_only_among_unpublished(site):
    published = index_rows(site, "published-results")
    unpublished = index_rows(site, "quick-mode-and-drafts-not-for-publishing")
    assert [r[0] for r in published] == [
        "Full mode: tuned vs default fused-MoE kernels, Qwen3-30B-A3B FP8 on 1× H100 SXM"
    ]
    titles = [r[0] for r in unpublished]
    assert "Tuned vs default fused-MoE kernels: Qwen3-30B-A3B FP8 on 1× H100 SXM" in titles
    assert len(titles) == 2
    assert index_rows(site, "simulated-not-measurements-of-real-hardware") == []
    full = published[0]
    assert full[1:] == [
        "1 × NVIDIA H100 80GB HBM3",
        "Qwen3-30B-A3B-FP8",
        "vLLM 0.31.0",
        "4,890.0 tok/s (tuned)",
        "7.629 tok/J",
        "Tuned kernels raised SLO goodput by 8.3 %, beyond the 0.9 % variance band.",
        "2026-10-08",
    ]
    doc = article(site, "index.html")
    unpublished_flag = [
        n
        for n in section_after(doc, "quick-mode-and-drafts-not-for-publishing")
        if "admonition" in n.classes()
    ]
    assert unpublished_flag
    assert "danger" in unpublished_flag[0].classes()


def test_index_links_reach_the_pages(site):
    doc = article(site, "index.html")
    links = [
        a.attrs["href"] for a in doc.find_all("a") if a.attrs.get("href", "").startswith("results/")
    ]
    assert len(links) == 3
    for href in links:
        assert (site / href / "index.html").is_file(), href


def test_index_tables_are_sortable_with_local_script(site):
    doc = page(site, "index.html")
    assert len(doc.find("article").find_all("div", cls="tw-sortable")) == 2
    scripts = [s.attrs["src"] for s in doc.find_all("script") if "src" in s.attrs]
    assert "javascripts/tablesort.js" in scripts
    assert (site / "javascripts" / "tablesort.js").is_file()


# -- methodology ---------------------------------------------------------------------------------


def test_methodology_page_shows_the_policy_table(site):
    doc = article(site, "methodology/index.html")
    heading = doc.find("h2", id="publishing-policy")
    table = next(n for n in heading.following() if n.tag == "div" or n.tag == "table")
    rows = [[td.words() for td in tr.find_all("td")] for tr in table.find_all("tr")[1:]]
    assert ["window_s", "measurement window of each confirmation repeat ≥ 300 s"] in rows
    assert ["repeats", "confirmation repeats at the found rate ≥ 3"] in rows
    assert doc.find("h2", id="accuracy-gate")
    assert doc.find("h2", id="rated-memory-bandwidth")


# -- offline and escaped -------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["index.html", SEED_PAGE, FULL_PAGE, "methodology/index.html"])
def test_pages_load_nothing_from_the_network(site, path):
    doc = page(site, path)
    for node in doc.iter():
        for attr in ("src", "href"):
            value = node.attrs.get(attr, "")
            if node.tag == "a" or not value:
                continue
            assert not value.startswith(("http:", "https:", "//")), (node.tag, value)
    assert "fonts.googleapis.com" not in (site / path).read_text(encoding="utf-8")


def test_markup_in_a_result_shows_as_text(site):
    doc = page(site, HOSTILE_PAGE)
    body = doc.find("article")
    assert body.find("h1").words() == "Hostile </title><script>alert('title')</script> *title*"
    assert not body.find_all("script")
    assert not body.find_all("img")
    assert not body.find_all("b")
    for node in doc.iter():
        assert not any(k.startswith("on") for k in node.attrs), (node.tag, node.attrs)
        assert not node.attrs.get("href", "").startswith("javascript"), node.attrs
    text = body.words()
    assert "<script>alert('label')</script> (baseline)" in text
    assert "tuned | pipe `code` _under_ (tuned)" in text
    assert "<img src=x onerror=alert(1)>" in text
    assert "Summary with <b>bold</b> and [a link](javascript:alert(1)) {: onclick=x}" in text
    assert "# not a heading - not a list" in text
    caveats = [li.words() for n in section_after(body, "not-covered") for li in n.find_all("li")]
    assert caveats == ["<script>alert('caveat')</script>", "![img](http://example.com/x.png)"]
    code = [n.text() for n in section_after(body, "reproduce") if n.tag == "pre"]
    assert code == ["echo '<script>alert(1)</script>' && echo done\n```\n</code></pre><b>x</b>"]
    assert doc.find("title").text() == (
        "Hostile </title><script>alert('title')</script> *title* - tokenwatt results"
    )
    for script in doc.find_all("script"):
        assert "alert" not in script.text()


# -- failures ------------------------------------------------------------------------------------


def test_strict_publishing_fails_on_the_seed(tmp_path, seed_path):
    results = write_results(tmp_path / "results", {"seed.json": seed_data(seed_path)})
    config = write_config(tmp_path, results)
    done = mkdocs_build(config, env={"TOKENWATT_STRICT_PUBLISH": "1"})
    assert done.returncode != 0
    assert "seed.json: status is 'published' but it breaks the publishing policy" in done.stderr
    assert "window_s: measurement window of each confirmation repeat is 120 s" in done.stderr
    assert not (tmp_path / "public" / "index.html").exists()
    # The same from the plugin option.
    config = write_config(tmp_path, results, strict_publish=True)
    done = mkdocs_build(config)
    assert done.returncode != 0
    assert "strict publishing is on" in done.stderr


def test_strict_publishing_passes_publishable_and_draft_results(tmp_path, seed_path):
    draft = seed_data(seed_path)
    draft["status"] = "draft"
    results = write_results(
        tmp_path / "results", {"full.json": full_mode_data(seed_path), "draft.json": draft}
    )
    done = mkdocs_build(write_config(tmp_path, results), env={"TOKENWATT_STRICT_PUBLISH": "1"})
    assert done.returncode == 0, done.stderr
    draft_page = parse((tmp_path / "public" / SEED_PAGE).read_text(encoding="utf-8")).find(
        "article"
    )
    assert QUICK_TITLE in draft_page.words()


def test_bad_strict_variable_is_refused(tmp_path, seed_path):
    results = write_results(tmp_path / "results", {"full.json": full_mode_data(seed_path)})
    done = mkdocs_build(write_config(tmp_path, results), env={"TOKENWATT_STRICT_PUBLISH": "maybe"})
    assert done.returncode != 0
    assert "TOKENWATT_STRICT_PUBLISH='maybe': expected 1/true/yes or 0/false/no" in done.stderr


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        (
            lambda d: d["configs"][1].update(goodput_tok_s="fast"),
            "configs[1].goodput_tok_s",
            "number",
        ),
        (
            lambda d: d["slo"].pop("ttft_p99_ms"),
            "slo",
            "needs exactly one of ttft_p99_ms and ttfat_p99_ms",
        ),
        (lambda d: d.update(colour="red"), "colour", "unknown field"),
    ],
)
def test_invalid_result_fails_naming_file_and_field(tmp_path, seed_path, change, field, problem):
    bad = seed_data(seed_path)
    change(bad)
    results = write_results(
        tmp_path / "results", {"good.json": full_mode_data(seed_path), "broken.json": bad}
    )
    done = mkdocs_build(write_config(tmp_path, results))
    assert done.returncode != 0
    assert "broken.json: invalid result" in done.stderr
    assert f"{field}: " in done.stderr
    assert problem in done.stderr
    assert not (tmp_path / "public" / "index.html").exists()


def test_result_that_is_not_json_fails(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "torn.json").write_text('{"id": "x",', encoding="utf-8")
    done = mkdocs_build(write_config(tmp_path, results))
    assert done.returncode != 0
    assert "torn.json: JSON syntax error" in done.stderr


def _file_size_limit(limit_bytes: int) -> Callable[[], None]:
    """A full disk without root: writes past ``limit_bytes`` fail with EFBIG (SIGXFSZ ignored)."""

    def preexec() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return preexec


def test_a_site_that_cannot_be_written_fails_with_one_message(tmp_path, seed_path):
    # mkdocs writes the site itself (the theme's 100 KiB+ scripts first): the OSError would
    # reach the user as mkdocs' traceback; the plugin turns it into one message.
    results = write_results(tmp_path / "results", {"seed.json": seed_data(seed_path)})
    before = (results / "seed.json").read_bytes()
    done = mkdocs_build(write_config(tmp_path, results), preexec=_file_size_limit(64 * 1024))
    said = done.stdout + done.stderr  # mkdocs echoes an abort on stdout
    assert done.returncode == 1, said[-2000:]
    assert "Traceback" not in said
    assert said.count("Aborted: the site could not be written: File too large (") == 1, said
    assert str(tmp_path / "public") in said  # the file mkdocs could not write
    assert (results / "seed.json").read_bytes() == before


def test_two_results_with_one_id_fail(tmp_path, seed_path):
    results = write_results(
        tmp_path / "results", {"a.json": seed_data(seed_path), "b.json": seed_data(seed_path)}
    )
    done = mkdocs_build(write_config(tmp_path, results))
    assert done.returncode != 0
    assert "b.json: id 'h100-qwen3-30b-a3b-moe-kernel-tuning' is also the id of" in done.stderr


def test_missing_methodology_module_fails_the_build(tmp_path, seed_path, monkeypatch, caplog):
    """In-process build: a SECTIONS entry whose module does not exist stops the build."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config
    from mkdocs.exceptions import Abort

    from tokenwatt.pages import methodology

    monkeypatch.setenv("TOKENWATT_CACHE", str(session_cache()))
    monkeypatch.setattr(
        methodology, "SECTIONS", (*methodology.SECTIONS, ("Sweep", "tokenwatt.not_merged_yet"))
    )
    results = write_results(tmp_path / "results", {"full.json": full_mode_data(seed_path)})
    config = load_config(str(write_config(tmp_path, results)))
    with pytest.raises(Abort):
        build(config)
    assert "cannot import tokenwatt.not_merged_yet" in caplog.text


# -- the chart cache ------------------------------------------------------------------------------


CHARTS_LOG = re.compile(r"tokenwatt: charts: (\d+) drawn, (\d+) from the cache in (\S+)")


def test_second_build_reads_the_charts_from_the_cache_and_redraws_a_damaged_one(
    tmp_path, seed_path
):
    cache = tmp_path / "cache"
    results = write_results(tmp_path / "results", {"full.json": full_mode_data(seed_path)})
    config = write_config(tmp_path, results)

    def build() -> tuple[int, int, str]:
        done = mkdocs_build(config, env={"TOKENWATT_CACHE": str(cache)})
        assert done.returncode == 0, done.stderr
        found = CHARTS_LOG.search(done.stderr)
        assert found, done.stderr
        assert found.group(3) == str(cache / "charts")
        return (
            int(found.group(1)),
            int(found.group(2)),
            (tmp_path / "public" / FULL_PAGE).read_text(),
        )

    drawn, cached, cold_page = build()
    entries = sorted((cache / "charts").iterdir())
    assert drawn == len(entries) >= 5
    assert cached == 0
    entries[0].write_text("<svg>cut short")
    drawn_again, cached_again, warm_page = build()
    assert (drawn_again, cached_again) == (1, drawn - 1)
    assert warm_page == cold_page  # the same page, whether drawn or read back
    assert sorted((cache / "charts").iterdir()) == entries
    assert entries[0].read_text().rstrip().endswith("</svg>")


# -- the repository itself -----------------------------------------------------------------------


def test_repository_site_builds_strict_and_flags_the_seed(tmp_path):
    """What a fresh clone gets from `mkdocs build --strict`: the seed, with its flag."""
    clone = tmp_path / "clone"
    for name in ("mkdocs.yml", "site", "templates", "results"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, clone / name)
        else:
            clone.mkdir(exist_ok=True)
            shutil.copy(source, clone / name)
    done = mkdocs_build(clone / "mkdocs.yml")
    assert done.returncode == 0, done.stderr
    seed_pages = list((clone / "public" / "results").glob("*/index.html"))
    assert seed_pages
    for path in seed_pages:
        assert QUICK_TITLE in parse(path.read_text(encoding="utf-8")).find("article").words()


def test_generated_pages_are_not_written_into_the_docs_folder(site):
    assert (site / "results").is_dir()
    written = sorted(p.relative_to(REPO / "site").as_posix() for p in (REPO / "site").rglob("*"))
    assert written == [
        "index.md",
        "javascripts",
        "javascripts/tablesort.js",
        "methodology.md",
        "simulator.md",
        "stylesheets",
        "stylesheets/tokenwatt.css",
    ]
