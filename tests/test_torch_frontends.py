"""STDiT3 as a torch.nn.Module, lowered through torchax (and torch-xla when its venv exists).

The GEMM FLOPs of the torch lowerings must be the JAX lowering's, integer for integer, in total and per
block; vector FLOPs agree to within a few percent (the op decompositions differ a little).
"""
from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("torchax") is None:
    pytest.skip("torchax is not installed (pip install 'mhlo-cost[torch]')", allow_module_level=True)
# torchax 0.0.13 does not import as such on torch 2.13: the frontend's shim does it.
from mhlo_cost.lower.frontends._torch_shim import import_torchax  # noqa: E402

import_torchax()

from mhlo_cost import analyze  # noqa: E402
from mhlo_cost.lower.frontends import torchax_frontend as tf  # noqa: E402
from mhlo_cost.lower.models import stdit3_torch as st  # noqa: E402
from mhlo_cost.lower.models.config import STDiT3Config  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from stdit3_formula import gemm_flops  # noqa: E402
from helpers import script  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FULL_GEMM_204_640_360 = 260977523687424


def _small():
    return STDiT3Config().small()


def _block_sums(analysis, column: str) -> dict[str, int]:
    """column summed by the first scope segment (``spatial_blocks.1``, ``y_embedder``, ...)."""
    ops = analysis.ops
    top = ops.scope.str.split("/").str[0].str.replace(r"^t_block\.\d+$", "t_block", regex=True)  # a Sequential
    return {k: int(v) for k, v in ops.groupby(top)[column].sum().items()}


@pytest.fixture(scope="module")
def small_torchax_text() -> str:
    return tf.lower("stdit3", _small()).text


@pytest.fixture(scope="module")
def small_jax_text() -> str:
    from mhlo_cost.lower.frontends import jax_frontend

    return jax_frontend.lower("stdit3", _small()).text


# --------------------------------------------------------------------------------------------------------
# The module itself
# --------------------------------------------------------------------------------------------------------


def test_small_forward_runs_on_real_weights():
    cfg = _small()
    model = st.build(cfg, "cpu", seed=0)
    with torch.no_grad():
        out = model(*st.example_inputs(cfg))
    assert out.shape == (cfg.batch, cfg.out_channels, cfg.latent_t, cfg.latent_h, cfg.latent_w)
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()


def test_module_names_follow_opensora():
    names = {n for n, _ in st.build(_small()).named_modules()}
    for n in ("x_embedder", "t_embedder", "fps_embedder", "t_block", "y_embedder", "final_layer",
              "spatial_blocks.0.attn.qkv", "spatial_blocks.0.attn.proj", "spatial_blocks.0.attn.q_norm",
              "spatial_blocks.0.attn.k_norm", "temporal_blocks.1.cross_attn.q_linear",
              "temporal_blocks.1.cross_attn.kv_linear", "temporal_blocks.1.cross_attn.proj",
              "spatial_blocks.1.mlp.fc1", "spatial_blocks.1.mlp.fc2", "spatial_blocks.1.norm1",
              "spatial_blocks.1.norm2"):
        assert n in names, n


def test_cross_attention_is_block_diagonal():
    """Each sample's video tokens see only its own caption: changing sample 1's caption leaves sample 0."""
    cfg = _small()
    model = st.build(cfg, "cpu", seed=1)
    x, t, y, fps = st.example_inputs(cfg, seed=1)
    y2 = y.clone()
    y2[1] = torch.randn_like(y2[1])
    with torch.no_grad():
        a, b = model(x, t, y, fps), model(x, t, y2, fps)
    assert torch.allclose(a[0], b[0], atol=1e-5)
    assert not torch.allclose(a[1], b[1], atol=1e-3)


def test_meta_build_allocates_nothing():
    model = st.build(STDiT3Config())
    p = next(model.parameters())
    assert p.device.type == "meta" and p.dtype == torch.bfloat16
    assert sum(q.numel() for q in model.parameters()) > 1_000_000_000


# --------------------------------------------------------------------------------------------------------
# torchax lowering
# --------------------------------------------------------------------------------------------------------


