"""A server that lies about usage (reports more tokens than it streamed) is caught by the audit,
and a run whose confirmation holds such requests is not publishable, with the reason named."""

from __future__ import annotations

import pytest

from tests import factories
from tests.integration.test_probe_faults import probe
from tokenwatt import policy

pytestmark = pytest.mark.anyio


async def test_usage_beyond_the_stream_is_counted_and_refused(fault_server):
    # Two tokens per event, usage says all of them: usage 4, 2 content chunks per request.
    record = await probe(fault_server.base_url("multi_token_events"), rate=20.0, window=1.0)
    assert record.window_requests > 0
    tokens = record.audits.tokens if record.audits else None
    assert tokens is not None
    assert tokens.usage_mismatches == record.window_requests
    assert tokens.examples[0].endswith("usage says 4 output tokens, 2 content chunks arrived")
    honest = await probe(fault_server.base_url("ok"), rate=20.0, window=1.0)
    assert honest.audits is not None
    assert honest.audits.tokens is not None
    assert honest.audits.tokens.usage_mismatches == 0

    run = factories.run()
    assert run.outcome is not None
    confirm = record.model_copy(update={"index": run.outcome.confirm_probes[0], "phase": "confirm"})
    probes = list(run.probes)
    probes[confirm.index] = confirm
    broken = policy.check_run(run.model_copy(update={"probes": probes}))
    rules = {v.rule: v.message for v in broken}
    assert "token_mismatches" in rules
    assert f"is {record.window_requests}, the maximum is 0" in rules["token_mismatches"]
