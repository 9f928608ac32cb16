"""The input-bounding reader: regular files only, size, depth, alias and digit caps."""

from __future__ import annotations

import datetime
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from tokenwatt import bounded
from tokenwatt.errors import InputError, SpecError


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    done = threading.Event()
    errors: list[str] = []

    def read() -> None:
        try:
            bounded.read_text(fifo, error=SpecError)
        except SpecError as exc:
            errors.append(str(exc))
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(5), "reading a FIFO with no writer blocked"
    assert errors == [
        f"{fifo}: is a FIFO (named pipe), not a regular file; tokenwatt reads only files"
    ]


@pytest.mark.parametrize(
    ("path", "what"), [("/dev/zero", "character device"), ("/dev/null", "character device")]
)
def test_devices_are_refused(path, what):
    with pytest.raises(InputError, match=what):
        bounded.read_bytes(Path(path))


def test_a_socket_and_a_folder_are_refused(tmp_path):
    with pytest.raises(InputError, match="is a folder"):
        bounded.read_bytes(tmp_path)
    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        with pytest.raises(InputError, match="file not found|socket|cannot read"):
            bounded.read_bytes(path)


def test_size_cap(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 101)
    with pytest.raises(InputError, match="101 bytes, more than the 100"):
        bounded.read_bytes(path, max_bytes=100)
    assert bounded.read_bytes(path, max_bytes=101) == b" " * 101


def test_missing_file_and_non_utf8(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        bounded.read_text(tmp_path / "nope")
    path = tmp_path / "x"
    path.write_bytes(b"\xef\xbb\xbfok\xff")
    with pytest.raises(InputError, match=r"not UTF-8 text \(byte 0xff at offset 5\)"):
        bounded.read_text(path)
    path.write_bytes(b"\xef\xbb\xbfok")
    assert bounded.read_text(path) == "ok"


def test_yaml_alias_bomb_is_refused_quickly():
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    t0 = time.monotonic()
    with pytest.raises(InputError, match="aliases expand to more than 1,000,000 values"):
        bounded.parse_yaml("\n".join(lines), where="bomb.yaml")
    assert time.monotonic() - t0 < 5


def test_yaml_aliases_within_the_limit_are_fine():
    data = bounded.parse_yaml("a: &x {k: 1}\nb: *x\nc: {<<: *x, j: 2}\n", where="ok.yaml")
    assert data == {"a": {"k": 1}, "b": {"k": 1}, "c": {"k": 1, "j": 2}}


def test_yaml_recursive_alias_is_refused():
    with pytest.raises(InputError, match="refers to the node that contains it"):
        bounded.parse_yaml("a: &x [1, *x]\n", where="loop.yaml")


def test_yaml_depth_and_digits():
    with pytest.raises(InputError, match=r"beyond tokenwatt's limits at line 1.*deeper than 64"):
        bounded.parse_yaml("a: " + "[" * 20_000 + "]" * 20_000, where="deep.yaml")
    assert bounded.parse_yaml("a: " + "[" * 60 + "]" * 60, where="ok.yaml") is not None
    with pytest.raises(InputError, match="an integer of 5,000 digits"):
        bounded.parse_yaml("a: " + "9" * 5000, where="big.yaml")
    assert bounded.parse_yaml("a: " + "9" * 100, where="ok.yaml") == {"a": int("9" * 100)}


def test_yaml_duplicate_keys():
    with pytest.raises(InputError, match="duplicate key 'a'"):
        bounded.parse_yaml("a: 1\na: 2\n", where="dup.yaml")


def test_json_limits():
    with pytest.raises(InputError, match="nested deeper than 64 levels"):
        bounded.parse_json("[" * 20_000 + "]" * 20_000, where="deep.json")
    with pytest.raises(InputError, match="nested deeper than 64 levels"):
        bounded.parse_json("[" * 65 + "]" * 65, where="deep.json")
    assert bounded.parse_json("[" * 64 + "]" * 64, where="ok.json") is not None
    with pytest.raises(InputError, match="an integer of 5,000 digits"):
        bounded.parse_json('{"a": ' + "1" * 5000 + "}", where="big.json")
    with pytest.raises(InputError, match="NaN is not a number JSON allows"):
        bounded.parse_json('{"a": NaN}', where="nan.json")
    with pytest.raises(InputError, match="duplicate key 'a'"):
        bounded.parse_json('{"a": 1, "a": 2}', where="dup.json")
    with pytest.raises(ValueError, match="Infinity is not a number"):
        bounded.parse_json_line('{"t_s": Infinity}')


def test_json_values_only():
    def problem(value: object) -> str:
        found = bounded.json_values_only(value)
        assert found is not None
        return found

    assert bounded.json_values_only({"a": [1, {"b": 2.5, "c": None, "d": True}], 7: "x"}) is None
    nan = problem({"a": [1, {"b": float("nan")}]})
    assert nan == "a[1].b is NaN or infinite, which a JSON request cannot carry"
    assert problem(float("inf")).startswith("(top level) is NaN")
    date = problem({"meta": {"since": datetime.date(2026, 12, 3)}})
    assert date == (
        "meta.since is a date, which a JSON request cannot carry (quote it to send a string)"
    )
    assert problem({"b": [b"\x00"]}).startswith("b[0] is a bytes")
    assert problem({"s": {1, 2}}).startswith("s is a set")
    assert problem({"m": {None: 1}}) == (
        "m has the key None (NoneType); JSON object keys are strings (quote it)"
    )
    assert "the key True (bool)" in problem({True: 1})
