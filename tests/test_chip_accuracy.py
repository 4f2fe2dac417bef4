"""Per-chip accuracy (issue 39, part 2): the accuracy line of a chip beyond A100 / H100 / H200 gives that chip's own
median |error| from the ``[chips]`` table of ``accuracy.toml`` (or that no measurement validates it); the published
measurements of ``benchmarks/data/published_chips.toml`` parse and say where each comes from; and
``benchmarks/validate_chips.py`` prices rows with ``validate_published.py``'s pricing against each row's own
figure."""
from __future__ import annotations

import os
import shutil
import sys
import tomllib

import pytest

from helpers import run_cli
from mhlo_cost.machines.accuracy import median_error, statement

pytest.importorskip("jax")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import validate_chips as vc  # noqa: E402
import validate_published as vp  # noqa: E402

ACCURACY = os.path.join(ROOT, "mhlo_cost", "machines", "data", "accuracy.toml")
DATA = os.path.join(ROOT, "benchmarks", "data", "published_chips.toml")
OLD_THREE = {"a100-sxm-80gb", "h100-sxm", "h200-sxm"}

# A datasheet-only profile (no efficiency model: every dot at the peak), named as a chip with measurements.
PROFILE = """
[profile.b200]
description = "test: a B200-named datasheet profile"
hbm_bandwidth_gb_s = 8000
hbm_capacity_gb = 180
link_bandwidth_gb_s = 900
hop_latency_us = 3.0
kernel_overhead_us = 3.0
transcendental_tops = 5.0
matrix_tflops = { bf16 = 2250, fp8 = 4500 }
vector_tflops = { f32 = 75, int32 = 75, bf16 = 150 }

[profile.chip-without-rows]
description = "test: a chip no published row measures"
hbm_bandwidth_gb_s = 1000
hbm_capacity_gb = 16
link_bandwidth_gb_s = 100
hop_latency_us = 3.0
kernel_overhead_us = 3.0
transcendental_tops = 1.0
matrix_tflops = { bf16 = 100 }
vector_tflops = { f32 = 10, int32 = 10, bf16 = 20 }
"""


def _doc():
    with open(ACCURACY, "rb") as f:
        return tomllib.load(f)


# -- the accuracy line ----------------------------------------------------------------------------------------
def test_a_chip_with_measurements_prints_its_own_median_and_count():
    chips = _doc()["chips"]["chip"]
    assert chips, "accuracy.toml has no per-chip table"
    for chip, entry in chips.items():
        cat, what = ("model", "whole-model") if "model" in entry else ("overall", "all")
        e = entry[cat]
        line = statement(chip, "model")
        assert line.startswith(f"{what} estimates on {chip} have been {e['median_error']:.0%} ")
        assert f"median of {e['n']}," in line and "held out" in line
        assert median_error(chip) == pytest.approx(e["median_error"])
    e = chips["b200"]["gemm"]
    assert statement("b200", "gemm").startswith(f"gemm estimates on b200 have been {e['median_error']:.0%} ")


def test_a_chip_without_measurements_says_so():
    assert statement("chip-without-rows") == ("no published measurement validates chip-without-rows "
                                              "(benchmarks/validate_published.py, benchmarks/validate_chips.py)")
    assert median_error("chip-without-rows") is None
    assert statement("b200", "model", "unfused") == "no published measurement validates the unfused estimate"


def test_a100_h100_h200_keep_their_held_out_figures():
    doc = _doc()
    assert OLD_THREE <= set(doc["chip"]) and not OLD_THREE & set(doc["chips"]["chip"])
    for chip in OLD_THREE:
        e = doc["chip"][chip]["overall"]
        assert f"have been {e['median_error']:.0%} from published measurements (held-out median of {e['n']}," \
            in statement(chip, "overall")


def test_the_report_prints_the_line_for_a_profile_from_a_hardware_file(tmp_path, capsys):
    hw = tmp_path / "hw.toml"
    hw.write_text(PROFILE)
    fixture = os.path.join(ROOT, "tests", "fixtures", "small_stablehlo.mlir")
    lines = {}
    for chip in ("b200", "chip-without-rows"):
        code, out, err = run_cli(["report", fixture, "--hardware", chip, "--hardware-file", hw,
                                  "--fuse", "elementwise"], capsys)
        assert code == 0, err
        lines[chip] = next(ln for ln in out.splitlines() if ln.startswith("accuracy"))
    assert statement("b200") in lines["b200"]
    assert "no published measurement validates chip-without-rows" in lines["chip-without-rows"]


