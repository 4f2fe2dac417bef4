"""What Inductor's kernels cost the host to launch (no CUDA graphs), and Inductor by torch release (issue 35): a
Triton kernel's launch from the published launch-latency figures (tritonbench PR #1017: 6.8 us with no arguments,
9.1 us with 19), an extern kernel as one eager ATen call, and no SDPA rewrite of written attention before torch
2.1 (an SDPA call stays one library kernel)."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import pytest

from helpers import lowered
from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline.eager import DISPATCH_S
from mhlo_cost.roofline.inductor import inductor
from mhlo_cost.roofline.inductor_launch import host_launch_s, parse_torch, sdpa_rewrite

H100 = dataclasses.replace(get_profile("h100"), gemm=None)
#: The published launch times (tritonbench PR #1017, GB200): 0 and 19 arguments.
T0, T19 = 6.8e-6, 9.1e-6


def per_arg(n: int) -> float:
    """The launch of a Triton kernel of ``n`` arguments, on the line through the two published points."""
    return T0 + (T19 - T0) * n / 19


@pytest.mark.parametrize("version, rewrites", [(None, True), ("2.0.1", False), ("2.0", False), ("2.1.0", True),
                                               ("2.11", True), ("2.5.1+cu124", True), ("3.0", True)])
def test_the_sdpa_rewrite_comes_with_torch_2_1(version, rewrites):
    assert sdpa_rewrite(version) is rewrites


@pytest.mark.parametrize("bad", ["two", "2", "", "v2.1"])
def test_a_torch_version_that_is_not_major_minor_is_refused(bad):
    with pytest.raises(ValueError, match="major.minor"):
        parse_torch(bad)


def test_triton_kernels_launch_at_the_published_rate_and_extern_calls_as_an_eager_op():
    def f(x, w):  # a GEMM (extern), then x * 2 + 1 and a row sum over the GEMM's output (one Triton reduction)
        h = x @ w
        return (h * 2.0 + 1.0).sum(-1)

    a = analyze(lowered(f, ((64, 32), jnp.float32), ((32, 16), jnp.float32)), AnalysisOptions(dataflow=True))
    fus = inductor(a, H100)
    gemm, red = fus.kernels
    assert gemm.extern and not red.extern and red.rnumel == 16
    assert gemm.host_s == pytest.approx(DISPATCH_S, rel=1e-12)  # the profile sets no dispatch_overhead_us
    # the reduction reads the GEMM's output (its scalar constants are literals) and writes the sums; it takes
    # xnumel and rnumel: four arguments
    n = 4
    assert red.host_s == pytest.approx(per_arg(n), rel=1e-12)
    slow = dataclasses.replace(H100, dispatch_overhead=20e-6)
    assert host_launch_s(gemm, slow) == 20e-6 and host_launch_s(red, slow) == pytest.approx(per_arg(n), rel=1e-12)


torch = pytest.importorskip("torch")


class _Both(torch.nn.Module):
    """One SDPA call and one attention written out (q @ k^T, softmax, @ v)."""

    def forward(self, q, k, v):
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        p = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        return a + p @ v


def test_torch_2_0_keeps_written_attention_as_its_kernels_and_the_sdpa_call_as_one():
    from mhlo_cost import lower_model

    with torch.device("meta"):
        m = _Both()
    text = lower_model(m, *["1x2x128x16:float32"] * 3, frontend="torchax").text
    a = analyze(text, AnalysisOptions(dataflow=True))
    now, old = inductor(a, H100), inductor(a, H100, torch_version="2.0.1")
    assert sum(k.attention for k in now.kernels) == 2
    assert sum(k.attention for k in old.kernels) == 1
    # torch 2.0's written attention: two extern batched GEMMs and a Triton softmax where the rewrite had one call
    extern = [k for k in old.kernels if k.extern and not k.attention]
    assert len(extern) == 2 and all(k.has_dot for k in extern)
    assert len(old.kernels) == len(now.kernels) + 2
    scores = 1 * 2 * 128 * 128 * 4
    soft = [k for k in old.kernels if not k.extern and k.bytes_written == scores]
    assert len(soft) == 1
