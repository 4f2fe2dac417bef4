"""Tests for mhlo_cost.machines.hardware: shipped profiles, dtype mapping, loading and validation."""

from __future__ import annotations

import math
import tomllib
from importlib import resources

import pytest

from mhlo_cost.machines.hardware import (
    Hardware,
    HardwareError,
    canonical_dtype,
    get_profile,
    list_profiles,
    load_profiles,
    template_text,
)

# A valid user profile; tests below break one thing at a time.
GOOD = """\
schema_version = 1

[profile.test-chip]
aliases = ["tc", "Test_Chip_V1"]
vendor = "Nobody"
description = "test chip"
source = "made up for tests"
hbm_bandwidth_gb_s = 1500
hbm_capacity_gb = 24
link_bandwidth_gb_s = 50
hop_latency_us = 2.5
kernel_overhead_us = 1
transcendental_tops = 0.5

[profile.test-chip.matrix_tflops]
bf16 = 100.5
tf32 = 50

[profile.test-chip.vector_tflops]
f32 = 10
"""


def write(tmp_path, text, name="chips.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


# ------------------------------------------------------------------ shipped profiles

def test_shipped_profiles_load_and_are_positive():
    profiles = list_profiles()
    names = {hw.name for hw in profiles}
    assert {"a100-sxm-80gb", "h100-sxm", "h200-sxm"} <= names
    for hw in profiles:
        assert isinstance(hw, Hardware)
        assert hw.description and hw.source
        for v in (hw.transcendental_rate, hw.hbm_bandwidth, hw.hbm_capacity,
                  hw.link_bandwidth, hw.hop_latency, hw.kernel_overhead):
            assert isinstance(v, float) and math.isfinite(v) and v > 0
        assert hw.matrix_flops and hw.vector_flops
        for v in (*hw.matrix_flops.values(), *hw.vector_flops.values()):
            assert isinstance(v, float) and v > 0
        # Every shipped chip prices the common dtypes without error (f64 where the chip has an f64 unit: TPUs,
        # Gaudi 3 and Trainium2 have none, and an f64 op on them is refused rather than guessed).
        has_f64 = "f64" in hw.vector_flops
        assert has_f64 or hw.vendor in ("Google", "Intel", "AWS"), hw.name
        for dt in ("bf16", "f16", "f32", "f64", "f8E4M3FN", "f8E5M2", "i8", "i32", "complex<f32>"):
            if dt == "f64" and not has_f64:
                with pytest.raises(HardwareError, match="no vector rate for dtype 'f64'"):
                    hw.matrix_peak(dt)
                continue
            assert hw.matrix_peak(dt) > 0
            assert hw.vector_peak(dt) > 0
        # Sanity on magnitudes: SI units, not TFLOP/s or GB (L4's GDDR6 streams 300 GB/s).
        assert 1e14 < hw.matrix_peak("bf16") < 1e16
        assert 1e11 < hw.hbm_bandwidth < 1e13
        assert 1e10 < hw.hbm_capacity < 1e12
        assert 1e-7 < hw.hop_latency < 1e-4
        assert 1e-7 < hw.kernel_overhead < 1e-4


def test_datasheet_numbers():
    # Written independently of hardware.toml, from the vendor documents.
    h100 = get_profile("h100")
    assert h100.matrix_peak("bf16") == 989.4e12        # H100 whitepaper, SXM5 dense BF16
    assert h100.matrix_peak("f8E4M3FN") == 1978.9e12   # dense FP8
    assert h100.matrix_peak("f8E5M2") == 1978.9e12
    assert h100.vector_peak("f32") == 66.9e12
    assert h100.hbm_bandwidth == 3.35e12
    assert h100.hbm_capacity == 80e9
    assert h100.link_bandwidth == 450e9                # 900 GB/s bidirectional NVLink

    a100 = get_profile("a100")
    assert a100.matrix_peak("bf16") == 312e12
    assert a100.matrix_flops["tf32"] == 156e12
    assert a100.vector_peak("f32") == 19.5e12
    assert a100.hbm_bandwidth == 2039e9
    assert a100.link_bandwidth == 300e9

    h200 = get_profile("h200")
    assert h200.matrix_peak("bf16") == 989.4e12
    assert h200.hbm_bandwidth == 4.8e12
    assert h200.hbm_capacity == 141e9
    assert h200.link_bandwidth == 450e9


@pytest.mark.parametrize("alias, name", [
    ("h100", "h100-sxm"), ("H100-SXM", "h100-sxm"), ("h100-sxm", "h100-sxm"),
    ("H100_SXM5", "h100-sxm"), (" h100 ", "h100-sxm"),
    ("a100", "a100-sxm-80gb"), ("A100-80GB", "a100-sxm-80gb"),
    ("h200", "h200-sxm"), ("H200-SXM", "h200-sxm"),
])
def test_aliases_resolve(alias, name):
    assert get_profile(alias).name == name


def test_unknown_profile():
    with pytest.raises(HardwareError, match="unknown hardware 'tpu-v99'.*h100-sxm"):
        get_profile("tpu-v99")
    assert issubclass(HardwareError, ValueError)


def test_profiles_are_immutable():
    hw = get_profile("h100")
    with pytest.raises(Exception):
        hw.hbm_bandwidth = 1.0
    with pytest.raises(TypeError):
        hw.matrix_flops["bf16"] = 1.0
    hash(hw)


# ------------------------------------------------------------------ dtype mapping

@pytest.mark.parametrize("ir, key", [
    ("bf16", "bf16"), ("f16", "f16"), ("f32", "f32"), ("f64", "f64"), ("tf32", "tf32"),
    ("f8E4M3FN", "fp8"), ("f8E5M2", "fp8"), ("f8E4M3FNUZ", "fp8"), ("f8E5M2FNUZ", "fp8"),
    ("f8E4M3B11FNUZ", "fp8"), ("f4E2M1FN", "fp4"), ("f6E2M3FN", "fp6"),
    ("i1", "int8"), ("i2", "int4"), ("i4", "int4"), ("i8", "int8"), ("ui8", "int8"), ("si8", "int8"),
    ("i16", "int32"), ("i32", "int32"), ("i64", "int32"), ("ui32", "int32"), ("index", "int32"),
    ("complex<f32>", "f32"), ("complex<f64>", "f64"),
])
def test_canonical_dtype(ir, key):
    assert canonical_dtype(ir) == key


@pytest.mark.parametrize("bad", ["f128", "i128", "foo", "", "complex<i32>", "tensor<4xf32>"])
def test_unknown_dtype_raises(bad):
    with pytest.raises(HardwareError, match="dtype"):
        get_profile("h100").matrix_peak(bad)


def test_fallbacks():
    a100, h100 = get_profile("a100"), get_profile("h100")
    # f32 dots are conservative: CUDA-core FP32, not TF32.
    assert a100.matrix_peak("f32") == a100.vector_peak("f32") == 19.5e12
    assert h100.matrix_peak("f32") == 66.9e12
    # No FP8 on Ampere: fp8 dots priced as upcast f16.
    assert a100.matrix_peak("f8E4M3FN") == a100.matrix_peak("f16") == 312e12
    # Integer formats.
    assert h100.matrix_peak("i8") == 1978.9e12
    assert h100.matrix_peak("i32") == h100.vector_peak("i32") == 33.5e12
    # complex<f32> at the real f32 rate; f64 on FP64 tensor cores.
    assert h100.matrix_peak("complex<f32>") == 66.9e12
    assert h100.matrix_peak("f64") == 66.9e12
    assert h100.vector_peak("f64") == 33.5e12


def test_f32_matmul_tf32(tmp_path):
    hw = load_profiles(write(tmp_path, GOOD.replace('source = "made up for tests"',
                                                    'source = "x"\nf32_matmul = "tf32"')))["test-chip"]
    assert hw.matrix_peak("f32") == 50e12
    assert hw.matrix_peak("tf32") == 50e12
    # f16 missing in both tables -> f32 (vector) for the vector unit; matrix f16 -> f32 rule -> tf32.
    assert hw.vector_peak("f16") == 10e12
    assert hw.matrix_peak("f16") == 50e12
    # f64 is nowhere: clear error.
    with pytest.raises(HardwareError, match="no vector rate for dtype 'f64'"):
        hw.matrix_peak("f64")


# ------------------------------------------------------------------ comm model

def test_comm_time_closed_form():
    hw = get_profile("h100-sxm")
    n, size = 8, 1 << 30
    comm_bytes, steps = 2 * (n - 1) * size // n, 2 * (n - 1)
    expected = steps * 3e-6 + comm_bytes / 450e9
    assert hw.comm_time(comm_bytes, steps) == pytest.approx(expected, rel=1e-12)
    assert hw.comm_time(0, 0) == 0.0
    assert hw.comm_time(0, 5) == pytest.approx(5 * hw.hop_latency)
    assert hw.comm_time(450_000_000_000, 0) == pytest.approx(1.0)
    with pytest.raises(HardwareError):
        hw.comm_time(-1, 1)


# ------------------------------------------------------------------ user files

def test_user_file_loads(tmp_path):
    profiles = load_profiles(write(tmp_path, GOOD))
    assert list(profiles) == ["test-chip"]
    hw = profiles["test-chip"]
    assert hw.matrix_peak("bf16") == 100.5e12
    assert hw.hbm_bandwidth == 1500e9
    assert hw.hbm_capacity == 24e9
    assert hw.link_bandwidth == 50e9
    assert hw.hop_latency == 2.5e-6
    assert hw.kernel_overhead == 1e-6
    assert hw.transcendental_rate == 0.5e12
    assert hw.vendor == "Nobody"
    # Lookup through the user's profiles, by alias, case-insensitively.
    assert get_profile("TEST-CHIP-v1", profiles) is hw
    assert get_profile("tc", profiles) is hw
    # Shipped profiles are still reachable.
    assert get_profile("h100", profiles).name == "h100-sxm"


def test_source_defaults_to_path(tmp_path):
    p = write(tmp_path, GOOD.replace('source = "made up for tests"\n', ""))
    assert load_profiles(p)["test-chip"].source == str(p)


@pytest.mark.parametrize("mutate, match", [
    (lambda s: s.replace("hbm_capacity_gb = 24\n", ""), "missing field 'hbm_capacity_gb'"),
    (lambda s: s.replace('description = "test chip"\n', ""), "missing field 'description'"),
    (lambda s: s.replace("link_bandwidth_gb_s = 50", "link_bandwidth_gb_s = -50"),
     "field 'link_bandwidth_gb_s' must be a number in"),
    (lambda s: s.replace("hop_latency_us = 2.5", "hop_latency_us = -1"), "'hop_latency_us' must be a number in"),
    (lambda s: s.replace("hbm_bandwidth_gb_s = 1500", 'hbm_bandwidth_gb_s = "fast"'),
     "'hbm_bandwidth_gb_s' must be a number in"),
    (lambda s: s.replace("hbm_bandwidth_gb_s = 1500", "hbm_bandwidth_gb_s = true"),
     "'hbm_bandwidth_gb_s' must be a number in"),
    (lambda s: s.replace("hbm_bandwidth_gb_s = 1500", "hbm_bandwidth_gb_s = nan"), "must be a number in"),
    (lambda s: s.replace("bf16 = 100.5", "bf16 = -1"), "matrix_tflops'.bf16 must be a number in"),
    (lambda s: s.replace("bf16 = 100.5", "bfloat17 = 1"), "unknown dtype key 'bfloat17'"),
    (lambda s: s.replace("hbm_capacity_gb", "hbm_capacty_gb"), "unknown field 'hbm_capacty_gb'"),
    (lambda s: s.replace("f32 = 10", "f16 = 10"), "needs an 'f32' rate"),
    (lambda s: s.replace('vendor = "Nobody"', 'f32_matmul = "fp16"'), "f32_matmul"),
    (lambda s: s.replace("[profile.test-chip]", "[profile.test-chip]\n[other]"), "top-level key 'other'"),
    (lambda s: "schema_version = 1\n", "no profiles"),
    (lambda s: s.replace("schema_version = 1", "schema_version = 2"), "schema_version"),
    (lambda s: s + s.replace("schema_version = 1\n", "").replace("test-chip", "other-chip"),
     "alias 'tc' already used by 'test-chip'"),
    (lambda s: "this is [not toml", "not valid TOML"),
    (lambda s: s.replace("hbm_capacity_gb = 24", "hbm_capacity_gb = "), "not valid TOML"),
])
def test_broken_file_raises(tmp_path, mutate, match):
    p = write(tmp_path, mutate(GOOD), name="broken_chip.toml")
    with pytest.raises(HardwareError, match=match) as exc:
        load_profiles(p)
    msg = str(exc.value)
    assert "broken_chip.toml" in msg
    assert "\n" not in msg


def test_missing_file(tmp_path):
    with pytest.raises(HardwareError, match="nope.toml"):
        load_profiles(tmp_path / "nope.toml")


# ------------------------------------------------------------------ template & package data

def test_template_is_a_valid_profile(tmp_path):
    text = template_text()
    tomllib.loads(text)
    profiles = load_profiles(write(tmp_path, text, name="template.toml"))
    assert list(profiles) == ["my-chip"]
    hw = profiles["my-chip"]
    assert hw.matrix_peak("bf16") > 0 and hw.comm_time(1000, 2) > 0


def test_data_files_are_package_resources():
    data = resources.files("mhlo_cost.machines") / "data"
    for name in ("hardware.toml", "hardware_template.toml"):
        assert (data / name).is_file()
        tomllib.loads((data / name).read_text(encoding="utf-8"))
