"""The redfish source against real Redfish servers over HTTPS: sushy-tools' sushy-static (readings
changed while it runs, the server stopped and restarted mid-run) and nginx serving the same
mockup with enforced Basic auth and session tokens (the sessions a SIGKILLed run leaves open
ended by the next run)."""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.peers import wait_for
from tokenwatt import energy
from tokenwatt.errors import PowerError
from tokenwatt.power import PowerSampler, RedfishSource, build_source
from tokenwatt.power.redfish_sessions import STATE_FILE, SessionLedger
from tokenwatt.schema.spec import PowerSpec

pytestmark = [pytest.mark.peer, pytest.mark.redfish]

SECRET = "Tw-s3cret-Pa55"


def spec(url: str, **kw) -> PowerSpec:
    return PowerSpec(source="redfish", url=url, sampling_hz=10, **kw)


def redfish(power: PowerSpec, *, env: dict[str, str]) -> RedfishSource:
    source = build_source(power, env=env)
    assert isinstance(source, RedfishSource)
    return source


def assert_logged_by_nginx(peer, request_line: str) -> None:
    """nginx writes a request's access-log line after it has sent the response, so the client can
    read the answer before the line is there: wait a little for it."""
    log = peer.dir / "nginx" / "access.log"
    try:
        wait_for(lambda: request_line in log.read_text(), timeout_s=5.0)
    except AssertionError:
        raise AssertionError(f"{request_line!r} not in nginx's log:\n{log.read_text()}") from None


def test_sushy_reading_follows_the_bmc_while_sampling(start_redfish):
    peer = start_redfish(watts=350)
    source = build_source(spec(peer.url), env={})
    sampler = PowerSampler(source, sampling_hz=10)
    sampler.start()
    wait_for(lambda: sampler.sample_count >= 3)
    peer.set_watts(1234.5)
    wait_for(lambda: sampler.evidence().samples[-1].watts == 1234.5)
    ev = sampler.stop()
    watts = [s.watts for s in ev.samples]
    assert watts[0] == 350.0
    assert watts[-1] == 1234.5
    assert set(watts) == {350.0, 1234.5}
    switch = watts.index(1234.5)
    assert all(w == 1234.5 for w in watts[switch:])  # no stale value after the change
    assert ev.gaps == []
    assert ev.scope == "node"
    assert (
        ev.description == "Node power from BMC (Redfish EnvironmentMetrics.PowerWatts, chassis 1)"
    )
    assert ev.power_limit_w == 2800.0


@pytest.mark.slow
def test_bmc_going_away_mid_run_leaves_a_gap_and_sampling_resumes(start_redfish):
    peer = start_redfish(watts=500)
    sampler = PowerSampler(build_source(spec(peer.url), env={}), sampling_hz=10)
    sampler.start()
    wait_for(lambda: sampler.sample_count >= 5)
    t_down = time.monotonic_ns()
    peer.stop()
    wait_for(lambda: sampler.gap_count == 1)
    time.sleep(0.5)
    before_restart = sampler.sample_count
    peer.set_watts(620)
    t_restart = time.monotonic_ns()
    peer.start()  # same port, same mockup
    wait_for(lambda: sampler.sample_count >= before_restart + 5)
    ev = sampler.stop()

    assert len(ev.gaps) == 1
    gap = ev.gaps[0]
    assert "cannot reach the BMC at https://127.0.0.1:" in gap.cause
    assert "failed reads" in gap.cause
    assert t_down <= gap.start_ns < gap.end_ns
    assert gap.end_ns >= t_restart  # closed by the first reading after the restart
    during = [s for s in ev.samples if gap.start_ns <= s.t_ns < gap.end_ns]
    assert during == []  # nothing invented while the BMC was away, in particular no zero
    after = [s.watts for s in ev.samples if s.t_ns >= gap.end_ns]
    assert after[0] == 620.0
    assert len(after) >= 5
    # a window around the outage shows the missing readings
    figures = energy.window_figures(
        ev, [(ev.samples[0].t_ns, ev.samples[-1].t_ns)], output_tokens=1
    )
    assert figures.max_gap_fraction is not None
    assert figures.max_gap_s is not None
    # the gap is the outage as the sampler saw it (however long the restart took on this box)
    assert figures.max_gap_s >= (t_restart - t_down) / 1e9 - 0.5
    # uncovered: at least the recorded gap (failed read to the next good one), at most the
    # stretch between the readings around it
    window_s = (ev.samples[-1].t_ns - ev.samples[0].t_ns) / 1e9
    recorded_s = (gap.end_ns - gap.start_ns) / 1e9
    assert recorded_s / window_s - 1e-6 <= figures.max_gap_fraction
    assert figures.max_gap_fraction <= figures.max_gap_s / window_s + 1e-6
    assert figures.max_gap_fraction < 1.0
    assert figures.energy_method == "integral"


