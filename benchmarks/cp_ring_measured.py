"""One rank's PyTorch ring attention as train-plan prices it, against the ring measured on a lent H200.

The measurement (``benchmarks/data/measured_h200_train_run1.jsonl``, rows of kind ``ring``, made by
``benchmarks/gpu_train_measure.py`` ``ring_rows``; torch 2.11, aten's flash ops as the ring's handlers call them,
the schedule of :func:`gpu_train_layers.ring_schedule`): one layer of Llama 3 8B (32 heads x 128, bf16), 32768
local positions, cp 1 / 2 / 4 / 8: each distinct forward call alone, the forward (its calls and the fp32
log-sum-exp merges) and the backward (a flash backward per step and the fp32 dQ / dK / dV accumulation).

The estimate, on the ``h200`` profile with the ``fa2`` library (PyTorch's flash backend): each call written from its
shapes (queries x keys, causal for the local step) and priced as one fused attention kernel (the forward alone;
the backward as the forward and its VJP less the forward), summed over the rank's schedule; beside it the ring's own
memory passes (:func:`mhlo_cost.studies.plan.ring_passes.ring_passes`: the merges, the accumulators) on the same
profile. The merges and accumulators were measured in PyTorch eager (one kernel per operator) and are priced as
the fused kernels Inductor makes of them (a lower bound for eager): the calls are the comparison, the passes are
shown beside it.

Nothing here is fitted: the profile's ``fa2`` fractions were read off the FA3 paper's FlashAttention-2 bars
(``mhlo_cost/machines/data/hardware.toml``); this measurement was not used to set any of them.

With ``--layer``, train-plan's own pricing of the same rank's attention beside it: the layer of the torchtitan
Table 2 rows (``benchmarks/data/published_training.toml``: one rank's 32768 positions against the cp x 32768 keys,
one fused kernel under a causal mask, as :mod:`mhlo_cost.studies.plan.layer` lowers it) on the same profile, its
attention by phase (forward, full recompute, backward) against the measured forward twice and backward.

    PYTHONPATH=. python benchmarks/cp_ring_measured.py [--layer] [--cache DIR]
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from mhlo_cost.analysis import AnalysisOptions, analyze  # noqa: E402
from mhlo_cost.machines.hardware import get_profile  # noqa: E402
from mhlo_cost.roofline import Roofline  # noqa: E402

DATA = os.path.join(ROOT, "benchmarks", "data", "measured_h200_train_run1.jsonl")
LIBRARY = "fa2"  # PyTorch's flash SDPA backend: FlashAttention-2 (roofline/sdpa.py BACKEND_LIBRARY)


def ring_rows(path: str = DATA) -> list[dict]:
    """The measured rows of kind ``ring``, by cp."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return sorted((r for r in rows if r.get("kind") == "ring"), key=lambda r: r["cp"])


def schedule(cp: int, local: int) -> list[tuple[int, int, bool]]:
    """(queries, keys, causal) of each call of one rank with the load-balanced causal split
    (``_templated_ring_attention``): the local step causal over both chunks; each later step either every query
    against the first half of the received keys (``i <= rank``) or the second half of the queries against all of
    them; every rank makes cp - 1 such calls, all of ``local x local / 2`` scores."""
    half = local // 2
    rank = cp // 2
    return [(local, local, True)] + [(local, half, False) if i <= rank else (half, local, False)
                                     for i in range(1, cp)]


