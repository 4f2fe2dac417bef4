"""`lower --train` of library models without a wrapper (issue 26, items 2 and 3).

* the backward per block equals torch's FlopCounterMode on the same model and loss (``loss.backward()`` on meta
  tensors; FlopCounterMode splits by module, forward and backward under one counter, minus a forward-only
  count), for transformers' Llama and BERT and timm's ResNet-18 and ConvNeXt-atto;
* the dgrad / wgrad split of a strided convolution, a grouped one, linear layers and attention's batched
  products against closed forms worked out here.
"""
from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
_MISSING = [m for m in ("torchax", "transformers", "timm", "optax") if importlib.util.find_spec(m) is None]
if _MISSING:
    pytest.skip(f"{', '.join(_MISSING)} not installed", allow_module_level=True)

from mhlo_cost.analysis.blocks import add_phase_columns, block_table, training_blocks  # noqa: E402
from mhlo_cost.cli import main  # noqa: E402
from mhlo_cost.analysis.collectors import assign_blocks  # noqa: E402
from mhlo_cost.lower.frontends import hub  # noqa: E402
from mhlo_cost.lower.frontends.api import LowerRequest  # noqa: E402
from mhlo_cost.lower.frontends.inputs import parse_input  # noqa: E402
from mhlo_cost.lower.run import lower_request  # noqa: E402
from mhlo_cost.lower.training import TrainOptions  # noqa: E402
from mhlo_cost.analysis import AnalysisOptions, analyze  # noqa: E402
from mhlo_cost.analysis.training import phase_frame  # noqa: E402

LLAMA = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, attn_implementation="eager")
BERT = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, vocab_size=256,
            attn_implementation="eager")
# name: (library, class or model, --set, positional inputs, keyword inputs, the output the loss reads)
MODELS = {
    "llama": ("hf", "LlamaForCausalLM", LLAMA, ["2x16:int64"], {}, "logits"),
    "bert": ("hf", "BertModel", BERT, ["2x16:int64"], {"token_type_ids": "2x16:int64"}, "last_hidden_state"),
    "resnet18": ("timm", "resnet18", {}, ["1x3x64x64"], {}, "output"),
    "convnext": ("timm", "convnext_atto", {}, ["1x3x64x64"], {}, "output"),
}


def _meta(spec: str):
    s = parse_input(spec)
    return torch.zeros(s.shape, dtype=getattr(torch, s.dtype or "float32"), device="meta")


def _conv_backward_by_groups(grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed,
                             output_padding, groups, output_mask, out_shape, **kw):
    """torch's convolution_backward formula with the weight gradient divided by ``groups``: torch counts a
    grouped convolution's weight gradient as if every input channel met every output channel (``groups`` x
    the work: C x for a depthwise one), its forward and input gradient per group."""
    from torch.utils.flop_counter import conv_backward_flop

    args = (grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed, output_padding, groups)
    dgrad = conv_backward_flop(*args, [output_mask[0], False], out_val=out_shape)  # (torch's, shape-wrapped)
    wgrad = conv_backward_flop(*args, [False, output_mask[1]], out_val=out_shape)
    assert wgrad % groups == 0
    return dgrad + wgrad // groups


def _torch_backward(key) -> dict:
    """Module path -> FlopCounterMode's backward FLOPs ('' : the whole model), mse on the output read."""
    from torch.utils.flop_counter import FlopCounterMode

    lib, name, sets, pos, kw, reads = MODELS[key]
    model = hub.build(lib, name, None, sets).train()
    args, kwargs = [_meta(p) for p in pos], {k: _meta(v) for k, v in kw.items()}
    fix = {torch.ops.aten.convolution_backward: _conv_backward_by_groups}
    with FlopCounterMode(display=False, custom_mapping=fix) as fwd:
        model(*args, **kwargs)
    with FlopCounterMode(display=False, custom_mapping=fix) as both:
        out = model(*args, **kwargs)
        y = out if reads == "output" else out[reads]
        (y.float() ** 2).mean().backward()
    f, b = fwd.get_flop_counts(), both.get_flop_counts()
    return {k.split(".", 1)[1] if "." in k else "": sum(b[k].values()) - sum(f.get(k, {}).values()) for k in b}


