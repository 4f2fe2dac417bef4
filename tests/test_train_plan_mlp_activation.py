"""The MLP's activation as Megatron's stacks run it (:mod:`mhlo_cost.studies.plan.mlp_activation`), against closed
forms worked out here from the frameworks' code: Megatron-LM's / Megatron-Core's bias_gelu (the GEMM's output read,
the activation written; backward: the gradient and the saved input read, one written), Megatron-Core's bias_swiglu
(fc1's two halves read, one written; backward: the gradient and both halves read, both halves' gradients written),
Transformer Engine's fp8 cast of fc2's input (bf16 read, fp8 written, with its transpose for the wgrad GEMM), NeMo's
eager squared-ReLU (relu, pow; backward: the copy, the scalar product, the product, threshold_backward). Seconds come
from the profile's own memory model (not under test here); what is checked is which bytes and how many kernels each
adds, and that what the compiled model charged for the fused activation is taken out."""
from __future__ import annotations

import pytest

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import analyse_layer
from mhlo_cost.studies.plan.mlp_activation import activation_bytes_kernels
from plan_stubs import by_phase, stub_cost

A100 = resolve_profile("dgx-a100")
H100 = resolve_profile("dgx-h100")
#: b 2, s 32, ffn 256 over t 2: fc2's input is 2 x 32 x 128 = 8192 elements on a device
TINY = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128, ffn=256, t=2, micro_batch=2, global_batch=2)
N = 2 * 32 * 128
PH = ("forward", "backward", "recompute", "optimizer")


