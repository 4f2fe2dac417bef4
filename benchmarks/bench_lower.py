"""Is ``lower`` + ``report`` on a library model, whole process, no slower than building the model and counting it
with torch's FlopCounterMode (issue 41, item 5)?

Two ways to a 2-layer transformers Llama (hidden 2048, intermediate 5632, 16 heads, one 512-token sequence), each
whole processes (the interpreter's start and every import included), alternating, the median of ``--runs``:

* mhlo-cost: ``mhlo-cost lower --hf LlamaForCausalLM ... -o F.mlir`` then ``mhlo-cost report F.mlir -q`` (two
  processes, their times summed; a fresh, empty cache folder for each round);
* torch: one process that imports transformers, builds ``LlamaForCausalLM(config)`` (real weights on the CPU, as a
  user would) and runs its forward under ``torch.utils.flop_counter.FlopCounterMode``.

It prints both medians (wall and CPU), the ratio mhlo-cost / torch (target <= 1), and the two GEMM FLOP counts:
they differ by the attention's two batched products per layer (QK^T and AV, 2 x heads x tokens^2 x head_dim FLOPs
each), which mhlo-cost counts and FlopCounterMode does not see on the CPU (transformers calls
``scaled_dot_product_attention``, whose CPU kernel FlopCounterMode has no formula for); the benchmark says so.

    python benchmarks/bench_lower.py [--runs 5] [--layers 2] [--hidden 2048] [--tokens 512]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: The torch side, one process: build the model from its configuration and count one forward.
TORCH_PROCESS = """
import sys
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import LlamaConfig, LlamaForCausalLM
layers, hidden, inter, heads, tokens = map(int, sys.argv[1:6])
cfg = LlamaConfig(num_hidden_layers=layers, hidden_size=hidden, intermediate_size=inter,
                  num_attention_heads=heads, num_key_value_heads=heads)
model = LlamaForCausalLM(cfg).eval()
ids = torch.zeros((1, tokens), dtype=torch.int64)
with torch.no_grad(), FlopCounterMode(display=False) as counter:
    model(ids)
print(counter.get_total_flops())
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="rounds, alternating (median)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=512)
    args = ap.parse_args()
    here = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    sets = [f"num_hidden_layers={args.layers}", f"hidden_size={args.hidden}",
            f"intermediate_size={args.intermediate}", f"num_attention_heads={args.heads}",
            f"num_key_value_heads={args.heads}"]
    lower_args = ["--hf", "LlamaForCausalLM", "--config", "llama", "--input", f"1x{args.tokens}:int64"]
    for s in sets:
        lower_args += ["--set", s]
    torch_cmd = [sys.executable, "-c", TORCH_PROCESS, str(args.layers), str(args.hidden), str(args.intermediate),
                 str(args.heads), str(args.tokens)]
    wall: dict = {"mhlo-cost lower": [], "mhlo-cost report": [], "mhlo-cost lower+report": [], "torch": []}
    cpu: dict = {k: [] for k in wall}
    flops = {}
    with tempfile.TemporaryDirectory() as d:
        for i in range(args.runs):
            run_env = dict(env, XDG_CACHE_HOME=f"{d}/cache{i}", XDG_STATE_HOME=f"{d}/state{i}")
            path = f"{d}/llama{i}.mlir"
            mine = [[sys.executable, "-m", "mhlo_cost", "lower", *lower_args, "-o", path, "-q"],
                    [sys.executable, "-m", "mhlo_cost", "report", path, "--format", "json", "-q"]]
            outs = []
            for name, cmd in zip(("mhlo-cost lower", "mhlo-cost report"), mine):
                outs.append(_timed(cmd, run_env, d, wall[name], cpu[name]))
            wall["mhlo-cost lower+report"].append(wall["mhlo-cost lower"][-1] + wall["mhlo-cost report"][-1])
            cpu["mhlo-cost lower+report"].append(cpu["mhlo-cost lower"][-1] + cpu["mhlo-cost report"][-1])
            flops["mhlo-cost"] = _gemm_flops(outs[-1])
            flops["torch"] = int(_timed(torch_cmd, run_env, d, wall["torch"], cpu["torch"]).split()[-1])
    med = {k: statistics.median(v) for k, v in wall.items()}
    mcpu = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"model: LlamaForCausalLM, {args.layers} layers, hidden {args.hidden}, intermediate {args.intermediate}, "
          f"{args.heads} heads, 1x{args.tokens} tokens")
    for k, v in wall.items():
        print(f"process: {k:<24} median {med[k]:7.2f} s wall, {mcpu[k]:7.2f} s CPU, of {len(v)} "
              f"({', '.join(f'{t:.2f}' for t in v)})")
    ratio, ratio_cpu = med["mhlo-cost lower+report"] / med["torch"], mcpu["mhlo-cost lower+report"] / mcpu["torch"]
    print(f"ratio mhlo-cost lower+report / torch FlopCounterMode (whole processes) {ratio:5.2f} wall, "
          f"{ratio_cpu:5.2f} CPU   (target <= 1)")
    head_dim = args.hidden // args.heads
    attention = args.layers * 2 * (2 * args.heads * args.tokens ** 2 * head_dim)
    print(f"GEMM FLOPs: mhlo-cost {flops['mhlo-cost']:,}; torch FlopCounterMode {flops['torch']:,}; difference "
          f"{flops['mhlo-cost'] - flops['torch']:,} (the attention's QK^T and AV, closed form: {attention:,})")


def _timed(cmd: list, env: dict, cwd: str, walls: list, cpus: list) -> str:
    """Run ``cmd`` to its end; its wall and CPU seconds appended; its stdout."""
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=cwd, text=True).stdout
    walls.append(time.perf_counter() - t0)
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpus.append(c1.ru_utime - c0.ru_utime + c1.ru_stime - c0.ru_stime)
    return out


def _gemm_flops(report_json: str) -> int:
    import json

    data = json.loads(report_json)
    rows = data if isinstance(data, list) else data.get("rows", [data])
    for row in rows:
        if isinstance(row, dict) and row.get("metric") == "gemm_flops":
            return int(row["value"])
    raise SystemExit(f"no gemm_flops in the report: {report_json[:200]}")


if __name__ == "__main__":
    main()
