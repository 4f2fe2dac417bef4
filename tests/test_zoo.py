"""The model zoo: real models from their libraries' own classes, at small sizes, through `mhlo-cost lower`.

Each model is lowered by the command itself (``cli.main(["lower", ...])``, no wrapper), then its counts
are checked against references that are not this code:
* ``gemm_flops + conv_flops`` equals torch's ``FlopCounterMode`` on the same model (meta tensors, eager /
  math attention), exactly; for the flax.nnx model, XLA's ``cost_analysis()`` of the same lowering;
* the blocks found are the model's layers, with unique names, in the model's own terms;
* each block's GEMM equals FlopCounterMode's count for that module, and the per-layer closed form written
  out here for the transformer models.
"""
from __future__ import annotations

import pytest

import importlib.util  # noqa: E402

torch = pytest.importorskip("torch")
_MISSING = [m for m in ("torchax", "transformers", "diffusers", "timm") if importlib.util.find_spec(m) is None]
if _MISSING:  # (find_spec: torchax and timm are imported by mhlo-cost's own shims, not here)
    pytest.skip(f"{', '.join(_MISSING)} not installed (pip install 'mhlo-cost[models]')", allow_module_level=True)

from mhlo_cost import analyze  # noqa: E402
from mhlo_cost.cli import main  # noqa: E402
from mhlo_cost.analysis.collectors import assign_blocks  # noqa: E402
from mhlo_cost.lower.frontends import hub  # noqa: E402
from mhlo_cost.lower.frontends.inputs import parse_input  # noqa: E402

B, T = 2, 16  # batch, tokens of the text models


def _sets(**kw):
    out = []
    for k, v in kw.items():
        out += ["--set", f"{k}={str(v).replace(' ', '') if not isinstance(v, str) else v}"]
    return out


# name: (library, class or model name, --set overrides, positional inputs, keyword inputs, --kwarg values)
LLAMA = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, attn_implementation="eager")
GPT2 = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64, attn_implementation="eager")
BERT = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, vocab_size=256,
            attn_implementation="eager")
T5 = dict(num_layers=2, num_decoder_layers=2, d_model=64, d_ff=128, d_kv=16, num_heads=4, vocab_size=256,
          attn_implementation="eager")
VIT = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, image_size=32,
           patch_size=8, attn_implementation="eager")
DIT = dict(num_layers=2, num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=8,
           sample_size=8, patch_size=2, norm_num_groups=4)
PIXART = dict(DIT, cross_attention_dim=32, caption_channels=24)
LATTE = dict(num_layers=2, num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=8,
             sample_size=8, patch_size=2, cross_attention_dim=32, caption_channels=24, video_length=3,
             norm_type="ada_norm_single")
NO_RES = {"added_cond_kwargs": {"resolution": None, "aspect_ratio": None}}

ZOO = {
    "llama": ("hf", "LlamaForCausalLM", LLAMA, [f"{B}x{T}:int64"], {}, {}),
    "gpt2": ("hf", "GPT2LMHeadModel", GPT2, [f"{B}x{T}:int64"], {}, {}),
    "bert": ("hf", "BertModel", BERT, [f"{B}x{T}:int64"], {"token_type_ids": f"{B}x{T}:int64"}, {}),
    "t5": ("hf", "T5ForConditionalGeneration", T5, [f"{B}x{T}:int64"], {"decoder_input_ids": f"{B}x8:int64"},
           {"use_cache": False}),
    "vit": ("hf", "ViTModel", VIT, [f"{B}x3x32x32"], {}, {}),
    "dit": ("diffusers", "DiTTransformer2DModel", DIT, [f"{B}x4x8x8"],
            {"timestep": f"{B}:int64", "class_labels": f"{B}:int64"}, {}),
    "pixart": ("diffusers", "PixArtTransformer2DModel", PIXART, [f"{B}x4x8x8"],
               {"encoder_hidden_states": f"{B}x6x24", "timestep": f"{B}:int64"}, NO_RES),
    "latte": ("diffusers", "LatteTransformer3DModel", LATTE, [f"{B}x4x3x8x8"],
              {"encoder_hidden_states": f"{B}x6x24", "timestep": f"{B}:int64"}, {}),
    "convnext": ("timm", "convnext_atto", {}, ["1x3x32x32"], {}, {}),
    "resnet18": ("timm", "resnet18", {}, ["1x3x224x224"], {}, {}),
}

