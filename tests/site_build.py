"""Build the real site with mkdocs into a temporary folder, and serve it on 127.0.0.1.

The configuration inherits the repository's mkdocs.yml (theme, extensions, pages) and points the
plugin at a results folder of the test's own, so a test controls exactly which result files the
build sees. Every build of one test session shares one chart cache in a temporary folder (never
the user's): a chart drawn by one test's build is read back by the next.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.peers import serve_http

REPO = Path(__file__).resolve().parents[1]


def write_results(folder: Path, results: dict[str, dict[str, Any]]) -> Path:
    """Write result dicts as ``folder/<name>``; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in results.items():
        (folder / name).write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    return folder


def write_config(tmp: Path, results_dir: Path, **plugin_options: Any) -> Path:
    """A mkdocs.yml in ``tmp`` that builds the repository's site from ``results_dir``."""
    options = {
        "results_dir": str(results_dir),
        "templates_dir": str(REPO / "templates"),
        **plugin_options,
    }
    config = {
        "INHERIT": str(REPO / "mkdocs.yml"),
        "docs_dir": str(REPO / "site"),
        "site_dir": str(tmp / "public"),
        "theme": {"name": "material", "custom_dir": str(REPO / "templates" / "theme")},
        "plugins": ["search", {"tokenwatt": options}],
    }
    path = tmp / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@functools.cache
def session_cache() -> Path:
    """The cache folder of this test session's builds (removed at exit)."""
    folder = Path(tempfile.mkdtemp(prefix="tokenwatt-test-cache-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def mkdocs_build(
    config: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    preexec: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict -f config``, as the README's command runs it.

    ``preexec`` runs in the child before mkdocs starts (e.g. to lower its limits).
    """
    environ = {k: v for k, v in os.environ.items() if k != "TOKENWATT_STRICT_PUBLISH"}
    environ["NO_MKDOCS_2_WARNING"] = "1"
    environ["TOKENWATT_CACHE"] = str(session_cache())
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config)],
        cwd=cwd or config.parent,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=preexec,
    )


def build_site(tmp: Path, results: dict[str, dict[str, Any]], **plugin_options: Any) -> Path:
    """Build a site of these results; returns its output folder. Fails the test on error."""
    results_dir = write_results(tmp / "results", results)
    done = mkdocs_build(write_config(tmp, results_dir, **plugin_options))
    assert done.returncode == 0, f"mkdocs build failed:\n{done.stdout}\n{done.stderr}"
    return tmp / "public"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve a folder on 127.0.0.1 (an ephemeral port); yields the base URL."""
    with serve_http(functools.partial(_QuietHandler, directory=str(directory))) as base_url:
        yield base_url
