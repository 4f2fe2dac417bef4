"""``lower --amp``: a torch module's forward as CUDA autocast runs it (mhlo_cost/lower/frontends/autocast.py; issue
35, the timm rows). The expectations are closed forms worked out here from torch's autocast rules (the CUDA op lists
of ATen/autocast_mode.h; autocast_mode.cpp's cached_cast: a cast kernel reads the source and writes the cast, a
parameter's cast to the autocast dtype cached for the region), never the code under test."""
from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")

from mhlo_cost.analysis import AnalysisOptions, analyze  # noqa: E402
from mhlo_cost.lower.frontends import FrontendError  # noqa: E402
from mhlo_cost.lower.frontends.api import LowerRequest, lower_request  # noqa: E402
from mhlo_cost.lower.frontends.autocast import CAST_SCOPE, policy  # noqa: E402

B, D = 8, 64  # tokens, width


class MLPNorm(torch.nn.Module):
    """fc1 -> LayerNorm -> fc2 -> fc1 again (a parameter used twice: its cast is cached)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(D, D)
        self.norm = torch.nn.LayerNorm(D)
        self.fc2 = torch.nn.Linear(D, D)

    def forward(self, x):
        return self.fc1(self.fc2(self.norm(self.fc1(x))))


class Scores(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(D, D)

    def forward(self, x):
        return torch.softmax(self.proj(x), dim=-1)


@functools.lru_cache(maxsize=None)  # each program lowered once for the tests that read it
def _analysis(module, amp="float16", dtype="float32", shape=f"{B}x{D}"):
    with torch.device("meta"):
        m = module()
    text = lower_request(LowerRequest(module=m, inputs=(f"{shape}:{dtype}",), amp=amp)).text
    return analyze(text, AnalysisOptions(dataflow=True))


N, C, H = 2, 16, 8  # images, channels, side


class ConvBN(torch.nn.Module):
    """conv (with bias) -> batch norm -> relu -> 1x1 conv (with bias), as a ResNet or ConvNeXt stage calls them."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, C, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(C)
        self.conv2 = torch.nn.Conv2d(C, C, 1)

    def forward(self, x):
        return self.conv2(torch.relu(self.bn(self.conv1(x))))


def _casts(a):
    return [r for r in a.rows if r.scope.split("/")[-1] == CAST_SCOPE]


def _ints(a, rows):
    return sum(r.bytes_read + r.bytes_written for r in rows)


def test_the_casts_of_a_two_layer_mlp_with_layernorm_are_autocasts():
    a = _analysis(MLPNorm)
    casts = _casts(a)
    # fc1: x (fp32 input) and fc1's weight and bias to fp16; norm: fc1's fp16 output to fp32 (LayerNorm is on
    # autocast's fp32 list; its fp32 weight and bias are not cast); fc2: the fp32 norm output, fc2's weight and
    # bias to fp16; fc1 again: its fp16 input is not cast, its weight and bias come from the cache.
    f32, f16 = 4, 2
    expected = (B * D * (f32 + f16) + D * D * (f32 + f16) + D * (f32 + f16)  # fc1
                + B * D * (f16 + f32)  # norm
                + B * D * (f32 + f16) + D * D * (f32 + f16) + D * (f32 + f16))  # fc2
    assert len(casts) == 7
    assert _ints(a, casts) == expected
    assert all(r.op.endswith("convert") for r in casts)
    scopes = sorted({r.scope.rsplit("/", 1)[0] for r in casts})
    assert scopes == ["fc1", "fc2", "norm"]


def test_layernorm_runs_and_returns_fp32_and_the_matmuls_fp16():
    a = _analysis(MLPNorm)
    dots = [r for r in a.rows if r.op.endswith("dot_general")]
    assert len(dots) == 3 and all(r.result.dtype == "f16" for r in dots)
    norm = [r for r in a.rows if r.scope == "norm" and hasattr(r.result, "dtype") and r.result.nelems == B * D]
    assert norm and all(r.result.dtype == "f32" for r in norm)


