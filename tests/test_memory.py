"""Memory: live bytes from the IR against closed forms worked out here, and XLA's argument and output sizes."""
from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from mhlo_cost import analyze
from mhlo_cost.cli import main
from mhlo_cost.roofline.memory import fused_profile
from mhlo_cost.analysis import AnalysisOptions

S = jax.ShapeDtypeStruct
F32 = jnp.float32
N = 1024  # elements; an f32 array of N elements is 4N bytes


def text(f, *shapes, **jit):
    return jax.jit(f, **jit).lower(*shapes).as_text(debug_info=True)


def peaks(f, *shapes, **jit) -> tuple[int, int]:
    """(unfused, fused) peak bytes."""
    a = analyze(text(f, *shapes, **jit), AnalysisOptions(dataflow=True))
    return a.memory.peak_bytes, fused_profile(a).peak_bytes


# -- closed forms -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_elementwise_chain(k):
    # x (4N, an argument: live throughout). Unfused, op i holds its operand and its result: x + two values
    # = 12N from the second op on (8N for one op: x and the result). Fused, one kernel: x and the output.
    ops = [jnp.sin, jnp.exp, jnp.tanh, jnp.negative, jnp.cos]

    def f(x):
        for i in range(k):
            x = ops[i](x)
        return x

    unfused, fused = peaks(f, S((N,), F32))
    assert unfused == (12 * N if k >= 2 else 8 * N)
    assert fused == 8 * N


def test_matmul_chain():
    # ((x @ w1) @ w2) @ w3: the arguments, then while each dot runs its operand and its result.
    m, dims = 64, [128, 256, 32, 16]
    shapes = [S((m, dims[0]), F32)] + [S((a, b), F32) for a, b in zip(dims, dims[1:])]
    a = analyze(text(lambda x, w1, w2, w3: ((x @ w1) @ w2) @ w3, *shapes))
    args = 4 * (m * dims[0] + sum(p * q for p, q in zip(dims, dims[1:])))
    h = [4 * m * d for d in dims[1:]]
    assert a.memory.argument_bytes == args
    assert a.memory.param_bytes == args - 4 * m * dims[0]  # w1, w2, w3 are read as weights; x is an input
    assert a.memory.during == [args + h[0], args + h[0] + h[1], args + h[1] + h[2]]
    assert a.memory.after == [args + h[0], args + h[1], args + h[2]]
    assert a.memory.peak_bytes == args + max(h[0] + h[1], h[1] + h[2])


def test_donated_argument_dies_at_its_last_use():
    # sin(exp(x)) + y. Kept: x, y live throughout; sin runs with exp and its result: 4 values = 16N; the add
    # too (y, x, sin, sum). Donated, x is freed after exp reads it: never more than 3 values (12N).
    def f(x, y):
        return jnp.sin(jnp.exp(x)) + y

    kept = analyze(text(f, S((N,), F32), S((N,), F32)))
    donated = analyze(text(f, S((N,), F32), S((N,), F32), donate_argnums=0))
    assert kept.memory.peak_bytes == 16 * N
    assert donated.memory.peak_bytes == 12 * N
    assert donated.memory.after[0] == 8 * N  # y and exp(x): x is gone


@pytest.mark.parametrize("trips", [3, 10])
def test_loop_carry_counted_once(trips):
    # fori_loop(0, L, sin): the argument c0 (4N), the carried c (4N, a copy: c0 is still an argument) and
    # sin(c) inside the body (4N), plus the i32 counter, its step and its next value (12 bytes). Whatever
    # the trip count: the body's peak counts once.
    a = analyze(text(lambda c: lax.fori_loop(0, trips, lambda i, c: jnp.sin(c), c), S((N,), F32)))
    assert a.memory.peak_bytes == 12 * N + 12
    assert a.memory.output_bytes == 4 * N


def test_scan_output_updated_in_place():
    # scan over 8 rows of xs with a carry: the stacked ys (32N) are written in place, never copied.
    def f(c, xs):
        def body(c, x):
            c2 = jnp.sin(c) * x
            return c2, jnp.exp(c2)
        return lax.scan(body, c, xs)

    a = analyze(text(f, S((N,), F32), S((8, N), F32)))
    # arguments 36N, ys 32N, the carry 4N, in the body x (a slice, 4N), sin(c) and the product: 84N, plus
    # 4-byte integers (the counter, a 0 and a 1 for the indices, the next counter).
    assert 84 * N <= a.memory.peak_bytes < 84 * N + 32


