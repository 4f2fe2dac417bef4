"""Timing on a CUDA GPU for ``benchmarks/gpu_measure.py``: the results log (one JSON object per measurement,
written as it goes), CUDA-event timing with the L2 cache flushed between calls, and the kernels one call
launches (torch.profiler)."""
from __future__ import annotations

import json
import os
import statistics
import time

import torch

T0 = time.monotonic()


class Log:
    def __init__(self, out_dir: str):
        os.makedirs(out_dir, exist_ok=True)
        self.f = open(os.path.join(out_dir, "gpu_results.jsonl"), "a", encoding="utf-8")
        self.rows = []

    def put(self, **row) -> None:
        row["at_s"] = round(time.monotonic() - T0, 1)
        self.f.write(json.dumps(row, sort_keys=True) + "\n")
        self.f.flush()
        self.rows.append(row)
        print(json.dumps(row, sort_keys=True)[:300], flush=True)


# -- timing -------------------------------------------------------------------------------------------------
_FLUSH = None


def bench(fn, target_s: float = 0.25, min_reps: int = 5, max_reps: int = 100, flush: bool = True) -> dict:
    """Median and minimum milliseconds of ``fn()`` by CUDA events, after two warm-up calls."""
    global _FLUSH
    if flush and _FLUSH is None:
        _FLUSH = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    one = time.perf_counter() - t
    reps = max(min_reps, min(max_reps, int(target_s / max(one, 1e-6))))
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in ev:
        if flush:
            _FLUSH.zero_()
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    ms = sorted(a.elapsed_time(b) for a, b in ev)
    return {"median_ms": statistics.median(ms), "min_ms": ms[0], "reps": reps}


def kernels_of(fn) -> list[tuple[str, float]]:
    """(name, microseconds) of each GPU kernel one call of ``fn`` launches."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            out.append((e.name, e.time_range.elapsed_us()))
    return out
