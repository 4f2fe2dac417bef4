"""How close is the serving simulation to published serving figures? (``benchmarks/data/published_serving.toml``)

Every row with an ``express`` runs through the simulation (:class:`mhlo_cost.studies.serve.simstudy.SimStudy`):
its model's decode step is lowered and fitted once per model (the step cache on disk; every row of a model and
chip shares the fit), the load is the row's (a static ``batch``: ``batch`` requests sent at once, the server's
``max_num_seqs`` the batch, its token budget the whole batch's prompts (prefilled in one step, as a static-batch
benchmark runs them) and all of the device's memory (such a benchmark sizes its KV cache for the batch); a
``concurrency``: a closed loop, ``requests`` requests (default ten times the concurrency)), on ``tp`` GPUs, launched
as the row's ``launch`` says, the server's knobs from the row's ``server`` (:class:`~mhlo_cost.studies.serve.server.
ServerConfig` fields), its all-reduce library from ``allreduce`` and its decode attention's reads of the KV cache
from ``heads_per_kv_read`` (:func:`mhlo_cost.studies.serve.parallel.kv_reads`). Nothing is fitted to the figures.
It prints,
per row, each figure against the simulation's and their ratio (simulated / published): output tokens/s, TTFT mean,
TPOT / ITL mean and ITL median; then the median |error| of each metric with its n (targets: throughput <= 15%,
TTFT and TPOT <= 20%), and of the batched-decode figures (rows marked ``batched_decode``: a per-token latency at a
batch of 64 or more; target 15%); and lists the rows it cannot express and why.

With ``--breakdown``, each row's decode step at its batch (or concurrency) and mid-run context, and its first
prefill step, are printed by part (GEMM kernels, fused attention, other kernels, all-reduce) before its figures.

    python benchmarks/validate_serving.py [--only ID_PART] [--cache-dir DIR] [--launch cuda-graphs|stream]
                                          [--breakdown]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tomllib
from pathlib import Path

DATA = Path(__file__).parent / "data" / "published_serving.toml"
TARGETS = {"output_tok_s": 0.15, "ttft_ms": 0.20, "itl_ms": 0.20, "itl_p50_ms": 0.20}
#: Per-token latency at a batch of 64 or more (rows marked ``batched_decode``): a decode step at that batch.
DECODE_TARGET = 0.15


def options(row: dict, cache_dir, launch: str):
    """The row's :class:`SimOptions`."""
    from mhlo_cost.lower.inference.steps import StepRequest
    from mhlo_cost.roofline import hardware_from_args
    from mhlo_cost.studies.serve.server import ServerConfig
    from mhlo_cost.studies.serve.simload import Lengths
    from mhlo_cost.studies.serve.simstudy import SimOptions

    ex = row["express"]
    if "gpt" in ex:
        req = StepRequest(model="gpt", overrides=tuple(sorted(ex["gpt"].items())), precision=ex.get("precision"))
    else:
        req = StepRequest(hf=ex["hf"], config=ex["config"], overrides=tuple(sorted(ex["set"].items())))
    if "batch" in row:  # a static batch: all at once, prefilled together, its KV cache sized for it
        n = c = row["batch"]
        server = ServerConfig(max_num_batched_tokens=max(8192, n * row["isl"]), max_num_seqs=max(n, 1),
                              gpu_memory_utilization=1.0)
    else:
        c, n = row["concurrency"], row.get("requests", 10 * row["concurrency"])
        server = ServerConfig(**({"max_num_seqs": max(256, c)} | row.get("server", {})))
    return SimOptions(req, hardware_from_args(row["gpu"], None), Lengths.parse(str(row["isl"])),
                      Lengths.parse(str(row["osl"])), n, c, server=server, launch=launch or row.get("launch", "cuda-graphs"),
                      tp=row.get("tp", 1), allreduce=row.get("allreduce", "vllm"),
                      heads_per_kv_read=row.get("heads_per_kv_read"), cache_dir=cache_dir)


def simulated(fig: dict, row: dict) -> dict:
    """The simulation's figures in the row's units."""
    t, lat = fig["throughput"], fig["latency"]
    out = t["output_tokens_per_s_per_gpu"] if row.get("per_gpu") else t["output_tokens_per_s"]
    itl, p50 = lat["tpot_mean_s"], lat["itl_p50_s"]
    return {"output_tok_s": out, "ttft_ms": lat["ttft_mean_s"] * 1e3,
            "itl_ms": None if itl is None else itl * 1e3, "itl_p50_ms": None if p50 is None else p50 * 1e3}


