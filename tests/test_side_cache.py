"""Side files next to a kernel in Triton's cache (`triton_nmp.side_cache`): named from their key, read back only
when they repeat it, and any file that cannot be trusted is reported and left to be computed again."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from triton import knobs

import triton_nmp.side_cache as side_cache
from triton_nmp.side_cache import SideCache

NOTES = SideCache("notes", "json", "note", "note", "writing the note again")
META = {"hash": "ab" * 32, "name": "kern"}


@pytest.fixture(autouse=True)
def _own_triton_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "triton"))


def _read(path: str) -> tuple[str, dict]:
    with open(path) as f:
        data = json.load(f)
    return data["key"], data


def _store(key: str, value: int) -> side_cache.SideFile:
    where = NOTES.file(META, lambda: key)
    NOTES.store(where, json.dumps({"key": key, "value": value}))
    return where


def test_a_stored_file_is_named_from_its_key_and_read_back(tmp_path):
    where = _store("launch 1", 7)
    digest = hashlib.sha256(b"launch 1").hexdigest()[:32]
    assert where.name == f"kern.notes-{digest}.json" and where.key == "launch 1"
    (path,) = (tmp_path / "triton").rglob("kern.notes-*")
    assert path.name == where.name
    assert NOTES.load(where, _read, lambda data: data["value"]) == 7
    salted = NOTES.file(META, lambda: "launch 1", salt="v2")
    assert salted.name != where.name and NOTES.load(salted, _read) is None  # no file yet: nothing reported


def test_bytes_are_stored_as_bytes():
    where = NOTES.file(META, lambda: "k")
    NOTES.store(where, b"\x00k")
    assert NOTES.load(where, lambda path: (Path(path).read_bytes()[1:].decode(), "raw")) == "raw"


def test_a_kernel_without_hash_or_name_has_no_file_and_its_key_is_not_computed():
    def key() -> str:
        raise AssertionError("the key of a kernel without a place in the cache must not be computed")

    assert NOTES.file({"name": "kern"}, key) is None and NOTES.file({"hash": "ab"}, key) is None


def test_a_corrupt_file_is_reported_and_not_used(tmp_path):
    where = _store("launch 1", 7)
    (path,) = (tmp_path / "triton").rglob("kern.notes-*")
    path.write_text('{"key": "')
    with pytest.warns(UserWarning, match=r"triton-nmp: ignoring the unreadable note cache file .*kern\.notes-.*"
                                         r"\(JSONDecodeError: .*\); writing the note again"):
        assert NOTES.load(where, _read) is None


def test_a_file_holding_another_key_is_reported_and_not_used(tmp_path):
    where = _store("launch 1", 7)
    (path,) = (tmp_path / "triton").rglob("kern.notes-*")
    path.write_text(json.dumps({"key": "launch 2", "value": 8}))
    with pytest.warns(UserWarning, match=r"unreadable note cache file .*\(ValueError: it holds another launch's "
                                         r"note\); writing the note again"):
        assert NOTES.load(where, _read) is None


def test_a_payload_that_does_not_decode_is_reported_and_not_used():
    where = _store("launch 1", 7)

    def decode(data: dict) -> int:
        raise KeyError("width")

    with pytest.warns(UserWarning, match=r"unreadable note cache file .*\(KeyError: 'width'\)"):
        assert NOTES.load(where, _read, decode) is None


def test_a_failed_write_is_reported_not_raised(monkeypatch):
    class ReadOnly:
        def put(self, data, filename, binary=True):
            raise OSError("read-only file system")

    monkeypatch.setattr("triton.runtime.cache.get_cache_manager", lambda h: ReadOnly())
    where = side_cache.SideFile("ab", "kern.notes-0.json", "k")
    with pytest.warns(UserWarning, match=r"cannot write the note cache file kern\.notes-0\.json "
                                         r"\(read-only file system\)"):
        NOTES.store(where, "{}")