def test_megatrons_bias_gelu_moves_4_bytes_an_element_forward_and_6_backward_in_one_kernel_each():
    """bias_gelu(bias, y): y read (2), the activation written (2); bias_gelu_back(g, bias, y): g and y read (2 + 2),
    the gradient written (2). The compiled default adds nothing (the activation stays in fc1's GEMM epilogue)."""
    cfg = ScaleConfig(**TINY, activation_kernel="megatron")
    assert activation_bytes_kernels(cfg) == {"forward": (N * 4, 1), "backward": (N * 6, 1)}
    assert activation_bytes_kernels(ScaleConfig(**TINY)) == {"forward": (0, 0), "backward": (0, 0)}
    # sequence parallelism: fc1 runs on the all-gathered sequence (the same elements); context parallelism halves it
    assert activation_bytes_kernels(ScaleConfig(**TINY, sp=True, activation_kernel="megatron")) == \
        activation_bytes_kernels(cfg)
    cp = ScaleConfig(**dict(TINY, global_batch=4), cp=2, d=2, activation_kernel="megatron")
    assert activation_bytes_kernels(cp) == {"forward": (N // 2 * 4, 1), "backward": (N // 2 * 6, 1)}


def test_megatron_cores_bias_swiglu_moves_6_bytes_an_element_forward_and_10_backward():
    """swiglu(y): y's gate and up halves read (2 + 2 per element of the output), silu(gate) * up written (2);
    swiglu_back(g, y): g (2) and both halves (4) read, the concatenated gradient of both written (4)."""
    cfg = ScaleConfig(**TINY, mlp_kind="swiglu", activation_kernel="megatron")
    assert activation_bytes_kernels(cfg) == {"forward": (N * 6, 1), "backward": (N * 10, 1)}


def test_under_fp8_transformer_engines_fc2_casts_its_input_in_a_kernel_of_its_own():
    """Without sequence parallelism TE's Linear runs fp8_cast_transpose_fused on fc2's bf16 input: 2 read, the fp8
    copy and its transpose written (1 + 1); with it cast_to_fp8 (2 + 1) forward and fp8_transpose (1 + 1) in the
    backward for the wgrad GEMM."""
    fp8 = dict(TINY, precision="fp8-tensorwise", activation_kernel="megatron", fp8_weight_cache=True)
    swiglu = ScaleConfig(**fp8, mlp_kind="swiglu")
    assert activation_bytes_kernels(swiglu) == {"forward": (N * (6 + 4), 2), "backward": (N * 10, 1)}
    sp = ScaleConfig(**fp8, mlp_kind="swiglu", sp=True)
    assert activation_bytes_kernels(sp) == {"forward": (N * (6 + 3), 2), "backward": (N * (10 + 2), 2)}
    gelu = ScaleConfig(**fp8)
    assert activation_bytes_kernels(gelu) == {"forward": (N * (4 + 4), 2), "backward": (N * 6, 1)}


def test_fc2s_input_cast_is_tes_only_on_tes_stack():
    """Each cast priced once: TE's cast of fc2's input is added only where :mod:`.te_amax` takes the program's
    amax-and-cast kernel out (TE's stack, per-tensor). Under the row-wise recipe, or torchao's tensorwise scaling
    without TE's kept copies, the program's kernel stands and the activation is bias_gelu's alone: 4 bytes forward,
    6 backward, one kernel each."""
    fp8 = dict(TINY, precision="fp8-tensorwise", activation_kernel="megatron")
    gelu_only = {"forward": (N * 4, 1), "backward": (N * 6, 1)}
    for cfg in (ScaleConfig(**fp8), ScaleConfig(**dict(fp8, precision="fp8-rowwise")),
                ScaleConfig(**dict(fp8, precision="fp8-rowwise"), fp8_weight_cache=True)):
        assert activation_bytes_kernels(cfg) == gelu_only, cfg
    delayed = ScaleConfig(**fp8, fp8_weight_cache=True, fp8_amax_history=16)
    assert activation_bytes_kernels(delayed) == {"forward": (N * (4 + 4), 2), "backward": (N * 6, 1)}


def test_under_te_current_scaling_fc2s_input_is_amax_scale_and_cast_with_its_transpose():
    """TE 2.9's current scaling (history 1, Megatron-Bridge's FP8-CS): Float8CurrentScalingQuantizer::quantize_impl
    runs nvte_compute_amax (read 2), nvte_compute_scale_from_amax (a kernel, no tensor bytes) and the cast; fc2 is a
    row-parallel Linear, which gathers no input, so the cast writes the fp8 copy and its transpose (2 read, 1 + 1)
    with or without sequence parallelism, and the backward transposes nothing. SwiGLU: 6 + 2 + 4 forward in 4
    kernels, 10 backward in 1; GELU: 4 + 2 + 4 forward."""
    fp8 = dict(TINY, precision="fp8-tensorwise", activation_kernel="megatron", fp8_weight_cache=True,
               fp8_amax_history=1)
    want = {"forward": (N * (6 + 2 + 4), 4), "backward": (N * 10, 1)}
    assert activation_bytes_kernels(ScaleConfig(**fp8, mlp_kind="swiglu")) == want
    assert activation_bytes_kernels(ScaleConfig(**fp8, mlp_kind="swiglu", sp=True)) == want
    assert activation_bytes_kernels(ScaleConfig(**fp8)) == {"forward": (N * (4 + 2 + 4), 4), "backward": (N * 6, 1)}


def test_nemos_squared_relu_is_its_eager_kernels_whole():
    """relu (2 + 2) and pow (2 + 2): 8 bytes in 2 kernels; backward: self.pow(1)'s copy (2 + 2), 2 * it (2 + 2),
    grad * it (4 + 2), threshold_backward (4 + 2): 20 bytes in 4. Whatever activation_kernel says."""
    for kernel in ("compiled", "megatron"):
        cfg = ScaleConfig(**TINY, activation="squared-relu", activation_kernel=kernel)
        assert activation_bytes_kernels(cfg) == {"forward": (N * 8, 2), "backward": (N * 20, 4)}


def test_the_kernels_replace_what_the_compiled_model_charged_in_every_layer_and_micro_batch():
    """4 layers on one stage, 2 micro-batches of b 1, s 32, ffn 256 on one device: 8192 elements a layer. The
    iteration's forward grows by 4 x 2 x (bias_gelu's seconds less the charged 3 us), its backward by 4 x 2 x
    (bias_gelu_back's less 5 us); full recompute runs the forward's kernels again; the compiled default keeps the
    charge (nothing added, nothing taken out)."""
    base = dict(TINY, t=1, micro_batch=1, global_batch=2)
    layer = stub_cost(forward=1e-3, backward=2e-3, act_s=by_phase(3e-6, 5e-6))
    plain = compose(ScaleConfig(**base), layer, A100)
    own = compose(ScaleConfig(**base, activation_kernel="megatron"), layer, A100)
    n = 32 * 256
    f = A100.memory_time(4 * n, kernels=1) - 3e-6
    b = A100.memory_time(6 * n, kernels=1) - 5e-6
    assert own.compute["forward"] - plain.compute["forward"] == pytest.approx(8 * f, rel=1e-9)
    assert own.compute["backward"] - plain.compute["backward"] == pytest.approx(8 * b, rel=1e-9)
    full = dict(base, recompute="full")
    assert (compose(ScaleConfig(**full, activation_kernel="megatron"), layer, A100).compute["recompute"]
            - compose(ScaleConfig(**full), layer, A100).compute["recompute"]) == pytest.approx(8 * f, rel=1e-9)
    assert plain.compute == compose(ScaleConfig(**base), stub_cost(forward=1e-3, backward=2e-3), A100).compute


@pytest.mark.parametrize("kind, phase", [("gelu", "recompute"), ("swiglu", "backward")])
def test_the_lowered_layers_activation_is_found_after_the_forward(kind, phase):
    """The layer's activation rows (scope act) keep their scope through JAX's remat and transposition: a small layer
    on H100 (its GEMMs memory-bound, so an epilogue's charge, its compute beyond the GEMM's, is 0 there) has the
    GELU recomputed before the backward in a kernel of its own, and SwiGLU's backward in kernels of their own: the
    charge is positive in that phase, and never above the layer's own time in any phase."""
    cfg = ScaleConfig(layers=1, hidden=256, heads=4, seq=256, vocab=128, mlp_kind=kind, micro_batch=2,
                      global_batch=2, attention="fused")
    cost = analyse_layer(cfg, H100)
    assert cost.act_s[phase] > 0.0, cost.act_s
    assert all(cost.act_s[ph] <= cost.time_s[ph] for ph in PH), (cost.act_s, cost.time_s)


def test_megatrons_kernels_are_refused_where_they_are_not_priced():
    assert "activation_kernel" in ScaleConfig(**TINY, activation_kernel="bias").invalid()
    eager = ScaleConfig(**TINY, activation_kernel="megatron", execution="eager", attention="fused")
    assert "compiled" in eager.invalid()
    assert ScaleConfig(**TINY, activation_kernel="megatron").invalid() is None
