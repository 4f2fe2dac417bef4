"""What Megatron-LM runs beside the layers (:mod:`mhlo_cost.studies.plan.megatron_passes`), checked against closed
forms worked out here from the framework's code: its vocabulary-parallel cross-entropy's kernels over the fp32
logits, the scatter/gather optimisation's all_gather of each received pipeline tensor, fp16's gradient copy and
unscale passes. Seconds come from the profile's own memory model and the network model (not under test here);
what is checked is which bytes, how many kernels and how many collectives each adds to the iteration."""
from __future__ import annotations

import pytest

from mhlo_cost.network import estimate, resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.megatron_passes import cross_entropy_bytes, gather_bytes

A100 = resolve_profile("dgx-a100")
TINY = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128)
PH = ("forward", "backward", "recompute", "optimizer")


def _fake(fwd: float, bwd: float, w: int, opt: float = 0.0, loss: tuple = (0.0, 0.0)) -> LayerCost:
    zero = {p: 0 for p in PH}
    return LayerCost("k", "chip", dict(zero), dict(zero),
                     {"forward": fwd, "backward": bwd, "recompute": 0.0, "optimizer": opt},
                     weight_elems=w, weight_bytes=2 * w,
                     loss_s={"forward": loss[0], "backward": loss[1], "recompute": 0.0, "optimizer": 0.0})


def test_megatrons_cross_entropy_moves_38_bytes_a_logit_forward_and_14_backward():
    """b 2, s 32, V 128 over t 2: 2 x 32 x 64 = 4096 logits. Forward: the fp32 cast (2 read, 4 written), max (4),
    sub_ (4 + 4), exp (4 + 4), sum (4), div_ (4 + 4) = 38 bytes in 6 kernels; backward: mul_ (4 + 4) and the cast
    back (4 + 2) = 14 bytes in 2 kernels."""
    cfg = ScaleConfig(**TINY, t=2, micro_batch=2, global_batch=2)
    assert cross_entropy_bytes(cfg) == {"forward": (4096 * 38, 6), "backward": (4096 * 14, 2)}
    # context parallelism: the device's logits are its s/cp positions'; sequence parallelism: the whole local seq
    cp = ScaleConfig(**TINY, cp=2, d=2, micro_batch=2, global_batch=4)
    assert cross_entropy_bytes(cp)["forward"] == (2 * 16 * 128 * 38, 6)
    sp = ScaleConfig(**TINY, t=2, sp=True, micro_batch=2, global_batch=2)
    assert cross_entropy_bytes(sp) == cross_entropy_bytes(cfg)


def test_megatron_cores_fused_cross_entropy_moves_22_bytes_a_logit_forward_and_10_backward():
    """Megatron-Core's cross_entropy_loss_fusion (fused_cross_entropy.py, each jit_fuser function one compiled
    kernel): b 2, s 32, V 128 over t 2 = 4096 logits. Forward: calculate_logits_max reads the bf16 logits (2) and
    returns their fp32 copy (4); calculate_predicted_logits reads it (4) and writes exp back in place (4);
    calculate_cross_entropy_loss's div_ (4 + 4): 22 bytes in 3 kernels. Backward: calculate_gradients reads the
    softmax (4), writes it back mutated (4) and returns the bf16 gradient (2): 10 bytes in 1 kernel. Against the
    unfused kernels (38 and 14 bytes in 6 and 2), 20 bytes a logit fewer."""
    cfg = ScaleConfig(**TINY, t=2, micro_batch=2, global_batch=2, cross_entropy="megatron-fused")
    assert cross_entropy_bytes(cfg) == {"forward": (4096 * 22, 3), "backward": (4096 * 10, 1)}
    eager = cross_entropy_bytes(ScaleConfig(**TINY, t=2, micro_batch=2, global_batch=2, cross_entropy="megatron"))
    assert sum(b for b, _ in eager.values()) - sum(b for b, _ in cross_entropy_bytes(cfg).values()) == 4096 * 20
    assert cfg.invalid() is None