def _attention(sq: int, sk: int, causal: bool, heads: int, hd: int):
    def attn(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32) / math.sqrt(hd)
        if causal:
            i = jax.lax.iota(jnp.int32, sq)
            s = jnp.where(i[:, None] >= i[None, :], s, -jnp.inf)
        p = jax.nn.softmax(s, axis=-1).astype(q.dtype)
        return jnp.einsum("bhqk,bhkd->bhqd", p, v)

    q = jax.ShapeDtypeStruct((1, heads, sq, hd), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((1, heads, sk, hd), jnp.bfloat16)
    return attn, q, kv


def _seconds(fn, args, hw) -> float:
    text = jax.jit(fn).lower(*args).as_text(debug_info=True)
    return Roofline(analyze(text, AnalysisOptions(dataflow=True)), hw, fuse_mode="elementwise").totals()[
        "est_time_fused_s"]


def call_seconds(sq: int, sk: int, causal: bool, hw, heads: int = 32, hd: int = 128) -> tuple[float, float]:
    """(forward, backward) seconds of one flash call of ``sq`` queries against ``sk`` keys on ``hw``: the forward
    alone, and the forward with its VJP less the forward (what the measured backward call is)."""
    attn, q, kv = _attention(sq, sk, causal, heads, hd)

    def step(q, k, v, do):
        o, pull = jax.vjp(attn, q, k, v)
        return o, pull(do)

    fwd = _seconds(attn, (q, kv, kv), hw)
    return fwd, _seconds(step, (q, kv, kv, q), hw) - fwd


def h200_fa2(profile: str = "h200"):
    hw = get_profile(profile)
    return dataclasses.replace(hw, attention=dataclasses.replace(hw.attention, library=LIBRARY))


def ring_passes_seconds(cp: int, local: int, hw) -> tuple[float, float]:
    """:func:`~mhlo_cost.studies.plan.ring_passes.ring_pass_seconds` of the measured layer (Llama 3 8B's heads,
    K/V repeated to 32 heads as torchtitan's ``repeat_kv`` does, one sequence of ``cp x local``)."""
    from mhlo_cost.studies.plan.config import ScaleConfig
    from mhlo_cost.studies.plan.ring_passes import ring_pass_seconds

    cfg = ScaleConfig(layers=32, hidden=4096, heads=32, seq=cp * local, vocab=128256, ffn=14336, kv_heads=8,
                      mlp_kind="swiglu", cp=cp, micro_batch=1, global_batch=1, cp_comm="torch-allgather",
                      kv_repeat=True, attention="fused")
    return ring_pass_seconds(cfg, hw)


def compare(rows=None, hw=None) -> list[dict]:
    """Per measured cp: the measured forward / backward (ms), the priced calls' sums and the ring's passes (ms)."""
    hw = hw or h200_fa2()
    calls: dict = {}
    out = []
    for r in rows if rows is not None else ring_rows():
        cp, local = r["cp"], r["local"]
        steps = schedule(cp, local)
        for s in steps:
            if s not in calls:
                calls[s] = call_seconds(*s, hw, heads=r["heads"], hd=r["head_dim"])
        f = sum(calls[s][0] for s in steps) * 1e3
        b = sum(calls[s][1] for s in steps) * 1e3
        pf, pb = (x * 1e3 for x in ring_passes_seconds(cp, local, hw))
        measured_calls = {k: v for k, v in r["fwd_calls_ms"].items()}
        per_call = {k: (v, calls[_key_of(k)][0] * 1e3) for k, v in measured_calls.items()}
        out.append({"cp": cp, "fwd_ms": r["fwd_ms"], "bwd_ms": r["bwd_ms"], "fwd_calls_est_ms": f,
                    "bwd_calls_est_ms": b, "fwd_passes_est_ms": pf, "bwd_passes_est_ms": pb, "calls": per_call})
    return out


def _key_of(name: str) -> tuple[int, int, bool]:
    causal = name.endswith("c")
    sq, sk = name.rstrip("c").split("x")
    return int(sq), int(sk), causal


def backward_step_kinds(rows=None) -> dict:
    """Each backward step's measured ms by kind, from the rank's totals and the schedule each row records: the local
    causal step (cp 1), ``A`` = every query against half the keys (cp 2's later step), ``B`` = half the queries
    against every key (cp 4's third); and cp 8's total as they predict it. Under torch.compile each fp32 dK/dV
    permute is waited for where it is issued, so every backward step waits for the slowest rank, whose step is the
    slower of A and B: their difference is what that wait costs a step."""
    by = {r["cp"]: r for r in (rows if rows is not None else ring_rows())}
    causal = by[1]["bwd_ms"]
    a = by[2]["bwd_ms"] - causal
    kinds = [tuple(s) for s in by[4]["steps"][1:]]
    n_a = sum(1 for sq, sk, _ in kinds if sk < sq)
    b = (by[4]["bwd_ms"] - causal - n_a * a) / (len(kinds) - n_a)
    steps8 = [tuple(s) for s in by[8]["steps"][1:]]
    n8 = sum(1 for sq, sk, _ in steps8 if sk < sq)
    return {"causal": causal, "A": a, "B": b, "cp8_predicted": causal + n8 * a + (len(steps8) - n8) * b,
            "cp8_measured": by[8]["bwd_ms"]}


def layer_rows(cache_dir=None) -> list[tuple[int, dict]]:
    """(cp, train-plan's attention seconds by phase) of the torchtitan Table 2 rows' layer (one rank, 32768
    positions) on the ``h200`` profile: the ``core`` scope of the layer train-plan lowers and prices
    (:func:`mhlo_cost.studies.plan.costs.layer_cost`), its forward, recompute and backward, with what the ring's
    calls at their own shapes add to it (:func:`mhlo_cost.studies.plan.cp_calls.ring_call_seconds`: forward and
    backward; the recompute reruns the forward's calls where it reruns the core)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import validate_training as vt

    from mhlo_cost.studies.plan.costs import layer_cost
    from mhlo_cost.studies.plan.cp_calls import ring_call_seconds

    data = vt.load()
    model = data["model"]["llama3-8b"]
    hw = get_profile("h200")
    out = []
    for r in data["run"]:
        if r["id"].startswith("torchtitan2412/t2-8b-cp"):
            cfg = vt.scale_config(r, model)
            core = dict(layer_cost(cfg, hw, cache_dir).core_s)
            calls = ring_call_seconds(cfg, hw, core)
            core["forward"] += calls.added_forward
            core["backward"] += calls.added_backward
            core["recompute"] += calls.added_forward if core["recompute"] > 0 else 0.0
            out.append((r.get("cp", 1), core))
    return sorted(out, key=lambda x: x[0])


def _print_layer(rows: list[dict], cache_dir) -> None:
    measured = {r["cp"]: r for r in rows}
    print("train-plan's layer (torchtitan Table 2 rows, h200): attention ms forward / recompute / backward, "
          "their sum against the measured forward x 2 + backward")
    for cp, core in layer_rows(cache_dir):
        m = measured.get(cp)
        total = (core["forward"] + core["recompute"] + core["backward"]) * 1e3
        ref = 2 * m["fwd_ms"] + m["bwd_ms"] if m else float("nan")
        print(f"  cp {cp}: {core['forward'] * 1e3:7.1f} / {core['recompute'] * 1e3:7.1f} / "
              f"{core['backward'] * 1e3:7.1f}  sum {total:7.1f}  measured {ref:7.1f}  ratio {total / ref:6.3f}")


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", action="store_true", help="also train-plan's layer attention of the Table 2 rows")
    ap.add_argument("--cache", help="keep each layer's analysis here (with --layer)")
    a = ap.parse_args(argv)
    rows = compare()
    print("cp  measured fwd  est calls + passes  ratio | measured bwd  est calls + passes  ratio   (ms, one layer, "
          "one rank, h200 / fa2)")
    for r in rows:
        ef, eb = r["fwd_calls_est_ms"] + r["fwd_passes_est_ms"], r["bwd_calls_est_ms"] + r["bwd_passes_est_ms"]
        print(f"{r['cp']:<3d} {r['fwd_ms']:12.1f}  {r['fwd_calls_est_ms']:8.1f} + {r['fwd_passes_est_ms']:5.1f}  "
              f"{ef / r['fwd_ms']:6.3f} | {r['bwd_ms']:12.1f}  {r['bwd_calls_est_ms']:8.1f} + "
              f"{r['bwd_passes_est_ms']:5.1f}  {eb / r['bwd_ms']:6.3f}")
    print("one forward call: measured ms, estimate ms, ratio")
    seen = {}
    for r in rows:
        seen.update(r["calls"])
    for k, (m, e) in sorted(seen.items()):
        print(f"  {k:<14s} {m:8.2f} {e:8.2f} {e / m:6.3f}")
    k = backward_step_kinds()
    print(f"backward step by kind (measured, derived): causal {k['causal']:.1f}, A (all queries x half the keys) "
          f"{k['A']:.1f}, B (half the queries x all keys) {k['B']:.1f} ms; cp 8 predicted {k['cp8_predicted']:.1f}, "
          f"measured {k['cp8_measured']:.1f}")
    if a.layer:
        _print_layer(rows, a.cache)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
