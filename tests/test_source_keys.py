"""Triton's and torch's source hashes kept on disk (`triton_nmp.source_keys`): same values as the libraries' own,
recomputed whenever a watched file changes, corrupt files reported and replaced, installed where Triton and Inductor
look."""

import json
import os
import warnings

import pytest
import triton
import triton.runtime.cache as tc

from triton_nmp import source_keys as tkc


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
    (json.dumps({"stamp": "1" * 64, "key": "3.8.0-x"}), "it holds no 3.9.0 source key"),
    (json.dumps({"stamp": "1" * 64, "key": 7}), "it holds no 3.9.0 source key"),
])
def test_untrusted_file_is_reported_and_replaced(tmp_path, content, reason):
    (tmp_path / f"{'1' * 40}.json").write_text(content)
    compute, calls = _counting("3.9.0-good")
    with pytest.warns(UserWarning, match=rf"ignoring the unreadable source key cache file .*{reason}"):
        assert tkc.load_or_compute(tmp_path, "1" * 64, "3.9.0", compute) == "3.9.0-good"
    assert calls == [1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tkc.load_or_compute(tmp_path, "1" * 64, "3.9.0", compute) == "3.9.0-good"
    assert calls == [1]


def test_torch_key_same_value_and_served_from_disk(fresh_key):
    from torch._inductor import codecache

    expected = codecache.torch_key()
    calls = []

    def compute():
        calls.append(1)
        return expected

    assert tkc.torch_key_bytes(compute) == expected and calls == [1]
    assert tkc.torch_key_bytes(compute) == expected and calls == [1]
    files = list((fresh_key.parent / "torch-key").glob("*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    data["key"] = data["key"][:-8] + "AAAA"  # a truncated key: reported, hashed again, replaced
    files[0].write_text(json.dumps(data))
    with pytest.warns(UserWarning, match="ignoring the unreadable source key cache file"):
        assert tkc.torch_key_bytes(compute) == expected
    assert calls == [1, 1]
    assert tkc.torch_key_bytes(compute) == expected and calls == [1, 1]


def test_torch_watched_files_cover_what_inductor_hashes():
    import importlib.machinery
    import pkgutil

    import torch

    files = {str(p) for p in tkc.torch_watched_files()}
    root = os.path.dirname(torch.__file__)
    suffixes = tuple(importlib.machinery.all_suffixes())
    seen = 0
    for lib in pkgutil.iter_modules([root], ""):  # the top level; the walk below covers the subpackages
        origin = lib.module_finder.find_spec(lib.name, None).origin
        assert origin in files, origin
        seen += 1
    for folder in (os.path.join(root, "_inductor"), os.path.join(root, "_dynamo")):
        for lib in pkgutil.iter_modules([folder], ""):
            assert lib.module_finder.find_spec(lib.name, None).origin in files
    assert seen > 10 and all(p.endswith(suffixes) or p.endswith(("interface.cpp", "script.ld")) for p in files)


def test_inductor_integration_hands_torch_key_over(tmp_path):
    """A fresh process compiling for nmp gets torch_key from the file an earlier process wrote."""
    import subprocess
    import sys

    code = ("import os, torch\n"
            "from torch._inductor import codecache\n"
            "if os.environ.get('NO_HASH'):\n"
            "    def refuse(*a):\n"
            "        raise AssertionError('hashed the torch sources although the cache file is valid')\n"
            "    codecache.build_code_hash = refuse\n"
            "f = torch.compile(lambda x: x * 2, backend='nmp')\n"
            "x = torch.randn(64)\n"
            "torch.testing.assert_close(f(x), x * 2)\n"
            "from torch._inductor import codecache\n"
            "import triton_nmp.source_keys as sk\n"
            "print('KEY', codecache.torch_key().hex(), len(list((sk.cache_dir('torch')).glob('*.json'))))\n")
    env = dict(os.environ, TRITON_NMP_CACHE_DIR=str(tmp_path / "nmp"), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ind"),
               TRITON_CACHE_DIR=str(tmp_path / "triton"))
    outs = [subprocess.run([sys.executable, "-c", code], env=dict(env, **extra), capture_output=True, text=True,
                           timeout=600) for extra in ({}, {"NO_HASH": "1"})]
    for p in outs:
        assert p.returncode == 0, p.stderr[-3000:]
    from torch._inductor import codecache

    lines = [next(ln for ln in p.stdout.splitlines() if ln.startswith("KEY")) for p in outs]
    assert lines[0] == lines[1] == f"KEY {codecache.torch_key().hex()} 1"