def test_call_made_five_times_counts_its_peak_once():
    @jax.jit
    def g(x):
        return jnp.tanh(jnp.sin(jnp.exp(x)))

    def five(x):
        for _ in range(5):
            x = g(x)
        return x

    t = text(five, S((N,), F32))
    assert t.count("call @") == 5
    a = analyze(t)
    # The argument x (4N) and inside the callee two values at a time (its operand, handed over where it dies
    # at the call, and one result): 12N, as for one call.
    assert a.memory.peak_bytes == 12 * N == analyze(text(g, S((N,), F32))).memory.peak_bytes


@pytest.mark.parametrize("large_first", [True, False])
def test_case_counts_the_larger_branch(large_first):
    def large(x):  # concatenate (16N) and its sine (16N): little compute, much memory
        y = jnp.concatenate([x, x, x, x])
        return jnp.sum(jnp.sin(y).reshape(4, N), axis=0)

    def small(x):  # more compute, never more than one value at a time beside x
        for _ in range(12):
            x = jnp.sin(x)
        return x

    branches = (large, small) if large_first else (small, large)
    a = analyze(text(lambda p, x: lax.cond(p, *branches, x), S((), jnp.bool_), S((N,), F32)))
    # p (1 byte) and x (4N), the i32 index (4 bytes), then the large branch: 32N.
    assert a.memory.peak_bytes == 36 * N + 5


# -- XLA's figures --------------------------------------------------------------------------------------------

