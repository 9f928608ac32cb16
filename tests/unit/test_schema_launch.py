"""engine.launch: the server's command line, recorded verbatim, with secrets refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests import factories
from tokenwatt.schema.launch import secrets_in

REFUSED = [
    ("vllm serve m --api-key s3cr3t-value", "--api-key VALUE"),
    ("vllm serve m --api-key=s3cr3t-value", "--api-key VALUE"),
    ("vllm serve m --hf-token abcdef", "--hf-token VALUE"),
    ("sglang --password hunter2", "--password VALUE"),
    ("server --client-secret xyz", "--client-secret VALUE"),
    ("HF_TOKEN=abcdef vllm serve m", "HF_TOKEN=VALUE"),
    ("OPENAI_API_KEY=abcdef vllm serve m", "OPENAI_API_KEY=VALUE"),
    ("vllm serve https://user:pw@hub.example/m", "a URL with a user name and password"),
    ("vllm serve m --download-dir /x hf_abcdefghijklmnopqrstuvwxyz", "a Hugging Face token"),
    ("llama-server -m x sk-abcdefghijklmnopqrstuvwxyz", "an OpenAI-style key"),
    ("server -H 'Authorization: Bearer abc'", "an Authorization header"),
]
ALLOWED = [
    "vllm serve m --api-key $VLLM_API_KEY",
    "vllm serve m --api-key ${VLLM_API_KEY} --hf-token $HF_TOKEN",
    "HF_TOKEN=$HF_TOKEN vllm serve m",
    "vllm serve m --max-num-batched-tokens 8192 --tokenizer m --enable-prefix-caching",
    "vllm serve m --max-model-len 4096 --no-enable-prefix-caching --block-size 16",
    "VLLM_CPU_KVCACHE_SPACE=1 vllm serve https://hub.example/m",
]


@pytest.mark.parametrize(("command", "what"), REFUSED)
def test_a_command_with_a_secret_is_refused_without_repeating_it(command, what):
    assert what in secrets_in(command)
    with pytest.raises(ValidationError) as info:
        factories.spec(engine={"model": "m", "launch": command})
    # what tokenwatt prints: each error's message (pydantic's own repr adds the input)
    message = "; ".join(e["msg"] for e in info.value.errors())
    assert "engine.launch looks like it holds a secret" in message
    for secret in ("s3cr3t-value", "hunter2", "abcdef", ":pw@", "Bearer abc"):
        if secret in command:
            assert secret not in message


@pytest.mark.parametrize("command", ALLOWED)
def test_a_command_without_secrets_is_kept_verbatim(command):
    assert secrets_in(command) == []
    assert factories.spec(engine={"model": "m", "launch": command}).engine.launch == command


def test_an_unparsable_command_is_refused():
    assert secrets_in('vllm serve "m') != []
