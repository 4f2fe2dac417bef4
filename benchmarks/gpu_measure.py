"""Measure, on a CUDA GPU, the programs of the published corpus and the bundled STDiT3, for the comparison with
the estimate that ``benchmarks/validate_measured.py`` makes on a machine without one.

Runs where torch sees a GPU (the lent device machine); needs torch only (plus this package's torch models).
Writes one JSON object per measurement to ``OUT/gpu_results.jsonl`` as it goes (a run cut short keeps what it
measured) and prints a short table at the end:

* ``env``: the GPU, driver, torch/CUDA versions, clocks;
* ``corpus``: every distinct program of ``benchmarks/data/published_gpu.toml`` (matmul, gated MLP, attention,
  LayerNorm, RMSNorm; the GPT training steps excepted), built in torch as its source ran it (``torch.matmul``;
  SDPA with the flash backend (FlashAttention-2) and the cuDNN backend, forward and forward+backward;
  ``F.layer_norm`` / ``F.rms_norm``), plus elementwise adds and copies over several sizes: median of CUDA-event
  timings after warm-up, the L2 cache flushed (a 256 MB write) before each call, and the kernels one call
  launches (torch.profiler);
* ``stdit3``: one forward of STDiT3-XL/2 (bf16, batch 2, random weights) as OpenSora 1.2 deploys it
  (``build(cfg, deployed=True)``) and as the counting module, eager, at 204_640_360 and 51_1280_720: median of
  timed forwards, the peak of ``torch.cuda.max_memory_allocated`` during one, and one forward's kernels by name;
* ``compiled``: the deployed module at depth 2 under ``torch.compile`` against eager at the same depth;
* calibrate is run after this script, by the caller (``python3 -m mhlo_cost calibrate``).

    python3 benchmarks/gpu_measure.py OUT_DIR [--skip-stdit3] [--skip-compile] [--budget-s 420]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tomllib
from collections import defaultdict

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_timing import T0, Log, bench, kernels_of  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DATA = os.path.join(ROOT, "benchmarks", "data", "published_gpu.toml")
DT = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


# -- the corpus programs, in torch ---------------------------------------------------------------------------
def _rand(*shape, dtype):
    return torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype)


def make(program: str, p: dict):
    """{variant: zero-argument callable} for the corpus program ``program`` with params ``p``."""
    dt = DT[p.get("dtype", "bfloat16")]
    if program == "matmul":
        b, m, n, k = p["batch"], p["m"], p["n"], p["k"]
        a, w = (_rand(b, m, k, dtype=dt), _rand(b, k, n, dtype=dt)) if b > 1 else (_rand(m, k, dtype=dt),
                                                                                  _rand(k, n, dtype=dt))
        return {"torch": lambda: torch.matmul(a, w)}
    if program == "gated_mlp":
        x = _rand(p["tokens"], p["hidden"], dtype=dt)
        wg, wu = _rand(p["hidden"], p["inter"], dtype=dt), _rand(p["hidden"], p["inter"], dtype=dt)
        wd = _rand(p["inter"], p["hidden"], dtype=dt)
        act = F.silu if p["act"] == "silu" else (lambda g: F.gelu(g, approximate="tanh"))
        return {"eager": lambda: (act(x @ wg) * (x @ wu)) @ wd}
    if program == "attention":
        return attention_variants(p, dt)
    if program == "layer_norm":
        x, w, b = _rand(p["rows"], p["cols"], dtype=dt), _rand(p["cols"], dtype=dt), _rand(p["cols"], dtype=dt)
        return {"F.layer_norm": lambda: F.layer_norm(x, (p["cols"],), w, b, 1e-6)}
    if program == "rms_norm":
        x, w = _rand(p["rows"], p["cols"], dtype=dt), _rand(p["cols"], dtype=dt)
        return {"F.rms_norm": lambda: F.rms_norm(x, (p["cols"],), w, 1e-6)}
    if program == "add":
        x, y = _rand(p["elements"], dtype=dt), _rand(p["elements"], dtype=dt)
        return {"x+y": lambda: x + y}
    if program == "copy":
        x = _rand(p["elements"], dtype=dt)
        y = torch.empty_like(x)
        return {"copy_": lambda: y.copy_(x)}
    raise ValueError(program)


def attention_variants(p, dt):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    shape = (p["batch"], p["heads"], p["seq"], p["head_dim"])
    q, k, v = (_rand(*shape, dtype=dt).requires_grad_() for _ in range(3))
    g = _rand(*shape, dtype=dt)
    out = {}
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        def fwd(backend=backend):
            with sdpa_kernel(backend), torch.no_grad():
                return F.scaled_dot_product_attention(q, k, v, is_causal=p["causal"])

        def fwd_bwd(backend=backend):
            with sdpa_kernel(backend):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=p["causal"])
            return torch.autograd.grad(o, (q, k, v), g)
        out[name] = fwd
        out[name + "+bwd"] = fwd_bwd
    return out


def corpus_programs() -> list[tuple[str, dict]]:
    with open(DATA, "rb") as f:
        rows = tomllib.load(f)["m"]
    seen, progs = set(), []
    for m in rows:
        if m["program"] == "gpt_train":
            continue
        p = {k: v for k, v in m["params"].items() if k != "library"}
        key = (m["program"], tuple(sorted(p.items())))
        if key not in seen:
            seen.add(key)
            progs.append((m["program"], p))
    # Extra programs beside the corpus: causal attention, STDiT3's attention shapes, elementwise over sizes.
    for seq, d in ((4096, 128), (8192, 64)):
        progs.append(("attention", {"batch": 2, "heads": 16, "seq": seq, "head_dim": d, "causal": True,
                                    "dtype": "bfloat16"}))
    progs.append(("attention", {"batch": 120, "heads": 16, "seq": 3600, "head_dim": 72, "causal": False,
                                "dtype": "bfloat16"}))  # STDiT3's spatial attention at 204_640_360 (2 x 60 x 45x80)
    for e in (2**20, 2**23, 2**26, 2**28):
        progs.append(("add", {"elements": e, "dtype": "bfloat16"}))
        progs.append(("copy", {"elements": e, "dtype": "bfloat16"}))
    return progs


def run_corpus(log: Log, budget_s: float) -> None:
    for program, p in corpus_programs():
        if time.monotonic() - T0 > budget_s:
            log.put(kind="skipped", program=program, params=p, why="time budget")
            continue
        try:
            variants = make(program, p)
            for name, fn in variants.items():
                try:
                    t = bench(fn)
                    ks = kernels_of(fn)
                    log.put(kind="corpus", program=program, params=p, variant=name, **t,
                            kernels=len(ks), kernel_names=sorted({n[:80] for n, _ in ks})[:6])
                except Exception as e:  # a backend that refuses the shape (cuDNN, head dim 72, ...)
                    log.put(kind="corpus", program=program, params=p, variant=name, error=str(e)[:200])
            del variants
            torch.cuda.empty_cache()
        except torch.cuda.OutOfMemoryError as e:
            log.put(kind="corpus", program=program, params=p, error=str(e)[:200])
            torch.cuda.empty_cache()


# -- eager elementwise kernels: contiguous, broadcast, strided, mixed dtype ----------------------------------
def eager_kernels() -> list[tuple[str, int, callable]]:
    """(name, bytes the op must move, call) for the elementwise patterns of STDiT3's eager forward at
    204_640_360 (activations [2, 60 x 920, 1152] bf16): the vectorized path (contiguous, same shape), and the
    generic paths TensorIterator takes for a broadcast operand, a strided (transposed) one, mixed dtypes."""
    b, t, s, c = 2, 60, 920, 1152
    n = b * t * s * c
    x, y = _rand(b, t * s, c, dtype=torch.bfloat16), _rand(b, t * s, c, dtype=torch.bfloat16)
    v = _rand(b, 1, c, dtype=torch.bfloat16)
    yf = _rand(b, t * s, c, dtype=torch.float32)
    xt = x.view(b, t, s, c).transpose(1, 2)
    m = torch.rand(b, t, 1, 1, device="cuda") > 0.5
    out = [("add contiguous bf16", 3 * 2 * n, lambda: x + y),
           ("add broadcast [B,1,C] bf16", 2 * 2 * n, lambda: x + v),
           ("mul broadcast (1+scale) bf16", 2 * 2 * n, lambda: x * (1 + v)),
           ("add bf16+f32 -> f32", (2 + 4 + 4) * n, lambda: x + yf),
           ("to f32 (contiguous)", (2 + 4) * n, lambda: x.float()),
           ("transposed -> contiguous copy", 2 * 2 * n, lambda: xt.contiguous()),
           ("add transposed + contiguous", 3 * 2 * n, lambda: xt + y.view(b, t, s, c).transpose(1, 2)),
           ("where [B,T,1,1] mask", 3 * 2 * n, lambda: torch.where(m, x.view(b, t, s, c), y.view(b, t, s, c))),
           ("gelu tanh bf16", 2 * 2 * n, lambda: F.gelu(x, approximate="tanh"))]
    for e in (2**16, 2**18, 2**20, 2**22, 2**24):  # size ramp of the broadcast path
        xs, vs = _rand(e // 1024, 1024, dtype=torch.bfloat16), _rand(1, 1024, dtype=torch.bfloat16)
        out.append((f"add broadcast {e} elements", 2 * 2 * e, lambda xs=xs, vs=vs: xs + vs))
    return out


def reduction_kernels() -> list[tuple[str, int, callable]]:
    """(name, bytes, call) of PyTorch eager's normalisation and reduction kernels at STDiT3's shapes, and a mean
    over rows of several lengths (the same 2^27 f32 elements)."""
    x = _rand(2, 55200, 1152, dtype=torch.bfloat16)
    n = x.numel()
    q = _rand(120, 16, 920, 72, dtype=torch.float32)
    s = _rand(1840, 16, 60, 60, dtype=torch.float32)
    out = [("layer_norm bf16 [2,55200,1152]", 2 * 2 * n, lambda: F.layer_norm(x, (1152,), eps=1e-6)),
           ("mean f32 [120,16,920,72] over 72", 4 * q.numel(), lambda: q.mean(-1, keepdim=True)),
           ("softmax f32 [1840,16,60,60]", 2 * 4 * s.numel(), lambda: s.softmax(-1))]
    for row in (32, 72, 128, 256, 1024, 4096):
        r = _rand(2**27 // row, row, dtype=torch.float32)
        out.append((f"mean f32 rows of {row}", 4 * r.numel(), lambda r=r: r.mean(-1, keepdim=True)))
    return out


def run_table(log: Log, kind: str, table) -> None:
    """Time each (name, bytes, call) of ``table``; one row of ``kind`` each, with the bandwidth it reached."""
    for name, nbytes, fn in table:
        t = bench(fn)
        ks = kernels_of(fn)
        log.put(kind=kind, name=name, bytes=nbytes, **t, tbps=nbytes / (t["median_ms"] * 1e-3) / 1e12,
                kernels=len(ks), kernel_names=sorted({k[:90] for k, _ in ks})[:4])
    torch.cuda.empty_cache()


# -- STDiT3 -------------------------------------------------------------------------------------------------
def stdit3_cfg(shape: str, depth: int | None = None):
    from dataclasses import replace

    from mhlo_cost.lower.models.config import STDiT3Config
    cfg = STDiT3Config().with_shape(shape)
    return replace(cfg, depth=depth) if depth else cfg


def by_kernel(ks) -> list[tuple[str, float, int]]:
    agg = defaultdict(lambda: [0.0, 0])
    for name, us in ks:
        agg[name][0] += us
        agg[name][1] += 1
    return sorted(((n, round(t, 1), c) for n, (t, c) in agg.items()), key=lambda r: -r[1])


def run_stdit3(log: Log, shape: str, deployed: bool, reps: int = 3, profile: bool = True) -> None:
    from mhlo_cost.lower.models import stdit3_torch
    cfg = stdit3_cfg(shape)
    torch.cuda.empty_cache()
    model = stdit3_torch.build(cfg, device="cuda", deployed=deployed).eval()
    inputs = stdit3_torch.example_inputs(cfg, device="cuda")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        model(*inputs)  # warm-up: cuBLAS/cuDNN handles, autotuning
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            model(*inputs)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        peak = torch.cuda.max_memory_allocated()
        row = dict(kind="stdit3", shape=shape, deployed=deployed, forward_s=statistics.median(times),
                   forward_all_s=times, base_bytes=base, peak_bytes=peak, peak_over_base_bytes=peak - base,
                   params=sum(p.numel() for p in model.parameters()))
        if profile:
            ks = kernels_of(lambda: model(*inputs))
            row.update(kernel_total_s=sum(us for _, us in ks) * 1e-6, kernel_count=len(ks),
                       top_kernels=by_kernel(ks)[:60])
    log.put(**row)
    del model, inputs
    torch.cuda.empty_cache()


def run_op_profile(log: Log, shape: str, depth: int) -> None:
    """The deployed module at ``depth``: GPU time per aten op and input shapes (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    model, inputs = deployed_on_gpu(shape, depth)
    with torch.no_grad():
        model(*inputs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            model(*inputs)
            torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages(group_by_input_shape=True):
        dev = getattr(e, "self_device_time_total", None)
        dev = e.self_cuda_time_total if dev is None else dev
        if dev > 0 and e.key.startswith("aten::"):
            rows.append((e.key, str(e.input_shapes)[:160], e.count, round(dev, 1)))
    rows.sort(key=lambda r: -r[3])
    log.put(kind="op_profile", shape=shape, depth=depth, ops=rows[:120],
            total_us=round(sum(r[3] for r in rows), 1))
    del model, inputs
    torch.cuda.empty_cache()


def deployed_on_gpu(shape: str, depth: int):
    """(the deployed STDiT3 at ``depth`` on the GPU, random weights; its example inputs there)."""
    from mhlo_cost.lower.models import stdit3_torch
    cfg = stdit3_cfg(shape, depth)
    return (stdit3_torch.build(cfg, device="cuda", deployed=True).eval(),
            stdit3_torch.example_inputs(cfg, device="cuda"))


def run_compiled(log: Log, shape: str, depth: int) -> None:
    model, inputs = deployed_on_gpu(shape, depth)
    with torch.no_grad():
        eager = bench(lambda: model(*inputs), target_s=1.0, min_reps=3, max_reps=10, flush=False)
        compiled = torch.compile(model)
        t = time.perf_counter()
        compiled(*inputs)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t
        comp = bench(lambda: compiled(*inputs), target_s=1.0, min_reps=3, max_reps=10, flush=False)
    log.put(kind="compiled", shape=shape, depth=depth, deployed=True, eager_ms=eager["median_ms"],
            compiled_ms=comp["median_ms"], compile_s=compile_s)
    del model, compiled, inputs
    torch.cuda.empty_cache()


def env(log: Log) -> None:
    import subprocess
    props = torch.cuda.get_device_properties(0)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,"
                          "power.limit,memory.total", "--format=csv,noheader"], capture_output=True, text=True)
    log.put(kind="env", gpu=props.name, sms=props.multi_processor_count, memory_bytes=props.total_memory,
            torch=torch.__version__, cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
            nvidia_smi=smi.stdout.strip())
    a = _rand(8192, 8192, dtype=torch.bfloat16)
    b = _rand(8192, 8192, dtype=torch.bfloat16)
    t = bench(lambda: a @ b, flush=False)
    x = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    c = bench(lambda: y.copy_(x), flush=False)
    log.put(kind="ceilings", gemm_8192_tflops=2 * 8192**3 / (t["median_ms"] * 1e-3) / 1e12,
            copy_1gib_tbps=2 * 2**30 / (c["median_ms"] * 1e-3) / 1e12)
    del a, b, x, y


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--skip-stdit3", action="store_true")
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--only-eager-kernels", action="store_true", help="only the elementwise patterns")
    ap.add_argument("--reductions-only", action="store_true", help="only the norm and reduction kernels")
    ap.add_argument("--stdit3-only", metavar="SHAPES", help="only the deployed STDiT3 at these shapes (comma list)")
    args = ap.parse_args(argv)
    log = Log(args.out)
    torch.backends.cuda.matmul.allow_tf32 = True
    env(log)
    if args.reductions_only:
        run_table(log, "reduction", reduction_kernels())
        return 0
    if args.stdit3_only:
        for shape in args.stdit3_only.split(","):
            run_stdit3(log, shape, True)
        return 0
    run_table(log, "eager_kernel", eager_kernels())
    if args.only_eager_kernels:
        run_op_profile(log, "204_640_360", 2)
        return 0
    if not args.skip_stdit3:
        for shape, deployed in (("204_640_360", True), ("204_640_360", False), ("51_1280_720", True)):
            if time.monotonic() - T0 < args.budget_s * 0.5:
                try:
                    run_stdit3(log, shape, deployed)
                except Exception as e:
                    log.put(kind="stdit3", shape=shape, deployed=deployed, error=f"{type(e).__name__}: {e}"[:300])
    run_corpus(log, args.budget_s * 0.8)
    if not args.skip_compile and time.monotonic() - T0 < args.budget_s * 0.8:
        try:
            run_compiled(log, "204_640_360", 2)
        except Exception as e:
            log.put(kind="compiled", error=f"{type(e).__name__}: {e}"[:300])
    print(f"done in {time.monotonic() - T0:.0f} s; {len(log.rows)} rows", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
