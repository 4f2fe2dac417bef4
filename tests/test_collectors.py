"""Block attribution: scope, repeat and rms collectors on a GPT (unrolled and scanned), the small STDiT3
(with and without locations), torch-style module paths, and synthetic rows.

Expected GEMM FLOPs are closed forms written here from the architectures (2*M*N*K per matmul).
"""
from __future__ import annotations

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest

from mhlo_cost import analyze
from mhlo_cost.analysis.blocks import block_table
from mhlo_cost.analysis.collectors import Blocks, assign_blocks, index_of, kind_of
from mhlo_cost.analysis.collectors.repeat import RepeatCollector
from mhlo_cost.analysis.collectors.scope import ScopeCollector


def per_block(df, column="gemm_flops") -> dict:
    blocks = df[(df["kind"] != "") & df["kind"].notna() & (df["block"] != "TOTAL")]
    return dict(zip(blocks["block"], (int(v) for v in blocks[column])))


# ---------------------------------------------------------------------------------------------------------
# GPT
# ---------------------------------------------------------------------------------------------------------

gpt = pytest.importorskip("mhlo_cost.lower.models.gpt")
GPT = dict(vocab=64, hidden=32, heads=2, layers=3, seq=16, batch=2, dtype="float32")


def gpt_layer_gemm(batch, seq, hidden, mlp_ratio=4) -> dict:
    m = batch * seq
    attn = 2 * m * hidden * 3 * hidden + 2 * m * hidden * hidden + 2 * (2 * batch * seq * seq * hidden)
    mlp = 2 * (2 * m * hidden * mlp_ratio * hidden)
    return {"attn": attn, "mlp": mlp, "layer": attn + mlp}


@pytest.fixture(scope="module", params=[False, True], ids=["unrolled", "scan"])
def gpt_lowered(request):
    cfg = gpt.GPTConfig(scan=request.param, **GPT)
    low = gpt.lower(cfg)
    return cfg, analyze(low.as_text(debug_info=True)), analyze(low.as_text())


def test_gpt_scope_blocks(gpt_lowered):
    cfg, named, _ = gpt_lowered
    blocks = assign_blocks(named, "scope")
    assert blocks.method == "scope"
    assert blocks.count == cfg.layers
    assert [b.name for b in blocks.blocks] == [f"layers.{i}" for i in range(cfg.layers)]
    assert {b.kind for b in blocks.blocks} == {"layers"}
    df = block_table(named, blocks)
    expect = gpt_layer_gemm(cfg.batch, cfg.seq, cfg.hidden)
    assert per_block(df) == {f"layers.{i}": expect["layer"] for i in range(cfg.layers)}
    assert list(df["block"]) == ["embed", *( ["while"] if cfg.scan else []),
                                 *[f"layers.{i}" for i in range(cfg.layers)], "ln_f", "lm_head", "TOTAL"]
    parts = block_table(named, blocks, parts=True)
    p0 = parts[parts["block"] == "layers.0"]
    got = dict(zip(p0["part"], p0["gemm_flops"]))
    assert got["attn"] == expect["attn"] and got["mlp"] == expect["mlp"]
    assert got["ln1"] == 0 and got["ln2"] == 0


def test_gpt_scan_rows_are_split(gpt_lowered):
    cfg, named, _ = gpt_lowered
    blocks = assign_blocks(named, "scope")
    split = [ids for ids in blocks.row_blocks if len(ids) > 1]
    if not cfg.scan:
        assert not split
        return
    assert split and all(len(ids) == cfg.layers for ids in split)
    df = block_table(named, blocks)
    # every block gets exactly 1/n of every metric of the loop body
    layer_rows = df[df["kind"] == "layers"]
    for col in ("gemm_flops", "vector_flops", "bytes_read", "bytes_written", "ops"):
        assert layer_rows[col].nunique() == 1, col


@pytest.mark.parametrize("method", ["repeat", "rms", "auto"])
def test_gpt_without_locations(gpt_lowered, method):
    cfg, _, bare = gpt_lowered
    blocks = assign_blocks(bare, method)
    assert blocks.count == cfg.layers
    if method == "auto":
        assert blocks.method == "repeat"
    expect = gpt_layer_gemm(cfg.batch, cfg.seq, cfg.hidden)
    df = block_table(bare, blocks)
    assert list(per_block(df).values()) == [expect["layer"]] * cfg.layers
    parts = block_table(bare, blocks, parts=True)
    p0 = parts[parts["block"] == blocks.blocks[0].name]
    got = dict(zip(p0["part"], p0["gemm_flops"]))
    assert got["attention"] == expect["attn"] and got["mlp"] == expect["mlp"]


