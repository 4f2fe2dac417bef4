"""The figures of a serving simulation (:func:`.sim.simulate`'s :class:`~.sim.Trace`): throughput, latencies,
KV utilisation and the batches run, as one ordered dict per section (the view writes them,
:mod:`mhlo_cost.views.serve_sim`).

- throughput over the run's duration (from 0 to the last request's finish): requests/s, input and output
  tokens/s, in total and per GPU (None for a run of no duration);
- TTFT (first token - arrival), TPOT (per request: (finish - first token) / (output tokens - 1), requests of
  more than one output token), inter-token latency (every gap between two tokens of a request), end-to-end
  latency: mean, p50, p90, p99 (numpy's linear percentiles);
- KV utilisation: blocks in use / blocks, weighted by each step's time (mean; every step alike where none takes
  time) and its maximum;
- batches: sequences and tokens per step (mean, p50, max), steps, preemptions;
- memory: the server's accounting (:func:`.server.memory`) and ``max_concurrency``, the requests of the longest
  length (input + output) whose KV blocks fit at once.
"""
from __future__ import annotations

import numpy as np

PERCENTILES = (50, 90, 99)


def _spread(values, name: str) -> dict:
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return {f"{name}_mean_s": None} | {f"{name}_p{p}_s": None for p in PERCENTILES}
    return {f"{name}_mean_s": float(v.mean())} | {f"{name}_p{p}_s": float(np.percentile(v, p))
                                                 for p in PERCENTILES}


def figures(trace, work, mem, cfg, gpus: int = 1) -> dict:
    """Sections (dicts of figures) of one run; ``mem``: its :class:`~.server.Memory` (None: the blocks were given)."""
    dur = float(np.max(trace.finish))
    n = len(work)
    ins, outs = int(work.inputs.sum()), int(work.outputs.sum())
    many = work.outputs > 1
    tpot = (trace.finish[many] - trace.first[many]) / (work.outputs[many] - 1)
    steps = np.asarray(trace.step_s)
    blocks = mem.blocks if mem is not None else None
    used = np.asarray(trace.step_blocks, dtype=float)
    seqs, toks = np.asarray(trace.step_seqs), np.asarray(trace.step_tokens)
    out = {"workload": {"requests": n, "input_tokens": ins, "output_tokens": outs, "gpus": gpus,
                        "duration_s": dur}}
    def per_s(count, per_gpu=1):  # None where the run took no time (a step function of zero seconds)
        return count / dur / per_gpu if dur > 0 else None

    out["throughput"] = {"requests_per_s": per_s(n), "input_tokens_per_s": per_s(ins),
                         "output_tokens_per_s": per_s(outs), "total_tokens_per_s": per_s(ins + outs),
                         "output_tokens_per_s_per_gpu": per_s(outs, gpus),
                         "total_tokens_per_s_per_gpu": per_s(ins + outs, gpus)}
    out["latency"] = (_spread(trace.first - trace.arrival, "ttft") | _spread(tpot, "tpot")
                      | _spread(trace.itl, "itl") | _spread(trace.finish - trace.arrival, "e2e"))
    total = blocks if blocks is not None else max(int(used.max()), 1)
    out["kv_cache"] = {"kv_blocks": total, "block_size": cfg.block_size,
                       "kv_utilisation_mean": float(((used * steps).sum() / steps.sum() if steps.sum() > 0
                                                     else used.mean()) / total),
                       "kv_utilisation_max": float(used.max() / total), "preemptions": trace.preemptions}
    out["batches"] = {"steps": int(steps.size), "batch_mean": float(seqs.mean()),
                      "batch_p50": float(np.percentile(seqs, 50)), "batch_max": int(seqs.max()),
                      "tokens_per_step_mean": float(toks.mean()), "tokens_per_step_max": int(toks.max()),
                      "step_mean_s": float(steps.mean())}
    if mem is not None:
        out["memory"] = {"capacity_bytes": mem.capacity, "budget_bytes": mem.budget, "weight_bytes": mem.weights,
                         "activation_bytes": mem.activations, "reserve_bytes": mem.reserve,
                         "kv_cache_bytes": mem.kv_bytes, "kv_block_bytes": mem.block_bytes,
                         "max_concurrency": mem.blocks // -(-int(np.max(work.inputs + work.outputs))
                                                            // cfg.block_size)}
    return out


def batch_histogram(trace) -> list[tuple[int, int]]:
    """(sequences in a step, steps that ran that many), ascending."""
    vals, counts = np.unique(np.asarray(trace.step_seqs), return_counts=True)
    return [(int(v), int(c)) for v, c in zip(vals, counts)]
