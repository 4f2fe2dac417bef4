"""One model, two lowerings (issue 35, item 4): why ``--execution eager`` on the JAX STDiT3 (the default
``lower --model stdit3``) is not the torch module's answer, and where the two agree.

The eager model prices a program's framework calls (a ``jnp`` call, an ``aten`` call) as kernels. The two
programs make the same GEMMs, the same self-attention and the same norms, so those kernels agree; they differ in
how the element-wise work is written: the JAX model's tanh-GELU is eleven ``jnp`` calls (``layers.gelu_tanh``),
the torch module's one ``F.gelu(approximate="tanh")``; so the JAX program is priced as more, smaller kernels.
The difference is the programs', not the pricing's: ``lower --model stdit3 --deployed`` is the module to price
eager, the JAX model the one to count (and to shard)."""
from __future__ import annotations

import dataclasses
import math
import os

import pytest

pytest.importorskip("torch")

from mhlo_cost import lower_model  # noqa: E402
from mhlo_cost.analysis import AnalysisOptions, analyze  # noqa: E402
from mhlo_cost.lower.models import stdit3, stdit3_torch  # noqa: E402
from mhlo_cost.lower.models.config import STDiT3Config  # noqa: E402
from mhlo_cost.machines.hardware import get_profile  # noqa: E402
from mhlo_cost.roofline import Roofline  # noqa: E402
from mhlo_cost.walk.row import short_name  # noqa: E402
from helpers import script  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _breakdown():
    return script("benchmarks/stdit3_roofline.py", "stdit3_roofline_paths").eager_class


@pytest.fixture(scope="module")
def two():
    """(JAX, torch counting module) eager Rooflines of one configuration: the full width, one block, a small
    video (T=3, S=12 x 20), bf16."""
    cfg = dataclasses.replace(STDiT3Config(), depth=1, latent_t=3, latent_h=24, latent_w=40, dtype="bfloat16")
    hw = get_profile("a100")
    m = stdit3_torch.build(cfg)
    specs = [f"{'x'.join(map(str, s))}:{str(t).replace('torch.', '')}" for s, t in stdit3_torch.input_specs(cfg)]
    texts = (stdit3.lower(cfg).as_text(debug_info=True), lower_model(m, *specs, frontend="torchax").text)
    return [Roofline(analyze(t, AnalysisOptions(dataflow=True)), hw, execution="eager", written="sdpa")
            for t in texts]


def _by_class(rf) -> dict:
    eager_class = _breakdown()
    out: dict = {}
    for k in rf.fusion.kernels:
        c = out.setdefault(eager_class(rf.analysis.rows, k), [0.0, 0])
        c[0] += k.time_s
        c[1] += k.multiplicity
    return out


def test_same_gemms_and_self_attention(two):
    """The two programs launch the same GEMMs and self-attention kernels, priced the same (within 2%)."""
    jax_, torch_ = (_by_class(rf) for rf in two)
    assert jax_["GEMM"][1] == torch_["GEMM"][1]
    assert math.isclose(jax_["GEMM"][0], torch_["GEMM"][0], rel_tol=0.02)
    for kind in ("attention, spatial", "attention, temporal"):
        assert jax_[kind][1] == torch_[kind][1] == 1
        assert math.isclose(jax_[kind][0], torch_[kind][0], rel_tol=0.02), kind


def _gelu_kernels(rf) -> list:
    """The non-GEMM kernels of the spatial block's MLP: its GELU as the program writes it."""
    rows = rf.analysis.rows
    return [k for k in rf.fusion.kernels if not k.has_dot and "spatial_blocks" in rows[k.members[0]].scope
            and "mlp" in rows[k.members[0]].scope]


def test_the_gelu_is_eleven_jnp_calls_against_one_aten_call(two):
    """0.5 * x * (1 + tanh(c * (x + 0.044715 * x * x * x))): eleven jnp operations (five multiplies of x, the
    scalar products and sums), each its own call; F.gelu is one kernel reading x once."""
    jax_k, torch_k = (_gelu_kernels(rf) for rf in two)
    assert len(torch_k) == 1
    assert "tanh" in {short_name(two[1].analysis.rows[i].op) for i in torch_k[0].members}
    assert len(jax_k) == 11
    assert sum(k.time_s for k in jax_k) > 5 * torch_k[0].time_s  # eleven passes over the activation, not one


def test_the_difference_is_in_the_element_wise_kernels(two):
    """All of the difference in eager time is in the element-wise and conversion kernels the programs write
    differently: the JAX program launches more of them, and its total is larger by their time alone."""
    jax_, torch_ = (_by_class(rf) for rf in two)
    assert jax_["elementwise"][1] > torch_["elementwise"][1]
    same = ("GEMM", "attention, spatial", "attention, temporal", "norm (reductions)")
    rest_jax = sum(jax_[k][0] for k in same)
    rest_torch = sum(torch_[k][0] for k in same)
    assert math.isclose(rest_jax, rest_torch, rel_tol=0.05)
    total_jax, total_torch = (rf.totals()["est_time_fused_s"] for rf in two)
    assert total_jax > 1.05 * total_torch
