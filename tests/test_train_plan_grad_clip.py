"""Gradient clipping as each stack runs it (:mod:`mhlo_cost.studies.plan.grad_clip`), checked against closed forms
worked out here from the frameworks' code: the bytes the norm and the scale move over the gradients a rank holds,
their kernel launches, the scalar all-reduces (which ranks, how many bytes), and that ``clip_grad=None`` (the CLI's
``--clip-grad none``) removes all of it. Seconds come from the profile's memory model and the network model (not
under test here)."""
from __future__ import annotations

import pytest

from mhlo_cost.network import estimate, resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.grad_clip import clip_bytes, clip_groups, clip_kernels, clip_kind, clip_seconds

A100 = resolve_profile("dgx-a100")
TINY = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128)
PH = ("forward", "backward", "recompute", "optimizer")
#: apex / PyTorch multi_tensor_apply: 320 blocks of 2048 x 32 elements a launch, 110 tensors at depth 1
PER_LAUNCH = 320 * 65536


def _fake(w: int) -> LayerCost:
    zero = {p: 0 for p in PH}
    return LayerCost("k", "chip", dict(zero), dict(zero), {"forward": 1e-3, "backward": 2e-3, "recompute": 0.0,
                                                          "optimizer": 0.0}, weight_elems=w, weight_bytes=2 * w)


def test_each_stack_is_read_from_the_configuration():
    assert clip_kind(ScaleConfig(**TINY)) == "megatron"
    assert clip_kind(ScaleConfig(**TINY, d=2, global_batch=2, zero=1)) == "megatron"
    assert clip_kind(ScaleConfig(**TINY, zero=1, grad_accum_pass=True)) == "deepspeed"
    assert clip_kind(ScaleConfig(**TINY, d=2, global_batch=2, zero=3)) == "fsdp1"
    assert clip_kind(ScaleConfig(**TINY, d=2, global_batch=2, zero=3, fsdp_version=2)) == "fsdp2"
    assert clip_kind(ScaleConfig(**TINY, d=2, global_batch=2, zero=3, nccl_ub=True)) == "megatron"
    assert clip_kind(ScaleConfig(**TINY, d=2, global_batch=2, zero=1, dist_optimizer="apex")) == "apex"


def test_megatron_reads_the_fp32_main_gradients_once_and_skips_the_tied_head_copy():
    """Megatron-LM without the distributed optimizer, t 2 x p 2 x d 2, tied embedding: a stage of 10**8 gradient
    elements (a V/t x h = 64 x 64 = 4096 of them the embedding or head). multi_tensor_l2norm reads 4 bytes an
    element: 4 x 10**8 on the first stage; the last stage's tied head copy is shared and skipped: 4 x (10**8 - 4096).
    Launches: ceil(10**8 / 20,971,520) = 5, plus the cleanup and the ** 2: 7. No scale (the data-dependent branch
    taken as not run). The all-reduce: the model-parallel group, tensor x pipeline ranks {0, 1, 4, 5} (the next
    stage is t x d = 4 ranks on), one fp32 scalar."""
    cfg = ScaleConfig(**TINY, t=2, p=2, d=2, global_batch=2, tied_embedding=True, clip_grad=1.0)
    n = 10 ** 8
    assert clip_bytes(cfg, n, 4096) == {"norm": 4 * n, "scale": 0}
    assert clip_bytes(cfg, n, 4096, last=True) == {"norm": 4 * (n - 4096), "scale": 0}
    assert clip_kernels(cfg, n, 25) == {"norm": 5 + 2, "scale": 0}
    assert clip_groups(cfg) == ((0, 1, 4, 5),)
    # fp16 (2-byte gradients reduced): the norm still reads the optimizer's fp32 copies
    assert clip_bytes(ScaleConfig(**{**cfg.__dict__, "grad_reduce_fp32": False}), n) == {"norm": 4 * n, "scale": 0}


