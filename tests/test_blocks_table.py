"""The block table: columns, program order, exact totals (equal to the summary), parts, CSV round trip."""
from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from mhlo_cost import analyze
from mhlo_cost.analysis.blocks import ROW_METRICS, TOTAL, block_table, block_totals
from mhlo_cost.analysis.collectors import Block, Blocks, assign_blocks

COLUMNS = ["block", "kind", "index", "gemm_flops", "conv_flops", "vector_flops", "transcendentals",
           "bytes_read", "bytes_written", "comm_bytes", "comm_ops", "ops"]
METRICS = COLUMNS[3:]


@pytest.fixture(scope="module")
def stdit3_small():
    stdit3 = pytest.importorskip("mhlo_cost.lower.models.stdit3")
    from mhlo_cost.lower.models.config import STDiT3Config

    low = stdit3.lower(STDiT3Config().small())
    return analyze(low.as_text(debug_info=True)), analyze(low.as_text())


@pytest.fixture(scope="module")
def gpt_scan():
    gpt = pytest.importorskip("mhlo_cost.lower.models.gpt")
    cfg = gpt.GPTConfig(vocab=64, hidden=32, heads=2, layers=3, seq=16, batch=2, dtype="float32", scan=True)
    return cfg, analyze(gpt.lower(cfg).as_text(debug_info=True))


def summary_of(a) -> dict:
    return {k: v for k, v in a.summary.items() if k in METRICS}


@pytest.mark.parametrize("method", ["scope", "repeat", "rms"])
@pytest.mark.parametrize("parts", [False, True])
def test_total_equals_summary(stdit3_small, method, parts):
    named, bare = stdit3_small
    a = named if method == "scope" else bare
    df = block_table(a, assign_blocks(a, method), parts=parts)
    assert list(df.columns) == (COLUMNS[:3] + ["part"] + COLUMNS[3:] if parts else COLUMNS)
    assert df["block"].iloc[-1] == TOTAL
    assert block_totals(df) == summary_of(a)
    body = df.iloc[:-1]
    for m in METRICS:
        assert df[m].dtype == "int64"
        assert int(body[m].sum()) == a.summary[m]


def test_program_order_and_groups(stdit3_small):
    named, _ = stdit3_small
    df = block_table(named, assign_blocks(named, "scope"))
    assert list(df["block"]) == [
        "x_embedder", "t_embedder", "fps_embedder", "t_block", "y_embedder",
        "spatial_blocks.0", "temporal_blocks.0", "spatial_blocks.1", "temporal_blocks.1",
        "final_layer", TOTAL,
    ]
    assert list(df["kind"][5:9]) == ["spatial", "temporal", "spatial", "temporal"]
    assert df["index"][:5].isna().all() and list(df["index"][5:9]) == [0, 0, 1, 1]


def test_parts_add_up_to_blocks(stdit3_small):
    named, _ = stdit3_small
    blocks = assign_blocks(named, "scope")
    whole = block_table(named, blocks).set_index("block")
    parts = block_table(named, blocks, parts=True)
    summed = parts.groupby("block", sort=False)[METRICS].sum()
    for name in whole.index:
        assert dict(summed.loc[name]) == {m: whole.loc[name, m] for m in METRICS}, name


def test_csv_round_trip(stdit3_small, tmp_path):
    named, _ = stdit3_small
    df = block_table(named, assign_blocks(named, "scope"), parts=True)
    path = tmp_path / "blocks.csv"
    df.to_csv(path, index=False)
    back = pd.read_csv(path)
    assert list(back.columns) == list(df.columns)
    assert list(back["block"]) == list(df["block"])
    total = back[back["block"] == TOTAL].iloc[0]
    assert {m: int(total[m]) for m in METRICS} == summary_of(named)
    for m in METRICS:
        assert int(back[m].iloc[:-1].sum()) == named.summary[m]


def test_scan_rows_split_exactly(gpt_scan):
    cfg, a = gpt_scan
    df = block_table(a, assign_blocks(a, "scope"))
    layers = df[df["kind"] == "layers"]
    assert list(layers["block"]) == [f"layers.{i}" for i in range(cfg.layers)]
    for m in METRICS:
        assert layers[m].nunique() == 1
    assert block_totals(df) == summary_of(a)
    # the loop body's rows (multiplicity n) give each block a third of their ops
    body_ops = sum(r.multiplicity for r in a.rows if r.note.startswith(f"while x{cfg.layers}")
                   and "while/cond" not in r.scope and r.multiplicity % cfg.layers == 0)
    assert int(layers["ops"].sum()) == body_ops


def _fake(vals, mult=3):
    return SimpleNamespace(op="stablehlo.add", kind="elementwise", scope="", shape="4", note="", multiplicity=mult,
                           gemm_flops=vals, conv_flops=0, vector_flops=vals, transcendentals=0, bytes_read=vals,
                           bytes_written=0, comm_bytes=0, operand_shapes="", weight_operands="")


def test_uneven_split_stays_exact_and_big_ints():
    """A row split over 3 blocks whose metric does not divide by 3, and values beyond int64."""
    big = 3 * 2**70 + 2
    rows = [_fake(7), _fake(big), _fake(5, mult=1)]
    a = SimpleNamespace(rows=rows)
    blocks = Blocks("test", [Block(f"b.{i}", "b", i) for i in range(3)], [(0, 1, 2), (0, 1, 2), ()],
                    ["", "", ""], ["", "", "(top)"])
    df = block_table(a, blocks)
    assert list(df["block"]) == ["b.0", "b.1", "b.2", "(top)", TOTAL]
    assert list(df["gemm_flops"][:3]) == [3 + 2**70 + 1, 2 + 2**70 + 1, 2 + 2**70]
    assert df["gemm_flops"].iloc[-1] == 7 + big + 5
    assert list(df["ops"]) == [2, 2, 2, 1, 7]


def test_extra_columns():
    rows = [_fake(6, mult=1), _fake(4, mult=1)]
    blocks = Blocks("test", [Block("b.0", "b", 0)], [(0,), ()], ["x", ""], ["", "head"])
    df = block_table(SimpleNamespace(rows=rows), blocks, extra={"time_s": lambda r: r.gemm_flops / 2.0})
    assert list(df.columns)[-1] == "time_s"
    assert list(df["time_s"]) == [3.0, 2.0, 5.0]
    assert "time_s" not in ROW_METRICS
