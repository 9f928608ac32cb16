r"""``command``: runs a command for each reading and takes the watts from what it prints.

The command runs through ``/bin/sh -c`` (so pipes work), with the run's environment. What it
prints on stdout is read according to ``power.field``:

- unset: the whole output is one number (``412.5``) or a JSON number;
- a dotted path such as ``power.draw`` or ``gpus.0.watts``: the output is JSON and the path
  selects the number (list items by index);
- a regular expression with a group, such as ``Power:\s*([0-9.]+) W``: its first group, searched
  in the text.

``field`` is a JSON path when it is only names and indices joined by dots (letters, digits,
``_`` and ``-``), and a regular expression otherwise.
A non-zero exit, a time-out, or output without a number is a failed reading (a gap), never 0.
``power.scope`` says whether the number covers the GPU boards or the whole node (default).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import signal
import subprocess
from collections.abc import Mapping
from typing import Any, Literal

from tokenwatt.errors import PowerError
from tokenwatt.power.base import BuildContext, PowerSource, Reading, register_source
from tokenwatt.schema.spec import PowerSourceSpec

__all__ = ["CommandSource", "extract_watts"]

logger = logging.getLogger(__name__)

_JSON_PATH = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")


def _as_number(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise PowerError(f"{where} is {value!r}, not a number of watts")
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError as exc:
            raise PowerError(f"{where} is {value[:80]!r}, not a number of watts") from exc
    else:
        raise PowerError(f"{where} is {json.dumps(value)[:80]}, not a number of watts")
    if not math.isfinite(number) or number < 0:
        raise PowerError(f"{where} is {number}, not a valid number of watts")
    return number


def extract_watts(output: str, field: str | None) -> float:
    """The watts in a command's output, selected by ``field`` (see the module docstring).

    Raises:
        PowerError: the output holds no such number.
    """
    text = output.strip()
    if field is None:
        try:
            return _as_number(json.loads(text), "the command's output")
        except json.JSONDecodeError:
            return _as_number(text, "the command's output")
    if not _JSON_PATH.fullmatch(field):
        try:
            pattern = re.compile(field)
        except re.error as exc:
            raise PowerError(
                f"power.field {field!r} is not a valid regular expression: {exc}"
            ) from exc
        if pattern.groups < 1:
            raise PowerError(f"power.field {field!r} has no group: put the watts in (...)")
        match = pattern.search(output)
        if not match or match.group(1) is None:
            raise PowerError(f"power.field {field!r} does not match the output {text[:120]!r}")
        return _as_number(match.group(1), f"the match of power.field {field!r}")
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PowerError(
            f"power.field {field!r} is a JSON path, but the output is not JSON: {text[:120]!r}"
        ) from exc
    walked: list[str] = []
    for key in field.split("."):
        walked.append(key)
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif (
            isinstance(value, list)
            and key.lstrip("-").isdigit()
            and -len(value) <= int(key) < len(value)
        ):
            value = value[int(key)]
        else:
            raise PowerError(
                f"power.field {field!r}: {'.'.join(walked)!r} is not in the command's JSON output"
            )
    return _as_number(value, f"power.field {field!r}")


@register_source("command")
class CommandSource(PowerSource):
    """Watts printed by a command, one run per reading."""

    def __init__(
        self,
        *,
        command: str,
        field: str | None = None,
        scope: Literal["board", "node"] = "node",
        env: Mapping[str, str] | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        """Prepare; the command first runs in :meth:`open`.

        Args:
            command: shell command line printing the watts.
            field: JSON path or regex (see the module docstring); None = the whole output.
            scope: what the number covers.
            env: the command's environment (default: the current one).
            timeout_s: a run longer than this is a failed reading.
        """
        super().__init__()
        self.command = command
        self.field = field
        self.scope = scope
        self._env = dict(env) if env is not None else None
        self._timeout_s = timeout_s
        what = "GPU board power" if scope == "board" else "Node power"
        picked = f", field {field}" if field else ""
        self.description = f"{what} from command `{command}`{picked}"

    @classmethod
    def from_spec(cls, spec: PowerSourceSpec, context: BuildContext) -> CommandSource:
        """From ``command``, ``field`` and ``scope``."""
        if not spec.command:
            raise PowerError("power.source 'command' needs power.command")
        return cls(
            command=spec.command, field=spec.field, scope=spec.scope or "node", env=context.env
        )

    def open(self) -> None:
        """Run the command once: it must print a reading."""
        self.read()
        logger.info("command power: %s", self.description)

    def read(self) -> Reading:
        """Run the command and extract the watts."""
        try:
            # Own process group: on a time-out the whole pipeline is killed, not only the shell
            # (a surviving child would hold the output pipe open and hang the sampler).
            proc = subprocess.Popen(
                ["/bin/sh", "-c", self.command],
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        except OSError as exc:
            raise PowerError(f"power command could not start: {exc}") from exc
        try:
            stdout, stderr = proc.communicate(timeout=self._timeout_s)
        except subprocess.TimeoutExpired as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise PowerError(
                f"power command did not finish within {self._timeout_s:g} s: {self.command}"
            ) from exc
        if proc.returncode != 0:
            said = " ".join((stderr or stdout).split())[-300:]
            raise PowerError(f"power command exited {proc.returncode}: {self.command}: {said}")
        return Reading(watts=extract_watts(stdout, self.field))
