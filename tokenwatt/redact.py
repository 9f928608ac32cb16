"""Keeping secrets out of files and logs: which values count as secrets, and redacting them.

A spec names its secrets by environment variable (``engine.api_key_env``,
``power.password_env``, each node's in ``power.nodes``); their values must never reach a run
file, a result, a page or a log line. Two mechanisms:

- :func:`redact_data` replaces the value of such a secret inside every string of a JSON
  document about to be written (the file is still written: a whole run is never lost because a
  key appeared in, say, an ``extra_body`` field). Only *guardable* values are matched: at least
  :data:`MIN_SECRET_CHARS` characters and :data:`MIN_SECRET_BITS` bits of character entropy,
  so a password such as ``none`` or ``1000`` does not turn every ``"none"`` and ``1000`` in a
  run into a match. Numbers are never matched: a number in a run is a measurement.
- :class:`RedactingFilter` rewrites every log record: authorization headers and tokens
  (``Authorization``, ``X-Auth-Token``, cookies, API-key headers, a JSON ``Password``), user
  and password in URLs, and the values of the spec's secrets. HTTP libraries at debug level
  (``-vv``) log response headers, a Redfish session token among them.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from typing_extensions import override

from tokenwatt.schema.spec import Spec

__all__ = [
    "MIN_SECRET_BITS",
    "MIN_SECRET_CHARS",
    "REDACTED",
    "RedactingFilter",
    "Secret",
    "guard_handlers",
    "guardable",
    "redact_data",
    "redact_text",
    "spec_secrets",
]

MIN_SECRET_CHARS = 6
"""Shortest secret value matched (``calvin``, a well-known BMC default, is six)."""

MIN_SECRET_BITS = 12.0
"""Least entropy of a secret value matched: length x Shannon entropy of its characters."""

REDACTED = "REDACTED"
"""What a secret is replaced with (a plain word: it fits any string field's pattern)."""

Secret = tuple[str, str]
"""``(variable name, value)`` of a secret the spec names."""

_SENSITIVE = r"authorization|proxy-authorization|x-auth-token|x-api-key|api-key|cookie|set-cookie"
# ('X-Auth-Token', 'abc') in httpcore's header lists, {'Authorization': 'Bearer x'}, "Password": "x"
_QUOTED_PAIR = re.compile(
    rf"""(?i)(b?['"](?:{_SENSITIVE}|password)['"]\s*[:,]\s*b?['"])[^'"]*(['"])"""
)
# Authorization: Bearer abc / x-auth-token=abc
_HEADER_LINE = re.compile(
    rf"""(?i)\b((?:{_SENSITIVE})\s*[:=]\s*)(?:(?:bearer|basic|token|digest)\s+)?[^\s,;'"]+"""
)
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"]+@")


def guardable(value: str) -> bool:
    """Whether a secret value is long and varied enough to be matched without false alarms."""
    if len(value) < MIN_SECRET_CHARS:
        return False
    counts = Counter(value)
    per_char = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return per_char * len(value) >= MIN_SECRET_BITS


def spec_secrets(spec: Spec | None, env: Mapping[str, str]) -> list[Secret]:
    """The guardable secrets the spec names, read from ``env``."""
    if spec is None:
        return []
    found: list[Secret] = []
    for name in (spec.engine.api_key_env, *spec.power.password_envs):
        value = env.get(name, "") if name else ""
        if name and guardable(value):
            found.append((name, value))
    return found


def redact_data(data: Any, secrets: Sequence[Secret]) -> tuple[Any, list[str]]:
    """``data`` with each secret's value replaced inside every string; the names it found."""
    if not secrets:
        return data, []
    found: set[str] = set()

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            for name, value in secrets:
                if value in item:
                    found.add(name)
                    item = item.replace(value, REDACTED)
            return item
        if isinstance(item, dict):
            return {walk(k): walk(v) for k, v in item.items()}
        if isinstance(item, list):
            return [walk(v) for v in item]
        return item

    return walk(data), sorted(found)


def redact_text(text: str, secrets: Iterable[Secret] = ()) -> str:
    """``text`` with auth headers, URL credentials and the given secrets' values replaced."""
    text = _QUOTED_PAIR.sub(rf"\g<1>{REDACTED}\g<2>", text)
    text = _HEADER_LINE.sub(rf"\g<1>{REDACTED}", text)
    text = _URL_USERINFO.sub(rf"\g<1>{REDACTED}@", text)
    for _name, value in secrets:
        text = text.replace(value, REDACTED)
    return text


class RedactingFilter(logging.Filter):
    """A handler filter that redacts every record (see the module docstring)."""

    def __init__(self, secrets: Iterable[Secret] = ()) -> None:
        super().__init__()
        self.secrets = list(secrets)

    @override
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact_text(message, self.secrets)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text, self.secrets)
        return True


def guard_handlers(handlers: Iterable[logging.Handler], secrets: Iterable[Secret] = ()) -> None:
    """Put a :class:`RedactingFilter` on each handler (filters on handlers see every record)."""
    secrets = list(secrets)
    for handler in handlers:
        handler.addFilter(RedactingFilter(secrets))
