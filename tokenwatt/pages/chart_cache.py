"""Charts drawn once: each chart's SVG kept between site builds, by the hash of its spec and data.

Drawing the charts with vl-convert was half of a result page's build time
(``benchmarks/README.md``). A drawing depends on nothing but the chart's Vega-Lite spec (its
data included: :mod:`tokenwatt.pages.charts` puts the data into the spec as named datasets) and
the vl-convert that draws it, so the SVG is kept under the SHA-256 of the spec's canonical JSON
and vl-convert's version: an unchanged result costs its Markdown only, and a changed result
(or a new vl-convert, or a change to a chart's code that changes its spec) is drawn afresh.

Where: ``charts/`` in tokenwatt's cache folder (:func:`tokenwatt.store.cache_dir`:
``$TOKENWATT_CACHE``, else ``$XDG_CACHE_HOME/tokenwatt``, else ``~/.cache/tokenwatt``), outside
the repository. It can be deleted at any time; the next build draws everything again.

The cache can only cost time, never correctness or the build:

- each entry records the SHA-256 of its SVG on its first line; an entry that cannot be read, is
  not what was written (truncated, altered) or records another digest is drawn again and
  replaced;
- an entry that cannot be written (read-only folder, full disk) is logged once, and the build
  goes on drawing.

Both are logged at INFO, never WARNING: ``mkdocs build --strict`` fails on any warning, and a
cache problem must not fail a build.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path

from tokenwatt import bounded, store
from tokenwatt.errors import InputError, WriteError
from tokenwatt.pages.charts import Chart, draw_svg

__all__ = ["CACHE_FORMAT", "ChartCache", "chart_cache_dir", "chart_key"]

logger = logging.getLogger("mkdocs.plugins.tokenwatt")

CACHE_FORMAT = 1
"""Changes when the entry format changes: old entries are then simply never found."""

_HEADER = "<!-- tokenwatt chart cache {format} sha256:{digest} -->\n"


def chart_cache_dir() -> Path:
    """Where drawn charts are kept: ``charts/`` in tokenwatt's cache folder."""
    return store.cache_dir() / "charts"


def _renderer_version() -> str:
    import vl_convert

    version: str = getattr(vl_convert, "__version__", "unknown")
    return version


def chart_key(chart: Chart, *, renderer: str) -> str:
    """SHA-256 of what the drawing depends on: the spec (data included) and the renderer."""
    canonical = json.dumps(
        {"format": CACHE_FORMAT, "renderer": renderer, "spec": chart.spec},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _digest(svg: str) -> str:
    return hashlib.sha256(svg.encode("utf-8")).hexdigest()


class ChartCache:
    """Draws charts through a folder of SVGs kept from earlier builds.

    Args:
        folder: where the entries live (created on the first write).
        draw: draws a chart when it is not in the cache (vl-convert; tests count its calls).
        renderer: the renderer's version, part of every key (default: vl-convert's).
    """

    def __init__(
        self,
        folder: Path,
        *,
        draw: Callable[[Chart], str] = draw_svg,
        renderer: str | None = None,
    ) -> None:
        self.folder = folder
        self._draw = draw
        self._renderer = renderer if renderer is not None else _renderer_version()
        self._writable = True
        self.hits = 0
        self.misses = 0

    def path(self, chart: Chart) -> Path:
        """The entry a chart is kept in."""
        return self.folder / f"{chart_key(chart, renderer=self._renderer)}.svg"

    def svg(self, chart: Chart) -> str:
        """The chart's SVG: from its entry when that is sound, else drawn and kept."""
        path = self.path(chart)
        cached = self._read(path)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        svg = self._draw(chart)
        self._write(path, svg)
        return svg

    def _read(self, path: Path) -> str | None:
        if not path.exists():
            return None
        try:
            text = bounded.read_text(path)
        except (InputError, ValueError) as exc:
            logger.info("chart cache: %s is unreadable (%s); drawing it again", path, exc)
            return None
        header, _, svg = text.partition("\n")
        if header + "\n" != _HEADER.format(format=CACHE_FORMAT, digest=_digest(svg)):
            logger.info("chart cache: %s is damaged; drawing it again", path)
            return None
        return svg

    def _write(self, path: Path, svg: str) -> None:
        if not self._writable:
            return
        try:
            store.atomic_write_text(
                path, _HEADER.format(format=CACHE_FORMAT, digest=_digest(svg)) + svg
            )
        except WriteError as exc:
            # Once: a read-only cache would otherwise warn for every chart of the site.
            self._writable = False
            logger.info("chart cache: not kept (%s); charts are drawn every build", exc)