def test_megatrons_distributed_optimizer_reads_its_shard_and_reduces_over_the_world():
    """ZeRO 1 over d 4 x cp 2 (t 2, p 1: 16 GPUs): the norm over the rank's ceil(10**8 / 8) = 12,500,000 main
    gradients, 4 bytes each; the all-reduce over all 16 ranks (get_model_parallel_group returns None: the world)."""
    cfg = ScaleConfig(**dict(TINY, seq=64), t=2, cp=2, d=4, global_batch=4, zero=1, clip_grad=1.0)
    assert clip_bytes(cfg, 10 ** 8) == {"norm": 4 * 12_500_000, "scale": 0}
    assert clip_kernels(cfg, 10 ** 8, 49)["norm"] == 1 + 2  # one launch: 12.5M elements, ceil(49 / 8) tensors
    assert clip_groups(cfg) == (tuple(range(16)),)


def test_deepspeeds_bf16_optimizer_norms_every_fp32_gradient_tensor_of_the_whole_model():
    """DeepSpeed's BF16 optimizer (ZeRO 1, d 2): get_grads_for_norm returns the whole fp32 gradients, not the
    partition: 4 bytes x 10**8; one norm kernel per tensor (30); the FloatTensor all-reduced over tensor x pipeline
    ranks (t 2, p 2, d 2: {0, 1, 4, 5}); no scale."""
    cfg = ScaleConfig(**TINY, t=2, p=2, d=2, global_batch=2, zero=1, grad_accum_pass=True, clip_grad=1.0)
    assert clip_bytes(cfg, 10 ** 8) == {"norm": 4 * 10 ** 8, "scale": 0}
    assert clip_kernels(cfg, 10 ** 8, 30) == {"norm": 30, "scale": 0}
    assert clip_groups(cfg) == ((0, 1, 4, 5),)


def test_apex_distributed_fused_adam_norms_its_shard_in_grad_sync_dtype_and_folds_the_clip_into_adam():
    """NeMo 24.07's distributed_fused_adam, ZeRO 1 over d 4 x cp 2 (t 2: 16 GPUs): multi_tensor_l2norm over the
    rank's ceil(10**8 / 8) = 12,500,000 gradient elements in grad_sync_dtype (fp32: 4 bytes; bf16: 2); no scale pass
    (clip_coef multiplies Adam's _grad_scale); launches: one (12.5M elements, ceil(49 / 8) tensors) and 9 scalar
    kernels (cleanup, ** 2, sqrt, two norm x grad_scale, +, /, clamp, *=); the all-reduce has no group: all 16."""
    kw = dict(dict(TINY, seq=64), t=2, cp=2, d=4, global_batch=4, zero=1, dist_optimizer="apex", clip_grad=1.0)
    cfg = ScaleConfig(**kw)
    assert clip_bytes(cfg, 10 ** 8) == {"norm": 4 * 12_500_000, "scale": 0}
    assert clip_bytes(ScaleConfig(**kw, grad_reduce_fp32=False), 10 ** 8) == {"norm": 2 * 12_500_000, "scale": 0}
    assert clip_kernels(cfg, 10 ** 8, 49) == {"norm": 1 + 9, "scale": 0}
    assert clip_groups(cfg) == (tuple(range(16)),)
    assert "dist_optimizer" in ScaleConfig(**TINY, dist_optimizer="apex").invalid()
    assert "dist_optimizer" in ScaleConfig(**TINY, d=2, global_batch=2, zero=1, dist_optimizer="x").invalid()


