"""`mhlo-cost lower` and its library (mhlo_cost.lower.frontends.api): inputs, outputs, user modules, jax.export
artifacts, locations, block names, the convolution convention, the torchvision stand-in, quiet lowering."""
from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from mhlo_cost import analyze
from mhlo_cost.cli import main
from mhlo_cost.analysis.collectors import assign_blocks
from mhlo_cost.lower.frontends import FrontendError
from mhlo_cost.lower.frontends.inputs import TensorSpec, parse_assignments, parse_input, parse_value

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _err_line(capsys) -> str:
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert lines and "Traceback" not in "\n".join(lines)
    return lines[-1]


def test_input_and_value_syntax():
    assert parse_input("attention_mask=2x128:int64") == TensorSpec((2, 128), "int64", "attention_mask")
    assert parse_input("2,3,224,224:bf16") == TensorSpec((2, 3, 224, 224), "bfloat16")
    assert parse_input("t=scalar:i64") == TensorSpec((), "int64", "t")
    assert parse_input("mask=4x4:bool").dtype == "bool" and parse_input("8x8").dtype is None
    for bad in ("2xa", "2x2:complex7", "1bad=2x2", "-1x2"):
        with pytest.raises(FrontendError):
            parse_input(bad)
    assert [parse_value(v) for v in ("false", "True", "none", "3", "2.5", "[2,2,6,2]", "eager")] == \
        [False, True, None, 3, 2.5, [2, 2, 6, 2], "eager"]
    assert parse_assignments(["return_dict=false", "text_config.hidden_size=64"]) == \
        {"return_dict": False, "text_config.hidden_size": 64}
    with pytest.raises(FrontendError):
        parse_assignments(["novalue"])


def test_errors_are_one_line_exit_2(capsys, tmp_path):
    (tmp_path / "a_file").write_text("")
    cases = [
        (["lower"], "name one model"),
        (["lower", "--model", "gpt", "--hf", "GPT2Model"], "exclude each other"),
        (["lower", "--model", "gpt", "--input", "2x3"], "does not apply"),
        (["lower", "--module", "x:y", "--depth", "3"], "bundled models"),
        (["lower", "--module", "no_such_pkg_h13.mod:make", "--input", "2x3"], "cannot load"),
        (["lower", "--model", "gpt", "--dtype", "f7"], "unknown dtype"),
        (["lower", "--model", "gpt", "-o", str(tmp_path / "a_file" / "x.mlir")], "is not a folder"),
    ]
    for argv, text in cases:
        assert main(argv) == 2, argv
        line = _err_line(capsys)
        assert line.startswith("mhlo-cost: error:") and text in line, (argv, line)


USER_TORCH = '''
import dataclasses
import torch


@dataclasses.dataclass
class Out:
    hidden: torch.Tensor
    extra: object = None


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(100, 64)
        self.up = torch.nn.Linear(64, 256)
        self.down = torch.nn.Linear(256, 64)
        self.head = torch.nn.Linear(64, 100, bias=False)
        self.head.weight = self.emb.weight  # tied

    def forward(self, ids, mask=None, scale=1.0, return_dict=True):
        x = self.emb(ids) * scale
        if mask is not None:
            x = x * mask[..., None].to(x.dtype)
        x = self.down(torch.relu(self.up(x)))
        out = {"logits": self.head(x), "none": None, "nested": (Out(x), [x.sum()])}
        return out if return_dict else out["logits"]


def make():
    return Net()
'''


