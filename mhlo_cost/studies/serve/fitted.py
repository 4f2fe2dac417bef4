"""A serve sweep's steps without lowering every point: the batch x context grid's op tables fitted from a few
lowerings (:mod:`mhlo_cost.studies.gridfit`) and evaluated at the others, priced as a lowered step is.

A batch of 1 is its own program (the IR drops unit dimensions), so points of batch 1 are lowered one by one;
the others are fitted where that lowers fewer points than the grid has: nodes at the first two batches and
contexts (the counts of a step are bilinear in them), checked at the last batch and context, lowered too. Where
the op graph changes with the shape, or the fit misses the check point, or the cache layout does not scale as
:meth:`CacheLayout.at` says, every point is lowered, and ``note`` says why.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

#: Node values per symbol: counts of a decode or prefill step are of degree 1 in the batch and in the context.
PER_SYMBOL = 2


def fitted_steps(base, points: list, hw, cache, stage: Callable[[str], None],
                 note: Callable[[str], None] | None = None) -> dict:
    """(batch, context) -> (Step, Analysis) for the ``points`` (batch, context) of ``base``'s sweep that a fit
    gives or that were lowered to make it; the points it does not hold are lowered one by one by the caller."""
    from ..gridfit import FitFailed, fit_tables, plan_nodes

    domain = [(b, c) for b, c in points if b > 1]
    batches = list(dict.fromkeys(b for b, _ in domain))
    contexts = list(dict.fromkeys(c for _, c in domain))
    if len(domain) != len(batches) * len(contexts):
        return {}  # (part of the grid cached: not a grid)
    plan = plan_nodes({"batch": batches, "context": contexts}, PER_SYMBOL)
    if plan is None:
        return {}
    nodes, checks = plan
    steps = {}

    def analyze_at(point):
        from .serve import step_study

        b, c = point.get("batch", batches[0]), point.get("context", contexts[0])
        stage(f"lowering batch {b}, context {c} (a node of the fit)")
        step, _ = cache.step(replace(base, batch=b, context=c))
        steps[b, c] = step
        return step_study(step, hw).analysis, (step.weight_bytes, -1 if step.positions is None else step.positions)

    try:
        table = fit_tables(analyze_at, nodes, checks)
        first = steps[nodes.get("batch", batches)[0], nodes.get("context", contexts)[0]]
        for (b, c), step in steps.items():
            if step.layout != first.layout.at(batch=b, context=c):
                raise FitFailed(f"the KV cache at batch {b}, context {c} is not the layout scaled")
    except FitFailed as e:
        if note is not None:
            note(f"serve: every point lowered: {e}")
        return {}
    out = {}
    for b, c in domain:
        stage(f"evaluating batch {b}, context {c}")
        analysis, (weights, positions) = table.at({s: v for s, v in (("batch", b), ("context", c)) if s in nodes})
        req = replace(base, batch=b, context=c)
        step = steps.get((b, c)) or replace(first, layout=first.layout.at(batch=b, context=c), request=req,
                                            weight_bytes=weights, positions=None if positions < 0 else positions)
        out[b, c] = (step, analysis)
    return out
