"""The phase boundary of a training step run as PyTorch autograd runs it (``split_phases``): no fused kernel spans
its forward, recompute, backward and optimizer, while a JAX program's report keeps XLA's one-module fusion.
Expected kernels and bytes worked out by hand from the program's shapes (f32: 4 bytes an element)."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest

from helpers import lowered
from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline import Roofline
from mhlo_cost.roofline.program import fuse, phases_of
from mhlo_cost.studies.study import Study

H100 = dataclasses.replace(get_profile("h100"), gemm=None)
M, K, N = 256, 128, 512
F32 = 4


def _step(x, w):
    """The gradient of sum(sin(x @ w)) in w. JAX's forward (jvp) keeps h = x @ w's cosine for the backward; the
    backward (its transpose) multiplies it by the loss's cotangent (a broadcast scalar) and takes x^T @ dh."""
    return jax.grad(lambda w: jnp.sum(jnp.sin(x @ w)))(w)


@pytest.fixture(scope="module")
def step():
    return analyze(lowered(_step, ((M, K), jnp.float32), ((K, N), jnp.float32)),
                   AnalysisOptions(phases=True, dataflow=True))


def _ops(a, k) -> list:
    return [a.rows[i].op.split(".")[-1] for i in k.members]


def _shape(a, k) -> tuple:
    return _ops(a, k), k.bytes_read, k.bytes_written


def test_the_program_is_what_the_test_works_out(step):
    ph = step.phases
    assert ph.training
    seen = [(ph.phase[i], r.op.split(".")[-1]) for i, r in enumerate(step.rows) if r.op.split(".")[-1] != "constant"]
    assert seen == [("forward", "dot_general"), ("forward", "cosine"), ("backward", "broadcast_in_dim"),
                    ("backward", "multiply"), ("backward", "dot_general"), ("backward", "transpose")]


def test_one_module_fuses_the_backward_multiply_into_the_forward_gemm(step):
    """XLA's behaviour (the default, ``report``): the backward's multiply reads cos(h), made in the forward GEMM's
    epilogue, so it joins that kernel: cos(h) never reaches memory."""
    x, w, h, gw = M * K * F32, K * N * F32, M * N * F32, K * N * F32
    scalar = F32  # the loss's cotangent, broadcast inside the kernel (its scalar read)
    want = [(["dot_general", "cosine", "multiply"], x + w + scalar, h),  # writes dh
            (["dot_general", "transpose"], h + x, gw)]  # dh and x in, the weight's gradient out
    assert [_shape(step, k) for k in fuse(step, H100).kernels] == want
    assert [_shape(step, k) for k in Roofline(step, H100, execution="compiled").fusion.kernels] == want


def test_split_phases_ends_the_forward_kernel_at_the_backward(step):
    """Autograd: the forward GEMM's kernel writes cos(h) (saved for the backward); the backward reads it back in a
    kernel of its own, then the wgrad GEMM reads dh: one more kernel and 2 x M x N x 4 more bytes."""
    x, w, h, gw = M * K * F32, K * N * F32, M * N * F32, K * N * F32
    want = [(["dot_general", "cosine"], x + w, h),
            (["multiply"], h + F32, h),
            (["dot_general", "transpose"], h + x, gw)]
    got = fuse(step, H100, split_phases=True)
    assert [_shape(step, k) for k in got.kernels] == want
    one = fuse(step, H100)
    moved = sum(k.bytes_read + k.bytes_written for k in got.kernels) - \
        sum(k.bytes_read + k.bytes_written for k in one.kernels)
    assert moved == 2 * h
    assert got.time_s > one.time_s
    assert [_shape(step, k) for k in Roofline(step, H100, execution="compiled", split_phases=True).fusion.kernels] \
        == want


def test_a_study_asks_for_it():
    text = lowered(_step, ((M, K), jnp.float32), ((K, N), jnp.float32))
    fused = Study(text, training="always", hardware=H100, execution="compiled", dataflow=True)
    split = Study(text, training="always", hardware=H100, execution="compiled", dataflow=True, split_phases=True)
    assert len(fused.roofline.fusion.kernels) == 2
    assert len(split.roofline.fusion.kernels) == 3


def test_a_program_with_no_backward_has_no_phases_to_split():
    a = analyze(lowered(lambda x, w: jnp.cos(x @ w), ((M, K), jnp.float32), ((K, N), jnp.float32)),
                AnalysisOptions(phases=True, dataflow=True))
    assert phases_of(a) is None
    assert [k.members for k in fuse(a, H100, split_phases=True).kernels] == [k.members for k in fuse(a, H100).kernels]


def test_train_plan_prices_its_layer_phase_by_phase(monkeypatch):
    """train-plan's layer (studies/plan/costs.analyse_layer) is priced with the boundary: no kernel of its fused
    grouping holds rows of two phases (a dense layer with full recompute: forward, recompute, backward, optimizer)."""
    import mhlo_cost.studies.study as study_mod
    from mhlo_cost.studies.plan.config import ScaleConfig
    from mhlo_cost.studies.plan.costs import analyse_layer

    made = []

    class Recording(study_mod.Study):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    monkeypatch.setattr(study_mod, "Study", Recording)
    cfg = ScaleConfig(layers=2, hidden=256, heads=4, seq=128, recompute="full")
    analyse_layer(cfg, get_profile("h100"))
    assert made and all(s.options.split_phases for s in made)
    s = made[0]
    phase = s.analysis.phases.phase
    assert {"forward", "recompute", "backward"} <= set(phase)
    assert all(len({phase[i] for i in k.members}) == 1 for k in s.roofline.fusion.kernels)
    # the same layer as one XLA module: some kernel does span two phases (what the boundary changes)
    one = study_mod.Study(dataclasses.replace(s.options, split_phases=False))
    assert any(len({phase[i] for i in k.members}) > 1 for k in one.roofline.fusion.kernels)


def _masked_remat(x, w):
    """A checkpointed masked activation: jnp.where's select (and its convert, broadcast) carry no transformation in
    their locations (a called function's relative names); the rows around them in the backward are the recompute."""
    def loss(w):
        @jax.checkpoint
        def f(h):
            m = jnp.arange(h.shape[-1])[None, :] <= jnp.arange(h.shape[0])[:, None]
            return jnp.sin(jnp.where(m, h, -1.0))
        return jnp.sum(f(x @ w) ** 2)
    return jax.grad(loss)(w)


def test_an_unnamed_op_amid_a_recompute_is_recomputed():
    """The select that remakes the masked input of the recomputed cosine (between the recomputed compare and
    cosine, reading the one and read by the other) is recompute, not backward: no kernel boundary falls inside the
    recompute's chain."""
    a = analyze(lowered(_masked_remat, ((64, 64), jnp.float32), ((64, 64), jnp.float32)),
                AnalysisOptions(phases=True, dataflow=True))
    ph, ops = a.phases.phase, [r.op.split(".")[-1] for r in a.rows]
    cos = ops.index("cosine")
    sel = a.producers[cos][0]
    assert ops[sel] == "select" and ph[cos] == "recompute"
    assert ph[sel] == "recompute"
    assert ops[a.producers[sel][0]] == "compare" and ph[a.producers[sel][0]] == "recompute"
    # the backward's own select (the mask applied to the cotangent) stays backward
    assert ph[max(i for i, o in enumerate(ops) if o == "select")] == "backward"
