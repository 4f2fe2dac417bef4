"""A training step's IR counted by phase: the walk with its data flow and arguments, the phase table, the
rule of thumb beside the exact count, and what the step holds in memory by category.

``analyze(source, AnalysisOptions(phases=True))`` is the walk plus the producers of every operand (the data flow of
:mod:`mhlo_cost.walk.dataflow`), the entry function's arguments (which are donated: a step's parameters and
optimizer state) and the phases (:func:`analyze_training`, its older name, is deprecated). :func:`phase_frame` sums
the op table by phase; :func:`rule_of_thumb` sets 6 x N x D (N: parameters that enter matrix products, D: tokens)
beside the exact forward + backward matrix FLOPs; :func:`memory_categories` gives the bytes of parameters,
gradients, optimizer state, inputs and the activations the backward reads from the forward.
"""
from __future__ import annotations

import math

import pandas as pd

from . import Analysis, AnalysisOptions, analyze, deprecated
from .collectors import is_matmul
from .collectors.phases import BACKWARD, FORWARD, OPTIMIZER, PHASES, RECOMPUTE, Phases, assign_phases
from ..ir.tensorinfo import TensorInfo

#: Row order of ``report --by phase``.
PHASE_KEYS = (FORWARD, "backward/dgrad", "backward/wgrad", "backward/other", RECOMPUTE, OPTIMIZER)


def analyze_training(source, entry: str | None = None, conv_padding: str = "xla") -> Analysis:
    """Deprecated (removed in 0.3.0): ``analyze(source, AnalysisOptions(phases=True))``, the walk with data flow,
    arguments and phases."""
    deprecated("mhlo_cost.analysis.training.analyze_training(source)", "analyze(source, AnalysisOptions(phases=True))")
    return analyze(source, AnalysisOptions(entry, conv_padding, phases=True))


def __getattr__(name: str):
    """``TrainingAnalysis``: the deprecated name of :class:`mhlo_cost.analysis.Analysis` (one type: what was
    recorded is in its options), with a warning; it goes in 0.3.0."""
    if name == "TrainingAnalysis":
        deprecated("mhlo_cost.analysis.training.TrainingAnalysis", "mhlo_cost.analysis.Analysis")
        return Analysis
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def has_backward(loaded) -> bool:
    """Whether any op's location names a backward (``transpose(...)``): a quick look before the walk."""
    from .collectors.phases import evidence
    from ..walk.locations import LocationCache

    names = LocationCache()
    with loaded.context:
        stack = [loaded.module.body]
        while stack:
            for op in stack.pop().operations:
                op = op.operation
                if evidence(names(op.location).name) in (BACKWARD, RECOMPUTE):
                    return True
                for region in op.regions:
                    stack.extend(region.blocks)
    return False


# -- views ------------------------------------------------------------------------------------------------


def phase_frame(analysis, phases: Phases | None = None, times=None, fused: list | None = None,
                totals: dict | None = None) -> pd.DataFrame:
    """The op table summed by phase (rows of :data:`PHASE_KEYS` that occur), with ``TOTAL`` last; with the
    estimate's op times (``times``) ``est_time_s`` per phase, with each row's share of the fused (or eager)
    time (``fused``, its communication included) ``est_time_fused_s``; the TOTAL row's times are the
    summary's (``totals``) where given."""
    from . import SUM_COLUMNS, group_rows, int_series

    phases = phases or assign_phases(analysis)
    keys = [phases.key(i) for i in range(len(analysis.rows))]
    df = group_rows(analysis.rows, keys, order="program", label="phase")
    order = [k for k in PHASE_KEYS if k in set(df["phase"])]
    df = df.set_index("phase").loc[order].reset_index()
    total = {"phase": "TOTAL"}
    for c in list(SUM_COLUMNS) + ["ops"]:
        total[c] = sum(int(v) for v in df[c])
    df = pd.concat([df, pd.DataFrame([total])], ignore_index=True)
    for c in list(SUM_COLUMNS) + ["ops"]:
        df[c] = int_series([int(v) for v in df[c]])
    for name, values in (("est_time_s", None if times is None else [t.time_s for t in times]),
                         ("est_time_fused_s", fused)):
        if values is not None:
            acc: dict = {}
            for k, v in zip(keys, values):
                acc.setdefault(k, []).append(v)
            est = [math.fsum(acc.get(k, ())) for k in df["phase"][:-1]]
            df[name] = est + [(totals or {}).get(name, math.fsum(est))]
    return df


