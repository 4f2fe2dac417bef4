"""Issue 24 (third reliability round), profiles and outputs: hardware and system files whose numbers are out of
their physical range, sweep specs of the wrong types, strict JSON, CSV cells a spreadsheet would evaluate, the
sweep cache on a subset of profiles, a negative baseline count, each STDiT3 shape beside its own measurement,
and the hostile-profile fuzz (tests/fuzz_profiles.py). Every crasher the fuzz found is a fixture under
tests/fixtures/reliability3/profiles/."""
from __future__ import annotations

import csv
import io
import json
import math
import random
import sys
from pathlib import Path

import pytest

from mhlo_cost.cli import main

sys.path.insert(0, str(Path(__file__).parent))
import fuzz_profiles  # noqa: E402
from helpers import script  # noqa: E402

FIX = Path(__file__).parent / "fixtures" / "reliability3" / "profiles"
PROGRAM = FIX / "program.mlir"
ROOT = Path(__file__).parent.parent


def strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"non-JSON constant {name} in the output")
    return json.loads(text, parse_constant=refuse)


def one_error(capsys, argv: list[str]) -> str:
    """Run ``argv``; it must exit 2 with one ``mhlo-cost: error:`` line, which is returned."""
    rc = main(argv)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("mhlo-cost: error: ")]
    assert rc == 2 and len(errors) == 1 and "Traceback" not in err, (rc, err)
    return errors[0]


# ------------------------------------------------------------------------------ hardware and system files

#: Each kept crasher (exit 70 or a bare Infinity in JSON before) -> what its one error line must name.
HARDWARE_CRASHERS = {
    "chip_gemm_curve_nan.toml": ("'gemm'.curve.bf16", "[1e-09, 1e+09] GFLOP"),
    "chip_hbm_5e-324_json_infinity.toml": ("'hbm_bandwidth_gb_s'", "[0.001, 1e+06] GB/s"),
    "chip_gemm_efficiency_5e-324.toml": ("'gemm'.efficiency", "[0.0001, 1]"),
    "chip_gemm_efficiency_1e-308.toml": ("'gemm'.efficiency", "[0.0001, 1]"),
    "chip_schema_version_true.toml": ("schema_version true", "the whole number 1"),
    "system_mesh_axes_list.toml": ("'axes'", "name each of the 2 axes once"),
    "chip_gemm_curve_fraction_5e-324.toml": ("'gemm'.curve.bf16", "[0.0001, 1]"),
    "chip_matrix_bf16_1e308_json_infinity.toml": ("'matrix_tflops'.bf16", "[1e-06, 1e+06] TFLOP/s"),
    "system_mesh_link_5e-324_json_infinity.toml": ("'link_bandwidth_gb_s'", "[0.001, 1e+06] GB/s"),
}
#: The name to ask for in each (a system where the file holds one).
SYSTEM_OF = {"system_mesh_axes_list.toml": "my-mesh", "system_mesh_link_5e-324_json_infinity.toml": "my-mesh"}


@pytest.mark.parametrize("name", sorted(HARDWARE_CRASHERS))
def test_kept_hardware_crashers_are_one_line_naming_file_key_and_range(capsys, name):
    path = FIX / name
    key, allowed = HARDWARE_CRASHERS[name]
    hw = SYSTEM_OF.get(name, "my-chip")
    for argv in (["hardware", "--hardware-file", str(path)],
                 ["report", str(PROGRAM), "--hardware-file", str(path), "--hardware", hw, "--format", "json", "-q"],
                 ["report", str(PROGRAM), "--hardware-file", str(path), "--hardware", hw, "--fuse", "elementwise",
                  "-q"]):
        line = one_error(capsys, argv)
        assert str(path) in line and key in line and allowed in line, line


def _chip(**fields) -> str:
    """A chip profile's TOML; ``fields`` replace its figures (values as TOML text)."""
    figures = {"hbm_bandwidth_gb_s": "1000", "hbm_capacity_gb": "16", "link_bandwidth_gb_s": "100",
               "hop_latency_us": "1", "kernel_overhead_us": "2", "transcendental_tops": "1",
               "bf16": "100", "f32": "10", "efficiency": "0.5"}
    figures.update(fields)
    return ('schema_version = 1\n[profile.t]\ndescription = "t"\n'
            + "".join(f"{k} = {figures[k]}\n" for k in list(figures)[:6])
            + f"[profile.t.matrix_tflops]\nbf16 = {figures['bf16']}\n"
            + f"[profile.t.vector_tflops]\nf32 = {figures['f32']}\n"
            + f"[profile.t.gemm]\nefficiency = {figures['efficiency']}\ncompute_units = 4\n")


