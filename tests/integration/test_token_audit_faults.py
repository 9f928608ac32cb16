"""A server that lies about usage (reports more tokens than it streamed, beyond the max_tokens
asked) is caught by the token audit, and a run whose confirmation holds such requests is not
publishable, with the reason named. A server that honestly streams several tokens a chunk is
recorded as such and stays publishable."""

from __future__ import annotations

import pytest

from tests import factories
from tests.integration.test_probe_faults import probe
from tokenwatt import policy
from tokenwatt.schema.run import ProbeRecord

pytestmark = pytest.mark.anyio


def _confirming_on(record: ProbeRecord) -> dict[str, str]:
    run = factories.run()
    assert run.outcome is not None
    confirm = record.model_copy(update={"index": run.outcome.confirm_probes[0], "phase": "confirm"})
    probes = list(run.probes)
    probes[confirm.index] = confirm
    return {v.rule: v.message for v in policy.check_run(run.model_copy(update={"probes": probes}))}


async def test_usage_beyond_the_stream_and_max_tokens_is_counted_and_refused(fault_server):
    # One token per event, usage says twice as many: more than max_tokens asked.
    record = await probe(fault_server.base_url("inflated_usage"), rate=20.0, window=1.0)
    assert record.window_requests > 0
    tokens = record.audits.tokens if record.audits else None
    assert tokens is not None
    assert tokens.over_max_tokens == record.window_requests
    assert tokens.usage_mismatches == record.window_requests
    assert tokens.examples[0].endswith("output tokens, max_tokens 4")
    rules = _confirming_on(record)
    assert "token_mismatches" in rules
    assert f"is {record.window_requests}, the maximum is 0" in rules["token_mismatches"]


async def test_several_tokens_a_chunk_is_recorded_not_refused(fault_server):
    # Two tokens per event, usage says all of them: usage 4, 2 content chunks per request.
    record = await probe(fault_server.base_url("multi_token_events"), rate=20.0, window=1.0)
    tokens = record.audits.tokens if record.audits else None
    assert tokens is not None
    assert record.window_requests > 0
    assert tokens.usage_mismatches == record.window_requests
    assert tokens.usage_below_chunks == 0
    assert tokens.over_max_tokens == 0
    assert "token_mismatches" not in _confirming_on(record)
    honest = await probe(fault_server.base_url("ok"), rate=20.0, window=1.0)
    assert honest.audits is not None
    assert honest.audits.tokens is not None
    assert honest.audits.tokens.usage_mismatches == 0
