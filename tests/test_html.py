"""``report --format html``: a self-contained page with the same exact numbers as the CSV; sections follow
the data; the same input gives the same bytes. (The page in a real browser: test_html_browser.py.)"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from html_pages import ROOT, csv_rows, dump, header_names, read_page, same_value
from mhlo_cost import analyze
from mhlo_cost.analysis import blocks as blocks_mod
from mhlo_cost.cli import main
from mhlo_cost.analysis.collectors import assign_blocks
from mhlo_cost.views.html import report_page
from mhlo_cost.views.html.fmt import column, exact, scaled_text
from mhlo_cost.roofline import Roofline
from mhlo_cost.machines.hardware import get_profile

GPT = ROOT / "examples" / "gpt_small.mlir"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return dump(tmp_path_factory.mktemp("html") / "stdit3_small.mlir")


@pytest.fixture(scope="module")
def tp4(tmp_path_factory):
    return dump(tmp_path_factory.mktemp("html") / "stdit3_small_tp4.mlir", "--parallel", "megatron", "--devices", "4")


def page_of(capsys, *args) -> str:
    assert main(["report", *map(str, args), "--format", "html", "-q"]) == 0
    return capsys.readouterr().out


# -- self-contained --------------------------------------------------------------------------------------------
URL_ATTRS = {"src", "href", "xlink:href", "action", "formaction", "poster", "data", "srcset", "background"}


@pytest.mark.parametrize("extra", [[], ["--hardware", "h100", "--fuse", "elementwise"]])
def test_no_external_url_in_any_src_or_href(small, capsys, extra):
    text = page_of(capsys, small, *extra)
    page = read_page(text)
    links = [(tag, k, v) for tag, attrs in page.tags for k, v in attrs.items() if k in URL_ATTRS]
    assert links, "the contents line links to the sections"
    assert all(v.startswith("#") for _, _, v in links), [x for x in links if not x[2].startswith("#")]
    assert not [t for t, _ in page.tags if t in ("link", "iframe", "img", "object", "embed", "base")]
    assert not [a for t, a in page.tags if t == "script" and "src" in a]
    assert not re.search(r"url\(|@import", text)
    csp = [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]
    ids = [a["id"] for _, a in page.tags if "id" in a]
    assert len(ids) == len(set(ids)) and all(v[1:] in ids for _, _, v in links)  # every link lands


def test_same_input_same_bytes_across_processes(small, tmp_path):
    outs = []
    for seed in ("1", "2"):
        out = tmp_path / f"r{seed}.html"
        p = subprocess.run([sys.executable, "-m", "mhlo_cost", "report", str(small), "--hardware", "a100", "--fuse",
                            "elementwise", "--format", "html", "-o", str(out), "-q"], capture_output=True, text=True,
                           timeout=600, env={**os.environ, "PYTHONHASHSEED": seed})
        assert p.returncode == 0, p.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert not re.search(rb"20\d\d-\d\d-\d\d", outs[0])  # no date


# -- the same numbers as the CSV ---------------------------------------------------------------------------------
@pytest.mark.parametrize("extra", [[], ["--hardware", "h100"], ["--hardware", "h100", "--fuse", "elementwise"]])
def test_block_table_holds_the_csv_exactly(tp4, capsys, extra):
    page = read_page(page_of(capsys, tp4, *extra))
    assert main(["report", str(tp4), "--by", "block", "--format", "csv", "-q", *extra]) == 0
    head, rows = csv_rows(capsys.readouterr().out)
    table = page.tables["blocks"]
    assert header_names(table) == head
    body = [[c["attrs"]["data-v"] for c in r["cells"]] for r in table["body"]]
    total = [[c["attrs"]["data-v"] for c in r["cells"]] for r in table["foot"] if r["attrs"].get("class") == "total"]
    assert len(body) == len(rows) - 1 and len(total) == 1
    for mine, theirs in zip(body + total, rows):
        assert all(same_value(a, b) for a, b in zip(mine, theirs)), (mine, theirs)
    # Exact integers survive: the comm bytes of the TOTAL row are the summary's, digit for digit.
    assert main(["report", str(tp4), "--format", "json", "-q"]) == 0
    import json

    summary = json.loads(capsys.readouterr().out)["summary"]
    assert total[0][head.index("comm_bytes")] == str(summary["comm_bytes"]) != "0"
    assert total[0][head.index("gemm_flops")] == str(summary["gemm_flops"])


def test_cells_round_for_display_only():
    # Worked by hand: 436,207,616 FLOP in MFLOP to 3 decimals; halves round away from zero; a non-zero
    # value below the last decimal says so rather than 0.000.
    assert scaled_text(436_207_616, 10**6) == "436.208"
    assert scaled_text(20_005, 10**4) == "2.001" and scaled_text(-20_005, 10**4) == "-2.001"
    assert scaled_text(20_004, 10**4) == "2.000"
    assert scaled_text(1, 10**12) == "<0.001"
    big = 2**70 + 1  # beyond int64 and beyond a double's 53 bits: the page keeps every digit
    assert exact(big) == "1180591620717411303425"
    flops = column("gemm_flops", pd.Series([4_879_024_750_592, 6_488_064, 0], dtype="int64"))
    assert (flops.unit, flops.cell(4_879_024_750_592), flops.cell(6_488_064), flops.cell(0)) == (
        "TFLOP", "4.879", "<0.001", "0")
    assert flops.tip(4_879_024_750_592) == "4,879,024,750,592 FLOP = 4.879 TFLOP"
    t = column("est_time_s", pd.Series([0.0123, 0.000085]))
    assert (t.unit, t.cell(0.0123), t.cell(0.000085)) == ("ms", "12.300", "0.085")
    u = column("utilisation", pd.Series([0.4712]))
    assert (u.unit, u.cell(0.4712)) == ("%", "47.1")
    assert column("gemm_flops", pd.Series([5 * 10**9]), unit="T").cell(5 * 10**9) == "0.005"
    assert column("block", pd.Series(["a", "b"])).numeric is False


# -- sections follow the data ---------------------------------------------------------------------------------
def _page(path, hw=None, **kw):
    a = analyze(path)
    rf = Roofline(a, get_profile(hw)) if hw else None
    return report_page(a, assign_blocks(a), roofline=rf, **kw)


def test_without_a_profile_flops_and_no_roofline():
    text = _page(GPT)
    assert "FLOPs per block (GFLOP)" in text and "add <code>--hardware NAME</code>" in text
    assert 'class="pt"' not in text and 'id="memory"' not in text
    assert text.count('<g class="bar"') == 7  # embed, 4 layers, ln_f, lm_head


def test_with_a_profile_times_roofs_and_points():
    text = _page(GPT, "h100")
    assert "estimated time per block" in text
    assert text.count('class="pt"') > 3 and "HBM 3.35 TB/s" in text and "matrix unit (bf16): 989.4 TFLOP/s" in text


def test_memory_appears_when_figures_exist(monkeypatch):
    a = analyze(GPT)
    n = len(a.rows)
    # Live bytes as the memory work will give them: one figure per op row, in program order.
    live = [1000 * (i % 50) for i in range(n)]
    live[n // 2] = 7_000_000
    text = report_page(a, assign_blocks(a), roofline=Roofline(a, get_profile("h100")),
                       timeline={"live_bytes": live})
    assert 'id="memory"' in text and "<polyline" in text and "live_bytes peak 7.000 MB" in text
    # A memory column in the block table (any *_bytes beyond the bytes moved): lines per block, and a column.
    monkeypatch.setitem(blocks_mod.ROW_METRICS, "peak_bytes", lambda r: r.bytes_written)
    text = _page(GPT)
    page = read_page(text)
    assert "peak_bytes" in header_names(page.tables["blocks"])
    assert 'id="memory"' in text and "memory per block" in text


def test_share_by_phase_when_rows_carry_one():
    from types import SimpleNamespace

    from mhlo_cost.views.html.build import _share

    # Training rows as the phase work will mark them: 300 forward FLOPs, 600 backward (1/3 and 2/3).
    rows = [SimpleNamespace(kind="dot", phase=p, gemm_flops=f, conv_flops=0, vector_flops=0)
            for p, f in (("forward", 100), ("forward", 200), ("backward", 600))]
    html = _share(SimpleNamespace(rows=rows), None)
    assert "FLOPs by phase</h3>" in html and "FLOPs by op kind</h3>" in html
    assert "backward: 600 FLOP, 66.7% of FLOPs by phase" in html and "forward: 300 FLOP, 33.3%" in html
    rows = [SimpleNamespace(kind="dot", gemm_flops=1, conv_flops=0, vector_flops=0)]
    assert "by phase" not in _share(SimpleNamespace(rows=rows), None)


def test_details_parts_and_slowest_ops(small):
    a = analyze(small)
    b = assign_blocks(a)
    text = report_page(a, b, roofline=Roofline(a, get_profile("h100")), top=5)
    keys = re.findall(r'<template data-key="([^"]+)">', text)
    assert keys == [r["attrs"]["data-key"] for r in read_page(text).tables["blocks"]["body"]]
    tpl = re.search(r'<template data-key="spatial_blocks.0">(.*?)</template>', text, re.S).group(1)
    assert "parts of spatial_blocks.0" in tpl and "top 5 of its" in tpl
    ops = tpl.split("top 5 of its", 1)[1]
    lat = [float(v) for v in re.findall(r'<td class="n" data-v="([^"]+)"[^>]*>[^<]*</td><td class="n" data-v="[^"]*"'
                                        r'[^>]*>[^<]*</td><td data-v="(?:compute|memory|free)"', ops)]
    assert len(lat) == 5 and lat == sorted(lat, reverse=True)


def test_other_groupings_are_a_table_page(small, capsys):
    assert main(["report", str(small), "--by", "kind", "--format", "csv", "-q"]) == 0
    head, rows = csv_rows(capsys.readouterr().out)
    page = read_page(page_of(capsys, small, "--by", "kind"))
    ids = [a["id"] for _, a in page.tags if "id" in a]
    assert len(ids) == len(set(ids))
    table = page.tables["table"]
    assert header_names(table) == head and len(table["body"]) + 1 == len(rows) and rows[-1][0] == "TOTAL"


def test_bad_output_is_one_line(small, tmp_path, capsys):
    (tmp_path / "a_file").write_text("")  # a folder that cannot be made (a missing one is made: the output rule)
    out = tmp_path / "a_file" / "r.html"
    assert main(["report", str(small), "--format", "html", "-o", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if "error" in line] == [err.strip().splitlines()[-1]]
    assert err.strip().splitlines()[-1].startswith(f"mhlo-cost: error: {out}: cannot write")


@pytest.mark.slow
def test_stdit3_xl_page_is_a_few_mb(tmp_path, capsys):
    """The reference case at full size, estimated and fused: the page stays small enough to attach."""
    from mhlo_cost.lower.models import stdit3
    from mhlo_cost.lower.models.config import STDiT3Config

    path = tmp_path / "stdit3.mlir"
    path.write_text(stdit3.lower(STDiT3Config().with_shape("204_640_360")).as_text(debug_info=True))
    out = tmp_path / "stdit3.html"
    assert main(["report", str(path), "--hardware", "h100", "--fuse", "elementwise", "--format", "html",
                 "-o", str(out), "-q"]) == 0
    size = out.stat().st_size
    print(f"STDiT3-XL report page: {size:,} bytes")
    assert 100_000 < size < 4_000_000
    assert len(read_page(out.read_text()).tables["blocks"]["body"]) == 62  # 56 blocks and 6 groups


def test_fused_peak_card_equals_the_report(tp4, capsys):
    """With --fuse elementwise the header shows the fused peak beside the unfused one, exact on hover, the
    same integer as ``report --format json`` gives."""
    text = page_of(capsys, tp4, "--fuse", "elementwise")
    assert main(["report", str(tp4), "--fuse", "elementwise", "--format", "json", "-q"]) == 0
    rows = {r["metric"]: r["value"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert "fused peak bytes" in text and f'{rows["peak_bytes_fused"]:,} B' in text
    assert "fused peak bytes" not in page_of(capsys, tp4)
