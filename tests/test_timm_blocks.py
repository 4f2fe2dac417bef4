"""Blocks as timm names them, and torch's keyword names for the functions torchax implements itself.

* Synthetic scopes: units numbered without a separator (``s1/b1``, ``s1.b1``) are blocks, single layers
  numbered alike (``conv1``, ``fc2``, ``attn1``) are not; a stage whose first unit differs gives way to its
  units (``s3/b1`` with a downsample, ``stages.1.0``).
* RegNetY and NFNet (timm, built at small sizes without weights and lowered by `mhlo-cost lower`): the
  blocks found are the model's own units, counted on its module tree by their class (RegNet's
  ``Bottleneck``, NFNet's ``NormFreeBlock``), each with the GEMM + conv FLOPs torch's FlopCounterMode
  gives that module; ``--blocks stages`` gives the stages.
* EVA-02 (timm calls ``F.linear(x, weight=...)``) lowers and its GEMM + conv FLOPs equal FlopCounterMode's.
* A module calling each renamed function by torch's keyword names lowers, with 2*M*N*K FLOPs for a linear.
"""
from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from mhlo_cost.analysis.collectors.scope import ScopeCollector

# ---------------------------------------------------------------------------------------------------------
# Synthetic scopes
# ---------------------------------------------------------------------------------------------------------


def _row(scope, op="stablehlo.add", gemm=0, shape="4x8"):
    kind = "dot" if op.endswith("dot_general") else "elementwise"
    return SimpleNamespace(op=op, kind=kind, scope=scope, shape=shape, note="", multiplicity=1, gemm_flops=gemm,
                           conv_flops=0, vector_flops=1, transcendentals=0, bytes_read=8, bytes_written=8,
                           comm_bytes=0, operand_shapes="", weight_operands="")


def _unit(path, convs=("conv1", "conv2", "conv3"), extra=()):
    """Rows of a bottleneck-like unit: one product and a norm per layer (``path/conv1/conv``, ``.../bn``)."""
    rows = []
    for c in tuple(convs) + tuple(extra):
        rows += [_row(f"{path}/{c}/conv", "stablehlo.dot_general", gemm=100), _row(f"{path}/{c}/bn")]
    return rows + [_row(f"{path}/act3")]


def _regnet_like(sep="/", depths=(1, 1, 3, 4)):
    rows = [_row("stem/conv", "stablehlo.dot_general", gemm=10)]
    for s, depth in enumerate(depths, 1):
        for b in range(1, depth + 1):
            rows += _unit(f"s{s}{sep}b{b}", extra=("downsample",) if b == 1 else ())
    return rows + [_row("head/fc", "stablehlo.dot_general", gemm=10)]


@pytest.mark.parametrize("sep", ["/", "."])
def test_units_numbered_without_a_separator_are_blocks(sep):
    """RegNet's ``s1/b1`` (``s1.b1`` as a torch module path): one block per unit, not per stage nor per layer;
    the first unit of each stage (with a downsample) counts as one of them."""
    depths = (1, 1, 3, 4)
    blocks = ScopeCollector().collect(_regnet_like(sep, depths))
    want = [f"s{s}{sep}b{b}" for s, d in enumerate(depths, 1) for b in range(1, d + 1)]
    assert [b.name for b in blocks.blocks] == want
    assert {b.kind for b in blocks.blocks} == {"b"}  # one kind in one tower: the stages' indices are indices
    assert [b.index for b in blocks.blocks] == [b for d in depths for b in range(1, d + 1)]
    stages = ScopeCollector(stages=True).collect(_regnet_like(sep, depths))
    assert [b.name for b in stages.blocks] == [f"s{s}" for s in range(1, 5)]


def test_single_layers_numbered_alike_are_no_blocks():
    """``conv1``/``conv2`` (one product each), ``fc1``/``fc2`` (leaves), ``attn1``/``attn2`` inside a block:
    none is a block; the numbered units around them are."""
    rows = [_row("conv1/conv", "stablehlo.dot_general", gemm=10), _row("conv1/bn"),
            _row("conv2/conv", "stablehlo.dot_general", gemm=10), _row("conv2/bn")]
    for i in range(3):
        rows += [_row(f"blocks.{i}/attn{a}/{p}", "stablehlo.dot_general", gemm=100) for a in (1, 2)
                 for p in ("q", "k", "v", "o")]
        rows += [_row(f"blocks.{i}/mlp/fc{f}", "stablehlo.dot_general", gemm=400) for f in (1, 2)]
    blocks = ScopeCollector().collect(rows)
    assert [b.name for b in blocks.blocks] == ["blocks.0", "blocks.1", "blocks.2"]


