"""Loading and saving spec, run and result files.

The JSON/YAML edge of tokenwatt: bytes in, validated models out, and back. Every failure becomes
one :class:`~tokenwatt.errors.InputError` that names the file, the field path and the problem.
Writes are atomic (temporary file in the same folder, then ``os.replace``), so a crash or Ctrl-C
never leaves a half-written file; the value of a secret environment variable the spec names is
redacted (:mod:`tokenwatt.redact`); a run or result that cannot be written where asked (full
disk, read-only folder) is kept in a recovery file under the user's cache, and the error says
where.

A spec is the one file that names other files (``model.config``, ``workload.trace``,
``accuracy.suite``): :func:`load_spec` resolves each of them here, once, and checks that it
exists, so the rest of tokenwatt reads resolved paths and never resolves a path itself.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import hashlib
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from tokenwatt import bounded, redact
from tokenwatt.comparison_set import ComparisonSetFile
from tokenwatt.errors import InputError, ResultError, RunFileError, SpecError, WriteError
from tokenwatt.schema.base import RUN_KIND, SCHEMA_VERSION
from tokenwatt.schema.result import ResultFile
from tokenwatt.schema.run import RunFile
from tokenwatt.schema.spec import BUILTIN_WORKLOADS, LoadedSpec, Spec

__all__ = [
    "FileKind",
    "atomic_write_bytes",
    "atomic_write_text",
    "cache_dir",
    "check_output",
    "detect_kind",
    "dump_result",
    "dump_run",
    "filled",
    "format_validation_error",
    "load_any",
    "load_comparison_set",
    "load_result",
    "load_run",
    "load_spec",
    "read_mapping",
    "resolve_relative",
    "resolve_spec_files",
    "resolve_spec_path",
    "save_result",
    "save_run",
    "state_dir",
]

logger = logging.getLogger(__name__)

FileKind = Literal["spec", "run", "result"]
M = TypeVar("M", bound=BaseModel)

_ERROR_CLASS: dict[FileKind, type[InputError]] = {
    "spec": SpecError,
    "run": RunFileError,
    "result": ResultError,
}
_MODEL: dict[FileKind, type[BaseModel]] = {"spec": Spec, "run": RunFile, "result": ResultFile}
_SCHEMA = {"spec": "spec", "run": "run", "result": "result", "comparison set": "comparison"}
"""Each kind of file, as ``tokenwatt schema`` names it."""
_MAX_ERRORS_SHOWN = 8
_TOP_LEVEL = "(top level)"
_NAMES_FIELD = re.compile(r"[a-z_]+(\[\d+\])?(\.[a-z_0-9]+(\[\d+\])?)*: ")


# ---------------------------------------------------------------------------------------------
# Parsing


def read_mapping(path: Path, *, error: type[InputError] = InputError) -> dict[str, Any]:
    """Read a JSON or YAML file whose top level is a mapping (bounded: :mod:`tokenwatt.bounded`).

    Args:
        path: The file. ``.yaml``/``.yml`` files are read as YAML, everything else as JSON
            (a JSON file is also valid YAML, but JSON errors are clearer).
        error: The exception class to raise on failure.

    Raises:
        InputError: (or ``error``) naming the file and the problem, with line and column.
    """
    return _mapping_of(bounded.read_text(path, error=error), path=path, error=error)


def _mapping_of(text: str, *, path: Path, error: type[InputError]) -> dict[str, Any]:
    if not text.strip():
        raise error(f"{path}: file is empty")
    data: Any
    if path.suffix.lower() in (".yaml", ".yml"):
        data = bounded.parse_yaml(text, where=path, error=error)
    else:
        data = bounded.parse_json(text, where=path, error=error)
    if not isinstance(data, dict):
        raise error(f"{path}: the top level must be a mapping of fields, got {_type_name(data)}")
    return data


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__


# ---------------------------------------------------------------------------------------------
# Validation errors


def _field_path(loc: tuple[int | str, ...], data: Any, *, missing: bool) -> str:
    """Turn a pydantic error location into ``a.b[2].c``, dropping union-branch tags.

    Pydantic puts the name of the union branch it tried (``constrained-int``, ``lognormal``,
    ``function-after[...]``) into ``loc``; walking the input data tells keys from tags. The last
    item of a "missing" error is the absent key itself.
    """
    parts: list[str] = []
    current = data
    for position, item in enumerate(loc):
        last = position == len(loc) - 1
        if isinstance(item, int) and isinstance(current, list):
            parts.append(f"[{item}]")
            current = current[item] if item < len(current) else None
        elif (
            isinstance(item, str)
            and isinstance(current, dict)
            and (item in current or (missing and last))
        ):
            parts.append(f".{item}" if parts else item)
            current = current.get(item)
    return "".join(parts) or _TOP_LEVEL


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    text = redact.redact_text(text)  # a refused http://user:password@host is not echoed
    return text if len(text) <= 60 else text[:57] + "..."


def format_validation_error(path: Path | str, kind: str, exc: ValidationError, data: Any) -> str:
    """One readable message for a validation error: the file, each field path and its problem."""
    found: list[tuple[str, str]] = []
    errors = exc.errors(include_url=False)
    # A union reports one error per branch; "not an int" is noise when the input is a mapping
    # that another branch understood, so shape errors go last.
    errors.sort(key=lambda e: str(e["type"]).endswith(("_type", "_parsing")))
    for err in errors:
        field = _field_path(tuple(err["loc"]), data, missing=err["type"] == "missing")
        msg = str(err["msg"]).removeprefix("Value error, ")
        if isinstance(err.get("input"), bool) and err["type"] in ("int_type", "float_type"):
            msg = "must be a number, not a boolean"
        if err["type"] not in ("missing", "extra_forbidden") and not isinstance(
            err.get("input"), dict | list
        ):
            msg = f"{msg} (got {_short(err.get('input'))})"
        if err["type"] == "extra_forbidden":
            msg = f"unknown field (check the spelling; see 'tokenwatt schema {_SCHEMA[kind]}')"
        found.append((field, msg))
    # Keep the most specific (deepest) path, and its first (most relevant) message.
    paths = {f for f, _ in found}
    kept: list[tuple[str, str]] = []
    seen: set[str] = set()
    for field, msg in found:
        deeper = any(p != field and (p.startswith((field + ".", field + "["))) for p in paths)
        if deeper or field in seen:
            continue
        seen.add(field)
        kept.append((field, msg))
    # A whole-file check (schema.limits) names its own fields: no "(top level)" before them.
    lines = [
        msg if field == _TOP_LEVEL and _NAMES_FIELD.match(msg) else f"{field}: {msg}"
        for field, msg in kept[:_MAX_ERRORS_SHOWN]
    ]
    more = len(kept) - _MAX_ERRORS_SHOWN
    if more > 0:
        lines.append(f"... and {more} more")
    if len(lines) == 1:
        return f"{path}: invalid {kind}: {lines[0]}"
    return f"{path}: invalid {kind}:\n  " + "\n  ".join(lines)


def _validate(path: Path | str, kind: FileKind, data: dict[str, Any], model: type[M]) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _ERROR_CLASS[kind](format_validation_error(path, kind, exc, data)) from None


# ---------------------------------------------------------------------------------------------
# Loading


def detect_kind(path: Path, data: dict[str, Any]) -> FileKind:
    """Tell a spec, a run and a result apart by their keys."""
    if path.suffix.lower() in (".yaml", ".yml"):
        return "spec"
    if data.get("kind") == RUN_KIND:
        return "run"
    if "configs" in data:
        return "result"
    if "engine" in data and "model" in data:
        return "spec"
    raise InputError(
        f"{path}: cannot tell what this is: a spec has 'engine' and 'model', a run file has"
        f' "kind": "{RUN_KIND}", a result has \'configs\''
    )


def _check_version(path: Path, kind: FileKind, data: dict[str, Any]) -> None:
    version = data.get("schema_version", SCHEMA_VERSION)
    if kind != "spec" and version != SCHEMA_VERSION:
        raise _ERROR_CLASS[kind](
            f"{path}: schema_version {version!r}; this tokenwatt reads {SCHEMA_VERSION}."
            " Re-create it with this version ('tokenwatt measure' or 'tokenwatt report')."
        )


def _named_file(path: Path, field: str, value: str) -> Path:
    resolved = resolve_relative(path, value)
    if not resolved.exists():
        raise SpecError(f"{path}: invalid spec: {field}: file not found: {resolved}")
    if not resolved.is_file():
        raise SpecError(f"{path}: invalid spec: {field}: not a regular file: {resolved}")
    return resolved


def _trace_file(spec: Spec, path: Path) -> Path | None:
    trace = spec.workload.trace
    if trace in BUILTIN_WORKLOADS:
        return None
    resolved = resolve_relative(path, trace)
    if resolved.is_file() or "/" in trace or "." in trace:
        return _named_file(path, "workload.trace", trace)
    raise SpecError(
        f"{path}: invalid spec: workload.trace: {trace!r} is neither a built-in workload"
        f" ({', '.join(BUILTIN_WORKLOADS)}) nor a trace file"
    )


def resolve_spec_files(spec: Spec, path: Path, *, sha256: str | None = None) -> LoadedSpec:
    """The spec with every file it names resolved (see :func:`resolve_relative`) and checked.

    Raises:
        SpecError: naming the spec, the field and the path looked for.
    """
    model, accuracy = spec.model, spec.accuracy
    return LoadedSpec(
        spec=spec,
        path=path,
        sha256=sha256,
        config_file=_named_file(path, "model.config", model.config) if model.config else None,
        trace_file=_trace_file(spec, path),
        prompts_file=(
            _named_file(path, "workload.prompts", spec.workload.prompts)
            if spec.workload.prompts
            else None
        ),
        suite_file=_named_file(path, "accuracy.suite", accuracy.suite) if accuracy else None,
    )


def load_spec(path: Path) -> LoadedSpec:
    """Load and validate a spec file (YAML or JSON), resolving and checking the files it names.

    The file is read once: its SHA-256 (:attr:`LoadedSpec.sha256`, the run file's
    ``spec_sha256``) is that of the bytes the spec was parsed from, whatever happens to the file
    afterwards.
    """
    raw = bounded.read_bytes(path, error=SpecError)
    text = bounded.utf8_text(raw, where=path, error=SpecError)
    data = _mapping_of(text, path=path, error=SpecError)
    spec = _validate(path, "spec", data, Spec)
    return resolve_spec_files(spec, path, sha256=hashlib.sha256(raw).hexdigest())


def load_run(path: Path) -> RunFile:
    """Load and validate a run file."""
    data = read_mapping(path, error=RunFileError)
    if data.get("kind") != RUN_KIND:
        raise RunFileError(f'{path}: not a run file (no "kind": "{RUN_KIND}")')
    _check_version(path, "run", data)
    return _validate(path, "run", data, RunFile)


def load_result(path: Path) -> ResultFile:
    """Load and validate a result file.

    Raises:
        ResultError: naming the file and the field; a run or spec file is named as one.
    """
    data = read_mapping(path, error=ResultError)
    if "configs" not in data and (
        path.suffix.lower() in (".yaml", ".yml")
        or data.get("kind") == RUN_KIND
        or ("engine" in data and "model" in data)
    ):
        kind = detect_kind(path, data)
        raise ResultError(
            f"{path}: is a {kind} file, not a result; 'tokenwatt report' makes a result from"
            " run files"
        )
    _check_version(path, "result", data)
    return _validate(path, "result", data, ResultFile)


def load_comparison_set(path: Path) -> ComparisonSetFile:
    """Load and validate a ``comparisons/<id>.yaml`` file (the results one site page compares).

    Raises:
        ResultError: naming the file, the field and the problem.
    """
    data = read_mapping(path, error=ResultError)
    try:
        return ComparisonSetFile.model_validate(data)
    except ValidationError as exc:
        raise ResultError(format_validation_error(path, "comparison set", exc, data)) from None


def load_any(path: Path) -> tuple[FileKind, BaseModel]:
    """Load a spec, run or result file, telling which it is."""
    data = read_mapping(path)
    kind = detect_kind(path, data)
    _check_version(path, kind, data)
    model = _validate(path, kind, data, _MODEL[kind])
    if isinstance(model, Spec):
        resolve_spec_files(model, path)
    return kind, model


# ---------------------------------------------------------------------------------------------
# Paths


def resolve_spec_path(given: str | Path, *, specs_dir: Path = Path("specs")) -> Path:
    """Find a spec file: the path as given, else ``specs/<name>`` for a bare file name.

    The seed's reproduce lines name the spec without its folder
    (``--spec lambda-qwen3-30b-a3b-fp8-tp1-dp1.spec.yaml``); run from the repository they resolve
    to ``specs/``.
    """
    path = Path(given)
    if path.exists():
        return path  # a folder or a FIFO too: the loader says what it is, without opening it
    if path.parent == Path() and (specs_dir / path).is_file():
        logger.info("spec %s found as %s", given, specs_dir / path)
        return specs_dir / path
    raise SpecError(f"{given}: spec file not found (also looked for {specs_dir / path.name})")


def resolve_relative(spec_path: Path, value: str) -> Path:
    """Resolve a path written in a spec: absolute as is, else from the spec's folder, else cwd."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    beside_spec = spec_path.parent / path
    if beside_spec.exists() or not path.exists():
        return beside_spec
    return path


