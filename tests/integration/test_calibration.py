"""The load generator's self-calibration against its own local server, and a run it refuses.

The calibration server is a real process on real sockets; its stamps (read and each write, on the
shared monotonic clock) are the truth the client's TTFT and TPOT are checked against.
"""

from __future__ import annotations

import json

import pytest

from tests import factories
from tests.measure_cli import (
    error_lines,
    load_valid_run,
    measure_argv,
    run_measure,
    tiny_sim_spec_data,
    write_spec,
)
from tokenwatt.load.calibrate import CalibrationServer, calibrate
from tokenwatt.load.workload import build_workload

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_the_client_is_within_milliseconds_of_the_servers_stamps():
    spec = factories.spec(
        workload={"input_tokens": 64, "output_tokens": 50, "seed": 1},
        sweep={"start_rps": 10, "max_rps": 40},
    )
    work = build_workload(spec, context_tokens=4096)
    cal = await calibrate(spec.engine, work, spec.sweep, request_timeout_s=30, max_concurrency=1024)
    assert [r.rate_rps for r in cal.rungs] == [10, 40]
    assert cal.output_tokens == 50
    assert cal.itl_ms == pytest.approx(20.0)  # a stream lasts about a second
    assert not cal.ceiling_found
    assert cal.ceiling_rps == 40
    for r in cal.rungs:
        assert not r.client_bound, r.client_bound_reasons
        assert r.window_requests > 0
        assert r.matched_requests == r.window_requests  # every window request found its stamps
        assert r.ttft_error_p50_ms is not None
        assert 0 < r.ttft_error_p50_ms < 5.0
        assert r.tpot_error_p50_ms is not None
        assert abs(r.tpot_error_p50_ms) < 0.5
        assert r.send_lag_p99_ms is not None
        assert r.send_lag_p99_ms < 10.0


def test_the_server_answers_with_its_shape_and_keeps_its_stamps():
    import httpx

    from tokenwatt.load.calibration_server import body_key

    with CalibrationServer(ttft_ms=30, itl_ms=5) as server:
        body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 4, "stream": True}).encode()
        with httpx.stream("POST", f"{server.url}/v1/completions", content=body) as answer:
            lines = [line for line in answer.iter_lines() if line.startswith("data: ")]
        stamps = server.stamps()
        assert server.stamps() == {}  # read once
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert [e["choices"][0]["finish_reason"] for e in events[:4]] == [None, None, None, "length"]
    assert events[4]["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    read, *writes = stamps[body_key(body)]
    assert len(writes) == 4
    # token k is due 30 + 5 k ms after the read, and never written before it is due
    assert all(t - read >= 30_000_000 + k * 5_000_000 for k, t in enumerate(writes))


def test_a_run_the_client_cannot_pace_is_refused_before_any_load(repo, tmp_path):
    """One concurrency slot for 4 req/s of streams that each take most of a second: the first
    rung waits for slots, so it is client-bound and the run is refused with exit 2, nothing
    written. (At 20 req/s the rung's window requests queued behind the one slot for 50 s.)"""
    data = tiny_sim_spec_data(repo)
    data["load"] = {"calibrate": True}  # tiny-sim's runs skip it
    data["measurement"]["max_concurrency"] = 1
    data["sweep"] = {"rates": [4]}
    spec_path = write_spec(tmp_path / "tight.spec.yaml", data)
    out = tmp_path / "run.json"
    done = run_measure(measure_argv(spec_path, out, "--no-accuracy"), cwd=repo)
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = error_lines(done.stderr)
    assert line.startswith("CalibrationError: sweep.rates: 4 is above what this load generator")
    assert "concurrency slot" in line
    assert not out.exists()
    # the same spec with room to pace runs, and its run file holds the calibration
    data["measurement"]["max_concurrency"] = 256
    data["sweep"] = {"rates": [2]}
    write_spec(spec_path, data)
    done = run_measure(measure_argv(spec_path, out, "--no-accuracy"), cwd=repo)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "calibration: not client-bound up to 2 req/s" in done.stderr
    run = load_valid_run(out, cwd=repo)
    assert run.calibration is not None
    assert [r.rate_rps for r in run.calibration.rungs] == [2]
    assert run.calibration.rungs[0].matched_requests == run.calibration.rungs[0].window_requests
    # the report carries it to the result and its page
    from tokenwatt.report import LoadedRun, build_result

    result = build_result(
        [LoadedRun(run=run, path=str(out))], title="Calibrated", report_command="tokenwatt report"
    )
    (config,) = result.configs
    assert config.client_calibration is not None
    assert config.client_calibration.startswith("not client-bound up to 2 req/s")
