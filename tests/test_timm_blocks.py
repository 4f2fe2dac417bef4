"""torch's keyword names for the functions torchax implements itself under other parameter names.

* EVA-02 (timm calls ``F.linear(x, weight=...)``) lowers and its GEMM + conv FLOPs equal FlopCounterMode's.
* A module calling each renamed function by torch's keyword names lowers, with 2*M*N*K FLOPs for a linear.
"""
from __future__ import annotations

import importlib.util

import pytest

# ---------------------------------------------------------------------------------------------------------
# Real models: timm and torchax
# ---------------------------------------------------------------------------------------------------------

torch = pytest.importorskip("torch")
_MISSING = [m for m in ("torchax", "timm") if importlib.util.find_spec(m) is None]
needs_models = pytest.mark.skipif(bool(_MISSING), reason=f"{', '.join(_MISSING)} not installed")


def _lower_timm(name, size, tmp_path, *extra):
    from mhlo_cost.cli import main

    out = tmp_path / f"{name}.mlir"
    rc = main(["lower", "--timm", name, "--input", f"1x3x{size}x{size}", "-o", str(out), "-q", *extra])
    assert rc == 0
    return out


def _model(name, sets=None):
    from mhlo_cost.lower.frontends import hub

    return hub.build("timm", name, None, sets or {}).eval()


def _flop_counter(model, size) -> dict[str, int]:
    """FlopCounterMode per module path ("" the whole model), meta tensors."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(torch.zeros(1, 3, size, size, device="meta"))
    return {k.split(".", 1)[1] if "." in k else "": sum(v.values()) for k, v in fc.get_flop_counts().items()}


@needs_models
def test_eva02_lowers_with_flopcounter_flops(tmp_path):
    """EVA-02 calls ``F.linear(x, weight=..., bias=...)``: it lowers, and its GEMM + conv FLOPs (two blocks,
    56 x 56 pixels) equal FlopCounterMode's on the same module."""
    from mhlo_cost import analyze

    sets = ["--set", "img_size=56", "--set", "depth=2"]
    path = _lower_timm("eva02_tiny_patch14_224", 56, tmp_path, *sets)
    a = analyze(str(path), conv_padding="dense")
    counter = _flop_counter(_model("eva02_tiny_patch14_224", {"img_size": 56, "depth": 2}), 56)
    assert a.summary["gemm_flops"] > 0
    assert a.summary["gemm_flops"] + a.summary["conv_flops"] == counter[""]


# ---------------------------------------------------------------------------------------------------------
# torch's keyword names for torchax's own implementations
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def env():
    if importlib.util.find_spec("torchax") is None:
        pytest.skip("torchax not installed")
    from mhlo_cost.lower.frontends._torch_shim import import_torchax

    return import_torchax().default_env()


def test_gaps_listed(env):
    """torch's ``F.linear(input, weight, bias)`` and ``F.pad(input, pad, ...)`` (their documented names) are
    among the functions torchax names otherwise."""
    from mhlo_cost.lower.frontends._torch_shim import keyword_gaps

    gaps = dict(keyword_gaps(env))
    linear = next(v for k, v in gaps.items() if k.endswith(".linear"))
    assert set(linear) == {"input", "weight"}
    pad = next(v for k, v in gaps.items() if k.endswith("functional.pad"))
    assert set(pad) == {"input"}


def test_renames_keep_names_both_sides_use():
    """A rename never takes a name the other side uses for another parameter (``dim`` stays ``dim``)."""
    import inspect

    from mhlo_cost.lower.frontends._torch_shim import renamed_keywords

    def torch_side(input, dim=None):  # noqa: A002
        pass

    def torchax_side(self, repeats, dim=None):
        pass

    assert renamed_keywords(inspect.signature(torch_side), inspect.signature(torchax_side)) == {"input": "self"}


def _analyze_text(text, tmp_path):
    from mhlo_cost import analyze

    p = tmp_path / "m.mlir"
    p.write_text(text)
    return analyze(str(p))


F = torch.nn.functional


@needs_models
@pytest.mark.parametrize("linear", [
    lambda x, w, b: F.linear(x, weight=w, bias=b),
    lambda x, w, b: F.linear(input=x, weight=w, bias=b),
    lambda x, w, b: F.linear(x, w, bias=b),
], ids=["weight=", "input=", "positional"])
def test_linear_by_torch_keywords(linear, tmp_path):
    """``F.linear`` called with torch's keyword names lowers, with 2 x M x N x K GEMM FLOPs."""
    from mhlo_cost.lower.frontends.torchax_frontend import lower_module

    M, K, N = 6, 8, 5

    class Linear(torch.nn.Module):
        def forward(self, x, w, b):
            return linear(x, w, b)

    a = _analyze_text(lower_module(Linear(), [(M, K), (N, K), (N,)]).text, tmp_path)
    assert a.summary["gemm_flops"] == 2 * M * N * K


@needs_models
@pytest.mark.parametrize("name,fn,shapes,out", [
    ("pad", lambda x: F.pad(input=x, pad=(1, 2)), [(3, 4)], (3, 7)),
    ("corrcoef", lambda x: torch.corrcoef(input=x), [(3, 4)], (3, 3)),
    ("matrix_power", lambda x: torch.linalg.matrix_power(input=x, n=2), [(4, 4)], (4, 4)),
    ("solve", lambda a, b: torch.linalg.solve(A=a, B=b), [(4, 4), (4, 2)], (4, 2)),
    ("svd", lambda x: torch.svd(input=x)[1], [(4, 3)], (3,)),
    ("linalg_svd", lambda x: torch.linalg.svd(A=x, full_matrices=False)[1], [(4, 3)], (3,)),
    ("det", lambda x: torch.linalg.det(A=x), [(4, 4)], ()),
    ("tensorsolve", lambda a, b: torch.linalg.tensorsolve(input=a, other=b), [(4, 4), (4,)], (4,)),
    ("one_hot", lambda x: F.one_hot(input=x.long(), num_classes=3), [((4,), "int32")], (4, 3)),
    ("tensor_split", lambda x: torch.tensor_split(x, sections=2)[0], [(4, 4)], (2, 4)),
])
def test_functions_by_torch_keywords(name, fn, shapes, out):
    """Each renamed function called with torch's keyword names lowers, to a result of the right shape."""
    import re

    from mhlo_cost.lower.frontends.torchax_frontend import lower_module

    class Call(torch.nn.Module):
        def forward(self, *xs):
            return fn(*xs)

    text = lower_module(Call(), shapes).text
    want = "".join(f"{d}x" for d in out) + ("i32" if name == "one_hot" else "f32")
    result = re.search(r"func\.func public @main\(.*?\)\s*->\s*\(?([^{\n]*)", text).group(1)
    assert f"tensor<{want}>" in result, (name, result)
