"""train-plan against published training runs, held out by source: every row of
``benchmarks/data/published_training.toml`` (Megatron-LM's paper tables, NVIDIA NeMo / Megatron-Bridge performance
tables, torchtitan's and llm-foundry's published benchmarks; A100 and H100; 2021-2025; each row with its source
and exact configuration) that ``train-plan`` can express today is priced by the train-plan study
(:class:`mhlo_cost.studies.plan.study.PlanStudy`) on the system profile its source names.

Prints per row the published iteration time (from the row's tokens/s/GPU, or its TFLOP/s per GPU with the
source's own FLOP formula), the estimate, their ratio and the breakdown; per source the mean and max |error|;
then the median |error| over all priced rows. Nothing is fitted on any of these rows (no parameter of
mhlo-cost was read off them): every source is held out. Rows train-plan cannot express yet are listed with the
reason (expert parallelism, a precision recipe it lacks, ...). The row's options reach train-plan's ScaleConfig
by :func:`split_options`: FSDP's group size as ZeRO 3 with ``dp_shard``, ``zero``, ``cp``, ``layers_per_stage`` as
the first / last stages' layers, flash attention as ``attention="fused"``, the fields of :data:`PASSED` as they
are, fp16 (Megatron 2021) with its gradients reduced in fp16, ``compile`` as the execution model (true:
``inductor``; false: ``eager``; absent: ``compiled``, the fused kernels of Megatron and NeMo; a row's
``execution`` overrides it, with its reason).

Where a row is priced with an approximation (the squared-ReLU MLP lowered as GELU: the same two GEMMs, NeMo's eager
relu and pow kernels added beyond the fused activation, ``activation="squared-relu"``; fp16 at
bf16's rate), the row says so.

    PYTHONPATH=. python benchmarks/validate_training.py [--only ID-SUBSTRING] [--source ID] [--cache DIR]
        [--clock peak|sustained|average]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tomllib
from fractions import Fraction

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DATA = os.path.join(ROOT, "benchmarks", "data", "published_training.toml")

#: What every run must give (the pricer reads them), and what each model must.
RUN_FIELDS = ("id", "source", "model", "table", "gpus", "seq", "global_batch", "micro_batch", "precision",
              "recompute")
MODEL_FIELDS = ("layers", "hidden", "heads", "vocab", "mlp", "source")
SOURCE_FIELDS = ("title", "url", "where", "year", "gpu", "system", "metric")
METRICS = ("iteration_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu")
DEGREES = ("tp", "pp", "dp", "cp", "ep", "vp")
MLPS = ("gelu", "swiglu", "squared_relu", "moe")
#: A model's layer architecture (ScaleConfig.arch; absent: gpt): llama is RMSNorm, no biases, rotary embedding.
ARCHS = ("gpt", "llama")
RECOMPUTES = ("none", "selective", "full", "op")
#: How a row's step runs, from its ``compile`` field: torch.compile (True), PyTorch eager (False), or (absent) the
#: fused kernels of Megatron / NeMo / Transformer Engine.
EXECUTION = {True: "inductor", False: "eager", None: "compiled"}
#: The parallel options of a row and the ScaleConfig field that prices each: (run field, ScaleConfig field, is
#: it used?, reason while the field is missing). Their values are converted by :func:`split_options`.
OPTIONS = (
    ("fsdp", "dp_shard", lambda r: r.get("fsdp", 0) > 0, "FSDP (ZeRO-3): not an option yet"),
    ("zero", "zero", lambda r: r.get("zero", 0) >= 2, "ZeRO-2/3: not an option yet"),
    ("cp", "cp", lambda r: r.get("cp", 1) > 1, "context parallelism (CP): not an option yet"),
    ("ep", "ep", lambda r: r.get("ep", 1) > 1, "expert parallelism (EP, MoE): not an option yet"),
    ("layers_per_stage", "first_stage_layers", lambda r: "layers_per_stage" in r,
     "uneven pipeline stages: not an option yet"),
)

#: Row fields passed to the ScaleConfig field of the same name as they are: PyTorch's context parallel
#: (``cp_comm`` torch-allgather / torch-alltoall) with the K/V heads the model exchanges (``kv_repeat``), ZeRO 1's
#: reduction (``dp_reduce``: DeepSpeed's all_reduce), the tied embedding's all_reduce (``tied_embedding``) and
#: DeepSpeed's separate fp32 gradient accumulation (``grad_accum_pass``), a row's gradient reduction dtype where its
#: source names one (``grad_reduce_fp32``: Composer's FSDP mixed precision PURE reduces in bf16), Transformer
#: Engine's userbuffers overlap of the tensor-parallel collectives with their GEMMs (``tp_comm_overlap``,
#: ``tp_overlap_rs``), whose rule splits the interleaved uneven stages (``pipeline_split``) and Megatron-Core's
#: embedding / loss counted as layers (``account_embedding``, ``account_loss``: the stages then follow from them, not
#: from ``layers_per_stage``), Megatron-Core's overlapped data-parallel reduction (``ddp`` megatron, ``ddp_bucket_size``,
#: ``overlap_param_gather``), the loss's cross-entropy kernels (``cross_entropy``: Megatron-LM's own), Megatron-LM's
#: main-gradient hook before gradient-accumulation fusion (``main_grad_add``), the pipeline send of 1/t all-gathered
#: by the receiver (``scatter_gather``: Megatron-LM 2021's and DeepSpeed's pipeline engine's, not Megatron-Core's),
#: FSDP2's copies around its collectives (``fsdp_version`` 2: torchtitan's ``fully_shard``) and Megatron FSDP's
#: NCCL-registered buffers, its collectives on fewer SMs (``nccl_ub``: Megatron-Core's ``--use-nccl-ub``),
#: PyTorch DDP's gradient bucket copies (``torch_ddp``: Megatron-LM 2021's ``--DDP-impl torch``), and
#: CUDA_LAUNCH_BLOCKING=1 (``launch_blocking``: BLOOM's training script, each call's host time in series), and the
#: fp8 weight copies made once a step (``fp8_weight_cache``: Megatron-Core's TE modules, ``studies/plan/fp8_weights``)
#: with their scaling recipe's amax history (``fp8_amax_history``: 1 for current scaling, ``studies/plan/fp8_state``),
#: PyTorch's async tensor parallelism (``async_tp``: torchtitan's enable_async_tensor_parallel, plan/async_tp), and
#: the MLP's activation as Megatron's own kernels (``activation_kernel`` megatron: bias_gelu / bias_swiglu, plan/
#: mlp_activation), and the unfused attention's softmax and dropout as Megatron-LM's own kernels
#: (``attention_kernel`` megatron: scaled_upper_triang_masked_softmax, PyTorch's fused dropout, plan/attention_kernels),
#: with Megatron-DeepSpeed's ALiBi bias copied into the scores and read by their GEMM (``alibi``: BLOOM), the
#: gradient clipping's max norm and whose distributed optimizer runs it (``clip_grad``, ``dist_optimizer`` apex:
#: NeMo 24.07's distributed_fused_adam, plan/grad_clip), and, in memory alone, torchtitan's fp32 loss with its FSDP2
#: root (``loss_upcast``: the peak at the loss's backward, plan/torch_peak).
PASSED = ("cp_comm", "kv_repeat", "dp_reduce", "tied_embedding", "grad_accum_pass", "grad_reduce_fp32",
          "tp_comm_overlap", "tp_overlap_rs", "pipeline_split", "account_embedding", "account_loss", "ddp",
          "ddp_bucket_size", "overlap_param_gather", "cross_entropy", "main_grad_add",
          "scatter_gather", "fsdp_version", "nccl_ub", "torch_ddp", "launch_blocking", "fp8_weight_cache",
          "fp8_amax_history", "async_tp", "fsdp_float8_all_gather", "fsdp_float8_precompute_scale", "activation_kernel",
          "attention_kernel", "alibi", "loss_upcast", "clip_grad", "dist_optimizer")


def layer_ac(run: dict) -> int:
    """torchtitan's selective layer checkpointing's N (``selective_ac_option = "N"``: every N-th block checkpointed
    whole, train-plan's ``--recompute full --recompute-every N``); 0 for any other policy."""
    option = str(run.get("selective_ac_option", "op"))
    return int(option) if option.isdigit() else 0


def split_options(run: dict) -> dict:
    """The ScaleConfig fields of the row's sharding, context parallelism, uneven stages, attention and gradient
    dtype: ``fsdp`` (the sharding group's size) is ZeRO 3 with ``dp_shard`` (0 where the group is all of dp);
    ``layers_per_stage`` gives the first and last stages' layers (the others must split the rest evenly, which
    :func:`price` checks); flash attention is ``attention="fused"`` with the row's ``attention_library`` (the
    library its framework calls; absent: the profile's default); fp16 (Megatron 2021) reduces its gradients
    in fp16 (``--accumulate-allreduce-grads-in-fp32`` is off by default and forced only with bf16) and scales its
    loss (``loss_scale``: Megatron's fp16 optimizer copies and unscales the gradients, ``studies/plan/megatron_passes``)."""
    kw = {"zero": 3 if run.get("fsdp", 0) > 0 else run.get("zero", 0), "cp": run.get("cp", 1),
          "attention": "fused" if run.get("attention") == "flash" else "unfused",
          "grad_reduce_fp32": run["precision"] != "fp16", "attention_library": run.get("attention_library", ""),
          "execution": run.get("execution", EXECUTION[run.get("compile")]), "loss_scale": run["precision"] == "fp16"}
    kw.update({k: run[k] for k in PASSED if k in run})
    if run.get("fsdp", 0) > 0:
        kw["dp_shard"] = run["fsdp"] if run["fsdp"] < run.get("dp", 1) else 0
    if layer_ac(run):  # torchtitan's selective layer checkpointing: every N-th block recomputed whole
        kw["recompute_every"] = layer_ac(run)
    stages = run.get("layers_per_stage")
    if stages and len(set(stages)) > 1 and not (run.get("account_embedding") or run.get("account_loss")):
        kw.update(first_stage_layers=stages[0], last_stage_layers=stages[-1])
    return kw


def load(path: str = DATA) -> dict:
    """The data file as a dict (``source``, ``model``, ``run``); ValueError lists every problem found."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    problems = check(data)
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    return data


def check(data: dict) -> list[str]:
    """Every problem of the data (an empty list: none): missing fields, unknown sources and models, a split
    whose degrees do not multiply to the GPUs, a row without a published metric, a repeated id."""
    out = []
    for sid, s in data.get("source", {}).items():
        out += [f"source {sid}: no {k}" for k in SOURCE_FIELDS if k not in s]
        if "github.com" in s.get("url", "") and "/blob/" not in s["url"]:
            out.append(f"source {sid}: a repository URL must name a commit (/blob/<commit>/)")
    for mid, m in data.get("model", {}).items():
        out += [f"model {mid}: no {k}" for k in MODEL_FIELDS if k not in m]
        if m.get("mlp") not in MLPS:
            out.append(f"model {mid}: mlp {m.get('mlp')!r} is not one of {', '.join(MLPS)}")
        if m.get("arch", "gpt") not in ARCHS:
            out.append(f"model {mid}: arch {m.get('arch')!r} is not one of {', '.join(ARCHS)}")
    seen = set()
    for r in data.get("run", []):
        rid = r.get("id", "?")
        out += [f"run {rid}: no {k}" for k in RUN_FIELDS if k not in r]
        if rid in seen:
            out.append(f"run {rid}: id repeated")
        seen.add(rid)
        out += _check_run(r, data)
    return out


def _check_run(r: dict, data: dict) -> list[str]:
    rid, out = r.get("id", "?"), []
    if r.get("source") not in data.get("source", {}):
        out.append(f"run {rid}: unknown source {r.get('source')!r}")
    if r.get("model") not in data.get("model", {}):
        out.append(f"run {rid}: unknown model {r.get('model')!r}")
    if not any(k in r for k in METRICS):
        out.append(f"run {rid}: no published metric ({', '.join(METRICS)})")
    if r.get("recompute") not in RECOMPUTES:
        out.append(f"run {rid}: recompute {r.get('recompute')!r} is not one of {', '.join(RECOMPUTES)}")
    deg = {k: r.get(k, 1) for k in DEGREES}
    if not all(isinstance(v, int) and v >= 1 for v in deg.values()):
        out.append(f"run {rid}: degrees must be positive integers")
    elif deg["tp"] * deg["pp"] * deg["cp"] * deg["dp"] != r.get("gpus"):
        out.append(f"run {rid}: tp x pp x cp x dp = {deg['tp'] * deg['pp'] * deg['cp'] * deg['dp']}, "
                   f"not gpus {r.get('gpus')}")
    stages, model = r.get("layers_per_stage"), data.get("model", {}).get(r.get("model"), {})
    if stages is not None and (len(stages) != r.get("pp", 1) or sum(stages) != model.get("layers")):
        out.append(f"run {rid}: layers_per_stage must give one count per pipeline stage ({r.get('pp', 1)}) adding "
                   f"up to the model's layers ({model.get('layers')})")
    bad = [a for a in r.get("assumed", []) if a not in r and a not in ("vp", "layers_per_stage")]
    if bad:  # (an assumed default, vp 1 or even stages, may be left unwritten)
        out.append(f"run {rid}: assumed names fields it does not give: {', '.join(bad)}")
    return out


def published_seconds(run: dict, model: dict, source: dict) -> float:
    """The iteration time the published figure implies: the measured one, global batch x seq tokens over
    (tokens/s/GPU x GPUs), or the source's FLOPs per iteration over (TFLOP/s per GPU x GPUs)."""
    tokens = run["global_batch"] * run["seq"]
    if "iteration_s" in run:
        return float(run["iteration_s"])
    if "tokens_per_s_per_gpu" in run:
        return tokens / (run["tokens_per_s_per_gpu"] * run["gpus"])
    if "tflops_per_gpu" in run and source.get("flops") == "narayanan_eq3":
        return float(narayanan_flops(run, model) / (Fraction(run["tflops_per_gpu"]) * 10 ** 12 * run["gpus"]))
    raise ValueError(f"run {run['id']}: no metric this script converts to an iteration time")


def narayanan_flops(run: dict, model: dict) -> Fraction:
    """Narayanan et al. 2021, equation (3): F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), exact."""
    b, s, lay, h, v = run["global_batch"], run["seq"], model["layers"], model["hidden"], model["vocab"]
    return 96 * b * s * lay * h * h * (1 + Fraction(s, 6 * h) + Fraction(v, 16 * lay * h))


def why_not(run: dict, model: dict, fields: set | None = None) -> str | None:
    """Why train-plan cannot price ``run`` today (one reason), or None. ``fields``: ScaleConfig's field names
    (an option whose field exists there is priced, not refused)."""
    from mhlo_cost.machines.precision import TRAINING

    if fields is None:
        from mhlo_cost.studies.plan.config import ScaleConfig

        fields = {f.name for f in dataclasses.fields(ScaleConfig)}
    for _, field, used, reason in OPTIONS:
        if used(run) and field not in fields:
            return reason
    if model["mlp"] == "moe" and "ep" not in fields:
        return "a mixture-of-experts model: not an option yet"
    if layer_ac(run) and "recompute_every" not in fields:
        return (f"torchtitan's selective layer checkpointing (one block in {run['selective_ac_option']} checkpointed "
                "whole, the others keeping everything): not an option yet")
    if run["precision"] not in (*TRAINING, "fp16"):
        return f"precision {run['precision']}: not a train-plan recipe ({', '.join(TRAINING)})"
    if "first_stage_layers" not in fields and model["layers"] % (run.get("pp", 1) * run.get("vp", 1)):
        return (f"uneven pipeline stages ({model['layers']} layers on {run.get('pp', 1)} x {run.get('vp', 1)} "
                "stages): not an option yet")
    return None


def modern(run: dict, model: dict) -> bool:
    """Whether the run uses what issue 38's target counts: FSDP, context parallelism, fp8 or uneven stages."""
    uneven = "layers_per_stage" in run or model["layers"] % (run.get("pp", 1) * run.get("vp", 1)) != 0
    return run.get("fsdp", 0) > 0 or run.get("cp", 1) > 1 or run["precision"].startswith("fp8") or uneven


def approximations(run: dict, model: dict) -> list[str]:
    """What the priced row stands for only approximately."""
    out = []
    if model["mlp"] == "squared_relu":
        out.append("squared-ReLU MLP lowered as GELU (the same two GEMMs), NeMo's eager relu and pow kernels added")
    if run["precision"] == "fp16":
        out.append("fp16 priced as bf16 (the same A100 rate)")
    if run.get("attn_impl") == "triton":
        out.append("MPT's Triton flash attention (attn_impl triton) priced as FlashAttention-2")
    if run.get("compile") is False and run.get("execution") == "compiled":
        out.append("eager priced as fused kernels (the model calls one kernel per norm, attention, activation)")
    return out


def scale_config(run: dict, model: dict, fields: set | None = None):
    """The :class:`ScaleConfig` of ``run`` (options train-plan has gained are passed by their field name)."""
    from mhlo_cost.studies.plan.config import ScaleConfig

    if fields is None:
        fields = {f.name for f in dataclasses.fields(ScaleConfig)}
    kw = dict(layers=model["layers"], hidden=model["hidden"], heads=model["heads"], seq=run["seq"],
              vocab=model["vocab"], ffn=model.get("ffn", 0), kv_heads=model.get("kv_heads", 0),
              mlp_kind="swiglu" if model["mlp"] == "swiglu" else "gelu",
              t=run.get("tp", 1), p=run.get("pp", 1), d=run.get("dp", 1), sp=bool(run.get("sp", False)),
              interleave=run.get("vp", 1), micro_batch=run["micro_batch"], global_batch=run["global_batch"],
              recompute="full" if layer_ac(run) else run["recompute"],
              dp_overlap=bool(run.get("dp_overlap", False)), dropout=bool(run.get("dropout", True)),
              precision="bf16" if run["precision"] == "fp16" else run["precision"])
    if model["mlp"] == "squared_relu" and "activation" in fields:  # NeMo's eager relu and pow (Nemotron's rows)
        kw["activation"] = "squared-relu"
    if model.get("arch", "gpt") != "gpt" and "arch" in fields:  # the Llama layer (studies/plan/llama_layer.py)
        kw["arch"] = model["arch"]
    return ScaleConfig(**kw, **{k: v for k, v in split_options(run).items() if k in fields})


def price(run: dict, data: dict, cache_dir=None, clock: str = "sustained") -> dict:
    """The row's result: published and estimated seconds, their ratio, breakdown, or the reason it is not
    priced (``reason``); the step's dots at ``clock`` (train-plan's ``--clock``: sustained, peak or average)."""
    from mhlo_cost.network import resolve_profile
    from mhlo_cost.studies.plan.study import PlanOptions, PlanStudy

    model, source = data["model"][run["model"]], data["source"][run["source"]]
    out = {"id": run["id"], "source": run["source"], "published_s": published_seconds(run, model, source),
           "modern": modern(run, model)}
    why = why_not(run, model)
    if why:
        return out | {"reason": why}
    cfg = scale_config(run, model)
    bad = cfg.invalid()
    if not bad and "layers_per_stage" in run and cfg.stage_layers() != tuple(run["layers_per_stage"]):
        bad = f"stages {run['layers_per_stage']}: only the first and last may differ from the others"
    if bad:
        return out | {"reason": f"train-plan refuses it: {bad}"}
    hw = resolve_profile(run.get("system", source["system"]))
    plan = PlanStudy(PlanOptions(cfg, hw, cache_dir=cache_dir, clock=clock)).plan
    it = plan.iteration
    mem = {"memory_gib": run["memory_gib"], "memory_est_gib": plan.memory["total"] / 2 ** 30} if "memory_gib" in run \
        else {}
    return out | mem | {"estimate_s": it.total, "ratio": it.total / out["published_s"], "system": hw.name,
                        "approx": approximations(run, model), "parts": _parts(it)}


def memory_lines(rows: list[dict]) -> list[str]:
    """The rows with a published memory per GPU (GiB: the source's, e.g. torchtitan's peak reserved bytes) against
    train-plan's live bytes at the step's peak, and per source the mean ratio (reserved holds the allocator's cache
    beyond the live tensors, so a ratio under 1 is expected)."""
    mem = [r for r in rows if "memory_est_gib" in r]
    lines = [f"{r['id']:40s} {r['memory_gib']:9.1f} {r['memory_est_gib']:9.2f} "
             f"{r['memory_est_gib'] / r['memory_gib']:6.3f}" for r in mem]
    for src in sorted({r["source"] for r in mem}):
        ratios = [r["memory_est_gib"] / r["memory_gib"] for r in mem if r["source"] == src]
        lines.append(f"{src:16s} {len(ratios):3d} rows  memory estimate / published: mean "
                     f"{statistics.fmean(ratios):.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}")
    return ([f"{'memory per GPU (GiB)':40s} {'published':>9s} {'estimate':>9s} {'ratio':>6s}"] + lines) if mem else []


def _parts(it) -> dict:
    """The iteration's parts (seconds); ``cp``: context parallelism's exposed exchange; ``ring``: PyTorch's ring
    attention's own passes (or Transformer Engine's, ``p2p``), forward and backward, already inside ``fwd`` / ``bwd``
    (shown apart)."""
    c = it.compute
    return {"fwd": c["forward"], "bwd": c["backward"], "rec": c["recompute"], "tp": it.tp_comm,
            "bubble": it.bubble, "p2p": it.p2p, "dp": it.dp_exposed, "dp_total": it.dp_total,
            "opt": it.optimizer, "cp": it.cp_comm, "host": it.launch_host, "clk": it.counts.get("dot_clock_mhz", 0.0),
            "ring": it.cfg.micro_batches * it.cfg.layers_per_stage * (it.layer.get("ring_forward", 0.0)
                                                                       + it.layer.get("ring_backward", 0.0))}


def summary(rows: list[dict]) -> list[str]:
    """Per source mean / max |error| of the priced rows, then the held-out median over all of them."""
    priced = [r for r in rows if "ratio" in r]
    lines = []
    for src in sorted({r["source"] for r in priced}):
        errs = [abs(r["ratio"] - 1) for r in priced if r["source"] == src]
        lines.append(f"{src:16s} {len(errs):3d} rows  mean |error| {statistics.fmean(errs):6.2%}  "
                     f"max {max(errs):6.2%}  (direction: median ratio "
                     f"{statistics.median(r['ratio'] for r in priced if r['source'] == src):.3f})")
    if priced:
        errs = [abs(r["ratio"] - 1) for r in priced]
        lines.append(f"held out (nothing fitted on any source): median |error| {statistics.median(errs):.2%}, "
                     f"max {max(errs):.2%} over {len(errs)} priced rows; {len(rows) - len(priced)} rows not "
                     "expressible yet")
        target = [abs(r["ratio"] - 1) for r in priced if r["modern"]]
        lines.append(f"rows using FSDP, CP, fp8 or uneven stages: {len(target)} priced of "
                     f"{sum(r['modern'] for r in rows)}" + (f", median |error| {statistics.median(target):.2%}, max "
                                                            f"{max(target):.2%}" if target else ""))
    return lines


def _row_line(r: dict) -> str:
    if "ratio" not in r:
        return f"{r['id']:40s} {r['published_s']:9.3f} {'-':>9s} {'-':>6s}  NOT PRICED: {r['reason']}"
    p = r["parts"]
    keys = ("fwd", "bwd", "rec", "tp", "bubble", "p2p", "dp", "opt") + (("cp", "ring") if p["cp"] or p["ring"] else ())
    keys += ("host",) if p["host"] else ()
    keys += ("clk",) if p.get("clk") else ()
    parts = " ".join(f"{k} {p[k]:.3f}" for k in keys)
    approx = f"  [approx: {'; '.join(r['approx'])}]" if r["approx"] else ""
    return f"{r['id']:40s} {r['published_s']:9.3f} {r['estimate_s']:9.3f} {r['ratio']:6.3f}  {parts}{approx}"


def main(argv=None) -> int:
    from mhlo_cost.machines.clock import CLOCKS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="the runs whose id contains this")
    ap.add_argument("--source", help="the runs of this source id")
    ap.add_argument("--cache", help="keep each layer's analysis here")
    ap.add_argument("--data", default=DATA, help="the data file (default: %(default)s)")
    ap.add_argument("--clock", choices=CLOCKS, default="sustained",
                    help="the dots' clock: a product stream's under the power limit (default, as train-plan's), "
                         "the datasheet peak's, or the step's own average power's (train-plan --clock)")
    args = ap.parse_args(argv)
    data = load(args.data)
    runs = [r for r in data["run"] if (not args.only or args.only in r["id"])
            and (not args.source or r["source"] == args.source)]
    print(f"{'run':40s} {'published':>9s} {'estimate':>9s} {'ratio':>6s}  seconds per iteration; breakdown")
    rows = []
    for run in runs:
        rows.append(price(run, data, args.cache, args.clock))
        print(_row_line(rows[-1]), flush=True)
    print()
    for line in summary(rows):
        print(line)
    for i, line in enumerate(memory_lines(rows)):
        print(("\n" if i == 0 else "") + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