PROGRAMS = {
    "matmul": (lambda x, w: x @ w, (S((64, 128), F32), S((128, 32), F32)), {}),
    "two outputs": (lambda x, w: (x @ w, jnp.sin(x)), (S((64, 128), F32), S((128, 32), F32)), {}),
    "bf16 in, f32 out": (lambda x, w: (x @ w).astype(F32), (S((64, 128), jnp.bfloat16), S((128, 32), jnp.bfloat16)),
                         {}),
    "donated": (lambda x: x * 2, (S((64,), F32),), {"donate_argnums": 0}),
    "predicate": (lambda x: x > 0, (S((64,), F32),), {}),
    "scan": (lambda c, xs: lax.scan(lambda c, x: (c + x, c * x), c, xs), (S((N,), F32), S((8, N), F32)), {}),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_arguments_and_outputs_equal_xla(name):
    f, shapes, jit = PROGRAMS[name]
    lowered = jax.jit(f, **jit).lower(*shapes)
    ma = lowered.compile().memory_analysis()
    s = analyze(lowered.as_text()).summary
    outputs = len(jax.tree_util.tree_leaves(jax.eval_shape(f, *shapes)))
    table = 8 * outputs if outputs > 1 else 0  # XLA adds a table of the outputs' addresses for a tuple
    assert s["argument_bytes"] == ma.argument_size_in_bytes
    assert s["output_bytes"] == ma.output_size_in_bytes - table


def test_shard_map_arguments_are_per_device():
    from jax.sharding import PartitionSpec

    from mhlo_cost.lower.models import parallel, stdit3
    from mhlo_cost.lower.models.config import STDiT3Config

    cfg = STDiT3Config().small()
    plan = parallel.make_plan("megatron", 4, cfg=cfg)
    a = analyze(parallel.lower(cfg, plan).as_text())
    # Each parameter's bytes divided by the devices its spec splits it over (the model's own specs).
    specs = parallel.param_pspecs(cfg, plan)
    shapes = jax.eval_shape(parallel.parallel_layout, stdit3.param_shapes(cfg))
    total = 0
    for leaf, spec in zip(jax.tree_util.tree_leaves(shapes),
                          jax.tree_util.tree_leaves(specs, is_leaf=lambda x: isinstance(x, PartitionSpec))):
        split = math.prod(4 for axis in spec if axis is not None)
        total += leaf.size * leaf.dtype.itemsize // split
    inputs = sum(x.size * x.dtype.itemsize for x in stdit3.input_shapes(cfg))
    assert a.memory.argument_bytes == total + inputs
    assert a.memory.argument_bytes < analyze(stdit3.lower(cfg).as_text()).memory.argument_bytes
    # The estimate's data-flow walk shares the visitor with liveness: inside a shard_map body both track
    # block arguments, and must not read each other's tables (regression: a crash under --hardware).
    d = analyze(parallel.lower(cfg, plan).as_text(), AnalysisOptions(dataflow=True))
    assert (d.memory.peak_bytes, d.memory.argument_bytes) == (a.memory.peak_bytes, a.memory.argument_bytes)


# -- views ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_file(tmp_path_factory):
    from mhlo_cost.lower.models import stdit3
    from mhlo_cost.lower.models.config import STDiT3Config

    path = tmp_path_factory.mktemp("mem") / "small.mlir"
    path.write_text(stdit3.lower(STDiT3Config().small()).as_text(debug_info=True))
    return path


def test_summary_fits_and_where(small_file, capsys):
    assert main(["report", str(small_file), "--hardware", "h100", "--fuse", "elementwise", "--format", "json",
                 "-q"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["metric"]: r["value"] for r in data["rows"]}
    peak = data["summary"]["peak_bytes"]
    assert rows["hbm_bytes"] == 80 * 10**9
    assert rows["fits"] == "yes" and rows["margin_bytes"] == 80 * 10**9 - peak
    assert rows["peak_bytes_fused"] <= peak
    assert rows["peak_block"].startswith(("spatial_blocks.", "temporal_blocks."))


def test_fuse_without_hardware(small_file, capsys, tmp_path):
    assert main(["report", str(small_file), "--fuse", "elementwise", "--format", "json", "-q"]) == 0
    rows = {r["metric"]: r["value"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert 0 < rows["peak_bytes_fused"] <= rows["peak_bytes"]
    # The fused peak is the fusion the estimate makes, with or without a profile (attention as one kernel
    # unless --attention unfused, which keeps the scores in memory).
    def attention(q, k, v):  # the scores (512 x 512) are 16 times Q, K, V or O
        return jax.nn.softmax(q @ k.T / 4.0, axis=-1) @ v

    path = tmp_path / "attention.mlir"
    path.write_text(text(attention, *[S((512, 16), F32)] * 3))

    def fused_peak(*extra):
        assert main(["report", str(path), "--fuse", "elementwise", "--format", "json", "-q", *extra]) == 0
        return {r["metric"]: r["value"] for r in json.loads(capsys.readouterr().out)["rows"]}["peak_bytes_fused"]

    flash, unfused = fused_peak(), fused_peak("--attention", "unfused")
    assert fused_peak("--hardware", "h100") == flash
    assert flash < unfused == fused_peak("--hardware", "h100", "--attention", "unfused")
    assert flash < 512 * 512 * 4 <= unfused  # one kernel never stores the f32 scores


def test_timeline_and_blocks(small_file, capsys, tmp_path):
    import pandas as pd

    a = analyze(small_file)
    assert main(["report", str(small_file), "--by", "memory", "--format", "csv", "-q", "-o",
                 str(tmp_path / "t.csv")]) == 0
    t = pd.read_csv(tmp_path / "t.csv")
    assert list(t["live_bytes"]) == a.memory.after and list(t["during_bytes"]) == a.memory.during
    assert (t["peak"] == "peak").sum() == 1 and t["during_bytes"].max() == a.summary["peak_bytes"]
    assert main(["report", str(small_file), "--by", "op", "--format", "csv", "-q", "-o", str(tmp_path / "o.csv")]) == 0
    assert list(pd.read_csv(tmp_path / "o.csv")["live_bytes"]) == a.memory.after
    assert main(["blocks", str(small_file), "-o", str(tmp_path / "b.csv")]) == 0
    b = pd.read_csv(tmp_path / "b.csv")
    body, total = b.iloc[:-1], b.iloc[-1]
    assert total["peak_bytes"] == a.summary["peak_bytes"] == body["peak_bytes"].max()
    assert total["live_out_bytes"] == a.summary["argument_bytes"] + a.summary["output_bytes"]


def test_views_are_deterministic(small_file, tmp_path):
    outs = []
    for i in range(2):
        for by in ("memory", "summary"):
            out = tmp_path / f"{by}{i}.json"
            assert main(["report", str(small_file), "--by", by, "--fuse", "elementwise", "--format", "json", "-q",
                         "-o", str(out)]) == 0
            outs.append(out.read_bytes())
    assert outs[:2] == outs[2:]


def test_memory_plot(small_file, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "mem.png"
    assert main(["plot", str(small_file), "--memory", "--fuse", "elementwise", "--hardware", "h100", "-q", "-o",
                 str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