# ---------------------------------------------------------------------------------------------------------
# STDiT3 (small): 2 spatial + 2 temporal blocks
# ---------------------------------------------------------------------------------------------------------


def stdit3_block_gemm(cfg) -> dict:
    """GEMM FLOPs of one spatial / temporal block of STDiT3 (dense cross-attention as OpenSora runs it)."""
    b, c, lc = cfg.batch, cfg.hidden, cfg.caption_tokens
    t = -(-cfg.latent_t // cfg.patch[0])
    s = -(-cfg.latent_h // cfg.patch[1]) * -(-cfg.latent_w // cfg.patch[2])
    m = b * t * s
    self_linear = 2 * m * c * 3 * c + 2 * m * c * c
    spatial_core = 2 * (2 * (b * t) * s * s * c)
    temporal_core = 2 * (2 * (b * s) * t * t * c)
    cross = 2 * m * c * c + 2 * (b * lc) * c * 2 * c + 2 * (2 * m * (b * lc) * c) + 2 * m * c * c
    mlp = 2 * (2 * m * c * int(c * cfg.mlp_ratio))
    return {
        "spatial": self_linear + spatial_core + cross + mlp,
        "temporal": self_linear + temporal_core + cross + mlp,
        "spatial_attn": self_linear + spatial_core,
        "temporal_attn": self_linear + temporal_core,
        "cross_attn": cross,
        "mlp": mlp,
    }


@pytest.fixture(scope="module")
def stdit3_small():
    stdit3 = pytest.importorskip("mhlo_cost.lower.models.stdit3")
    from mhlo_cost.lower.models.config import STDiT3Config

    cfg = STDiT3Config().small()
    low = stdit3.lower(cfg)
    return cfg, analyze(low.as_text(debug_info=True)), analyze(low.as_text())


def test_stdit3_scope(stdit3_small):
    cfg, named, _ = stdit3_small
    blocks = assign_blocks(named)  # auto
    assert blocks.method == "scope"
    names = [f"{k}_blocks.{i}" for i in range(cfg.depth) for k in ("spatial", "temporal")]
    assert [b.name for b in blocks.blocks] == names
    assert blocks.kinds() == {"spatial": cfg.depth, "temporal": cfg.depth}
    assert "2 spatial" in blocks.describe() and "4" in blocks.describe()
    g = stdit3_block_gemm(cfg)
    df = block_table(named, blocks)
    assert per_block(df) == {n: g[n.split("_")[0]] for n in names}
    assert list(df["block"][:5]) == ["x_embedder", "t_embedder", "fps_embedder", "t_block", "y_embedder"]
    assert list(df["block"][-2:]) == ["final_layer", "TOTAL"]
    assert list(df["index"][5:9]) == [0, 0, 1, 1]
    parts = block_table(named, blocks, parts=True)
    for name, attn in (("spatial_blocks.1", g["spatial_attn"]), ("temporal_blocks.0", g["temporal_attn"])):
        p = parts[parts["block"] == name]
        got = dict(zip(p["part"], p["gemm_flops"]))
        assert got["attn"] == attn and got["cross_attn"] == g["cross_attn"] and got["mlp"] == g["mlp"]
        assert {"norm1", "norm2", "modulate"} <= set(got)


@pytest.mark.parametrize("method", ["repeat", "rms", "auto"])
def test_stdit3_without_locations(stdit3_small, method):
    cfg, named, bare = stdit3_small
    blocks = assign_blocks(bare, method)
    assert blocks.method == ("repeat" if method == "auto" else method)
    assert blocks.count == 2 * cfg.depth
    assert [b.kind for b in blocks.blocks] == ["A", "B"] * cfg.depth
    assert [b.name for b in blocks.blocks][:2] == ["block_a.0", "block_b.0"]
    g = stdit3_block_gemm(cfg)
    df = block_table(bare, blocks)
    assert list(per_block(df).values()) == [g["spatial"], g["temporal"]] * cfg.depth
    parts = block_table(bare, blocks, parts=True)
    for name, attn in (("block_a.0", g["spatial_attn"]), ("block_b.1", g["temporal_attn"])):
        p = parts[parts["block"] == name]
        got = dict(zip(p["part"], p["gemm_flops"]))
        assert got == {"attention": attn, "cross_attention": g["cross_attn"], "mlp": g["mlp"]}


def test_stdit3_repeat_matches_scope_exactly(stdit3_small):
    """Without names, repeat cuts the blocks where the scopes do: every metric of every block agrees."""
    _, named, bare = stdit3_small
    by_scope = block_table(named, assign_blocks(named, "scope"))
    by_repeat = block_table(bare, assign_blocks(bare, "repeat"))
    cols = ["gemm_flops", "vector_flops", "transcendentals", "bytes_read", "bytes_written", "ops"]
    a = by_scope[by_scope["kind"].isin(["spatial", "temporal"])][cols].reset_index(drop=True)
    b = by_repeat[by_repeat["kind"].isin(["A", "B"])][cols].reset_index(drop=True)
    assert a.equals(b)


def test_stdit3_norms_per_block_given(stdit3_small):
    cfg, _, bare = stdit3_small
    blocks = assign_blocks(bare, "rms", norms_per_block=4)  # norm1, q_norm, k_norm, norm2
    assert blocks.count == 2 * cfg.depth


def test_block_pattern_overrides(stdit3_small):
    cfg, named, _ = stdit3_small
    blocks = assign_blocks(named, pattern=r"(spatial_blocks\.\d+)")
    assert blocks.method == "scope"
    assert [b.name for b in blocks.blocks] == [f"spatial_blocks.{i}" for i in range(cfg.depth)]
    df = block_table(named, blocks)
    assert "temporal_blocks" in set(df["block"])  # the temporal blocks are now a group outside blocks
    parts = block_table(named, blocks, parts=True)
    assert {"attn", "cross_attn", "mlp"} <= set(parts[parts["block"] == "spatial_blocks.0"]["part"])


# ---------------------------------------------------------------------------------------------------------
# Torch module paths
# ---------------------------------------------------------------------------------------------------------


def _torch_path_model(dotted_single: bool):
    """Two layers with torch-style names: ``layers.{i}.attn.qkv`` as one scope, or nested scopes."""

    def f(x, w_qkv, w_fc1, w_head):
        with jax.named_scope("embed"):
            x = x * 2.0
        for i in range(2):
            if dotted_single:
                with jax.named_scope(f"layers.{i}.attn.qkv"):
                    x = x + jnp.dot(x, w_qkv)[:, :8]
                with jax.named_scope(f"layers.{i}.mlp.fc1"):
                    x = jnp.tanh(jnp.dot(x, w_fc1))
            else:
                with jax.named_scope(f"layers.{i}"), jax.named_scope("attn"), jax.named_scope("qkv"):
                    x = x + jnp.dot(x, w_qkv)[:, :8]
                with jax.named_scope(f"layers.{i}"), jax.named_scope("mlp"), jax.named_scope("fc1"):
                    x = jnp.tanh(jnp.dot(x, w_fc1))
        with jax.named_scope("lm_head"):
            return jnp.dot(x, w_head)

    s = jax.ShapeDtypeStruct
    f32 = jnp.float32
    low = jax.jit(f).lower(s((4, 8), f32), s((8, 24), f32), s((8, 8), f32), s((8, 16), f32))
    return analyze(low.as_text(debug_info=True))


@pytest.mark.parametrize("dotted_single", [True, False], ids=["layers.0.attn.qkv", "layers.0/attn/qkv"])
def test_torch_module_paths(dotted_single):
    a = _torch_path_model(dotted_single)
    blocks = assign_blocks(a, "scope")
    assert [b.name for b in blocks.blocks] == ["layers.0", "layers.1"]
    df = block_table(a, blocks, parts=True)
    l1 = df[df["block"] == "layers.1"]
    got = dict(zip(l1["part"], l1["gemm_flops"]))
    assert got["attn"] == 2 * 4 * 8 * 24 and got["mlp"] == 2 * 4 * 8 * 8
    assert list(df["block"]) == ["embed", "layers.0", "layers.0", "layers.1", "layers.1", "lm_head", "TOTAL"]


_T = "tensor<4x8xf32>"
_DOT = f"contracting_dims = [1] x [0] : ({_T}, tensor<8x8xf32>) -> {_T}"
TORCH_MLIR = f"""
module @m {{
  func.func @main(%x: {_T}, %wq: tensor<8x8xf32>, %wf: tensor<8x8xf32>) -> {_T} {{
    %e = stablehlo.add %x, %x : {_T} loc("embed.tok")
    %q0 = stablehlo.dot_general %e, %wq, {_DOT} loc("layers.0.attn.qkv")
    %f0 = stablehlo.dot_general %q0, %wf, {_DOT} loc("layers.0.mlp.fc1")
    %t0 = stablehlo.tanh %f0 : {_T} loc("layers.0.mlp.act")
    %q1 = stablehlo.dot_general %t0, %wq, {_DOT} loc("layers.1.attn.qkv")
    %f1 = stablehlo.dot_general %q1, %wf, {_DOT} loc("layers.1.mlp.fc1")
    %o = stablehlo.multiply %f1, %f1 : {_T} loc("norm.mul")
    return %o : {_T}
  }}
}}
"""


def test_torch_location_names_fixture():
    """Hand-written MLIR whose locations are bare module paths, ``loc("layers.0.attn.qkv")``."""
    a = analyze(TORCH_MLIR)
    blocks = assign_blocks(a, "scope")
    assert [b.name for b in blocks.blocks] == ["layers.0", "layers.1"]
    assert [b.kind for b in blocks.blocks] == ["layers", "layers"]
    df = block_table(a, blocks, parts=True)
    l0 = df[df["block"] == "layers.0"]
    assert dict(zip(l0["part"], l0["gemm_flops"])) == {"attn": 2 * 4 * 8 * 8, "mlp": 2 * 4 * 8 * 8}
    assert dict(zip(l0["part"], l0["ops"])) == {"attn": 1, "mlp": 2}
    assert list(df["block"]) == ["embed", "layers.0", "layers.0", "layers.1", "layers.1", "norm", "TOTAL"]


# ---------------------------------------------------------------------------------------------------------
# Synthetic rows: patterns, names that are no blocks, speed
# ---------------------------------------------------------------------------------------------------------


def fake_row(scope="", op="stablehlo.add", shape="4x8", gemm=0, vector=1, mult=1, note="", operands=""):
    kind = "dot" if op.endswith("dot_general") else "elementwise"
    return SimpleNamespace(op=op, kind=kind, scope=scope, shape=shape, note=note, multiplicity=mult,
                           gemm_flops=gemm, conv_flops=0, vector_flops=vector, transcendentals=0, bytes_read=8,
                           bytes_written=8, comm_bytes=0, operand_shapes=operands, weight_operands="", operands=())


def scoped_rows(scopes):
    rows = []
    for s in scopes:
        rows.append(fake_row(s, "stablehlo.dot_general", gemm=100))
        rows.append(fake_row(s))
    return rows


@pytest.mark.parametrize("fmt,kind", [
    ("spatial_blocks.{i}", "spatial"), ("blocks_{i}", "blocks"), ("layers[{i}]", "layers"),
    ("layers/{i}", "layers"), ("h.{i}", "h"), ("model.layers.{i}", "layers"), ("Transformer_0/Block_{i}", "Block"),
])
def test_default_patterns(fmt, kind):
    scopes = ["embed"] + [fmt.format(i=i) + f"/{p}" for i in range(3) for p in ("attn", "mlp")] + ["head"]
    blocks = ScopeCollector().collect(scoped_rows(scopes))
    assert blocks.count == 3
    assert [b.kind for b in blocks.blocks] == [kind] * 3
    assert [b.index for b in blocks.blocks] == [0, 1, 2]
    assert blocks.row_parts[2] == "attn" and blocks.row_parts[4] == "mlp"
    assert blocks.row_groups[0] == "embed" and blocks.row_blocks[0] == ()


def test_numbers_inside_names_are_no_blocks():
    scopes = ["conv2d", "fc1", "fc2", "stage2/conv3d", "Dense_0", "Dense_1", "embed/mlp/0", "embed/mlp/2",
              "layers.0/attn", "layers.1/attn"] + [f"layers.{i}/mlp" for i in range(2)] * 20
    blocks = ScopeCollector().collect(scoped_rows(scopes))
    assert [b.name for b in blocks.blocks] == ["layers.0", "layers.1"]


def test_kind_and_index_of_names():
    assert kind_of("spatial_blocks.3") == "spatial"
    assert kind_of("temporal_blocks.0") == "temporal"
    assert kind_of("layers.2") == "layers"
    assert kind_of("h.11") == "h"
    assert kind_of("blocks_3") == "blocks"
    assert index_of("layers[2]") == ("layers", 2)
    assert index_of("layers/0") == ("layers", 0)
    assert index_of("model.layers.7") == ("model.layers", 7)


def test_unscoped_rows_follow_their_neighbours():
    rows = scoped_rows(["layers.0/attn"]) + [fake_row("")] + scoped_rows(["layers.0/attn", "layers.1/mlp"])
    rows += [fake_row("")] + scoped_rows(["head"])
    blocks = ScopeCollector().collect(rows)
    assert blocks.row_blocks[2] == (0,) and blocks.row_parts[2] == "attn"
    assert blocks.row_blocks[7] == ()  # between layers.1 and head: outside
    assert blocks.row_groups[7] == "head"


def test_repeat_is_fast_on_35k_rows():
    """300 blocks of 120 ops with two alternating kinds: found in well under a few seconds."""
    def block(kind):
        seq = 16 if kind == "A" else 4
        rows = []
        for j in range(12):
            rows.append(fake_row(op="stablehlo.dot_general", shape=f"2x{seq}x{64 + j}", gemm=1000,
                                 operands=f"f32[2,{seq},64] f32[64,{64 + j}]"))
            rows.extend(fake_row(op=f"stablehlo.op{k}", shape=f"2x{seq}x64") for k in range(9))
        return rows
    rows = [fake_row(op="stablehlo.embed")] * 7
    for _ in range(150):
        rows += block("A") + block("B")
    rows += [fake_row(op="stablehlo.head")] * 5
    assert len(rows) > 35_000
    blocks = RepeatCollector().collect(rows)  # (how fast: benchmarks/, not a unit test's wall clock)
    assert blocks.count == 300
    assert blocks.kinds() == {"A": 150, "B": 150}


def test_blocks_type_and_unknown_method(stdit3_small):
    _, named, _ = stdit3_small
    b = assign_blocks(named, "scope")
    assert isinstance(b, Blocks) and len(b.row_blocks) == len(named.rows)
    with pytest.raises(ValueError):
        assign_blocks(named, "nope")


def test_nested_loop_inside_scanned_layers():
    """scan over 3 layers whose attention holds a 4-step loop: 3 blocks, inner loop rows split with them."""
    def row(scope, mult, note, op="stablehlo.add", gemm=0):
        r = fake_row(scope, op, gemm=gemm * mult, vector=mult, mult=mult, note=note)
        r.bytes_read = r.bytes_written = 8 * mult
        return r
    rows = [row("embed", 1, "")]
    rows += [row("while/cond", 4, "while x3"), row("while/cond", 4, "while x3")]
    rows += [row("while/body", 3, "while x3"),
             row("while/body/layers/attn", 3, "while x3", "stablehlo.dot_general", gemm=10),
             row("while/body/layers/attn/while/cond", 15, "while x3; while x4"),
             row("while/body/layers/attn/while/body", 12, "while x3; while x4", "stablehlo.dot_general", gemm=5),
             row("while/body/layers/mlp", 3, "while x3", "stablehlo.dot_general", gemm=20)]
    rows += [row("head", 1, "")]
    blocks = ScopeCollector().collect(rows)
    assert [b.name for b in blocks.blocks] == ["layers.0", "layers.1", "layers.2"]
    assert blocks.row_blocks[1] == () and blocks.row_groups[1] == "while"
    assert all(blocks.row_blocks[i] == (0, 1, 2) for i in range(3, 8))
    assert blocks.row_parts[3:8] == ["", "attn", "attn", "attn", "mlp"]
    df = block_table(SimpleNamespace(rows=rows), blocks)
    assert list(per_block(df).values()) == [10 + 4 * 5 + 20] * 3
    # without names the positional collectors split the same loop into block.0 .. block.2
    for r in rows:
        r.scope = ""
    bare = RepeatCollector().collect(rows)
    assert [b.name for b in bare.blocks] == ["block.0", "block.1", "block.2"]


def test_repeat_finds_two_regions():
    """An encoder (3 blocks) then a decoder (2 blocks) of different shapes: two regions, kinds A and B."""
    def block(width, n_ops):
        rows = []
        for j in range(3):
            rows.append(fake_row(op="stablehlo.dot_general", shape=f"8x{width + j}", gemm=1000,
                                 operands=f"f32[8,{width}] f32[{width},{width + j}]"))
            rows.extend(fake_row(op=f"stablehlo.op{k}", shape=f"8x{width}") for k in range(n_ops))
        return rows
    rows = [fake_row(op="stablehlo.embed")] + block(16, 5) * 3 + [fake_row(op="stablehlo.mid")] + block(32, 7) * 2
    blocks = RepeatCollector().collect(rows)
    assert [b.name for b in blocks.blocks] == ["block_a.0", "block_a.1", "block_a.2", "block_b.0", "block_b.1"]
