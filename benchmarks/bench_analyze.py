"""How fast is mhlo-cost against MLIR parsing alone and against XLA's own cost analysis?

Lowers a synthetic transformer from JAX (``--layers`` unrolled layers, abstract shapes only), writes its
StableHLO text, then in one run measures, each the best of ``--repeat`` runs:

* parse: jaxlib's MLIR parser reading the text into a module;
* mhlo-cost: the full analysis (parse, walk, op table, summary);
* xla: ``Lowered.cost_analysis()`` on the same lowered module (HLO conversion plus XLA's analysis);
* liveness: the analysis with and without the memory sweep behind ``peak_bytes`` (CPU time, alternating);
* crash guard: end to end with jaxlib's reader in a child process (the default) and in process.

It prints the three times and the ratios (analysis-after-parse / parse, xla / mhlo-cost). Targets: the
analysis after parsing takes no longer than the parse; end to end at least 3x faster than XLA.

Then, as a user meets them, whole processes on the same file (the interpreter's start and every import
included), alternating, the median of ``--processes`` runs each: ``mhlo-cost report FILE -q`` against a
process that reads the same text and runs XLA's cost analysis on it (``mlir_module_to_xla_computation`` and
``hlo_module_cost_analysis``, what ``Lowered.cost_analysis()`` runs). Target (issue 41): mhlo-cost <= 1/4 of XLA,
the median of 9, on a quiet machine.
``--before TREE`` adds ``report`` from another checkout of mhlo-cost (the code before a change) to the same
alternation. Each checkout's package is compiled to bytecode first, as an installed package is; the CPU time of
mhlo-cost's process includes its reader child's, which ends after it (this process reaps it: Linux).

In process (``--in-process``), each in a fresh process, warmed up (imports done, the reader's child started),
then timed ``--repeat`` times, alternating processes over ``--processes`` rounds (median of the medians):
the analysis of FILE with its summary, as the Python API runs it (``analyze(FILE).summary``: parse in the
reader's child, bytecode to this process, walk here) and as the command line runs it (parse and walk in the
child, the rows back: ``analyze_isolated``), against XLA's cost analysis of the same text in process (parse,
HLO conversion, analysis). Target: <= 2x XLA.

``--breakdown`` prints where the CPU of ``mhlo-cost report FILE -q`` goes, the median of ``--processes`` fresh
processes (alternating with ``--before``'s): the reader child's start (interpreter, jaxlib, the walk's modules,
as it starts), then what it does with the request, as it does it: jaxlib's parse, the walk, the rendering (the
summary, its memory profile and blocks, the text). The caller's own process (its start and imports, overlapped
with the child's start) is measured by the whole-process comparison.

    python benchmarks/bench_analyze.py [--layers 400] [--repeat 3] [--processes 9] [--before TREE]
    python benchmarks/bench_analyze.py --processes-only|--in-process|--breakdown [--before TREE]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp

# (this script's folder is on the path)
from analyze_processes import NEUTRAL, compiled, in_processes, trees, whole_processes


def transformer(layers: int, hidden: int, heads: int):
    def layer(x, w):
        with jax.named_scope("attn"):
            h = _norm(x)
            qkv = h @ w["qkv"]
            q, k, v = jnp.split(qkv, 3, axis=-1)
            b, s, _ = q.shape
            q = q.reshape(b, s, heads, -1)
            k = k.reshape(b, s, heads, -1)
            v = v.reshape(b, s, heads, -1)
            a = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / 8.0, axis=-1)
            o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(b, s, -1)
            x = x + o @ w["proj"]
        with jax.named_scope("mlp"):
            h = _norm(x)
            x = x + jax.nn.gelu(h @ w["fc1"]) @ w["fc2"]
        return x

    def _norm(x):
        m = jnp.mean(x, axis=-1, keepdims=True)
        v = jnp.mean(jnp.square(x - m), axis=-1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(v + 1e-6)

    def model(x, ws):
        for i, w in enumerate(ws):
            with jax.named_scope(f"layers.{i}"):
                x = layer(x, w)
        return x

    return model


def lower(layers: int, hidden: int = 256, heads: int = 4, seq: int = 128, batch: int = 2):
    dt = jnp.bfloat16
    w = {"qkv": (hidden, 3 * hidden), "proj": (hidden, hidden), "fc1": (hidden, 4 * hidden),
         "fc2": (4 * hidden, hidden)}
    ws = [{k: jax.ShapeDtypeStruct(s, dt) for k, s in w.items()} for _ in range(layers)]
    x = jax.ShapeDtypeStruct((batch, seq, hidden), dt)
    return jax.jit(transformer(layers, hidden, heads)).lower(x, ws)


def best(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def _arguments():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--processes", type=int, default=9, help="whole-process runs of each (median)")
    ap.add_argument("--processes-only", action="store_true", help="only the whole-process comparison")
    ap.add_argument("--in-process", action="store_true", help="only the in-process comparison")
    ap.add_argument("--breakdown", action="store_true", help="only the CPU of the report's child, by phase")
    ap.add_argument("--before", help="a checkout of mhlo-cost before a change, measured alongside")
    ap.add_argument("--file", help="an MLIR file to measure instead of the lowered transformer")
    return ap.parse_args()


def _one_comparison(args) -> None:
    """``--processes-only`` or ``--in-process``: that comparison alone, on ``--file`` or the lowered transformer."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(args.file or Path(d) / "model.mlir")
        if not args.file:
            path.write_text(lower(args.layers).as_text(debug_info=True))
        if args.processes_only:
            whole_processes(path, args.processes, args.before)
        elif args.breakdown:
            from breakdown import breakdown  # (this script's folder is on the path)

            compiled(trees(args.before))
            breakdown(path, args.processes, dict(zip(["", " (before)"], trees(args.before))), NEUTRAL)
        else:
            in_processes(path, args.processes, args.repeat, args.before)


