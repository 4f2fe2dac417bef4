"""Measure, on a CUDA GPU, the training programs of ``benchmarks/gpu_train_layers.py``, for the comparison with
``train-plan``'s and the roofline's estimates made on a machine without one (issue 38).

* ``layer``: a GPT-3 5B layer (NeMo's) at micro-batch 1, 2, 4 (seq 2048) and a Llama 3 8B layer (torchtitan's)
  at micro-batch 1, 2 (seq 8192), bf16, eager: the forward and backward (the gradient of the output given) of
  stacks of 1 and 2 layers; per layer = the difference. The kernels one layer's step launches (torch.profiler).
* ``compiled``: the same Llama and GPT stacks under ``torch.compile`` (default mode), micro-batch 1.
* ``gemm``: each linear's three products (forward, data and weight gradients) of one tensor-parallel rank of NeMo's
  fp8 GPT-3 and Nemotron layers, bf16 (torch.matmul) and fp8 (torch._scaled_mm, tensorwise), at each micro-batch,
  the L2 flushed before each call.
* ``sustained``: one product shape run back to back for 12 s (bf16 8192 cube, random and zeros; a NeMo-sized
  bf16 and fp8 product): TFLOP/s each second with the SM clock and board power (NVML).
* ``ring``: one rank's attention work in PyTorch's ring attention with load-balanced causal chunks for Llama 3 8B
  (32 heads after ``repeat_kv``, head 128, 32768 positions per rank) at cp 1, 2, 4, 8: the flash forward of each
  step with its fp32 log-sum-exp merge, then each step's flash backward with the fp32 accumulation of dq, dk, dv.
  One layer; no communication (a single GPU): what the rank computes.

Writes one JSON object per measurement to ``OUT/gpu_results.jsonl`` as it goes.

    python3 benchmarks/gpu_train_measure.py OUT_DIR [--only layer,compiled,ring,gemm,sustained] [--budget-s 400]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_timing import T0, Log, bench, kernels_of  # noqa: E402
from gpu_train_layers import SHAPES, Stack, ring_schedule  # noqa: E402

BF16 = torch.bfloat16


def _step(model, x, g):
    def run():
        x.grad = None
        for p in model.parameters():
            p.grad = None
        model(x).backward(g)
    return run


def layer_rows(log, kind: str, name: str, mbs, compiled: bool = False) -> None:
    shape = SHAPES[name]
    for mb in mbs:
        t = {}
        for depth in (1, 2):
            torch.manual_seed(0)
            model = Stack(kind, depth, **shape).to("cuda", BF16)
            if compiled:
                model = torch.compile(model)
            x = torch.randn(mb, shape["seq"], shape["hidden"], device="cuda", dtype=BF16, requires_grad=True)
            g = torch.randn_like(x)
            run = _step(model, x, g)
            c0 = time.monotonic()
            run()
            torch.cuda.synchronize()
            first_s = time.monotonic() - c0
            t[depth] = bench(run, target_s=0.5, min_reps=5, flush=False)
            if depth == 2 and not compiled:
                ks = kernels_of(run)
                kern = {"kernels_2": len(ks), "kernel_us_2": round(sum(u for _, u in ks), 1)}
            del model, x, g
            torch.cuda.empty_cache()
        row = dict(kind="compiled" if compiled else "layer", model=name, layer=kind, micro_batch=mb, **shape,
                   dtype="bfloat16", ms_1=t[1]["median_ms"], ms_2=t[2]["median_ms"],
                   layer_ms=t[2]["median_ms"] - t[1]["median_ms"], min_ms_2=t[2]["min_ms"], first_call_s=first_s)
        if not compiled:
            row.update(kern)
        log.put(**row)


def _flash(q, k, v, causal):
    return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)


def ring_rows(log, cp: int, local: int = 32768, heads: int = 32, hd: int = 128) -> None:
    """One layer of one rank: the forward's calls and merges, then the backward's (aten's flash ops, as the
    ring's handlers call them)."""
    steps = ring_schedule(cp, local)
    half = local // 2
    q, k, v = (torch.randn(1, heads, local, hd, device="cuda", dtype=BF16) for _ in range(3))
    go = torch.randn(1, heads, local, hd, device="cuda", dtype=BF16)

    def parts(sq, sk, which):
        qq = q if which == "all" else q[:, :, half:]
        kk, vv = (k, v) if sk == local else (k[:, :, :half], v[:, :, :half])
        return qq, kk, vv

    def forward():
        out = torch.zeros(1, heads, local, hd, device="cuda", dtype=torch.float32)
        lse = torch.full((1, heads, local), float("-inf"), device="cuda")
        for i, (sq, sk, causal, which) in enumerate(steps):
            qq, kk, vv = parts(sq, sk, which)
            r = _flash(qq, kk, vv, causal)
            o, l = (out, lse) if which == "all" else (out[:, :, half:], lse[:, :, half:])
            if i == 0:  # the first step (all queries, causal): the output is the call's
                o.copy_(r[0].float())
                l.copy_(r[1])
            else:
                o.sub_(torch.sigmoid(r[1] - l).unsqueeze(-1) * (o - r[0].float()))
                l.sub_(F.logsigmoid(l - r[1]))
        return out.to(BF16), lse

    out, lse = forward()
    saved = {}
    for sq, sk, causal, which in steps:
        qq, kk, vv = parts(sq, sk, which)
        r = _flash(qq, kk, vv, causal)
        saved[(sq, sk, causal, which)] = r

    def backward():
        dq = torch.zeros(1, heads, local, hd, device="cuda", dtype=torch.float32)
        dk = torch.zeros_like(dq)
        dv = torch.zeros_like(dq)
        for key in steps:
            sq, sk, causal, which = key
            qq, kk, vv = parts(sq, sk, which)
            oo, ll = (out, lse) if which == "all" else (out[:, :, half:], lse[:, :, half:])
            g = go if which == "all" else go[:, :, half:]
            r = saved[key]
            gq, gk, gv = torch.ops.aten._scaled_dot_product_flash_attention_backward(
                g, qq, kk, vv, oo, ll.contiguous(), r[2], r[3], r[4], r[5], 0.0, causal, r[6], r[7])
            (dq if which == "all" else dq[:, :, half:]).add_(gq)
            (dk if sk == local else dk[:, :, :half]).add_(gk)
            (dv if sk == local else dv[:, :, :half]).add_(gv)
        return dq, dk, dv

    fwd, bwd = bench(forward, target_s=1.0, min_reps=3, flush=False), bench(backward, target_s=1.0, min_reps=3,
                                                                            flush=False)
    calls = {}
    for sq, sk, causal, which in sorted(set(steps)):
        qq, kk, vv = parts(sq, sk, which)
        f = bench(lambda: _flash(qq, kk, vv, causal), target_s=0.3, min_reps=3, flush=False)
        calls[f"{sq}x{sk}{'c' if causal else ''}"] = round(f["median_ms"], 4)
    log.put(kind="ring", cp=cp, local=local, heads=heads, head_dim=hd, dtype="bfloat16",
            steps=[list(s[:3]) for s in steps], fwd_ms=fwd["median_ms"], bwd_ms=bwd["median_ms"], fwd_calls_ms=calls)
    del q, k, v, go, saved, out, lse
    torch.cuda.empty_cache()


#: name: (tokens per micro-batch, micro-batches, [(K, N) of each linear of one tensor-parallel rank]) of NeMo 24.07's
#: fp8 rows (benchmarks/data/published_training.toml): QKV, projection, fc1, fc2 at hidden/tp splits
GEMM_LAYERS = {
    "gpt3-5b-tp1": (2048, (1, 2, 4), [(4096, 12288), (4096, 4096), (4096, 16384), (16384, 4096)]),
    "gpt3-20b-tp2": (2048, (1, 2), [(6144, 9216), (3072, 6144), (6144, 12288), (12288, 6144)]),
    "gpt3-175b-tp4": (2048, (1, 2), [(12288, 9216), (3072, 12288), (12288, 12288), (12288, 12288)]),
    "nemotron3-8b-tp2": (4096, (1, 2, 4), [(4096, 6144), (2048, 4096), (4096, 8192), (8192, 4096)]),
}


def _mm(m, k, n, dtype):
    """A zero-argument call of one (m, k) x (k, n) product: torch.matmul in bf16, torch._scaled_mm (tensorwise
    scales, bf16 out) in fp8 e4m3."""
    a = torch.randn(m, k, device="cuda", dtype=BF16)
    b = torch.randn(n, k, device="cuda", dtype=BF16)
    if dtype == "bf16":
        bt = b.t()
        return lambda: torch.matmul(a, bt)
    f8 = torch.float8_e4m3fn
    a8, b8 = a.to(f8), b.to(f8).t()
    one = torch.ones((), device="cuda", dtype=torch.float32)
    return lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=BF16)