@pytest.mark.parametrize("field, inside, outside", [
    ("hbm_bandwidth_gb_s", ["0.001", "1e6"], ["0.0009", "1.1e6", "5e-324", "inf", "nan", "true", "0"]),
    ("link_bandwidth_gb_s", ["0.001"], ["-1", "1e308"]),
    ("hbm_capacity_gb", ["0.001", "1e6"], ["0.0001", "2e6"]),
    ("hop_latency_us", ["0", "1e6"], ["-1e-9", "1e7", "-inf"]),
    ("kernel_overhead_us", ["0"], ["nan", "false"]),
    ("transcendental_tops", ["1e-6", "1e6"], ["1e-7", "1e7"]),
    ("bf16", ["1e-6", "1e6"], ["1e-7", "1e308", '"fast"']),
    ("f32", ["1e-6"], ["0", "-inf"]),
    ("efficiency", ["0.0001", "1"], ["0.00009", "1.0000001", "5e-324", "1e-308", "true"]),
])
def test_each_figure_is_finite_and_inside_its_stated_range(tmp_path, field, inside, outside):
    from mhlo_cost.machines.hardware import HardwareError, load_profiles

    p = tmp_path / "t.toml"
    for v in inside:
        p.write_text(_chip(**{field: v}))
        load_profiles(p)
    for v in outside:
        p.write_text(_chip(**{field: v}))
        with pytest.raises(HardwareError, match=r"must be a (number|whole number) in \[") as e:
            load_profiles(p)
        assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_the_templates_state_each_range(tmp_path):
    """The ranges the code applies are written in the templates a user copies (and the templates still load)."""
    from mhlo_cost.machines.hardware import load_profiles
    from mhlo_cost.network.systems import load_systems

    hw = (ROOT / "mhlo_cost" / "machines" / "data" / "hardware_template.toml").read_text()
    sys_ = (ROOT / "mhlo_cost" / "machines" / "data" / "system_template.toml").read_text()
    for line in ("1e-06 .. 1e+06 TFLOP/s", "0.001 .. 1e+06 GB/s", "0.001 .. 1e+06 GB ", "0 .. 1e+06 us",
                 "0.0001 .. 1", "1e-09 .. 1e+09 GFLOP", "true/false are not numbers"):
        assert line in hw, line
    for line in ("0.001 .. 1e+06 GB/s", "0.008 .. 8e+06 Gb/s", "0.0001 .. 1", "0 .. 1e+06 us", "1 .. 1000000"):
        assert line in sys_, line
    load_profiles(ROOT / "mhlo_cost" / "machines" / "data" / "hardware_template.toml")
    load_systems(ROOT / "mhlo_cost" / "machines" / "data" / "system_template.toml", load_profiles(
        ROOT / "mhlo_cost" / "machines" / "data" / "system_template.toml"))


@pytest.mark.parametrize("text, key", [
    ('[system.s]\nchip = "h100"\n[system.s.intra]\ndevices_per_node = 8\nbandwidth_gb_s = 5e-324\n',
     "'bandwidth_gb_s'"),
    ('[system.s]\nchip = "h100"\n[system.s.intra]\ndevices_per_node = true\nbandwidth_gb_s = 100\n',
     "'devices_per_node'"),
    ('[system.s]\nchip = "h100"\nbase_latency_us = inf\n[system.s.intra]\ndevices_per_node = 8\nbandwidth_gb_s = 1\n',
     "'base_latency_us'"),
    ('[system.s]\nchip = "h100"\nplacement = [0, "a"]\n[system.s.mesh]\ndims = [2]\nlink_bandwidth_gb_s = 1\n',
     "'placement'"),
    ('[system.s]\nchip = "h100"\n[system.s.mesh]\ndims = [4096, 4096]\nlink_bandwidth_gb_s = 1\n', "'dims'"),
    ('[system.s]\nchip = "h100"\n[system.s.intra]\ndevices_per_node = 8\nbandwidth_gb_s = 1\n[system.s.network]\n'
     'nics_per_node = 1\nnic_gbit_s = 1e308\n', "'nic_gbit_s'"),
    ('schema_version = true\n[system.s]\nchip = "h100"\n[system.s.intra]\ndevices_per_node = 8\nbandwidth_gb_s = 1\n',
     "schema_version"),
])
def test_system_files_out_of_range_are_one_line(tmp_path, capsys, text, key):
    p = tmp_path / "sys.toml"
    p.write_text(text)
    line = one_error(capsys, ["report", str(PROGRAM), "--hardware-file", str(p), "--hardware", "s", "-q"])
    assert str(p) in line and key in line, line