# ---------------------------------------------------------------------------------------------
# Saving


def filled(model: M) -> M:
    """The same model with every field marked as set, so ``exclude_unset`` dumps keep defaults."""
    return type(model).model_validate(model.model_dump())


def dump_result(result: ResultFile) -> dict[str, Any]:
    """JSON values of a result: the fields that were set, so the seed round-trips exactly."""
    # Through pydantic's JSON encoder: it writes infinite latencies as "Infinity" strings, which
    # model_dump(mode="json") would leave as floats that json.dumps cannot write as valid JSON.
    data: dict[str, Any] = json.loads(result.model_dump_json(exclude_unset=True))
    return data


def dump_run(run: RunFile) -> dict[str, Any]:
    """JSON values of a run file, every field written out."""
    data: dict[str, Any] = json.loads(run.model_dump_json())
    return data


def cache_dir() -> Path:
    """The user's cache folder for tokenwatt.

    ``$TOKENWATT_CACHE``, else ``$XDG_CACHE_HOME/tokenwatt`` (the XDG base-directory rule), else
    ``~/.cache/tokenwatt``. It holds the simulator's ground truths, drawn charts and recovery
    files; everything in it but the recovery files can be deleted at any time.
    """
    return _user_dir("TOKENWATT_CACHE", "XDG_CACHE_HOME", Path(".cache"))


