"""Pre-flight failures of ``tokenwatt run``: one clear message, exit 2, nothing written.

Each case runs the real command in a subprocess before any load could start: a closed port,
a model the server does not serve, a server version other than ``engine.version`` (against a
simulator started here and against one the spec makes ``measure`` start), and an ``--out`` that
cannot be written. The wrong model against real vLLM is in test_measure_vllm.py.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from tests.measure_cli import (
    TINY_GEOMETRY,
    error_lines,
    files_in,
    load_spec_dict,
    measure_argv,
    run_measure,
    write_spec,
)
from tests.peers import free_port
from tokenwatt.sim.launch import SimSettings, launch

SERVED = "served-model"


@pytest.fixture(scope="module")
def sim(repo: Path):
    """A simulator on its own, serving a small model as "served-model"."""
    settings = SimSettings(
        config_file=repo / "specs" / "models" / "Qwen__Qwen3-8B" / "config.json",
        served_model_name=SERVED,
    )
    with launch(settings) as running:
        yield running


def _spec(tmp_path: Path, **engine: object) -> Path:
    data = {
        "name": "preflight",
        "hardware": {"adapter": "none"},
        "engine": {"model": SERVED, **engine},
        "model": {
            "name": "tiny",
            "vocab_size": 32000,
            "weight_dtype": "fp32",
            "kv_dtype": "fp32",
            "geometry": TINY_GEOMETRY,
        },
        "measurement": {"warmup_s": 1, "window_s": 2, "search_window_s": 2, "repeats": 1},
        "sweep": {"rates": [1]},
        "power": {"source": "none"},
    }
    return write_spec(tmp_path / "spec.yaml", data)


def _fails_cleanly(repo: Path, argv: list[str], tmp_path: Path, *, kind: str) -> str:
    """Exit 2 with one ``kind: ...`` line, no traceback, and nothing but the spec in tmp_path."""
    done = run_measure(argv, cwd=repo, timeout_s=90)
    assert done.returncode == 2, done.stderr[-3000:]
    errors = error_lines(done.stderr)
    assert len(errors) == 1, done.stderr[-3000:]
    assert errors[0].startswith(f"{kind}: "), errors
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    assert files_in(tmp_path) == ["spec.yaml"]  # no run file, no temporary file, no folder
    return errors[0]


def test_unreachable_endpoint(repo, tmp_path):
    port = free_port()  # free now: nothing listens there
    spec = _spec(tmp_path, endpoint=f"http://127.0.0.1:{port}/v1")
    out = tmp_path / "new" / "deeper" / "a.json"  # folders measure would have to create
    message = _fails_cleanly(repo, measure_argv(spec, out), tmp_path, kind="EndpointError")
    assert f"127.0.0.1:{port}" in message
    assert "is the server running?" in message


def test_wrong_model_name(repo, tmp_path, sim):
    spec = _spec(tmp_path, endpoint=sim.base_url, model="Qwen/Qwen3-0.6B")
    message = _fails_cleanly(
        repo, measure_argv(spec, tmp_path / "a.json"), tmp_path, kind="EndpointError"
    )
    assert f"serves '{SERVED}', not engine.model 'Qwen/Qwen3-0.6B'" in message


def test_engine_version_differs_from_the_server(repo, tmp_path, sim):
    spec = _spec(tmp_path, endpoint=sim.base_url, version="0.31.0")
    message = _fails_cleanly(
        repo, measure_argv(spec, tmp_path / "a.json"), tmp_path, kind="EndpointError"
    )
    assert "tokenwatt-sim" in message  # what the server says it runs (GET /version)
    assert "engine.version '0.31.0'" in message
    assert "fix the spec or the server" in message


def test_engine_version_differs_from_the_embedded_simulator(repo, tmp_path):
    """``measure`` starts the simulator, finds the mismatch, and stops the simulator again."""
    data = load_spec_dict(repo / "tests" / "data" / "tiny-sim.spec.yaml")
    marker = f"preflight-{uuid.uuid4().hex[:8]}"  # find a leftover simulator by its model name
    data["engine"].update(model=marker, version="0.31.0")
    data["model"]["config"] = str(repo / "specs" / "models" / "Qwen__Qwen3-8B" / "config.json")
    data["accuracy"]["suite"] = str(repo / "specs" / "suites" / "gsm8k-200.jsonl")
    spec = write_spec(tmp_path / "spec.yaml", data)
    message = _fails_cleanly(
        repo, measure_argv(spec, tmp_path / "a.json"), tmp_path, kind="EndpointError"
    )
    assert "engine.version '0.31.0'" in message
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert marker not in ps.stdout  # the simulator it started is gone


@pytest.mark.parametrize("case", ["parent-is-a-file", "out-is-a-folder"])
def test_unwritable_out(repo, tmp_path, case):
    port = free_port()  # the output path is checked first: the endpoint is never asked
    spec = _spec(tmp_path, endpoint=f"http://127.0.0.1:{port}/v1")
    blocker = tmp_path / "blocker"
    if case == "parent-is-a-file":
        blocker.write_text("a file, not a folder\n")
        out = blocker / "a.json"
    else:
        blocker.mkdir()
        out = blocker
    done = run_measure(measure_argv(spec, out), cwd=repo, timeout_s=60)
    assert done.returncode == 2, done.stderr[-3000:]
    errors = error_lines(done.stderr)
    assert len(errors) == 1, done.stderr[-3000:]
    assert errors[0].startswith(f"InputError: {out}: ")
    assert "Traceback" not in done.stderr
    assert files_in(tmp_path) == ["blocker", "spec.yaml"]
    if blocker.is_dir():
        assert files_in(blocker) == []
    else:
        assert blocker.read_text() == "a file, not a folder\n"