def test_the_edges_of_the_ranges_give_finite_times_and_strict_json(tmp_path, capsys):
    """The slowest chip the ranges allow: every time finite (closed form: the dot at 1 MFLOP/s x 0.0001), JSON
    strict, no figure of hundreds of digits in the table."""
    p = tmp_path / "slow.toml"
    p.write_text(_chip(hbm_bandwidth_gb_s="0.001", link_bandwidth_gb_s="0.001", hop_latency_us="1e6",
                       kernel_overhead_us="1e6", transcendental_tops="1e-6", bf16="1e-6", f32="1e-6",
                       efficiency="0.0001"))
    assert main(["report", str(PROGRAM), "--hardware-file", str(p), "--by", "op", "--format", "json", "-q"]) == 0
    rows = strict_json(capsys.readouterr().out)["rows"]
    dot = next(r for r in rows if r["operation"].endswith("dot_general"))
    # 2 x 64 x 256 x 128 FLOPs at 1e6 FLOP/s x 0.0001 x wave, wave = 2 tiles of 128 x 128 on 4 units = 0.5; plus
    # the kernel overhead of 1e6 us
    flops = 2 * 64 * 256 * 128
    assert dot["latency_us"] == pytest.approx((flops / (1e6 * 0.0001 * 0.5) + 1.0) * 1e6, rel=1e-9)
    assert all(math.isfinite(v) for r in rows for v in r.values() if isinstance(v, float))
    assert main(["report", str(PROGRAM), "--hardware-file", str(p), "--by", "op", "--wide", "-q"]) == 0
    table = capsys.readouterr().out.splitlines()[1:]  # under the title (which names the file)
    assert max(len(cell) for line in table for cell in line.split()) < 40


# ------------------------------------------------------------------------------ strict JSON writers

def test_json_writers_never_write_infinity_or_nan():
    from mhlo_cost.views.pairs import render_pairs
    from mhlo_cost.views.text import to_json
    from mhlo_cost.studies.sweep.table import frame
    from mhlo_cost.studies.sweep.table import to_json as sweep_json

    inf = float("inf")
    d = strict_json(to_json({"summary": {"a": 1}, "rows": [{"t_s": inf, "u": -inf, "n": float("nan"), "k": 3}]}))
    assert d["rows"] == [{"t_s": None, "u": None, "n": None, "k": 3}]
    assert "3 non-finite number(s)" in d["notes"][0] and "t_s" in d["notes"][0]
    d = strict_json(render_pairs([("est_time_s", inf), ("ops", 3)], "json", "raw", meta={}, title="t"))
    assert d["rows"][0]["value"] is None and d["notes"]
    df = frame([{"model": "m", "shape": "s", "parallel": "none", "devices": 1, "hardware": "h", "dtype": "bf16",
                 "status": "ok", "reason": "", "time_step_s": inf}], fused=False)
    d = strict_json(sweep_json(df, {}))
    assert d["rows"][0]["time_step_s"] is None and d["notes"]


# ------------------------------------------------------------------------------ CSV cells

FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _cells(text: str) -> list[str]:
    return [c for row in csv.reader(io.StringIO(text)) for c in row]


def _assert_no_formula(text: str) -> None:
    for c in _cells(text):
        if c.startswith(FORMULA):
            float(c)  # only a number may begin so (a negative number stays a number)


