"""Blocks as the model names them, on small JAX programs written here: a kind carries its tower where one
kind of block lives in several (``encoder/layers``, ``decoder/layers``), and the default finds the finest
repeated unit that carries weights (blocks, not the stages that hold them), ``--blocks stages`` the stages."""
import jax
import jax.numpy as jnp

from mhlo_cost import analyze
from mhlo_cost.analysis.blocks import block_table
from mhlo_cost.cli import main
from mhlo_cost.analysis.collectors import Block, Blocks, assign_blocks, kind_of
from mhlo_cost.analysis.collectors.towers import tower_of, with_towers

F32 = jnp.float32
N, D = 8, 16  # rows, width
GEMM = 2 * N * D * D  # one (N, D) @ (D, D)


def _towers(x, w):
    """CLIP-like: two towers whose layers have the same module name under different parents."""
    for tower, depth in (("text_model", 3), ("vision_model", 2)):
        with jax.named_scope(tower), jax.named_scope("encoder"):
            for i in range(depth):
                with jax.named_scope(f"layers.{i}"), jax.named_scope("mlp"):
                    x = jnp.tanh(x @ w)
    return x


def _stages(x, w):
    """Swin/EfficientNet-like: stages of blocks that differ in more than shapes (every second block shifts
    its input, as Swin's shifted windows do) but run the same matrix products; a downsample per stage."""
    for s in range(3):
        with jax.named_scope(f"layers.{s}"):
            with jax.named_scope("downsample"):
                x = x * 0.5
            for b in range(2):
                with jax.named_scope(f"blocks.{b}"):
                    if b % 2:
                        x = jnp.roll(x, 1, axis=0)
                    with jax.named_scope("attn"):
                        x = jnp.tanh(x @ w)
                    with jax.named_scope("mlp"):
                        x = jnp.tanh(x @ w)
    return x


def _t5_like(x, w):
    """T5's block.i/layer.0 (two products) and layer.1 (one): unlike units, so block.i stays the block."""
    for i in range(2):
        with jax.named_scope(f"block.{i}"):
            with jax.named_scope("layer.0"):
                x = jnp.tanh(x @ w) @ w
            with jax.named_scope("layer.1"):
                x = jnp.tanh(x @ w)
    return x


def _analysis(f):
    args = (jax.ShapeDtypeStruct((N, D), F32), jax.ShapeDtypeStruct((D, D), F32))
    return analyze(jax.jit(f).lower(*args).as_text(debug_info=True))


def _gemm(a, blocks):
    """Each block's GEMM FLOPs, by block name."""
    out = {b.name: 0 for b in blocks.blocks}
    for r, ids in zip(a.rows, blocks.row_blocks):
        for i in ids:
            out[blocks.blocks[i].name] += r.gemm_flops
    return out


def test_two_towers_get_two_kinds():
    a = _analysis(_towers)
    blocks = assign_blocks(a)
    assert [b.name for b in blocks.blocks] == [f"text_model/encoder/layers.{i}" for i in range(3)] + \
        [f"vision_model/encoder/layers.{i}" for i in range(2)]
    assert blocks.kinds() == {"text_model/encoder/layers": 3, "vision_model/encoder/layers": 2}
    assert [b.index for b in blocks.blocks] == [0, 1, 2, 0, 1]
    assert set(_gemm(a, blocks).values()) == {GEMM}
    df = block_table(a, blocks)
    assert list(df["kind"][:5]) == ["text_model/encoder/layers"] * 3 + ["vision_model/encoder/layers"] * 2


def test_finest_repeated_unit_is_the_block_and_stages_an_option():
    a = _analysis(_stages)
    blocks = assign_blocks(a)
    assert [b.name for b in blocks.blocks] == [f"layers.{s}/blocks.{b}" for s in range(3) for b in range(2)]
    assert blocks.kinds() == {"blocks": 6}  # one tower: the short kind
    assert set(_gemm(a, blocks).values()) == {2 * GEMM}
    stages = assign_blocks(a, "stages")
    assert stages.method == "stages" and [b.name for b in stages.blocks] == ["layers.0", "layers.1", "layers.2"]
    assert set(_gemm(a, stages).values()) == {4 * GEMM}
    assert sum(_gemm(a, stages).values()) == sum(_gemm(a, blocks).values()) == a.summary["gemm_flops"]


def test_unlike_inner_units_stay_one_block():
    a = _analysis(_t5_like)
    blocks = assign_blocks(a)
    assert [b.name for b in blocks.blocks] == ["block.0", "block.1"]
    assert set(_gemm(a, blocks).values()) == {3 * GEMM}


def test_blocks_stages_on_the_command_line(tmp_path, capsys):
    path = tmp_path / "stages.mlir"
    args = (jax.ShapeDtypeStruct((N, D), F32), jax.ShapeDtypeStruct((D, D), F32))
    path.write_text(jax.jit(_stages).lower(*args).as_text(debug_info=True))
    out = tmp_path / "b.csv"
    assert main(["blocks", str(path), "--blocks", "stages", "-o", str(out)]) == 0
    assert "blocks by stages: 3 found" in capsys.readouterr().err
    assert _block_rows(out) == [("layers.0", "layers"), ("layers.1", "layers"), ("layers.2", "layers")]
    assert main(["blocks", str(path), "-o", str(out)]) == 0
    assert _block_rows(out) == [(f"layers.{s}/blocks.{b}", "blocks") for s in range(3) for b in range(2)]


def _block_rows(csv_path):
    import csv

    with open(csv_path, newline="") as fh:
        return [(r["block"], r["kind"]) for r in csv.DictReader(fh) if r["kind"]]


def test_kinds_and_towers_of_names():
    assert kind_of("blocks.2.1") == "blocks" and kind_of("layers.0/blocks.1") == "blocks"
    assert kind_of("conv_1.0") == "conv_1" and kind_of("spatial_blocks.3") == "spatial"
    assert tower_of("model/encoder/layers.3") == ("model", "encoder")
    assert tower_of("stages.1/blocks.2") == ("stages",) and tower_of("blocks.2.1") == ()
    one = [Block(f"stages.{s}/blocks.{b}", "blocks", b) for s in range(2) for b in range(2)]
    two = [Block(f"model/{t}/layers.{i}", "layers", i) for t in ("encoder", "decoder") for i in range(2)]
    same = [Block(f"{p}spatial_blocks.0", "spatial", 0) for p in ("", "")] + [Block("temporal_blocks.0", "temporal", 0)]

    def kinds(bl):
        return [b.kind for b in with_towers(Blocks("scope", bl, [], [], [])).blocks]
    assert kinds(one) == ["blocks"] * 4
    assert kinds(two) == ["encoder/layers"] * 2 + ["decoder/layers"] * 2
    assert kinds(same) == ["spatial", "spatial", "temporal"]
