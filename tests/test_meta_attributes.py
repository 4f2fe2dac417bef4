"""Plain tensor attributes of torch modules built on ``meta`` (frontends/attributes.py), and the two diffusers
models of issue 42 that met them or read values: QwenImage (its rotary tables are plain attributes) and
Lumina2 (its sequence lengths come from the attention mask's values).

References are not this code: closed forms written out here, torch's FlopCounterMode on the same model.
"""
from __future__ import annotations

import importlib.util
import json

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("torchax") is None:
    pytest.skip("torchax not installed (pip install 'mhlo-cost[torch]')", allow_module_level=True)

from mhlo_cost import analyze  # noqa: E402
from mhlo_cost.cli import main  # noqa: E402
from mhlo_cost.lower.frontends import attributes  # noqa: E402
from mhlo_cost.lower.frontends.torchax_frontend import lower_module  # noqa: E402


class _Rope(torch.nn.Module):
    """Tables kept as plain attributes: one directly, two in a list; the child shares the first."""

    def __init__(self):
        super().__init__()
        self.table = torch.arange(12.0).reshape(4, 3)
        self.tables = [torch.ones(3, 5), torch.ones(5, 2)]
        self.proj = torch.nn.Linear(2, 2)


class _Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rope = _Rope()
        self.child = torch.nn.Module()
        self.child.alias = self.rope.table  # the same tensor under a second name
        self.kept = torch.ones(2, 2, device="cpu")  # holds data: stays a constant

    def forward(self, x):  # x: (2, 4)
        y = x @ self.rope.table.to(x.device)  # (2, 3): 2*2*4*3
        y = y @ self.rope.tables[0].to(x.device)  # (2, 5): 2*2*3*5
        y = y @ self.rope.tables[1].to(x.device)  # (2, 2): 2*2*5*2
        y = y + x[:, :3] @ self.child.alias.to(x.device)[:3, :2]  # (2, 2): 2*2*3*2
        return self.rope.proj(y) + self.kept.to(x.device)  # 2*2*2*2


def _tiny():
    with torch.device("meta"):
        return _Tiny().eval()


def test_plain_meta_attributes_found_once_with_their_names():
    m = _tiny()
    assert attributes.tensor_attributes(m) == {"rope.table": ["rope.table", "child.alias"],
                                               "rope.tables.0": ["rope.tables.0"], "rope.tables.1": ["rope.tables.1"]}
    specs = attributes.attribute_specs(m)  # one argument per tensor; "kept" holds data, proj's are parameters
    assert {k: tuple(s.shape) for k, s in specs.items()} == {"rope.table": (4, 3), "rope.tables.0": (3, 5),
                                                             "rope.tables.1": (5, 2)}


def test_plain_meta_attributes_lower_as_buffers_and_the_module_is_left_as_it_was(tmp_path):
    m = _tiny()
    before = (m.rope.table, m.rope.tables, m.child.alias)
    low = lower_module(m, [(2, 4)])
    for name in ("rope.table", "rope.tables.0", "rope.tables.1"):
        assert f"buffers['{name}']" in low.text
    assert "child.alias" not in low.text
    assert (m.rope.table, m.rope.tables, m.child.alias) == before and m.rope.table.is_meta
    (tmp_path / "t.mlir").write_text(low.text)
    a = analyze(tmp_path / "t.mlir")
    assert a.summary["gemm_flops"] == 2 * 2 * 4 * 3 + 2 * 2 * 3 * 5 + 2 * 2 * 5 * 2 + 2 * 2 * 3 * 2 + 2 * 2 * 2 * 2
    assert a.summary["params"] == 2 * 2 + 2  # proj only: the tables are buffers


def test_meta_failure_hint_names_what_is_left():
    assert attributes.meta_hint("ValueError: shapes differ") is None
    hint = attributes.meta_hint("Cannot copy out of meta tensor; no data!")
    assert "meta device" in hint and "lists, tuples, dicts" in hint and "global" in hint


# -- diffusers ------------------------------------------------------------------------------------------------

needs_diffusers = pytest.mark.skipif(importlib.util.find_spec("diffusers") is None, reason="diffusers not installed")

QWENIMAGE = dict(patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=16,
                 num_attention_heads=2, joint_attention_dim=24, axes_dims_rope=[4, 6, 6])
TXT = 6  # text tokens


def _sets(cfg):
    return [a for k, v in cfg.items() for a in ("--set", f"{k}={json.dumps(v, separators=(',', ':'))}")]


