"""The unfused attention's softmax and dropout as Megatron-LM runs them (:mod:`mhlo_cost.studies.plan.
attention_kernels`), against closed forms worked out here from the frameworks' code: Megatron-LM's
scaled_upper_triang_masked_softmax (de7dc40, megatron/fused_kernels/scaled_upper_triang_masked_softmax.h: row r of
each s x s matrix read in vectors of 4 up to column r, so s (s + 4) / 2 elements a matrix for s a multiple of 4, and
all s x s written; backward: the gradient and the saved softmax read over the same triangle, s x s written) and
PyTorch's fused dropout (2 read, 2 written and a 1-byte mask; backward: the gradient and the mask read, 2 written).
Seconds come from the profile's own memory model (not under test here); what is checked is which bytes and how many
kernels are added, and that what the compiled model charged for the core's non-GEMM work is taken out."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.attention_kernels import attention_bytes_kernels
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import analyse_layer
from plan_stubs import by_phase, stub_cost

A100 = resolve_profile("dgx-a100")
#: b 2, heads 4 over t 2: B = 4 score matrices of s x s = 256 x 256 on a device (above s 128, where the kernel runs
#: 4 matrices a block and vectors of 4 at de7dc40 and 28b6ffce alike)
TINY = dict(layers=4, hidden=64, heads=4, seq=256, vocab=128, ffn=256, t=2, micro_batch=2, global_batch=2,
            attention="unfused")
B, S = 2 * 4 // 2, 256
FULL = B * S * S  # 262,144 elements
TRI = B * S * (S + 4) // 2  # 133,120: the causal kernel's reads, s (s + 4) / 2 a matrix


def test_megatrons_causal_softmax_and_torchs_dropout_bytes_in_closed_form():
    """Forward: softmax reads 2 x TRI, writes 2 x FULL; dropout reads 2 x FULL, writes 2 x FULL and the 1-byte mask.
    Backward: dropout's masked scale reads 2 + 1 per element, writes 2; the softmax's backward reads the gradient
    and its output over the triangle (2 x 2 x TRI), writes 2 x FULL. The compiled default adds nothing."""
    cfg = ScaleConfig(**TINY, attention_kernel="megatron")
    fwd = 2 * TRI + 2 * FULL + 2 * FULL + 3 * FULL
    bwd = 3 * FULL + 2 * FULL + 4 * TRI + 2 * FULL
    assert attention_bytes_kernels(cfg) == {"forward": (fwd, 2), "backward": (bwd, 2)}
    # by hand: 4 x 65,536 = 262,144 and 4 x 4 x 4 x (1 + ... + 64) = 16 x 4 x 2,080 = 133,120 (row r read in
    # ceil(r / 4) vectors of 4); forward 2 x 133,120 + 7 x 262,144, backward 7 x 262,144 + 4 x 133,120
    assert (FULL, TRI) == (262_144, 133_120)
    assert (fwd, bwd) == (266_240 + 1_835_008, 1_835_008 + 532_480) == (2_101_248, 2_367_488)
    assert attention_bytes_kernels(ScaleConfig(**TINY)) == {"forward": (0, 0), "backward": (0, 0)}
    # without dropout the softmax alone, one kernel each way
    nodrop = ScaleConfig(**TINY, attention_kernel="megatron", dropout=False)
    assert attention_bytes_kernels(nodrop) == {"forward": (2 * TRI + 2 * FULL, 1),
                                               "backward": (4 * TRI + 2 * FULL, 1)}


def test_alibi_adds_the_bias_copy_and_the_gemms_read_of_it_in_the_forward():
    """Megatron-DeepSpeed 8387ae17 (transformer.py 291, 322-326): the scores' buffer is the ALiBi bias slice (B x 1 x s,
    bf16) and baddbmm runs with beta != 0, so PyTorch copies the expanded bias into the output (reads B x s x 2 =
    4 x 256 x 2 = 2,048 bytes, writes 2 x FULL = 524,288: one kernel) and the GEMM reads it as C (524,288 more, in
    the GEMM's own kernel). Forward: 2,101,248 + 2,048 + 2 x 524,288 = 3,151,872 bytes in 3 kernels; the backward
    unchanged (the bias takes no gradient). Refused without Megatron's kernels."""
    cfg = ScaleConfig(**TINY, attention_kernel="megatron", alibi=True)
    assert cfg.invalid() is None
    assert 2 * B * S == 2_048 and 2 * FULL == 524_288
    assert attention_bytes_kernels(cfg) == {"forward": (2_101_248 + 2_048 + 524_288 + 524_288, 3),
                                            "backward": (2_367_488, 2)}
    assert 2_101_248 + 2_048 + 524_288 + 524_288 == 3_151_872
    assert "attention_kernel megatron" in ScaleConfig(**TINY, alibi=True).invalid()


def test_the_triangle_is_counted_per_row_in_vectors_of_four():
    """At s 2048 (Narayanan's and Korthikanti's rows) the softmax reads 2048 x 2052 / 2 elements a matrix: the row
    r's vectors of 4 that start below r (2,101,248 = 4 x (1 + 1 + 1 + 1 + 2 + 2 + ...), summed by hand as
    4 x 4 x (1 + ... + 512))."""
    cfg = ScaleConfig(**dict(TINY, seq=2048, micro_batch=1, global_batch=1, t=1), attention_kernel="megatron")
    fwd, _ = attention_bytes_kernels(cfg)["forward"]
    mats, full = 4, 4 * 2048 * 2048
    assert 4 * 4 * (512 * 513 // 2) == 2048 * 2052 // 2 == 2_101_248
    assert fwd == 2 * mats * 2_101_248 + 2 * full + 5 * full


def test_the_kernels_replace_what_the_compiled_model_charged_in_every_layer_and_micro_batch():
    """4 layers on one stage, 2 micro-batches of b 1 (B = 2 matrices at t 2): the forward grows by 4 x 2 x (the two
    kernels' seconds less the charged 3 us), the backward by 4 x 2 x (theirs less 5 us); full and selective recompute
    run the forward's kernels again; the compiled default keeps the charge."""
    base = dict(TINY, micro_batch=1, global_batch=2)
    layer = stub_cost(forward=1e-3, backward=2e-3, core_own_s=by_phase(3e-6, 5e-6))
    plain = compose(ScaleConfig(**base), layer, A100)
    own = compose(ScaleConfig(**base, attention_kernel="megatron"), layer, A100)
    full, tri = 2 * S * S, 2 * S * (S + 4) // 2
    f = A100.memory_time(2 * tri + 2 * full + 5 * full, kernels=2) - 3e-6
    b = A100.memory_time(5 * full + 4 * tri + 2 * full, kernels=2) - 5e-6
    assert own.compute["forward"] - plain.compute["forward"] == pytest.approx(8 * f, rel=1e-9)
    assert own.compute["backward"] - plain.compute["backward"] == pytest.approx(8 * b, rel=1e-9)
    for policy in ("full", "selective"):
        rec = dict(base, recompute=policy)
        assert (compose(ScaleConfig(**rec, attention_kernel="megatron"), layer, A100).compute["recompute"]
                - compose(ScaleConfig(**rec), layer, A100).compute["recompute"]) == pytest.approx(8 * f, rel=1e-9)
    assert plain.compute == compose(ScaleConfig(**base), stub_cost(forward=1e-3, backward=2e-3), A100).compute


def test_the_charge_is_the_cores_non_gemm_share_of_the_lowered_layer():
    """The lowered unfused layer's scope core holds the products and the mask, softmax and dropout: what the
    compiled model charged for the latter is below the scope's own seconds, and at least the memory-bound kernels
    that hold only the scope's non-GEMM rows, their bytes worked out here from the shapes (n = b x heads x s x s =
    4 x 4 x 256 x 256 score elements, bf16; the causal mask, the dropout's keep-mask: 1-byte i1), each kernel priced
    on the profile's memory model plus its launch overhead (the profile, not under test here).
    Forward: the fused mask-softmax-dropout kernel reads the scores (2n) and the keep-mask (n) and writes the
    softmax (2n, saved for the backward) and the dropped probabilities (2n), plus the scalars it reads (the iota's
    i32 bound, three bf16 and one f32 constant: 4 + 6 + 4 = 14 and a bf16 2 = 16 bytes); the random bits' kernel
    (the keep-mask n and the two residual dropouts' b x s x h masks, shared with other scopes) adds its core rows'
    share, less than its whole time. Backward: the softmax gradient's row sums (read 2n and 6 bytes of scalars,
    write b x heads x s f32 sums) and the elementwise kernel (the sums, the gradient 2n, the softmax 2n, the s x s
    causal mask and a bf16 scalar read; 2n written), each whole, and the probabilities' gradient GEMM fused with
    the dropout's backward charged its time less the GEMM's own (not summed here)."""
    cfg = ScaleConfig(layers=1, hidden=256, heads=4, seq=256, vocab=128, micro_batch=4, global_batch=4,
                      attention="unfused")
    cost = analyse_layer(cfg, A100)
    for ph in ("forward", "backward"):
        assert 0.0 < cost.core_own_s[ph] < cost.core_s[ph], (cost.core_own_s, cost.core_s)
    n, sums, bsh, s = 4 * 4 * 256 * 256, 4 * 4 * 256 * 4, 4 * 256 * 256, 256

    def kernel(nbytes):
        return A100.memory_time(nbytes, kernels=1) + A100.kernel_overhead

    softmax = kernel(2 * n + n + 16 + 2 * n + 2 * n)
    rng = kernel(16 + 3 + n + 2 * bsh + 16)  # (two u64 of state, three u8 constants; the masks and a u32[4])
    assert softmax < cost.core_own_s["forward"] < softmax + rng
    grad_sums = kernel(2 * n + 6 + sums)
    grad = kernel(sums + 2 * n + 2 * n + s * s + 2 + 2 * n)
    assert grad_sums + grad < cost.core_own_s["backward"]
    assert cost.core_own_s["backward"] - (grad_sums + grad) < kernel(3 * 2 * n)  # the GEMM kernel's extra: under
    # a whole pass of its three s x s operands'


def test_megatrons_kernels_are_refused_where_they_are_not_priced():
    assert "attention_kernel" in ScaleConfig(**TINY, attention_kernel="cudnn").invalid()
    assert "unfused" in ScaleConfig(**dict(TINY, attention="fused"), attention_kernel="megatron").invalid()
    long = ScaleConfig(**dict(TINY, seq=4096, micro_batch=2), attention_kernel="megatron")
    assert "2048" in long.invalid()
    odd = ScaleConfig(**dict(TINY, heads=2, hidden=32, micro_batch=1, global_batch=1, t=1),
                      attention_kernel="megatron")  # 2 score matrices: not a multiple of 4
    assert "multiples of 4" in odd.invalid()
    # at s <= 128 the launcher runs 8 matrices a block and asserts B % 8 (and 28b6ffce reads s <= 64 in scalars):
    # 4 matrices pass Megatron's Python-side check but not the kernel's, so s 128 is refused at any B
    for mb in (2, 4):
        short = ScaleConfig(**dict(TINY, seq=128, micro_batch=mb, global_batch=mb), attention_kernel="megatron")
        assert "128 < seq" in short.invalid()
    assert ScaleConfig(**dict(TINY, seq=132), attention_kernel="megatron").invalid() is None
    wide = ScaleConfig(**dict(TINY, dtype="float32"), attention_kernel="megatron")  # the kernel's ELEM is 2 bytes
    assert "fp16 / bf16" in wide.invalid()
    assert ScaleConfig(**dict(TINY, dtype="float16"), attention_kernel="megatron").invalid() is None
    assert ScaleConfig(**TINY, attention_kernel="megatron").invalid() is None


def test_the_command_takes_the_option_and_refuses_it_with_fused_attention(capsys):
    from mhlo_cost.cli import main

    args = ["train-plan", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "256", "--vocab", "128",
            "--no-cache", "--format", "json"]
    assert main(args + ["--attention", "unfused", "--attention-kernel", "megatron"]) == 0
    capsys.readouterr()
    assert main(args + ["--attention", "fused", "--attention-kernel", "megatron"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mhlo-cost: error:") and err.count("\n") == 1 and "unfused" in err


def _kernel(members, time_s, compute_s, memory_s, dot=True):
    return SimpleNamespace(members=members, has_dot=dot, time_s=time_s, compute_s=compute_s, memory_s=memory_s,
                           overhead_s=0.0)


def _row(scope, gemm=0):
    return SimpleNamespace(scope=scope, gemm_flops=gemm)


def test_a_gemm_fused_with_the_cores_backward_is_charged_all_but_the_plain_gemm():
    """Hand numbers: the probabilities' gradient GEMM (alone: 1.0 ms memory-bound, 0.2 ms compute) fused with the
    dropout's and softmax's backward (0.1 ms compute) takes 1.6 ms: Megatron's bmm is the plain GEMM, so 0.6 ms is
    charged (what its own kernels replace). The same kernel also holding a row of another scope (a gradient add)
    keeps its bytes: only the scope's compute beyond the memory time is charged (max(0.3 - 0.1, 1.6 - 0.0) leaves
    0). A kernel without a product: the scope's rows' shares (0.25 ms of 0.4)."""
    from mhlo_cost.studies.plan.attention_kernels import core_charge

    rows = [_row("attn/core", gemm=10), _row("attn/core"), _row("attn/core"), _row("attn/core", gemm=10),
            _row("attn/core"), _row("mlp"), _row("attn/core"), _row("ln1")]
    times = [SimpleNamespace(compute_s=c, memory_s=m, overhead_s=0.0) for c, m in
             ((2e-4, 1e-3), (5e-5, 3e-4), (5e-5, 3e-4), (2e-4, 1e-3), (1e-4, 3e-4), (1e-6, 1e-4), (0.0, 0.0),
              (0.0, 0.0))]
    kernels = [_kernel([0, 1, 2], 1.6e-3, 3e-4, 1.6e-3), _kernel([3, 4, 5], 1.6e-3, 3e-4, 1.6e-3),
               _kernel([6, 7], 4e-4, 0.0, 4e-4, dot=False)]
    fusion = SimpleNamespace(kernels=kernels, row_time=[0.0] * 6 + [2.5e-4, 1.5e-4])
    rf = SimpleNamespace(execution="compiled", times=times, fusion=fusion)
    phase = ["backward"] * 3 + ["forward"] * 3 + ["recompute"] * 2
    a = SimpleNamespace(rows=rows, phases=SimpleNamespace(phase=phase))
    out = core_charge(a, rf, ("forward", "backward", "recompute"))
    assert out["backward"] == pytest.approx(0.6e-3, rel=1e-12)
    assert out["forward"] == 0.0
    assert out["recompute"] == pytest.approx(2.5e-4, rel=1e-12)
