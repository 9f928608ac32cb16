"""The server's launch command line (``engine.launch``): recorded verbatim, secrets refused.

A result page shows each config's launch command, so the file must never hold a credential.
A command is refused when any of these is in it (the value itself is never repeated in the
message):

- an option whose name says it carries a secret (``--api-key VALUE``, ``--hf-token=VALUE``,
  ``--password``, ``--secret``, ``--auth``...; ``--max-num-batched-tokens`` and ``--tokenizer``
  are not such names: the name's words are matched, not substrings);
- an environment assignment of such a name (``HF_TOKEN=... vllm serve``);
- a URL with credentials (``https://user:pass@host``);
- a value shaped like a well-known token (Hugging Face ``hf_...``, OpenAI ``sk-...``, GitHub
  ``ghp_...``, AWS ``AKIA...``), or an ``Authorization:`` header.

A reference to an environment variable (``--api-key $VLLM_API_KEY``) is not a secret and is kept.
"""

from __future__ import annotations

import re
import shlex

__all__ = ["refuse_secrets", "secrets_in"]

_SECRET_WORDS = {
    "token",
    "password",
    "passwd",
    "pass",
    "secret",
    "credential",
    "credentials",
    "auth",
    "apikey",
}
_ENV_REF = re.compile(r"^\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)$")
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_URL_CREDENTIALS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@")
_TOKEN_SHAPES = (
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{20,}")),
    ("an OpenAI-style key", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    ("a GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}")),
    ("an AWS access key", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),
    ("an Authorization header", re.compile(r"(?i)\bauthorization\s*:")),
)


def _secret_name(name: str) -> bool:
    """Whether an option or variable name says it holds a secret, by its words."""
    words = [w for w in re.split(r"[-_]+", name.lower().lstrip("-")) if w]
    joined = {a + b for a, b in zip(words, words[1:], strict=False)}
    return bool(_SECRET_WORDS & set(words)) or "apikey" in joined or "accesskey" in joined


def secrets_in(command: str) -> list[str]:
    """What in ``command`` looks like a secret, in words (never the value itself)."""
    try:
        args = shlex.split(command)
    except ValueError as exc:
        return [f"not a shell command line ({exc}), so it cannot be checked for secrets"]
    found: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if not eq:
                following = args[i + 1] if i + 1 < len(args) else None
                value = following if following is not None and not following.startswith("-") else ""
            if _secret_name(name) and value and not _ENV_REF.match(value):
                found.append(f"{name} VALUE")
            continue
        assignment = _ASSIGNMENT.match(arg)
        if assignment is None:
            continue
        name, value = assignment.groups()
        if _secret_name(name) and value and not _ENV_REF.match(value):
            found.append(f"{name}=VALUE")
    if _URL_CREDENTIALS.search(command):
        found.append("a URL with a user name and password")
    found.extend(what for what, shape in _TOKEN_SHAPES if shape.search(command))
    return found


def refuse_secrets(command: str) -> None:
    """Raise ValueError, naming what looks secret (never its value), if the command holds one."""
    found = secrets_in(command)
    if found:
        raise ValueError(
            f"looks like it holds a secret ({'; '.join(found)}): record the command with an"
            " environment variable reference instead (e.g. --api-key $VLLM_API_KEY), and name"
            " the variable in engine.api_key_env"
        )