def test_csv_cells_a_spreadsheet_would_evaluate_are_text(capsys, tmp_path):
    mlir = FIX / "formula_names.mlir"
    assert main(["report", str(mlir), "--by", "op", "--format", "csv", "-q"]) == 0
    text = capsys.readouterr().out
    _assert_no_formula(text)
    cells = _cells(text)
    assert "'=HYPERLINK(\"http://x\")" in cells  # the callee's name
    assert "'+cmd|calc" in cells and "'-2+3" in cells and "'@SUM(1+1)/=1+2" in cells  # scopes
    m = str(mlir)
    for argv, scope_cell in ((["report", m, "--format", "csv", "-q"], False),  # the summary: no scope rows
                             (["report", m, "--by", "scope", "--format", "csv", "-q"], True),
                             (["report", m, "--by", "block", "--format", "csv", "-q"], True),
                             (["blocks", m, "-q"], True)):
        assert main(argv) == 0
        out = capsys.readouterr().out
        _assert_no_formula(out)
        assert not scope_cell or "'+cmd|calc" in _cells(out), argv


def test_csv_numbers_stay_numbers(capsys, tmp_path):
    """A negative number (a diff's delta) is written as it is; a text cell that is a plain number too."""
    from mhlo_cost.files.outtext import csv_cell
    from mhlo_cost.studies.sweep.table import to_csv

    assert main(["diff", str(ROOT / "examples" / "gpt_small.mlir"), str(FIX / "program.mlir"), "--format", "csv",
                 "-q"]) in (0, 1)
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    deltas = [r["gemm_flops_delta"] for r in rows if r["block"] != "TOTAL"]
    assert "-436207616" in deltas  # a layer of gpt_small (only in A): 2 x its 218,103,808 MACs, negated
    assert [csv_cell(v) for v in (-5, -1.5, "-5", "-1.5e3", "=1", "\tx", "\rx", "@a", "+a", "-a", "main", "")] == [
        -5, -1.5, "-5", "-1.5e3", "'=1", "'\tx", "'\rx", "'@a", "'+a", "'-a", "main", ""]
    from mhlo_cost.studies.sweep.table import frame

    df = frame([{"model": "=evil()", "shape": "-1x2", "parallel": "none", "devices": 1, "hardware": "h",
                 "dtype": "bf16", "status": "ok", "reason": "", "time_step_s": -1.5}], fused=False)
    row = next(csv.DictReader(io.StringIO(to_csv(df))))
    assert row["model"] == "'=evil()" and row["shape"] == "'-1x2" and row["time_step_s"] == "-1.5"


# ------------------------------------------------------------------------------ sweep

SMALL = ["--model", "stdit3", "--small", "--depth", "1", "-j", "1"]


@pytest.mark.parametrize("name, words", [
    ("spec_models_5.toml", "key 'strategies' must be a string or a non-empty list of them, got [False]"),
    ("spec_model_list.toml", "key 'model' must be a string, got [[1e-320, 0.5]]"),
    ("spec_model_list_of_ints.toml", "key 'model' must be a string, got [0, 0]"),
    ("spec_models_int_and_nan_model.toml", "key 'model' must be a string, got nan"),
    ("spec_hardware_item_table.toml", "key 'hardware' must be a string or a non-empty list of them, got [{}]"),
])
def test_kept_spec_crashers_are_one_line(capsys, name, words):
    line = one_error(capsys, ["sweep", "--spec", str(FIX / name), "--no-cache", "-q"])
    assert words in line and str(FIX / name) in line, line


@pytest.mark.parametrize("text, words", [
    ('hardware = ["h100"]\nmodels = 5\n', "key 'models' must be a list of tables ([[models]]), got 5"),
    ('hardware = ["h100"]\ndevices = ["8"]\n', "key 'devices' must be a whole number or a non-empty list of them"),
    ('hardware = ["h100"]\nsteps = true\n', "key 'steps' must be a whole number, got true"),
    ('hardware = 5\n', "key 'hardware' must be a string or a non-empty list of them, got 5"),
    ('hardware = ["h100"]\noptions = 3\n', "key 'options' must be a table"),
    ('hardware = ["h100"]\n[options]\ndepth = "2"\n', "key 'options.depth' must be a whole number, got '2'"),
    ('hardware = ["h100"]\n[[models]]\nhf = "X"\ninputs = [[1]]\n', "key 'inputs' must be a list of input sets"),
    ('hardware = ["h100"]\n[[models]]\nhf = 5\ninputs = [["1x4:f32"]]\n', "key 'models.hf' must be a string"),
])
def test_spec_types_are_checked_before_any_point_runs(tmp_path, capsys, monkeypatch, text, words):
    from mhlo_cost.studies.sweep import point

    monkeypatch.setattr(point, "compute", lambda task: pytest.fail("a point ran"))
    spec = tmp_path / "s.toml"
    spec.write_text(text)
    line = one_error(capsys, ["sweep", "--spec", str(spec), "--no-cache", "-q"])
    assert words in line and str(spec) in line, line


