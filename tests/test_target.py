"""TargetSpec presets, validation, derived roofline numbers, active target and `triton-nmp info`."""

from __future__ import annotations

import dataclasses
import re

import pytest

from triton_nmp import target as target_mod
from triton_nmp.cli import main
from triton_nmp.errors import NMPTargetError
from triton_nmp.target import DTYPES, TargetSpec, active_target, available_presets, canonical_dtype, set_active_target

PRESETS = ["nmp-64", "upmem-like", "hbm-pim-like", "tensix-like"]


@pytest.fixture(autouse=True)
def _fresh_active_target(monkeypatch):
    """Tests that touch the active target must not leak it (or $TRITON_NMP_TARGET) to others."""
    monkeypatch.delenv("TRITON_NMP_TARGET", raising=False)
    previous = set_active_target(None)
    yield
    set_active_target(previous)


def write(tmp_path, text: str, name: str = "my.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def nmp64_text() -> str:
    return TargetSpec.load("nmp-64").to_toml()


def edit(text: str, key: str, new_line: str | None) -> str:
    """Replace (or delete, with None) the line `key = ...` of a TOML text."""
    pattern = re.compile(rf"^{re.escape(key)} = .*$", re.M)
    assert pattern.search(text), key
    return pattern.sub("" if new_line is None else new_line, text, count=1)


# ---------------------------------------------------------------------------------- presets


def test_presets_are_listed_and_load():
    assert sorted(PRESETS) == available_presets()
    for name in PRESETS:
        spec = TargetSpec.load(name)
        assert spec.name == name  # the name inside the file matches the file name
        assert spec.num_pus == spec.mesh_rows * spec.mesh_cols


def test_every_preset_number_has_a_source_comment():
    for name in PRESETS:
        for line in (target_mod.PRESET_DIR / f"{name}.toml").read_text().splitlines():
            if "=" in line and not line.startswith(("#", "name")):
                assert "#" in line, f"{name}.toml: no source comment on {line!r}"


def test_nmp64_matches_design_doc():
    s = TargetSpec.load("nmp-64")
    assert (s.mesh_rows, s.mesh_cols, s.num_pus) == (8, 8, 64)
    assert s.clock_ghz == 1.0
    assert s.spm_bytes == 256 * 1024
    assert (s.bank_bytes, s.bank_bytes_per_cycle) == (64 * 1024 * 1024, 16.0)
    assert (s.dma_setup_cycles, s.dma_granule_bytes, s.dma_alignment_bytes) == (100, 32, 32)
    assert (s.dma_max_descriptor_bytes, s.dma_max_in_flight) == (8192, 8)
    assert [s.peak_macs_per_cycle(d) for d in ("fp16", "bf16", "fp32", "int8")] == [128, 128, 32, 256]
    assert s.vector_fp32_lanes == 32
    assert (s.noc_link_bytes_per_cycle, s.noc_hop_cycles, s.remote_read_bytes_per_cycle) == (32.0, 9, 4.0)
    assert s.launch_overhead_us == 5.0
    # DESIGN.md: "16 FLOP/byte for local data, 64 FLOP/byte for remote data"
    assert s.ridge_point("fp16") == 16.0
    assert s.ridge_point("fp16", remote=True) == 64.0
    assert s.peak_flops("fp16") == 2 * 128 * 64 * 1e9
    assert s.local_bytes_per_second == 16 * 64 * 1e9
    assert s.remote_bytes_per_second == 4 * 64 * 1e9


def test_dataclass_defaults_equal_the_nmp64_preset():
    assert TargetSpec() == TargetSpec.load("nmp-64")
    assert TargetSpec().hash() == TargetSpec.load("nmp-64").hash()


def test_presets_are_cached():
    assert TargetSpec.load("tensix-like") is TargetSpec.load("tensix-like")


def test_spec_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TargetSpec.load("nmp-64").mesh_rows = 4


# ------------------------------------------------------------------------------- validation


def test_unknown_preset():
    with pytest.raises(NMPTargetError, match=r"unknown target preset 'nmp-65'; expected one of .*nmp-64"):
        TargetSpec.load("nmp-65")


def test_nonexistent_file(tmp_path):
    with pytest.raises(NMPTargetError, match=r"target file '.*nope\.toml' does not exist"):
        TargetSpec.load(str(tmp_path / "nope.toml"))


def test_malformed_toml(tmp_path):
    path = write(tmp_path, nmp64_text() + "\n[dma\nbroken = \n")
    with pytest.raises(NMPTargetError, match=rf"file '{re.escape(str(path))}' is not valid TOML: .*line"):
        TargetSpec.load(str(path))


def test_missing_field(tmp_path):
    path = write(tmp_path, edit(nmp64_text(), "setup_cycles", None))
    with pytest.raises(NMPTargetError) as info:
        TargetSpec.load(str(path))
    message = str(info.value)
    assert str(path) in message
    assert "dma.setup_cycles: missing; expected an integer >= 0 (cycles)" in message


def test_missing_section(tmp_path):
    text = re.sub(r"\[launch\]\n.*\n", "", nmp64_text())
    with pytest.raises(NMPTargetError, match=r"launch\.overhead_us: missing; expected a number >= 0 \(us\)"):
        TargetSpec.load(str(write(tmp_path, text)))


def test_unknown_field_in_section_suggests_the_right_name(tmp_path):
    text = edit(nmp64_text(), "setup_cycles", "setup_cycles = 100\nsetup_cycle = 100")
    with pytest.raises(NMPTargetError, match=r"dma\.setup_cycle: unknown field \(did you mean 'dma\.setup_cycles'\?\)"):
        TargetSpec.load(str(write(tmp_path, text)))


def test_unknown_top_level_field_and_section(tmp_path):
    text = 'colour = "blue"\n' + nmp64_text() + "\n[cache]\nbytes = 1\n"
    with pytest.raises(NMPTargetError) as info:
        TargetSpec.load(str(write(tmp_path, text)))
    assert "colour: unknown field" in str(info.value)
    assert "cache: unknown field" in str(info.value)


@pytest.mark.parametrize(
    "key, line, expected",
    [
        ("rows", 'rows = "8"', r"mesh\.rows: has type string \(value '8'\); expected an integer > 0 \(PUs\)"),
        ("rows", "rows = 8.0", r"mesh\.rows: has type float \(value 8\.0\); expected an integer > 0"),
        ("fp32_lanes", "fp32_lanes = true", r"vector\.fp32_lanes: has type boolean"),
        ("ghz", "ghz = [1.0]", r"clock\.ghz: has type array .*; expected a number > 0 \(GHz\)"),
        ("ghz", "ghz = nan", r"clock\.ghz: is nan; expected a number > 0"),
        ("name", "name = 3", r"name: has type integer .*; expected a non-empty string"),
    ],
)
def test_wrong_type(tmp_path, key, line, expected):
    path = write(tmp_path, edit(nmp64_text(), key, line))
    with pytest.raises(NMPTargetError, match=expected):
        TargetSpec.load(str(path))


def test_section_that_is_not_a_table(tmp_path):
    text = re.sub(r"\[noc\]\n(.*\n){3}", "", nmp64_text())
    text = "noc = 5\n" + text
    with pytest.raises(NMPTargetError, match=r"noc: has type integer; expected a table \[noc\]"):
        TargetSpec.load(str(write(tmp_path, text)))


@pytest.mark.parametrize(
    "key, line, expected",
    [
        ("bytes_per_cycle", "bytes_per_cycle = 0", r"bank\.bytes_per_cycle: is 0; expected a number > 0 \(B/cycle\)"),
        ("bytes", "bytes = -4096", r"scratchpad\.bytes: is -4096; expected an integer > 0 \(bytes\)"),
        ("rows", "rows = 0", r"mesh\.rows: is 0; expected an integer > 0 \(PUs\)"),
        ("setup_cycles", "setup_cycles = -1", r"dma\.setup_cycles: is -1; expected an integer >= 0"),
        ("overhead_us", "overhead_us = -0.5", r"launch\.overhead_us: is -0\.5; expected a number >= 0 \(us\)"),
        ("graph_dispatch_us", "graph_dispatch_us = -1",
         r"launch\.graph_dispatch_us: is -1; expected a number >= 0 \(us\)"),
    ],
)
def test_negative_or_zero(tmp_path, key, line, expected):
    path = write(tmp_path, edit(nmp64_text(), key, line))
    with pytest.raises(NMPTargetError, match=expected):
        TargetSpec.load(str(path))


@pytest.mark.parametrize("key", ["alignment_bytes", "granule_bytes"])
def test_alignment_and_granule_must_be_powers_of_two(tmp_path, key):
    path = write(tmp_path, edit(nmp64_text(), key, f"{key} = 24"))
    expected = rf"dma\.{key}: is 24, not a power of two; expected a power of two \(integer > 0\) \(bytes\)"
    with pytest.raises(NMPTargetError, match=expected):
        TargetSpec.load(str(path))


def test_descriptor_must_hold_whole_granules(tmp_path):
    path = write(tmp_path, edit(nmp64_text(), "max_descriptor_bytes", "max_descriptor_bytes = 8200"))
    with pytest.raises(NMPTargetError, match=r"dma\.max_descriptor_bytes: is 8200, not a multiple of dma\.granule"):
        TargetSpec.load(str(path))


def test_all_problems_reported_at_once(tmp_path):
    text = edit(edit(nmp64_text(), "rows", "rows = -1"), "hop_cycles", 'hop_cycles = "9"')
    with pytest.raises(NMPTargetError) as info:
        TargetSpec.load(str(write(tmp_path, text)))
    assert "mesh.rows" in str(info.value) and "noc.hop_cycles" in str(info.value)


def test_construction_and_replace_are_validated():
    with pytest.raises(NMPTargetError, match=r"dma\.granule_bytes: is 3, not a power of two"):
        dataclasses.replace(TargetSpec(), dma_granule_bytes=3)
    with pytest.raises(NMPTargetError, match=r"mesh\.cols: has type string"):
        TargetSpec(mesh_cols="8")


# ------------------------------------------------------------------------------ user files


def test_user_file_round_trip(tmp_path):
    spec = dataclasses.replace(TargetSpec.load("tensix-like"), name="my-chip", mesh_rows=4, clock_ghz=1.5)
    path = write(tmp_path, spec.to_toml())
    loaded = TargetSpec.load(str(path))
    assert loaded == spec and loaded.hash() == spec.hash()
    assert TargetSpec.load(path) == spec  # os.PathLike works too


def test_user_file_integers_for_floats(tmp_path):
    path = write(tmp_path, edit(nmp64_text(), "ghz", "ghz = 2"))
    spec = TargetSpec.load(str(path))
    assert spec.clock_ghz == 2.0 and isinstance(spec.clock_ghz, float)


def test_user_file_is_reread_when_changed(tmp_path):
    path = write(tmp_path, nmp64_text())
    assert TargetSpec.load(str(path)).mesh_rows == 8
    path.write_text(edit(nmp64_text(), "rows", "rows = 16"))  # different size, so a new cache stamp
    assert TargetSpec.load(str(path)).mesh_rows == 16


# ------------------------------------------------------------------------------------ hash


def test_hash_changes_with_every_field():
    base = TargetSpec()
    seen = {base.hash()}
    for info in TargetSpec.schema():
        value = getattr(base, info.attr)
        if isinstance(value, str):
            changed = value + "-x"
        elif info.check == "fraction":
            changed = value / 2
        else:
            changed = value * 2 if value else 1  # optional fields may be 0 by default
        other = dataclasses.replace(base, **{info.attr: changed})
        seen.add(other.hash())
    assert len(seen) == 1 + len(TargetSpec.schema())
    assert re.fullmatch(r"[0-9a-f]{64}", base.hash())


def test_hash_is_canonical():
    assert TargetSpec(clock_ghz=1).hash() == TargetSpec(clock_ghz=1.0).hash()


# ---------------------------------------------------------------------------- derived numbers


def test_roofline_seconds_takes_the_binding_limit():
    s = TargetSpec()
    peak, local, remote = s.peak_flops("fp16"), s.local_bytes_per_second, s.remote_bytes_per_second
    assert s.roofline_seconds(peak, 0, 0) == pytest.approx(1.0)  # compute-bound
    assert s.roofline_seconds(1.0, local * 2, 0) == pytest.approx(2.0)  # local-bandwidth-bound
    assert s.roofline_seconds(1.0, 0, remote * 3) == pytest.approx(3.0)  # remote-bandwidth-bound
    assert s.roofline_seconds(peak, 0, 0, dtype="fp32") == pytest.approx(4.0)  # fp32 is 4x slower
    # exactly at the ridge point compute and bandwidth take equal time
    assert s.roofline_seconds(16 * local, local, 0) == pytest.approx(1.0)


def test_cycles_to_seconds_and_back():
    s = TargetSpec.load("upmem-like")
    assert s.cycles_to_seconds(350e6) == pytest.approx(1.0)
    assert s.seconds_to_cycles(1e-6) == pytest.approx(350)


def test_dtype_aliases():
    for alias in ("fp16", "float16", "torch.float16", "half", "tl.float16"):
        assert canonical_dtype(alias) == "fp16"
    assert canonical_dtype("torch.bfloat16") == "bf16"
    assert canonical_dtype("float32") == "fp32"
    assert canonical_dtype("int8") == "int8"
    with pytest.raises(NMPTargetError, match=r"dtype 'fp64' has no matrix-unit rate; expected one of fp16"):
        TargetSpec().peak_macs_per_cycle("fp64")


def test_mesh_geometry():
    s = TargetSpec()
    assert s.pu_coords(0) == (0, 0) and s.pu_coords(9) == (1, 1) and s.pu_coords(63) == (7, 7)
    assert s.hops(0, 63) == 14 and s.hops(5, 5) == 0
    with pytest.raises(IndexError):
        s.pu_coords(64)


# --------------------------------------------------------------------------- active target


def test_active_target_defaults_to_nmp64():
    assert active_target() is TargetSpec.load("nmp-64")


def test_active_target_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_NMP_TARGET", "upmem-like")
    assert active_target().name == "upmem-like"
    set_active_target(None)
    path = write(tmp_path, dataclasses.replace(TargetSpec(), name="from-env").to_toml())
    monkeypatch.setenv("TRITON_NMP_TARGET", str(path))
    assert active_target().name == "from-env"


def test_active_target_bad_env(monkeypatch):
    monkeypatch.setenv("TRITON_NMP_TARGET", "no-such-machine")
    with pytest.raises(NMPTargetError, match=r"(?s)unknown target preset 'no-such-machine'.*TRITON_NMP_TARGET"):
        active_target()


def test_set_active_target():
    spec = TargetSpec.load("hbm-pim-like")
    set_active_target(spec)
    assert active_target() is spec
    previous = set_active_target("tensix-like")
    assert previous is spec and active_target().name == "tensix-like"


# ------------------------------------------------------------------------------------- CLI


def test_cli_info_default(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "target nmp-64" in out
    fp16 = next(line for line in out.splitlines() if line.strip().startswith("fp16"))
    assert re.search(r"\b16 FLOP/byte\s+64 FLOP/byte", fp16)
    assert "1.024 TB/s" in out and "256 GB/s" in out  # aggregate local / remote bandwidth
    assert "16.38 TFLOP/s" in out
    for info in TargetSpec.schema()[1:]:
        assert info.path in out


def test_cli_info_other_target(capsys):
    assert main(["info", "--target", "tensix-like"]) == 0
    out = capsys.readouterr().out
    assert "target tensix-like" in out
    assert out.count("227.6 FLOP/byte") == 4  # fp16 and bf16, local and remote
    for dtype in DTYPES:
        assert re.search(rf"^\s+{dtype}\s", out, re.M)


def test_cli_info_bad_target(capsys):
    assert main(["info", "--target", "nope"]) == 1
    assert "unknown target preset 'nope'" in capsys.readouterr().err


def test_cli_without_command_prints_help(capsys):
    assert main([]) == 2
    assert "info" in capsys.readouterr().out