@needs_diffusers
def test_qwenimage_lowers_and_its_gemm_flops_equal_flop_counter(tmp_path, capsys):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from mhlo_cost.analysis.collectors import assign_blocks
    from mhlo_cost.lower.frontends import hub

    out = tmp_path / "q.mlir"
    argv = ["lower", "--diffusers", "QwenImageTransformer2DModel", *_sets(QWENIMAGE), "-o", str(out), "-q",
            "--input", "1x16x16", "--input", f"encoder_hidden_states=1x{TXT}x24", "--input", "timestep=1",
            "--kwarg", "img_shapes=[[[1,4,4]]]"]
    assert main(argv) == 0, capsys.readouterr().err
    a = analyze(out, conv_padding="dense")
    assert "buffers['pos_embed.pos_freqs']" in out.read_text()

    model = hub.build("diffusers", "QwenImageTransformer2DModel", None, QWENIMAGE).eval()
    meta = dict(device="meta")
    with FlopCounterMode(display=False) as fc, sdpa_kernel(SDPBackend.MATH), torch.no_grad():
        model(torch.zeros(1, 16, 16, **meta), encoder_hidden_states=torch.zeros(1, TXT, 24, **meta),
              timestep=torch.zeros(1, **meta), img_shapes=[[(1, 4, 4)]])
    per_module = {k.split(".", 1)[1] if "." in k else "": sum(v.values()) for k, v in fc.get_flop_counts().items()}
    # The last block's text stream after attention (to_add_out, D x D; txt_mlp, D -> 4D -> D) feeds an output the
    # model drops: eager runs it, the lowered program has no dead code.
    d = 2 * 16
    dead = 2 * TXT * d * d + 2 * (2 * TXT * d * 4 * d)
    assert a.summary["gemm_flops"] + a.summary["conv_flops"] == per_module[""] - dead
    blocks = assign_blocks(a)
    assert [b.name for b in blocks.blocks] == ["transformer_blocks.0", "transformer_blocks.1"]
    first = sum(r.gemm_flops + r.conv_flops for r, ids in zip(a.rows, blocks.row_blocks) if 0 in ids)
    assert first == per_module["transformer_blocks.0"]
    dead_params = (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    assert a.summary["params"] == sum(p.numel() for p in model.parameters()) - dead_params


LUMINA2 = dict(sample_size=8, patch_size=2, in_channels=4, hidden_size=64, num_layers=2, num_refiner_layers=1,
               num_attention_heads=4, num_kv_heads=2, multiple_of=16, axes_dim_rope=[4, 6, 6], axes_lens=[64, 32, 32],
               cap_feat_dim=24)
_HAS_VALUES = importlib.util.find_spec("mhlo_cost.lower.frontends.values") is not None  # lower --input-value
_LUMINA_ARGV = ["lower", "--diffusers", "Lumina2Transformer2DModel", *_sets(LUMINA2), "--input", "1x4x8x8",
                "--input", "timestep=1", "--input", f"encoder_hidden_states=1x{TXT}x24"]


@needs_diffusers
def test_lumina2_mask_by_shape_is_one_line_and_exit_2(tmp_path, capsys):
    """Lumina2 reads ``encoder_attention_mask.sum(dim=1).tolist()``: a mask given by shape has no values."""
    rc = main(_LUMINA_ARGV + ["--input", f"encoder_attention_mask=1x{TXT}:bool", "-o", str(tmp_path / "l.mlir"),
                              "-q"])
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mhlo-cost: error: lowering diffusers:Lumina2Transformer2DModel")
    assert "ConcretizationTypeError" in lines[0] and "Traceback" not in err
    if _HAS_VALUES:  # where inputs can be given by value, the line says so
        assert "--input-value" in lines[0]


@needs_diffusers
@pytest.mark.skipif(not _HAS_VALUES, reason="--input-value (inputs by value) is not in this checkout")
def test_lumina2_lowers_with_the_mask_by_value(tmp_path, capsys):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    import diffusers

    out = tmp_path / "l.mlir"
    mask = [[True] * TXT]
    rc = main(_LUMINA_ARGV + ["--input-value", f"encoder_attention_mask={json.dumps(mask)}:bool", "-o", str(out),
                              "-q"])
    assert rc == 0, capsys.readouterr().err
    a = analyze(out, conv_padding="dense")
    torch.manual_seed(0)
    model = diffusers.Lumina2Transformer2DModel.from_config(LUMINA2).eval()  # .tolist() needs real values
    with FlopCounterMode(display=False) as fc, sdpa_kernel(SDPBackend.MATH), torch.no_grad():
        model(torch.zeros(1, 4, 8, 8), timestep=torch.zeros(1), encoder_hidden_states=torch.zeros(1, TXT, 24),
              encoder_attention_mask=torch.tensor(mask))
    assert a.summary["gemm_flops"] + a.summary["conv_flops"] == fc.get_total_flops()
    assert a.summary["params"] == sum(p.numel() for p in model.parameters())
