"""torchtitan 9dec370's step memory at its peak (issue 38, item 4), worked out here from its code and PyTorch's:

* the loss, ``cross_entropy(pred.flatten(0, 1).float(), labels)`` eager with ``del pred`` before the backward:
  forward pred bf16 (2 N V) + its fp32 copy (4 N V) + log_softmax's output (4 N V); backward the saved output,
  nll_loss_backward's fp32 gradient and log_softmax_backward's fp32 result (4 N V each); N = b s / cp tokens;
* the root ``fully_shard(model)`` (tok_embeddings V x h, norm h, output V x h): fp32 shard + AdamW's two fp32 moments
  (12 bytes an element of each dim-0 shard, padded), its bf16 copy unsharded through the loss; the final RMSNorm's
  saved tensors (norms.py: x.float() for pow and mul 4 N h, rsqrt's result 4 N, the bf16 output for the weight's
  mul 2 N h, the product for the output linear 2 N h);
* FSDP2 keeps no bf16 shard (the fp32 shard is the optimizer's parameter), and at the loss only the last block (not
  resharded after forward) is gathered; no gradient exists yet (zero_grad set_to_none);
* op-level checkpointing keeps the block's input, the flash kernel's fp32 log-sum-exp and, eager, w2's output.

The expected numbers are closed forms computed in each test, not train-plan's own functions."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.memory import memory
from mhlo_cost.studies.plan.torch_peak import loss_peak_bytes, op_saved_extra

V, H, LAYERS = 128256, 4096, 32
#: torchtitan 2412's Table 1 row: Llama 3.1 8B, FSDP over 8 GPUs, local batch 2, seq 8192, op SAC, torch.compile
T1 = dict(layers=LAYERS, hidden=H, heads=32, kv_heads=8, ffn=14336, seq=8192, vocab=V, mlp_kind="swiglu",
          arch="llama", d=8, micro_batch=2, global_batch=16, zero=3, fsdp_version=2, recompute="op",
          attention="fused", execution="inductor", dropout=False, dp_overlap=True, loss_upcast=True)


def _cfg(**kw) -> ScaleConfig:
    cfg = ScaleConfig(**(T1 | kw))
    assert cfg.invalid() is None, cfg.invalid()
    return cfg


def _cost(saved: int, elems: int) -> LayerCost:
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero), dict(zero), saved_bytes=saved, input_bytes=saved // 7,
                     weight_elems=elems, weight_bytes=2 * elems, master_bytes=4 * elems, moment_bytes=8 * elems)


def test_loss_peak_is_three_fp32_logits_at_log_softmax_backward():
    n = 2 * 8192  # local batch x seq
    forward = 2 * n * V + 4 * n * V + 4 * n * V  # pred bf16, .float(), log_softmax's output
    backward = 4 * n * V * 3  # saved output, nll_loss's gradient, log_softmax_backward's result
    assert backward > forward
    assert loss_peak_bytes(_cfg()) == backward == 25_216_155_648  # 23.48 GiB
    # local batch 1 and seq 32k / cp on each GPU (Table 2): the same 32768 tokens at every cp
    for cp in (1, 2, 4, 8):
        cfg = _cfg(seq=32768 * cp, cp=cp, d=8 // cp, dp_shard=0, micro_batch=1, global_batch=8 // cp,
                   recompute="full", cp_comm="torch-allgather" if cp > 1 else "p2p")
        assert loss_peak_bytes(cfg) == 12 * 32768 * V


def test_op_policy_keeps_the_block_input_the_lse_and_eager_w2():
    n = 2 * 8192
    compiled = n * H * 2 + n * 32 * 4  # block input (bf16), flash log-sum-exp (fp32, 32 heads)
    assert op_saved_extra(_cfg()) == compiled
    assert op_saved_extra(_cfg(execution="eager", precision="bf16")) == compiled + n * H * 2  # w2's output
    assert op_saved_extra(_cfg(recompute="full")) == 0


def test_memory_at_the_loss_backward_of_the_t1_row():
    per_layer = 218_112_000  # wq, wo 4096^2, wk, wv 4096 x 1024, w1, w2, w3 4096 x 14336, two norms
    assert per_layer == 2 * H * H + 2 * H * 1024 + 3 * H * 14336 + 2 * H
    saved = 5 * 2 ** 30  # any program's saved bytes per layer
    cfg = _cfg()
    m = memory(cfg, _cost(saved, per_layer))
    n, head = 2 * 8192, 2 * V * H + H
    assert m["gradients"] == 0
    assert m["weights"] == 2 * per_layer + 2 * head  # the last block and the root, bf16, unsharded; no bf16 shard
    assert m["optimizer_state"] == 12 * per_layer * LAYERS // 8 + 12 * (2 * V * H // 8 + H // 8)
    assert m["activations"] == LAYERS * (saved + n * H * 2 + n * 32 * 4) + (4 + 2 + 2) * n * H + 4 * n + 12 * n * V
    assert m["total"] == m["weights"] + m["optimizer_state"] + m["activations"]
    assert m["loss_logits"] == 12 * n * V and m["head_weights"] == 2 * head


def test_head_shards_are_padded_by_dim_zero():
    cfg = _cfg(vocab=130, hidden=64, heads=4, kv_heads=4, ffn=128)  # 130 rows over 8: 17 a GPU; 64: 8
    m = memory(cfg, _cost(1000, 100))
    assert m["head_state"] == 12 * (17 * 64 * 2 + 8)


def test_without_the_flag_fsdp2_drops_only_the_bf16_shard():
    cost = _cost(1000, 800)
    two = memory(_cfg(loss_upcast=False), cost)
    one = memory(_cfg(loss_upcast=False, fsdp_version=1), cost)
    e = 2 * V * H  # one stage: the embedding and the untied LM head, counted as memory.embedding_state
    assert one["weights"] - two["weights"] == 2 * 800 * LAYERS // 8 + 2 * e // 8
    assert two["weights"] == 2 * 2 * 800  # two layers gathered (the running one and the prefetched)
    assert two["gradients"] == 4 * 800 * LAYERS // 8 + 4 * 800 + 4 * e // 8
    assert "loss_logits" not in two


@pytest.mark.parametrize("kw, why", [
    (dict(t=2), "no tensor or pipeline parallelism"), (dict(fsdp_version=1), "fsdp_version 2"),
    (dict(zero=1), "ZeRO 3"), (dict(p=2), "no tensor or pipeline parallelism"),
    (dict(experts=8, top_k=2, expert_ffn=1024), "a dense model"),
    (dict(global_batch=64), "one micro-batch a step, no gradient accumulation: got 4"),  # 64 / (2 x 8)
    (dict(tied_embedding=True), "untied tok_embeddings and output"),
])
def test_the_loss_is_refused_beyond_what_was_read(kw, why):
    """Each refusal names its own cause: t, p, FSDP1, ZeRO 1, experts, m = 4 micro-batches (torchtitan 9dec370's
    train.py has no gradient accumulation), a tied embedding (its Llama has two V x h matrices)."""
    why_not = ScaleConfig(**(T1 | kw)).invalid()
    assert why_not.startswith("loss_upcast") and why in why_not
    assert "loss_upcast" not in (ScaleConfig(**(T1 | kw | dict(loss_upcast=False))).invalid() or "")


def test_cli_refuses_the_loss_with_gradient_accumulation(capsys):
    from mhlo_cost.cli import main

    args = ["train-plan", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
            "-d", "2", "--global-batch", "4", "--fsdp", "--fsdp-version", "2", "--loss-upcast", "--no-cache"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error: ") and "loss_upcast" in err[0] and "got 2" in err[0]


def test_cli_prints_what_the_loss_adds(capsys):
    """A 2-layer model, d = 2, one micro-batch of 1 x 32 positions, vocab 128: the loss's 12 N V bytes
    (12 x 32 x 128 = 49,152 B = 0.00 GiB at two decimals) are printed by name under the memory line."""
    from mhlo_cost.cli import main

    args = ["train-plan", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
            "-d", "2", "--global-batch", "2", "--fsdp", "--fsdp-version", "2", "--loss-upcast", "--no-cache",
            "--recompute", "full"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "memory at the loss's backward" in out and "loss logits 0.00 GiB" in out and "head state" in out


def test_reshard_after_forward_off_keeps_every_layer_gathered_at_the_loss():
    """fully_shard(reshard_after_forward=False): every block stays gathered from its forward to its backward, so at
    the loss all 32 layers' bf16 weights are held, not only the last block's."""
    per_layer = 218_112_000
    m = memory(_cfg(reshard_after_forward=False), _cost(5 * 2 ** 30, per_layer))
    assert m["weights"] == LAYERS * 2 * per_layer + 2 * (2 * V * H + H)


def test_the_peak_is_the_larger_moment():
    """A small vocabulary (128) and large sharded gradients (1e9 elements a layer): the backward's end outweighs the
    loss's. Backward: two layers gathered (2 x 2 e), gradients 4 e L / 8 + 4 e (one unsharded) + the root's fp32
    gradient shard 4 x (16 x 64 x 2 + 8), state 12 e L / 8 + 12 x (16 x 64 x 2 + 8), the activations alone. The
    loss's moment (one layer gathered, no gradients, + the root's copy, the norm's 8 N h + 4 N, 12 N V) is less,
    and given as loss_total."""
    e, n, saved = 10 ** 9, 2 * 8192, 2 ** 20
    cfg = _cfg(vocab=128, hidden=64, heads=4, kv_heads=4, ffn=128)
    m = memory(cfg, _cost(saved, e))
    root = 16 * 64 * 2 + 8  # tok_embeddings and output 128 x 64 over 8 (16 rows), norm 64 over 8
    acts = LAYERS * (saved + n * 64 * 2 + n * 4 * 4)  # saved + block input + lse (4 heads)
    backward = 4 * e + (4 * e * LAYERS // 8 + 4 * e + 4 * root) + (12 * e * LAYERS // 8 + 12 * root) + acts
    at_loss = (2 * e + 2 * (2 * 128 * 64 + 64)) + (12 * e * LAYERS // 8 + 12 * root) + acts + 8 * n * 64 + 4 * n \
        + 12 * n * 128
    assert at_loss < backward
    assert m["total"] == backward and m["loss_total"] == at_loss and m["gradients"] > 0
