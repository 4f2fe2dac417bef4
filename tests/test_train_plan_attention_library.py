"""train-plan's ``attention_library`` (``--attention-library fa2|fa3|cudnn``): the fused attention kernel priced at
the named library's fractions instead of the profile's default, part of the layer key only when set; a library the
profile has no model for is refused in one line."""
from __future__ import annotations

import pytest

from mhlo_cost.cli import main
from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import analyse_layer

H100 = resolve_profile("h100-sxm")
B, HEADS, S, D = 1, 8, 4096, 128  # head dim 128: on every library's head-dim ladder (no padding)
CFG = ScaleConfig(layers=1, hidden=HEADS * D, heads=HEADS, seq=S, vocab=1000, micro_batch=B, global_batch=1,
                  recompute="none", dropout=False, attention="fused")
ARGS = ["train-plan", "--layers", "2", "--hidden", "256", "--heads", "2", "--seq", "256", "--vocab", "128",
        "--global-batch", "1", "--format", "json"]


def _backward_matrix_s(lib: str) -> float:
    """The causal backward kernel's matrix seconds at ``lib``'s fraction, by hand: four products (dQ, dK, dV, dP)
    and the recomputed score product, 2 b h s^2 d FLOPs each; a causal mask visits (n + 1) / 2n of the n x n
    key tiles of 128; the fraction ramps as f x tiles / (tiles + ramp) with tiles = s / 128."""
    m = H100.attention.get(lib)
    flops = 5 * 2 * B * HEADS * S * S * D
    n = S // 128
    band = (n + 1) / (2 * n)
    return flops * band / (989.4e12 * m.backward * n / (n + m.ramp))  # H100 SXM dense bf16 peak


@pytest.mark.parametrize("lib", ["fa2", "cudnn"])
def test_the_backward_kernel_moves_by_the_libraries_fractions(lib):
    # the exponentials' share is the same at every library on h100-sxm (exp_exposed 1): only the matrix term moves
    assert {H100.attention.get(x).exp_exposed for x in ("fa2", "fa3", "cudnn")} == {1.0}
    fa3 = analyse_layer(CFG.with_split(attention_library="fa3"), H100)
    other = analyse_layer(CFG.with_split(attention_library=lib), H100)
    want = _backward_matrix_s(lib) - _backward_matrix_s("fa3")
    assert other.core_s["backward"] - fa3.core_s["backward"] == pytest.approx(want, rel=1e-6)
    assert other.gemm_flops == fa3.gemm_flops  # the library changes the seconds, not the work


def test_the_profiles_default_is_fa3_on_h100_and_unset_keeps_the_key():
    assert H100.attention.library == "fa3"
    default = analyse_layer(CFG, H100)
    fa3 = analyse_layer(CFG.with_split(attention_library="fa3"), H100)
    assert default.core_s == fa3.core_s
    assert CFG.with_split(attention_library="fa2").layer_key() == CFG.layer_key() + (("attention_library", "fa2"),)
    assert CFG.with_split(attention_library="fa2").label().endswith("fused-attn(fa2)")


def test_a_library_needs_fused_attention_and_a_known_name():
    assert "with fused attention" in CFG.with_split(attention="unfused", attention_library="fa2").invalid()
    assert "must be one of fa2, fa3, cudnn" in CFG.with_split(attention_library="fa4").invalid()


def test_a_library_the_profile_has_no_model_for_is_refused_in_one_line(capsys):
    with pytest.raises(ValueError, match="profile a100-sxm-80gb has no model of the fa3 attention library"):
        analyse_layer(CFG.with_split(attention_library="fa3"), resolve_profile("a100-sxm-80gb"))
    rc = main(ARGS + ["--hardware", "a100-sxm-80gb", "--attention", "fused", "--attention-library", "cudnn"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith("mhlo-cost: error: --attention-library: profile "
                                                               "a100-sxm-80gb has no model of the cudnn")