#: expected blocks: (count, a few names)
BLOCKS = {
    "llama": (2, ["model/layers.0", "model/layers.1"]),
    "gpt2": (2, ["transformer/h.0", "transformer/h.1"]),
    "bert": (2, ["encoder/layer.0", "encoder/layer.1"]),
    "t5": (4, ["encoder/block.0", "encoder/block.1", "decoder/block.0", "decoder/block.1"]),
    "vit": (2, None),
    "dit": (2, ["transformer_blocks.0", "transformer_blocks.1"]),
    "pixart": (2, ["transformer_blocks.0", "transformer_blocks.1"]),
    "latte": (4, ["transformer_blocks.0", "temporal_transformer_blocks.0", "transformer_blocks.1",
                  "temporal_transformer_blocks.1"]),
    "convnext": (12, ["stages.0/blocks.0", "stages.0/blocks.1", "stages.1/blocks.0", "stages.2/blocks.5",
                      "stages.3/blocks.1"]),
    "resnet18": (8, ["layer1.0", "layer1.1", "layer2.0", "layer2.1", "layer3.0", "layer3.1", "layer4.0", "layer4.1"]),
}


def _argv(key, out):
    lib, name, sets, pos, kw, static = ZOO[key]
    argv = ["lower", f"--{lib}", name, *_sets(**sets), "-o", str(out), "-q"]
    argv += [a for p in pos for a in ("--input", p)]
    argv += [a for k, v in kw.items() for a in ("--input", f"{k}={v}")]
    import json

    argv += [a for k, v in static.items() for a in ("--kwarg", f"{k}={json.dumps(v) if isinstance(v, dict) else v}")]
    return argv


def _meta(spec: str):
    s = parse_input(spec)
    return torch.zeros(s.shape, dtype=getattr(torch, s.dtype or "float32"), device="meta")


