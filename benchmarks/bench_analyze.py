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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp


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
            _whole_processes(path, args.processes, args.before)
        elif args.breakdown:
            from breakdown import breakdown  # (this script's folder is on the path)

            _compiled(_trees(args.before))
            breakdown(path, args.processes, dict(zip(["", " (before)"], _trees(args.before))), NEUTRAL)
        else:
            _in_processes(path, args.processes, args.repeat, args.before)


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
        _whole_processes(path, args.processes, args.before)
        _in_processes(path, args.processes, args.repeat, args.before)
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


#: XLA's cost analysis of an MLIR file, in a process of its own (what Lowered.cost_analysis() runs).
XLA_PROCESS = """
import sys
import jax
from jax._src.lib import _jax
text = open(sys.argv[1]).read()
backend = jax.devices("cpu")[0].client
comp = _jax.mlir.mlir_module_to_xla_computation(text, use_tuple_args=False)
print(int(_jax.hlo_module_cost_analysis(backend, comp.as_hlo_module())["flops"]))
"""


#: The folder the measured processes run in: not a checkout (``python -m``/``-c`` put it first on sys.path,
#: so a checkout there would be measured instead of the one PYTHONPATH names: ``--before`` would not be).
NEUTRAL = tempfile.gettempdir()


def _envs(before: str | None) -> dict:
    """name -> the environment of a process running this checkout's mhlo-cost (and ``before``'s)."""
    import os

    env = dict(os.environ, JAX_PLATFORMS="cpu")
    here = str(Path(__file__).resolve().parent.parent)
    envs = {"": dict(env, PYTHONPATH=os.pathsep.join([here, env.get("PYTHONPATH", "")]))}
    if before:
        envs[" (before)"] = dict(env, PYTHONPATH=os.pathsep.join([str(Path(before).resolve()), env.get("PYTHONPATH", "")]))
    return envs


def _whole_processes(path: Path, runs: int, before: str | None = None) -> None:
    """``mhlo-cost report FILE -q`` (this checkout's, and ``before``'s) and XLA's cost analysis of FILE, each a
    whole process, alternating; prints the medians and their ratios."""
    envs = _envs(before)
    cmds = {f"mhlo-cost report{tag}": ([sys.executable, "-m", "mhlo_cost", "report", str(path), "-q"], env)
            for tag, env in envs.items()}
    cmds["xla cost analysis"] = ([sys.executable, "-c", XLA_PROCESS, str(path)], envs[""])
    import resource

    _compiled(_trees(before))
    reaps = _subreaper()
    times: dict = {k: [] for k in cmds}
    cpu: dict = {k: [] for k in cmds}
    before_load = _load()
    for _ in range(runs):
        for name, (cmd, env) in cmds.items():
            c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=NEUTRAL)
            times[name].append(time.perf_counter() - t0)
            if reaps:
                _reap()
            c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(c1.ru_utime - c0.ru_utime + c1.ru_stime - c0.ru_stime)
    med = {k: statistics.median(v) for k, v in times.items()}
    mcpu = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"load average (1/5/15 min) before {before_load}, after {_load()}")
    for k, v in times.items():
        print(f"process: {k:<18} median {med[k]:6.3f} s wall, {mcpu[k]:6.3f} s CPU, of {runs} "
              f"({', '.join(f'{t:.2f}' for t in v)})")
    xla = "xla cost analysis"
    for mine in (k for k in cmds if k != xla):
        print(f"ratio {mine}/xla (whole processes) {med[mine] / med[xla]:6.2f} wall, {mcpu[mine] / mcpu[xla]:6.2f} "
              f"CPU   (target <= 0.25)")


def _load() -> str:
    """The load average now (1, 5, 15 minutes): the whole-process figures are wall times on a shared machine."""
    import os

    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _trees(before: str | None) -> list[str]:
    """The checkouts measured: this one, and ``before``."""
    here = str(Path(__file__).resolve().parent.parent)
    return [here] + ([str(Path(before).resolve())] if before else [])


def _compiled(trees: list[str]) -> None:
    """Each checkout's package compiled to bytecode first, as ``pip install`` leaves it (a checkout run from
    source under PYTHONDONTWRITEBYTECODE would otherwise compile every module in every run)."""
    import compileall

    for tree in trees:
        compileall.compile_dir(str(Path(tree) / "mhlo_cost"), quiet=1)


def _subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux), so that the CPU of mhlo-cost's
    reader child, which the process does not wait for at its exit, is counted in RUSAGE_CHILDREN."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _reap() -> None:
    """Wait for every orphan handed to this process (the reader's child ending after its parent)."""
    import os

    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


#: One process: warm up, then time ``repeat`` runs of one way to analyse FILE; prints the median seconds.
IN_PROCESS = """
import statistics, sys, time
path, how, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
if how == "xla":
    import jax
    from jax._src.lib import _jax
    backend = jax.devices("cpu")[0].client
    def run():
        text = open(path).read()
        comp = _jax.mlir.mlir_module_to_xla_computation(text, use_tuple_args=False)
        return _jax.hlo_module_cost_analysis(backend, comp.as_hlo_module())["flops"]
else:
    from mhlo_cost.analysis import analyze
    from mhlo_cost.ir.guard import prestart
    prestart(walk=True)
    if how == "worker":
        from mhlo_cost.analysis.isolated import analyze_isolated as analyze
    def run():
        return analyze(path).summary
run()
times = []
for _ in range(repeat):
    t0 = time.perf_counter()
    run()
    times.append(time.perf_counter() - t0)
print(statistics.median(times))
"""


def _in_processes(path: Path, rounds: int, repeat: int, before: str | None = None) -> None:
    """The analysis in process (API and worker; ``before``'s API), and XLA's, alternating processes; prints
    the medians of the per-process medians and their ratios to XLA's."""
    envs = _envs(before)
    ways = {"xla in process": ("xla", envs[""]), "mhlo-cost analyze()": ("api", envs[""])}
    ways["mhlo-cost worker"] = ("worker", envs[""])  # the walk in the reader's child, the rows back
    if before:
        ways["mhlo-cost analyze() (before)"] = ("api", envs[" (before)"])
    times: dict = {k: [] for k in ways}
    for _ in range(rounds):
        for name, (how, env) in ways.items():
            out = subprocess.run([sys.executable, "-c", IN_PROCESS, str(path), how, str(repeat)], check=True,
                                 capture_output=True, env=env, text=True, cwd=NEUTRAL).stdout
            times[name].append(float(out.split()[-1]))
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"in process: {k:<28} median {med[k]:6.3f} s  ({', '.join(f'{t:.2f}' for t in v)})")
    for k in ways:
        if k != "xla in process":
            print(f"ratio {k}/xla (in process) {med[k] / med['xla in process']:6.2f}   (target <= 2)")


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