def _ours(key, tmp_path):
    lib, name, sets, pos, kw, _ = MODELS[key]
    path = tmp_path / f"{key}.mlir"
    argv = ["lower", f"--{lib}", name, "--train", "-q", "-o", str(path)]
    argv += [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    argv += [a for p in pos for a in ("--input", p)] + [a for k, v in kw.items() for a in ("--input", f"{k}={v}")]
    assert main(argv) == 0
    a = analyze(str(path), AnalysisOptions(conv_padding="dense", phases=True))
    blocks = training_blocks(assign_blocks(a), a.phases)
    return a, add_phase_columns(block_table(a, blocks), a, blocks, a.phases).set_index("block")


@pytest.mark.parametrize("key", list(MODELS))
def test_backward_per_block_equals_flop_counter(key, tmp_path):
    ref = _torch_backward(key)
    a, df = _ours(key, tmp_path)
    bwd = {b: int(r["bwd_gemm_flops"]) + int(r.get("bwd_conv_flops", 0)) for b, r in df.iterrows()}
    blocks = [b for b in df.index if df.loc[b, "kind"]]
    assert len(blocks) >= 2
    for b in blocks:
        assert bwd[b] == ref[b.replace("/", ".")], b
    assert bwd["TOTAL"] == ref[""] > 0
    phases = phase_frame(a, a.phases).set_index("phase")
    assert sum(int(phases.loc[k, "gemm_flops"]) + int(phases.loc[k, "conv_flops"])
               for k in ("backward/dgrad", "backward/wgrad") if k in phases.index) == ref[""]


def test_loss_reads_the_model_output(tmp_path):
    """ModelOutput: the loss reads the logits (else last_hidden_state); typed and keyword inputs kept."""
    for key in ("llama", "bert"):
        lib, name, sets, pos, kw, reads = MODELS[key]
        req = LowerRequest(library=lib, name=name, overrides=sets, inputs=tuple(parse_input(p) for p in pos),
                           input_kwargs={k: parse_input(v) for k, v in kw.items()}, train=TrainOptions(loss="xent"))
        low = lower_request(req)
        assert low.info["loss_reads"] == reads and low.info["frontend"] == "torchax"
        assert "tensor<2x16xi32>" in low.text  # the token ids stay integers


# -- dgrad / wgrad against closed forms --------------------------------------------------------------------------
B, C, H = 2, 8, 16  # batch, channels, image side


class Convs(torch.nn.Module):
    """conv a (3x3, stride 1, pad 1), then b (3x3, stride 2, pad 1), then c (3x3, groups 4, pad 1)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, C, 3, padding=1, bias=False)
        self.b = torch.nn.Conv2d(C, 2 * C, 3, stride=2, padding=1, bias=False)
        self.c = torch.nn.Conv2d(2 * C, 2 * C, 3, padding=1, groups=4, bias=False)

    def forward(self, x):
        return self.c(self.b(self.a(x)))


class Attention(torch.nn.Module):
    """x -> q, k, v (linear) -> softmax(q k^T) v -> out (linear); one head of width D over T tokens."""

    def __init__(self, d):
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d, bias=False) for _ in range(4))

    def forward(self, x):
        s = torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2), dim=-1)
        return self.o(s @ self.v(x))


def _split(module, *inputs, padding="dense"):
    with torch.device("meta"):
        module = module()
    low = lower_request(LowerRequest(module=module, inputs=inputs, train=TrainOptions()))
    a = analyze(low.text, AnalysisOptions(conv_padding=padding, phases=True))
    df = phase_frame(a, a.phases).set_index("phase")
    return {k: int(df.loc[k, "gemm_flops"]) + int(df.loc[k, "conv_flops"]) if k in df.index else 0
            for k in ("forward", "backward/dgrad", "backward/wgrad")}


def test_conv_dgrad_wgrad_closed_form():
    """Dense convention (PyTorch's): a conv costs 2 x B x out positions x kernel x C_in/groups x C_out, its dgrad
    the same (the transposed conv: every input element x kernel element, padding and stride aside), its wgrad
    the same. The first conv's input needs no gradient: it has a wgrad only."""
    def conv(c_in, c_out, side, groups=1):
        return 2 * B * side * side * 9 * (c_in // groups) * c_out

    a, b, c = conv(3, C, H), conv(C, 2 * C, H // 2), conv(2 * C, 2 * C, H // 2, groups=4)
    got = _split(Convs, f"{B}x3x{H}x{H}")
    assert got == {"forward": a + b + c, "backward/dgrad": b + c, "backward/wgrad": a + b + c}


def test_conv_dgrad_xla_padding_counts_real_elements():
    """XLA's convention: a tap on padding costs nothing, in the dgrad as in the forward. Conv b (3x3, stride 2,
    pad 1, 16 -> 8): of its 8 outputs per axis, output 0's first tap reads padding: 8 x 3 - 1 = 23 taps per
    axis; its dgrad reads the same (input, tap) pairs: 23 x 23 per channel pair, like the forward."""
    got = _split(Convs, f"{B}x3x{H}x{H}", padding="xla")
    side = lambda n: n * 3 - 2  # noqa: E731 - stride 1, pad 1: both ends lose a tap
    a = 2 * B * side(H) ** 2 * 3 * C
    b = 2 * B * 23 * 23 * C * 2 * C
    c = 2 * B * side(H // 2) ** 2 * (2 * C // 4) * 2 * C
    assert got == {"forward": a + b + c, "backward/dgrad": b + c, "backward/wgrad": a + b + c}


def test_linear_and_attention_dgrad_wgrad_closed_form():
    """Linear layers: dgrad and wgrad each cost the forward (2 x tokens x D x D), but the input's projections
    (q, k, v read the model's input, which needs no gradient) have no dgrad. Attention's two batched products
    (q k^T and s v, 2 x T x T x D each per batch) multiply activations: both of their backward products are
    dgrads, none a wgrad."""
    t, d = 16, 32
    lin, att = 2 * B * t * d * d, 2 * B * t * t * d
    got = _split(lambda: Attention(d), f"{B}x{t}x{d}")
    assert got["forward"] == 4 * lin + 2 * att
    assert got["backward/wgrad"] == 4 * lin
    assert got["backward/dgrad"] == lin + 2 * 2 * att  # o; q k^T and s v twice each (q, k, v: none)


def test_torch_factory_without_frontend(tmp_path, monkeypatch, capsys):
    """A --module factory of a torch module lowers its step with torchax without --frontend."""
    (tmp_path / "mlp_factory.py").write_text(
        "import torch\n\ndef make():\n    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), "
        "torch.nn.Linear(16, 4))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "step.mlir"
    assert main(["lower", "--module", "mlp_factory:make", "--input", "2x8", "--train", "-q", "-o", str(out)]) == 0
    df = phase_frame(analyze(str(out), AnalysisOptions(phases=True))).set_index("phase")
    assert int(df.loc["backward/wgrad", "gemm_flops"]) == 2 * 2 * 8 * 16 + 2 * 2 * 16 * 4
    assert int(df.loc["backward/dgrad", "gemm_flops"]) == 2 * 2 * 16 * 4
    rc = main(["lower", "--module", "mlp_factory:make", "--input", "2x8", "--train", "--frontend", "jax", "-q",
               "-o", str(out)])
    assert rc == 2 and "with torchax, not jax" in capsys.readouterr().err


def test_transposed_conv_dense_equals_flop_counter():
    """A transposed convolution (lhs dilation in the IR) under the dense convention: every (input element,
    kernel element) pair, as FlopCounterMode counts it: 2 x B x 8 x 8 x 4 x 4 x C_in x C_out."""
    from torch.utils.flop_counter import FlopCounterMode

    from mhlo_cost import analyze
    from mhlo_cost.lower.frontends.api import lower_model

    with torch.device("meta"):
        up = torch.nn.ConvTranspose2d(C, 4, 4, stride=2, padding=1, bias=False)
    x = torch.zeros(B, C, 8, 8, device="meta")
    with FlopCounterMode(display=False) as fc:
        up(x)
    ours = analyze(lower_model(up, x).text, conv_padding="dense").summary["conv_flops"]
    assert ours == fc.get_total_flops() == 2 * B * 8 * 8 * 4 * 4 * C * 4