def rewrite(peer, path: str, drop: tuple[str, ...]) -> None:
    """Serve the chassis without some of its links (atomic, as the server re-reads each GET)."""
    index = peer.dir / "mockup" / path / "index.json"
    body = json.loads(index.read_text())
    for key in drop:
        body.pop(key, None)
    tmp = index.with_suffix(".tmp")
    tmp.write_text(json.dumps(body))
    tmp.replace(index)


def test_classic_power_control_and_power_subsystem_forms(start_redfish):
    peer = start_redfish(watts=840)
    rewrite(peer, "Chassis/1", ("EnvironmentMetrics",))
    classic = build_source(spec(peer.url), env={})
    with classic:
        assert classic.read().watts == 840.0
    assert "Power.PowerControl[0].PowerConsumedWatts" in classic.description
    assert classic.power_limit_w == 2800.0

    rewrite(peer, "Chassis/1", ("EnvironmentMetrics", "Power"))
    peer.set_watts(1000)
    psu = build_source(spec(peer.url), env={})
    with psu:
        assert psu.read().watts == 1000.0  # 500 + 500 W input power of the two supplies
        peer.set_watts(1500)
        assert psu.read().watts == 1500.0
    assert "input power of 2 of 2 power supplies" in psu.description

    rewrite(peer, "Chassis/1", ("EnvironmentMetrics", "Power", "PowerSubsystem"))
    with pytest.raises(PowerError, match="no chassis at the BMC .* links a power resource"):
        build_source(spec(peer.url), env={}).open()


def test_chassis_is_chosen_by_id_and_a_wrong_one_is_named(start_redfish):
    peer = start_redfish()
    with redfish(spec(peer.url + "/redfish/v1", chassis="1"), env={}) as source:
        assert source.read().watts == 350.0
        assert source.chassis_path == "/redfish/v1/Chassis/1"
    with pytest.raises(
        PowerError, match=r"chassis 'System.Embedded.1' not found .*chassis there: 1\)"
    ):
        build_source(spec(peer.url, chassis="System.Embedded.1"), env={}).open()


def test_self_signed_certificate_with_and_without_verify_tls(start_redfish):
    peer = start_redfish()
    # verify_tls true against the system store: refused, with what to do
    with pytest.raises(PowerError) as info:
        build_source(spec(peer.url, verify_tls=True), env={}).open()
    message = str(info.value)
    assert "is not trusted" in message
    assert "verify_tls: false" in message
    assert "SSL_CERT_FILE" in message
    # verify_tls true with the BMC's CA given explicitly: accepted
    trusted = build_source(
        spec(peer.url, verify_tls=True), env={"SSL_CERT_FILE": str(peer.ca_file)}
    )
    with trusted:
        assert trusted.read().watts == 350.0
    # verify_tls false: accepted whatever the environment says
    lax = build_source(spec(peer.url, verify_tls=False), env={"SSL_CERT_FILE": "/nonexistent"})
    with lax:
        assert lax.read().watts == 350.0


def test_plain_http_bmc(start_redfish):
    peer = start_redfish(tls=False, watts=111)
    assert peer.url.startswith("http://")
    with build_source(spec(peer.url), env={}) as source:
        assert source.read().watts == 111.0


# -- nginx: enforced credentials and sessions -------------------------------------------------------


def creds(url: str, *, auth=None, **kw) -> PowerSpec:
    return spec(url, username="admin", password_env="TW_BMC_PASS", auth=auth, **kw)


def test_basic_auth_against_nginx(start_redfish):
    peer = start_redfish(server="nginx", password=SECRET, watts=777)
    source = redfish(creds(peer.url, auth="basic"), env={"TW_BMC_PASS": SECRET})
    with source:
        assert source.read().watts == 777.0
        assert source._token is None  # every request carried Basic credentials


