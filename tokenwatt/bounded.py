"""Bounded reading of every file tokenwatt opens: regular files only, size, depth and alias caps.

A spec path can name anything the shell can: a FIFO (``open`` blocks until a writer comes, so
forever), ``/dev/zero`` (reading never ends), a folder. A YAML file can hold an alias bomb (nine
aliases of nine aliases ... expand to billions of nodes in whatever walks the data later), a
nesting 20,000 levels deep (the recursive composer runs out of stack) or a 5,000-digit integer
(Python refuses to convert it and raises from deep inside PyYAML). Each of these is refused here,
before any parsing, as one :class:`~tokenwatt.errors.InputError` naming the file and the limit.

Every reader takes the error class to raise, so a spec problem stays a ``SpecError`` and a run
file's a ``RunFileError``.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from tokenwatt.errors import InputError

__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_INT_DIGITS",
    "MAX_TABLE_BYTES",
    "MAX_YAML_NODES",
    "json_values_only",
    "open_text",
    "parse_json",
    "parse_json_line",
    "parse_yaml",
    "read_bytes",
    "read_text",
    "utf8_text",
]

MAX_DOCUMENT_BYTES = 256 * 2**20
"""Largest spec, run, result or config file read (a run of 20,000-request probes is ~100 MiB)."""

MAX_TABLE_BYTES = 4 * 2**30
"""Largest trace or suite file read line by line."""

MAX_DEPTH = 64
"""Deepest nesting of lists and mappings accepted (tokenwatt's own files nest under 10)."""

MAX_YAML_NODES = 1_000_000
"""Most YAML nodes after alias expansion (an alias bomb expands to billions)."""

MAX_INT_DIGITS = 100
"""Most digits of an integer literal (no count, rate or seed tokenwatt reads has more)."""

_KIND_OF_MODE = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(mode: int) -> str:
    for test, name in _KIND_OF_MODE:
        if test(mode):
            return name
    return "not a regular file"  # pragma: no cover - every other mode is listed above


@contextlib.contextmanager
def _open_regular(path: Path, *, error: type[InputError], max_bytes: int) -> Iterator[IO[bytes]]:
    """Open ``path`` for reading if it is a regular file of at most ``max_bytes``.

    The file is opened non-blocking, so a FIFO with no writer cannot hang the open, and checked
    with ``fstat`` on the open descriptor, so it cannot be swapped between check and read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except IsADirectoryError:
        raise error(f"{path}: is a folder, not a file") from None
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            what = _not_regular(info.st_mode)
            raise error(f"{path}: is {what}, not a regular file; tokenwatt reads only files")
        if info.st_size > max_bytes:
            raise error(
                f"{path}: {info.st_size:,} bytes, more than the {max_bytes:,} tokenwatt reads"
            )
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def read_bytes(
    path: Path, *, error: type[InputError] = InputError, max_bytes: int = MAX_DOCUMENT_BYTES
) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (it may grow while read: capped)."""
    with _open_regular(path, error=error, max_bytes=max_bytes) as handle:
        try:
            raw = handle.read(max_bytes + 1)
        except OSError as exc:
            raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise error(f"{path}: more than the {max_bytes:,} bytes tokenwatt reads")
    return raw


def read_text(
    path: Path, *, error: type[InputError] = InputError, max_bytes: int = MAX_DOCUMENT_BYTES
) -> str:
    """The UTF-8 text of a regular file (a leading byte-order mark dropped)."""
    return utf8_text(read_bytes(path, error=error, max_bytes=max_bytes), where=path, error=error)


def utf8_text(raw: bytes, *, where: Path | str, error: type[InputError] = InputError) -> str:
    """``raw`` decoded as UTF-8 (a leading byte-order mark dropped); ``where`` names it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{where}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
    return text.removeprefix("\ufeff")


@contextlib.contextmanager
def open_text(
    path: Path, *, error: type[InputError] = InputError, max_bytes: int = MAX_TABLE_BYTES
) -> Iterator[IO[str]]:
    """A regular file opened as UTF-8 text for reading line by line (``utf-8-sig``).

    A decoding error while reading surfaces as :class:`UnicodeDecodeError`; the caller, who
    knows the line, names it.
    """
    with _open_regular(path, error=error, max_bytes=max_bytes) as raw:
        yield io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")


# ---------------------------------------------------------------------------------------------
# JSON


def _json_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {digits:,} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _too_deep(value: Any) -> bool:
    """Whether ``value`` nests lists and mappings deeper than :data:`MAX_DEPTH` (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, dict | list))
    return False


def _loads(text: str) -> Any:
    try:
        value = json.loads(
            text,
            object_pairs_hook=_unique_pairs,
            parse_constant=_reject_constant,
            parse_int=_json_int,
        )
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    if isinstance(value, dict | list) and _too_deep(value):
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    return value


