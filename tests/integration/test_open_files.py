"""The open-file budget (tokenwatt.load.open_files): raised before the run, or the run refused.

Limits are per process, so each case runs in a child process whose limits it sets first (any
process may lower its own limits), never in the test process.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.measure_cli import error_lines, files_in, load_spec_dict, measure_argv, write_spec
from tokenwatt.load.open_files import RESERVE_FILES, files_needed


def _lowered(soft: int, hard: int, cpus: int | None = None):
    """Set the child's open-file limits and, with ``cpus``, confine it to that many CPUs."""

    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        if cpus is not None:
            os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cpus])

    return preexec


def _measure_with_limits(
    repo: Path, argv: list[str], *, soft: int, hard: int, cpus: int, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """A measure command line in a child whose open-file limits are ``soft`` / ``hard``, on
    ``cpus`` CPUs (the most load workers a run splits its streams over)."""
    return subprocess.run(
        argv,
        cwd=repo,
        preexec_fn=_lowered(soft, hard, cpus),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_files_needed_is_a_workers_share_of_the_cap_and_the_reserve():
    assert files_needed(1000) == 1000 + RESERVE_FILES == 1256
    assert files_needed(1000, 2) == 500 + RESERVE_FILES
    assert files_needed(1001, 2) == 501 + RESERVE_FILES  # the larger share


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
    # 1,000 streams need 1,256 > 64: raised to the hard limit, one worker holds them all; then
    # nothing more to do
    assert done.stdout.split() == ["1", "2048", "2048", "1", "2048", "2048"]


def _in_child(code: str, *, soft: int, hard: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=_lowered(soft, hard),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_a_cap_one_process_may_not_hold_is_split_over_workers():
    code = (
        "import resource\n"
        "from tokenwatt.load.open_files import ensure_open_files\n"
        "print(ensure_open_files(1500, max_workers=4), *resource.getrlimit(resource.RLIMIT_NOFILE))\n"
        "print(ensure_open_files(2500, max_workers=4), *resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )
    done = _in_child(code, soft=64, hard=1024)
    assert done.returncode == 0, done.stderr
    # 1,500 streams: one worker would need 1,756 > 1,024, two need 750 + 256 = 1,006 each;
    # 2,500: two would need 1,506, three 834 + 256 = 1,090, four 625 + 256 = 881
    assert done.stdout.split() == ["2", "1024", "1024", "4", "1024", "1024"]


def test_a_cap_no_split_fits_is_refused_naming_the_workers():
    code = (
        "from tokenwatt.load.open_files import ensure_open_files\n"
        "ensure_open_files(4096, max_workers=2)\n"
    )
    done = _in_child(code, soft=64, hard=1024)
    assert done.returncode != 0
    assert (
        "InputError: measurement.max_concurrency 4,096 needs about 2,304 open files in each of 2"
        f" load workers (one per CPU; a socket per stream, {RESERVE_FILES} besides), but this"
        " process may open at most 1,024 (the hard limit, ulimit -Hn): raise the hard limit"
        " (limits.conf, systemd's LimitNOFILE, docker --ulimit nofile) or lower"
        " measurement.max_concurrency to 1,536 or less"
    ) in done.stderr


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
        repo,
        measure_argv(spec, out / "run.json", "--quick"),
        soft=256,
        hard=1024,
        cpus=1,
        timeout_s=120,
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


def test_a_cap_that_fits_over_two_workers_runs_on_two(repo, tmp_path: Path):
    # A cap of 1,500 needs 1,756 descriptors in one process, 1,006 in each of two: under a hard
    # limit of 1,024 on two CPUs the run starts, and every probe runs on both workers (the
    # automatic choice would take one at these rates).
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs to split the streams over two workers")
    data = _tiny_spec(repo)
    data["measurement"]["max_concurrency"] = 1500
    spec = write_spec(tmp_path / "spec.yaml", data)
    out = tmp_path / "run.json"
    done = _measure_with_limits(
        repo,
        measure_argv(spec, out, "--quick", "--no-accuracy"),
        soft=256,
        hard=1024,
        cpus=2,
        timeout_s=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "every probe runs on at least 2 load workers" in done.stderr
    probes = json.loads(out.read_text())["probes"]
    assert probes
    assert {probe["workers"] for probe in probes} == {2}