def gemm_rows(log, name: str) -> None:
    """Each linear's forward (tokens x K x N), data gradient (tokens x N x K) and weight gradient (K x tokens x N)
    products at each micro-batch, bf16 and fp8: the layer's GEMM time per token against the micro-batch."""
    seq, mbs, linears = GEMM_LAYERS[name]
    for dtype in ("bf16", "fp8"):
        for mb in mbs:
            m = seq * mb
            ms = []
            for k, n in linears:
                for shape in ((m, k, n), (m, n, k), (k, m, n)):
                    ms.append(bench(_mm(*shape, dtype), target_s=0.2, min_reps=5, flush=True)["median_ms"])
            log.put(kind="gemm", layer=name, dtype=dtype, micro_batch=mb, tokens=m, linears=linears,
                    calls_ms=[round(x, 5) for x in ms], total_ms=sum(ms), us_per_token=1000 * sum(ms) / m)
            torch.cuda.empty_cache()


def _nvml():
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return lambda: (pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                        pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0)
    except Exception:  # noqa: BLE001 (no NVML: clocks not read)
        return lambda: (None, None)


def sustained_rows(log, seconds: float = 12.0) -> None:
    """Back-to-back products of one shape for ``seconds``: TFLOP/s per second of the run with the SM clock and
    the board power read then (NVML), random data (and zeros for the 8192 cube): what a step's GEMMs get once
    the clock settles under the power limit, against a short benchmark's first calls."""
    read = _nvml()
    shapes = [("bf16", 8192, 8192, 8192, "random"), ("bf16", 8192, 8192, 8192, "zeros"),
              ("bf16", 8192, 4096, 16384, "random"), ("fp8", 8192, 4096, 16384, "random")]
    for dtype, m, k, n, data in shapes:
        call = _mm(m, k, n, dtype)
        if data == "zeros":
            a, b = torch.zeros(m, k, device="cuda", dtype=BF16), torch.zeros(k, n, device="cuda", dtype=BF16)
            call = lambda a=a, b=b: torch.matmul(a, b)  # noqa: E731
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        per_s, t_end = [], time.monotonic() + seconds
        while time.monotonic() < t_end:
            t0, calls = time.monotonic(), 0
            while time.monotonic() - t0 < 1.0:
                for _ in range(20):
                    call()
                calls += 20
                torch.cuda.synchronize()
            dt = time.monotonic() - t0
            clock, watts = read()
            per_s.append([round(2 * m * k * n * calls / dt / 1e12, 1), clock, watts])
        log.put(kind="sustained", dtype=dtype, m=m, k=k, n=n, data=data, seconds=seconds,
                tflops_clock_watts=per_s)
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", default="layer,ring,compiled")
    ap.add_argument("--budget-s", type=float, default=400.0)
    a = ap.parse_args(argv)
    log = Log(a.out)
    log.put(kind="env", gpu=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda)
    only = a.only.split(",")
    jobs = []
    if "layer" in only:
        jobs += [lambda: layer_rows(log, "gpt", "gpt3-5b", (1, 2, 4)),
                 lambda: layer_rows(log, "llama", "llama3-8b", (1, 2))]
    if "ring" in only:
        jobs += [lambda c=c: ring_rows(log, c) for c in (1, 2, 4, 8)]
    if "gemm" in only:
        jobs += [lambda n=n: gemm_rows(log, n) for n in GEMM_LAYERS]
    if "sustained" in only:
        jobs += [lambda: sustained_rows(log)]
    if "compiled" in only:
        jobs += [lambda: layer_rows(log, "llama", "llama3-8b", (1,), compiled=True),
                 lambda: layer_rows(log, "gpt", "gpt3-5b", (1,), compiled=True)]
    for job in jobs:
        if time.monotonic() - T0 > a.budget_s:
            log.put(kind="skipped", reason="budget")
            break
        try:
            job()
        except Exception as e:  # noqa: BLE001 (a failed measurement is recorded, the others still run)
            log.put(kind="error", error=f"{type(e).__name__}: {e}"[:500])
    return 0


if __name__ == "__main__":
    sys.exit(main())
