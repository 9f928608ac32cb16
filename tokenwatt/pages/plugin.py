"""The ``tokenwatt`` MkDocs plugin: one page per ``results/*.json``, the index tables, methodology.

Thin hooks over :mod:`tokenwatt.pages.render` and :mod:`tokenwatt.pages.methodology`:

- ``on_config`` reads the options and loads the templates.
- ``on_files`` validates every result file with the project's models (an invalid one fails the
  build, naming the file and the field), recomputes publishability, and adds each page as a
  generated file, in memory: nothing generated is written into the docs folder.
- ``on_post_page`` puts each chart's SVG into its page's HTML, drawn through the chart cache
  (:mod:`tokenwatt.pages.chart_cache`, outside the repository). The Markdown holds only a
  placeholder comment for it: Python-Markdown's raw-HTML parser and the search index would
  otherwise walk every element of every SVG (most of a page's build time once the charts
  themselves come from the cache), and axis ticks are no search terms.
- ``on_page_markdown`` puts the result tables into the index page and the definitions into the
  methodology page, where their markers are.
- Each ``comparisons/<id>.yaml`` (:class:`~tokenwatt.comparison_set.ComparisonSetFile`: a
  title and result ids) becomes a page of those results side by side by date, with charts of
  SLO capacity, tokens per joule and MBU against date (:mod:`tokenwatt.pages.comparison_page`);
  an unknown id or results that are not of one scenario fail the build, naming the set file.

With ``strict_publish`` (or ``TOKENWATT_STRICT_PUBLISH=1``) a result whose status is "published"
but which breaks the publishing policy fails the build; without it, it is built with its flag.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

import jinja2
from mkdocs.config import config_options as c
from mkdocs.config.base import Config
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import Abort, PluginError
from mkdocs.livereload import LiveReloadServer
from mkdocs.plugins import BasePlugin
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

from tokenwatt import store
from tokenwatt.comparison_set import LoadedResult, build_comparison_set, select_results
from tokenwatt.errors import ResultError, TokenwattError
from tokenwatt.pages import charts, comparison_page, methodology, render
from tokenwatt.pages.chart_cache import ChartCache, chart_cache_dir
from tokenwatt.schema.result import RESULT_ID_PATTERN

__all__ = [
    "INDEX_MARKER",
    "METHODOLOGY_MARKER",
    "STRICT_ENV",
    "ResultPagesConfig",
    "ResultPagesPlugin",
]

logger = logging.getLogger("mkdocs.plugins.tokenwatt")

INDEX_MARKER = "<!-- tokenwatt:results -->"
"""Where the index page gets its result tables."""
METHODOLOGY_MARKER = "<!-- tokenwatt:methodology -->"
"""Where the methodology page gets its generated sections."""
STRICT_ENV = "TOKENWATT_STRICT_PUBLISH"
"""Environment variable that turns ``strict_publish`` on (``1``/``true``/``yes``)."""

_CHART_PLACEHOLDER = re.compile(r"<!-- tokenwatt:chart ([a-z0-9._-]+) -->")
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES})
"""What a failed write of the site says: full disk or quota, too large, read-only, denied."""
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


# mkdocs' Config and BasePlugin define an untyped __init_subclass__.
class ResultPagesConfig(Config):  # type: ignore[no-untyped-call]
    """Options of the plugin (``plugins: - tokenwatt: {...}`` in mkdocs.yml)."""

    enabled = c.Type(bool, default=True)
    results_dir = c.Dir(exists=True, default="results")
    comparisons_dir = c.Dir(exists=False, default="comparisons")
    templates_dir = c.Dir(exists=True, default="templates")
    strict_publish = c.Type(bool, default=False)
    index_page = c.Type(str, default="index.md")
    methodology_page = c.Type(str, default="methodology.md")


def strict_from_env(environ: dict[str, str] | os._Environ[str]) -> bool:
    """Read :data:`STRICT_ENV`.

    Raises:
        PluginError: the variable holds something other than a yes or a no.
    """
    value = environ.get(STRICT_ENV, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise PluginError(
        f"{STRICT_ENV}={environ.get(STRICT_ENV)!r}: expected 1/true/yes or 0/false/no"
    )


class ResultPagesPlugin(BasePlugin[ResultPagesConfig]):  # type: ignore[no-untyped-call]
    """Generates the result pages, the index tables and the methodology page."""

    def __init__(self) -> None:
        self.views: list[render.ResultView] = []
        self.strict = False
        self._env: jinja2.Environment | None = None
        self.chart_cache: ChartCache | None = None
        self._charts: dict[str, charts.Chart] = {}
        self.comparisons: list[tuple[str, str]] = []

    @property
    def env(self) -> jinja2.Environment:
        """The template environment, loaded by ``on_config``."""
        if self._env is None:
            raise PluginError("tokenwatt plugin: templates used before on_config loaded them")
        return self._env

    def on_config(self, config: MkDocsConfig) -> MkDocsConfig | None:
        """Read the options and load the templates."""
        if not self.config.enabled:
            return config
        self.strict = self.config.strict_publish or strict_from_env(os.environ)
        self._env = render.make_environment(Path(self.config.templates_dir))
        self.chart_cache = ChartCache(chart_cache_dir())
        self._charts = {}
        return config

    def _placeholder(self, chart: charts.Chart, id_prefix: str) -> str:
        """Stand in for a chart in the Markdown; ``on_post_page`` draws it there."""
        # The id prefix is the result's id and the chart's key: unique in the site.
        self._charts[id_prefix] = chart
        return f"<!-- tokenwatt:chart {id_prefix} -->"

    def _load(self) -> list[render.ResultView]:
        results_dir = Path(self.config.results_dir)
        views: list[render.ResultView] = []
        seen: dict[str, Path] = {}
        for path in sorted(results_dir.glob("*.json")):
            try:
                result = store.load_result(path)
            except TokenwattError as exc:
                # The message names the file, each field and its problem.
                raise PluginError(str(exc)) from exc
            if result.id in seen:
                raise PluginError(
                    f"{path}: id {result.id!r} is also the id of {seen[result.id]}; each result"
                    " needs its own id (it names the page)"
                )
            seen[result.id] = path
            views.append(render.result_view(result, source=f"{results_dir.name}/{path.name}"))
        return views

    def _check_strict(self, views: list[render.ResultView]) -> None:
        flagged = [v for v in views if v.result.status == "published" and not v.publishable]
        for view in flagged:
            logger.info(
                "%s: status 'published' but not publishable; built with the quick-mode flag",
                view.source,
            )
        if self.strict and flagged:
            lines = [
                f"{v.source}: status is 'published' but it breaks the publishing policy:\n    "
                + "\n    ".join(str(x) for x in v.violations)
                for v in flagged
            ]
            raise PluginError(
                "strict publishing is on (plugin option strict_publish or"
                f" {STRICT_ENV}=1) and these results are marked published without meeting the"
                " policy:\n  " + "\n  ".join(lines) + "\nRe-measure them without --quick, or set"
                " their status to 'draft'."
            )

    def on_files(self, files: Files, /, *, config: MkDocsConfig) -> Files | None:
        """Validate the results and add one generated page per result."""
        if not self.config.enabled:
            return files
        for needed in (self.config.index_page, self.config.methodology_page):
            if files.get_file_from_path(needed) is None:
                raise PluginError(
                    f"{config.docs_dir}/{needed}: page not found; the tokenwatt plugin fills it in"
                    " (set index_page / methodology_page in mkdocs.yml if it moved)"
                )
        self.views = self._load()
        self._check_strict(self.views)
        for view in self.views:
            if files.get_file_from_path(view.page_uri) is not None:
                raise PluginError(
                    f"{config.docs_dir}/{view.page_uri}: a hand-written page has the path of the"
                    f" generated page of {view.source}; remove or rename it"
                )
            try:
                content = render.render_result(view, env=self.env, draw=self._placeholder)
            except TokenwattError as exc:
                raise PluginError(f"{view.source}: {exc}") from exc
            generated = File.generated(config, view.page_uri, content=content)
            generated.generated_by = "tokenwatt"
            files.append(generated)
        logger.info("tokenwatt: %d result page(s) generated", len(self.views))
        self.comparisons = self._comparison_pages(files, config)
        return files

    def _comparison_pages(self, files: Files, config: MkDocsConfig) -> list[tuple[str, str]]:
        """One page per comparison set file; returns each page's (title, uri) for the index."""
        folder = Path(self.config.comparisons_dir)
        if not folder.is_dir():
            return []
        available = {v.result.id: LoadedResult(v.source, v.result) for v in self.views}
        # The comparison pages sit one folder down, beside results/.
        uris = {v.result.id: f"../{v.page_uri}" for v in self.views}
        pages: list[tuple[str, str]] = []
        for path in sorted(folder.glob("*.yaml")):
            where = f"{folder.name}/{path.name}"
            try:
                if not re.fullmatch(RESULT_ID_PATTERN, path.stem):
                    raise ResultError(
                        f"{where}: the file name is the page's id: lower-case letters, digits,"
                        " '.', '_' and '-'"
                    )
                wanted = store.load_comparison_set(path)
                chosen = select_results(wanted, available, where=where)
                try:
                    comparison = build_comparison_set(chosen, allow_mismatch=wanted.allow_mismatch)
                except ResultError as exc:
                    raise ResultError(f"{where}: {exc}") from exc
                content = comparison_page.render_comparison(
                    path.stem,
                    wanted,
                    comparison,
                    env=self.env,
                    result_uris=uris,
                    draw=self._placeholder,
                )
            except TokenwattError as exc:
                raise PluginError(str(exc)) from exc
            uri = comparison_page.comparison_page_uri(path.stem)
            if files.get_file_from_path(uri) is not None:
                raise PluginError(
                    f"{config.docs_dir}/{uri}: a hand-written page has the path of the generated"
                    f" page of {where}; remove or rename it"
                )
            generated = File.generated(config, uri, content=content)
            generated.generated_by = "tokenwatt"
            files.append(generated)
            pages.append((wanted.title, uri))
        logger.info("tokenwatt: %d comparison page(s) generated", len(pages))
        return pages

    def on_post_page(self, output: str, /, *, page: Page, config: MkDocsConfig) -> str | None:
        """Put each chart's SVG where its placeholder is."""
        if not self.config.enabled or "<!-- tokenwatt:chart " not in output:
            return output
        cache = self.chart_cache
        if cache is None:
            raise PluginError("tokenwatt plugin: charts drawn before on_config set up the cache")

        def svg(match: re.Match[str]) -> str:
            chart = self._charts.get(match.group(1))
            if chart is None:
                raise PluginError(
                    f"{page.file.src_uri}: chart {match.group(1)!r} was not generated by this build"
                )
            return charts.to_svg(chart, id_prefix=match.group(1), draw=cache.svg)

        return _CHART_PLACEHOLDER.sub(svg, output)

    def on_post_build(self, *, config: MkDocsConfig) -> None:
        """Say how many charts were drawn and how many came from the cache."""
        if self.config.enabled and self.chart_cache is not None:
            logger.info(
                "tokenwatt: charts: %d drawn, %d from the cache in %s",
                self.chart_cache.misses,
                self.chart_cache.hits,
                self.chart_cache.folder,
            )

    def on_build_error(self, *, error: Exception) -> None:
        """A site that cannot be written (full disk, read-only folder): one message, no traceback.

        mkdocs copies the theme and writes the pages itself, so a failed write surfaces here as
        the OSError of whichever file it was; the results the site is built from are only read.
        """
        if isinstance(error, OSError) and error.errno in _WRITE_ERRNOS:
            target = error.filename2 or error.filename  # a copy's error names its source first
            where = f" ({target})" if target else ""
            raise Abort(
                f"Aborted: the site could not be written: {error.strerror}{where}. The results"
                " it is built from are untouched; free space (or fix the folder's permissions)"
                " and build again."
            ) from None

    def on_serve(
        self, server: LiveReloadServer, /, *, config: MkDocsConfig, builder: Callable[[], None]
    ) -> LiveReloadServer | None:
        """Rebuild when a result file or a template changes under ``mkdocs serve``."""
        if self.config.enabled:
            server.watch(self.config.results_dir)
            if Path(self.config.comparisons_dir).is_dir():
                server.watch(self.config.comparisons_dir)
            server.watch(self.config.templates_dir)
        return server

    def on_page_markdown(
        self, markdown: str, /, *, page: Page, config: MkDocsConfig, files: Files
    ) -> str | None:
        """Fill the index and methodology pages at their markers."""
        if not self.config.enabled:
            return markdown
        uri = page.file.src_uri
        if uri == self.config.index_page:
            return _replace(
                markdown,
                INDEX_MARKER,
                render.render_index(self.views, env=self.env, comparisons=self.comparisons),
                where=f"{config.docs_dir}/{uri}",
            )
        if uri == self.config.methodology_page:
            try:
                generated = methodology.render_methodology(
                    env=self.env, sections=methodology.SECTIONS
                )
            except TokenwattError as exc:
                raise PluginError(str(exc)) from exc
            return _replace(
                markdown, METHODOLOGY_MARKER, generated, where=f"{config.docs_dir}/{uri}"
            )
        return markdown


def _replace(markdown: str, marker: str, content: str, *, where: str) -> str:
    if marker not in markdown:
        raise PluginError(
            f"{where}: marker {marker} not found; put it where the plugin's part goes"
        )
    return markdown.replace(marker, content, 1)