def breakdown(study, row: dict) -> str:
    """The row's decode step (its batch or concurrency of sequences at context isl + osl / 2) and its first prefill
    step (min(batch, the token budget / isl) prompts), by part, in ms; and, for a static batch, the run's seconds
    published (batch x osl / output tokens/s) and simulated."""
    step = study.step_time
    b = row.get("batch") or row["concurrency"]
    ctx = row["isl"] + row["osl"] // 2
    dec = step.parts(b, b * (ctx + 1), b * (ctx + 1), ctx + 1)
    n = max(1, min(b, study.options.server.max_num_batched_tokens // max(row["isl"], 1)))
    pre = step.parts(n * row["isl"], n * row["isl"] * (row["isl"] + 1) // 2, n * row["isl"], row["isl"], 0)

    def show(parts):
        return " ".join(f"{k} {v * 1e3:.2f}" for k, v in parts.items()) + f" = {sum(parts.values()) * 1e3:.2f} ms"

    text = (f"  decode b{b} ctx {ctx} (kv reads {step.kv_reads}): {show(dec)}\n"
            f"  prefill {n} x {row['isl']}: {show(pre)}")
    if "batch" in row and "output_tok_s" in row:
        gpus = row.get("tp", 1) if row.get("per_gpu") else 1
        published = b * row["osl"] / (row["output_tok_s"] * gpus)
        text += f"\n  run: published {published:.3f} s, simulated {sum(study.trace.step_s):.3f} s"
    return text


def run(rows: list, cache_dir, launch, parts: bool = False) -> tuple[dict, list, list]:
    """Every expressed row through the simulation, printing its ratios: ({metric: [|error|]}, the batched-decode
    |errors|, [(row id, why it did not run)])."""
    from mhlo_cost.studies.serve.simstudy import SimStudy

    errors: dict = {k: [] for k in TARGETS}
    decode, failed = [], []
    print(f"{'row':<44} {'metric':<13} {'published':>11} {'simulated':>11} {'ratio':>7}")
    for row in (r for r in rows if "express" in r):
        study = SimStudy(options(row, cache_dir, launch))
        try:
            got = simulated(study.figures, row)
        except ValueError as e:  # (LoadError, OptionError: the row does not fit the simulated server)
            failed.append((row["id"], str(e)))
            print(f"{row['id']:<44} not run: {e}", flush=True)
            continue
        if parts:
            print(f"{row['id']}\n{breakdown(study, row)}", flush=True)
        for key in TARGETS:
            if key in row and got[key] is not None:
                ratio = got[key] / row[key]
                errors[key].append(abs(ratio - 1))
                if row.get("batched_decode") and key.startswith("itl"):
                    decode.append(abs(ratio - 1))
                print(f"{row['id']:<44} {key:<13} {row[key]:>11,.2f} {got[key]:>11,.2f} {ratio:>7.3f}", flush=True)
        if study.trace.preemptions:
            print(f"{'':<44} ({study.trace.preemptions} preemptions in the simulation)")
    return errors, decode, failed


def _median_line(name: str, errs: list, target: float) -> str:
    return (f"{name}: median |error| {statistics.median(errs):.1%} over {len(errs)} rows (target <= {target:.0%}); "
            f"{sum(e <= target for e in errs)} within it")


def report(rows: list, errors: dict, decode: list, failed: list) -> None:
    """The medians (each metric; TPOT: the mean and median per-token figures together; batched decode) and the
    rows not run or not expressed, with why."""
    print()
    for key, errs in errors.items():
        if errs:
            print(_median_line(key, errs, TARGETS[key]))
    tpot = errors["itl_ms"] + errors["itl_p50_ms"]
    if tpot:
        print(_median_line("TPOT / ITL (mean or median, as published)", tpot, TARGETS["itl_ms"]))
    if decode:
        print(_median_line("batched decode, batch >= 64 (per-token latency)", decode, DECODE_TARGET))
    if failed:
        print(f"\nexpressed but not run ({len(failed)}):")
        for i, why in failed:
            print(f"  {i}: {why}")
    left = [r for r in rows if "express" not in r]
    if left:
        print(f"\nnot expressed ({len(left)} of {len(rows)} rows):")
        why = {r["id"]: r["not_expressed"] for r in left}
        for r in left:
            reason = r["not_expressed"]
            if reason.startswith("as ") and reason[3:] in why:
                reason = why[reason[3:]]
            print(f"  {r['id']}: {reason}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="rows whose id contains this")
    ap.add_argument("--data", default=str(DATA), help="the corpus (default: benchmarks/data/published_serving.toml)")
    ap.add_argument("--cache-dir", help="the step cache (default: the user cache)")
    ap.add_argument("--launch", choices=("cuda-graphs", "stream"),
                    help="every row launched so (default: each row's `launch`, else cuda-graphs)")
    ap.add_argument("--breakdown", action="store_true", help="each row's decode and prefill step by part")
    a = ap.parse_args()
    rows = tomllib.loads(Path(a.data).read_text())["row"]
    rows = [r for r in rows if a.only is None or a.only in r["id"]]
    report(rows, *run(rows, a.cache_dir, a.launch, a.breakdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
