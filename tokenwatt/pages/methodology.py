"""The methodology page, generated from the code's own definitions.

Each section is the docstring of the module that implements the thing it defines, so the page
cannot drift from the code: :data:`SECTIONS` is the one table of (title, module). A module in it
that cannot be imported, or that has no docstring, fails the build: a methodology page that
silently lost a section would mislead every reader of every result.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jinja2
from markupsafe import Markup

from tokenwatt.errors import TokenwattError

__all__ = ["SECTIONS", "MethodologySection", "Table", "methodology_sections", "render_methodology"]

SECTIONS: tuple[tuple[str, str], ...] = (
    ("Request timings, failed requests and the SLO", "tokenwatt.metrics"),
    ("Probe", "tokenwatt.load.probe"),
    ("Self-calibration of the load generator", "tokenwatt.load.calibrate"),
    ("Workload: lengths and prompts", "tokenwatt.load.workload"),
    ("Shared prefixes", "tokenwatt.load.prefix"),
    ("Multi-turn sessions", "tokenwatt.load.session"),
    ("Probe audits", "tokenwatt.audits"),
    ("Sweep", "tokenwatt.sweep"),
    ("Adaptive sweep", "tokenwatt.adaptive"),
    ("Resuming an interrupted run", "tokenwatt.resume"),
    ("SLO capacity", "tokenwatt.capacity"),
    ("Figures of a configuration", "tokenwatt.figures"),
    ("Memory-bandwidth utilisation (MBU)", "tokenwatt.mbu"),
    ("Power and energy", "tokenwatt.energy"),
    ("Power from several nodes", "tokenwatt.power.nodes"),
    ("Accuracy gate", "tokenwatt.accuracy"),
    ("Verdict", "tokenwatt.compare"),
    ("Several candidates", "tokenwatt.multiplicity"),
    ("Planning a run in virtual time", "tokenwatt.plan"),
    ("Rated memory bandwidth", "tokenwatt.gpus"),
    ("Impossible results", "tokenwatt.schema.limits"),
    ("Publishing policy", "tokenwatt.policy"),
)
"""(section title, module whose docstring defines it), in page order."""


@dataclass(frozen=True)
class Table:
    """A table under a section's text: header cells and rows of cells (plain text, escaped)."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class MethodologySection:
    """One section of the page."""

    title: str
    module: str
    body: Markup
    """The module docstring as Markdown (trusted: it is the project's own code)."""
    table: Table | None


def _policy_table() -> Table:
    from tokenwatt import policy

    return Table(
        headers=("Rule", "A publishable result needs"),
        rows=tuple((row["rule"], row["requirement"]) for row in policy.describe()),
    )


def _bandwidth_table() -> Table:
    from tokenwatt.gpus import GPU_PRESETS

    return Table(
        headers=("Accelerator", "Rated memory bandwidth", "Memory", "Source"),
        rows=tuple(
            (p.name, f"{p.mem_bw_tbs:g} TB/s", f"{p.memory_gb:g} GB", p.source) for p in GPU_PRESETS
        ),
    )


# Tables drawn from a module's own data, under that module's section.
_TABLES: dict[str, Callable[[], Table]] = {
    "tokenwatt.policy": _policy_table,
    "tokenwatt.gpus": _bandwidth_table,
}

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
_LITERAL_INTRO = re.compile(r"::$", re.MULTILINE)


def _docstring_markdown(text: str) -> str:
    """A Google-style module docstring as Markdown: Sphinx roles become code, ``::`` a colon."""
    text = inspect.cleandoc(text)
    text = _ROLE.sub(lambda m: f"`{m.group(1)}`", text)
    return _LITERAL_INTRO.sub(":", text)


def methodology_sections(
    sections: Sequence[tuple[str, str]] = SECTIONS,
) -> list[MethodologySection]:
    """Import each module of the table and take its docstring.

    Raises:
        TokenwattError: a module cannot be imported or has no docstring; the message names the
            section and the module.
    """
    out: list[MethodologySection] = []
    for title, module_name in sections:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise TokenwattError(
                f"methodology section {title!r}: cannot import {module_name}: {exc}. The page is"
                " generated from that module's docstring: fix the module, or its entry in"
                " SECTIONS (tokenwatt/pages/methodology.py)."
            ) from exc
        doc = module.__doc__
        if not doc or not doc.strip():
            raise TokenwattError(
                f"methodology section {title!r}: {module_name} has no module docstring; the"
                " methodology page takes the definition from it."
            )
        make_table = _TABLES.get(module_name)
        out.append(
            MethodologySection(
                title=title,
                module=module_name,
                body=Markup(_docstring_markdown(doc)),
                table=make_table() if make_table is not None else None,
            )
        )
    return out


def render_methodology(
    *, env: jinja2.Environment, sections: Sequence[tuple[str, str]] = SECTIONS
) -> str:
    """The Markdown of the generated part of the methodology page."""
    return env.get_template("methodology.md.j2").render(sections=methodology_sections(sections))