def _flop_counter(key):
    """FlopCounterMode on the same model (meta tensors, math attention): total and per-module counts."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    lib, name, sets, pos, kw, static = ZOO[key]
    model = hub.build(lib, name, None, sets).eval()
    with FlopCounterMode(display=False) as fc, sdpa_kernel(SDPBackend.MATH), torch.no_grad():
        model(*[_meta(p) for p in pos], **{k: _meta(v) for k, v in kw.items()}, **static)
    per_module = {k.split(".", 1)[1] if "." in k else "": sum(v.values()) for k, v in fc.get_flop_counts().items()}
    return fc.get_total_flops(), per_module


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """key -> (analysis, blocks, lowering seconds); every model lowered once by `mhlo-cost lower`."""
    import time

    tmp = tmp_path_factory.mktemp("zoo")
    out = {}
    for key in ZOO:
        path = tmp / f"{key}.mlir"
        t0 = time.perf_counter()
        assert main(_argv(key, path)) == 0, key
        seconds = time.perf_counter() - t0
        a = analyze(path, conv_padding="dense")
        out[key] = (a, assign_blocks(a), seconds)
    return out


def _block_gemm(a, blocks, name):
    i = [b.name for b in blocks.blocks].index(name)
    return sum(r.gemm_flops + r.conv_flops for r, ids in zip(a.rows, blocks.row_blocks) if i in ids)


@pytest.mark.parametrize("key", list(ZOO))
def test_zoo_counts_equal_flop_counter(zoo, key):
    a, blocks, _ = zoo[key]
    total, per_module = _flop_counter(key)
    assert a.summary["gemm_flops"] + a.summary["conv_flops"] == total
    count, names = BLOCKS[key]
    found = [b.name for b in blocks.blocks]
    assert blocks.count == count and len(set(found)) == count, found
    if names:
        assert set(names) <= set(found), found
    for name in found:  # each block's GEMM equals the counter's for that module
        assert _block_gemm(a, blocks, name) == per_module[name.replace("/", ".")], name


def _attn_mlp(d, t, mlp, kv=None, t_kv=None):
    """GEMM FLOPs of one attention + MLP layer: q, o on t tokens; k, v (kv wide) on t_kv; QK^T and PV; MLP."""
    kv, t_kv = kv or d, t_kv or t
    proj = 2 * B * t * d * d * 2 + 2 * B * t_kv * d * kv * 2
    return proj + 2 * 2 * B * t * t_kv * d + mlp


def test_zoo_blocks_equal_closed_forms(zoo):
    d = 64
    llama = _attn_mlp(d, T, 3 * 2 * B * T * d * 128, kv=2 * 16)  # GQA: 2 kv heads of 16; gate, up, down
    gpt2 = _attn_mlp(d, T, 2 * 2 * B * T * d * 4 * d)
    bert = _attn_mlp(d, T, 2 * 2 * B * T * d * 128)
    vit = 2 * 2 * B * 17 * d * 128 + _attn_mlp(d, 17, 0)  # (32 / 8)^2 patches + the class token
    t5_enc = _attn_mlp(d, T, 2 * 2 * B * T * d * 128)
    t5_dec = _attn_mlp(d, 8, 2 * 2 * B * 8 * d * 128) + _attn_mlp(d, 8, 0, t_kv=T)  # self, cross, MLP
    expect = {("llama", "model/layers.1"): llama, ("gpt2", "transformer/h.0"): gpt2,
              ("bert", "encoder/layer.1"): bert, ("t5", "encoder/block.1"): t5_enc, ("t5", "decoder/block.1"): t5_dec}
    for (key, name), flops in expect.items():
        a, blocks, _ = zoo[key]
        assert _block_gemm(a, blocks, name) == flops, (key, name)
    a, blocks, _ = zoo["vit"]
    assert [_block_gemm(a, blocks, b.name) for b in blocks.blocks] == [vit, vit]
    # ConvNeXt-atto, stage 2 block: 7x7 depthwise conv (dense: padded positions count) + MLP 4x, on 2x2 pixels
    a, blocks, _ = zoo["convnext"]
    c, px = 160, 2 * 2
    assert _block_gemm(a, blocks, "stages.2/blocks.3") == 2 * px * c * 49 + 2 * 2 * px * c * 4 * c
    # ResNet-18 at 224: the published 1.814 GMAC (dense convention); a layer1 block is two 3x3 64->64 convs on 56x56
    a, blocks, _ = zoo["resnet18"]
    assert a.summary["gemm_flops"] + a.summary["conv_flops"] == 3_628_146_688
    assert round((a.summary["gemm_flops"] + a.summary["conv_flops"]) / 2e9, 3) == 1.814
    assert _block_gemm(a, blocks, "layer1.1") == 2 * (2 * 64 * 64 * 9 * 56 * 56)


def test_zoo_tied_weights_lowered_once(zoo):
    """GPT-2's lm_head is its token embedding (tied): one argument of the lowered function, not two."""
    import re
    from pathlib import Path

    a, _, _ = zoo["gpt2"]
    signature = next(ln for ln in Path(a.source).read_text().splitlines() if "func.func public @main(" in ln)
    names = re.findall(r"loc\(\"state\['([^']+)'\]\"\)", signature)
    assert "transformer.wte.weight" in names and "lm_head.weight" not in names
    model = hub.build("hf", "GPT2LMHeadModel", None, GPT2)
    assert model.lm_head.weight is model.transformer.wte.weight  # tied in the model itself
    assert len(names) == len(dict(model.named_parameters())) + len(dict(model.named_buffers()))
    assert any("lm_head" in r.scope and r.gemm_flops == 2 * B * T * 64 * 256 for r in a.rows)


