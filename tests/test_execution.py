"""Execution models (--execution eager|compiled|unfused): the eager kernels are torch's own op calls, the eager
memory peak is MemTracker's, and the option reaches report and refuses what does not go with it."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from mhlo_cost import lower_model  # noqa: E402
from mhlo_cost.analysis import AnalysisOptions, analyze  # noqa: E402
from mhlo_cost.machines.hardware import get_profile  # noqa: E402
from mhlo_cost.roofline import Roofline  # noqa: E402
from helpers import script  # noqa: E402


class Block(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x)), approximate="tanh"))
        return (x + h).to(torch.float16)


class Counter(TorchDispatchMode):
    """The aten calls of a forward that launch a kernel (views and metadata-only calls excluded)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view and func.__name__.split(".")[0] not in ("t", "view", "_unsafe_view", "detach"):
            self.calls.append(func.__name__)
        return out


def _analysis(module, *inputs):
    with torch.device("meta"):
        m = module()
    return analyze(lower_model(m, *inputs, frontend="torchax").text, AnalysisOptions(dataflow=True))


def test_eager_kernels_are_torchs_calls():
    torch.manual_seed(0)
    m = Block()
    x = torch.randn(2, 128, 64)
    with Counter() as c, torch.no_grad():
        m(x)
    rf = Roofline(_analysis(Block, "2x128x64:float32"), get_profile("a100"), execution="eager")
    assert rf.execution == "eager"
    assert len(rf.fusion.kernels) == len(c.calls), c.calls


def test_sdpa_math_costs_more_than_flash():
    """--sdpa chooses the backend of a scaled_dot_product_attention call: flash one kernel, math the kernels of
    PyTorch's math path, which write and read the 1 x 4 x 1024 x 1024 scores."""
    class Att(nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    a = _analysis(Att, *["1x4x1024x64:bfloat16"] * 3)
    hw = get_profile("a100")
    flash, math_ = (Roofline(a, hw, execution="eager", sdpa=s) for s in ("flash", "math"))
    assert [k.attention for k in flash.fusion.kernels if k.backend] == [True]
    assert not any(k.attention for k in math_.fusion.kernels)
    # math writes the scores and the probabilities and reads both: at least 4 x 4 Mi elements of bf16 more
    fbytes = sum(k.bytes_read + k.bytes_written for k in flash.fusion.kernels)
    mbytes = sum(k.bytes_read + k.bytes_written for k in math_.fusion.kernels)
    assert mbytes - fbytes >= 4 * 4 * 1024 * 1024 * 2
    assert math_.fusion.time_s > flash.fusion.time_s


def test_eager_peak_against_memtracker():
    """The eager peak of a two-layer BERT at 1,024 tokens within 10% of torch's MemTracker (FakeTensorMode)."""
    pytest.importorskip("transformers")
    bench = script("benchmarks/eager_memory.py")
    build, dtype, specs, kw, sdpa = bench.spec_of("bert")
    ref = bench.memtracker_peak(build, dtype, specs, kw)
    est = bench.estimated_peaks(build, dtype, specs, kw, sdpa)
    assert abs(est["eager"] / ref - 1) <= 0.10, (est, ref)
    assert est["unfused"] > ref  # every intermediate stored: the figure eager improves on


def test_report_execution_option(tmp_path, capsys):
    from mhlo_cost.cli import main

    p = tmp_path / "b.mlir"
    with torch.device("meta"):
        m = Block()
    p.write_text(lower_model(m, "2x128x64:float32", frontend="torchax").text)
    assert main(["report", str(p), "--hardware", "a100", "--execution", "eager", "--format", "csv", "-q"]) == 0
    out = capsys.readouterr().out
    assert "execution,eager" in out and "est_time_fused_s" in out
    assert main(["report", str(p), "--hardware", "a100", "--fuse", "elementwise", "--format", "csv", "-q"]) == 0
    assert "execution,compiled" in capsys.readouterr().out
    assert main(["report", str(p), "--hardware", "a100", "--execution", "eager", "--fuse", "elementwise", "-q"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("mhlo-cost: error: --fuse elementwise is")
    assert main(["report", str(p), "--hardware", "a100", "--sdpa", "math", "-q"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "mhlo-cost: error: --sdpa goes with --execution eager"