def test_deepspeed_takes_the_norm_whatever_clip_grad_is():
    """BF16_Optimizer.step computes get_global_norm_of_tensors every step and clips only where clip_grad > 0: with
    clip_grad None the same 4 x 10**8 bytes, 30 kernels and model-parallel all-reduce ({0, 1, 4, 5}); the step's
    clip seconds the same as at 1.0 (the scale is not priced either way)."""
    kw = dict(TINY, t=2, p=2, d=2, global_batch=2, zero=1, grad_accum_pass=True)
    off, on = ScaleConfig(**kw, clip_grad=None), ScaleConfig(**kw, clip_grad=1.0)
    assert clip_bytes(off, 10 ** 8) == {"norm": 4 * 10 ** 8, "scale": 0}
    assert clip_kernels(off, 10 ** 8, 30) == {"norm": 30, "scale": 0}
    assert clip_groups(off) == ((0, 1, 4, 5),)
    assert clip_seconds(off, A100, 10 ** 8, 2) == clip_seconds(on, A100, 10 ** 8, 2) > 0


def test_torchtitan_norms_and_scales_its_shard_always_and_reduces_over_each_sharded_mesh_dimension():
    """FSDP2 over 4 ranks (t 2, p 2, d 4: 16 GPUs), fp32 gradients: _foreach_norm reads 4 x ceil(10**8 / 4)
    bytes; clip_grads_with_norm_'s _foreach_mul_ reads and writes them, always: 8 x 25,000,000. Launches: ceil(25M /
    20,971,520) = 2 each, the norm's cleanup, stack and vector_norm (+3), the scale's +, / and clamp (+3). The
    all-reduces: the FSDP dimension (ranks 0, 2, 4, 6: the tensor rank fixed), the tensor dimension (0, 1) and the
    pipeline mesh (0 and 8: t x d = 8 ranks a stage)."""
    cfg = ScaleConfig(**TINY, t=2, p=2, d=4, global_batch=4, zero=3, fsdp_version=2, clip_grad=1.0)
    assert clip_bytes(cfg, 10 ** 8) == {"norm": 4 * 25_000_000, "scale": 8 * 25_000_000}
    assert clip_kernels(cfg, 10 ** 8, 20) == {"norm": 2 + 3, "scale": 2 + 3}
    assert clip_groups(cfg) == ((0, 2, 4, 6), (0, 1), (0, 8))
    assert clip_kernels(cfg, 10 ** 4, 300)["norm"] == 3 + 3  # 300 tensors: ceil(300 / 110) launches
    # HSDP: shard over 2 of the 4, the replicas hold the same norm: the FSDP dimension is ranks 0 and 2
    hsdp = ScaleConfig(**TINY, d=4, global_batch=4, zero=3, fsdp_version=2, dp_shard=2, clip_grad=1.0)
    assert clip_groups(hsdp) == ((0, 1),) and clip_bytes(hsdp, 10 ** 8)["norm"] == 4 * 50_000_000


def test_fsdp1_clips_per_tensor_over_the_sharding_group_only():
    """FSDP1's clip_grad_norm_ (Composer): a vector_norm and a mul_ per sharded gradient (20 tensors: 20 + 3 and
    20 + 4 launches), 4 + 8 bytes a shard element over ceil(10**8 / 8); one all-reduce over the FSDP process group
    (the 8 ranks)."""
    cfg = ScaleConfig(**TINY, d=8, global_batch=8, zero=3, clip_grad=1.0)
    assert clip_bytes(cfg, 10 ** 8) == {"norm": 4 * 12_500_000, "scale": 8 * 12_500_000}
    assert clip_kernels(cfg, 10 ** 8, 20) == {"norm": 23, "scale": 24}
    assert clip_groups(cfg) == (tuple(range(8)),)