def weight_parameters(analysis, phases: Phases) -> tuple[int, int]:
    """(N, D): elements of the parameters that enter forward matrix products (each once), and the tokens
    a step trains on, read as the rows the weights multiply (the value carrying the most weight FLOPs)."""
    from .collectors.phases import Flow

    rows = analysis.rows
    flow = Flow(rows, analysis.producers, analysis.param_args)
    seen: dict = {}
    per_tokens: dict[int, int] = {}
    looped = 0
    for i, r in enumerate(rows):
        if phases.phase[i] != FORWARD or not is_matmul(r) or len(r.operands) < 2:
            continue
        for pos in (1, 0):  # the weight is mostly the right-hand operand (x @ W)
            root = flow.root_of(i, pos)
            if not flow.is_param(root, i, pos):
                continue
            w = r.operands[pos].nelems
            flops = r.gemm_flops + r.conv_flops
            if isinstance(root, str):
                seen[root] = w
            else:  # a slice of a stacked weight, or an argument of a called function: once per execution
                looped += w * r.multiplicity
            if w:
                t = flops // (2 * w * r.multiplicity)
                per_tokens[t] = per_tokens.get(t, 0) + flops
            break
    n = sum(seen.values()) + looped
    d = max(per_tokens, key=lambda t: (per_tokens[t], t)) if per_tokens else 0
    return n, d


def rule_of_thumb(analysis, phases: Phases | None = None, tokens: int | None = None) -> dict:
    """6 x N x D beside the exact counts (integers; ``ratio`` is exact / rule as a float)."""
    phases = phases or assign_phases(analysis)
    n, d = weight_parameters(analysis, phases)
    d = tokens if tokens is not None else d
    by = {p: 0 for p in PHASES}
    for r, p in zip(analysis.rows, phases.phase):
        by[p] += r.gemm_flops + r.conv_flops
    model = by[FORWARD] + by[BACKWARD]
    rule = 6 * n * d
    return {"weight_params": n, "tokens": d, "rule_6nd": rule, "model_flops": model,
            "hardware_flops": model + by[RECOMPUTE], "ratio": model / rule if rule else float("nan"),
            "forward_flops": by[FORWARD], "backward_flops": by[BACKWARD], "recompute_flops": by[RECOMPUTE]}


def phase_report(analysis, times=None, fused: list | None = None,
                 totals: dict | None = None) -> tuple[pd.DataFrame, list[str], dict]:
    """``report --by phase``: the phase table (:func:`phase_frame`), the lines under it, and the same facts for
    JSON."""
    phases = analysis.phases or assign_phases(analysis)
    df = phase_frame(analysis, phases, times, fused, totals)
    info = rule_of_thumb(analysis, phases)
    lines = list(phases.notes)
    if phases.training:
        n, d = info["weight_params"], info["tokens"]
        fwd = info["forward_flops"]
        lines.append(f"backward / forward matrix FLOPs: {info['backward_flops'] / fwd:.3f}" if fwd else
                     "no forward matrix FLOPs")
        lines.append(f"rule of thumb 6 x N x D = 6 x {n:,} x {d:,} = {info['rule_6nd']:,} FLOPs (N: parameters "
                     "that enter matrix products, D: the rows they multiply per step, both read from the IR)")
        lines.append(f"exact forward + backward matrix FLOPs (model FLOPs): {info['model_flops']:,} = "
                     f"{info['ratio']:.3f} x the rule of thumb; with recompute (hardware FLOPs): "
                     f"{info['hardware_flops']:,}")
        mem = memory_categories(analysis, phases)
        live = ("live_after_forward", "peak", "peak_phase")
        lines.append("bytes held: " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in mem.items()
                                                  if k not in live and not isinstance(v, bool))
                     + (" (values carried through loops not followed: lower bounds)"
                        if mem["loop_values_unfollowed"] else ""))
        if "peak" in mem:
            lines.append(f"live bytes (liveness): {mem['live_after_forward']:,} once the forward is done; "
                         f"peak {mem['peak']:,} in the {mem['peak_phase']}")
    else:
        mem = {}
    payload = {"training": phases.training, "notes": phases.notes, "memory": mem,
               "rule_of_thumb": {k: v for k, v in info.items() if k != "ratio"} | {
                   "ratio": None if info["ratio"] != info["ratio"] else info["ratio"]}}
    return df, lines, payload