def test_a_sweep_in_which_no_point_ran_is_an_error_after_its_table(tmp_path, capsys):
    out = tmp_path / "t.csv"
    line = one_error(capsys, ["sweep", "--spec", str(FIX / "spec_no_point_runs.toml"), "--no-cache", "-o", str(out)])
    assert "no point of the sweep ran (1 row(s) skipped, 0 failed)" in line and "one device" in line
    assert "skipped" in out.read_text()  # the table with each reason is written all the same


def test_the_cache_serves_any_list_of_profiles_it_holds(tmp_path, capsys):
    # One call site for every sweep: lowered in this process, the IR's locations hold the caller's stack.
    runs = [(("h100", "a100"), "1 computed, 0 cached"), (("a100",), "0 computed, 1 cached"),
            (("a100", "dgx-h100"), "1 computed, 0 cached"),  # a profile the cache lacks: kept beside the others
            (("dgx-h100", "h100", "a100"), "0 computed, 1 cached")]
    tables = []
    for hw, said in runs:
        out = tmp_path / "t.json"
        assert main(["sweep", *SMALL, "--hardware", *hw, "--cache-dir", str(tmp_path / "c"), "-o", str(out)]) == 0
        assert said in capsys.readouterr().err, hw
        tables.append({r["hardware"]: r for r in strict_json(out.read_text())["rows"]})
    assert tables[1]["a100"] == tables[0]["a100"] and tables[3]["h100"] == tables[0]["h100"]
    assert tables[3]["dgx-h100"] == tables[2]["dgx-h100"]
    assert len(list((tmp_path / "c" / "sweep" / "results").iterdir())) == 1


# ------------------------------------------------------------------------------ smaller points

def test_a_negative_baseline_count_is_bad_input(tmp_path, capsys):
    base = json.loads((ROOT / "tests" / "fixtures" / "baselines" / "gpt_small.flops.json").read_text())
    base["summary"]["gemm_flops"] = -5
    p = tmp_path / "neg.flops.json"
    p.write_text(json.dumps(base))
    line = one_error(capsys, ["check", str(ROOT / "examples" / "gpt_small.mlir"), "--baseline", str(p), "-q"])
    assert "summary.gemm_flops" in line and "-5" in line


def test_each_stdit3_shape_is_compared_with_its_own_measurement():
    mod = script("benchmarks/stdit3_roofline.py")
    # the published single-A100 30-step times (issue 24): 99.0 / 202.3 / 104.24 / 206.92 s
    for shape, seconds in (("204_640_360", 99.0), ("408_640_360", 202.3), ("51_1280_720", 104.24),
                           ("102_1280_720", 206.92)):
        assert mod.measured_per_forward(shape) == pytest.approx(seconds / 30, rel=1e-12), shape
    assert mod.measured_per_forward("204_640_360", small=True) is None
    assert mod.measured_per_forward("16_256_256") is None


# ------------------------------------------------------------------------------ fuzz

@pytest.mark.parametrize("seed", [1, 2])
def test_hostile_profiles_and_specs_never_exit_70(tmp_path, seed):
    stats = fuzz_profiles.campaign(40, 4, seed, tmp_path / "work", tmp_path / "kept")
    assert stats["hardware_variants"] == 40 and stats["spec_variants"] == 4
    assert stats["failures"] == [], stats["failures"][:3]


def test_the_generator_makes_what_it_says(tmp_path):
    """Mutations change the document; the TOML it writes reads back as the document (NaN aside)."""
    import tomllib

    rng = random.Random(0)
    for name, doc in fuzz_profiles.seeds():
        assert tomllib.loads(fuzz_profiles.toml_text(doc)) == doc
        for _ in range(20):
            mutant, did = fuzz_profiles.mutate(doc, rng)
            assert did and mutant != doc or any("nan" in d for d in did)
            tomllib.loads(fuzz_profiles.toml_text(mutant))  # always valid TOML