# -- the data -------------------------------------------------------------------------------------------------
def test_every_row_names_its_source_configuration_figure_and_unit():
    with open(DATA, "rb") as f:
        rows = tomllib.load(f)["m"]
    ids = [m["id"] for m in rows]
    assert len(ids) == len(set(ids))
    for m in rows:
        assert m["source"].startswith("https://") and len(m["config"]) > 40, m["id"]
        assert isinstance(m["measured"], float) and m["measured"] > 0, m["id"]
        assert m["unit"] in ("ms", "TFLOP/s"), m["id"]
        assert m["unit"] == "ms" or m["flops"] in ("gemm", "attention", "attention_bwd"), m["id"]
        assert m["program"] in vp.BUILDERS and m["category"] in vp.CATEGORIES, m["id"]
    beyond = {m["chip"] for m in rows} - OLD_THREE - {"a100", "h100", "h200"}
    assert len(beyond) >= 8


# -- the validation script ------------------------------------------------------------------------------------
def _gemm_row(m=4096, n=4096, k=4096, tflops=1500.0):
    return {"id": "t-gemm", "category": "gemm", "chip": "b200", "program": "matmul",
            "params": {"batch": 1, "m": m, "n": n, "k": k, "dtype": "bfloat16"}, "measured": tflops,
            "unit": "TFLOP/s", "flops": "gemm", "source": "https://github.com/o/r/blob/x/README.md", "config": "t"}


def test_a_row_is_priced_against_its_own_figure(tmp_path):
    hw = tmp_path / "hw.toml"
    hw.write_text(PROFILE)
    profiles = vc.load_profiles(hw)
    m, n, k, tf = 4096, 4096, 4096, 1500.0
    (res,), unpriced = vc.price([_gemm_row(m, n, k, tf)], profiles)
    chip, cat, source, rid, est, meas, ratio = res
    assert (chip, cat, source, rid, unpriced) == ("b200", "gemm", "o/r", "t-gemm", {})
    flops = 2 * m * n * k
    assert meas == pytest.approx(flops / (tf * 1e12))  # the row's own figure, as a time
    # no efficiency model: the dot at the 2250 TFLOP/s peak, or its operands and result through HBM at 8 TB/s,
    # plus at most a few kernels' overheads
    floor = max(flops / 2250e12, 3 * m * n * 2 / 8000e9)
    assert floor <= est <= floor + 3 * 3e-6
    assert ratio == pytest.approx(est / meas)


def test_a_row_whose_chip_has_no_profile_is_listed_not_dropped():
    results, unpriced = vc.price([dict(_gemm_row(), chip="no-such-chip")])
    assert results == [] and unpriced == {"no-such-chip": ["t-gemm"]}
    assert any("not priced" in ln and "no-such-chip" in ln for ln in vc.summary(results, unpriced))


def test_the_script_on_a_subset_prints_chip_lines_and_fills_the_tables(tmp_path, capsys):
    hw = tmp_path / "hw.toml"
    hw.write_text(PROFILE)
    acc, docs = tmp_path / "accuracy.toml", tmp_path / "chips.md"
    shutil.copy(ACCURACY, acc)
    docs.write_text("# Chips\n\nprose\n")
    results, unpriced = vc.price(vc.load_rows(DATA)[:2], vc.load_profiles(hw))  # two B200 GEMM rows
    table = vc.per_chip(results)
    vc.write_accuracy(table, DATA, str(hw), path=str(acc), date="2026-01-02")
    vc.write_docs(table, unpriced, str(hw), path=str(docs), date="2026-01-02")
    doc = tomllib.loads(acc.read_text())
    assert doc["chip"] == _doc()["chip"]  # validate_published.py's part is kept
    assert doc["chips"]["date"] == "2026-01-02" and list(doc["chips"]["chip"]) == ["b200"]
    med, ratio, n = table["b200"]["overall"]
    assert doc["chips"]["chip"]["b200"]["overall"]["n"] == n == 2
    assert docs.read_text().startswith("# Chips\n\nprose\n") and f"| b200 | 2 | 0 | {med:.1%} |" in docs.read_text()
    held = [("a100", "gemm", "x", 0.9)]
    vp.write_accuracy(held, path=str(acc))  # and validate_published.py keeps the per-chip part
    assert tomllib.loads(acc.read_text())["chips"]["chip"]["b200"]["overall"]["n"] == 2
    assert vc.main(["--data", DATA, "--hardware-file", str(hw), "--only", "mamf-b200-bf16"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("median |error| = ") and out[-1].endswith("over 1 rows on 1 chips (held out: every row)")
    assert any(ln.split()[:2] == ["b200", "n="] for ln in out)
    assert any(ln.startswith("per chip (every row is held out") for ln in out)
