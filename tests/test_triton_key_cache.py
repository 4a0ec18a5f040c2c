"""Triton's source hash kept on disk (`triton_nmp.triton_key_cache`): same value as Triton's own, recomputed
whenever a watched file changes, corrupt files reported and replaced, installed where Triton and Inductor look."""

import json
import os
import warnings

import pytest
import triton
import triton.runtime.cache as tc

from triton_nmp import triton_key_cache as tkc


@pytest.fixture
def fresh_key(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_NMP_CACHE_DIR", str(tmp_path))
    tkc.triton_key.cache_clear()
    yield tmp_path / "triton-key"
    tkc.triton_key.cache_clear()


def test_installed_for_triton_and_inductor():
    from torch._inductor.runtime import triton_compat

    assert tc.triton_key is tkc.triton_key
    assert triton_compat.triton_key is tkc.triton_key


def test_same_value_as_triton_and_served_from_disk(fresh_key, monkeypatch):
    expected = tkc.original_triton_key()
    assert tkc.triton_key() == expected
    assert len(list(fresh_key.glob("*.json"))) == 1
    tkc.triton_key.cache_clear()

    def not_again():
        raise AssertionError("hashed Triton's sources although the cache file is valid")

    monkeypatch.setattr(tkc, "_original", not_again)
    assert tkc.triton_key() == expected


def test_disabled_by_environment(fresh_key, monkeypatch):
    monkeypatch.setenv("TRITON_NMP_TRITON_KEY_CACHE", "0")
    monkeypatch.setattr(tkc, "_original", lambda: f"{triton.__version__}-computed")
    assert tkc.triton_key() == f"{triton.__version__}-computed"
    assert not fresh_key.exists()


def _counting(value):
    calls = []

    def compute():
        calls.append(1)
        return value

    return compute, calls


def test_stamp_changes_with_any_watched_file(tmp_path):
    f = tmp_path / "libtriton.so"
    f.write_bytes(b"abc")
    files = [f, tmp_path / "compiler.py"]
    before = tkc.stamp(files, "3.9.0")
    assert tkc.stamp(files, "3.9.0") == before
    st = os.stat(f)
    f.write_bytes(b"abd")  # same size, and the modification time put back: the change time still moves
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert tkc.stamp(files, "3.9.0") != before
    changed = tkc.stamp(files, "3.9.0")
    (tmp_path / "compiler.py").write_text("x = 1\n")  # a file appearing
    assert tkc.stamp(files, "3.9.0") != changed
    assert tkc.stamp(files, "3.9.1") != tkc.stamp(files, "3.9.0")


def test_watched_files_cover_what_triton_hashes():
    files = {str(p) for p in tkc.watched_files()}
    root = os.path.dirname(os.path.dirname(tc.__file__))
    assert os.path.realpath(tc.__file__) in files
    assert any(p.endswith(os.path.join("_C", "libtriton.so")) for p in files)
    for sub in ("compiler", "backends", "language"):
        for folder, _dirs, names in os.walk(os.path.join(root, sub)):
            for n in names:
                if n.endswith(".py") and "__pycache__" not in folder:
                    assert os.path.realpath(os.path.join(folder, n)) in files


def test_new_stamp_computes_again(tmp_path):
    compute, calls = _counting("3.9.0-aaa")
    assert tkc.load_or_compute(tmp_path, "1" * 64, "3.9.0", compute) == "3.9.0-aaa"
    assert tkc.load_or_compute(tmp_path, "1" * 64, "3.9.0", compute) == "3.9.0-aaa"
    assert len(calls) == 1
    compute2, calls2 = _counting("3.9.0-bbb")
    assert tkc.load_or_compute(tmp_path, "2" * 64, "3.9.0", compute2) == "3.9.0-bbb"
    assert len(calls2) == 1


@pytest.mark.parametrize("content, reason", [
    ("{not json", "JSONDecodeError"),
    (json.dumps({"stamp": "9" * 64, "key": "3.9.0-x"}), "it holds the key of other files"),
    (json.dumps({"stamp": "1" * 64, "key": "3.8.0-x"}), "it holds no Triton 3.9.0 source key"),
    (json.dumps({"stamp": "1" * 64, "key": 7}), "it holds no Triton 3.9.0 source key"),
])
def test_untrusted_file_is_reported_and_replaced(tmp_path, content, reason):
    (tmp_path / f"{'1' * 40}.json").write_text(content)
    compute, calls = _counting("3.9.0-good")
    with pytest.warns(UserWarning, match=rf"ignoring the unreadable Triton source key cache file .*{reason}"):
        assert tkc.load_or_compute(tmp_path, "1" * 64, "3.9.0", compute) == "3.9.0-good"
    assert calls == [1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tkc.load_or_compute(tmp_path, "1" * 64, "3.9.0", compute) == "3.9.0-good"
    assert calls == [1]
