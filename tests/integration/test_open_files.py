"""The open-file budget (tokenwatt.load.open_files): raised before the run, or the run refused.

Limits are per process, so each case runs in a child process whose limits it sets first (any
process may lower its own limits), never in the test process.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.measure_cli import error_lines, files_in, load_spec_dict, measure_argv, write_spec
from tokenwatt.load.open_files import RESERVE_FILES, files_needed


def _lowered(soft: int, hard: int):
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return preexec


def _measure_with_limits(
    repo: Path, argv: list[str], *, soft: int, hard: int, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """A measure command line in a child whose open-file limits are ``soft`` / ``hard``."""
    return subprocess.run(
        argv,
        cwd=repo,
        preexec_fn=_lowered(soft, hard),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_files_needed_is_the_cap_and_the_reserve():
    assert files_needed(1000) == 1000 + RESERVE_FILES == 1256


def test_the_soft_limit_is_raised_to_the_hard_limit_for_the_cap():
    code = (
        "import resource\n"
        "from tokenwatt.load.open_files import ensure_open_files\n"
        "print(ensure_open_files(1000), *resource.getrlimit(resource.RLIMIT_NOFILE))\n"
        "print(ensure_open_files(10), *resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=_lowered(64, 2048),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    # 1,000 streams need 1,256 > 64: raised to the hard limit; then nothing more to do
    assert done.stdout.split() == ["2048", "2048", "2048", "2048", "2048", "2048"]


def _tiny_spec(repo: Path) -> dict[str, Any]:
    """tests/data/tiny-sim.spec.yaml with its files named absolutely (the copy moves)."""
    data = load_spec_dict(repo / "tests/data/tiny-sim.spec.yaml")
    for section, key in (("model", "config"), ("accuracy", "suite")):
        data[section][key] = str((repo / "tests/data" / data[section][key]).resolve())
    return data


def test_a_cap_over_the_hard_limit_is_refused_before_anything_runs(repo, tmp_path):
    data = _tiny_spec(repo)
    data["measurement"]["max_concurrency"] = 4096
    spec = write_spec(tmp_path / "spec.yaml", data)
    out = tmp_path / "runs"
    out.mkdir()
    done = _measure_with_limits(
        repo, measure_argv(spec, out / "run.json", "--quick"), soft=256, hard=1024, timeout_s=120
    )
    assert done.returncode == 2, done.stderr
    assert error_lines(done.stderr) == [
        "InputError: measurement.max_concurrency 4,096 needs about 4,352 open files in a load"
        f" worker (a socket per stream, {RESERVE_FILES} besides), but this process may open at"
        " most 1,024 (the hard limit, ulimit -Hn): raise the hard limit (limits.conf,"
        " systemd's LimitNOFILE, docker --ulimit nofile) or lower measurement.max_concurrency"
        " to 768 or less"
    ]
    assert "Traceback" not in done.stderr
    assert "simulator" not in done.stdout + done.stderr.split("InputError")[0]  # not started
    assert files_in(out) == []


def test_the_same_run_starts_when_the_cap_fits(repo, tmp_path: Path):
    # tiny-sim's cap of 256 needs 512 descriptors: a soft limit of 256 is raised and it runs
    spec = write_spec(tmp_path / "spec.yaml", _tiny_spec(repo))
    out = tmp_path / "run.json"
    done = _measure_with_limits(
        repo,
        measure_argv(spec, out, "--quick", "--no-accuracy"),
        soft=256,
        hard=1024,
        timeout_s=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.is_file()
