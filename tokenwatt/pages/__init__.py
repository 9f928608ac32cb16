"""The results site: result files rendered into MkDocs pages, with charts and the methodology.

``tokenwatt.pages.plugin`` is the MkDocs plugin (entry point ``tokenwatt``); it imports MkDocs,
so it is not imported here. The renderers are pure and usable without MkDocs.
"""

from tokenwatt.pages.charts import Chart, charts_for, to_svg
from tokenwatt.pages.methodology import SECTIONS, render_methodology
from tokenwatt.pages.render import (
    ResultView,
    make_environment,
    md_escape,
    render_index,
    render_result,
    result_view,
)

__all__ = [
    "SECTIONS",
    "Chart",
    "ResultView",
    "charts_for",
    "make_environment",
    "md_escape",
    "render_index",
    "render_methodology",
    "render_result",
    "result_view",
    "to_svg",
]