def test_fsdp_clips_the_sharded_gradient_at_the_fp32_parameters_dtype_whatever_the_reduction_dtype():
    """Composer's PURE (bf16 reduce-scatter: grad_reduce_fp32 False) and FSDP2 alike: FSDP casts the reduced shard
    back to the parameter's dtype (_cast_grad_to_param_dtype), fp32: the norm reads 4 bytes a shard element and the
    mul_ 4 + 4, not 2 and 2 + 2. FSDP1 over d 8: ceil(10**8 / 8) = 12,500,000; FSDP2 over d 4: 25,000,000."""
    pure = ScaleConfig(**TINY, d=8, global_batch=8, zero=3, grad_reduce_fp32=False, clip_grad=1.0)
    assert clip_bytes(pure, 10 ** 8) == {"norm": 4 * 12_500_000, "scale": 8 * 12_500_000}
    two = ScaleConfig(**TINY, d=4, global_batch=4, zero=3, fsdp_version=2, grad_reduce_fp32=False, clip_grad=1.0)
    assert clip_bytes(two, 10 ** 8) == {"norm": 4 * 25_000_000, "scale": 8 * 25_000_000}


LLAMA = dict(TINY, layers=32, arch="llama", mlp_kind="swiglu", ffn=192)


def _seconds(cfg, norm: int, norm_k: int, scale: int, scale_k: int, groups) -> float:
    out = A100.memory_time(norm, kernels=norm_k) + (A100.memory_time(scale, kernels=scale_k) if scale else 0.0)
    return out + sum(estimate(A100.topology, "all_reduce", 4, (g,)).time_s for g in groups)


def test_torchtitans_llama_block_is_nine_gradient_tensors_through_clip_seconds():
    """torchtitan's Llama block (9dec370 model.py): wq, wk, wv, wo, w1, w2, w3 and two norms: 32 layers and the
    untied embedding and head (2 x 128 x 64: 2 tensors) are 290 tensors, ceil(290 / 110) = 3 _foreach_norm and
    _foreach_mul_ launches each (Megatron's 6 a layer would give 194: 2). FSDP2 over d 4: the shard of 10**6
    elements is 250,000, 4 bytes read by the norm, 4 + 4 by the mul; 3 + 3 kernels each; one all-reduce over
    ranks 0-3."""
    cfg = ScaleConfig(**LLAMA, d=4, global_batch=4, zero=3, fsdp_version=2, clip_grad=1.0)
    want = _seconds(cfg, 4 * 250_000, 6, 8 * 250_000, 6, ((0, 1, 2, 3),))
    assert clip_seconds(cfg, A100, 10 ** 6, 32, 2 * 128 * 64) == pytest.approx(want, rel=1e-12)
    two = _seconds(cfg, 4 * 250_000, 5, 8 * 250_000, 5, ((0, 1, 2, 3),))
    assert clip_seconds(cfg, A100, 10 ** 6, 32, 2 * 128 * 64) > two


def test_the_last_stage_skips_the_tied_head_for_deepspeed_and_not_for_fsdp_through_clip_seconds():
    """DeepSpeed's BF16 optimizer, p 2, t 1, d 2, tied embedding, a stage of 4 gelu layers (12 tensors each) and the
    head's 128 x 64 = 8192: the first stage norms 10**6 elements in 48 + 1 kernels, the last skips the shared head:
    10**6 - 8192 elements in 48 kernels; the all-reduce over the pipeline ranks 0 and 2. FSDP1 (d 4, p 1, tied):
    the last stage norms and scales its whole shard, ceil(10**6 / 4) x (4, 8) bytes, 48 + 1 + 3 and + 4 kernels."""
    ds = ScaleConfig(**TINY, p=2, d=2, global_batch=2, zero=1, grad_accum_pass=True, tied_embedding=True)
    head = 128 * 64
    assert clip_seconds(ds, A100, 10 ** 6, 4, head) == pytest.approx(
        _seconds(ds, 4 * 10 ** 6, 49, 0, 0, ((0, 2),)), rel=1e-12)
    assert clip_seconds(ds, A100, 10 ** 6, 4, head, last=True) == pytest.approx(
        _seconds(ds, 4 * (10 ** 6 - head), 48, 0, 0, ((0, 2),)), rel=1e-12)
    fs = ScaleConfig(**TINY, d=4, global_batch=4, zero=3, tied_embedding=True, clip_grad=1.0)
    assert clip_seconds(fs, A100, 10 ** 6, 4, head, last=True) == pytest.approx(
        _seconds(fs, 4 * 250_000, 49 + 3, 8 * 250_000, 49 + 4, ((0, 1, 2, 3),)), rel=1e-12)


