"""``tokenwatt sim`` from the command line, and starting it from a spec as ``measure`` does."""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tokenwatt.cli import build_parser, main
from tokenwatt.cli.sim import settings_from_args
from tokenwatt.errors import EndpointError
from tokenwatt.schema.spec import GeometryOverrides, SimSpec
from tokenwatt.sim.launch import SimSettings, launch, launch_for_spec, settings_from_spec
from tokenwatt.store import load_spec

EXAMPLE = Path("specs") / "sim-qwen3-30b-a3b-fp8.spec.yaml"


@pytest.fixture(autouse=True)
def _keep_logging():
    """main() sets up logging on the (captured) stderr; put the root logger back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_missing_config_is_exit_2_naming_the_file(tmp_path: Path, capsys):
    missing = tmp_path / "nope" / "config.json"
    assert main(["sim", "--model", str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err
    assert "not found" in err


def test_no_model_is_exit_2(capsys):
    assert main(["sim"]) == 2
    assert "--model" in capsys.readouterr().err


def test_model_too_big_for_the_gpu_is_exit_2(shared: Path, capsys):
    config = shared / "data" / "models" / "deepseek-ai__DeepSeek-V3" / "config.json"
    assert main(["sim", "--gpu", "h100-sxm", "--model", str(config)]) == 2
    assert "do not fit" in capsys.readouterr().err


def test_bad_option_value_is_exit_2(shared: Path, capsys):
    config = shared / "data" / "models" / "Qwen__Qwen3-8B" / "config.json"
    assert main(["sim", "--model", str(config), "--bandwidth-efficiency", "3"]) == 2
    assert "bandwidth_efficiency" in capsys.readouterr().err


def test_cli_serves_the_example_spec_until_interrupted(repo: Path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenwatt", "sim", "--spec", str(EXAMPLE), "--port", "0"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    # A thread reads whole lines: a selector on the pipe misses lines that arrived together
    # with the one read (they wait in the text wrapper's buffer, not in the pipe).
    lines: queue.Queue[str] = queue.Queue()
    stderr = proc.stderr

    def read_lines() -> None:
        for line in stderr:
            lines.put(line)

    reader = threading.Thread(target=read_lines, daemon=True)
    reader.start()
    try:
        seen = ""
        url = None
        deadline = time.monotonic() + 30
        while url is None and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                line = lines.get(timeout=0.5)
                seen += line
                m = re.search(r"OpenAI API: (http://127\.0\.0\.1:\d+/v1)", line)
                url = m.group(1) if m else None
        assert url is not None, seen
        assert "SIMULATED" in seen
        models = httpx.get(url + "/models").json()
        assert models["data"][0]["id"] == "Qwen/Qwen3-30B-A3B-FP8"
        version = httpx.get(url.removesuffix("/v1") + "/version").json()
        assert version["simulated"] is True
        assert version["weight_dtype"] == "fp8"
        assert version["kv_dtype"] == "bf16"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=15)
        reader.join(timeout=15)  # the pipe is at its end once the process is gone
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def test_launch_for_spec(repo: Path):
    loaded = load_spec(repo / EXAMPLE)
    settings = settings_from_spec(loaded)
    assert settings.config_file == (
        repo / "specs" / "models" / "Qwen__Qwen3-30B-A3B-FP8" / "config.json"
    )
    assert settings.weight_dtype == "fp8"
    assert settings.served_model_name == "Qwen/Qwen3-30B-A3B-FP8"
    with launch_for_spec(loaded) as sim:
        assert sim.base_url.endswith("/v1")
        models = httpx.get(sim.base_url + "/models").json()
        assert models["data"][0]["id"] == loaded.spec.engine.model
        assert "DCGM_FI_DEV_POWER_USAGE" in httpx.get(sim.metrics_url).text
        pid = sim.pid
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_launch_reports_a_child_that_cannot_start(shared: Path):
    settings = SimSettings(
        config_file=shared / "data" / "models" / "Qwen__Qwen3-8B" / "config.json"
    )
    with pytest.raises(EndpointError, match="cannot listen") as info:
        launch(settings, host="192.0.2.1", startup_timeout_s=20)
    assert "log" in str(info.value)


def test_child_exits_when_its_parent_goes(shared: Path):
    settings = SimSettings(
        config_file=shared / "data" / "models" / "Qwen__Qwen3-8B" / "config.json"
    )
    sim = launch(settings)
    try:
        child = sim._proc
        assert child is not None
        assert child.stdin is not None
        child.stdin.close()  # what the kernel does when the parent dies
        assert child.wait(timeout=15) == 0
    finally:
        sim.stop()


def test_the_child_gets_its_settings_as_one_json_document(shared: Path):
    settings = SimSettings(
        config_file=shared / "data" / "models" / "Qwen__Qwen3-8B" / "config.json",
        kv_dtype="fp8",
        sim=SimSpec(gpu="h200", max_num_seqs=7),
    )
    with launch(settings) as sim:
        argv = Path(f"/proc/{sim.pid}/cmdline").read_bytes().split(b"\0")
        assert b"--gpu" not in argv
        document = argv[argv.index(b"--settings-json") + 1]
        assert SimSettings.model_validate_json(document) == settings.for_child()
        version = httpx.get(sim.url + "/version").json()
        assert version["kv_dtype"] == "fp8"
        assert "H200" in version["gpu"]


def test_settings_json_then_options_on_top(tmp_path: Path):
    document = SimSettings(
        config_file=tmp_path / "config.json",
        tensor_parallel=2,
        sim=SimSpec(gpu="h200", max_num_seqs=7),
        geometry=GeometryOverrides(max_position_embeddings=1024),
    )
    parse = build_parser().parse_args
    assert settings_from_args(parse(["sim", "--settings-json", document.model_dump_json()])) == (
        document
    )
    args = parse(
        [
            "sim",
            "--settings-json",
            document.model_dump_json(),
            "--gpu",
            "l40s",
            "--max-num-seqs",
            "3",
        ]
    )
    assert settings_from_args(args) == document.model_copy(
        update={"sim": SimSpec(gpu="l40s", max_num_seqs=3)}
    )


def test_a_bad_settings_document_is_exit_2_naming_the_field(capsys):
    assert main(["sim", "--settings-json", '{"tensor_parallel": 0}']) == 2
    assert "--settings-json: tensor_parallel" in capsys.readouterr().err
    assert main(["sim", "--settings-json", '{"gpus": "h100-sxm"}']) == 2
    assert "gpus" in capsys.readouterr().err