def test_torchax_text_parses(small_torchax_text):
    from jax._src.interpreters import mlir
    from jaxlib.mlir import ir

    ctx = mlir.make_ir_context()
    module = ir.Module.parse(small_torchax_text, context=ctx)
    assert "stablehlo.dot_general" in str(module)


def test_torchax_locations_carry_module_paths(small_torchax_text):
    a = analyze(small_torchax_text)
    scopes = set(a.ops.scope)
    for s in ("spatial_blocks.0/attn/qkv", "temporal_blocks.1/attn/proj", "spatial_blocks.1/cross_attn/kv_linear",
              "temporal_blocks.0/mlp/fc2", "y_embedder/y_proj/fc1", "t_block.1", "final_layer/linear"):  # t_block: a Sequential
        assert s in scopes, s
    assert not any("aten" in s for s in scopes)  # torchax's per-op scopes are muted by default


def test_torchax_gemm_equals_formula_and_jax(small_torchax_text, small_jax_text):
    cfg = _small()
    at, aj = analyze(small_torchax_text), analyze(small_jax_text)
    assert at.summary["gemm_flops"] == aj.summary["gemm_flops"] == gemm_flops(cfg)["total"]
    assert at.summary["conv_flops"] == aj.summary["conv_flops"]
    bt, bj = _block_sums(at, "gemm_flops"), _block_sums(aj, "gemm_flops")
    f = gemm_flops(cfg)
    for i in range(cfg.depth):
        assert bt[f"spatial_blocks.{i}"] == bj[f"spatial_blocks.{i}"] == f["spatial_block"]
        assert bt[f"temporal_blocks.{i}"] == bj[f"temporal_blocks.{i}"] == f["temporal_block"]
    for name in ("y_embedder", "t_embedder", "fps_embedder", "t_block", "final_layer"):
        assert bt[name] == bj[name] == f[name], name


def test_torchax_vector_flops_close_to_jax(small_torchax_text, small_jax_text):
    at, aj = analyze(small_torchax_text), analyze(small_jax_text)
    assert at.summary["unknown_ops"] == 0
    assert at.summary["transcendentals"] == aj.summary["transcendentals"]
    assert math.isclose(at.summary["vector_flops"], aj.summary["vector_flops"], rel_tol=0.02)
    bt, bj = _block_sums(at, "vector_flops"), _block_sums(aj, "vector_flops")
    for i in range(_small().depth):
        for kind in ("spatial_blocks", "temporal_blocks"):
            k = f"{kind}.{i}"
            assert math.isclose(bt[k], bj[k], rel_tol=0.02), (k, bt[k], bj[k])


def test_torchax_unit_alpha_folded():
    """torchax writes add/sub as x + y*alpha; the frontend drops the multiply by one (5% of vector FLOPs
    on the small model) unless fold_alpha=False."""
    cfg = _small()
    module, specs = tf._stdit3(cfg)
    folded = analyze(tf.lower_jax(module, specs).as_text(debug_info=True)).summary["vector_flops"]
    raw = analyze(tf.lower_jax(module, specs, fold_alpha=False).as_text(debug_info=True)).summary["vector_flops"]
    assert raw > folded * 1.02


def test_torchax_no_locations():
    text = tf.lower("stdit3", _small(), locations=False).text
    assert "spatial_blocks.0/attn" not in text


def test_lower_module_user_module():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(64, 256)
            self.down = torch.nn.Linear(256, 64)

        def forward(self, x):
            pos = torch.arange(x.shape[1]).to(x.dtype)  # created without a device: must become a JAX value
            return self.down(torch.relu(self.up(x))) + pos[:, None]

    low = tf.lower_module(Net, [(2, 16, 64)], "float32")
    a = analyze(low.text)
    assert a.summary["gemm_flops"] == 2 * (2 * 16 * 64 * 256) * 2
    assert {"up", "down"} <= set(a.ops.scope)
    # a "package.module:factory" string and a (shape, dtype) pair work too
    low2 = tf.lower_module("torch.nn:Identity", [((4, 8), "bfloat16")], None)
    assert "tensor<4x8xbf16>" in low2.text


def test_unknown_model():
    with pytest.raises(Exception, match="no model 'nope'"):
        tf.lower("nope", None)


