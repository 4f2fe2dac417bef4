"""``mhlo-cost calibrate --quick`` writes a profile that loads with positive rates (accuracy is the
benchmark's business: benchmarks/validate_latency.py)."""
from __future__ import annotations

from mhlo_cost.cli import main
from mhlo_cost.machines.hardware import load_profiles


def test_quick_calibration_writes_a_loadable_profile(tmp_path, capsys):
    out = tmp_path / "cpu.toml"
    assert main(["calibrate", "--quick", "-o", str(out), "--name", "mycpu", "--progress"]) == 0
    err = capsys.readouterr().err
    assert "matmul f32" in err and "stream bandwidth" in err  # progress on stderr (asked for: not a terminal)
    hw = load_profiles(out)["mycpu"]
    assert hw.matrix_peak("f32") > 0 and hw.matrix_peak("bf16") > 0
    assert hw.vector_peak("f32") > 0 and hw.hbm_bandwidth > 0 and hw.transcendental_rate > 0
    assert 0 < hw.kernel_overhead < 1e-3
    curve = dict(hw.gemm.curve)
    assert set(curve) == {"f32", "bf16"}
    assert all(0 < e <= 1 for pts in curve.values() for _, e in pts)
    assert max(e for _, e in curve["f32"]) == 1.0  # the best size defines the peak


def test_calibrate_bad_name_and_unwritable_output_exit_2(tmp_path, capsys):
    assert main(["calibrate", "--quick", "--name", "Bad Name"]) == 2
    (tmp_path / "a_file").write_text("")  # a folder that cannot be made (a missing one is made: the output rule)
    out = tmp_path / "a_file" / "dir.toml"
    assert main(["calibrate", "--quick", "-q", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"mhlo-cost: error: {out}: cannot write")