def test_eager_prices_each_cast_as_a_kernel_of_its_own():
    from mhlo_cost.machines.hardware import get_profile
    from mhlo_cost.roofline.eager import eager

    a = _analysis(MLPNorm)
    rows = a.rows
    cast_rows = {i for i, r in enumerate(rows) if r.scope.split("/")[-1] == CAST_SCOPE}
    fusion = eager(a, get_profile("a100"))
    kernels = [k for k in fusion.kernels if set(k.members) & cast_rows]
    assert all(set(k.members) <= cast_rows for k in kernels)  # no cast inside the kernel of the op it feeds
    assert sum(k.bytes_read + k.bytes_written for k in kernels) == _ints(a, [rows[i] for i in cast_rows])


def test_softmax_computes_in_fp32_inside_its_own_call():
    a = _analysis(Scores)
    out = [r for r in a.rows if r.op.endswith("divide") and r.result.nelems == B * D]
    assert out and out[-1].result.dtype == "f32"  # fp32_set_opt_dtype: the output is fp32
    # the casts are proj's input, weight and bias only: softmax converts inside its own kernel
    assert _ints(a, _casts(a)) == (B * D + D * D + D) * (4 + 2)


def test_without_amp_nothing_is_cast():
    a = _analysis(MLPNorm, amp=None)
    assert not _casts(a)
    assert not any(r.op.endswith("convert") and r.result.nelems > 1 for r in a.rows)


def test_an_fp16_input_is_not_cast_again():
    a = _analysis(MLPNorm, dtype="float16")
    f32, f16 = 4, 2
    weights = 2 * (D * D + D) * (f32 + f16)
    assert _ints(a, _casts(a)) == weights + 2 * B * D * (f16 + f32)  # norm's input up, fc2's input down


@pytest.mark.parametrize("func, expected", [
    (torch.nn.functional.linear, "lower_precision_fp"), (torch.ops.aten.addmm.default, "lower_precision_fp"),
    (torch.nn.functional.scaled_dot_product_attention, "lower_precision_fp"),
    (torch.ops.aten.native_layer_norm.default, "fp32"), (torch.Tensor.__matmul__, "lower_precision_fp"),
    (torch.softmax, "fp32_set_opt_dtype"), (torch.ops.aten.gelu.default, None), (torch.ops.aten.add.Tensor, None),
    (torch.ops.aten.native_batch_norm.default, None)])
def test_the_cuda_lists(func, expected):
    assert policy(func) == expected


def test_amp_is_refused_where_it_cannot_apply():
    with pytest.raises(FrontendError, match="autocast"):
        lower_request(LowerRequest(model="stdit3", amp="float16"))
    with torch.device("meta"):
        m = MLPNorm()
    with pytest.raises(FrontendError, match="float16 or bfloat16"):
        lower_request(LowerRequest(module=m, inputs=(f"{B}x{D}:float32",), amp="float64"))


def test_the_command_line_refuses_amp_with_a_bundled_model(capsys):
    from mhlo_cost.cli import main

    assert main(["lower", "--model", "stdit3", "--small", "--amp", "float16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error:") and "--amp" in err[0]


def test_a_conv_net_casts_its_input_and_weights_and_batch_norm_keeps_half():
    a = _analysis(ConvBN, shape=f"{N}x3x{H}x{H}")
    f32, f16 = 4, 2
    conv1 = (N * 3 * H * H + C * 3 * 3 * 3 + C) * (f32 + f16)  # the fp32 image, weight and bias to fp16
    conv2 = (C * C + C) * (f32 + f16)  # its input is batch norm's fp16 output: only the parameters
    assert _ints(a, _casts(a)) == conv1 + conv2
    convs = [r for r in a.rows if r.op.endswith("convolution")]
    assert len(convs) == 2 and all(r.result.dtype == "f16" for r in convs)
    relu = [r for r in a.rows if r.op.endswith("maximum") and r.result.nelems == N * C * H * H]
    assert relu and relu[0].result.dtype == "f16"  # batch norm of a half input returns half