def test_no_clip_removes_it_and_the_step_grows_by_its_passes_and_all_reduce():
    """One stage of 4 layers of 10**6 weights and the untied embedding and head (2 x 128 x 64), Megatron-LM with
    t 2 (the tensor pair all-reduces a 4-byte scalar): the step grows by the norm's 4 bytes an element in
    ceil(4,008,192 / 20,971,520) + 2 = 3 launches and that all-reduce; clip_grad None adds nothing."""
    base = dict(TINY, t=2, micro_batch=1, global_batch=1)
    layer = _fake(10 ** 6)
    plain, none = compose(ScaleConfig(**base), layer, A100), ScaleConfig(**base, clip_grad=None)
    clipped = compose(ScaleConfig(**base, clip_grad=1.0), layer, A100)
    elems = 4 * 10 ** 6 + 2 * 64 * 64
    want = A100.memory_time(4 * elems, kernels=3) + estimate(A100.topology, "all_reduce", 4, ((0, 1),)).time_s
    assert clipped.optimizer - plain.optimizer == pytest.approx(want, rel=1e-9)
    assert clipped.total - plain.total == pytest.approx(want, rel=1e-9)
    assert compose(none, layer, A100).total == plain.total
    assert clip_bytes(none, elems) == {"norm": 0, "scale": 0} and clip_groups(none) == ()


def test_a_max_norm_must_be_positive():
    assert "clip_grad" in ScaleConfig(**TINY, clip_grad=0.0).invalid()
    assert "clip_grad" in ScaleConfig(**TINY, clip_grad=-1.0).invalid()
    for bad in (True, float("inf"), float("nan"), "1.0"):
        assert "clip_grad" in ScaleConfig(**TINY, clip_grad=bad).invalid(), bad
    assert ScaleConfig(**TINY, clip_grad=2).invalid() is None
    assert ScaleConfig(**TINY, clip_grad=0.5).invalid() is None


def test_the_command_line_clips_at_1_by_default_and_none_removes_it(capsys):
    """``--clip-grad`` on train-plan: not given, the stacks' 1.0 (the step larger than with ``none``, by the norm's
    4 bytes over the rank's 4 layers and the untied embedding and head of 128/2 x 64 each); 2.0 prices the same
    passes as 1.0 (the max norm only decides the data-dependent scale); a bad value is one error line, exit 2."""
    pytest.importorskip("optax")
    import json

    from mhlo_cost.cli import main

    args = ["train-plan", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
            "--global-batch", "8", "-t", "2", "--format", "json", "--no-cache"]
    step = {}
    for value in (None, "none", "2.0"):
        assert main(args + (["--clip-grad", value] if value else [])) == 0
        step[value] = json.loads(capsys.readouterr().out)["config"]["optimizer_s"]
    assert step[None] > step["none"] and step[None] == step["2.0"]
    for bad in ("0", "-1", "inf", "max"):
        assert main(args + ["--clip-grad", bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("mhlo-cost: error:") and "--clip-grad" in err and err.count("\n") == 1, bad


def test_the_command_line_names_apexs_distributed_optimizer(capsys):
    """``--dist-optimizer apex`` reaches the plan with ``--zero 1`` (exit 0) and is refused without a sharded
    optimizer: one error line, exit 2 (Apex's DistributedFusedAdam always shards its state)."""
    pytest.importorskip("optax")
    from mhlo_cost.cli import main

    args = ["train-plan", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
            "--global-batch", "8", "-d", "2", "--format", "json", "--no-cache", "--dist-optimizer", "apex"]
    assert main(args + ["--zero", "1"]) == 0
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("mhlo-cost: error:") and "dist_optimizer apex" in err and err.count("\n") == 1