def test_a_unit_with_one_product_is_no_block():
    """A family of numbered units each holding a single product (``layer1/conv``...) names no blocks."""
    rows = [r for i in range(1, 5) for r in (_row(f"layer{i}/conv", "stablehlo.dot_general", gemm=100),
                                             _row(f"layer{i}/bn"))]
    assert ScopeCollector().collect(rows).count == 0


def test_indexed_children_keep_their_names():
    """``layer1.0`` (ResNet): the blocks stay ``layer1.0`` ..., not the stages ``layer1`` ...."""
    rows = [r for s in range(1, 3) for b in range(3) for r in _unit(f"layer{s}.{b}")]
    blocks = ScopeCollector().collect(rows)
    assert [b.name for b in blocks.blocks] == [f"layer{s}.{b}" for s in range(1, 3) for b in range(3)]


def test_stage_whose_first_unit_differs_gives_way_to_its_units():
    """NFNet's ``stages.1.0`` (a downsample in the first unit of each stage) ... ``stages.1.2``: three blocks
    per stage, where the first unit's products differ from the others'."""
    rows = [r for s in range(2) for b in range(3)
            for r in _unit(f"stages.{s}.{b}", extra=("downsample",) if b == 0 else ())]
    blocks = ScopeCollector().collect(rows)
    assert [b.name for b in blocks.blocks] == [f"stages.{s}.{b}" for s in range(2) for b in range(3)]


def test_two_unlike_units_stay_one_block():
    """T5's ``block.0/layer.0`` (attention) and ``layer.1`` (MLP), numbered or not: the block is the block."""
    for fmt in ("block.{i}/layer.{j}", "block{i}/layer{j}"):
        rows = []
        for i in range(1, 3):
            rows += [_row(fmt.format(i=i, j=0) + f"/{p}", "stablehlo.dot_general", gemm=100)
                     for p in ("q", "k", "v", "o")] + [_row(fmt.format(i=i, j=0) + "/norm")]
            rows += [_row(fmt.format(i=i, j=1) + f"/{p}", "stablehlo.dot_general", gemm=400)
                     for p in ("wi", "wo")] + [_row(fmt.format(i=i, j=1) + "/norm")]
        blocks = ScopeCollector().collect(rows)
        assert [b.name for b in blocks.blocks] == [fmt.format(i=i, j=0).split("/")[0] for i in range(1, 3)]


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


def _per_block(a, blocks) -> dict[str, int]:
    got = {b.name: 0 for b in blocks.blocks}
    for r, ids in zip(a.rows, blocks.row_blocks):
        for i in ids:
            got[blocks.blocks[i].name] += r.gemm_flops + r.conv_flops
    return got


def _unit_class(name):
    import sys

    return {"regnety_002": sys.modules["timm.models.regnet"].Bottleneck,
            "nfnet_f0": sys.modules["timm.models.nfnet"].NormFreeBlock}[name]


@needs_models
@pytest.mark.parametrize("name,size", [("regnety_002", 32), ("nfnet_f0", 32)])
def test_timm_blocks_are_the_models_units(name, size, tmp_path):
    """RegNetY's ``s1/b1`` ... and NFNet's ``stages.1.0`` ...: as many blocks as the model has units (counted
    on its module tree by class), named by their module paths, each with FlopCounterMode's GEMM + conv FLOPs."""
    from mhlo_cost import analyze
    from mhlo_cost.analysis.collectors import assign_blocks

    path = _lower_timm(name, size, tmp_path)
    model = _model(name)
    units = {n for n, m in model.named_modules() if isinstance(m, _unit_class(name))}
    a = analyze(str(path), conv_padding="dense")
    blocks = assign_blocks(a)
    assert blocks.method == "scope"
    assert blocks.count == len(units) and len(units) > 4
    assert {b.name.replace("/", ".") for b in blocks.blocks} == units
    counter = _flop_counter(model, size)
    got = _per_block(a, blocks)
    assert {n: got[n] for n in got} == {n: counter[n.replace("/", ".")] for n in got}


@needs_models
def test_regnet_stages(tmp_path):
    """``--blocks stages``: RegNet's four stages ``s1`` ... ``s4``, each with FlopCounterMode's FLOPs."""
    from mhlo_cost import analyze
    from mhlo_cost.analysis.collectors import assign_blocks

    path = _lower_timm("regnety_002", 32, tmp_path)
    a = analyze(str(path), conv_padding="dense")
    stages = assign_blocks(a, "stages")
    model = _model("regnety_002")
    want = [n for n, _ in model.named_children() if n.startswith("s") and n[1:].isdigit()]
    assert [b.name for b in stages.blocks] == want
    counter = _flop_counter(model, 32)
    assert _per_block(a, stages) == {n: counter[n] for n in want}


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
