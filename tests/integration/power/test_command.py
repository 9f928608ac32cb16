"""The command source running real commands (sh, cat, printf) whose output changes mid-run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.peers import wait_for
from tokenwatt.errors import PowerError
from tokenwatt.power import CommandSource, PowerSampler, build_source
from tokenwatt.schema.spec import PowerSpec


def put(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def test_json_path_follows_the_output_and_a_failing_command_is_a_gap(tmp_path):
    state = tmp_path / "meter.json"
    put(state, json.dumps({"gpu": [{"power": {"draw": 310.5}}]}))
    spec = PowerSpec(
        source="command", command=f"cat {state}", field="gpu.0.power.draw", sampling_hz=20
    )
    sampler = PowerSampler(build_source(spec), sampling_hz=20)
    sampler.start()
    wait_for(lambda: sampler.sample_count >= 3)
    put(state, json.dumps({"gpu": [{"power": {"draw": 402.0}}]}))
    wait_for(lambda: sampler.evidence().samples[-1].watts == 402.0)
    state.unlink()  # the meter disappears: cat exits 1
    wait_for(lambda: sampler.gap_count == 1)
    put(state, json.dumps({"gpu": [{"power": {"draw": 405.0}}]}))
    wait_for(lambda: sampler.evidence().samples[-1].watts == 405.0)
    ev = sampler.stop()
    assert [w for w in dict.fromkeys(s.watts for s in ev.samples)] == [310.5, 402.0, 405.0]
    assert len(ev.gaps) == 1
    assert ev.gaps[0].cause.startswith(f"power command exited 1: cat {state}: cat: ")
    assert "No such file or directory" in ev.gaps[0].cause
    assert ev.scope == "node"
    assert ev.description == f"Node power from command `cat {state}`, field gpu.0.power.draw"


def test_regex_group_from_text_and_board_scope(tmp_path):
    spec = PowerSpec(
        source="command",
        command="printf 'GPU 0\\n  Power Draw : %s W\\n' \"$TW_TEST_WATTS\"",
        field=r"Power Draw\s*:\s*([0-9.]+) W",
        scope="board",
    )
    source = build_source(spec, env={"TW_TEST_WATTS": "612.25", "PATH": "/usr/bin:/bin"})
    with source:
        assert source.read().watts == 612.25
    assert source.scope == "board"
    assert source.description.startswith("GPU board power from command")


def test_plain_number_output():
    with CommandSource(command="echo 1.5e2") as source:
        assert source.read().watts == 150.0


def test_set_up_fails_on_output_without_a_reading():
    with pytest.raises(PowerError, match="not a number of watts"):
        CommandSource(command="echo N/A").open()
    with pytest.raises(PowerError, match="exited 127"):
        CommandSource(command="tokenwatt-no-such-meter").open()


def test_a_hung_command_is_a_failed_reading():
    # a pipeline: its children must die with it, or the output pipe would stay open
    source = CommandSource(command="sleep 5 | cat", timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(PowerError, match="did not finish within 0.3 s"):
        source.read()
    assert time.monotonic() - started < 3