def parse_json(text: str, *, where: Path | str, error: type[InputError] = InputError) -> Any:
    """Parse JSON strictly: no duplicate keys, NaN or infinities, huge integers or deep nesting.

    Raises:
        InputError: (or ``error``) naming ``where``, the line and column, and the problem.
    """
    try:
        return _loads(text)
    except json.JSONDecodeError as exc:
        raise error(
            f"{where}: JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except ValueError as exc:
        raise error(f"{where}: invalid JSON: {exc}") from None


def parse_json_line(line: str) -> Any:
    """One value of a JSON-lines file, with :func:`parse_json`'s rules.

    Raises:
        ValueError: what is wrong (the caller names the file and line).
    """
    return _loads(line)


# ---------------------------------------------------------------------------------------------
# YAML


class _LimitError(yaml.constructor.ConstructorError):
    """A YAML document that is well formed but beyond one of this module's limits."""


class _BoundedLoader(yaml.SafeLoader):
    """A safe YAML loader with limits: duplicate keys, nesting depth, alias expansion, digits."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        # The composer recurses once per level: count the levels before Python's stack runs out.
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _LimitError(
                    None,
                    None,
                    f"nested deeper than {MAX_DEPTH} levels",
                    self.peek_event().start_mark,  # type: ignore[no-untyped-call]
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _construct_mapping(loader: _BoundedLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in mapping:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", mark)
        mapping[key] = loader.construct_object(value_node, deep=True)
    return mapping


def _construct_int(loader: _BoundedLoader, node: yaml.ScalarNode) -> int:
    digits = sum(c.isdigit() for c in str(node.value))
    if digits > MAX_INT_DIGITS:
        raise _LimitError(
            None,
            None,
            f"an integer of {digits:,} digits (at most {MAX_INT_DIGITS})",
            node.start_mark,
        )
    value: int = loader.construct_yaml_int(node)
    return value


_BoundedLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _expanded_size(root: yaml.Node) -> int | None:
    """Nodes in the document once every alias is expanded; None if it refers to itself.

    Aliases share one node in the composed graph, so the size is summed with a memo per node
    (linear in the nodes written) and compared with :data:`MAX_YAML_NODES`, never expanded.
    """
    sizes: dict[int, int] = {}
    busy: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        if children_done:
            busy.discard(key)
            sizes[key] = min(1 + sum(sizes[id(c)] for c in children), MAX_YAML_NODES + 1)
            continue
        if key in busy:
            return None
        busy.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
        if any(id(c) in busy for c in children):
            return None
    return sizes[id(root)]


def parse_yaml(text: str, *, where: Path | str, error: type[InputError] = InputError) -> Any:
    """Parse one YAML document safely and within the limits of this module.

    Raises:
        InputError: (or ``error``) naming ``where``, the line and column, and the problem.
    """
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node)
        if size is None:
            raise error(f"{where}: YAML error: an alias refers to the node that contains it")
        if size > MAX_YAML_NODES:
            raise error(
                f"{where}: YAML error: aliases expand to more than {MAX_YAML_NODES:,} values"
                " (an alias bomb?)"
            )
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = exc.problem or exc.context or "invalid YAML"
        kind = "beyond tokenwatt's limits" if isinstance(exc, _LimitError) else "syntax error"
        raise error(f"{where}: YAML {kind} at {at}{problem}") from None
    except yaml.YAMLError as exc:
        raise error(f"{where}: YAML error: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise error(f"{where}: YAML error: {exc}") from None
    finally:
        loader.dispose()


def json_values_only(value: Any) -> str | None:
    """Why ``value`` cannot be sent as JSON (``"a.b[2] is NaN or infinite, ..."``), else None.

    A free-form mapping such as ``engine.extra_body`` is whatever YAML makes of it: ``.nan`` and
    ``.inf`` (JSON would carry ``null`` instead), and a bare ``2026-12-03`` (a date), ``!!binary``
    (bytes) or ``!!set`` (a set), which a JSON encoder refuses only when the first request is
    written. Object keys may be strings or integers (``logit_bias: {1234: -100}``; JSON writes
    the integer as a string); booleans, floats and null as keys are refused, as ambiguous.
    """
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        at = where or "(top level)"
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"{at} is NaN or infinite, which a JSON request cannot carry"
        elif isinstance(item, dict):
            for key, member in item.items():
                if isinstance(key, bool) or not isinstance(key, (str, int)):
                    return (
                        f"{at} has the key {key!r} ({type(key).__name__}); JSON object keys are"
                        " strings (quote it)"
                    )
                stack.append((f"{where}.{key}" if where else str(key), member))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(item))
        elif item is not None and not isinstance(item, (str, int)):
            return (
                f"{at} is a {type(item).__name__}, which a JSON request cannot carry"
                " (quote it to send a string)"
            )
    return None