def test_shim_placeholder_is_inert():
    from mhlo_cost.lower.frontends._torch_shim import RemovedOverload, _is_named_tensor_overload

    assert _is_named_tensor_overload("dim_Dimname") and _is_named_tensor_overload("names_dim")
    assert _is_named_tensor_overload("correction_names_out")
    assert not _is_named_tensor_overload("Tensor") and not _is_named_tensor_overload("dim_IntList")
    r = RemovedOverload("aten::prod.dim_Dimname")
    assert r == RemovedOverload("aten::prod.dim_Dimname") and {r: 1}[r] == 1
    with pytest.raises(RuntimeError):
        r()


@pytest.mark.slow
def test_full_204_640_360_through_torchax_on_meta():
    """The full STDiT3-XL at 204_640_360 from shapes: GEMM FLOPs exact, lowering peak RSS under 4 GB.

    Runs in a fresh interpreter so that the peak RSS is the lowering's own (Linux's VmHWM)."""
    code = textwrap.dedent("""
        import json, sys, time
        t0 = time.perf_counter()
        from mhlo_cost.lower.frontends import torchax_frontend as tf
        from mhlo_cost.lower.models.config import STDiT3Config
        text = tf.lower("stdit3", STDiT3Config().with_shape("204_640_360")).text
        secs = time.perf_counter() - t0
        # this process's own high-water mark (VmHWM): ru_maxrss keeps, across exec, the peak of the process it
        # was forked from, which under a whole test run is pytest's (gigabytes)
        with open("/proc/self/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
        from mhlo_cost import analyze
        a = analyze(text)
        json.dump({"gemm": a.summary["gemm_flops"], "rss_mb": rss, "seconds": secs,
                   "blocks": {k: int(v) for k, v in a.ops.groupby(a.ops.scope.str.split("/").str[0])
                              ["gemm_flops"].sum().items()}}, sys.stdout)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    r = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"torchax full 204_640_360: {r['seconds']:.1f} s, peak RSS {r['rss_mb']:.0f} MiB")
    assert r["gemm"] == FULL_GEMM_204_640_360
    cfg = STDiT3Config().with_shape("204_640_360")
    f = gemm_flops(cfg)
    assert f["total"] == FULL_GEMM_204_640_360
    assert r["blocks"]["spatial_blocks.27"] == f["spatial_block"] == 4878788198400
    assert r["blocks"]["temporal_blocks.0"] == f["temporal_block"] == 4441286246400
    assert r["rss_mb"] < 4096


# --------------------------------------------------------------------------------------------------------
# torch-xla (its own venv)
# --------------------------------------------------------------------------------------------------------


def _torch_xla():
    from mhlo_cost.lower.frontends import torch_xla_frontend as xf

    if not xf.available():
        pytest.skip(f"torch-xla venv missing ({xf.venv_python()}): {xf.SETUP_HINT}")
    return xf


@pytest.fixture(scope="module")
def small_torch_xla():
    return _torch_xla().lower("stdit3", _small())


def test_torch_xla_gemm_equals_jax(small_torch_xla, small_jax_text):
    low = small_torch_xla
    assert low.bytecode is not None and low.text is None
    a, aj = analyze(low.bytecode), analyze(small_jax_text)
    assert a.summary["gemm_flops"] == aj.summary["gemm_flops"] == gemm_flops(_small())["total"]
    assert a.summary["conv_flops"] == aj.summary["conv_flops"]
    assert a.summary["unknown_ops"] == 0
    assert math.isclose(a.summary["vector_flops"], aj.summary["vector_flops"], rel_tol=0.10)


def _scope_blocks(analysis):
    from mhlo_cost.analysis.blocks import block_table
    from mhlo_cost.analysis.collectors import assign_blocks

    blocks = assign_blocks(analysis)
    table = block_table(analysis, blocks)
    table = table[table.kind.isin(["spatial", "temporal"])]
    return blocks, [(r.block, int(r.gemm_flops)) for r in table.itertuples()]


def test_torch_xla_blocks_by_scope_equal_jax(small_torch_xla, small_jax_text):
    """torch-xla's ops carry module paths (spatial_blocks.0/attn/qkv/addmm) whatever order XLA puts them
    in: the scope collector finds the JAX lowering's blocks, with its GEMM FLOPs per block."""
    assert small_torch_xla.info["locations"] is True
    a, aj = analyze(small_torch_xla.bytecode), analyze(small_jax_text)
    scopes = set(a.ops.scope)
    for s in ("spatial_blocks.0/attn/qkv", "temporal_blocks.1/cross_attn/kv_linear", "spatial_blocks.1/mlp/fc2",
              "y_embedder/y_proj/fc1", "t_block.1", "final_layer/linear"):  # t_block: a Sequential
        assert s in scopes, s
    bx, x_gemm = _scope_blocks(a)
    bj, j_gemm = _scope_blocks(aj)
    assert bx.method == bj.method == "scope"
    cfg = _small()
    f = gemm_flops(cfg)
    expected = []
    for i in range(cfg.depth):
        expected += [(f"spatial_blocks.{i}", f["spatial_block"]), (f"temporal_blocks.{i}", f["temporal_block"])]
    assert x_gemm == j_gemm == expected
    # The bytecode is plain StableHLO (not torch-xla's VHLO artifact): its text, as dump_mhlo writes it
    # to a .mlir file, re-parses with the locations.
    from mhlo_cost.lower.frontends import to_text

    assert _scope_blocks(analyze(to_text(small_torch_xla.bytecode)))[1] == expected
    bt, bj2 = _block_sums(a, "gemm_flops"), _block_sums(aj, "gemm_flops")
    for name in ("y_embedder", "t_embedder", "fps_embedder", "t_block", "final_layer"):
        assert bt[name] == bj2[name] == f[name], name


def test_torch_xla_location_names():
    """The dump script's location names, from torch.export's nn_module_stack (no torch-xla needed)."""
    dump = script("scripts/torch_xla_dump.py", "_torch_xla_dump")

    class Node:
        def __init__(self, stack, target=torch.ops.aten.addmm.default):
            self.meta = {"nn_module_stack": stack} if stack is not None else {}
            self.target = target

    stack = {"L__self__": ("", "STDiT3"), "L__self__spatial_blocks.0": ("spatial_blocks.0", "Block"),
             "L__self__spatial_blocks.0.attn": ("spatial_blocks.0.attn", "Attention"),
             "L__self__spatial_blocks.0.attn.qkv": ("spatial_blocks.0.attn.qkv", "Linear")}
    assert dump.location_name(Node(stack)) == "spatial_blocks.0/attn/qkv/addmm"
    seq = {"a": ("t_block", "Sequential"), "b": ("t_block.1", "Linear")}
    assert dump.location_name(Node(seq)) == "t_block.1/addmm"  # as torchax writes a Sequential child
    old_style = {"a": ("L['self'].blocks[0]", "Block"), "b": ("L['self'].blocks[0].mlp", "Mlp")}
    assert dump.location_name(Node(old_style, torch.ops.aten.mul.Tensor)) == "blocks.0/mlp/mul"
    assert dump.location_name(Node(None)) == "addmm"


def test_torch_xla_missing_venv_message(monkeypatch, tmp_path):
    from mhlo_cost.lower.frontends import torch_xla_frontend as xf

    monkeypatch.setenv("MHLO_COST_TORCH_XLA_PYTHON", str(tmp_path / "nope" / "python"))
    with pytest.raises(Exception, match="setup_torch_xla_env.sh"):
        xf.lower("stdit3", _small())


def test_torch_xla_refuses_huge_real_weights():
    from mhlo_cost.lower.frontends import torch_xla_frontend as xf

    with pytest.raises(Exception, match="real weights"):
        xf.lower("stdit3", STDiT3Config(), max_param_bytes=1 << 30)


@pytest.mark.slow
def test_torch_xla_full_204_640_360_gemm():
    """torch-xla with real (random) bf16 weights of the full model: about 3 minutes and 6.5 GB."""
    xf = _torch_xla()
    low = xf.lower("stdit3", STDiT3Config().with_shape("204_640_360"))
    assert analyze(low.bytecode).summary["gemm_flops"] == FULL_GEMM_204_640_360
