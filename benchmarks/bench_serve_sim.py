"""How long does a serving simulation of 10,000 requests take once its step model is fitted?

The bundled GPT at Llama-3-8B's widths (hidden 4096, 32 heads, 32 layers, vocabulary 128,256; its MLP is 4 x
hidden and its attention multi-head, so 7.5 B parameters and 4 x Llama-8B's grouped-query KV cache) is served on
an H100 (``--hardware``): the decode step is lowered at the fit's five points (:mod:`mhlo_cost.studies.serve.stepmodel`;
through the step cache, so a second run reads them), then ``--requests`` requests of ``--isl`` input and ``--osl``
output tokens run through the scheduler at ``--concurrency``. It prints the time of the lowerings and fit, the
time of the simulation (scheduler, every step priced, the figures), its steps and its headline. Target: the
simulation under 10 s on the development machine (2 shared cores).

    python benchmarks/bench_serve_sim.py [--requests 10000] [--isl 1024] [--osl 128] [--concurrency 64]
"""
from __future__ import annotations

import argparse
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--isl", default="1024")
    ap.add_argument("--osl", default="128")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--hardware", default="h100")
    ap.add_argument("--cache-dir", default=None, help="the step cache (default: a fresh temporary folder)")
    ap.add_argument("--check-prefill", type=int, default=0, metavar="P",
                    help="also lower the prefill of P tokens and print the roofline's time beside the step model's "
                         "(the model prices a prefill through the decode step's kernels; see stepmodel)")
    a = ap.parse_args()

    from mhlo_cost.lower.inference.steps import StepRequest
    from mhlo_cost.roofline import hardware_from_args
    from mhlo_cost.studies.serve.simload import Lengths
    from mhlo_cost.studies.serve.simstudy import SimOptions, SimStudy
    from mhlo_cost.views.serve_sim import sim_headline

    req = StepRequest(model="gpt", overrides=(("heads", 32), ("hidden", 4096), ("layers", 32), ("vocab", 128256)))
    root = a.cache_dir or tempfile.mkdtemp(prefix="bench-serve-sim-")
    opts = SimOptions(req, hardware_from_args(a.hardware, None), Lengths.parse(a.isl), Lengths.parse(a.osl),
                      a.requests, a.concurrency, cache_dir=root)
    study = SimStudy(opts, stage=lambda text: print(f"  {text}", flush=True))
    t0 = time.perf_counter()
    model = study.model
    _ = study.memory
    t1 = time.perf_counter()
    print(f"lowerings and fit: {t1 - t0:.1f} s; check point {model.checked}")
    t2 = time.perf_counter()
    trace = study.trace
    fig = study.figures
    t3 = time.perf_counter()
    print(f"simulation of {a.requests} requests: {t3 - t2:.2f} s ({len(trace.step_s)} steps, "
          f"{(t3 - t2) / max(len(trace.step_s), 1) * 1e6:.0f} us per step)")
    print(sim_headline(fig))
    print(f"KV blocks {fig['kv_cache']['kv_blocks']:,}; batch mean {fig['batches']['batch_mean']:.1f}; "
          f"TTFT mean {fig['latency']['ttft_mean_s'] * 1e3:.1f} ms; TPOT mean {fig['latency']['tpot_mean_s'] * 1e3:.2f} ms")
    print(f"step model: decode batch 64 context 1024 {model.decode_time_s(64, 1024) * 1e3:.2f} ms; "
          f"prefill of 1024 tokens {model.prefill_time_s(1024) * 1e3:.2f} ms")
    if a.check_prefill:
        _check_prefill(study, req, a.check_prefill)


def _check_prefill(study, req, tokens: int) -> None:
    from dataclasses import replace

    from mhlo_cost.studies.serve.grid import StepCache
    from mhlo_cost.studies.serve.serve import figures

    cache = StepCache(study.options.cache_dir)
    t0 = time.perf_counter()
    step, _ = cache.step(replace(req, mode="prefill", batch=1, context=tokens, tokens=tokens))
    want = figures(step, study.hardware, launch=study.options.launch, blocks=False).step_time_s
    got = study.model.prefill_time_s(tokens)
    print(f"prefill of {tokens} tokens: roofline of the lowered prefill {want * 1e3:.2f} ms, step model "
          f"{got * 1e3:.2f} ms (ratio {got / want:.3f}; lowered in {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
