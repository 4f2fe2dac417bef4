"""Text and JSON of the figures of an inference step (:class:`~.serve.Figures`)."""
from __future__ import annotations

import json
from dataclasses import asdict


def _gb(n: int) -> str:
    return f"{n:,} B ({n / 1e9:.3f} GB)"


def _time(s: float) -> str:
    return f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} us"


def text(f, what: str = "", layout=None) -> str:
    """The report of one step: cache, memory, time, intensity, and the bound per block."""
    lines = [f"{what}" if what else "", f"on {f.hardware}" + (f", tensor parallel over {f.tp} devices" if f.tp > 1
                                                                else "") + " (compiled: fused kernels"
             + ("; one CUDA graph: no host launch per kernel)" if f.launch == "cuda-graphs" else ")")]
    lines.append("KV cache")
    if layout is not None:
        lines.append(f"  layout                {layout.describe()}")
    per = sorted(set(f.kv_cache_layer_bytes))
    lines.append(f"  per layer             {', '.join(f'{b:,} B' for b in per)}")
    lines.append(f"  total                 {_gb(f.kv_cache_bytes)}")
    lines.append(f"memory per device{' (weights and cache / ' + str(f.tp) + ')' if f.tp > 1 else ''}")
    lines.append(f"  weights               {_gb(f.weight_bytes)}")
    lines.append(f"  activations           {_gb(f.activation_bytes)}")
    lines.append(f"  total                 {_gb(f.memory_bytes)} of {f.capacity_bytes / 1e9:.0f} GB: "
                 + ("fits" if f.fits else "DOES NOT FIT"))
    lines.append(f"  largest batch         {f.max_batch} at context {f.context}")
    lines.append("  largest context       " + ("unbounded (every layer a sliding window)" if f.max_context is None
                                              else f"{f.max_context} at batch {f.batch}"))
    lines.append("time")
    if f.step == "decode":
        lines.append(f"  per output token      {_time(f.step_time_s)} (one decode step of batch {f.batch})")
        lines.append(f"  tokens/s              {f.tokens_per_s:,.1f} ({f.tokens_per_s / f.batch:,.1f} per sequence)")
    else:
        lines.append(f"  to first token        {_time(f.step_time_s)} (prefill of {f.tokens} tokens x {f.batch})")
        lines.append(f"  prompt tokens/s       {f.tokens_per_s:,.1f}")
    if f.tp > 1:
        lines.append(f"  of which all_reduce   {_time(f.comm_time_s)}")
    lines.append(f"  FLOPs                 {f.flops:,}")
    lines.append(f"  bytes moved           {f.bytes_moved:,} (fused kernels)")
    lines.append(f"  intensity             {f.intensity:.2f} FLOP/B vs ridge {f.ridge:.1f}: {f.bound}-bound")
    if f.blocks:
        lines.append("blocks (one device)")
        width = max(len(b) for b, _, _ in f.blocks)
        for b, t, bound in f.blocks:
            lines.append(f"  {b:<{width}}  {_time(t):>12}  {bound}")
    return "\n".join(line for line in lines if line is not None).lstrip("\n") + "\n"


def as_json(f, what: str = "", layout=None) -> str:
    d = asdict(f)
    d["blocks"] = [{"block": b, "est_time_s": t, "bound": bound} for b, t, bound in f.blocks]
    d["what"] = what
    if layout is not None:
        d["kv_cache_layout"] = layout.describe()
    return json.dumps(d, indent=2, sort_keys=False) + "\n"
