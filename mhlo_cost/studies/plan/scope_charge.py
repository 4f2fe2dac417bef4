"""What the compiled fusion model charged for one scope's non-GEMM rows (seconds, by phase): the loop that
:func:`.mlp_activation.activation_charge` (scope ``act``) and :func:`.attention_kernels.core_charge` (scope ``core``)
share, each giving its own rule for a kernel that fuses those rows into a GEMM.

Per kernel of the fusion model (:mod:`mhlo_cost.roofline.fusion`) that holds rows of the scope, charged to the phase
of its last member: a kernel without a GEMM, those rows' share of its time (``row_time``); a kernel with one, what the
caller's rule says (:func:`without_compute` is the rule they both start from). Under another execution model (eager,
Inductor) the scope's rows' seconds as that model shares them. Imports nothing of the plan (both callers import it).
"""
from __future__ import annotations


def in_scope(row, scope: str) -> bool:
    """Whether ``row`` is of ``scope`` (one of the ``/``-separated parts of its scope)."""
    return scope in row.scope.split("/")


def scope_charge(a, rf, phases: tuple, scope: str, dot_rule) -> dict:
    """phase -> seconds the execution model ``rf`` charged for the rows of ``scope`` in the analysed layer ``a``;
    ``dot_rule(kernel, mine, rows, times)``: the seconds of a fused kernel with a GEMM, ``mine`` its members of the
    scope (the module's text)."""
    out = {p: 0.0 for p in phases}
    rows, times, ph = a.rows, rf.times, a.phases.phase
    if rf.execution != "compiled":
        for i, r in enumerate(rows):
            out[ph[i]] += rf.fusion.row_time[i] if in_scope(r, scope) else 0.0
        return out
    for k in rf.fusion.kernels:
        mine = [i for i in k.members if in_scope(rows[i], scope)]
        if not mine:
            continue
        if not k.has_dot:
            out[ph[k.members[-1]]] += sum(rf.fusion.row_time[i] for i in mine)
            continue
        out[ph[k.members[-1]]] += dot_rule(k, mine, rows, times)
    return out


def without_compute(k, members, rows, times) -> float:
    """The kernel ``k``'s time less its time without the compute of the non-GEMM rows among ``members`` (its bytes
    kept: where the GEMM is compute-bound exactly their compute; where memory-bound, a lower bound)."""
    rest = sum(times[i].compute_s for i in members if not rows[i].gemm_flops)
    return max(0.0, k.time_s - max(k.compute_s - rest, k.memory_s) - k.overhead_s)