def test_zoo_report_summary_line(zoo, capsys):
    """The table of the note: model, lowering seconds, ours, FlopCounterMode, difference, blocks."""
    rows = []
    for key, (a, blocks, seconds) in zoo.items():
        ours = a.summary["gemm_flops"] + a.summary["conv_flops"]
        rows.append(f"{key:10s} {seconds:6.2f}s {ours:>12,d} {blocks.count:>3d}/{BLOCKS[key][0]}")
    print("\n".join(rows))
    assert len(rows) == len(ZOO)


NNX_GPT = '''
import jax
import jax.numpy as jnp
from flax import nnx


class Block(nnx.Module):
    def __init__(self, d, h, rngs):
        self.h = h
        self.ln1, self.ln2 = nnx.LayerNorm(d, rngs=rngs), nnx.LayerNorm(d, rngs=rngs)
        self.qkv, self.proj = nnx.Linear(d, 3 * d, rngs=rngs), nnx.Linear(d, d, rngs=rngs)
        self.fc1, self.fc2 = nnx.Linear(d, 4 * d, rngs=rngs), nnx.Linear(4 * d, d, rngs=rngs)

    def __call__(self, x):
        b, t, d = x.shape
        q, k, v = (a.reshape(b, t, self.h, d // self.h) for a in jnp.split(self.qkv(self.ln1(x)), 3, axis=-1))
        att = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k), axis=-1)
        x = x + self.proj(jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, t, d))
        return x + self.fc2(jax.nn.gelu(self.fc1(self.ln2(x))))


class GPT(nnx.Module):
    def __init__(self, vocab=256, d=64, h=4, layers=2):
        rngs = nnx.Rngs(0)
        self.embed = nnx.Embed(vocab, d, rngs=rngs)
        self.blocks = nnx.List([Block(d, h, rngs) for _ in range(layers)])
        self.head = nnx.Linear(d, vocab, rngs=rngs)

    def __call__(self, ids):
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


def make():
    return GPT()
'''


def test_zoo_flax_nnx_module_from_the_current_folder(tmp_path, monkeypatch):
    """A flax.nnx model named as `--module pkg:factory` from the user's folder: built from shapes, its
    submodules as scopes; totals equal XLA's cost_analysis() of the same function."""
    pytest.importorskip("flax")
    import jax

    (tmp_path / "nnxgpt.py").write_text(NNX_GPT)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "nnx.mlir"
    assert main(["lower", "--module", "nnxgpt:make", "--input", f"{B}x{T}:int32", "-o", str(out), "-q"]) == 0
    a = analyze(out)
    blocks = assign_blocks(a)
    assert [b.name for b in blocks.blocks] == ["blocks.0", "blocks.1"]
    import nnxgpt
    from flax import nnx

    graphdef, state = nnx.split(nnx.eval_shape(nnxgpt.make))
    lowered = jax.jit(lambda s, ids: nnx.merge(graphdef, s)(ids)).lower(state, jax.ShapeDtypeStruct((B, T), "int32"))
    xla = lowered.cost_analysis()["flops"]
    s = a.summary  # XLA's flops: every FLOP but the transcendentals, which it counts apart
    assert s["gemm_flops"] + s["vector_flops"] - s["transcendentals"] == int(xla)
    d = 64
    per_block = 2 * B * T * d * 3 * d + 2 * B * T * d * d + 2 * 2 * B * T * T * d + 2 * 2 * B * T * d * 4 * d
    assert [_block_gemm(a, blocks, b.name) for b in blocks.blocks] == [per_block, per_block]
    assert s["gemm_flops"] == 2 * per_block + 2 * B * T * d * 256