def _live_at_boundary(analysis, phases: Phases) -> dict:
    """From the liveness sweep (:mod:`mhlo_cost.memory`): the bytes live once the forward is done (before the
    first backward or recompute op), the step's peak and the phase it falls in. Empty where the analysis
    carries no liveness record or the program has no backward."""
    if analysis.liveness is None:
        return {}
    first = next((i for i, p in enumerate(phases.phase) if p in (BACKWARD, RECOMPUTE)), None)
    if first is None:
        return {}
    prof = analysis.memory
    at = prof.after[first - 1] if first > 0 else prof.argument_bytes
    peak_phase = phases.phase[prof.peak_row] if prof.peak_row is not None else FORWARD
    return {"live_after_forward": at, "peak": prof.peak_bytes, "peak_phase": peak_phase}


def _result_bytes(r) -> int:
    res = r.result
    return res.nbytes if isinstance(res, TensorInfo) else sum(t.nbytes for t in res)


def memory_categories(analysis, phases: Phases | None = None) -> dict:
    """Bytes a training step holds, by category, from its arguments and data flow (exact integers):

    * ``parameters`` and ``optimizer_state``: the donated arguments, told apart by their names where the
      step's own (``params[...]``, ``opt_state[...]``: what :mod:`mhlo_cost.lower.training` lowers), else by
      the data flow (parameters are what forward ops read); ``batch``: the arguments not donated (what the
      step trains on; the summary's ``input_bytes``, every argument that is not a parameter, is the optimizer
      state and the batch);
    * ``gradients``: values the backward makes and the optimizer reads (each once);
    * ``saved_activations``: values forward ops make and backward or recompute ops read: what crosses the
      forward/backward boundary (with ``remat block``, mostly the blocks' inputs).

    Values carried through a loop (a scanned model's stacked weights and residuals) are not followed: a
    scanned step's figures are lower bounds, and ``loop_values_unfollowed`` says so.
    """
    phases = phases or analysis.phases or assign_phases(analysis)
    rows, producers = analysis.rows, analysis.producers or [()] * len(analysis.rows)
    args = {a.key: a for a in analysis.arguments or ()}
    forward_read, grads, saved = set(), set(), set()
    unfollowed = False
    for i, srcs in enumerate(producers):
        p = phases.phase[i]
        for s in srcs:
            if s is None:
                unfollowed = unfollowed or rows[i].note.startswith("while")
            elif isinstance(s, str):
                if p in (FORWARD, RECOMPUTE):
                    forward_read.add(s)
            elif p == OPTIMIZER and phases.phase[s] == BACKWARD:
                grads.add(s)
            elif p in (BACKWARD, RECOMPUTE) and phases.phase[s] == FORWARD and rows[s].operands:
                saved.add(s)  # (a constant or an iota is made again, not kept)
    donated = [a for a in args.values() if a.donated]
    if donated and all(a.name.startswith(("params", "opt_state")) for a in donated):
        params = [a for a in donated if a.name.startswith("params")]
    else:
        params = [a for a in donated if a.key in forward_read]
    state = [a for a in donated if a not in params]
    return {
        **_live_at_boundary(analysis, phases),
        "parameters": sum(a.type.nbytes for a in params),
        "gradients": sum(_result_bytes(rows[i]) for i in grads),
        "optimizer_state": sum(a.type.nbytes for a in state),
        "batch": sum(a.type.nbytes for a in args.values() if not a.donated),
        "saved_activations": sum(_result_bytes(rows[i]) for i in saved),
        "loop_values_unfollowed": unfollowed,
    }