def main() -> None:
    args = _arguments()
    if args.processes_only or args.in_process or args.breakdown:
        _one_comparison(args)
        return

    from mhlo_cost import analyze
    from mhlo_cost.ir.loader import load

    t0 = time.perf_counter()
    lowered = lower(args.layers)
    text = lowered.as_text(debug_info=True)
    t_lower = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.mlir"
        path.write_text(text)
        t_parse, loaded = best(lambda: load(path), args.repeat)
        n_ops = sum(1 for _ in _walk(loaded.module))
        # The analysis proper, on modules parsed beforehand (each run gets a fresh one).
        modules = [load(path) for _ in range(args.repeat)]
        t_after, _ = best(lambda: analyze(modules.pop()).summary, args.repeat)
        modules.clear()
        t_full, analysis = best(lambda: _end_to_end(analyze, path), args.repeat)
        t_xla, xla = best(lambda: lowered.cost_analysis(), args.repeat)
        t_plain, t_live = _liveness_cost(path, max(args.repeat, 5))
        whole_processes(path, args.processes, args.before)
        in_processes(path, args.processes, args.repeat, args.before)
        guard = _guard_cost(path, max(args.repeat, 5))

    s = analysis.summary
    print(f"model: {args.layers} unrolled layers, {n_ops} ops, {len(text) / 1e6:.1f} MB of text "
          f"(lowered in {t_lower:.2f}s)")
    print(f"parse (jaxlib MLIR)        {t_parse:8.3f} s")
    print(f"mhlo-cost analysis alone   {t_after:8.3f} s   (walk and counts of a parsed module)")
    print(f"mhlo-cost (end to end)     {t_full:8.3f} s   (read, parse, analysis, summary)")
    print(f"xla cost_analysis()        {t_xla:8.3f} s")
    print(f"memory: peak {s['peak_bytes']:,} bytes; liveness adds {t_live / t_plain - 1:+.1%} to the analysis "
          f"({t_plain:.3f} s without its frame record and sweep, {t_live:.3f} s with; target <= +20%)")
    print(f"crash guard: load {guard[1]:.3f} s with the reader in a child process, {guard[0]:.3f} s in process "
          f"(ratio {guard[1] / guard[0]:.2f}); end to end {guard[3]:.3f} s against {guard[2]:.3f} s "
          f"(ratio {guard[3] / guard[2]:.2f})")
    print(f"ratio analysis/parse       {t_after / t_parse:8.2f}   (target <= 1)")
    print(f"ratio xla/mhlo-cost        {t_xla / t_full:8.2f}   (target >= 3)")
    print(f"flops: mhlo-cost gemm+conv+vector {s['gemm_flops'] + s['conv_flops'] + s['vector_flops']:,}; "
          f"xla {int(xla.get('flops', 0)):,}")


def _liveness_cost(path, repeat: int) -> tuple[float, float]:
    """CPU seconds (best of ``repeat``, alternating) of the analysis of a parsed module with the summary,
    without liveness (the cost rules alone: no frame record, no sweep) and with it (``peak_bytes`` in the
    summary). The value keys the walk gives every row are in both."""
    from mhlo_cost.analysis import Analysis, walk
    from mhlo_cost.ir.loader import load
    from mhlo_cost.walk.base import IRVisitor
    from mhlo_cost.walk.liveness import LivenessRecorder

    import gc

    times = {False: [], True: []}
    for _ in range(repeat):
        for live in (False, True):
            module = load(path)
            gc.collect()  # the previous run's rows are freed here, not inside the timing
            t0 = time.process_time()
            recorder = LivenessRecorder()
            _, v = walk(module, lambda m, entry: IRVisitor(m, entry, recorders=[recorder] if live else []))
            a = Analysis(v.rows, "", v.entry, liveness=recorder.recording() if live else None)
            a.summary
            times[live].append(time.process_time() - t0)
            del a, v, module
    return min(times[False]), min(times[True])


def _guard_cost(path, repeat: int) -> tuple[float, float, float, float]:
    """Wall seconds (best of ``repeat``, alternating) of the load alone and of load + analysis + summary,
    with jaxlib's reader in this process and in the child process of :mod:`mhlo_cost.ir.guard` (the default;
    started beforehand, as it is after a process's first load): (load in, load guarded, end to end in,
    end to end guarded)."""
    from mhlo_cost import analyze
    from mhlo_cost.ir.loader import load

    load(path)  # the reader's child process starts once per process
    times = {k: [] for k in ("load0", "load1", "e2e0", "e2e1")}
    for _ in range(repeat):
        for isolate in (False, True):
            t0 = time.perf_counter()
            loaded = load(path, isolate=isolate)
            t1 = time.perf_counter()
            analyze(loaded).summary
            times[f"load{int(isolate)}"].append(t1 - t0)
            times[f"e2e{int(isolate)}"].append(time.perf_counter() - t0)
            del loaded
    return tuple(min(times[k]) for k in ("load0", "load1", "e2e0", "e2e1"))


def _end_to_end(analyze, path):
    a = analyze(path)
    a.summary  # what `mhlo-cost report` prints by default
    return a


def _walk(module):
    stack = [op.operation for op in module.body.operations]
    while stack:
        op = stack.pop()
        yield op
        for r in op.regions:
            for b in r.blocks:
                stack.extend(o.operation for o in b.operations)


if __name__ == "__main__":
    main()