def test_user_torch_module_inputs_kwargs_and_outputs(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    (tmp_path / "usermod_h13.py").write_text(USER_TORCH)
    monkeypatch.chdir(tmp_path)  # found from the current folder, as python -m does
    out = tmp_path / "m.mlir"
    argv = ["lower", "--module", "usermod_h13:make", "--input", "2x16:int64", "--input", "mask=2x16:bool",
            "--kwarg", "scale=2.0", "-o", str(out), "-q"]
    assert main(argv) == 0
    text = out.read_text()
    a = analyze(text)
    assert a.summary["gemm_flops"] == 2 * 32 * (64 * 256 + 256 * 64 + 64 * 100)
    assert "tensor<2x16xi1>" in text.split("func.func public @main(", 1)[1].split("\n", 1)[0]
    assert text.count("tensor<100x64xf32>") >= 1 and "state['head.weight']" not in text  # tied: once
    assert {"up", "down", "head"} <= {r.scope for r in a.rows if r.gemm_flops}


def test_console_script_finds_module_in_current_folder(tmp_path):
    (tmp_path / "userjax_h13.py").write_text(
        "import jax.numpy as jnp\n\ndef make():\n    return lambda x, w: jnp.tanh(x @ w)\n")
    exe = os.path.join(os.path.dirname(sys.executable), "mhlo-cost")
    r = subprocess.run([exe, "lower", "--module", "userjax_h13:make", "--input", "4x8", "--input", "8x16",
                        "-o", "f.mlir"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert analyze(tmp_path / "f.mlir").summary["gemm_flops"] == 2 * 4 * 16 * 8


def test_lower_model_one_call():
    torch = pytest.importorskip("torch")
    from mhlo_cost import lower_model

    with torch.device("meta"):
        net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
    low = lower_model(net, torch.zeros(2, 16, 64, device="meta"))
    assert "stablehlo.dot_general" in low.text
    assert low.analyze().summary["gemm_flops"] == 2 * 32 * 64 * 128 * 2
    assert low.info["frontend"] == "torchax"

    def f(x, *, w, scale=1.0):
        with jax.named_scope("layers.0"):
            return jnp.tanh(x @ w) * scale

    low = lower_model(f, "4x8", w=jax.ShapeDtypeStruct((8, 16), jnp.float32), scale=2.0)
    a = low.analyze()
    assert a.summary["gemm_flops"] == 2 * 4 * 16 * 8 and low.info["frontend"] == "jax"
    assert [b.name for b in assign_blocks(a).blocks] == ["layers.0"]


def _scoped(x, w):
    for part in ("encoder", "decoder"):
        with jax.named_scope(part):
            for i in range(2):
                with jax.named_scope(f"block.{i}"), jax.named_scope("mlp"):
                    x = jnp.tanh(x @ w)
    return x


_ARGS = (jax.ShapeDtypeStruct((4, 8), jnp.float32), jax.ShapeDtypeStruct((8, 8), jnp.float32))


def test_jax_export_artifact_equals_its_text(tmp_path):
    pytest.importorskip("flatbuffers")
    from jax import export

    exp = export.export(jax.jit(_scoped))(*_ARGS)
    (tmp_path / "f.jaxexport").write_bytes(exp.serialize())
    (tmp_path / "f.mlir").write_text(exp.mlir_module())
    a, b = analyze(tmp_path / "f.jaxexport"), analyze(tmp_path / "f.mlir")
    assert a.summary == b.summary and a.summary["gemm_flops"] == 4 * 2 * 4 * 8 * 8
    assert [x.name for x in assign_blocks(a).blocks] == [x.name for x in assign_blocks(b).blocks] == \
        ["encoder/block.0", "encoder/block.1", "decoder/block.0", "decoder/block.1"]
    (tmp_path / "cut.jaxexport").write_bytes(exp.serialize()[:400])
    assert main(["report", str(tmp_path / "cut.jaxexport")]) == 2


def test_near_misses_say_what_is_needed(tmp_path, capsys):
    (tmp_path / "m.hlo").write_text("HloModule jit_f\n\nENTRY main { }\n")
    (tmp_path / "m.pt2").write_bytes(b"PK\x03\x04" + b"\0" * 64)
    for name, text in (("m.hlo", "XLA HLO text"), ("m.pt2", "zip archive")):
        assert main(["report", str(tmp_path / name)]) == 2
        assert text in _err_line(capsys)


def test_no_locations_warns_once_and_falls_back(tmp_path, capsys):
    text = jax.jit(_scoped).lower(*_ARGS).as_text()  # the obvious call: no locations
    (tmp_path / "noloc.mlir").write_text(text)
    assert main(["report", str(tmp_path / "noloc.mlir"), "--by", "block", "-q"]) == 0
    err = capsys.readouterr().err
    assert err.count("no op locations") == 1 and "as_text(debug_info=True)" in err
    assert "0 found" not in err


def test_block_pattern_that_merges_parents_warns(tmp_path, capsys):
    (tmp_path / "s.mlir").write_text(jax.jit(_scoped).lower(*_ARGS).as_text(debug_info=True))
    assert main(["report", str(tmp_path / "s.mlir"), "--by", "block", "--block-pattern", r"block\.\d+", "-q"]) == 0
    err = capsys.readouterr().err
    assert "merges blocks of different parents" in err and "encoder" in err and "decoder" in err
    assert main(["report", str(tmp_path / "s.mlir"), "--by", "block", "--block-pattern", r"\w+/block\.\d+",
                 "-q"]) == 0
    assert "merges" not in capsys.readouterr().err


def test_conv_padding_conventions():
    """3x3 convolution, padding 1, on 8x8: XLA skips the padded positions (its own cost_analysis agrees);
    dense counts every (output, kernel) pair, as PyTorch's FlopCounterMode does."""
    x = jax.ShapeDtypeStruct((2, 3, 8, 8), jnp.float32)
    w = jax.ShapeDtypeStruct((16, 3, 3, 3), jnp.float32)
    lowered = jax.jit(lambda x, w: jax.lax.conv(x, w, (1, 1), "SAME")).lower(x, w)
    text = lowered.as_text()
    valid = 3 * 8 - 2  # (output, kernel) pairs per dimension that land on a real pixel
    assert analyze(text).summary["conv_flops"] == 2 * 2 * 3 * 16 * valid * valid == int(lowered.cost_analysis()["flops"])
    assert analyze(text, conv_padding="dense").summary["conv_flops"] == 2 * 2 * 3 * 16 * 9 * 64
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        torch.nn.functional.conv2d(torch.zeros(2, 3, 8, 8, device="meta"), torch.zeros(16, 3, 3, 3, device="meta"),
                                   padding=1)
    assert fc.get_total_flops() == 2 * 2 * 3 * 16 * 9 * 64


def test_torchvision_standin_for_timm():
    """Without torchvision, timm imports through the stand-in, which is gone afterwards; its
    FrozenBatchNorm2d computes what batch norm with those statistics computes."""
    torch = pytest.importorskip("torch")
    import importlib.util

    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm is not installed")
    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("a torchvision is installed: it is used as it is")
    from mhlo_cost.lower.frontends import _torchvision

    timm = _torchvision.import_timm()
    assert importlib.util.find_spec("torchvision") is None and "torchvision" not in sys.modules
    assert timm.is_model("convnext_atto")
    FrozenBatchNorm2d = sys.modules["timm.layers.norm_act"].FrozenBatchNorm2d
    bn = FrozenBatchNorm2d(4, eps=1e-3)
    bn.weight.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    bn.bias.copy_(torch.tensor([0.5, 0.0, -1.0, 2.0]))
    bn.running_mean.copy_(torch.tensor([0.1, 0.2, 0.3, 0.4]))
    bn.running_var.copy_(torch.tensor([1.0, 4.0, 9.0, 16.0]))
    x = torch.randn(2, 4, 3, 3)
    ref = torch.nn.functional.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0, 1e-3)
    assert torch.allclose(bn(x), ref, atol=1e-6)
    placeholder = getattr(sys.modules["timm.data.transforms"], "InterpolationMode", None)
    if isinstance(placeholder, type) and placeholder.__module__.startswith("torchvision"):
        with pytest.raises(RuntimeError, match="torchvision is not installed"):
            placeholder()


def test_library_warnings_silenced_unless_verbose(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    (tmp_path / "noisy_h13.py").write_text(
        "import warnings, torch\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n"
        "        warnings.warn('noisy library warning h13')\n        return x * 2\n\ndef make():\n    return M()\n")
    monkeypatch.chdir(tmp_path)
    argv = ["lower", "--module", "noisy_h13:make", "--input", "2x2", "-o", "n.mlir", "--force"]
    assert main(argv + ["-q"]) == 0
    assert "noisy library warning" not in capsys.readouterr().err
    with pytest.warns(UserWarning, match="noisy library warning h13"):
        assert main(argv + ["-q", "-v"]) == 0


def test_model_failure_is_one_line_with_a_hint(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    (tmp_path / "usermod2_h13.py").write_text(USER_TORCH)
    monkeypatch.chdir(tmp_path)
    assert main(["lower", "--module", "usermod2_h13:make", "-o", "x.mlir"]) == 2
    line = _err_line(capsys)
    assert "missing" in line and "--input" in line
