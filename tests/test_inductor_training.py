"""PyTorch's execution models on what the program around the kernels decides: a training step compiled by
torch.compile as two graphs (AOTAutograd's forward and backward: nothing fuses across them) with the optimizer's
step left eager; and PyTorch's default float32 math (cuDNN convolutions on TF32 tensor cores, matmuls in f32)
in both eager and Inductor. Expected figures from the phases the walk records and from closed forms."""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from helpers import lowered
from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline import Roofline
from mhlo_cost.roofline.eager import eager
from mhlo_cost.roofline.inductor import GRAPHS, inductor

H100 = dataclasses.replace(get_profile("h100"), gemm=None)  # no GEMM efficiency model: peaks as printed
N, C = 1024, 512


def _step(x, w, b, m):
    """One training step: a pointwise model (its backward the same numel as its forward: the rows a single
    fusing pass would put in one kernel), its gradient, and an Adam-like update of the weights."""
    def loss(w, b):
        return jnp.sum(jnp.tanh(x * w + b) ** 2)

    gw, gb = jax.grad(loss, argnums=(0, 1))(w, b)
    m = 0.9 * m + 0.1 * gw
    return w - 1e-3 * m / (jnp.sqrt(m * m) + 1e-8), b - 1e-3 * gb, m


@pytest.fixture(scope="module")
def step():
    shapes = [((N, C), jnp.float32)] * 4
    return analyze(lowered(_step, *shapes), AnalysisOptions(phases=True))


def _graphs(a, k) -> set:
    return {GRAPHS[a.phases.phase[i]] for i in k.members}


def test_no_kernel_spans_the_forward_and_backward_graphs(step):
    ph = step.phases
    assert ph.training and {"forward", "backward", "optimizer"} <= set(ph.phase)
    f = inductor(step, H100)
    assert all(len(_graphs(step, k)) == 1 for k in f.kernels)
    fwd = [k for k in f.kernels if _graphs(step, k) == {GRAPHS["forward"]}]
    bwd = [k for k in f.kernels if _graphs(step, k) == {GRAPHS["backward"]}]
    assert fwd and bwd
    # the forward graph saves an activation of the weights' size for the backward graph (it would stay on chip
    # in one kernel if the two graphs fused)
    assert max(k.bytes_written for k in fwd) >= N * C * 4


def test_the_optimizer_step_runs_as_eager_pytorch_runs_it(step):
    opt = GRAPHS["optimizer"]
    f, e = inductor(step, H100), eager(step, H100)
    mine = [k for k in f.kernels if _graphs(step, k) == {opt}]
    theirs = [k for k in e.kernels if _graphs(step, k) == {opt}]
    assert [k.members for k in mine] == [k.members for k in theirs]
    assert math.fsum(k.time_s for k in mine) == math.fsum(k.time_s for k in theirs)
    # compiled on its own (torch.compile(optimizer.step)), the update is one graph: fewer kernels than eager's
    comp = [k for k in inductor(step, H100, optimizer="compiled").kernels if _graphs(step, k) == {opt}]
    assert 0 < len(comp) < len(theirs)
    with pytest.raises(ValueError, match="optimizer"):
        inductor(step, H100, optimizer="fused")


def test_inference_program_is_one_graph():
    a = analyze(lowered(lambda x: jnp.tanh(x) * 2.0, ((N, C), jnp.float32)), AnalysisOptions(phases=True))
    assert len(inductor(a, H100).kernels) == 1


NB, CI, CO, HW, KS = 8, 64, 128, 28, 3


def _conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))


@pytest.mark.parametrize("execution", ["eager", "inductor"])
def test_f32_convolution_runs_on_tf32_tensor_cores_matmul_in_f32(execution):
    conv = analyze(lowered(_conv, ((NB, CI, HW, HW), jnp.float32), ((CO, CI, KS, KS), jnp.float32)),
                   AnalysisOptions(dataflow=True))
    out = HW - KS + 1  # VALID padding: every tap of every output reads the input
    flops = 2 * NB * CO * out * out * CI * KS * KS
    tf32, f32 = H100.matrix_flops["tf32"], H100.vector_peak("f32")
    k = next(k for k in Roofline(conv, H100, execution=execution).fusion.kernels if k.has_dot)
    assert k.compute_s == pytest.approx(flops / tf32, rel=1e-12)
    # the XLA-like compiled model keeps the profile's rule (f32 on the CUDA cores)
    k = next(k for k in Roofline(conv, H100, execution="compiled").fusion.kernels if k.has_dot)
    assert k.compute_s == pytest.approx(flops / f32, rel=1e-12)
    mm = analyze(lowered(lambda a, b: a @ b, ((N, C), jnp.float32), ((C, C), jnp.float32)),
                 AnalysisOptions(dataflow=True))
    k = next(k for k in Roofline(mm, H100, execution=execution).fusion.kernels if k.has_dot)
    assert k.compute_s == pytest.approx(2 * N * C * C / f32, rel=1e-12)
