"""Running ``tokenwatt run`` as a user would, for the measure tests: a real process, real signals."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tokenwatt.schema.run import RunFile
from tokenwatt.store import load_run

#: Geometry of the tiny random-weight Llama the vLLM peer serves (its config.json), so specs
#: need no model file.
TINY_GEOMETRY = {
    "num_hidden_layers": 2,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
}


def tokenwatt_exe() -> Path:
    """The ``tokenwatt`` console script of the environment running the tests."""
    exe = Path(sys.executable).parent / "tokenwatt"
    assert exe.is_file(), (
        f"{exe} is missing: install tokenwatt into this environment (pip install -e .)"
    )
    return exe


def measure_argv(
    spec: str | Path, out: Path, *extra: str, label: str = "a", role: str = "baseline"
) -> list[str]:
    """``python -m tokenwatt run ...`` with the usual arguments."""
    return [
        sys.executable,
        "-m",
        "tokenwatt",
        "run",
        "--spec",
        str(spec),
        "--label",
        label,
        "--role",
        role,
        "--out",
        str(out),
        *extra,
    ]


def run_measure(
    argv: Sequence[str], *, cwd: Path, timeout_s: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run a measure command line to the end; stdout and stderr captured as text.

    ``timeout_s`` guards against a hang, it is no speed limit: a quick run that takes 30 s on a
    quiet 2-core box took over 2 minutes on one shared with other CPU-heavy jobs.
    """
    return subprocess.run(
        list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def error_lines(stderr: str) -> list[str]:
    """The ``SomethingError: ...`` / ``Interrupted: ...`` lines the CLI prints for a failure."""
    return [
        line
        for line in stderr.splitlines()
        if line.split(":", 1)[0].endswith(("Error", "Interrupted"))
        and " " not in line.split(":", 1)[0]
    ]


def files_in(folder: Path) -> list[str]:
    """Every entry of a folder, hidden temporary files included, sorted."""
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def children(pid: int) -> list[int]:
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False
    ).stdout
    return [int(p) for p in out.split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")  # a zombie is gone for every practical purpose
    with contextlib.suppress(OSError):
        return stat.read_text().split()[2] != "Z"
    return False


def wait_gone(pids: Sequence[int], timeout_s: float) -> list[int]:
    """Wait until every process has exited; return those still alive after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def kill_group(proc: subprocess.Popen[str]) -> None:
    """Clean up after a failed test: the measure process and everything it started."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def signal_when(
    argv: Sequence[str],
    *,
    cwd: Path,
    pattern: str,
    signum: int = signal.SIGINT,
    to_group: bool = True,
    timeout_s: float = 120,
) -> tuple[int, str]:
    """Start a measure command line in its own process group, send ``signum`` once a stderr
    line matches ``pattern`` (to the whole group, as a terminal's Ctrl-C does, or to the
    process alone), and wait for it to end: its exit status and all of its stderr.
    """
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stderr is not None
    seen = ""
    with proc:
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                line = proc.stderr.readline()
                seen += line
                if not line or re.search(pattern, line):
                    break
            assert re.search(pattern, seen), seen[-3000:]
            if to_group:
                os.killpg(proc.pid, signum)
            else:
                os.kill(proc.pid, signum)
            proc.wait(timeout=30)
        finally:
            kill_group(proc)
        seen += proc.stderr.read()
    return proc.returncode, seen


def write_spec(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def load_spec_dict(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def tiny_sim_spec_data(repo: Path) -> dict[str, Any]:
    """``tests/data/tiny-sim.spec.yaml`` as a dict, its model config and accuracy suite as
    absolute paths, so that it can be changed and written anywhere (:func:`write_spec`)."""
    path = repo / "tests/data/tiny-sim.spec.yaml"
    data = load_spec_dict(path)
    for section, key in (("model", "config"), ("accuracy", "suite")):
        data[section][key] = str((path.parent / data[section][key]).resolve())
    return data


def report_cli(
    runs: Sequence[Path], out: Path, *, title: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """``tokenwatt report RUN... --title TITLE --out OUT`` in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "tokenwatt", "report", *map(str, runs), "--title", title]
        + ["--out", str(out)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def validate_cli(path: Path, *, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``tokenwatt validate FILE`` in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "tokenwatt", "validate", str(path)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def load_valid_run(path: Path, *, cwd: Path) -> RunFile:
    """The run file, after ``tokenwatt validate`` accepted it."""
    checked = validate_cli(path, cwd=cwd)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return load_run(path)