def test_session_token_against_nginx_and_login_again_when_it_expires(start_redfish):
    peer = start_redfish(server="nginx", password=SECRET, watts=640)
    source = redfish(creds(peer.url, auth="session"), env={"TW_BMC_PASS": SECRET})
    with source:
        assert source._token == "tw-session-token-1"
        assert source._use_basic is False
        assert source.read().watts == 640.0
        source._token = "expired-token"  # the BMC forgot the session: 401, log in again
        peer.set_watts(650)
        assert source.read().watts == 650.0
        assert source._token == "tw-session-token-1"
    # close() deleted the session (nginx logs the DELETE)
    assert_logged_by_nginx(peer, '"DELETE /redfish/v1/SessionService/Sessions/1')


def test_auto_auth_uses_a_session_where_offered_and_basic_where_not(start_redfish):
    nginx = start_redfish(server="nginx", password=SECRET)
    with redfish(creds(nginx.url), env={"TW_BMC_PASS": SECRET}) as source:
        assert source._token == "tw-session-token-1"
    sushy = start_redfish()  # answers the login with 204 and no token
    with redfish(creds(sushy.url), env={"TW_BMC_PASS": SECRET}) as source:
        assert source._token is None
        assert source._use_basic is True
        assert source.read().watts == 350.0


def test_wrong_credentials_give_a_clear_error_and_the_secret_goes_nowhere(
    start_redfish, caplog, tmp_path: Path
):
    peer = start_redfish(server="nginx", password=SECRET)
    wrong = "Wr0ng-" + SECRET
    log_file = tmp_path / "tokenwatt.log"
    handler = logging.FileHandler(log_file)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(handler)
    caplog.set_level(logging.DEBUG)  # every logger, httpx and httpcore included
    try:
        source = build_source(creds(peer.url, auth="basic"), env={"TW_BMC_PASS": wrong})
        with pytest.raises(PowerError) as info:
            PowerSampler(source, sampling_hz=10).start()
        # the same with a good password that the BMC stops accepting mid-run: a gap, not a crash
        good = redfish(creds(peer.url, auth="basic"), env={"TW_BMC_PASS": SECRET})
        sampler = PowerSampler(good, sampling_hz=10)
        sampler.start()
        wait_for(lambda: sampler.sample_count >= 2)
        good._password = wrong
        wait_for(lambda: sampler.gap_count == 1)
        ev = sampler.stop()
    finally:
        root.removeHandler(handler)
        handler.close()
    message = str(info.value)
    assert message.startswith(f"401 from BMC at {peer.url}/redfish/v1/")
    assert "for user 'admin': check $TW_BMC_PASS" in message
    assert ev.gaps[0].cause.startswith("401 from BMC")
    (tmp_path / "evidence.json").write_text(ev.model_dump_json())
    (tmp_path / "error.txt").write_text(message + repr(info.value.__cause__))

    forms = [s.encode() for s in (SECRET, wrong)]
    forms += [base64.b64encode(f"admin:{s}".encode()) for s in (SECRET, wrong)]
    texts = [caplog.text.encode()] + [p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()]
    assert caplog.records  # the check below looks at something
    assert log_file.stat().st_size > 0
    for text in texts:
        for form in forms:
            assert form not in text


def test_missing_credentials_are_refused_with_advice(start_redfish):
    peer = start_redfish(server="nginx", password=SECRET)
    with pytest.raises(PowerError, match="401 from BMC .* for user None"):
        build_source(spec(peer.url), env={}).open()


def test_unreachable_bmc_is_a_setup_error(start_redfish):
    peer = start_redfish()
    peer.stop()
    with pytest.raises(PowerError, match="cannot reach the BMC at https://127.0.0.1"):
        RedfishSource(url=peer.url).open()


# -- hardening: the session token in debug logs, sessions ended on every way out, loud warnings ----


def _debug_log(records_from, *, redacting: bool) -> str:
    """What a -vv run's log handler writes while ``records_from`` runs (httpx, httpcore too)."""
    import io

    from tokenwatt.redact import guard_handlers

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setLevel(logging.DEBUG)
    if redacting:
        guard_handlers([handler], [("TW_BMC_PASS", SECRET)])
    root = logging.getLogger()
    old_level, old_handlers = root.level, list(root.handlers)
    loggers = [logging.getLogger(n) for n in ("httpx", "httpcore")]
    old = [lg.level for lg in loggers]
    # Only this handler: another redacting one (left by a CLI test) rewrites the shared record.
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG)
    for lg in loggers:
        lg.setLevel(logging.DEBUG)
    try:
        records_from()
    finally:
        root.handlers[:] = old_handlers
        root.setLevel(old_level)
        for lg, level in zip(loggers, old, strict=True):
            lg.setLevel(level)
    return stream.getvalue()


