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


async def _stream(port: int, index: int, tokens: int) -> int:
    """One raw streamed request read to its end; the bytes received."""
    import asyncio

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"prompt": [index], "max_tokens": tokens, "stream": True}).encode()
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    received, tail = 0, b""
    try:
        while not tail.endswith(b"\r\n0\r\n\r\n"):
            data = await reader.read(65536)
            if not data:
                break
            received += len(data)
            tail = (tail + data)[-16:]
    finally:
        writer.close()
    return received


async def test_a_server_far_behind_its_schedule_still_answers_for_its_stamps():
    """300 streams of 4,000 events 0.05 ms apart ask for 6 million events a second, far more
    than one process writes: it falls behind, but still reads and answers GET /stamps at once
    (it wrote for seconds on end before, and the calibration's fetch timed out after 30 s)."""
    import asyncio
    import time

    with CalibrationServer(ttft_ms=1, itl_ms=0.05) as server:
        assert server.port is not None
        streams = [asyncio.create_task(_stream(server.port, i, 4000)) for i in range(300)]
        await asyncio.sleep(0.5)
        t0 = time.monotonic()
        stamps = await asyncio.to_thread(server.stamps)
        answered_s = time.monotonic() - t0
        running = sum(not s.done() for s in streams)
        for s in streams:
            s.cancel()
        await asyncio.gather(*streams, return_exceptions=True)
    assert answered_s < 2.0, f"the stamps came {answered_s:.1f} s after they were asked for"
    assert running > 0, "every stream had ended when the stamps came: the server was not behind"
    assert isinstance(stamps, dict)


async def test_two_server_processes_share_the_port_and_hand_over_every_requests_stamps():
    import asyncio

    import httpx

    from tokenwatt.load.calibrate import server_lateness_ms

    with CalibrationServer(ttft_ms=20, itl_ms=2, processes=2) as server:
        assert server.port is not None
        assert len(server.control_ports) == 2
        sizes = await asyncio.gather(*(_stream(server.port, i, 20) for i in range(40)))
        async with httpx.AsyncClient() as client:
            each = [
                (await client.get(f"http://127.0.0.1:{control}/stamps")).json()
                for control in server.control_ports
            ]
        assert all(size > 0 for size in sizes)
        await asyncio.gather(*(_stream(server.port, 100 + i, 20) for i in range(10)))
        merged = server.stamps()
    # the kernel spread 40 connections over both processes (all on one: p = 2^-39)
    assert all(len(stamps) > 0 for stamps in each)
    assert sum(len(stamps) for stamps in each) == 40
    assert len(merged) == 10  # the second batch, from both, each request's once
    assert all(len(writes) == 21 for writes in merged.values())  # the read and 20 writes
    late = server_lateness_ms(merged, ttft_ms=20, itl_ms=2)
    assert len(late) == 200
    assert sorted(late)[100] < 5.0  # 1,000 events a second: on time
