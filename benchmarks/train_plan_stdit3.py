"""STDiT3-XL/2 trained with ZeRO-2 (+ Ulysses) planned end to end on 8 and 64 GPUs of DGX A100 and DGX H100
nodes (``train-plan --model stdit3``), and set beside the only OpenSora 1.2 step times published with an exact
configuration.

Plans (OpenSora 1.2's recipe, github.com/hpcaitech/Open-Sora tag v1.2.0, configs/opensora-v1-2/train/stage3.py:
plugin zero2, bf16, grad_checkpoint, flash attention; the 720p bucket's 51 frames at batch 2 per GPU):

* 8 GPUs, one node: data parallel 8 at batch 2 per GPU; Ulysses 8 (one sample over the node's NVLink), batch 1;
* 64 GPUs, 8 nodes: data parallel 64 at batch 2; Ulysses 8 within each node x data parallel 8 over the nodes.

Each prints the iteration time and its parts, memory per GPU by category, the bytes one GPU sends per step and
the tokens per second per GPU.

Published figures: OpenSora's ``configs/opensora-v1-2/misc/bs.py`` (the batch-size search, one GPU,
``scripts/misc/search_bs.py``) states its base bucket's step time: 512x512, 408 frames, batch 1: 12 s/it, with
ZeRO-2, bf16, gradient checkpointing and flash attention; that step also runs the VAE and T5 encoders
(``search_bs.py`` times ``vae.encode`` and ``text_encoder.encode`` inside the step), which the plan leaves out,
and the GPU is not named in the file (OpenSora 1.2's report, docs/report_03.md, counts its training in H100
hours). ``stage3.py``'s bucket comment ``# 20s/it`` is the step time its batch sizes aim at (720p x 51 frames:
batch 2). No OpenSora 1.2 GPU memory figure for training is published; docs/report_03.md says sequence
parallelism was not used for training. docs/acceleration.md's throughputs are OpenSora 1.0's STDiT on H800, not
STDiT3.

    PYTHONPATH=. python benchmarks/train_plan_stdit3.py [--cache DIR]
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

GIB = 2 ** 30
#: (what, video shape, Ulysses degree, data degree, batch per GPU)
PLANS = (("8 GPUs, data parallel 8", "51_1280_720", 1, 8, 2),
         ("8 GPUs, Ulysses 8", "51_1280_720", 8, 1, 1),
         ("64 GPUs, data parallel 64", "51_1280_720", 1, 64, 2),
         ("64 GPUs, Ulysses 8 x data parallel 8", "51_1280_720", 8, 8, 1))
#: (source, shape, batch per GPU, published seconds a step, what the figure holds)
PUBLISHED = (("configs/opensora-v1-2/misc/bs.py: base bucket (512, 408), measured by search_bs.py", "408_512_512", 1,
              12.0, "STDiT3 step + VAE and T5 encoding, one GPU"),
             ("configs/opensora-v1-2/train/stage3.py: bucket comment '# 20s/it', 720p x 51 at batch 2", "51_1280_720",
              2, 20.0, "the step time the buckets aim at, VAE and T5 included"))


def _plan(shape, ulysses, d, mb, hw, cache):
    from mhlo_cost.studies.plan.plan import plan
    from mhlo_cost.studies.plan.stdit3 import stdit3_config

    return plan(stdit3_config(shape, cp=ulysses, d=d, micro_batch=mb, global_batch=mb * d), hw, cache)


def _line(what, p) -> str:
    from mhlo_cost.studies.plan.stdit3 import comm_per_step

    it, m, cfg = p.iteration, p.memory, p.cfg
    comp = sum(it.compute.values())
    sent = sum(comm_per_step(p.cost, cfg).values())
    tok = cfg.micro_batch * cfg.seq * cfg.d / it.total / cfg.gpus
    return (f"  {what:38s} {it.total:8.3f} s  (compute {comp:.3f}, a2a {it.cp_comm:.3f}, dp {it.dp_exposed:.3f}, "
            f"optimizer {it.optimizer:.4f})  memory {m['total'] / GIB:6.2f} GiB (weights {m['weights'] / GIB:.2f}, "
            f"grads {m['gradients'] / GIB:.2f}, optimizer {m['optimizer_state'] / GIB:.2f}, activations "
            f"{m['activations'] / GIB:.2f}){'' if m.get('fits', True) else ' DOES NOT FIT'}  sent "
            f"{sent / 1e9:.2f} GB/step  {tok:,.0f} tokens/s/GPU")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", help="cache root for the lowered block pairs")
    args = ap.parse_args(argv)
    from mhlo_cost.network import resolve_profile

    for system in ("dgx-a100", "dgx-h100"):
        hw = resolve_profile(system)
        print(f"{system}: STDiT3-XL/2, 51 frames of 1280x720 (15 x 3600 tokens a sample), ZeRO-2, recompute "
              "full, flash attention")
        for what, shape, u, d, mb in PLANS:
            print(_line(what, _plan(shape, u, d, mb, hw, args.cache)))
    print("against OpenSora 1.2's published step times (one GPU; the source names no GPU: both are shown):")
    for source, shape, mb, seconds, holds in PUBLISHED:
        print(f"  {source}\n    published {seconds:.1f} s ({holds})")
        for system in ("dgx-a100", "dgx-h100"):
            hw = resolve_profile(system)
            p, more = _plan(shape, 1, 1, mb, hw, args.cache), _plan(shape, 1, 1, mb + 1, hw, args.cache)
            fits = "fits" if p.memory.get("fits", True) else "does not fit"
            print(f"    {system}: planned STDiT3 step {p.iteration.total:.3f} s = {p.iteration.total / seconds:.1%} "
                  f"of it; memory {p.memory['total'] / GIB:.1f} GiB ({fits}); at batch {mb + 1}: "
                  f"{more.memory['total'] / GIB:.1f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