def test_the_heads_own_loss_is_replaced_by_megatron_cores_fused_kernels():
    """As the eager kernels: the head program's loss seconds out, the fused kernels' (22 and 10 bytes a logit, 3
    and 1 launches on the profile's memory model) in; b 1, s 32, V 128: 4096 logits."""
    base = dict(TINY, micro_batch=1, global_batch=1)
    layer, head = _fake(1e-3, 2e-3, 1000), _fake(5e-4, 9e-4, 0, loss=(1e-4, 2e-4))
    fused = compose(ScaleConfig(**base), layer, A100, head)
    mcore = compose(ScaleConfig(**base, cross_entropy="megatron-fused"), layer, A100, head)
    n = 32 * 128
    ce_f, ce_b = A100.memory_time(22 * n, kernels=3), A100.memory_time(10 * n, kernels=1)
    assert mcore.compute["forward"] - fused.compute["forward"] == pytest.approx(ce_f - 1e-4, rel=1e-9)
    assert mcore.compute["backward"] - fused.compute["backward"] == pytest.approx(ce_b - 2e-4, rel=1e-9)


def test_the_heads_own_loss_is_replaced_by_megatrons_kernels():
    """One stage, one micro-batch: the iteration with ``cross_entropy="megatron"`` is the fused one less the head
    program's loss seconds plus the eager kernels' (b 1, s 32, V 128: 4096 logits), forward and backward."""
    base = dict(TINY, micro_batch=1, global_batch=1)
    layer, head = _fake(1e-3, 2e-3, 1000), _fake(5e-4, 9e-4, 0, loss=(1e-4, 2e-4))
    fused = compose(ScaleConfig(**base), layer, A100, head)
    eager = compose(ScaleConfig(**base, cross_entropy="megatron"), layer, A100, head)
    n = 32 * 128
    ce_f, ce_b = A100.memory_time(38 * n, kernels=6), A100.memory_time(14 * n, kernels=2)
    assert ce_f > 0 and ce_b > 0
    assert eager.compute["forward"] - fused.compute["forward"] == pytest.approx(ce_f - 1e-4, rel=1e-9)
    assert eager.compute["backward"] - fused.compute["backward"] == pytest.approx(ce_b - 2e-4, rel=1e-9)
    assert eager.total - fused.total == pytest.approx(ce_f - 1e-4 + ce_b - 2e-4, rel=1e-9)


def test_each_received_pipeline_tensor_is_all_gathered_over_the_tensor_group_with_scatter_gather():
    """t 2, p 2, 4 micro-batches of b 2, s 32, h 64: each micro-batch a device receives one activation and one
    gradient. Scatter/gather on (Megatron-LM 2021): each sends 1/t of b s h bf16 = 4096 bytes and is rebuilt by an
    all_gather of the whole 8192 bytes over the 2 tensor ranks; p2p = (m + p - 1) x 2 x (send + gather). Off (the
    default, Megatron-Core's p2p_communication): the whole 8192 bytes sent, nothing gathered. With sequence
    parallelism: the s/t shard of 4096 bytes sent, no gather, whichever the flag."""
    fake = _fake(1e-3, 2e-3, 1000)
    cfg = ScaleConfig(**TINY, t=2, p=2, micro_batch=2, global_batch=8, scatter_gather=True)
    assert gather_bytes(cfg) == 2 * 32 * 64 * 2 == 8192
    send = estimate(A100.topology, "collective_permute", 4096, ((0, 2),)).time_s
    whole = estimate(A100.topology, "collective_permute", 8192, ((0, 2),)).time_s
    gather = estimate(A100.topology, "all_gather", 8192, ((0, 1),)).time_s
    assert send > 0 and gather > 0 and whole > send
    it = compose(cfg, fake, A100)
    assert it.p2p == pytest.approx((4 + 1) * 2 * (send + gather), rel=1e-9)
    assert it.counts["p2p_bytes"] == 4096
    off = ScaleConfig(**TINY, t=2, p=2, micro_batch=2, global_batch=8)
    assert gather_bytes(off) == 0
    it_off = compose(off, fake, A100)
    assert it_off.p2p == pytest.approx((4 + 1) * 2 * whole, rel=1e-9)
    assert it_off.counts["p2p_bytes"] == 8192
    for flag in (False, True):
        sp = ScaleConfig(**TINY, t=2, p=2, sp=True, micro_batch=2, global_batch=8, scatter_gather=flag)
        assert gather_bytes(sp) == 0
        assert compose(sp, fake, A100).p2p == pytest.approx((4 + 1) * 2 * send, rel=1e-9)
    one_stage = ScaleConfig(**TINY, t=2, micro_batch=2, global_batch=2, scatter_gather=True)
    assert gather_bytes(one_stage) == 0  # one stage: no p2p