def test_the_session_token_never_reaches_a_debug_log(start_redfish):
    peer = start_redfish(server="nginx", password=SECRET)

    def session() -> None:
        with redfish(creds(peer.url, auth="session"), env={"TW_BMC_PASS": SECRET}) as source:
            source.read()

    # Without the filter httpcore's debug log carries the token (the leak the filter stops) ...
    assert "tw-session-token-1" in _debug_log(session, redacting=False)
    # ... and with it, neither the token nor the password.
    text = _debug_log(session, redacting=True)
    assert "X-Auth-Token" in text
    assert "tw-session-token-1" not in text
    assert SECRET not in text


def test_a_session_is_deleted_when_open_is_interrupted(start_redfish, monkeypatch):
    peer = start_redfish(server="nginx", password=SECRET)
    source = redfish(creds(peer.url, auth="session"), env={"TW_BMC_PASS": SECRET})

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(source, "_find_chassis", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        source.open()
    assert_logged_by_nginx(peer, '"DELETE /redfish/v1/SessionService/Sessions/1')
    assert source._client is None
    assert [e for e in SessionLedger().entries() if e.bmc_url == peer.url] == []


def test_a_password_over_plain_http_or_unverified_tls_is_warned_about(caplog):
    env = {"TW_BMC_PASS": SECRET}
    with caplog.at_level(logging.WARNING):
        redfish(creds("http://bmc.example:8000"), env=env)
    assert "INSECURE" in caplog.text
    assert "plain http://" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        redfish(creds("https://bmc.example", verify_tls=False), env=env)
    assert "certificate is not verified" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        redfish(creds("https://bmc.example", verify_tls=True), env=env)
        redfish(spec("http://bmc.example"), env={})  # no password: nothing to expose
    assert "INSECURE" not in caplog.text
    assert SECRET not in caplog.text


# -- sessions a SIGKILL leaves open: recorded, and ended by the next run ----------------------------

SESSIONS = "/redfish/v1/SessionService/Sessions"

KILLED_RUN = """
import os, sys, time
from tokenwatt.power import RedfishSource
source = RedfishSource(
    url=sys.argv[1], username="admin", password=os.environ["TW_BMC_PASS"], auth="session"
)
source.open()
print("open", flush=True)
time.sleep(120)
"""


def killed_run(peer, state: Path, repo: Path, log: Path) -> int:
    """A run in another process that opens a session to ``peer`` and is SIGKILLed; its pid."""
    env = {
        **os.environ,
        "PYTHONPATH": str(repo),
        "TOKENWATT_STATE_DIR": str(state),
        "TW_BMC_PASS": SECRET,
    }
    with log.open("w") as stderr:
        run = subprocess.Popen(
            [sys.executable, "-c", KILLED_RUN, peer.url],
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    assert run.stdout is not None
    try:
        line = run.stdout.readline()
        assert line == "open\n", f"the run did not open its session:\n{log.read_text()}"
        (entry,) = SessionLedger(state / STATE_FILE).entries()
        assert (entry.pid, entry.session_url) == (run.pid, f"{SESSIONS}/1")
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        run.stdout.close()
    assert run.returncode == -signal.SIGKILL
    access_log = (peer.dir / "nginx" / "access.log").read_text()
    assert f"POST {SESSIONS} " in access_log
    assert "DELETE" not in access_log  # the SIGKILL left the session open
    return run.pid


def children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (nginx's workers, for its master)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rpartition(")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone since the listing
        if ppid == pid:
            found.add(int(stat.parent.name))
    return found


def number_the_next_session_2(peer) -> None:
    """Make nginx give the next login session 2, as a BMC numbers its sessions (it gives every
    login session 1), and serve both; reloaded with SIGHUP, and waited for until the old worker
    is gone (until then it too accepts connections, with the old configuration)."""
    conf = peer.dir / "nginx" / "nginx.conf"
    text = conf.read_text()
    changed = text.replace(
        f'add_header Location "{SESSIONS}/1"', f'add_header Location "{SESSIONS}/2"'
    ).replace(f"location = {SESSIONS}/1 {{", f"location ~ ^{SESSIONS}/[12]$ {{")
    assert changed.count(f"{SESSIONS}/2") == 1
    assert f"{SESSIONS}/[12]" in changed
    conf.write_text(changed)
    old_workers = children(peer.pid)
    assert old_workers
    os.kill(peer.pid, signal.SIGHUP)
    wait_for(lambda: (new := children(peer.pid)) != set() and not new & old_workers)
    response = httpx.get(f"{peer.url}{SESSIONS}/2", verify=False, trust_env=False)
    assert response.status_code == 200  # 401 before the reload: no such session


def test_a_session_left_by_a_killed_run_is_deleted_by_the_next_run(
    start_redfish, repo, tmp_path, monkeypatch, caplog
):
    peer = start_redfish(server="nginx", password=SECRET)
    state = tmp_path / "state"
    killed = killed_run(peer, state, repo, tmp_path / "killed.log")
    number_the_next_session_2(peer)
    monkeypatch.setenv("TOKENWATT_STATE_DIR", str(state))
    ledger = SessionLedger(state / STATE_FILE)
    with (
        caplog.at_level(logging.INFO, logger="tokenwatt.power.redfish"),
        redfish(creds(peer.url, auth="session"), env={"TW_BMC_PASS": SECRET}) as source,
    ):
        assert source._session_url == f"{SESSIONS}/2"
        # ended while this run opened, not by its own close: that one is session 2
        assert_logged_by_nginx(peer, f'"DELETE {SESSIONS}/1 ')
        (entry,) = ledger.entries()
        assert (entry.pid, entry.session_url) == (os.getpid(), f"{SESSIONS}/2")
        assert source.read().watts == 350.0
    assert f"Redfish session {SESSIONS}/1 at {peer.url}, left open since " in caplog.text
    assert f"by process {killed} (gone): deleted" in caplog.text
    assert_logged_by_nginx(peer, f'"DELETE {SESSIONS}/2 ')
    assert ledger.entries() == []
    text = caplog.text + (state / STATE_FILE).read_text() + (tmp_path / "killed.log").read_text()
    assert "tw-session-token-1" not in text
    assert SECRET not in text


def test_a_session_id_the_bmc_gave_again_is_not_deleted(start_redfish, repo, tmp_path, monkeypatch):
    """nginx gives every login session 1, as a BMC reuses the id of a session it ended: the
    killed run's entry is dropped, and this run's own session is not deleted under it."""
    peer = start_redfish(server="nginx", password=SECRET)
    state = tmp_path / "state"
    killed = killed_run(peer, state, repo, tmp_path / "killed.log")
    monkeypatch.setenv("TOKENWATT_STATE_DIR", str(state))
    ledger = SessionLedger(state / STATE_FILE)
    with redfish(creds(peer.url, auth="session"), env={"TW_BMC_PASS": SECRET}) as source:
        assert source._session_url == f"{SESSIONS}/1"
        assert [e.pid for e in ledger.entries()] == [os.getpid()]
        peer.set_watts(360)
        assert source.read().watts == 360.0  # the token still works
        # nginx logs in order: once the read is logged, a DELETE before it would be too
        assert_logged_by_nginx(peer, '"GET /redfish/v1/Chassis/1/EnvironmentMetrics')
        assert "DELETE" not in (peer.dir / "nginx" / "access.log").read_text()
    assert_logged_by_nginx(peer, f'"DELETE {SESSIONS}/1 ')
    assert killed not in [e.pid for e in ledger.entries()]
    assert ledger.entries() == []


def test_a_closed_session_leaves_no_entry(start_redfish, tmp_path, monkeypatch):
    peer = start_redfish(server="nginx", password=SECRET)
    state = tmp_path / "state"
    monkeypatch.setenv("TOKENWATT_STATE_DIR", str(state))
    ledger = SessionLedger(state / STATE_FILE)
    with redfish(creds(peer.url, auth="session"), env={"TW_BMC_PASS": SECRET}):
        (entry,) = ledger.entries()
        assert (entry.bmc_url, entry.username) == (peer.url, "admin")
        assert (entry.pid, entry.session_url) == (os.getpid(), f"{SESSIONS}/1")
        text = (state / STATE_FILE).read_text()
        assert "tw-session-token-1" not in text
        assert SECRET not in text
    assert_logged_by_nginx(peer, f'"DELETE {SESSIONS}/1 ')
    assert ledger.entries() == []
