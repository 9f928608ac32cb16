"""Result files to Markdown pages, through the jinja2 templates in ``templates/`` (pure).

Everything a result file says is untrusted text: a label could hold ``<script>`` or Markdown that
makes a link. The template environment escapes every value it prints (:func:`md_escape`: HTML
special characters, and the characters Markdown would act on, as numeric character references
that show as themselves), so only the templates and this module write markup. Numbers go through
:func:`fmt_number`, which always writes the unit.

Publishability is recomputed here with :func:`tokenwatt.policy.check_result`, never read from the
``status`` field: a result that breaks the policy is flagged on its page and listed apart from the
published ones, whatever its status says.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import shlex
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import jinja2
from markupsafe import Markup

from tokenwatt import compare, figures, policy
from tokenwatt.multiplicity import RankRow, rank_by_change
from tokenwatt.pages import charts as charts_mod
from tokenwatt.schema.engine import EngineConfig
from tokenwatt.schema.result import ConfigResult, ResultFile
from tokenwatt.schema.spec import Spec

__all__ = [
    "ConfigView",
    "IndexSection",
    "ResultView",
    "SectionKey",
    "SvgDrawer",
    "engine_changes",
    "fmt_number",
    "index_sections",
    "launch_changes",
    "make_environment",
    "md_escape",
    "render_index",
    "render_result",
    "result_page_uri",
    "result_view",
    "spec_changes",
]

SectionKey = Literal["published", "unpublished", "simulated"]
"""Where a result is listed on the index."""

SvgDrawer = Callable[[charts_mod.Chart, str], str]
"""Draws a chart as SVG, given the chart and an id prefix unique in the page."""

# Characters that HTML or Markdown (with this site's extensions) would act on. Each becomes a
# numeric character reference, which Markdown passes through and the browser shows as the
# character itself: `[x](javascript:..)` cannot become a link, `|` cannot split a table cell,
# `{: onclick=..}` cannot become an attribute, `<script>` cannot become an element.
_ESCAPES = {ord(c): f"&#{ord(c)};" for c in "&<>\"'\\`*_{}[]|#!+"}
# A value that begins a line could start a list with these ("- x", "1. x").
_LIST_START = re.compile(r"^(-|\d+\.)(?=\s|$)")


def md_escape(value: object, *, inline: bool = True) -> Markup:
    """Text that shows as itself in Markdown and in raw HTML.

    Args:
        value: any value; it is turned into text with ``str``.
        inline: fold line breaks into spaces, so the text cannot start a Markdown block (a
            heading, a list, a table). With ``False`` line breaks are kept (for ``<pre>``).
    """
    text = str(value)
    if inline:
        text = " ".join(text.split())
    escaped = text.translate(_ESCAPES)
    escaped = _LIST_START.sub(
        lambda m: m.group(1).replace("-", "&#45;").replace(".", "&#46;"), escaped
    )
    return Markup(escaped)


def _decimals(value: float) -> int:
    """Decimals needed to write a float exactly as the file has it (at most 6)."""
    text = repr(float(value))
    if "e" in text or "." not in text:
        return 0 if "e" not in text else 6
    fraction = text.split(".", 1)[1].rstrip("0")
    return min(len(fraction), 6)


def fmt_number(
    value: float | None,
    unit: str = "",
    *,
    digits: int | None = None,
    sign: bool = False,
) -> Markup:
    """A number with thousands separators and its unit; "—" when there is none.

    Args:
        value: the number; ``None`` means not measured or not given.
        unit: written after a space (``tok/s``, ``ms``, ``%``).
        digits: decimals to round to; ``None`` writes a value exactly as the file has it.
        sign: write ``+`` before positive values (for differences).
    """
    if value is None:
        return Markup("—")
    if isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"not a finite number: {value!r}")
    if digits is None:
        text = f"{value:,}" if isinstance(value, int) else f"{value:,.{_decimals(value)}f}"
    else:
        text = f"{value:,.{digits}f}"
    if sign and value > 0:
        text = "+" + text
    return Markup(f"{text} {unit}" if unit else text)


def _pct_change(new: float | None, old: float | None) -> float | None:
    """:func:`tokenwatt.compare.change_pct`, with "—" where it is undefined (no reference)."""
    if new is None or old is None:
        return None
    change = compare.change_pct(new, old)
    return change if math.isfinite(change) and old != 0 else None


def _capacity_bound(config: ConfigResult) -> str | None:
    """In words, what is known of a capacity with no estimate (no crossing was probed)."""
    if config.slo_capacity_rps is not None or not config.capacity_fits:
        return None
    lows = [f.lower_bound_rps for f in config.capacity_fits if f.method == "above_all"]
    highs = [f.upper_bound_rps for f in config.capacity_fits if f.method == "below_all"]
    if any(h is not None for h in highs):
        high = min(h for h in highs if h is not None)
        short = sum(f.short_of_steady for f in config.capacity_fits if f.method == "below_all")
        if short:
            # Passes were measured, in windows the audit found short of steady state: no bound
            # on the capacity follows from the one window that failed.
            return (
                f"unknown: no probe met the SLO in steady state ({short} left out, short of or"
                f" over it); the lowest failing rate was {fmt_number(high, 'req/s', digits=2)}"
            )
        return f"under {fmt_number(high, 'req/s', digits=2)} (no probe met the SLO)"
    known = [v for v in lows if v is not None]
    if known:
        return f"at least {fmt_number(min(known), 'req/s', digits=2)} (no probe exceeded the SLO)"
    return None


@dataclass(frozen=True)
class ConfigView:
    """One config with the figures the page derives from it."""

    config: ConfigResult
    name: str
    """Unique display name: label and role."""
    goodput_delta_pct: float | None
    goodput_delta_computed: bool
    power_delta_pct: float | None
    tokens_per_joule: float | None
    tokens_per_joule_computed: bool
    tokens_per_joule_delta_pct: float | None
    capacity_bound: str | None = None
    """What is known of the SLO capacity when there is no estimate, in words."""
    spec_json: str | None = None
    """The config's own spec as JSON (None: the result file does not carry it)."""
    spec_changes: tuple[str, ...] | None = None
    """How its spec differs from the baseline's (None: not comparable, or the baseline)."""
    launch_changes: tuple[str, ...] | None = None
    """The arguments its launch command adds or drops against the baseline's (None: either has
    no launch command recorded, or this is the baseline)."""
    engine_changes: tuple[str, ...] | None = None
    """How the engine's reported configuration differs from the baseline's (None: either is
    not measured, or this is the baseline)."""