def test_fp16s_loss_scaling_adds_16_bytes_a_weight_with_fp16_main_gradients_and_10_with_fp32():
    """One stage of 4 GPT layers (12 parameter tensors each: two LayerNorms, four linears, a weight and a bias each)
    of 1000 weights and the tied embedding (V 128 x h 64 = 8192, one tensor). fp16 main gradients: the copy to fp32
    (2 + 4, one ``.float()`` per tensor: 49), unscale (4 + 4, one foreach call), Adam's wider gradient read (+2, one)
    = 16 bytes a weight in 51 kernels; fp32 main gradients (the default): ``.float()`` is the tensor itself, 10 bytes
    in 2 kernels. Sharded (ZeRO 1 over 4 ranks): a quarter of the weights, the same tensors."""
    base = dict(TINY, micro_batch=1, global_batch=1, tied_embedding=True)
    layer = _fake(1e-3, 2e-3, 1000, opt=1e-4)
    elems = 4 * 1000 + 128 * 64
    for fp32, per, kernels in ((False, 16, 4 * 12 + 1 + 2), (True, 10, 2)):
        cfg = dict(base, grad_reduce_fp32=fp32)
        plain = compose(ScaleConfig(**cfg), layer, A100)
        scaled = compose(ScaleConfig(**cfg, loss_scale=True), layer, A100)
        want = A100.memory_time(per * elems, kernels=kernels)
        assert scaled.optimizer - plain.optimizer == pytest.approx(want, rel=1e-9), fp32
        assert scaled.total - plain.total == pytest.approx(scaled.optimizer - plain.optimizer, rel=1e-9)
        z = dict(cfg, d=4, global_batch=4, zero=1)
        diff = compose(ScaleConfig(**z, loss_scale=True), layer, A100).optimizer - compose(ScaleConfig(**z), layer,
                                                                                           A100).optimizer
        assert diff == pytest.approx(A100.memory_time(per * (elems // 4), kernels=kernels), rel=1e-9)
    assert A100.memory_time(16 * elems, kernels=51) != A100.memory_time(10 * elems, kernels=2)


def test_an_unknown_cross_entropy_is_refused():
    assert "cross_entropy" in ScaleConfig(**TINY, cross_entropy="apex").invalid()
    assert ScaleConfig(**TINY, cross_entropy="megatron").invalid() is None
    assert ScaleConfig(**TINY, cross_entropy="megatron-fused").invalid() is None


def test_the_main_grad_hook_adds_each_micro_batchs_gradients_once_per_micro_batch():
    """Local DDP before gradient-accumulation fusion, fp16 main gradients (grad_bytes 2): each of 3 micro-batches
    reads and writes main_grad (2 + 2) and reads the new gradient (2): 6 bytes a weight, over the stage's 4 layers
    of 1000 and the tied embedding's 128 x 64, the hook once per parameter tensor: 12 a GPT layer (two LayerNorms,
    four linears, a weight and a bias each) and 1 for the embedding; fp32 main gradients: 10 bytes. A SwiGLU layer
    (RMSNorms, bias-free fused linears) has 6 tensors. The iteration grows by the three passes (one stage: they are
    on the critical path)."""
    base = dict(TINY, micro_batch=1, global_batch=3, tied_embedding=True, grad_reduce_fp32=False)
    layer = _fake(1e-3, 2e-3, 1000)
    plain = compose(ScaleConfig(**base), layer, A100)
    hook = compose(ScaleConfig(**base, main_grad_add=True), layer, A100)
    elems = 4 * 1000 + 128 * 64
    one = A100.memory_time(6 * elems, kernels=4 * 12 + 1)
    assert hook.compute["backward"] - plain.compute["backward"] == pytest.approx(3 * one, rel=1e-9)
    assert hook.total - plain.total == pytest.approx(3 * one, rel=1e-9)
    fp32 = dict(base, grad_reduce_fp32=True)
    diff = (compose(ScaleConfig(**fp32, main_grad_add=True), layer, A100).total
            - compose(ScaleConfig(**fp32), layer, A100).total)
    assert diff == pytest.approx(3 * A100.memory_time(10 * elems, kernels=49), rel=1e-9)
    swi = dict(base, mlp_kind="swiglu")
    diff = (compose(ScaleConfig(**swi, main_grad_add=True), layer, A100).total
            - compose(ScaleConfig(**swi), layer, A100).total)
    assert diff == pytest.approx(3 * A100.memory_time(6 * elems, kernels=4 * 6 + 1), rel=1e-9)


def test_megatrons_own_passes_are_refused_with_experts_until_the_moe_plan_prices_them():
    moe = dict(TINY, experts=4, top_k=2, expert_ffn=64, shared_experts=1)
    assert ScaleConfig(**moe).invalid() is None
    for extra in (dict(cross_entropy="megatron"), dict(loss_scale=True), dict(main_grad_add=True),
                  dict(scatter_gather=True)):
        assert "not planned with experts" in ScaleConfig(**moe, **extra).invalid(), extra


def test_the_main_grad_hook_is_refused_beside_a_separate_accumulation_pass_and_with_fsdp():
    """The hook is the accumulation: with DeepSpeed's separate pass it would be counted twice; FSDP (zero 3) keeps
    no whole main_grad per rank. Alone, and with ZeRO 1, it runs."""
    base = dict(TINY, d=2, micro_batch=1, global_batch=2, main_grad_add=True)
    assert ScaleConfig(**base).invalid() is None
    assert ScaleConfig(**base, zero=1).invalid() is None
    assert "both accumulate" in ScaleConfig(**base, grad_accum_pass=True).invalid()
    assert "zero 3" in ScaleConfig(**base, zero=3).invalid()
    assert ScaleConfig(**dict(base, main_grad_add=False), zero=3).invalid() is None


def test_squared_relu_is_refused_beside_a_gated_mlp():
    assert "activation" in ScaleConfig(**TINY, mlp_kind="swiglu", activation="squared-relu").invalid()
    assert "activation" in ScaleConfig(**TINY, activation="relu").invalid()
    assert ScaleConfig(**TINY, activation="squared-relu").invalid() is None


def test_pytorch_ddps_bucket_copies_move_8_bytes_a_weight_once_an_iteration():
    """--DDP-impl torch (no gradient_as_bucket_view): PyTorch's reducer copies each 2-byte gradient into its bucket
    scaled by 1/n (2 read, 2 written) and back after the all-reduce (2 + 2): 8 bytes a weight element, two launches
    per parameter tensor (12 a GPT layer, 1 for the tied embedding of V/t x h). One stage of 4 layers of 1000
    weights and the V x h = 128 x 64 embedding, 2 micro-batches: the copies run once, in the optimizer's figure
    (beside them, PyTorch DDP's buckets price the reduction: tests/test_train_plan_dp_overlap.py)."""
    base = dict(TINY, d=2, micro_batch=1, global_batch=4, dp_overlap=True, tied_embedding=True,
                grad_reduce_fp32=False)
    layer = _fake(1e-3, 2e-3, 1000)
    plain = compose(ScaleConfig(**base), layer, A100)
    ddp = compose(ScaleConfig(**base, torch_ddp=True), layer, A100)
    elems = 4 * 1000 + 128 * 64
    copies = A100.memory_time(8 * elems, kernels=2 * (4 * 12 + 1))
    assert ddp.total - plain.total - (ddp.dp_exposed - plain.dp_exposed) == pytest.approx(copies, rel=1e-9)
    assert ddp.optimizer - plain.optimizer == pytest.approx(copies, rel=1e-9)


def test_torch_ddp_is_refused_beside_zero_and_local_ddp():
    assert "torch_ddp" in ScaleConfig(**TINY, d=2, global_batch=2, zero=1, torch_ddp=True).invalid()
    assert "torch_ddp" in ScaleConfig(**TINY, d=2, global_batch=2, main_grad_add=True, torch_ddp=True).invalid()
    assert ScaleConfig(**TINY, d=2, global_batch=2, torch_ddp=True, grad_reduce_fp32=False).invalid() is None
    # Megatron-LM de7dc40 asserts local DDP wherever gradients are reduced in fp32
    assert "grad-reduce-in-bf16" in ScaleConfig(**TINY, d=2, global_batch=2, torch_ddp=True).invalid()
