"""``train-plan --sweep`` over the whole vocabulary at scale (issue 38, build 5): a Llama-3.1-405B-shaped model on
1,024 H100 GPUs (dgx-h100: 128 nodes), every tensor x context x pipeline x data split, micro-batch, recompute,
interleaving, ZeRO stage / FSDP, HSDP sharding group and precision. Two runs, each a fresh process on one cache
folder: the first lowers every distinct layer (on a local pool of --jobs processes), the second finds them in the
cache and only prices. Prints each run's time (the process's, imports included, and the sweep's own), the
combinations priced and rejected, the distinct layers lowered, and the best few. No target is asserted (the issue's:
the warm run under a minute).

    python benchmarks/bench_train_sweep.py                 # the full space (about 80 lowerings the first time)
    python benchmarks/bench_train_sweep.py --small         # two tensor degrees, one precision: a quick look
    python benchmarks/bench_train_sweep.py --cache-dir D   # keep the cache (a later call is warm from the start)
    python benchmarks/bench_train_sweep.py --profile       # the warm run under cProfile: the top functions

Llama 3.1 405B (Llama 3 paper, table 3; config.json of meta-llama/Llama-3.1-405B): 126 layers, hidden 16,384, 128
heads, 8 key/value heads, SwiGLU 53,248 wide, vocabulary 128,256, sequence 8,192; a global batch of 2,048
sequences (16M tokens); fused (flash) attention, no dropout.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LLAMA_405B = dict(layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248, vocab=128256, seq=8192,
                  mlp_kind="swiglu", dropout=False, global_batch=2048, attention="fused")
#: The sweep's dimensions (mhlo_cost.studies.plan.search.Space); tensor degrees 1-8 (the default).
SPACE = dict(cps=(1, 2), micro_batches=(1, 2), recomputes=("selective", "full"), interleaves=(1, 2),
             zeros=(1, 3), dp_shards=(0, 8), precisions=("bf16", "fp8-rowwise"))
SMALL = dict(SPACE, precisions=("bf16",), only="tp48")


def child(cache: str, jobs: int, small: bool, out: str) -> None:
    """One sweep in this (fresh) process; its figures written to ``out`` as JSON."""
    t0 = time.perf_counter()
    from mhlo_cost.network import resolve_profile
    from mhlo_cost.studies.plan import costs
    from mhlo_cost.studies.plan.config import ScaleConfig
    from mhlo_cost.studies.plan.search import prefetch, split_count, splits, sweep

    space = dict(SMALL if small else SPACE)
    if space.pop("only", None):
        space.update(max_t=8, only=lambda t, p, d: t in (4, 8))
    hw = resolve_profile("dgx-h100")
    base = ScaleConfig(**LLAMA_405B)
    imported = time.perf_counter()
    valid = [c for c, why in splits(base, 1024, **space) if why is None]
    lowered = prefetch(valid, hw, cache, jobs=jobs)
    lowered_s = time.perf_counter()
    df, skipped = sweep(base, 1024, hw, cache, **space)
    done = time.perf_counter()
    fits = df[df["fits"]]
    best = [{"config": r["config"], "iteration_s": round(r["iteration_s"], 3), "mfu": round(r["mfu"], 3)}
            for _, r in fits.head(5).iterrows()]
    figures = {"combinations": split_count(1024, **space), "priced": len(df), "fit": len(fits),
               "rejected": len(skipped), "lowered": lowered, "distinct_layers": len(costs._MEMO),
               "import_s": imported - t0, "lowering_s": lowered_s - imported, "pricing_s": done - lowered_s,
               "best": best}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(figures, f)


def run(cache: str, jobs: int, small: bool, profile: bool = False) -> dict:
    """One run in a fresh process: its figures and its wall time (interpreter start and imports included)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "figures.json")
        argv = [sys.executable, *(["-m", "cProfile", "-s", "cumulative"] if profile else []), __file__, "--child",
                "--cache-dir", cache, "--jobs", str(jobs), "--out", out, *(["--small"] if small else [])]
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        t0 = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if done.returncode:
            sys.exit(f"the sweep failed ({done.returncode}):\n{done.stderr[-3000:]}")
        if profile:
            print("\n".join(done.stdout.splitlines()[:45]))
        with open(out, encoding="utf-8") as f:
            return json.load(f) | {"wall_s": wall}


def show(name: str, f: dict) -> None:
    print(f"{name}: {f['wall_s']:.1f} s in all (imports {f['import_s']:.1f} s, lowering {f['lowering_s']:.1f} s: "
          f"{f['lowered']} distinct layers lowered, pricing {f['pricing_s']:.1f} s); {f['combinations']:,} "
          f"combinations: {f['priced']:,} priced ({f['fit']:,} fit), {f['rejected']:,} rejected", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--cache-dir", help="the cache folder (default: a new temporary one, removed after)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="local processes lowering the layers")
    ap.add_argument("--small", action="store_true", help="tensor degrees 4 and 8, bf16 only")
    ap.add_argument("--profile", action="store_true", help="run the warm sweep under cProfile")
    a = ap.parse_args(argv)
    if a.child:
        return child(a.cache_dir, a.jobs, a.small, a.out)
    with tempfile.TemporaryDirectory() as tmp:
        cache = a.cache_dir or tmp
        print(f"Llama-3.1-405B shape on 1,024 GPUs of dgx-h100; cache {cache}; {a.jobs} local process(es)", flush=True)
        show("first run (lowerings)", run(cache, a.jobs, a.small))
        second = run(cache, a.jobs, a.small, a.profile)
        show("second run (cache warm)", second)
        for i, b in enumerate(second["best"], 1):
            print(f"  {i}. {b['config']}: {b['iteration_s']} s per iteration, MFU {b['mfu']:.1%}")


if __name__ == "__main__":
    main()
