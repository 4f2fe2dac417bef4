"""Validate mhlo_cost.studies.plan against Megatron-LM's published runs on Selene (Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", arXiv 2205.05198).

Table 5: end-to-end iteration time of the 22B, 175B, 530B and 1T GPT models with full recompute, and with
sequence parallelism + selective recompute (eight runs). Figure 1: per-GPU memory, parameters + optimizer
state and activations, without (tensor parallel only) and with sequence parallelism + selective recompute.
The configurations (tensor / pipeline / data degree, micro-batch, global batch, interleaving) and the
published figures are the paper's, as the Calculon repository transcribes them (validation/seqsel/,
models/, calculon/llm/validation.py); the model here is mhlo-cost's own.

Each model's per-device layer is lowered from shapes (one layer; the 1T model's too) and analysed once.
No efficiency factor is fitted: the GEMMs run at the a100-sxm-80gb profile's GEMM model (0.8 of the bf16
peak with wave quantization, data/hardware.toml), everything else on its roofline.

    PYTHONPATH=. python benchmarks/validate_megatron.py [--cache DIR]
"""
from __future__ import annotations

import argparse
import time

from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.config import model_config
from mhlo_cost.studies.plan.plan import plan

#: The loss as Megatron-LM of 2022 computes it: the logits cast to fp32 and its vocabulary-parallel cross-entropy's
#: separate kernels (megatron/core/tensor_parallel/cross_entropy.py; mhlo_cost.studies.plan.megatron_passes), and its
#: pipeline sends of 1/t all-gathered by the receiver without sequence parallelism (--scatter-gather-tensors-in-
#: pipeline, on by default in megatron/arguments.py then; megatron/p2p_communication.py overrides it with --sp), and its
#: activation as its own kernels (bias_gelu_fusion, on by default: arguments.py has only --no-bias-gelu-fusion;
#: megatron/model/fused_bias_gelu.py's bias_gelu and bias_gelu_back: mhlo_cost.studies.plan.mlp_activation).
#: Its CoreAttention's softmax and dropout: megatron/model/fused_softmax.py's scaled_upper_triang_masked_softmax
#: (causal, seq 2048) and torch's dropout (mhlo_cost.studies.plan.attention_kernels). Its gradient clipping at
#: --clip-grad's default 1.0 (megatron/arguments.py): megatron/optimizer/clip_grads.py's multi_tensor_l2norm over the
#: fp32 main gradients and the all-reduce over the model-parallel group (mhlo_cost.studies.plan.grad_clip).
MEGATRON_2022 = dict(cross_entropy="megatron", scatter_gather=True, activation_kernel="megatron",
                     attention_kernel="megatron", clip_grad=1.0)
RUNS = {  # Table 5 / Figure 1 configurations (Calculon's validation/seqsel/tab5 and fig1)
    "gpt-22b": dict(t=8, p=1, d=1, global_batch=4, micro_batch=4, interleave=1, **MEGATRON_2022),
    "gpt-175b": dict(t=8, p=8, d=1, global_batch=64, micro_batch=1, interleave=3, **MEGATRON_2022),
    "gpt-530b": dict(t=8, p=35, d=1, global_batch=280, micro_batch=1, interleave=3, **MEGATRON_2022),
    "gpt-1t": dict(t=8, p=64, d=1, global_batch=512, micro_batch=1, interleave=1, **MEGATRON_2022),
}
#: Table 5 iteration seconds: (full recompute, sequence parallel + selective recompute)
TABLE5 = {"gpt-22b": (1.42, 1.10), "gpt-175b": (18.13, 13.75), "gpt-530b": (49.05, 37.83),
          "gpt-1t": (94.42, 71.49)}
#: Figure 1 GiB per GPU: (parameters + optimizer state, activations without, activations with SP + selective)
FIGURE1 = {"gpt-22b": (45.5625, 59.25, 9.5625), "gpt-175b": (45.5625, 66.84375, 12.3515625),
           "gpt-530b": (31.640625, 114.0234375, 23.076171875), "gpt-1t": (32.958984375, 131.25, 26.5625)}
GIB = 2 ** 30


def _stats(errors: list[float]) -> str:
    return f"mean |error| {sum(abs(e) for e in errors) / len(errors):.2%}, max {max(abs(e) for e in errors):.2%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", help="keep each layer's analysis here")
    args = ap.parse_args()
    hw = resolve_profile("selene")
    t0 = time.time()
    print("Table 5: iteration time (s), Selene")
    print(f"{'model':9s} {'recompute':22s} {'published':>9s} {'estimate':>9s} {'ratio':>6s}  breakdown")
    errs = []
    for name, split in RUNS.items():
        for i, (rc, sp) in enumerate((("full", False), ("selective", True))):
            pl = plan(model_config(name, recompute=rc, sp=sp, **split), hw, args.cache)
            it, pub = pl.iteration, TABLE5[name][i]
            errs.append(it.total / pub - 1)
            c = it.compute
            print(f"{name:9s} {('full' if rc == 'full' else 'SP + selective'):22s} {pub:9.2f} {it.total:9.2f} "
                  f"{it.total / pub:6.3f}  fwd {c['forward']:.2f} bwd {c['backward']:.2f} rec {c['recompute']:.2f} "
                  f"tp {it.tp_comm:.2f} bubble {it.bubble:.2f} p2p {it.p2p:.2f} opt {it.optimizer:.2f} "
                  f"MFU {it.counts['mfu']:.1%}")
    print("time: " + _stats(errs) + "  (targets: mean <= 5%, max <= 10%)")
    print("\nFigure 1: memory per GPU (GiB), first pipeline stage")
    print(f"{'model':9s} {'category':28s} {'published':>9s} {'estimate':>9s} {'ratio':>6s}")
    po_err, act_err = [], []
    for name, split in RUNS.items():
        for i, (rc, sp) in enumerate((("none", False), ("selective", True))):
            m = plan(model_config(name, recompute=rc, sp=sp, **split), hw, args.cache).memory
            rows = [("activations, " + ("TP only" if rc == "none" else "SP + selective"), m["activations"] / GIB,
                     FIGURE1[name][1 + i], act_err)]
            if i == 0:
                # the layers' part: Figure 1's parameters + optimizer state leave the embedding and head out
                # (gpt-22b's published 45.562 GiB is 18 bytes x 48 x 12 h^2 / t; two 51200 x h / t more: 46.88)
                po = (m["weights"] + m["gradients"] + m["optimizer_state"] - m.get("embedding_state", 0)) / GIB
                rows.insert(0, ("parameters + optimizer state", po, FIGURE1[name][0], po_err))
            for label, est, pub, acc in rows:
                acc.append(est / pub - 1)
                print(f"{name:9s} {label:28s} {pub:9.3f} {est:9.3f} {est / pub:6.4f}")
    print("parameters + optimizer state: " + _stats(po_err) + "; activations: " + _stats(act_err)
          + "  (target: mean <= 5%)")
    print(f"\n{time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