def _spec_json(spec: Spec) -> str:
    return json.dumps(
        spec.model_dump(mode="json", exclude_unset=True), indent=2, ensure_ascii=False
    )


def _leaves(value: object, prefix: str) -> dict[str, object]:
    """Every scalar or list of a JSON value, by dotted path (lists count as one value)."""
    if isinstance(value, dict) and value:
        out: dict[str, object] = {}
        for key, item in value.items():
            out.update(_leaves(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def spec_changes(baseline: Spec, other: Spec) -> tuple[str, ...]:
    """Each setting of ``other`` that differs from ``baseline``: ``path: old → new``.

    Compared as the full specs dump them (defaults included), so a setting written out in one
    file and left to its default in the other is no difference.
    """
    return _changes(baseline.model_dump(mode="json"), other.model_dump(mode="json"))


def _engine_settings(config: EngineConfig) -> dict[str, object]:
    settings: dict[str, object] = {"max_model_len": config.max_model_len}
    for gauge in config.info:
        key = gauge.name
        n = 2
        while key in settings:
            key, n = f"{gauge.name}#{n}", n + 1
        settings[key] = dict(gauge.labels)
    return settings


def engine_changes(baseline: EngineConfig, other: EngineConfig) -> tuple[str, ...]:
    """Each reported engine setting of ``other`` that differs from ``baseline``'s."""
    return _changes(_engine_settings(baseline), _engine_settings(other))


def launch_changes(baseline: str, other: str) -> tuple[str, ...]:
    """The arguments ``other`` drops (``- ...``) and adds (``+ ...``) against ``baseline``."""
    old, new = shlex.split(baseline), shlex.split(other)
    out: list[str] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            out.append("- " + shlex.join(old[i1:i2]))
        if tag in ("replace", "insert"):
            out.append("+ " + shlex.join(new[j1:j2]))
    return tuple(out)


def _launch(config: ConfigResult) -> str | None:
    return config.spec.engine.launch if config.spec is not None else None


def _changes(old_json: object, new_json: object) -> tuple[str, ...]:
    old = _leaves(old_json, "")
    new = _leaves(new_json, "")
    missing = "(absent)"
    return tuple(
        f"{path}: {json.dumps(old.get(path, missing), ensure_ascii=False)}"
        f" → {json.dumps(new.get(path, missing), ensure_ascii=False)}"
        for path in sorted(old.keys() | new.keys())
        if old.get(path, missing) != new.get(path, missing)
    )


def _launch_changes(baseline: str | None, other: str | None) -> tuple[str, ...] | None:
    if baseline is None or other is None:
        return None
    return launch_changes(baseline, other)


def _config_views(result: ResultFile) -> tuple[ConfigView, ...]:
    names = charts_mod.chart_names(result.configs)
    baseline = next((c for c in result.configs if c.key == "baseline"), None)

    def tpj(config: ConfigResult) -> tuple[float | None, bool]:
        if config.tokens_per_joule is not None:
            return config.tokens_per_joule, False
        if config.node_power_kw:
            # methodology, "Power and energy": tokens per joule = goodput / watts.
            return config.goodput_tok_s / (config.node_power_kw * 1000), True
        return None, False

    base_tpj = tpj(baseline)[0] if baseline is not None else None
    views: list[ConfigView] = []
    for name, config in zip(names, result.configs, strict=True):
        is_base = config is baseline
        delta = config.goodput_delta_pct
        computed = False
        if delta is None and baseline is not None and not is_base:
            delta = _pct_change(config.goodput_tok_s, baseline.goodput_tok_s)
            computed = delta is not None
        value, value_computed = tpj(config)
        views.append(
            ConfigView(
                config=config,
                name=name,
                goodput_delta_pct=delta,
                goodput_delta_computed=computed,
                power_delta_pct=None
                if is_base or baseline is None
                else _pct_change(config.node_power_kw, baseline.node_power_kw),
                tokens_per_joule=value,
                tokens_per_joule_computed=value_computed,
                tokens_per_joule_delta_pct=None if is_base else _pct_change(value, base_tpj),
                capacity_bound=_capacity_bound(config),
                spec_json=_spec_json(config.spec) if config.spec is not None else None,
                spec_changes=None
                if is_base or baseline is None or baseline.spec is None or config.spec is None
                else spec_changes(baseline.spec, config.spec),
                launch_changes=None
                if is_base or baseline is None
                else _launch_changes(_launch(baseline), _launch(config)),
                engine_changes=None
                if is_base
                or baseline is None
                or baseline.engine_config is None
                or config.engine_config is None
                else engine_changes(baseline.engine_config, config.engine_config),
            )
        )
    return tuple(views)


def result_page_uri(result: ResultFile) -> str:
    """Where a result's page lives in the site, as a docs-relative Markdown path."""
    return f"results/{result.id}.md"


@dataclass(frozen=True)
class ResultView:
    """A result with what the pages need to know about it, recomputed from its numbers."""

    result: ResultFile
    source: str
    """The result file's name, for the page's provenance line and error messages."""
    violations: tuple[policy.Violation, ...]
    """Every publishing-policy rule the result breaks (empty: publishable)."""
    simulated: bool
    configs: tuple[ConfigView, ...]

    @property
    def publishable(self) -> bool:
        """Whether the result meets the publishing policy."""
        return not self.violations

    @property
    def section(self) -> SectionKey:
        """Where the index lists it: simulated first, then published only if publishable."""
        if self.simulated:
            return "simulated"
        if self.publishable and self.result.status == "published":
            return "published"
        return "unpublished"

    @property
    def headline(self) -> ConfigView:
        """The config the index shows: the first tuned one, else the baseline, else the first."""
        for key in ("tuned", "baseline"):
            for view in self.configs:
                if view.config.key == key:
                    return view
        return self.configs[0]

    @property
    def baseline(self) -> ConfigView | None:
        """The baseline config, if the result has one."""
        return next((v for v in self.configs if v.config.key == "baseline"), None)

    @property
    def tuned(self) -> ConfigView | None:
        """The first tuned config, if the result has one."""
        return next((v for v in self.configs if v.config.key == "tuned"), None)

    @property
    def ranking(self) -> list[RankRow]:
        """An N-way report's configurations ranked by SLO capacity change (empty otherwise)."""
        verdicts = {v.candidate: v for v in self.result.verdicts or []}
        if not verdicts:
            return []
        rows = []
        for view in self.configs:
            c = view.config
            if c.key == "other":
                continue
            v = verdicts.get(c.label) if c.key == "tuned" else None
            ci = (
                (v.ci_low_pct, v.ci_high_pct)
                if v is not None and v.ci_low_pct is not None and v.ci_high_pct is not None
                else None
            )
            rows.append(
                RankRow(
                    rank=0,
                    label=c.label,
                    key=c.key,
                    capacity_rps=c.slo_capacity_rps,
                    change_pct=0.0 if c.key == "baseline" else (v.change_pct if v else None),
                    ci_pct=ci,
                    confidence_pct=v.confidence_pct if v is not None else None,
                    outcome=v.outcome if v is not None else None,
                )
            )
        return rank_by_change(rows)

    @property
    def page_uri(self) -> str:
        """Docs-relative path of the result's page."""
        return result_page_uri(self.result)

    @property
    def date(self) -> str:
        """Date of the measurement, ``YYYY-MM-DD``, or "—"."""
        if self.result.published is not None:
            return self.result.published.isoformat()
        if self.result.created_utc is not None:
            return self.result.created_utc.date().isoformat()
        return "—"


def result_view(result: ResultFile, *, source: str) -> ResultView:
    """Recompute publishability and the derived figures of a result."""
    simulated = figures.result_is_simulated(result)
    return ResultView(
        result=result,
        source=source,
        violations=tuple(policy.check_result(result)),
        simulated=simulated,
        configs=_config_views(result),
    )


@dataclass(frozen=True)
class IndexSection:
    """One table of the index page."""

    key: SectionKey
    title: str
    views: list[ResultView] = field(default_factory=list)


_SECTION_TITLES: dict[SectionKey, str] = {
    "published": "Published results",
    "unpublished": "Quick mode and drafts — not for publishing",
    "simulated": "Simulated — not measurements of real hardware",
}


def index_sections(views: Iterable[ResultView]) -> list[IndexSection]:
    """The index's sections in order (published first), newest result first in each."""
    sections = {key: IndexSection(key, title) for key, title in _SECTION_TITLES.items()}
    for view in views:
        sections[view.section].views.append(view)
    for section in sections.values():
        section.views.sort(key=lambda v: v.result.title)
        section.views.sort(key=lambda v: v.date, reverse=True)
    return list(sections.values())


def _pre(value: object) -> Markup:
    """A copyable code block, each line verbatim."""
    return Markup("<pre><code>") + md_escape(value, inline=False) + Markup("</code></pre>")


def _url(value: str) -> Markup:
    return Markup(urllib.parse.quote(value, safe="/#."))


def _finalize(value: object) -> object:
    # Every value a template prints comes through here: markup built by this module (Markup)
    # passes, anything else is text and gets escaped.
    if isinstance(value, Markup):
        return value
    if value is None:
        return Markup("—")
    return md_escape(value)


def make_environment(templates_dir: Path) -> jinja2.Environment:
    """The jinja2 environment of the page templates, escaping everything printed."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir),
        autoescape=True,
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        {
            "num": fmt_number,
            "md": md_escape,
            "pre": _pre,
            "url": _url,
            "paragraphs": _paragraphs,
        }
    )
    return env


def _paragraphs(value: str) -> list[str]:
    """Blank-line separated blocks of a text (the reproduce commands)."""
    blocks = [b.strip("\n") for b in value.replace("\r\n", "\n").split("\n\n")]
    return [b for b in blocks if b.strip()]


def _draw_svg(chart: charts_mod.Chart, id_prefix: str) -> str:
    return charts_mod.to_svg(chart, id_prefix=id_prefix)


def render_result(view: ResultView, *, env: jinja2.Environment, draw: SvgDrawer = _draw_svg) -> str:
    """The Markdown of a result's page.

    Args:
        view: the result and what was recomputed about it.
        env: from :func:`make_environment`.
        draw: draws a chart as SVG (tests pass a stand-in to keep golden files readable).
    """
    drawn = [
        (chart, Markup(draw(chart, f"tw-{view.result.id}-{chart.key}")))
        for chart in charts_mod.charts_for(view.result)
    ]
    spec_json = _spec_json(view.result.spec)
    return env.get_template("result.md.j2").render(
        view=view,
        r=view.result,
        charts=drawn,
        chart_keys={chart.key for chart, _ in drawn},
        spec_json=spec_json,
        policy_anchor="../methodology.md#publishing-policy",
        verdict_anchor="../methodology.md#verdict",
    )


def render_index(
    views: Sequence[ResultView],
    *,
    env: jinja2.Environment,
    comparisons: Sequence[tuple[str, str]] = (),
) -> str:
    """The Markdown of the index's result tables (inserted into the hand-written index page).

    Args:
        views: the results.
        env: from :func:`make_environment`.
        comparisons: each comparison set page's (title, docs-relative uri).
    """
    return env.get_template("index.md.j2").render(
        sections=index_sections(views), comparisons=comparisons
    )
