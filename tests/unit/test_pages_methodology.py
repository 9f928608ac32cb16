"""The methodology page is made of the modules' own docstrings and tables."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from tokenwatt import gpus, policy
from tokenwatt.errors import TokenwattError
from tokenwatt.pages.methodology import SECTIONS, methodology_sections, render_methodology
from tokenwatt.pages.render import make_environment

REPO = Path(__file__).resolve().parents[2]


def test_every_listed_module_gives_its_section():
    sections = methodology_sections()
    assert [(s.title, s.module) for s in sections] == list(SECTIONS)
    for section in sections:
        assert section.body.strip()


def test_policy_section_shows_the_policy_table():
    section = next(s for s in methodology_sections() if s.module == "tokenwatt.policy")
    assert section.table is not None
    assert [row[0] for row in section.table.rows] == [r["rule"] for r in policy.describe()]
    assert ("window_s", "measurement window of each confirmation repeat ≥ 300 s") in (
        section.table.rows
    )
    assert "`POLICY`" in section.body  # the Sphinx role became Markdown code


def test_bandwidth_table_lists_every_preset():
    section = next(s for s in methodology_sections() if s.module == "tokenwatt.gpus")
    assert section.table is not None
    assert len(section.table.rows) == len(gpus.GPU_PRESETS)
    assert section.table.rows[0][:2] == ("NVIDIA H100 80GB HBM3", "3.35 TB/s")


def test_a_module_that_cannot_be_imported_fails_loudly():
    with pytest.raises(TokenwattError, match=r"'Sweep': cannot import tokenwatt\.no_such_module"):
        methodology_sections([("Sweep", "tokenwatt.no_such_module")])


def test_a_module_without_docstring_fails(monkeypatch):
    monkeypatch.setitem(sys.modules, "tw_undocumented", types.ModuleType("tw_undocumented"))
    with pytest.raises(TokenwattError, match="tw_undocumented has no module docstring"):
        methodology_sections([("Nothing", "tw_undocumented")])


def test_rendered_page_has_a_heading_per_section_and_the_source():
    text = render_methodology(env=make_environment(REPO / "templates"))
    for title, module in SECTIONS:
        assert f"\n## {title}\n" in "\n" + text
        assert f"<code>{module}</code>" in text
    assert "| window&#95;s | measurement window" in text
