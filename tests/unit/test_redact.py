"""Secrets out of logs and files: which values are guarded, what the log filter rewrites."""

from __future__ import annotations

import logging

import pytest

from tests import factories
from tokenwatt import redact


@pytest.mark.parametrize(
    ("value", "guarded"),
    [
        ("none", False),
        ("1000", False),
        ("aaaaaaaaaaaa", False),
        ("ababab", False),
        ("calvin", True),
        ("sk-proj-abc123", True),
        ("123456", True),
    ],
)
def test_guardable(value, guarded):
    assert redact.guardable(value) is guarded


@pytest.mark.parametrize(
    ("line", "secret"),
    [
        (
            "receive_response_headers.complete return_value=(b'HTTP/1.1', 201, b'Created',"
            " [(b'X-Auth-Token', b'tok-123456'), (b'Location', b'/s/1')])",
            "tok-123456",
        ),
        ("headers={'Authorization': 'Bearer sk-live-998877'}", "sk-live-998877"),
        ("Authorization: Basic YWRtaW46cGFzcw==", "YWRtaW46cGFzcw=="),
        ("x-api-key=abcdef123", "abcdef123"),
        ('{"UserName": "admin", "Password": "hunter2hunter"}', "hunter2hunter"),
        ("GET http://admin:pa55word@bmc/redfish/v1", "pa55word"),
        ("set-cookie: session=abc123def; Path=/", "session=abc123def"),
    ],
)
def test_redact_text_removes_auth_material(line, secret):
    clean = redact.redact_text(line)
    assert secret not in clean
    assert redact.REDACTED in clean


def test_the_filter_rewrites_arguments_and_tracebacks():
    filt = redact.RedactingFilter([("TW_KEY", "sk-very-secret")])
    try:
        raise ValueError("bad key sk-very-secret")
    except ValueError:
        import sys

        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "using %s", ("sk-very-secret",), sys.exc_info()
        )
    assert filt.filter(record)
    assert record.getMessage() == "using REDACTED"
    assert record.exc_text is not None
    assert "sk-very-secret" not in record.exc_text
    assert "ValueError" in record.exc_text


def test_spec_secrets_reads_only_named_guardable_values():
    spec = factories.spec(
        engine={"model": "m", "api_key_env": "TW_A"},
        power={"source": "ipmi", "host": "bmc", "username": "u", "password_env": "TW_B"},
    )
    assert redact.spec_secrets(spec, {"TW_A": "sk-abcdef-12", "TW_B": "none"}) == [
        ("TW_A", "sk-abcdef-12")
    ]
    assert redact.spec_secrets(None, {"TW_A": "x"}) == []


def test_redact_data_leaves_numbers_and_reports_names():
    data = {"a": ["k sk-abcdef-12", 123456], "sk-abcdef-12": 1}
    clean, names = redact.redact_data(data, [("TW_A", "sk-abcdef-12"), ("TW_B", "123456")])
    assert clean == {"a": ["k REDACTED", 123456], "REDACTED": 1}
    assert names == ["TW_A"]


def test_a_load_worker_redacts_its_own_log_records():
    import io
    import logging

    from tokenwatt.load._workers import worker_logging

    root = logging.getLogger()
    saved = root.handlers[:]
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root.handlers = [handler]
    try:
        worker_logging(logging.INFO, {"TW_KEY": "sk-Zq81xLw0Pd7"})
        logging.getLogger("tokenwatt.load").warning(
            "sent Authorization: Bearer sk-Zq81xLw0Pd7 to http://u:pw@host/v1"
        )
    finally:
        root.handlers = saved
        handler.close()
    text = stream.getvalue()
    assert "sent Authorization:" in text
    assert "sk-Zq81xLw0Pd7" not in text
    assert "pw@" not in text