def state_dir() -> Path:
    """The user's state folder for tokenwatt: what one run leaves for the next.

    ``$TOKENWATT_STATE_DIR``, else ``$XDG_STATE_HOME/tokenwatt`` (the XDG base-directory rule),
    else ``~/.local/state/tokenwatt``. Unlike the cache it is not to be deleted while runs are
    going: it holds the Redfish sessions open runs hold (:mod:`tokenwatt.power.redfish_sessions`).
    """
    return _user_dir("TOKENWATT_STATE_DIR", "XDG_STATE_HOME", Path(".local") / "state")


def _user_dir(override_env: str, xdg_env: str, home_default: Path) -> Path:
    root = os.environ.get(override_env)
    if root:
        return Path(root)
    xdg = os.environ.get(xdg_env)
    # The XDG rule: a relative path is invalid and must be ignored.
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "tokenwatt"
    return Path.home() / home_default / "tokenwatt"


def check_output(path: Path, *, kind: Literal["run", "result"], force: bool) -> None:
    """Refuse an output path that would lose something, before any work is done.

    A folder is never a file to write; an existing file is replaced only with ``force``, and
    then only if it is the same kind of file (a run file never goes over a result, nor a result
    over a run, whose measurement could not be repeated).

    Raises:
        InputError: ``path`` is a folder, exists (without ``force``), or holds another kind of
            file.
    """
    if path.is_dir():
        raise InputError(f"{path}: is a folder; --out must name a file")
    if not path.exists() and not path.is_symlink():
        return
    if not force:
        raise InputError(
            f"{path}: already exists; choose another --out, or pass --force to replace it"
        )
    try:
        found: str | None = detect_kind(path, read_mapping(path))
    except InputError:
        found = None
    if found != kind:
        what = f"a {found} file" if found else "not a tokenwatt file"
        raise InputError(f"{path}: is {what}; --force replaces only a {kind} file")


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    if exc.errno == errno.EROFS:
        return "the file system is read-only"
    return exc.strerror or str(exc)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, as UTF-8 (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, then rename.

    Either the old file (or none) or the whole new one is there afterwards, whatever fails.

    Raises:
        WriteError: naming the file and the reason (a folder, no space, a read-only folder).
    """
    if path.is_dir():
        raise WriteError(f"{path}: is a folder; name a file to write")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise WriteError(f"{path}: cannot write: {_os_reason(exc)}") from None
    tmp = Path(tmp_name)
    try:
        # mkstemp creates the file 0600; give it the mode a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise WriteError(f"{path}: cannot write: {_os_reason(exc)}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _recovery_folders() -> list[Path]:
    return [cache_dir() / "recovery", Path(tempfile.gettempdir()) / "tokenwatt-recovery"]


def _write_or_recover(path: Path, text: str, what: str) -> None:
    """Write ``text`` to ``path``; if that fails, keep it in a recovery file and say where.

    Raises:
        WriteError: the file could not be written; the message names the recovery file (or says
            that none could be written either).
    """
    try:
        atomic_write_text(path, text)
    except WriteError as exc:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        for folder in _recovery_folders():
            recovery = folder / f"{stamp}-{os.getpid()}-{path.name or what}"
            try:
                atomic_write_text(recovery, text)
            except WriteError:
                continue
            logger.warning("%s kept in the recovery file %s", what, recovery)
            raise WriteError(
                f"{exc}; the {what} was saved to {recovery} instead: move it into place"
            ) from None
        raise WriteError(f"{exc}; no recovery file could be written either") from None


def _redacted(data: dict[str, Any], spec: Spec | None, path: Path) -> dict[str, Any]:
    clean, names = redact.redact_data(data, redact.spec_secrets(spec, os.environ))
    for name in names:
        logger.warning(
            "%s: the value of $%s appeared in the file; it is written as %s",
            path,
            name,
            redact.REDACTED,
        )
    result: dict[str, Any] = clean
    return result


def _json_text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def save_run(run: RunFile, path: Path) -> None:
    """Validate and atomically write a run file, secrets redacted; a failed write is recovered.

    Raises:
        WriteError: the file could not be written; the message says where the run was kept.
    """
    data = _redacted(dump_run(run), run.spec, path)
    RunFile.model_validate(data)  # what we write must load back
    _write_or_recover(path, _json_text(data), "run")


def save_result(result: ResultFile, path: Path) -> None:
    """Validate and atomically write a result file, secrets redacted (see :func:`save_run`)."""
    data = _redacted(dump_result(result), result.spec, path)
    ResultFile.model_validate(data)
    _write_or_recover(path, _json_text(data), "result")
